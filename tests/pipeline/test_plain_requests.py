"""Analyzer.mark_spans: the spans cut from a request's bytes are searched for a GenAI key prefix in
those bytes, a few searches per request rather than per span; spans serialized again (and those of
OTLP/JSON requests) one by one. Either way the plain traces are known to be plain, and the GenAI
spans are still read."""

from __future__ import annotations

import asyncio
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otelsignals.otlp.wire import SpanRecord, SplitRequest, split_request
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.telemetry import Telemetry
from tests.support.clients import encode_spans, make_spans


def _split(genai_every: int) -> tuple[SplitRequest, bytes]:
    request = encode_spans(make_spans(3, 4, genai_every=genai_every))
    raw = request.SerializeToString()
    return split_request(request, raw=raw), raw


def _traces(records: list[SpanRecord]) -> list[ReleasedTrace]:
    by_trace: dict[bytes, list[SpanRecord]] = {}
    for record in records:
        by_trace.setdefault(record.trace_id, []).append(record)
    return [ReleasedTrace(trace_id, spans, "complete", 0) for trace_id, spans in by_trace.items()]


def test_a_request_of_plain_spans_marks_every_span() -> None:
    split, raw = _split(genai_every=0)
    assert split.starts is not None
    Analyzer(Telemetry()).mark_spans(split, raw)
    assert split.records and all(record.may_carry_genai is False for record in split.records)


def test_a_request_with_one_genai_span_marks_each_span_by_its_own_bytes() -> None:
    analyzer = Analyzer(Telemetry())
    split, raw = _split(genai_every=12)  # one chat span among 15
    analyzer.mark_spans(split, raw)
    marks = [record.may_carry_genai for record in split.records]
    assert marks.count(True) == 1 and marks.count(False) == 14
    (genai,) = [record for record in split.records if record.may_carry_genai]
    assert b"gen_ai." in genai.data
    updates = [analyzer.assemble(trace) for trace in _traces(split.records)]
    assert [update is not None for update in updates].count(True) == 1


def test_marks_stay_with_their_spans_around_refused_spans_and_keys_outside_spans() -> None:
    # Keys in the resource's and the scope's bytes are in no span; a span with an invalid id holds a
    # GenAI key but is refused, so it has no record: the records' starts skip it.
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    attribute = resource_spans.resource.attributes.add()
    attribute.key, attribute.value.string_value = "service.name", "openai.proxy"
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "llm.instrumentation"
    spans = [
        (b"\x01" * 8, "http.route"),
        (b"\x00" * 8, "gen_ai.system"),  # an invalid span id: refused
        (b"\x02" * 8, "gen_ai.system"),
        (b"\x03" * 8, "db.system"),
    ]
    for n, (span_id, key) in enumerate(spans):
        span = scope_spans.spans.add(trace_id=bytes([n + 1]) * 16, span_id=span_id, name="work")
        attribute = span.attributes.add()
        attribute.key, attribute.value.string_value = key, "x"
    raw = request.SerializeToString()
    split = split_request(request, raw=raw)
    assert split.invalid_spans == 1 and split.starts is not None and len(split.starts) == 3
    for start, record in zip(split.starts, split.records, strict=True):
        assert raw[start : start + len(record.data)] == record.data
    analyzer = Analyzer(Telemetry())
    analyzer.mark_spans(split, raw)
    marks = [record.may_carry_genai for record in split.records]
    assert marks == [analyzer.decoder.might_carry_genai(record.data) for record in split.records]
    assert marks == [False, True, False]


def test_spans_serialized_again_are_searched_in_their_own_bytes() -> None:
    # A span serialized from the parse may differ from the request in its framing (a length
    # written in more bytes than needed): what the request lacks, it might hold. Here the
    # request's bytes hold no GenAI key at all, yet the chat span serialized again is marked.
    analyzer = Analyzer(Telemetry())
    split, _ = _split(genai_every=12)
    split.starts = None
    plain_request = _split(genai_every=0)[1]
    analyzer.mark_spans(split, plain_request)
    marks = [record.may_carry_genai for record in split.records]
    assert marks.count(True) == 1 and marks.count(False) == 14


def test_an_unmarked_span_is_searched_by_the_analysis() -> None:
    analyzer = Analyzer(Telemetry())
    split, _ = _split(genai_every=12)
    assert all(record.may_carry_genai is None for record in split.records)
    updates = [analyzer.assemble(trace) for trace in _traces(split.records)]
    assert [update is not None for update in updates].count(True) == 1


def test_a_marked_span_is_not_searched_again() -> None:
    # The mark is what the analysis goes by: a GenAI span marked plain (as no request could make it)
    # is not read.
    analyzer = Analyzer(Telemetry())
    split, _ = _split(genai_every=12)
    for record in split.records:
        record.may_carry_genai = False
    assert [analyzer.assemble(trace) for trace in _traces(split.records)] == [None] * 3


def test_the_pipeline_marks_what_it_takes_in(tmp_path: Path) -> None:
    from tests.pipeline.test_ingest_in_parts import spied_pipeline

    pipeline, taken = spied_pipeline(tmp_path)

    async def ingest() -> None:  # plain traces go on to the exporter at once, on the event loop
        for genai_every, expected in ((0, [False] * 15), (12, [True] + [False] * 14)):
            request = encode_spans(make_spans(3, 4, genai_every=genai_every))
            taken.clear()
            await pipeline.ingest_traces(request, raw=request.SerializeToString())
            assert sorted((record.may_carry_genai for record in taken), reverse=True) == expected
            # Without the request's bytes (OTLP/JSON) each span is searched in its own.
            taken.clear()
            await pipeline.ingest_traces(encode_spans(make_spans(3, 4, genai_every=genai_every)))
            assert sorted((record.may_carry_genai for record in taken), reverse=True) == expected

    asyncio.run(ingest())
    pipeline.store.close()
