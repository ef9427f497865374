"""Analyzer.mark_plain_spans: a request none of whose bytes holds a GenAI key prefix is searched
once, not span by span, and the spans of every other request are still read."""

from __future__ import annotations

from otelsignals.otlp.wire import SpanRecord, split_request
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.telemetry import Telemetry
from tests.support.clients import encode_spans, make_spans


def _records(genai_every: int) -> tuple[list[SpanRecord], bytes]:
    request = encode_spans(make_spans(3, 4, genai_every=genai_every))
    raw = request.SerializeToString()
    return split_request(request, raw=raw).records, raw


def _traces(records: list[SpanRecord]) -> list[ReleasedTrace]:
    by_trace: dict[bytes, list[SpanRecord]] = {}
    for record in records:
        by_trace.setdefault(record.trace_id, []).append(record)
    return [ReleasedTrace(trace_id, spans, "complete", 0) for trace_id, spans in by_trace.items()]


def test_a_request_of_plain_spans_marks_every_span_and_none_is_read() -> None:
    analyzer = Analyzer(Telemetry())
    records, raw = _records(genai_every=0)
    analyzer.mark_plain_spans(records, raw)
    assert records and not any(record.may_carry_genai for record in records)
    assert [analyzer.assemble(trace) for trace in _traces(records)] == [None] * 3


def test_a_request_with_one_genai_span_leaves_every_span_to_be_searched() -> None:
    analyzer = Analyzer(Telemetry())
    records, raw = _records(genai_every=12)  # one chat span among 15
    analyzer.mark_plain_spans(records, raw)
    assert all(record.may_carry_genai for record in records)
    updates = [analyzer.assemble(trace) for trace in _traces(records)]
    assert sum(update is not None for update in updates) == 1


def test_a_marked_span_is_not_searched_again() -> None:
    # The mark is what the analysis goes by: a GenAI span marked plain (as no request could make it)
    # is not read.
    analyzer = Analyzer(Telemetry())
    records, _ = _records(genai_every=12)
    for record in records:
        record.may_carry_genai = False
    assert [analyzer.assemble(trace) for trace in _traces(records)] == [None] * 3
