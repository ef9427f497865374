"""The analysis thread: jobs in order off the event loop, results back on it, a bounded backlog that
turns into UNAVAILABLE / 503 at the receivers, and nothing accepted lost while the analysis is busy."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client import CollectorRegistry

from otelsignals.config import ConfigError, validate
from otelsignals.config_loading import load_config
from otelsignals.pipeline import analysis_worker
from otelsignals.pipeline.analysis_worker import BEHIND_AFTER, AnalysisWorker, create_analysis_worker
from otelsignals.sidecar import Sidecar
from tests.support.clients import export_grpc, make_spans
from tests.support.loop_thread import start_loop_thread
from tests.support.servers import free_port


async def _started(max_bytes: int = 1000) -> AnalysisWorker:
    worker = AnalysisWorker(max_bytes, CollectorRegistry())
    worker.start()
    return worker


def test_jobs_run_in_order_on_the_worker_and_their_results_on_the_event_loop():
    async def scenario() -> tuple[list[tuple[str, int]], threading.Thread]:
        worker = await _started()
        seen: list[tuple[str, int]] = []
        loop_thread = threading.current_thread()

        def job(n: int):
            seen.append(("job", n))
            assert threading.current_thread() is not loop_thread
            return lambda: seen.append(("delivered", n)) or None

        for n in range(50):
            worker.submit(lambda n=n: job(n), 10)
        assert await worker.drain(5.0)
        worker.stop()
        return seen, loop_thread

    seen, _ = asyncio.run(scenario())
    assert [n for kind, n in seen if kind == "job"] == list(range(50))
    assert [n for kind, n in seen if kind == "delivered"] == list(range(50))


def _switch_intervals_seen(behind_after: float, monkeypatch: pytest.MonkeyPatch) -> tuple[list[float], float]:
    """Three jobs of 2 × BEHIND_AFTER submitted at once (each waits for the ones before): the switch
    interval each ran with, and the one once the worker is idle again."""
    monkeypatch.setattr(analysis_worker, "BEHIND_AFTER", behind_after)
    seen: list[float] = []

    def job() -> None:
        deadline = time.monotonic() + 2 * BEHIND_AFTER
        while time.monotonic() < deadline:  # computes, as the analysis does
            pass
        seen.append(sys.getswitchinterval())

    async def scenario() -> float:
        worker = AnalysisWorker(1000, CollectorRegistry(), backlog_switch_interval=0.0007)
        worker.start()
        for _ in range(3):
            worker.submit(job, 10)
        assert await worker.drain(5.0)
        usual, deadline = sys.getswitchinterval(), time.monotonic() + 5
        while usual == pytest.approx(0.0007) and time.monotonic() < deadline:  # until it is idle
            await asyncio.sleep(0.01)
            usual = sys.getswitchinterval()
        worker.stop()
        return usual

    return seen, asyncio.run(scenario())


def test_the_switch_interval_is_short_while_the_worker_is_behind_and_back_after(monkeypatch):
    # The second and third jobs waited over BEHIND_AFTER for the thread: Python's GIL switch
    # interval is shortened, so the event loop gets the GIL back sooner; with the queue empty the
    # usual one is back.
    usual = sys.getswitchinterval()
    seen, after = _switch_intervals_seen(BEHIND_AFTER, monkeypatch)
    assert seen[1:] == [pytest.approx(0.0007)] * 2
    assert after == usual == sys.getswitchinterval()


def test_the_switch_interval_stays_while_no_job_waits_long(monkeypatch):
    usual = sys.getswitchinterval()
    seen, after = _switch_intervals_seen(10.0, monkeypatch)  # no job waits 10 s
    assert seen == [usual] * 3 and after == usual


@pytest.mark.parametrize(("configured", "expected"), [(None, 0.001), ("2ms", 0.002), ("100ms", 0.1)])
def test_the_configured_backlog_switch_interval_reaches_the_worker(configured: str | None, expected: float):
    environ = {"OTELSIGNALS_ANALYZER__BACKLOG_SWITCH_INTERVAL": configured} if configured else {}
    config = validate(load_config(None, environ=environ))
    assert create_analysis_worker(config.analyzer, CollectorRegistry()).backlog_switch_interval == expected


@pytest.mark.parametrize("refused", ["0s", "101ms", "1s"])
def test_a_switch_interval_python_cannot_use_well_is_refused(refused: str):
    config = load_config(None, environ={"OTELSIGNALS_ANALYZER__BACKLOG_SWITCH_INTERVAL": refused})
    with pytest.raises(ConfigError) as error:
        validate(config)
    assert error.value.key == "analyzer.backlog_switch_interval"


def test_an_idle_worker_keeps_nothing_of_its_last_job():
    # The last job and its callback hold the trace they analysed; an idle worker once kept them.
    class Trace:
        pass

    async def scenario() -> Trace | None:
        worker = await _started()
        trace = Trace()
        gone = weakref.ref(trace)
        worker.submit(lambda trace=trace: lambda trace=trace: None, 10)
        del trace
        assert await worker.drain(5.0)
        await asyncio.sleep(0.05)  # the worker is back to waiting for jobs
        kept = gone()
        worker.stop()
        return kept

    assert asyncio.run(scenario()) is None


def test_a_failing_job_is_logged_and_the_next_ones_still_run(caplog):
    async def scenario() -> list[int]:
        worker = await _started()
        done: list[int] = []

        def broken():
            raise ValueError("a bug")

        worker.submit(broken)
        worker.submit(lambda: done.append(1) or None)
        assert await worker.drain(5.0)
        worker.stop()
        return done

    assert asyncio.run(scenario()) == [1]
    assert "an analysis job failed" in caplog.text


def test_the_backlog_is_bounded_in_bytes_and_freed_once_delivered():
    async def scenario() -> None:
        worker = await _started(max_bytes=1000)
        # Nothing waiting: even a request larger than the bound is taken (else it could never be).
        assert worker.has_room(5000)
        gate = threading.Event()
        worker.submit(lambda: gate.wait(5) and None, 800)
        assert worker.backlog_bytes == 800
        assert worker.has_room(200)
        assert not worker.has_room(201)
        assert not await worker.drain(0.1)  # still busy
        gate.set()
        assert await worker.drain(5.0)
        assert worker.backlog_bytes == 0
        assert worker.has_room(1000)
        worker.stop()

    asyncio.run(scenario())


def test_a_reader_waits_for_the_running_job_not_for_the_backlog():
    async def scenario() -> list[str]:
        worker = await _started()
        order: list[str] = []
        gate = threading.Event()

        def slow_job():
            order.append("job started")
            gate.wait(5)
            order.append("job finished")

        worker.submit(slow_job)
        while not order:
            await asyncio.sleep(0.01)
        reading = asyncio.ensure_future(worker.read(lambda: order.append("read") or "value"))
        await asyncio.sleep(0.1)
        assert not reading.done()  # the state is not read half-changed
        gate.set()
        assert await reading == "value"
        await worker.drain(5.0)
        worker.stop()
        return order

    assert asyncio.run(scenario()) == ["job started", "job finished", "read"]


@pytest.fixture
def sidecar_in_process(tmp_path: Path):
    """The real sidecar (receivers, pipeline, admin) on its own event loop thread."""
    grpc_port, http_port = free_port(), free_port()
    config_path = tmp_path / "otelsignals.yaml"
    config_path.write_text(
        f"""
receiver:
  grpc: {{endpoint: "127.0.0.1:{grpc_port}"}}
  http: {{endpoint: "127.0.0.1:{http_port}"}}
  retry_after: 1s
admin: {{enabled: false}}
assembler: {{decision_wait: 50ms, tick_interval: 20ms}}
analyzer: {{queue_max_bytes: 1MiB}}
evals: {{trace_metrics: false}}
exporter:
  file_path: "{tmp_path / "out.jsonl"}"
  batch: {{timeout: 20ms}}
store: {{directory: "{tmp_path / "data"}"}}
"""
    )
    config = load_config(config_path, environ={})
    loop, thread = start_loop_thread("sidecar")
    sidecar = Sidecar(config)
    asyncio.run_coroutine_threadsafe(sidecar.start(), loop).result(30)
    yield sidecar, loop, f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{http_port}"
    asyncio.run_coroutine_threadsafe(sidecar.stop(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def _post_traces(url: str, body: bytes) -> tuple[int, str | None]:
    request = urllib.request.Request(
        f"{url}/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, None
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Retry-After")


def test_receivers_answer_while_the_analysis_is_busy_and_refuse_past_its_backlog(sidecar_in_process):
    sidecar, loop, grpc_endpoint, http_url = sidecar_in_process
    gate = threading.Event()
    # A long analysis stands in front of everything: the job holds the analysis thread, and
    # accounts for a backlog at the bound.
    loop.call_soon_threadsafe(sidecar.pipeline.analysis.submit, lambda: gate.wait(30) and None, 1024**2)
    try:
        spans = make_spans(1, 1)
        # Answered at once, and refused because the analysis is behind: the client retries later.
        started = time.monotonic()
        status, retry_after = _post_traces(http_url, encode_spans(spans).SerializeToString())
        assert status == 503 and retry_after == "1"
        assert time.monotonic() - started < 5  # generous: the point is it does not wait for the job
    finally:
        gate.set()
    # Once the analysis catches up, the same request is taken and forwarded.
    deadline = time.monotonic() + 10
    while not sidecar.pipeline.analysis.idle and time.monotonic() < deadline:
        time.sleep(0.02)
    assert export_grpc(grpc_endpoint, spans) is SpanExportResult.SUCCESS
    out = Path(sidecar.config.exporter.file_path)
    deadline = time.monotonic() + 10
    while (not out.exists() or b"traceId" not in out.read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert spans[0].context.trace_id.to_bytes(16, "big").hex() in out.read_text()


def test_a_failing_job_falls_back_and_jobs_left_at_shutdown_are_handed_back():
    async def scenario() -> tuple[list[str], list[str]]:
        worker = await _started()
        delivered: list[str] = []

        def broken():
            raise ValueError("a bug")

        worker.submit(broken, 10, fallback=lambda: delivered.append("forwarded as it came"))
        assert await worker.drain(5.0)
        gate = threading.Event()
        worker.submit(lambda: gate.wait(5) and None, 10)
        worker.submit(lambda: delivered.append("never analysed") and None, 20, fallback=lambda: None)
        await asyncio.sleep(0.05)
        left = worker.abandon()  # shutdown's patience is over: the job not started comes back
        gate.set()
        assert await worker.drain(5.0) and worker.backlog_bytes == 0
        worker.stop()
        return delivered, [type(f).__name__ for f in left]

    delivered, left = asyncio.run(scenario())
    assert delivered == ["forwarded as it came"]
    assert left == ["function"]


def test_each_job_s_time_waiting_running_and_in_all_is_measured():
    registry = CollectorRegistry()

    async def scenario() -> None:
        worker = AnalysisWorker(1000, registry)
        worker.start()
        worker.submit(lambda: time.sleep(0.03) or None, 10)  # the next two wait for it
        worker.submit(lambda: None, 10)
        worker.submit(lambda: None, 10)
        assert await worker.drain(5.0)
        worker.stop()

    asyncio.run(scenario())

    def count(phase: str, at_most: float | None = None) -> float:
        name = "otelsignals_analysis_seconds_" + ("count" if at_most is None else "bucket")
        labels = {"phase": phase} if at_most is None else {"phase": phase, "le": str(at_most)}
        value = registry.get_sample_value(name, labels)
        assert value is not None
        return value

    assert [count(phase) for phase in ("queued", "running", "total")] == [3, 3, 3]
    assert count("running", 0.025) == 2  # the sleeping job ran longer than 25 ms, the others did not
    assert count("queued", 0.025) == 1  # and the two behind it waited that long
    assert count("total", 0.025) == 0
