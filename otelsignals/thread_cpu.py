"""CPU time by thread: which part of the process spends its CPU.

The process's CPU (``process_cpu_seconds_total``) is shared by the analysis thread, the event loop
(receivers, assembler), the export senders, the reputation and index writers and grpc's own threads.
``otelsignals_thread_cpu_seconds_total{thread}`` splits it: each thread's user + system time, read
from ``/proc/self/task/<id>/stat`` at each scrape (Linux only; absent elsewhere). A Python thread
goes by its name with a trailing number dropped (``analysis``, ``reputation-writer``,
``otlp-grpc``…; the threads of one pool summed), or by its target when it was given no name
(``_poll_wrapper``, grpc.aio's poller, rather than ``Thread-1 (_poll_wrapper)``). A thread Python
did not start (grpc's C core) goes by the kernel's name for it, in brackets (``[event_engine]``).
A thread that ended takes its time with it, so a sum can go down; ``rate()`` reads that as a
counter reset.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

_TASKS = Path("/proc/self/task")
_NUMBERED = re.compile(r"(?:[-_ ]?\d+)+$")  # "asyncio_0", "ThreadPoolExecutor-0_3": one pool, one name
_UNNAMED = re.compile(r"Thread-\d+ \((.+)\)")  # threading's default name: its number, then its target


def _python_name(name: str) -> str:
    unnamed = _UNNAMED.fullmatch(name)
    if unnamed is not None:
        return unnamed.group(1)
    return _NUMBERED.sub("", name) or name


def _ticks_per_second() -> int | None:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):
        return None


_TICKS = _ticks_per_second() if _TASKS.is_dir() else None


def _task_cpu(task: Path) -> tuple[str, float] | None:
    """(kernel name, CPU seconds) of one task; None once it has ended."""
    try:
        stat = (task / "stat").read_text()
    except OSError:
        return None
    # "tid (name) state ppid …": the name may hold spaces and brackets, so split at the last ")".
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return name, (utime + stime) / (_TICKS or 100)


def thread_cpu_seconds() -> dict[str, float] | None:
    """CPU seconds by thread name (module docstring); None where /proc does not have them."""
    if _TICKS is None:
        return None
    python_names = {t.native_id: _python_name(t.name) for t in threading.enumerate()}
    seconds: dict[str, float] = {}
    for task in _TASKS.iterdir():
        found = _task_cpu(task)
        if found is None:
            continue
        kernel_name, cpu = found
        name = python_names.get(int(task.name)) or f"[{_NUMBERED.sub('', kernel_name) or kernel_name}]"
        seconds[name] = seconds.get(name, 0.0) + cpu
    return seconds


class ThreadCpuCollector(Collector):
    """``otelsignals_thread_cpu_seconds_total{thread}`` at each scrape (nothing without /proc)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    def describe(self) -> Iterator[Metric]:
        if _TICKS is not None:
            yield _family()

    def collect(self) -> Iterator[Metric]:
        seconds = thread_cpu_seconds()
        if seconds is None:
            return
        family = _family()
        for name, value in sorted(seconds.items()):
            family.add_metric([name], value)
        yield family


def _family() -> CounterMetricFamily:
    return CounterMetricFamily(
        "otelsignals_thread_cpu_seconds",
        "CPU time (user + system) by thread: Python threads by name, trailing number dropped; "
        "others by their kernel name in brackets. A thread that ends takes its time with it.",
        labels=["thread"],
    )
