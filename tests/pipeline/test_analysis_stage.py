"""The analysis stage hands each released trace on by itself: evicted ones straight to the next
stage, analysed ones through the analysis thread to the next stage, or, when the sampler drops
them, to the release of their disk-queue records; a failing analysis still forwards the spans."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from opentelemetry.proto.trace.v1.trace_pb2 import Span
from prometheus_client import CollectorRegistry

from otelsignals.config import EvalsConfig, SamplerConfig, SignalsConfig
from otelsignals.otlp.wire import ScopeContext, SpanRecord
from otelsignals.pipeline.analysis_stage import AnalysisStage
from otelsignals.pipeline.analysis_worker import AnalysisWorker
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.assembler import ReleasedTrace, ReleaseReason
from otelsignals.pipeline.enricher import Enricher
from otelsignals.pipeline.sampler import TriageSampler
from otelsignals.telemetry import Telemetry

CONTEXT = ScopeContext(None, "", None, "")


def plain_trace(n: int, reason: ReleaseReason = "complete") -> ReleasedTrace:
    """A trace without GenAI content: nothing to analyse, a 'not_conversation' trace to the sampler."""
    span = Span(trace_id=n.to_bytes(16, "big"), span_id=n.to_bytes(8, "big"), name="GET /health")
    record = SpanRecord(span.trace_id, span.span_id, b"", span.SerializeToString(), CONTEXT, ingest_seq=n)
    return ReleasedTrace(span.trace_id, [record], reason, len(record.data))


def run_stage(traces: list[ReleasedTrace], sampler: TriageSampler | None, analyzer: Analyzer | None = None):
    forwarded: list[list[SpanRecord]] = []
    dropped: list[list[SpanRecord]] = []

    async def scenario() -> None:
        telemetry = Telemetry()
        worker = AnalysisWorker(1024**2, CollectorRegistry())
        worker.start()
        stage = AnalysisStage(
            worker,
            analyzer or Analyzer(telemetry, evals=EvalsConfig(trace_metrics=False)),
            Enricher(SignalsConfig()),
            telemetry,
            lambda spans, size: forwarded.append(spans),
            release_dropped=dropped.append,
            sampler=sampler,
        )
        for trace in traces:
            stage.take(trace)
        assert await worker.drain(10.0)
        worker.stop()

    asyncio.run(scenario())
    return forwarded, dropped


def test_analysed_traces_go_on_to_the_next_stage() -> None:
    traces = [plain_trace(1), plain_trace(2)]
    forwarded, dropped = run_stage(traces, sampler=None)
    assert forwarded == [traces[0].spans, traces[1].spans]
    assert dropped == []


def test_traces_the_sampler_drops_are_released_not_forwarded() -> None:
    dropping = TriageSampler(SamplerConfig(enabled=True, non_conversation_traces="drop"))
    traces = [plain_trace(1), plain_trace(2, reason="evicted_max_traces")]
    forwarded, dropped = run_stage(traces, sampler=dropping)
    # The evicted trace skips analysis and sampling: it always leaves.
    assert forwarded == [traces[1].spans]
    assert dropped == [traces[0].spans]


def marked_plain(trace: ReleasedTrace) -> ReleasedTrace:
    """``trace`` as it is when none of its spans holds a GenAI key (Analyzer.mark_spans)."""
    for record in trace.spans:
        record.may_carry_genai = False
    return trace


def stage_never_analysing(
    forwarded: list[list[SpanRecord]],
    sampler: TriageSampler | None = None,
    release_dropped: Callable[[list[SpanRecord]], None] | None = None,
) -> AnalysisStage:
    """An analysis stage whose analysis thread never runs (its worker is not started)."""
    telemetry = Telemetry()
    return AnalysisStage(
        AnalysisWorker(1024**2, CollectorRegistry()),
        Analyzer(telemetry, evals=EvalsConfig(trace_metrics=False)),
        Enricher(SignalsConfig()),
        telemetry,
        lambda spans, size: forwarded.append(spans),
        release_dropped=release_dropped,
        sampler=sampler,
    )


def test_a_trace_marked_plain_leaves_at_once_without_the_analysis_thread() -> None:
    async def scenario() -> None:
        forwarded: list[list[SpanRecord]] = []
        stage = stage_never_analysing(forwarded)
        plain, unmarked = marked_plain(plain_trace(1)), plain_trace(2)
        # A trace with one span marked as holding a GenAI key (its spans may have come in two
        # requests): it is analysed. So is one with a span never searched (None).
        mixed = marked_plain(plain_trace(3))
        genai_span = plain_trace(4).spans[0]
        genai_span.may_carry_genai = True
        mixed.spans.append(genai_span)
        partly_searched = marked_plain(plain_trace(5))
        partly_searched.spans += plain_trace(6).spans
        for trace in (plain, unmarked, mixed, partly_searched):
            stage.take(trace)
        assert forwarded == [plain.spans]  # the others wait for the analysis thread
        assert stage.telemetry.released_traces.labels("complete")._value.get() == 4
        assert stage.telemetry.plain_traces._value.get() == 1

    asyncio.run(scenario())


def sample_on_the_event_loop(
    sampler: TriageSampler, release_dropped: Callable[[list[SpanRecord]], None] | None = None
) -> tuple[ReleasedTrace, list[list[SpanRecord]], list[list[SpanRecord]]]:
    """(the marked trace, what was forwarded, what was released) once a marked and an unmarked trace
    are taken, with an analysis thread that never runs."""
    forwarded: list[list[SpanRecord]] = []
    dropped: list[list[SpanRecord]] = []

    async def scenario() -> ReleasedTrace:
        stage = stage_never_analysing(forwarded, sampler, release_dropped or dropped.append)
        plain = marked_plain(plain_trace(1))
        stage.take(plain)
        stage.take(plain_trace(2))  # unmarked: waits for the analysis thread, then the sampler
        return plain

    return asyncio.run(scenario()), forwarded, dropped


def test_a_trace_marked_plain_is_sampled_on_the_event_loop() -> None:
    dropping = TriageSampler(SamplerConfig(enabled=True, non_conversation_traces="drop"))
    plain, forwarded, dropped = sample_on_the_event_loop(dropping)
    assert forwarded == [] and dropped == [plain.spans] and dropping.dropped == {"not_conversation": 1}
    keeping = TriageSampler(SamplerConfig(enabled=True, non_conversation_traces="keep"))
    plain, forwarded, dropped = sample_on_the_event_loop(keeping)
    assert forwarded == [plain.spans] and dropped == [] and keeping.kept == {"not_conversation": 1}


def test_a_sampler_or_release_failing_on_the_event_loop_loses_nothing_else() -> None:
    class BrokenSampler(TriageSampler):
        def decide(self, *args: object) -> object:  # type: ignore[override]
            raise RuntimeError("a bug")

    # A sampler bug forwards the trace, as on the analysis thread.
    plain, forwarded, _ = sample_on_the_event_loop(BrokenSampler(SamplerConfig(enabled=True)))
    assert forwarded == [plain.spans]

    def full_disk(spans: list[SpanRecord]) -> None:
        raise OSError(28, "No space left on device")

    # A failing release is logged, not raised into the assembler or the receiver.
    dropping = TriageSampler(SamplerConfig(enabled=True, non_conversation_traces="drop"))
    _, forwarded, _ = sample_on_the_event_loop(dropping, release_dropped=full_disk)
    assert forwarded == [] and dropping.dropped == {"not_conversation": 1}


def test_a_failing_analysis_forwards_the_spans_as_they_came() -> None:
    class BrokenAnalyzer(Analyzer):
        def process(self, trace: ReleasedTrace) -> None:
            raise RuntimeError("a bug")

    trace = plain_trace(1)
    data = trace.spans[0].data
    forwarded, _ = run_stage([trace], sampler=None, analyzer=BrokenAnalyzer(Telemetry()))
    assert forwarded == [trace.spans]
    assert trace.spans[0].data == data
