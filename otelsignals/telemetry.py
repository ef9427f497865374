"""The process's own telemetry: Prometheus metrics and structured logs.

Each pipeline owns a :class:`Telemetry` with its own registry, so several pipelines can live in one
process (tests do that) without sharing counters.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from otelsignals.allocator import MallocCollector
from otelsignals.thread_cpu import ThreadCpuCollector

logger = logging.getLogger("otelsignals")

# Repeats of a problem are summarised in the log at most this often (log.summary_interval).
DEFAULT_SUMMARY_INTERVAL = 300.0


# Seconds, for the stages' latency histograms: from a millisecond (a small trace's analysis, an
# export to a nearby downstream) to the backlog of an overloaded process.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Telemetry:
    def __init__(self, log_summary_interval: float = DEFAULT_SUMMARY_INTERVAL) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # The process's own health beside the pipeline's: process_* (CPU, memory, open files against
        # their limit, start time), python_info, and python_gc_* (collections per generation).
        # prometheus_client registers these on its global registry only; this one is the process's.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        MallocCollector(registry=r)  # otelsignals_malloc_bytes{state}: live vs freed-and-kept memory
        ThreadCpuCollector(registry=r)  # otelsignals_thread_cpu_seconds_total{thread}
        self.received_spans = Counter(
            "otelsignals_receiver_accepted_spans", "Spans accepted from clients.", ["transport"], registry=r
        )
        self.received_requests = Counter(
            "otelsignals_receiver_requests",
            "Export requests answered, by signal and outcome.",
            ["transport", "signal", "outcome"],
            registry=r,
        )
        self.rejected_requests = Counter(
            "otelsignals_receiver_rejected_requests",
            "Requests refused for bad input, by kind (not_protobuf, bad_json, too_large, ...).",
            ["transport", "reason"],
            registry=r,
        )
        self.refused_spans = Counter(
            "otelsignals_receiver_refused_spans",
            "Spans refused: 'overloaded' ones are retried by clients, 'invalid_id' ones are reported "
            "in partial_success.",
            ["transport", "reason"],
            registry=r,
        )
        self.buffered_traces = Gauge(
            "otelsignals_assembler_buffered_traces", "Traces waiting for their spans.", registry=r
        )
        self.buffered_spans = Gauge(
            "otelsignals_assembler_buffered_spans", "Spans waiting in the trace buffer.", registry=r
        )
        self.buffered_bytes = Gauge(
            "otelsignals_assembler_buffered_bytes",
            "Bytes of spans waiting in the trace buffer, with 500 a span for its record.",
            registry=r,
        )
        self.released_traces = Counter(
            "otelsignals_assembler_released_traces",
            "Traces released to analysis, by why (complete, timeout, shutdown).",
            ["reason"],
            registry=r,
        )
        self.evicted_traces = Counter(
            "otelsignals_assembler_evicted_traces",
            "Traces released early, unanalysed, because the buffer was full (forwarded, not dropped).",
            ["reason"],
            registry=r,
        )
        self.duplicate_spans = Counter(
            "otelsignals_assembler_duplicate_spans",
            "Spans re-sent while their first copy was still buffered (client retries); one copy leaves.",
            registry=r,
        )
        self.genai_spans = Counter(
            "otelsignals_analyzer_genai_spans", "Spans that carry GenAI data.", registry=r
        )
        self.plain_traces = Counter(
            "otelsignals_analyzer_plain_traces",
            "Released traces none of whose spans holds a GenAI key prefix: not analysed, sampled on "
            "the event loop (forwarded unless the sampler drops them).",
            registry=r,
        )
        self.genai_traces = Counter(
            "otelsignals_analyzer_conversation_traces",
            "Traces that carried conversation data, by whether message content was recorded.",
            ["content"],
            registry=r,
        )
        self.assembled_messages = Counter(
            "otelsignals_analyzer_messages",
            "Conversation messages assembled (history resent by later calls counts once).",
            registry=r,
        )
        self.unreadable_spans = Counter(
            "otelsignals_analyzer_unreadable_spans",
            "GenAI spans the readers could not read (forwarded untouched), by reason.",
            ["reason"],
            registry=r,
        )
        self.truncated_for_analysis = Counter(
            "otelsignals_analyzer_truncated",
            "Text cut for the analysis only (analyzer.*), by reason: messages cut (message_bytes, "
            "tool_result_bytes) or messages not read (messages_per_span, span_text_bytes).",
            ["reason"],
            registry=r,
        )
        self.detected_signals = Counter(
            "otelsignals_signals_detected",
            "Signal instances detected, by leaf type (e.g. interaction.disengagement.escalation).",
            ["type"],
            registry=r,
        )
        self.analysed_turns = Counter(
            "otelsignals_analysed_turns",
            "Conversation turns analysed (one per trace that carried a conversation), by quality bucket.",
            ["quality", "flagged"],
            registry=r,
        )
        self.reputation_recorded = Counter(
            "otelsignals_reputation_evaluations", "Evaluations written to the reputation store.", registry=r
        )
        self.reputation_dropped = Counter(
            "otelsignals_reputation_dropped_evaluations",
            "Evaluations dropped because the reputation store fell behind (reputation.max_pending).",
            registry=r,
        )
        self.reputation_errors = Counter(
            "otelsignals_reputation_store_errors",
            "Evaluations the reputation store failed to record.",
            registry=r,
        )
        self.reputation_window_reads = Counter(
            "otelsignals_reputation_window_reads",
            "Agent windows read back from the reputation store, by reason: first_seen (whole, an agent "
            "this process does not follow), other_writer (the entries other replicas recorded), "
            "store_reset (whole, the store's count went back), trimmed_elsewhere (whole, entries "
            "another replica trimmed), periodic (whole, once a minute per agent written).",
            ["reason"],
            registry=r,
        )
        self.conversation_turns = Histogram(
            "otelsignals_conversation_turns",
            "Turn count (user + assistant) of conversations as each trace is analysed.",
            buckets=(1, 2, 4, 6, 8, 10, 14, 20, 30, 50, 100),
            registry=r,
        )
        self.judge_skipped = Counter(
            "otelsignals_judge_skipped_traces",
            "Traces not sent to the LLM judge because too many judgements were waiting.",
            registry=r,
        )
        self.judge_errors = Counter(
            "otelsignals_judge_errors", "LLM-judge calls that failed or answered unusably.", registry=r
        )
        self.log_events = Counter(
            "otelsignals_analyzer_log_events",
            "GenAI events received as log records: kept for their span, or forgotten (the span never came).",
            ["outcome"],
            registry=r,
        )
        self.conversations = Gauge(
            "otelsignals_sessions_active", "Conversations whose state is kept.", registry=r
        )
        self.cold_conversations = Gauge(
            "otelsignals_sessions_cold",
            "Kept conversations gone cold (idle for sessions.cold_after, or the least recently active "
            "over sessions.max_bytes) and not active since.",
            registry=r,
        )
        self.conversation_bytes = Gauge(
            "otelsignals_sessions_bytes",
            "Memory held by the kept conversations' state, estimated (bounded by sessions.max_bytes).",
            registry=r,
        )
        self.session_evictions = Counter(
            "otelsignals_sessions_evicted",
            "Conversation states forgotten, by reason: ttl (idle), capacity (sessions.max_sessions) or "
            "bytes (sessions.max_bytes).",
            ["reason"],
            registry=r,
        )
        self.sessions_cooled = Counter(
            "otelsignals_sessions_cooled",
            "Conversations gone cold: they dropped what their next trace rebuilds from their messages, "
            "by reason: idle (for sessions.cold_after) or bytes (over sessions.max_bytes, the least "
            "recently active goes cold before it is evicted).",
            ["reason"],
            registry=r,
        )
        self.sessions_closed = Counter(
            "otelsignals_sessions_closed",
            "Sessions closed and summarised in an otelsignals.session span, by reason: ttl, capacity.",
            ["reason"],
            registry=r,
        )
        self.trimmed_messages = Counter(
            "otelsignals_sessions_trimmed_messages",
            "Old messages dropped from long conversations (sessions.max_messages).",
            registry=r,
        )
        self.compacted_messages = Counter(
            "otelsignals_sessions_compacted_messages",
            "Old messages whose text is kept compressed (read back only on request).",
            registry=r,
        )
        self.compacted_reads = Counter(
            "otelsignals_sessions_compacted_reads",
            "Compressed message texts expanded again to be read.",
            registry=r,
        )
        self.forwarded_spans = Counter(
            "otelsignals_exporter_sent_spans", "Spans accepted by the downstream.", registry=r
        )
        self.forwarded_requests = Counter(
            "otelsignals_exporter_sent_requests",
            "Export requests accepted by the downstream.",
            ["signal"],
            registry=r,
        )
        self.export_retries = Counter(
            "otelsignals_exporter_retries",
            "Export attempts that failed with a retryable error.",
            ["reason"],
            registry=r,
        )
        self.export_failures = Counter(
            "otelsignals_exporter_failed_requests",
            "Export requests given up: permanent error or retries exhausted.",
            ["reason"],
            registry=r,
        )
        self.dropped_requests = Counter(
            "otelsignals_exporter_dropped_requests",
            "Export requests lost by the exporter (given up, or left at shutdown without a disk "
            "queue), by signal and reason: metrics and logs pass through as whole requests, so "
            "their losses show here and not in otelsignals_dropped_spans.",
            ["signal", "reason"],
            registry=r,
        )
        self.dropped_spans = Counter(
            "otelsignals_dropped_spans",
            "Spans lost, by stage and reason. Healthy pipelines keep this at zero.",
            ["stage", "reason"],
            registry=r,
        )
        self.downstream_rejected_spans = Counter(
            "otelsignals_exporter_downstream_rejected_spans",
            "Spans the downstream reported as rejected in partial_success.",
            registry=r,
        )
        self.export_delivery = Histogram(
            "otelsignals_exporter_delivery_seconds",
            "Time from a batch's entry into the export queue to the downstream's last answer about it "
            "(accepted or given up): the wait for a sender, the request and any retries.",
            ["signal"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_bytes = Gauge(
            "otelsignals_exporter_queue_bytes", "Bytes waiting in the export queue.", registry=r
        )
        self.queue_batches = Gauge(
            "otelsignals_exporter_queue_batches", "Batches waiting in the export queue.", registry=r
        )
        self.wal_bytes = Gauge(
            "otelsignals_exporter_disk_queue_bytes", "Bytes held by the on-disk queue.", registry=r
        )
        self.problems = ProblemLog(log_summary_interval)


@dataclass
class _ProblemKind:
    last_line_at: float  # when a line about this kind was last logged
    message: str  # the latest occurrence's, for the summary
    fields: dict[str, object]
    unlogged: int = 0  # occurrences since that line, not logged one by one
    failing: bool = True  # no recovery reported since the latest occurrence
    announced: bool = True  # the current incident's start was logged (so its end will be)


class ProblemLog:
    """The log's side of problems that repeat: each kind is logged when it starts; repeats are
    counted and summarised in one line at most every ``summary_interval``; when the caller reports
    that the kind is over (the downstream or a store works again), one line says so.

    Bad input tends to arrive in floods from one misbehaving client, and a downstream that is down
    fails every batch: a line each would drown the log, while /metrics has the exact counts. A kind
    that flaps (fails, works, fails again within ``summary_interval``) does not get a line per flap:
    a failure that soon after the kind's last line is counted, and its recovery is not reported.
    :meth:`recovered` takes prefixes of kind names, so related kinds (``export_retry_unavailable``,
    ``export_retry_http_503``: ``export_retry_``) end together. ``clock`` is injectable for tests."""

    def __init__(
        self, summary_interval: float = DEFAULT_SUMMARY_INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.summary_interval = summary_interval
        self._clock = clock
        self._kinds: dict[str, _ProblemKind] = {}
        self._unlogged_kinds = 0  # kinds holding a count not yet summarised: tick() is free without
        self._lock = threading.Lock()

    def warning(self, kind: str, message: str, **fields: object) -> None:
        """One occurrence of ``kind``; logged if it starts an incident, else counted."""
        now = self._clock()
        line: _LogLine | None
        with self._lock:
            state = self._kinds.get(kind)
            if state is None:
                self._kinds[kind] = _ProblemKind(now, message, fields)
                line = self._start_line(kind, message, fields, repeats=0)
            elif not state.failing and now - state.last_line_at >= self.summary_interval:
                # A new incident, long enough after the last line about this kind to be told apart.
                line = self._start_line(kind, message, fields, repeats=state.unlogged)
                self._set_unlogged(state, 0)
                state.message, state.fields = message, fields
                state.last_line_at, state.failing, state.announced = now, True, True
            else:
                state.message, state.fields = message, fields
                self._set_unlogged(state, state.unlogged + 1)
                if not state.failing:  # failing again soon after its last line: counted only
                    state.failing, state.announced = True, False
                line = self._summary_line(kind, state, now) if self._summary_due(state, now) else None
        if line is not None:
            _emit(line)

    def recovered(self, kinds: str | tuple[str, ...], message: str, **fields: object) -> None:
        """The problems whose kind starts with ``kinds`` (a prefix, or several) are over: one line if
        any of them was failing with its start logged; their next occurrence starts a new incident."""
        now = self._clock()
        ended: dict[str, int] = {}  # kind -> its occurrences since its last line
        with self._lock:
            for kind, state in self._kinds.items():
                if not (state.failing and kind.startswith(kinds)):
                    continue
                state.failing = False
                if not state.announced:
                    continue  # its start was not logged either: its count goes in a summary
                state.announced = False
                ended[kind] = state.unlogged
                self._set_unlogged(state, 0)
                state.last_line_at = now
        if not ended:
            return
        repeats = sum(ended.values())
        since = f"; {repeats} occurrences since the last line" if repeats else ""
        names = ", ".join(f"'{kind}'" for kind in ended)
        _emit(
            _LogLine(
                logging.INFO,
                f"{message} ({names} over{since})",
                {"kind": ",".join(ended), "recovered": True, "repeats": repeats, **fields},
            )
        )

    def tick(self) -> None:
        """Logs the summaries that are due; called periodically (the pipeline's ticker), so a burst's
        count is reported even if the burst stopped."""
        if not self._unlogged_kinds:
            return
        now = self._clock()
        with self._lock:
            lines = [
                self._summary_line(kind, state, now)
                for kind, state in self._kinds.items()
                if self._summary_due(state, now)
            ]
        for line in lines:
            _emit(line)

    def _summary_due(self, state: _ProblemKind, now: float) -> bool:
        return state.unlogged > 0 and now - state.last_line_at >= self.summary_interval

    def _summary_line(self, kind: str, state: _ProblemKind, now: float) -> _LogLine:
        repeats, elapsed = state.unlogged, round(now - state.last_line_at)
        self._set_unlogged(state, 0)
        state.last_line_at = now
        return _LogLine(
            logging.WARNING,
            f"'{kind}' happened {repeats} more times in the last {_duration_text(elapsed)}; "
            f"the latest: {state.message}",
            {"kind": kind, "repeats": repeats, "ongoing": state.failing, **state.fields},
        )

    def _start_line(self, kind: str, message: str, fields: dict[str, object], repeats: int) -> _LogLine:
        earlier = f"; {repeats} occurrences before this were not logged" if repeats else ""
        return _LogLine(
            logging.WARNING,
            f"{message} (repeats of '{kind}' are counted in /metrics and summarised here at most every "
            f"{_duration_text(self.summary_interval)}{earlier})",
            {"kind": kind, **fields},
        )

    def _set_unlogged(self, state: _ProblemKind, count: int) -> None:
        self._unlogged_kinds += (count > 0) - (state.unlogged > 0)
        state.unlogged = count


@dataclass(frozen=True)
class _LogLine:
    level: int
    message: str
    fields: dict[str, object]


def _emit(line: _LogLine) -> None:
    """Outside the problem log's lock: a slow log handler must not hold up the threads reporting."""
    logger.log(line.level, "%s", line.message, extra={"fields": line.fields})


def _duration_text(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60:
        return f"{seconds / 60:g}m" if seconds % 60 == 0 else f"{seconds / 60:.1f}m"
    return f"{seconds:g}s"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if fields:
            line += " " + " ".join(f"{k}={v}" for k, v in fields.items())
        return line


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("otelsignals")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def metric_total(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """Sum of a metric's samples whose labels include ``labels`` (counters: the ``_total`` series)."""
    total = 0.0
    for family in registry.collect():
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name.endswith(("_created",)):
                continue
            if all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total
