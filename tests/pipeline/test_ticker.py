"""The pipeline's ticker: buffered traces are checked on every tick (``assembler.tick_interval``),
idle sessions on the timescale of ``sessions.ttl`` (a check is a round trip to the analysis thread,
which on every tick was most of an idle sidecar's CPU)."""

from __future__ import annotations

import time

import pytest

from otelsignals.pipeline.service import SESSION_EXPIRY_INTERVAL, session_expiry_interval
from tests.support.sidecar import SidecarProcess


@pytest.mark.parametrize(
    ("ttl", "interval"),
    [
        (1800.0, SESSION_EXPIRY_INTERVAL),  # the default: once a second
        (10.0, SESSION_EXPIRY_INTERVAL),
        (2.0, 0.2),  # a short ttl: a session closes at most a tenth of it late
        (0.5, 0.05),
        (0.0, 0.0),  # closed as soon as idle: on every tick
        (-1.0, 0.0),
    ],
)
def test_idle_sessions_are_looked_for_every_second_or_ten_times_per_ttl(ttl, interval):
    assert session_expiry_interval(ttl) == pytest.approx(interval)


def test_an_idle_sidecar_does_not_wake_the_analysis_thread_on_every_tick(tmp_path):
    # The test sidecar ticks every 20 ms: 100 ticks in these 2 seconds, against 2 or 3 session checks.
    with SidecarProcess(tmp_path) as sidecar:
        jobs = "otelsignals_analysis_seconds_count"
        before = sidecar.metric(jobs, phase="running")
        time.sleep(2.0)
        ran = sidecar.metric(jobs, phase="running") - before
    assert 1 <= ran <= 4, ran
