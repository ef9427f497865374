"""A request of many spans is taken in parts, the event loop answering others in between
(Pipeline.ingest_traces): one valid request of 400k small spans held /healthz for 3.3 s."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otelsignals.config_loading import load_config
from otelsignals.otlp.wire import SpanRecord, split_request, split_request_parts
from otelsignals.pipeline import service
from otelsignals.pipeline.service import Pipeline
from tests.support.clients import encode_spans, make_spans


def _request(traces: int, spans_per_trace: int = 2) -> tuple[ExportTraceServiceRequest, bytes]:
    request = encode_spans(make_spans(traces, spans_per_trace))
    raw = request.SerializeToString()
    return ExportTraceServiceRequest.FromString(raw), raw


@pytest.mark.parametrize("part_spans", [1, 3, 7, 1000])
@pytest.mark.parametrize("with_raw", [True, False])
def test_the_parts_of_a_request_are_its_split_in_order(part_spans: int, with_raw: bool) -> None:
    request, raw = _request(5, 3)
    request.resource_spans[0].scope_spans[0].spans[4].span_id = bytes(8)  # one invalid span
    whole = split_request(request, 7, raw if with_raw else None)
    parts = list(split_request_parts(request, 7, raw if with_raw else None, part_spans))
    assert all(len(part.records) + part.invalid_spans <= part_spans for part in parts)
    total = len(whole.records) + whole.invalid_spans
    assert len(parts) == -(-total // part_spans)
    records = [record for part in parts for record in part.records]
    assert [(r.span_id, r.data, r.ingest_seq) for r in records] == [
        (r.span_id, r.data, r.ingest_seq) for r in whole.records
    ]
    assert sum(part.invalid_spans for part in parts) == whole.invalid_spans == 1
    if with_raw:
        assert [start for part in parts for start in part.starts or ()] == whole.starts
    else:
        assert all(part.starts is None for part in parts) and whole.starts is None


def test_a_request_without_spans_is_one_empty_part() -> None:
    (part,) = split_request_parts(ExportTraceServiceRequest(), part_spans=10)
    assert part.records == [] and part.invalid_spans == 0


def spied_pipeline(tmp_path: Path) -> tuple[Pipeline, list[SpanRecord]]:
    """A pipeline of the embedded defaults whose assembler notes every span record it takes."""
    config = load_config(None, environ={})
    config.store.directory = str(tmp_path)
    pipeline = Pipeline(config)
    taken: list[SpanRecord] = []
    add = pipeline.assembler.add

    def spied(records: list[SpanRecord]) -> None:
        taken.extend(records)
        add(records)

    pipeline.assembler.add = spied  # type: ignore[method-assign]
    return pipeline, taken


def test_other_work_runs_between_the_parts_of_a_large_request(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(service, "INGEST_PART_SPANS", 100)
    pipeline, taken = spied_pipeline(tmp_path)
    request, raw = _request(500)  # 1,500 spans: 15 parts

    async def ingest() -> tuple[int, int]:
        turns = 0
        done = False

        async def other_client() -> None:
            nonlocal turns
            while not done:
                turns += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(other_client())
        await asyncio.sleep(0)
        outcome = await pipeline.ingest_traces(request, raw)
        done = True
        await other
        return outcome.accepted_spans, turns

    accepted, turns = asyncio.run(ingest())
    assert accepted == len(taken) == 1500
    # Split in 15 parts and buffered in 15: the other client ran between each (was: not once).
    assert turns >= 28
    assert [r.span_id for r in taken] == [r.span_id for r in split_request(request, 0, raw).records]
    pipeline.store.close()


def test_a_request_cancelled_while_it_is_buffered_is_buffered_whole(tmp_path: Path, monkeypatch) -> None:
    """The call is cancelled (its client went away, the receivers stop) after some parts were
    buffered: the rest are buffered too, none is left half in (the disk queue counts them all)."""
    monkeypatch.setattr(service, "INGEST_PART_SPANS", 100)
    pipeline, taken = spied_pipeline(tmp_path)
    request, raw = _request(500)
    buffered_parts = 0
    add = pipeline.assembler.add

    def counted(records: list[SpanRecord]) -> None:
        nonlocal buffered_parts
        buffered_parts += 1
        add(records)

    pipeline.assembler.add = counted  # type: ignore[method-assign]

    async def ingest() -> None:
        task = asyncio.create_task(pipeline.ingest_traces(request, raw))
        while buffered_parts < 3:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(ingest())
    assert buffered_parts == 15 and len(taken) == 1500
    pipeline.store.close()
