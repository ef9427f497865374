"""The analysis stage hands each released trace on by itself: evicted ones straight to the next
stage, analysed ones through the analysis thread to the next stage, or, when the sampler drops
them, to the release of their disk-queue records; a failing analysis still forwards the spans."""

from __future__ import annotations

import asyncio

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
    """``trace`` as it is when its request held no GenAI key (Analyzer.mark_plain_spans)."""
    for record in trace.spans:
        record.may_carry_genai = False
    return trace


def test_a_trace_marked_plain_leaves_at_once_without_the_analysis_thread() -> None:
    async def scenario() -> None:
        telemetry = Telemetry()
        worker = AnalysisWorker(1024**2, CollectorRegistry())  # never started: nothing runs there
        forwarded: list[list[SpanRecord]] = []
        stage = AnalysisStage(
            worker,
            Analyzer(telemetry, evals=EvalsConfig(trace_metrics=False)),
            Enricher(SignalsConfig()),
            telemetry,
            lambda spans, size: forwarded.append(spans),
        )
        plain, unmarked = marked_plain(plain_trace(1)), plain_trace(2)
        # A trace whose spans came in two requests, one of them with GenAI keys: it is analysed.
        mixed = marked_plain(plain_trace(3))
        mixed.spans += plain_trace(4).spans
        for trace in (plain, unmarked, mixed):
            stage.take(trace)
        assert forwarded == [plain.spans]  # the others wait for the analysis thread
        assert telemetry.released_traces.labels("complete")._value.get() == 3

    asyncio.run(scenario())


def test_a_trace_marked_plain_is_sampled_on_the_event_loop() -> None:
    async def scenario(sampler: TriageSampler) -> tuple[list, list]:
        telemetry = Telemetry()
        worker = AnalysisWorker(1024**2, CollectorRegistry())  # never started: nothing runs there
        forwarded: list[list[SpanRecord]] = []
        dropped: list[list[SpanRecord]] = []
        stage = AnalysisStage(
            worker,
            Analyzer(telemetry, evals=EvalsConfig(trace_metrics=False)),
            Enricher(SignalsConfig()),
            telemetry,
            lambda spans, size: forwarded.append(spans),
            release_dropped=dropped.append,
            sampler=sampler,
        )
        stage.take(marked_plain(plain_trace(1)))
        stage.take(plain_trace(2))  # unmarked: waits for the analysis thread, then the sampler
        return forwarded, dropped

    dropping = TriageSampler(SamplerConfig(enabled=True, non_conversation_traces="drop"))
    forwarded, dropped = asyncio.run(scenario(dropping))
    assert forwarded == [] and len(dropped) == 1 and dropping.dropped == {"not_conversation": 1}
    keeping = TriageSampler(SamplerConfig(enabled=True, non_conversation_traces="keep"))
    forwarded, dropped = asyncio.run(scenario(keeping))
    assert len(forwarded) == 1 and dropped == [] and keeping.kept == {"not_conversation": 1}


def test_a_failing_analysis_forwards_the_spans_as_they_came() -> None:
    class BrokenAnalyzer(Analyzer):
        def process(self, trace: ReleasedTrace) -> None:
            raise RuntimeError("a bug")

    trace = plain_trace(1)
    data = trace.spans[0].data
    forwarded, _ = run_stage([trace], sampler=None, analyzer=BrokenAnalyzer(Telemetry()))
    assert forwarded == [trace.spans]
    assert trace.spans[0].data == data
