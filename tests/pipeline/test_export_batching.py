"""When a partial batch leaves (exporter.batch.timeout): at once after a pause, and at most one
partial batch per timeout while spans keep coming."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otelsignals.config import BatchConfig, Duration, ExporterConfig
from otelsignals.otlp.wire import SpanRecord, split_request
from otelsignals.pipeline.exporter import Batch, Exporter
from otelsignals.pipeline.senders import make_sender
from otelsignals.telemetry import Telemetry
from tests.support.clients import encode_spans, make_spans

TIMEOUT = 0.4  # seconds: long beside an event loop's turn, so that the bounds below cannot blur


def records(traces: int) -> list[SpanRecord]:
    request = ExportTraceServiceRequest.FromString(encode_spans(make_spans(traces, 2)).SerializeToString())
    return split_request(request).records


SPANS_PER_TRACE = len(records(1))


async def batches_left(tmp_path: Path, arrivals: list[float]) -> list[tuple[float, int]]:
    """(seconds from the start when it was made, spans) of each batch, for one trace added at each
    of ``arrivals`` (seconds from the start)."""
    config = ExporterConfig(
        endpoint="", file_path=str(tmp_path / "out.jsonl"), batch=BatchConfig(timeout=Duration(TIMEOUT))
    )
    started = time.monotonic()
    left: list[tuple[float, int]] = []

    def done(batch: Batch) -> None:
        left.append((batch.queued_at - started, batch.span_count))  # when the batch was made

    exporter = Exporter(config, make_sender(config), Telemetry(), on_done=done)
    exporter.start()
    for at, trace in zip(arrivals, [records(1) for _ in arrivals], strict=True):
        await asyncio.sleep(max(0.0, at - (time.monotonic() - started)))
        exporter.add_spans(trace, sum(len(record.data) for record in trace))
    async with asyncio.timeout(10):
        while sum(spans for _, spans in left) < SPANS_PER_TRACE * len(arrivals):
            await asyncio.sleep(0.005)
    await exporter.stop(5.0)
    return left


async def test_a_trace_after_a_pause_leaves_at_once(tmp_path: Path) -> None:
    (only,) = await batches_left(tmp_path, [0.0])
    assert only[0] < TIMEOUT / 2  # not after waiting out the timeout


async def test_spans_that_keep_coming_leave_at_most_one_partial_batch_per_timeout(tmp_path: Path) -> None:
    # The first trace leaves at once; the three that follow within one timeout travel together,
    # one timeout after it (a batch per trace would send four requests where the timeout allows two).
    left = await batches_left(tmp_path, [0.0, 0.05, 0.1, 0.15])
    assert [spans for _, spans in left] == [SPANS_PER_TRACE, 3 * SPANS_PER_TRACE]
    first, second = left[0][0], left[1][0]
    assert first < TIMEOUT / 2
    assert second - first >= TIMEOUT
    assert second < first + TIMEOUT + 1.0


async def test_a_batch_begun_long_after_the_previous_one_does_not_wait(tmp_path: Path) -> None:
    left = await batches_left(tmp_path, [0.0, TIMEOUT + 0.2])
    assert [spans for _, spans in left] == [SPANS_PER_TRACE, SPANS_PER_TRACE]
    assert left[1][0] - (TIMEOUT + 0.2) < TIMEOUT / 2
