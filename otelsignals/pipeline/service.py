"""Wires the stages together: receiver → assembler → analyzer → enricher → sampler → exporter, with
the disk queue, the shared store (reputation, eval runs) and the session summaries."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import Counter

from otelsignals.analysis import Analysis
from otelsignals.config import Config
from otelsignals.conversation import ConversationState
from otelsignals.evals.session_metrics import agent_consistency, agent_reliability
from otelsignals.gc_policy import GcPolicy
from otelsignals.otlp.wire import SpanRecord, split_request
from otelsignals.pipeline.analysis_worker import AnalysisWorker
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.assembler import Assembler, ReleasedTrace
from otelsignals.pipeline.disk_queue import DiskQueue
from otelsignals.pipeline.enricher import Enricher
from otelsignals.pipeline.eval_runs import EvalRuns
from otelsignals.pipeline.exporter import Batch, Exporter
from otelsignals.pipeline.reputation_recorder import ReputationRecorder, session_evaluation, store_url
from otelsignals.pipeline.sampler import SamplerCollector, TriageSampler
from otelsignals.pipeline.senders import Sender, make_sender
from otelsignals.pipeline.session_span import session_span
from otelsignals.pipeline.trace_judge import TraceJudge
from otelsignals.scoring import score
from otelsignals.signals.detect import warm_up
from otelsignals.stores import open_store
from otelsignals.telemetry import Telemetry

logger = logging.getLogger("otelsignals.pipeline")


@dataclass(frozen=True)
class IngestOutcome:
    accepted_spans: int
    rejected_spans: int = 0
    message: str = ""


class Pipeline:
    def __init__(self, config: Config, telemetry: Telemetry | None = None, sender: Sender | None = None):
        self.config = config
        self.telemetry = telemetry or Telemetry()
        self.analyzer = Analyzer(
            self.telemetry, config.sessions, config.signals, config.evals, config.analyzer
        )
        self.analyzer.on_session_closed = self._close_session
        # The analysis runs on its own thread; the event loop only receives, hands over and exports.
        self.analysis = AnalysisWorker(int(config.analyzer.queue_max_bytes), self.telemetry.registry)
        self.enricher = Enricher(config.signals)
        # One store, shared with every replica pointing at it: reputation windows and eval runs.
        url = store_url(config.store)
        try:
            self.store = open_store(url, window_size=config.reputation.window)
        except Exception as exc:  # a driver's own error types; the CLI reports OSError in one line
            raise OSError(f"cannot open the store {url} (store.url): {exc}") from exc
        self.reputation = (
            ReputationRecorder(self.store, config.reputation, self.telemetry)
            if config.reputation.enabled
            else None
        )
        self.eval_runs = EvalRuns(
            self.store,
            self.analyzer.sessions,
            config.evals,
            self.telemetry.registry,
            config.signals.snippets,
            self.analysis.read,
        )
        self.sampler = TriageSampler(config.sampler) if config.sampler.enabled else None
        if self.sampler is not None:
            self.telemetry.registry.register(SamplerCollector(self.sampler))
        self.trace_judge = (
            TraceJudge(
                config.evals,
                self.analyzer.sessions,
                self.telemetry,
                self._on_event_loop,
                self.analysis.submit,
            )
            if config.evals.judge_url and config.evals.judge_traces
            else None
        )
        assembler_config = config.assembler
        self.assembler = Assembler(
            self._on_release,
            self._on_duplicate,
            decision_wait=assembler_config.decision_wait,
            max_traces=assembler_config.max_traces,
            max_bytes=assembler_config.max_bytes,
        )
        queue_config = config.exporter.queue
        self.disk_queue = (
            DiskQueue(queue_config.directory, queue_config.segment_size, queue_config.fsync)
            if queue_config.directory
            else None
        )
        self.exporter = Exporter(
            config.exporter, sender or make_sender(config.exporter), self.telemetry, self._on_batch_done
        )
        self.gc_policy = GcPolicy(config.service.gc_freeze_interval, self.telemetry.registry)
        self._ticker: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._expiry_pending = False
        # prometheus-client's labels() lookup costs more than the rest of a small trace's release.
        self._released_counters: dict[str, Counter] = {}
        self.ready = False

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        warm_up()
        if self.analyzer.embedder is not None and not self.config.evals.embeddings_url:
            # Load the embedding model now rather than on the first trace (about half a second).
            await asyncio.to_thread(self.analyzer.embedder.embed, ["warm up"])
        if self.reputation is not None:
            self.reputation.start()
        self.analysis.start()
        self.exporter.start()
        if self.disk_queue is not None:
            for record in self.disk_queue.recover():
                if record.signal == "traces":
                    request = ExportTraceServiceRequest.FromString(record.payload)
                    split = split_request(request, record.seq)
                    self.disk_queue.set_units(record.seq, len(split.records))
                    self.assembler.add(split.records)
                else:
                    self.exporter.add_raw(record.signal, record.payload, record.seq)
        # Everything loaded for the process's lifetime is in memory now: out of the collector's reach.
        self.gc_policy.start()
        self._ticker = asyncio.create_task(self._tick_forever(), name="pipeline-ticker")
        self.ready = True

    async def stop(self) -> None:
        self.ready = False
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        self.assembler.flush()
        if not await self.analysis.drain(self.config.service.shutdown_timeout):
            unanalysed = self.analysis.abandon()
            for forward in unanalysed:
                forward()
            logger.warning(
                "shutdown: the analysis did not finish in time; the traces it had not reached are "
                "forwarded unanalysed",
                extra={"fields": {"traces": len(unanalysed)}},
            )
        await asyncio.to_thread(self.analysis.stop)
        # Open sessions are not closed by a restart (another replica, or this one after the restart,
        # may continue them): no session span is emitted for them here.
        await self.exporter.stop(self.config.service.shutdown_timeout)
        if self.disk_queue is not None:
            self.disk_queue.close()
        if self.reputation is not None:
            await asyncio.to_thread(self.reputation.stop)
        await self.eval_runs.stop()
        if self.trace_judge is not None:
            await self.trace_judge.stop()
        self.store.close()
        self.gc_policy.stop()

    async def _tick_forever(self) -> None:
        interval = self.config.assembler.tick_interval
        while True:
            await asyncio.sleep(interval)
            try:
                self.assembler.expire()
                if not self._expiry_pending:
                    self._expiry_pending = True
                    self.analysis.submit(self._expire_sessions)
                self.exporter.tick()
                self.gc_policy.tick()
                self._update_gauges()
            except Exception:  # a bug in one tick must not stop expiry for good
                logger.exception("pipeline tick failed")

    # -- intake ---------------------------------------------------------------------------------
    def has_room(self, incoming_bytes: int) -> bool:
        return self.analysis.has_room(incoming_bytes) and self.exporter.has_room(incoming_bytes)

    def ingest_traces(self, request: ExportTraceServiceRequest, raw: bytes | None = None) -> IngestOutcome:
        """Take a parsed request. ``raw`` is its protobuf encoding when the caller has it (saves a
        serialization for the disk queue)."""
        split = split_request(request)
        if self.disk_queue is not None:
            payload = raw if raw is not None else request.SerializeToString()
            seq = self.disk_queue.append("traces", payload, units=len(split.records))
            for record in split.records:
                record.ingest_seq = seq
        self.assembler.add(split.records)
        if not split.invalid_spans:
            return IngestOutcome(len(split.records))
        return IngestOutcome(
            len(split.records),
            split.invalid_spans,
            f"{split.invalid_spans} spans refused: a trace id must be 16 and a span id 8 non-zero bytes",
        )

    def ingest_passthrough(self, signal: str, body: bytes, request: Message | None = None) -> None:
        """Metrics and logs go through untouched; GenAI events among the logs are also kept for the
        analysis of their spans."""
        seq = self.disk_queue.append(signal, body, units=1) if self.disk_queue is not None else 0
        self.exporter.add_raw(signal, body, seq)
        if signal == "logs" and isinstance(request, ExportLogsServiceRequest):
            self.analysis.submit(lambda: self._read_log_events(request), len(body))

    def _read_log_events(self, request: ExportLogsServiceRequest) -> None:
        """On the analysis thread: keep the GenAI events of ``request`` for their spans, and read
        those whose span was analysed already."""
        kept = self.analyzer.log_events.add(request)
        if not kept:
            return
        self.telemetry.log_events.labels("kept").inc(kept)
        try:
            self.analyzer.apply_late_log_events()
        except Exception:  # best effort, like all analysis
            self.telemetry.logged_once.warning("late_log_events_error", "reading late log events failed")
            logger.debug("late log events failure", exc_info=True)

    def _expire_sessions(self) -> None:
        self._expiry_pending = False
        self.analyzer.expire()

    # -- stage hand-offs ------------------------------------------------------------------------
    def _on_release(self, trace: ReleasedTrace) -> None:
        if not trace.analyzable:
            # Evicted traces were never analysed and never reach the sampler: they always leave.
            self.telemetry.evicted_traces.labels(trace.reason.removeprefix("evicted_")).inc()
            self.exporter.add_spans(trace.spans, trace.size)
            return
        released = self._released_counters.get(trace.reason)
        if released is None:
            released = self._released_counters[trace.reason] = self.telemetry.released_traces.labels(
                trace.reason
            )
        released.inc()
        self.analysis.submit(
            lambda: self._analyse(trace),
            trace.size,
            fallback=lambda: self.exporter.add_spans(trace.spans, trace.size),
        )

    def _analyse(self, trace: ReleasedTrace) -> Callable[[], None]:
        """On the analysis thread: analyse and enrich ``trace``, and say what the event loop does
        with it. Whatever fails here, the trace is forwarded as it came."""
        analysis = None
        try:
            analysis = self.analyzer.process(trace)
            if analysis is not None:
                current = None
                if self.reputation is not None:
                    self.reputation.submit(analysis)
                    current = self.reputation.current(analysis.agent_id)
                if self.trace_judge is not None:
                    self.trace_judge.submit(analysis)
                self.enricher.enrich(trace, analysis, current)
        except Exception:
            # Analysis is best effort; forwarding is not. The spans leave as they came.
            self.telemetry.logged_once.warning("analyzer_error", "analysis of a trace failed")
            logger.debug("analysis failure", exc_info=True)
        if self.sampler is not None and not self._sampled_in(trace, analysis):
            return lambda: self._release_from_disk_queue(trace.spans)
        return lambda: self.exporter.add_spans(trace.spans, trace.size)

    def _sampled_in(self, trace: ReleasedTrace, analysis: Analysis | None) -> bool:
        """The triage sampler's verdict (a sampler bug forwards the trace)."""
        assert self.sampler is not None
        try:
            session = analysis.conversation_id if analysis is not None else None
            decision = self.sampler.decide(trace.trace_id, session, analysis)
            return bool(self.sampler.apply(trace, decision))
        except Exception:  # a sampler bug must not lose data: the trace is forwarded
            self.telemetry.logged_once.warning("sampler_error", "sampling a trace failed; forwarded")
            logger.debug("sampler failure", exc_info=True)
            return True

    def _release_from_disk_queue(self, records: list[SpanRecord]) -> None:
        """A trace the sampler dropped leaves the disk queue as if it had been delivered."""
        if self.disk_queue is not None:
            for record in records:
                if record.ingest_seq:
                    self.disk_queue.release(record.ingest_seq)

    def _close_session(self, state: ConversationState, reason: str) -> None:
        """A closed session's verdict goes downstream as an otelsignals.session span."""
        traces = list(state.trace_signals)
        threshold = self.config.evals.threshold
        metrics = [
            agent_reliability(traces, threshold=threshold),
            agent_consistency(traces, threshold=threshold),
        ]
        record = session_span(
            state.conversation.key,
            state.conversation.agent_id,
            state.trace_spans,
            metrics,
            reason,
            state.first_seen_ns or time.time_ns(),
            time.time_ns(),
        )
        # Called on the analysis thread: the exporter lives on the event loop.
        self._on_event_loop(lambda: self.exporter.add_spans([record], len(record.data)))
        self.telemetry.sessions_closed.labels(reason).inc()
        if self.reputation is not None and state.trace_spans:
            final = score(state.conversation, state.leaf_counts, self.config.signals.baseline_user_turns)
            self.reputation.submit_evaluation(
                session_evaluation(
                    state.conversation.agent_id,
                    final.quality,
                    dict(state.leaf_counts),
                    list(state.turn_latencies_ms),
                    time.time(),
                )
            )

    def _on_event_loop(self, callback: Callable[[], None]) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(callback)

    def _on_duplicate(self, record: SpanRecord) -> None:
        self.telemetry.duplicate_spans.inc()
        if record.ingest_seq and self.disk_queue is not None:
            self.disk_queue.release(record.ingest_seq)

    def _on_batch_done(self, batch: Batch) -> None:
        if self.disk_queue is None:
            return
        for seq, units in batch.ingest_units.items():
            self.disk_queue.release(seq, units)
        self.telemetry.wal_bytes.set(self.disk_queue.bytes)

    def _update_gauges(self) -> None:
        telemetry = self.telemetry
        telemetry.buffered_traces.set(len(self.assembler))
        telemetry.buffered_spans.set(self.assembler.buffered_spans)
        telemetry.buffered_bytes.set(self.assembler.buffered_bytes)
        if self.disk_queue is not None:
            telemetry.wal_bytes.set(self.disk_queue.bytes)
