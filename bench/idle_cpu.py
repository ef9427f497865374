"""What an idle sidecar costs: its CPU per second of wall time with no traffic at all.

    .venv/bin/python bench/idle_cpu.py [--seconds 30]

A sidecar runs beside every agent process, and most of them are idle most of the time: what it
burns doing nothing is paid once per pod. ``otelsignals run`` starts with the embedded defaults
(only ports and the store directory are set, as in bench/agent_workload.py), its start-up settles
for a few seconds, then its CPU time (utime + stime from /proc, every thread) is read over
``--seconds`` of wall time; also by thread, from its own ``otelsignals_thread_cpu_seconds_total``
(which includes the cost of the one scrape that reads it). Markdown to stdout.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.agent_workload import cpu_seconds, log, thread_seconds
from otelsignals.config_loading import load_config
from tests.support.sidecar import SidecarProcess

SETTLE_SECONDS = 5.0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    defaults = load_config(None, environ={})
    with tempfile.TemporaryDirectory(prefix="otelsignals-idle-bench-") as workdir:
        # SidecarProcess sets short test timings: put the embedded defaults back.
        sidecar = SidecarProcess(
            Path(workdir),
            {"batch": {"timeout": f"{defaults.exporter.batch.timeout}s"}},
            assembler={
                "decision_wait": f"{defaults.assembler.decision_wait}s",
                "tick_interval": f"{defaults.assembler.tick_interval}s",
            },
            sessions={"ttl": f"{defaults.sessions.ttl}s"},
        )
        log("starting the sidecar...")
        with sidecar:
            assert sidecar.process is not None
            pid = sidecar.process.pid
            time.sleep(SETTLE_SECONDS)
            threads_before = thread_seconds(sidecar)
            cpu_before, started = cpu_seconds(pid), time.monotonic()
            log(f"idle for {args.seconds:g} s...")
            time.sleep(args.seconds)
            cpu_after, wall = cpu_seconds(pid), time.monotonic() - started
            threads_after = thread_seconds(sidecar)
    print(f"Idle sidecar, embedded defaults: {wall:.1f} s, from {SETTLE_SECONDS:g} s after start.\n")
    print("| | CPU (ms per second of wall time) |")
    print("|---|---|")
    print(f"| the process (/proc) | {(cpu_after - cpu_before) / wall * 1000:.2f} |")
    by_thread = {name: seconds - threads_before.get(name, 0.0) for name, seconds in threads_after.items()}
    for name, seconds in sorted(by_thread.items(), key=lambda item: -item[1]):
        if seconds > 0:
            print(f"| thread `{name}` | {seconds / wall * 1000:.2f} |")


if __name__ == "__main__":
    main()
