"""Enrichment appends to a span's bytes instead of parsing and re-serializing it: what a parser
reads back is the span the full rewrite gives, on every instrumentation fixture and on the cases
the shortcut must hand over to the rewrite (a span already enriched, a span mentioning the keys)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otelsignals.analysis import Analysis
from otelsignals.config import SignalsConfig
from otelsignals.config_loading import load_config
from otelsignals.model import SignalInstance
from otelsignals.offline import read_requests, traces_in_time_order
from otelsignals.otlp.wire import ScopeContext, SpanRecord, span_head
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.pipeline.enricher import FLAG, MARKER_ATTRIBUTE, Enricher
from otelsignals.scoring import Score
from otelsignals.signals import taxonomy as tx
from otelsignals.telemetry import Telemetry

FIXTURES = Path(__file__).parents[1] / "fixtures"
TRACE_ID = bytes(range(1, 17))


class RewritingEnricher(Enricher):
    """The enricher with its shortcut turned off: every span is parsed and serialized again."""

    def _appended(self, *args: object) -> bytes | None:
        return None


def _enriched_both_ways(trace: ReleasedTrace, analysis: Analysis, config: SignalsConfig) -> list[tuple]:
    appended, rewritten = copy.deepcopy(trace), copy.deepcopy(trace)
    changed = Enricher(config).enrich(appended, analysis)
    assert RewritingEnricher(config).enrich(rewritten, analysis) == changed
    assert appended.size == sum(len(r.data) for r in appended.spans)
    return [(a.data, r.data) for a, r in zip(appended.spans, rewritten.spans, strict=True)]


def test_every_fixture_span_reads_back_as_the_full_rewrite_gives_it() -> None:
    config = load_config(None, environ={})
    analyzer = Analyzer(Telemetry(), config.sessions, config.signals, config.evals, config.analyzer)
    paths = [p for p in sorted(FIXTURES.rglob("*.binpb")) if not p.name.endswith(".logs.binpb")]
    appended_spans = 0
    for trace in traces_in_time_order(request for path in paths for request in read_requests(path)):
        analysis = analyzer.process(trace)
        if analysis is None:
            continue
        # Flagged or not, with and without renaming: every branch of the name rewrite.
        for flagged in (False, True):
            forced = dataclasses.replace(analysis, score=dataclasses.replace(analysis.score, flagged=flagged))
            for flag_span_name in (True, False):
                signals = dataclasses.replace(config.signals, flag_span_name=flag_span_name)
                for appended, rewritten in _enriched_both_ways(trace, forced, signals):
                    assert Span.FromString(appended) == Span.FromString(rewritten)
                    appended_spans += appended != rewritten  # the bytes differ only when appended to
    assert appended_spans > 100


def _span(name: str = "chat gpt-4o", **fields: object) -> bytes:
    span = Span(trace_id=TRACE_ID, span_id=b"\x01" * 8, name=name, **fields)  # type: ignore[arg-type]
    return span.SerializeToString()


def _analysis(flagged: bool = True) -> Analysis:
    score = Score("bad", 0.2, 0.5, flagged, {tx.MISALIGNMENT: 1}, {tx.CORRECTION: 1}, 2, 4, False)
    signal = SignalInstance(tx.CORRECTION, 2, 0.9, "no, I meant", {"cue": "no, I meant"})
    return Analysis("conv-1", TRACE_ID, b"\x01" * 8, "agent", score, [signal])


def _trace(data: bytes) -> ReleasedTrace:
    record = SpanRecord(TRACE_ID, b"\x01" * 8, b"", data, ScopeContext(None, "", None, ""), 0)
    return ReleasedTrace(TRACE_ID, [record], "complete", len(data))


@pytest.mark.parametrize(
    "data",
    [
        _span(start_time_unix_nano=5, end_time_unix_nano=9),
        _span(start_time_unix_nano=5),  # no end time: the events take the start
        _span(),
        _span(name="chat gpt-4o" + FLAG, end_time_unix_nano=9),  # already flagged: named once
        _span(end_time_unix_nano=9, attributes=[{"key": "note", "value": {"string_value": "signals.x"}}]),
        # A key written is there already: handed to the full rewrite, which keeps the span's value.
        _span(end_time_unix_nano=9, attributes=[{"key": "signals.agent.id", "value": {"string_value": "a"}}]),
        _span(
            end_time_unix_nano=9, attributes=[{"key": f"k{n}", "value": {"int_value": n}} for n in range(80)]
        ),
    ],
    ids=[
        "times",
        "start only",
        "no times",
        "already flagged",
        "mentions the keys",
        "has a key",
        "many fields",
    ],
)
def test_hand_made_spans_read_back_as_the_full_rewrite_gives_them(data: bytes) -> None:
    ((appended, rewritten),) = _enriched_both_ways(_trace(data), _analysis(), SignalsConfig())
    span = Span.FromString(appended)
    assert span == Span.FromString(rewritten)
    assert span.name.endswith(FLAG) and not span.name.endswith(FLAG + FLAG)
    assert [e.name for e in span.events] == [f"signal.{tx.CORRECTION}"]
    assert span.events[0].time_unix_nano == (span.end_time_unix_nano or span.start_time_unix_nano)
    assert any(kv.key == MARKER_ATTRIBUTE for kv in span.attributes)


def test_a_span_already_enriched_is_left_as_it_came() -> None:
    trace = _trace(_span(end_time_unix_nano=9))
    assert Enricher(SignalsConfig()).enrich(trace, _analysis()) == 1
    once = trace.spans[0].data
    assert Enricher(SignalsConfig()).enrich(trace, _analysis()) == 0
    assert trace.spans[0].data == once


def test_span_head_reads_the_name_times_and_keys_without_parsing() -> None:
    attributes = [{"key": "a", "value": {"string_value": "x" * 300}}, {"key": "é", "value": {"int_value": 1}}]
    data = _span(start_time_unix_nano=2**63 + 5, end_time_unix_nano=7, attributes=attributes)
    head = span_head(data, 64)
    assert head is not None
    assert (head.name, head.start_time_unix_nano, head.end_time_unix_nano) == ("chat gpt-4o", 2**63 + 5, 7)
    assert head.attribute_keys == [b"a", "é".encode()]
    # A later occurrence of a singular field wins, as in a parse.
    renamed = span_head(data + Span(name="again", end_time_unix_nano=8).SerializeToString(), 64)
    assert renamed is not None and (renamed.name, renamed.end_time_unix_nano) == ("again", 8)
    assert span_head(data, 4) is None  # 7 top-level fields
    with pytest.raises(IndexError):
        span_head(data[:-3], 64)


def _length_delimited(number: int, payload: bytes) -> bytes:
    assert len(payload) < 0x80
    return bytes((number << 3 | 2, len(payload))) + payload


@pytest.mark.parametrize(
    "pair",
    [
        # The key written twice: a parse takes the last one ("signals.quality"), a reader of the first
        # would miss that the span was enriched already.
        _length_delimited(1, b"x") + _length_delimited(1, b"signals.quality") + _length_delimited(2, b""),
        _length_delimited(1, b"x") + _length_delimited(2, b"") + _length_delimited(1, b"signals.quality"),
        _length_delimited(1, b"x") + _length_delimited(2, b"") + b"\x98\x01\x07",  # a field after the value
    ],
    ids=["key twice", "key after the value", "unknown field after the value"],
)
def test_span_head_leaves_an_attribute_it_cannot_read_as_a_parse_does_to_the_parse(pair: bytes) -> None:
    data = _span() + _length_delimited(9, pair)
    assert span_head(data, 64) is None  # the enricher then rewrites the span from its parse
    only_key = _span() + _length_delimited(9, _length_delimited(1, b"k"))  # a value may be absent
    head = span_head(only_key, 64)
    assert head is not None and head.attribute_keys[-1] == b"k"
