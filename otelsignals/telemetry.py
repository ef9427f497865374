"""The process's own telemetry: Prometheus metrics and structured logs.

Each pipeline owns a :class:`Telemetry` with its own registry, so several pipelines can live in one
process (tests do that) without sharing counters.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

logger = logging.getLogger("otelsignals")


class Telemetry:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
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
            "otelsignals_assembler_buffered_bytes", "Bytes of spans waiting in the trace buffer.", registry=r
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
        self.queue_bytes = Gauge(
            "otelsignals_exporter_queue_bytes", "Bytes waiting in the export queue.", registry=r
        )
        self.queue_batches = Gauge(
            "otelsignals_exporter_queue_batches", "Batches waiting in the export queue.", registry=r
        )
        self.wal_bytes = Gauge(
            "otelsignals_exporter_disk_queue_bytes", "Bytes held by the on-disk queue.", registry=r
        )
        self.logged_once = LogOnce()


class LogOnce:
    """Logs the first occurrence of each kind of problem; later ones are only counted.

    Bad input tends to arrive in floods from one misbehaving client; one line per kind keeps the log
    readable while /metrics keeps the count.
    """

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def warning(self, kind: str, message: str, **fields: object) -> None:
        with self._lock:
            if kind in self._seen:
                return
            self._seen.add(kind)
        logger.warning(
            "%s (further '%s' problems are counted in /metrics, not logged)",
            message,
            kind,
            extra={"fields": {"kind": kind, **fields}},
        )


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
