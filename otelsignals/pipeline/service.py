"""Wires the stages together and runs them: receiver → assembler → analysis (analyzer, enricher,
sampler) → exporter, with the disk queue, the shared store (reputation, eval runs) and the session
spans. Each stage is built by its factory from its config section and hands its output to the next
stage itself; the pipeline only connects them, feeds them and ticks their timers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otelsignals.config import Config
from otelsignals.gc_policy import GcPolicy
from otelsignals.otlp.wire import SpanRecord, SplitRequest, split_request, split_request_parts
from otelsignals.pipeline.analysis_stage import AnalysisStage
from otelsignals.pipeline.analysis_worker import create_analysis_worker
from otelsignals.pipeline.analyzer import create_analyzer
from otelsignals.pipeline.annotations import create_annotator
from otelsignals.pipeline.assembler import create_assembler
from otelsignals.pipeline.disk_queue import create_disk_queue
from otelsignals.pipeline.enricher import Enricher
from otelsignals.pipeline.eval_runs import EvalRuns
from otelsignals.pipeline.exporter import Batch, Exporter
from otelsignals.pipeline.index_writer import create_index_reader, create_index_writer
from otelsignals.pipeline.reputation_recorder import create_reputation_recorder, open_configured_store
from otelsignals.pipeline.sampler import create_sampler
from otelsignals.pipeline.senders import Sender, make_sender
from otelsignals.pipeline.session_span import SessionCloser
from otelsignals.pipeline.trace_judge import create_trace_judge
from otelsignals.signals.detect import warm_up
from otelsignals.telemetry import Telemetry

logger = logging.getLogger("otelsignals.pipeline")


@dataclass(frozen=True)
class IngestOutcome:
    accepted_spans: int
    rejected_spans: int = 0
    message: str = ""


# Idle sessions are looked for every second, or ten times per sessions.ttl when that is shorter.
SESSION_EXPIRY_INTERVAL = 1.0


def session_expiry_interval(ttl: float) -> float:
    """How often the ticker looks for sessions idle past ``ttl``: a session closes at most a tenth
    of its ttl (or a second) late."""
    return min(SESSION_EXPIRY_INTERVAL, max(ttl, 0.0) / 10)


# Spans of one request taken between two turns of the event loop (Pipeline.ingest_traces):
# about 10 ms of work at ~5 µs a small span.
INGEST_PART_SPANS = 2_000


def _outcome(parts: list[SplitRequest]) -> IngestOutcome:
    accepted = sum(len(part.records) for part in parts)
    invalid = sum(part.invalid_spans for part in parts)
    if not invalid:
        return IngestOutcome(accepted)
    return IngestOutcome(
        accepted, invalid, f"{invalid} spans refused: a trace id must be 16 and a span id 8 non-zero bytes"
    )


class Pipeline:
    def __init__(self, config: Config, telemetry: Telemetry | None = None, sender: Sender | None = None):
        self.config = config
        self.telemetry = telemetry = telemetry or Telemetry(config.log.summary_interval)
        registry = telemetry.registry
        # The analysis runs on its own thread; the event loop only receives, hands over and exports.
        self.analysis = create_analysis_worker(config.analyzer, registry)
        # One store, shared with every replica pointing at it: reputation windows and eval runs.
        self.store = open_configured_store(config.store, config.reputation.window)
        self.reputation = create_reputation_recorder(config.reputation, self.store, telemetry)
        self.disk_queue = create_disk_queue(config.exporter.queue)
        self.index_reader = create_index_reader(config.index, config.store)
        self.index_writer = create_index_writer(
            config.index,
            config.store,
            registry,
            config.signals.snippets,
            durable=self.disk_queue is not None,
            problems=telemetry.problems,
        )
        self.exporter = Exporter(
            config.exporter, sender or make_sender(config.exporter), telemetry, self._on_batch_done
        )
        self.session_closer = SessionCloser(
            config.evals.threshold_for,
            config.signals.baseline_user_turns,
            telemetry,
            self._on_event_loop,
            self.exporter.add_spans,
            self.reputation,
            self.index_writer,
        )
        self.analyzer = create_analyzer(
            config.analyzer,
            config.sessions,
            config.signals,
            config.evals,
            telemetry,
            self.session_closer.close,
        )
        self.eval_runs = EvalRuns(
            self.store,
            self.analyzer.sessions,
            config.evals,
            registry,
            config.signals.snippets,
            self.analysis.read,
            self.index_reader,
        )
        # Conversation verdicts as Phoenix span annotations, sent in the background (when configured).
        self.annotator = create_annotator(config.annotations, registry, telemetry.problems)
        self.analysis_stage = AnalysisStage(
            self.analysis,
            self.analyzer,
            Enricher(config.signals),
            telemetry,
            self.exporter.add_spans,
            release_dropped=self.disk_queue.release_spans if self.disk_queue is not None else None,
            reputation=self.reputation,
            trace_judge=create_trace_judge(
                config.evals, self.analyzer.sessions, telemetry, self._on_event_loop, self.analysis.submit
            ),
            sampler=create_sampler(config.sampler, registry),
            index_writer=self.index_writer,
            annotator=self.annotator,
        )
        self.assembler = create_assembler(config.assembler, self.analysis_stage.take, self._on_duplicate)
        self.gc_policy = GcPolicy(config.service.gc_freeze_interval, registry)
        self._ticker: asyncio.Task[None] | None = None
        self._ticker_resting = False
        self._trace_buffered = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
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
        if self.index_writer is not None:
            self.index_writer.start()
        self.analysis.start()
        self.exporter.start()
        if self.annotator is not None:
            self.annotator.start()
        if self.disk_queue is not None:
            recovered = self.disk_queue.recover()
            self.analysis_stage.replayed_seqs = frozenset(r.seq for r in recovered if r.signal == "traces")
            for record in recovered:
                if record.signal == "traces":
                    request = ExportTraceServiceRequest.FromString(record.payload)
                    split = self._split(request, record.payload, record.seq)
                    self.disk_queue.set_units(record.seq, len(split.records))
                    self._buffer(split.records)
                else:
                    self.exporter.add_raw(record.signal, record.payload, record.seq)
        # Everything loaded for the process's lifetime is in memory now: out of the collector's reach.
        self.gc_policy.start()
        self._ticker = asyncio.create_task(self._tick_forever(), name="pipeline-ticker")
        self.ready = True

    async def stop(self) -> None:
        # One budget for the whole shutdown (service.shutdown_timeout), shared by its phases in turn
        # (analysis, spans, verdict annotations), so that an orchestrator's grace period longer than
        # it is always enough; what a phase leaves, the next one gets.
        deadline = time.monotonic() + self.config.service.shutdown_timeout

        def remaining() -> float:
            return max(0.0, deadline - time.monotonic())

        self.ready = False
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        self.assembler.flush()
        if not await self.analysis.drain(remaining()):
            unanalysed = self.analysis.abandon()
            for forward in unanalysed:
                forward()
            logger.warning(
                "shutdown: the analysis did not finish in time; the traces it had not reached are "
                "forwarded unanalysed",
                extra={"fields": {"traces": len(unanalysed)}},
            )
        await asyncio.to_thread(self.analysis.stop)
        await asyncio.to_thread(self.analyzer.close)
        if self.index_writer is not None:
            await asyncio.to_thread(self.index_writer.stop)
        if self.index_reader is not None:
            self.index_reader.close()
        # Open sessions are not closed by a restart (another replica, or this one after the restart,
        # may continue them): no session span is emitted for them here.
        await self.exporter.stop(remaining())
        if self.annotator is not None:  # after the spans, which the verdicts annotate
            await self.annotator.stop(remaining())
        if self.disk_queue is not None:
            self.disk_queue.close()
        if self.reputation is not None:
            await asyncio.to_thread(self.reputation.stop)
        await self.eval_runs.stop()
        if self.analysis_stage.trace_judge is not None:
            await self.analysis_stage.trace_judge.stop()
        self.store.close()
        self.gc_policy.stop()

    async def _tick_forever(self) -> None:
        interval = self.config.assembler.tick_interval
        # Sessions close on the timescale of their ttl (30 minutes by default): a check on every
        # tick, a round trip to the analysis thread, was most of an idle sidecar's CPU.
        sessions_interval = session_expiry_interval(self.config.sessions.ttl)
        sessions_due = 0.0
        while True:
            if len(self.assembler):
                await asyncio.sleep(interval)
            else:
                # With no trace buffered, nothing needs the ticker before the next session check:
                # ten wake-ups a second were most of an idle sidecar's CPU. A trace buffered
                # meanwhile wakes it, so its wait is still kept to the tick.
                await self._rest(max(interval, sessions_interval))
            try:
                self.assembler.expire()
                now = time.monotonic()
                if now >= sessions_due:
                    sessions_due = now + sessions_interval
                    self.analysis_stage.expire_sessions()
                self.gc_policy.tick()
                self.telemetry.problems.tick()
                self._update_gauges()
            except Exception:  # a bug in one tick must not stop expiry for good
                logger.exception("pipeline tick failed")

    async def _rest(self, seconds: float) -> None:
        """Wait ``seconds``, or until a trace is buffered (:meth:`_buffer`)."""
        self._trace_buffered.clear()
        self._ticker_resting = True
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._trace_buffered.wait(), seconds)
        finally:
            self._ticker_resting = False

    def _buffer(self, records: list[SpanRecord]) -> None:
        self.assembler.add(records)
        if self._ticker_resting and len(self.assembler):
            self._trace_buffered.set()  # a trace waits for its expiry: the ticker looks each tick again

    # -- intake ---------------------------------------------------------------------------------
    def has_room(self, incoming_bytes: int) -> bool:
        return self.analysis.has_room(incoming_bytes) and self.exporter.has_room(incoming_bytes)

    def _split(
        self, request: ExportTraceServiceRequest, raw: bytes | None, ingest_seq: int = 0
    ) -> SplitRequest:
        """``request``'s span records, each marked for whether it holds a GenAI key: both are made
        from the same bytes ``raw`` (the marks search them where the spans were cut from them)."""
        split = split_request(request, ingest_seq, raw)
        self.analyzer.mark_spans(split, raw)
        return split

    async def ingest_traces(
        self, request: ExportTraceServiceRequest, raw: bytes | None = None
    ) -> IngestOutcome:
        """Take a parsed request. ``raw`` is its protobuf encoding when the caller has it: the spans'
        bytes are cut from it, and the disk queue keeps it, rather than serializing them again. The
        event loop answers others between parts of INGEST_PART_SPANS spans: one request of hundreds
        of thousands of small spans (a few seconds' work) held /healthz and every other client for
        as long."""
        parts: list[SplitRequest] = []
        for part in self._split_parts(request, raw):
            if parts:
                await asyncio.sleep(0)
            parts.append(part)
        self._queue_on_disk(request, raw, parts)
        buffered = 0
        try:
            for part in parts:
                if buffered:
                    await asyncio.sleep(0)
                self._buffer(part.records)
                buffered += 1
        except asyncio.CancelledError:
            # The call was cancelled (the client went away, the receivers stop): what is on the disk
            # queue, or was partly buffered, is buffered whole rather than left half in.
            for part in parts[buffered:]:
                self._buffer(part.records)
            raise
        return _outcome(parts)

    def _split_parts(self, request: ExportTraceServiceRequest, raw: bytes | None) -> Iterator[SplitRequest]:
        for part in split_request_parts(request, 0, raw, INGEST_PART_SPANS):
            self.analyzer.mark_spans(part, raw)
            yield part

    def _queue_on_disk(
        self, request: ExportTraceServiceRequest, raw: bytes | None, parts: list[SplitRequest]
    ) -> None:
        if self.disk_queue is None:
            return
        payload = raw if raw is not None else request.SerializeToString()
        seq = self.disk_queue.append("traces", payload, units=sum(len(part.records) for part in parts))
        for part in parts:
            for record in part.records:
                record.ingest_seq = seq

    def ingest_passthrough(self, signal: str, body: bytes, request: Message | None = None) -> None:
        """Metrics and logs go through untouched; GenAI events among the logs are also kept for the
        analysis of their spans."""
        seq = self.disk_queue.append(signal, body, units=1) if self.disk_queue is not None else 0
        self.exporter.add_raw(signal, body, seq)
        if signal == "logs" and isinstance(request, ExportLogsServiceRequest):
            self.analysis_stage.take_log_events(request, len(body))

    # -- acknowledgements and the event loop ----------------------------------------------------
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
