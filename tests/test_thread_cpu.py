"""otelsignals_thread_cpu_seconds_total: each thread's CPU time, read from /proc at each scrape."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from otelsignals import thread_cpu
from otelsignals.thread_cpu import ThreadCpuCollector, thread_cpu_seconds

pytestmark = pytest.mark.skipif(thread_cpu_seconds() is None, reason="no /proc/self/task here")


def _spin_then_wait(seconds: float, release: threading.Event, spun: threading.Event) -> None:
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        pass
    spun.set()
    release.wait()


def test_a_busy_thread_is_counted_under_its_name_and_an_idle_one_is_not() -> None:
    registry = CollectorRegistry(auto_describe=True)
    ThreadCpuCollector(registry)
    release, spun = threading.Event(), threading.Event()
    idle = threading.Thread(target=release.wait, name="idle-worker_7", daemon=True)
    busy = threading.Thread(target=_spin_then_wait, args=(0.3, release, spun), name="spinner_0", daemon=True)
    idle.start()
    busy.start()
    try:
        assert spun.wait(30)

        def sample(name: str) -> float | None:
            return registry.get_sample_value("otelsignals_thread_cpu_seconds_total", {"thread": name})

        spinner = sample("spinner")  # the trailing number dropped
        assert spinner is not None and 0.25 <= spinner < 5
        assert sample("idle-worker") is not None and sample("idle-worker") < 0.05  # type: ignore[operator]
        assert sample("MainThread") is not None
    finally:
        release.set()
    busy.join()
    assert sample("spinner") is None  # an ended thread takes its time with it


def test_a_pool_is_one_series_and_names_read_as_the_kernel_has_them() -> None:
    release = threading.Event()
    pool = [
        threading.Thread(target=release.wait, name=f"ThreadPoolExecutor-0_{n}", daemon=True) for n in range(3)
    ]
    for thread in pool:
        thread.start()
    unnamed = threading.Thread(target=release.wait, daemon=True)  # "Thread-N (wait)": N varies
    unnamed.start()
    try:
        seconds = thread_cpu_seconds()
        assert seconds is not None and "ThreadPoolExecutor" in seconds and "wait" in seconds
        assert not any(name.startswith(("ThreadPoolExecutor-", "Thread-")) for name in seconds)
    finally:
        release.set()


def test_absent_without_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(thread_cpu, "_TICKS", None)
    registry = CollectorRegistry(auto_describe=True)
    ThreadCpuCollector(registry)
    assert thread_cpu_seconds() is None
    assert b"otelsignals_thread_cpu_seconds" not in generate_latest(registry)
