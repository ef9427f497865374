"""Long waits asked by the downstream never drop acknowledged data; short ones never disable backoff.

The real sidecar against the real OTLP sink (and, for answers the sink cannot script, such as an
HTTP-date Retry-After or a storm lasting a set time, a small HTTP front that answers for the sink
and then passes requests through). Timings are short: ``max_interval`` 200 ms, ``max_elapsed_time``
1 s, no jitter, so every wait is exactly 200 ms unless the server asks for more (capped at 200 ms).

Rule under test (README "Retry"): with the disk queue on, a batch is retried until delivered, never
dropped by a clock; without it, a batch still refused after ``max_elapsed_time`` is dropped, counted
with reason ``retry_expired``. A server delay is capped at ``max_interval``; a delay of 0 or a past
date leaves the backoff step in force.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from email.utils import formatdate
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from opentelemetry.sdk.trace.export import SpanExportResult

from otelsignals.pipeline.http_client import Backoff, parse_retry_after
from tests.support.clients import expected_span_bytes, export_grpc, make_spans
from tests.support.loop_thread import start_loop_thread
from tests.support.otlp_sink import OtlpSink, Response
from tests.support.sidecar import SidecarProcess

STEP = 0.2
RETRY = {
    "initial_interval": "200ms",
    "max_interval": "200ms",
    "multiplier": 1.5,
    "randomization_factor": 0.0,
    "max_elapsed_time": "1s",
}
PAST_DATE = "Sun, 06 Nov 1994 08:49:37 GMT"


def exporter_config(
    endpoint: str, protocol: str, tmp_path: Path, durable: bool, consumers: int = 1, **retry: Any
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "endpoint": endpoint,
        "protocol": protocol,
        "retry": {**RETRY, **retry},
        "queue": {"num_consumers": consumers},
    }
    if durable:
        config["queue"]["directory"] = str(tmp_path / "queue")
    return config


def dropped(sidecar: SidecarProcess, reason: str | None = None) -> float:
    labels = {"reason": reason} if reason else {}
    return sidecar.metric("otelsignals_dropped_spans_total", **labels)


class StormFront:
    """OTLP/HTTP in front of the sink: for ``seconds`` after :meth:`begin` every request gets
    ``status`` with ``Retry-After: <retry_after>`` (any text, an HTTP-date included); afterwards
    requests are passed to the sink and its answer is returned."""

    def __init__(self, sink: OtlpSink, status: int, retry_after: str, seconds: float) -> None:
        self.sink, self.status, self.retry_after, self.seconds = sink, status, retry_after, seconds
        self.refused = 0
        self.until = float("inf")
        self._lock = threading.Lock()
        self._loop, self._thread = start_loop_thread("storm-front")
        self._runner: web.AppRunner | None = None
        self.port = 0

    def __enter__(self) -> StormFront:
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def begin(self) -> None:
        self.until = time.monotonic() + self.seconds

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_post("/v1/{signal}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if time.monotonic() < self.until:
            with self._lock:
                self.refused += 1
            return web.Response(status=self.status, headers={"Retry-After": self.retry_after})
        # aiohttp has already gunzipped the body: only its type goes on.
        headers = {"Content-Type": request.headers.get("Content-Type", "application/x-protobuf")}
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                self.sink.http_url(request.match_info["signal"]), data=body, headers=headers
            ) as answer,
        ):
            payload = await answer.read()
            return web.Response(status=answer.status, body=payload, content_type=answer.content_type)


# -- the rule itself, without a process ------------------------------------------------------------
def test_parse_retry_after_forms() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("2") == 2.0 and parse_retry_after(" 0.25 ") == 0.25
    assert parse_retry_after("0") == 0.0 and parse_retry_after("-5") == 0.0
    assert parse_retry_after(formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30.0)
    assert parse_retry_after(formatdate(now - 30, usegmt=True), now=now) == 0.0
    assert parse_retry_after(PAST_DATE) == 0.0
    for unreadable in (None, "", "soon", "nan", "inf", "Mon, 99 Foo 2020"):
        assert parse_retry_after(unreadable) is None, unreadable


def test_wait_is_the_longer_of_backoff_and_capped_server_delay() -> None:
    backoff = Backoff(initial_interval=0.2, multiplier=1.5, max_interval=30.0, randomization_factor=0.0)
    assert backoff.wait(0.2, None) == 0.2
    assert backoff.wait(0.2, 0.0) == 0.2  # Retry-After: 0 / a past date keeps the backoff
    assert backoff.wait(4.0, 1.0) == 4.0
    assert backoff.wait(0.2, 5.0) == 5.0  # honoured
    assert backoff.wait(0.2, 3600.0) == 30.0  # capped at max_interval, not given up
    jittered = Backoff(initial_interval=1.0, multiplier=1.5, max_interval=30.0, randomization_factor=0.5)
    random.seed(7)
    waits = [jittered.wait(1.0, 0.0) for _ in range(200)]
    assert min(waits) >= 0.5 and max(waits) <= 1.5


# -- downstream down for longer than max_elapsed_time -----------------------------------------------
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_outage_longer_than_max_elapsed_time_loses_nothing_with_the_disk_queue(
    tmp_path: Path, sink: OtlpSink, protocol: str
) -> None:
    endpoint = sink.grpc_endpoint if protocol == "grpc" else sink.http_endpoint
    spans = make_spans(20, 3)
    down_for = 2.5  # 2.5 × max_elapsed_time
    with SidecarProcess(
        tmp_path, exporter_config(endpoint, protocol, tmp_path, True, consumers=4)
    ) as sidecar:
        sink.set_down(True)
        assert export_grpc(sidecar.grpc_endpoint, spans) is SpanExportResult.SUCCESS
        sidecar.wait_for_metric("otelsignals_exporter_retries_total", 1)
        time.sleep(down_for)
        assert sink.spans() == [] and dropped(sidecar) == 0
        sink.set_down(False)
        sink.wait_for_spans(len(spans), timeout=15)
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", len(spans))
        assert dropped(sidecar) == 0
        requests = sidecar.metric("otelsignals_exporter_sent_requests_total")
        retries = sidecar.metric("otelsignals_exporter_retries_total")
    assert sink.span_bytes() == expected_span_bytes(spans)
    # Paced by the backoff: at most one attempt per 200 ms per batch (plus reconnect slack).
    assert retries <= requests * ((down_for + 3) / STEP + 2), (retries, requests)


def test_outage_longer_than_max_elapsed_time_without_disk_queue_drops_as_documented(
    tmp_path: Path, sink: OtlpSink
) -> None:
    spans, later = make_spans(5, 2), make_spans(3, 2, service="after-the-outage")
    with SidecarProcess(tmp_path, exporter_config(sink.grpc_endpoint, "grpc", tmp_path, False)) as sidecar:
        sink.set_down(True)
        started = time.monotonic()
        assert export_grpc(sidecar.grpc_endpoint, spans) is SpanExportResult.SUCCESS
        sidecar.wait_for_metric("otelsignals_dropped_spans_total", len(spans), reason="retry_expired")
        assert time.monotonic() - started >= 1.0, "not before max_elapsed_time"
        assert sidecar.metric("otelsignals_exporter_failed_requests_total", reason="retry_expired") >= 1
        sink.set_down(False)
        assert export_grpc(sidecar.grpc_endpoint, later) is SpanExportResult.SUCCESS
        sink.wait_for_spans(len(later), timeout=10)
        assert dropped(sidecar) == len(spans)
    assert sink.span_bytes() == expected_span_bytes(later)


# -- server-requested delays -------------------------------------------------------------------------
@pytest.mark.parametrize("durable", [False, True], ids=["memory", "disk"])
@pytest.mark.parametrize(
    ("protocol", "answer", "reason"),
    [
        ("http/protobuf", Response(http_status=429, retry_after_seconds=400), "http_429"),
        ("http/protobuf", Response(http_status=503, retry_after_seconds=400), "http_503"),
        ("grpc", Response.unavailable(retry_after=3600), "unavailable"),
        ("grpc", Response.throttled(retry_after=3600), "resource_exhausted"),
    ],
    ids=["429-400s", "503-400s", "unavailable-3600s", "exhausted-3600s"],
)
def test_absurd_server_delay_is_capped_not_given_up(
    tmp_path: Path, sink: OtlpSink, durable: bool, protocol: str, answer: Response, reason: str
) -> None:
    endpoint = sink.grpc_endpoint if protocol == "grpc" else sink.http_endpoint
    sink.script(answer, answer, answer)
    spans = make_spans(4, 2)
    with SidecarProcess(tmp_path, exporter_config(endpoint, protocol, tmp_path, durable)) as sidecar:
        started = time.monotonic()
        assert export_grpc(sidecar.grpc_endpoint, spans) is SpanExportResult.SUCCESS
        sink.wait_for_spans(len(spans), timeout=10)
        waited = time.monotonic() - started
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", len(spans))
        assert sidecar.metric("otelsignals_exporter_retries_total", reason=reason) == 3
        assert dropped(sidecar) == 0
    assert 3 * STEP <= waited < 5, waited  # three waits of max_interval, not 400 s, not dropped
    assert sink.span_bytes() == expected_span_bytes(spans)


@pytest.mark.parametrize(
    ("protocol", "answer"),
    [
        ("http/protobuf", Response(http_status=503, retry_after_seconds=0.8)),
        ("grpc", Response.unavailable(retry_after=0.8)),
    ],
    ids=["503-short", "unavailable-short"],
)
def test_short_server_delay_is_honoured(
    tmp_path: Path, sink: OtlpSink, protocol: str, answer: Response
) -> None:
    endpoint = sink.grpc_endpoint if protocol == "grpc" else sink.http_endpoint
    sink.script(answer)
    spans = make_spans(2, 1)
    config = exporter_config(endpoint, protocol, tmp_path, False, max_interval="2s")
    with SidecarProcess(tmp_path, config) as sidecar:
        started = time.monotonic()
        assert export_grpc(sidecar.grpc_endpoint, spans) is SpanExportResult.SUCCESS
        sink.wait_for_spans(len(spans))
        waited = time.monotonic() - started
        assert sidecar.metric("otelsignals_exporter_retries_total") == 1
    assert 0.8 <= waited < 3, "the backoff step is 200 ms: only the server's delay makes it wait 0.8 s"


@pytest.mark.parametrize(
    ("protocol", "answer"),
    [
        ("http/protobuf", Response(http_status=503, retry_after_seconds=0)),
        ("http/protobuf", Response(http_status=429, retry_after_seconds=0)),
        ("grpc", Response.unavailable(retry_after=0)),
    ],
    ids=["503-0", "429-0", "unavailable-0"],
)
def test_zero_server_delay_keeps_the_backoff(
    tmp_path: Path, sink: OtlpSink, protocol: str, answer: Response
) -> None:
    endpoint = sink.grpc_endpoint if protocol == "grpc" else sink.http_endpoint
    refusals = 6
    sink.script(*[answer] * refusals)
    spans = make_spans(3, 1)
    with SidecarProcess(tmp_path, exporter_config(endpoint, protocol, tmp_path, True)) as sidecar:
        started = time.monotonic()
        assert export_grpc(sidecar.grpc_endpoint, spans) is SpanExportResult.SUCCESS
        sink.wait_for_spans(len(spans), timeout=10)
        waited = time.monotonic() - started
        assert sidecar.metric("otelsignals_exporter_retries_total") == refusals
        assert dropped(sidecar) == 0
    assert waited >= refusals * STEP, f"{refusals} retries in {waited:.2f}s: the backoff was skipped"


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "disk"])
@pytest.mark.parametrize(
    ("status", "retry_after"), [(429, "0"), (503, PAST_DATE), (429, "400")], ids=["0", "past-date", "400s"]
)
def test_storm_longer_than_max_elapsed_time(
    tmp_path: Path, sink: OtlpSink, durable: bool, status: int, retry_after: str
) -> None:
    storm = 1.6  # > max_elapsed_time (1 s)
    spans = make_spans(4, 2)
    with StormFront(sink, status, retry_after, storm) as front:
        config = exporter_config(front.endpoint, "http/protobuf", tmp_path, durable)
        with SidecarProcess(tmp_path, config) as sidecar:
            front.begin()
            assert export_grpc(sidecar.grpc_endpoint, spans) is SpanExportResult.SUCCESS
            if durable:  # retried through the storm, delivered after it
                sink.wait_for_spans(len(spans), timeout=10)
                sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", len(spans))
                assert dropped(sidecar) == 0
            else:  # the documented memory-queue rule: dropped once max_elapsed_time has passed
                sidecar.wait_for_metric("otelsignals_dropped_spans_total", len(spans), reason="retry_expired")
                assert dropped(sidecar) == len(spans)
            retries = sidecar.metric("otelsignals_exporter_retries_total")
        # One consumer, 200 ms between attempts: about storm / 200 ms refusals, not hundreds.
        assert front.refused <= storm / STEP + 2, front.refused
        assert retries <= storm / STEP + 2
    if durable:
        assert sink.span_bytes() == expected_span_bytes(spans)
    else:
        assert sink.spans() == []


# -- permanent refusals --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("protocol", "reason"), [("grpc", "invalid_argument"), ("http/protobuf", "http_400")]
)
def test_400_is_not_retried_counted_and_leaves_the_disk_queue(
    tmp_path: Path, sink: OtlpSink, protocol: str, reason: str
) -> None:
    endpoint = sink.grpc_endpoint if protocol == "grpc" else sink.http_endpoint
    sink.script(Response.invalid("no"))
    spans = make_spans(3, 1)
    config = exporter_config(endpoint, protocol, tmp_path, True)
    with SidecarProcess(tmp_path, config) as sidecar:
        assert export_grpc(sidecar.grpc_endpoint, spans) is SpanExportResult.SUCCESS
        sidecar.wait_for_metric("otelsignals_dropped_spans_total", len(spans), reason=reason)
        assert sidecar.metric("otelsignals_exporter_retries_total") == 0
        assert sidecar.metric("otelsignals_exporter_failed_requests_total", reason=reason) == 1
        sidecar.kill()
    with SidecarProcess(tmp_path, config) as again:  # nothing is replayed: the refusal was final
        time.sleep(0.5)
        assert again.metric("otelsignals_exporter_sent_spans_total") == 0
    assert sink.attempts == 1 and sink.spans() == []
