"""The pipeline's ticker: buffered traces are checked on every tick (``assembler.tick_interval``),
idle sessions on the timescale of ``sessions.ttl`` (a check is a round trip to the analysis thread,
which on every tick was most of an idle sidecar's CPU); with no trace buffered, the ticker rests a
second (until its next session check), and a trace buffered meanwhile wakes it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from otelsignals.pipeline.service import SESSION_EXPIRY_INTERVAL, session_expiry_interval
from tests.support.clients import export_grpc, make_spans
from tests.support.otlp_sink import OtlpSink
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


def _main_thread_wake_ups(pid: int) -> int:
    """The voluntary context switches of a process's main thread so far."""
    for line in Path(f"/proc/{pid}/task/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches in /proc")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")
def test_an_idle_sidecar_s_event_loop_rests(tmp_path):
    # The test sidecar ticks every 20 ms: 100 wake-ups of the event loop in these 2 seconds, before.
    with SidecarProcess(tmp_path) as sidecar:
        assert sidecar.process is not None
        time.sleep(1.0)
        before = _main_thread_wake_ups(sidecar.process.pid)
        time.sleep(2.0)
        woke = _main_thread_wake_ups(sidecar.process.pid) - before
    assert woke <= 4 * 2.0 / SESSION_EXPIRY_INTERVAL + 4, woke


def test_a_trace_buffered_while_the_ticker_rests_leaves_after_its_decision_wait(tmp_path, sink: OtlpSink):
    # Traces without their root span are released by their wait (decision_wait 300 ms in the test
    # sidecar), each sent after the sidecar idled long enough for the ticker to rest. Unwoken, a
    # release would come at the resting ticker's next look, up to a second after the wait: the
    # three are sent a third of a second apart in that second, so at least two would be late.
    exporter = {"endpoint": sink.grpc_endpoint}
    delays = []
    with SidecarProcess(tmp_path, exporter) as sidecar:
        arrived = 0
        for attempt in range(3):
            time.sleep(SESSION_EXPIRY_INTERVAL + 0.3 + attempt * SESSION_EXPIRY_INTERVAL / 3)
            children = make_spans(1, 3, service=f"attempt-{attempt}")[:-1]  # the root ends last
            sent = time.monotonic()
            assert export_grpc(sidecar.grpc_endpoint, children) is SpanExportResult.SUCCESS
            arrived += len(children)
            sink.wait_for_spans(arrived, timeout=10.0)
            delays.append(time.monotonic() - sent)
    assert all(0.3 <= delay < 0.3 + 0.3 for delay in delays), delays
