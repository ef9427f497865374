"""Between the assembler and the exporter: what happens to a released trace.

On the event loop :meth:`AnalysisStage.take` receives the assembler's output and queues it for the
analysis thread (:class:`AnalysisWorker`). There the trace is analysed, handed to the reputation
recorder and the trace judge, enriched and sampled; the verdict goes back to the event loop, where
the trace is forwarded to the exporter, or dropped (its disk-queue records released). Whatever fails
on the way, the trace is forwarded as it came. A trace with nothing to analyse (none of its spans
holds a GenAI key) is sampled and forwarded on the event loop. Late GenAI log events and session
expiry run on the same thread, since they change the same conversation state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from prometheus_client import Counter

from otelsignals.analysis import Analysis
from otelsignals.otlp.wire import SpanRecord
from otelsignals.pipeline.analysis_worker import AnalysisWorker
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.annotations import PhoenixAnnotator, span_verdict
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.pipeline.enricher import Enricher
from otelsignals.pipeline.index_writer import IndexWriter
from otelsignals.pipeline.reputation_recorder import ReputationRecorder
from otelsignals.pipeline.sampler import TriageSampler
from otelsignals.pipeline.trace_judge import TraceJudge
from otelsignals.telemetry import Telemetry

logger = logging.getLogger("otelsignals.pipeline")

# The next stage: the exporter's add_spans (spans, their size in bytes).
Forward = Callable[[list[SpanRecord], int], None]
# Spans the sampler dropped: their disk-queue records are released as if delivered.
ReleaseDropped = Callable[[list[SpanRecord]], None]


class AnalysisStage:
    def __init__(
        self,
        worker: AnalysisWorker,
        analyzer: Analyzer,
        enricher: Enricher,
        telemetry: Telemetry,
        forward: Forward,
        *,
        release_dropped: ReleaseDropped | None = None,
        reputation: ReputationRecorder | None = None,
        trace_judge: TraceJudge | None = None,
        sampler: TriageSampler | None = None,
        index_writer: IndexWriter | None = None,
        annotator: PhoenixAnnotator | None = None,
    ) -> None:
        self.worker = worker
        self.analyzer = analyzer
        self.enricher = enricher
        self.telemetry = telemetry
        self._forward = forward
        self._release_dropped = release_dropped
        self.reputation = reputation
        self.trace_judge = trace_judge
        self.sampler = sampler
        self.index_writer = index_writer
        self.annotator = annotator
        self._expiry_pending = False
        # The disk-queue records of earlier runs sent through again at start-up (Pipeline.start):
        # their traces were most likely analysed before the restart, so their turns are not
        # evaluated for reputation again (counted twice: a restart with a backlog doubled an
        # agent's count). An evaluation lost in the crash is not made up for: its window holds 500.
        self.replayed_seqs: frozenset[int] = frozenset()
        # prometheus-client's labels() lookup costs more than the rest of a small trace's release.
        self._released_counters: dict[str, Counter] = {}

    # -- on the event loop ----------------------------------------------------------------------
    def take(self, trace: ReleasedTrace) -> None:
        """The assembler's output: a trace complete, timed out, flushed or evicted."""
        if not trace.analyzable:
            # Evicted traces were never analysed and never reach the sampler: they always leave.
            self.telemetry.evicted_traces.labels(trace.reason.removeprefix("evicted_")).inc()
            self._forward_now(trace)
            return
        released = self._released_counters.get(trace.reason)
        if released is None:
            released = self._released_counters[trace.reason] = self.telemetry.released_traces.labels(
                trace.reason
            )
        released.inc()
        if all(record.may_carry_genai is False for record in trace.spans):
            # None of its spans holds a GenAI key (Analyzer.mark_spans): the analysis would find
            # nothing to read, and the sampler's verdict on a trace without a conversation needs
            # no conversation state, so it is decided here. The round trip through the analysis
            # thread took a fifth to a third of plain traffic's CPU (bench/RESULTS.md, fifth
            # 2026-11-29 session).
            self.telemetry.plain_traces.inc()
            if self.sampler is None or self._sampled_in(self.sampler, trace, None):
                self._forward_now(trace)
            else:
                self._release_now(trace)
            return
        self.worker.submit(
            lambda: self._analyse(trace),
            trace.size,
            fallback=lambda: self._forward(trace.spans, trace.size),
        )

    def _forward_now(self, trace: ReleasedTrace) -> None:
        """Forward ``trace`` from here: an exporter bug is logged, as for the traces the analysis
        thread hands back (AnalysisWorker._deliver), not raised into the assembler's release of the
        request's other traces or into the receiver."""
        try:
            self._forward(trace.spans, trace.size)
        except Exception:
            logger.exception("forwarding a trace failed")

    def _release_now(self, trace: ReleasedTrace) -> None:
        """Release the disk-queue records of a trace the sampler dropped, from here: a failing write
        (a full disk) is logged as :meth:`_forward_now` logs, not raised."""
        if self._release_dropped is None:
            return
        try:
            self._release_dropped(trace.spans)
        except Exception:
            logger.exception("releasing a dropped trace failed")

    def take_log_events(self, request: ExportLogsServiceRequest, size: int) -> None:
        """GenAI events among passed-through logs, kept for the analysis of their spans."""
        self.worker.submit(lambda: self._read_log_events(request), size)

    def expire_sessions(self) -> None:
        """Close idle sessions (the ticker calls this every few ticks: service.session_expiry_interval),
        one job at a time however far behind the analysis is."""
        if not self._expiry_pending:
            self._expiry_pending = True
            self.worker.submit(self._expire_sessions)

    # -- on the analysis thread -----------------------------------------------------------------
    def _analyse(self, trace: ReleasedTrace) -> Callable[[], None] | None:
        """Analyse and enrich ``trace``, and say what the event loop does with it (nothing for a
        dropped trace no disk queue holds)."""
        analysis = None
        try:
            analysis = self.analyzer.process(trace)
            if analysis is not None:
                current = None
                if self.reputation is not None:
                    if not analysis.late_part and not self._replayed(trace):  # a turn counts once
                        self.reputation.submit(analysis)
                    current = self.reputation.current(analysis.agent_id)
                if self.trace_judge is not None:
                    self.trace_judge.submit(analysis)
                if self.index_writer is not None:
                    self._index(self.index_writer, analysis)
                self.enricher.enrich(trace, analysis, current)
        except Exception:
            # Analysis is best effort; forwarding is not. The spans leave as they came.
            self.telemetry.problems.warning("analyzer_error", "analysis of a trace failed")
            logger.debug("analysis failure", exc_info=True)
        if self.sampler is not None and not self._sampled_in(self.sampler, trace, analysis):
            release = self._release_dropped
            return (lambda: release(trace.spans)) if release is not None else None
        annotator = self.annotator
        verdict = span_verdict(analysis) if annotator is not None and analysis is not None else None
        if annotator is None or verdict is None:
            return lambda: self._forward(trace.spans, trace.size)

        def forward_and_annotate() -> None:
            # The spans are handed to the exporter first, so they usually reach Phoenix first too.
            self._forward(trace.spans, trace.size)
            annotator.submit(verdict)

        return forward_and_annotate

    def _replayed(self, trace: ReleasedTrace) -> bool:
        replayed = self.replayed_seqs
        return bool(replayed) and any(record.ingest_seq in replayed for record in trace.spans)

    def _index(self, writer: IndexWriter, analysis: Analysis) -> None:
        state = self.analyzer.sessions.get(analysis.conversation_id)
        if state is not None:
            writer.record(state, current=analysis.score)

    def _sampled_in(self, sampler: TriageSampler, trace: ReleasedTrace, analysis: Analysis | None) -> bool:
        """The triage sampler's verdict (a sampler bug forwards the trace)."""
        try:
            session = analysis.conversation_id if analysis is not None else None
            decision = sampler.decide(trace.trace_id, session, analysis)
            return bool(sampler.apply(trace, decision))
        except Exception:  # a sampler bug must not lose data: the trace is forwarded
            self.telemetry.problems.warning("sampler_error", "sampling a trace failed; forwarded")
            logger.debug("sampler failure", exc_info=True)
            return True

    def _read_log_events(self, request: ExportLogsServiceRequest) -> None:
        """Keep the GenAI events of ``request`` for their spans, and read those whose span was
        analysed already."""
        kept = self.analyzer.log_events.add(request)
        if not kept:
            return
        self.telemetry.log_events.labels("kept").inc(kept)
        try:
            self.analyzer.apply_late_log_events()
        except Exception:  # best effort, like all analysis
            self.telemetry.problems.warning("late_log_events_error", "reading late log events failed")
            logger.debug("late log events failure", exc_info=True)

    def _expire_sessions(self) -> None:
        self._expiry_pending = False
        self.analyzer.expire()
