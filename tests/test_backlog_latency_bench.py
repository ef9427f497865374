"""bench/backlog_latency.py runs end to end: a sidecar per interval, a backlog, every probe answered
and timed, and the table it prints."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("workload", ["mix", "agent"])
def test_the_bench_times_every_probe_for_every_interval(workload: str) -> None:
    arguments = ["--batches", "12", "--rounds", "1", "--intervals", "5ms,1ms", "--workload", workload]
    # A session of its own, so that a bench that hangs goes with its sidecars and sink.
    bench = subprocess.Popen(
        [sys.executable, "bench/backlog_latency.py", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        stdout, stderr = bench.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(bench.pid, signal.SIGKILL)
    assert bench.returncode == 0, stderr[-3000:]
    rows = [line for line in stdout.splitlines() if re.match(r"\| \d+ms \| 1 \|", line)]
    assert [row.split(" | ")[0] for row in rows] == ["| 5ms", "| 1ms"]
    for row in rows:
        cells = row.strip("| ").split(" | ")
        assert len(cells) == 8
        for probe in cells[2:6]:  # p50 / p99 / max (n=answers), each probe answered at least once
            p50, p99, worst = (float(v.replace(",", "")) for v in probe.split(" (")[0].split(" / "))
            assert 0 <= p50 <= p99 <= worst and int(probe.split("n=")[1].rstrip(")")) >= 1
        assert float(cells[6]) > 0 and float(cells[7]) > 0
