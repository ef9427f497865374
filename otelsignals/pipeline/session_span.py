"""The ``otelsignals.session`` span: a closed session's scores, as a span of its own trace, linked
to the session's traces, so a trace backend can find a session's verdict next to its traces.

It carries no message text whatever ``signals.snippets`` says: the session id (also as ``session.id``
and ``signals.conversation.id``), the agent, the close reason, counts, and the session metrics'
scores, reasons and metadata, which are numbers, trace ids and signal names
(``tests/test_privacy.py`` checks it with PII markers). README.md lists every attribute.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otelsignals.conversation import UNKNOWN_AGENT, ConversationState
from otelsignals.evals.session_metrics import agent_consistency, agent_reliability
from otelsignals.otlp.wire import ScopeContext, SpanRecord
from otelsignals.pipeline.enricher import write_attribute as _set
from otelsignals.pipeline.index_writer import IndexWriter
from otelsignals.pipeline.reputation_recorder import ReputationRecorder, session_evaluation
from otelsignals.scoring import score
from otelsignals.telemetry import Telemetry

SPAN_NAME = "otelsignals.session"
_RESOURCE = Resource()
_service = _RESOURCE.attributes.add()
_service.key, _service.value.string_value = "service.name", "otelsignals"
_SCOPE = InstrumentationScope(name="otelsignals")
_CONTEXT = ScopeContext(_RESOURCE.SerializeToString(), "", _SCOPE.SerializeToString(), "")


def session_span(
    session_id: str,
    agent_id: str | None,
    traces: Iterable[tuple[bytes, bytes]],
    metrics: Iterable[Any],
    reason: str,
    start_ns: int,
    end_ns: int,
) -> SpanRecord:
    """``traces`` are (trace id, span id) of the session's analysed spans; ``metrics`` carry
    ``name, score, passed, reason, metadata`` (SPEC §6's session metrics)."""
    span = Span(
        trace_id=os.urandom(16),
        span_id=os.urandom(8),
        name=SPAN_NAME,
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=max(end_ns, start_ns),
    )
    traces = list(traces)
    _set(span.attributes.add(), "otelsignals.session.id", session_id)
    # The same session under the names queries already use: session.id as the instrumentation
    # conventions spell it, and the grouping keys of the enriched spans.
    _set(span.attributes.add(), "session.id", session_id)
    _set(span.attributes.add(), "signals.conversation.id", session_id)
    _set(span.attributes.add(), "signals.agent.id", agent_id or UNKNOWN_AGENT)
    _set(span.attributes.add(), "otelsignals.session.close_reason", reason)
    _set(span.attributes.add(), "otelsignals.session.trace_count", len(traces))
    if agent_id:
        _set(span.attributes.add(), "gen_ai.agent.id", agent_id)
    for metric in metrics:
        prefix = f"signals.{metric.name}"
        if metric.score is not None:
            _set(span.attributes.add(), f"{prefix}.score", float(metric.score))
        _set(span.attributes.add(), f"{prefix}.passed", bool(metric.passed))
        _set(span.attributes.add(), f"{prefix}.reason", metric.reason)
        _set(span.attributes.add(), f"{prefix}.metadata", orjson.dumps(metric.metadata, default=str).decode())
    for trace_id, span_id in traces:
        link = span.links.add()
        link.trace_id, link.span_id = trace_id, span_id
    data = span.SerializeToString()
    return SpanRecord(span.trace_id, span.span_id, b"", data, _CONTEXT)


class SessionCloser:
    """What a closed session leaves (the analyzer calls :meth:`close` on the analysis thread): its
    verdict goes downstream as an ``otelsignals.session`` span, and counts as one evaluation of its
    agent's reputation."""

    def __init__(
        self,
        thresholds: Callable[[str], float],  # a metric's pass threshold (evals.threshold_for)
        baseline_user_turns: int,
        telemetry: Telemetry,
        on_event_loop: Callable[[Callable[[], None]], None],
        forward: Callable[[list[SpanRecord], int], None],
        reputation: ReputationRecorder | None = None,
        index_writer: IndexWriter | None = None,
    ) -> None:
        self.thresholds = thresholds
        self.index_writer = index_writer
        self.baseline_user_turns = baseline_user_turns
        self.telemetry = telemetry
        self._on_event_loop = on_event_loop
        self._forward = forward
        self.reputation = reputation

    def close(self, state: ConversationState, reason: str) -> None:
        traces = list(state.trace_signals)
        metrics = [
            agent_reliability(traces, threshold=self.thresholds("agent_reliability")),
            agent_consistency(traces, threshold=self.thresholds("agent_consistency")),
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
        # The exporter lives on the event loop.
        self._on_event_loop(lambda: self._forward([record], len(record.data)))
        self.telemetry.sessions_closed.labels(reason).inc()
        if self.index_writer is not None:
            self.index_writer.record(state, closed=True, session_metrics=metrics)
        if self.reputation is not None and state.trace_spans:
            final = score(state.conversation, state.leaf_counts, self.baseline_user_turns)
            self.reputation.submit_evaluation(
                session_evaluation(
                    state.conversation.agent_id,
                    final.quality,
                    dict(state.leaf_counts),
                    list(state.turn_latencies_ms),
                    time.time(),
                )
            )
