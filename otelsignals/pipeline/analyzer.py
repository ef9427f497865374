"""The analysis stage: released traces in, analysed conversation turns out.

Only spans that pass the GenAI pre-filter are parsed; everything else goes on to the exporter
exactly as it came. GenAI spans are read by the convention readers and merged into the state of
their conversation, which outlives the trace; the detectors then look at what the trace added and
the conversation is scored as it stands.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable

from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from otelsignals.analysis import Analysis, analyze_update
from otelsignals.compaction import expansions
from otelsignals.config import AnalyzerConfig, EvalsConfig, SessionsConfig, SignalsConfig
from otelsignals.conventions.base import SpanReading, SpanView
from otelsignals.conventions.decoding import key_values
from otelsignals.conventions.memory import ConversationMemory
from otelsignals.conventions.span_decoder import SerializedSpan, SpanDecoder
from otelsignals.conversation import ConversationState, TraceUpdate, agent_id_of, apply_trace
from otelsignals.evals.embeddings import Embedder, OpenAIEmbedder, default_embedder
from otelsignals.evals.per_trace import trace_signals
from otelsignals.limits import TextLimits, cap_reading
from otelsignals.otlp.wire import ScopeContext, SpanRecord, SplitRequest
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.pipeline.llm_endpoints import OpenAIEmbeddingsEndpoint
from otelsignals.pipeline.log_events import LogEventBuffer
from otelsignals.pipeline.sessions import SessionStore
from otelsignals.telemetry import Telemetry
from otelsignals.triage import AgentBaselines

logger = logging.getLogger("otelsignals.analyzer")

_CONTEXT_CACHE_LIMIT = 4096
READ_SPANS_KEPT = 50_000
# Messages before a trace's new ones kept as plain text for the detectors to look back over (they
# read further back rarely: a phrase detector's seeding, up to 50); older ones are compacted
# (compaction.compact) and expanded when read. As many as the recent texts a conversation keeps to
# share (conversation.SHARED_VALUES), whose texts compaction leaves plain anyway while they are
# kept: 32 kept 6 % more state on the agent workload. What it costs is reading back: 35 texts in
# the workload's 1,252 traces instead of 18, and when every trace finds its conversation cold (its
# history paired by value, rephrase and repetition preparing their windows again) 53,026 instead of
# 38,410, about 0.1 ms a trace (bench/RESULTS.md, twenty-third session).
PLAIN_MESSAGES = 16


def _slim(attributes: dict) -> dict:
    """A span's short attributes (operation, model, tokens…), without the long content values."""
    return {
        k: v
        for k, v in attributes.items()
        if isinstance(v, bool | int | float) or (isinstance(v, str) and len(v) <= 256)
    }


class Analyzer:
    def __init__(
        self,
        telemetry: Telemetry,
        sessions: SessionsConfig | None = None,
        signals: SignalsConfig | None = None,
        evals: EvalsConfig | None = None,
        limits: AnalyzerConfig | None = None,
    ) -> None:
        self.telemetry = telemetry
        self._compacted_reads = expansions()  # counted process-wide: this analyzer reports the increase
        limits = limits or AnalyzerConfig()
        self.limits = TextLimits(
            int(limits.max_message_bytes), int(limits.max_messages_per_span), int(limits.max_span_text_bytes)
        )
        self.config = sessions or SessionsConfig()
        self.signals = signals or SignalsConfig()
        self.sessions = SessionStore(
            self.config.ttl,
            self.config.max_sessions,
            self._on_evict,
            max_bytes=int(self.config.max_bytes),
            cold_after=self.config.cold_after,
        )
        # What is usual per agent (conversation length, tool calls), for the triage priority.
        self.agent_baselines = AgentBaselines()
        # Decodes and reads the GenAI spans; used on the analysis thread only, like the sessions
        # (but for mark_spans, on the event loop, which only reads its markers).
        self.decoder = SpanDecoder(key_attributes=self.config.key_attributes)
        # A request's resource and scope, read once for every request that sends the same bytes (each
        # request has ScopeContext objects of its own, equal only to themselves: keyed by their bytes).
        self._contexts: dict[tuple[bytes | None, bytes | None], tuple[dict, str]] = {}
        self.log_events = LogEventBuffer(on_forget=telemetry.log_events.labels("forgotten").inc)
        # Spans read without content, for log-record events that arrive after them: (trace id, span
        # id) → (conversation key, the span's short attributes).
        self._read_spans: OrderedDict[tuple[bytes, bytes], tuple[str, dict]] = OrderedDict()
        self.evals = evals or EvalsConfig(trace_metrics=False)
        self._disabled = frozenset(self.signals.disable)
        self.embedder: Embedder | None = None
        # The remote embeddings endpoint owns a thread and an HTTP session: closed by close().
        self._embeddings_endpoint: OpenAIEmbeddingsEndpoint | None = None
        if self.evals.trace_metrics and self.evals.embeddings_url:
            self._embeddings_endpoint = OpenAIEmbeddingsEndpoint(self.evals.embeddings_url)
            self.embedder = OpenAIEmbedder(self._embeddings_endpoint, self.evals.embeddings_model)
        elif self.evals.trace_metrics:
            self.embedder = default_embedder(self.evals.model_cache_dir)
        # Called with (state, reason) when a session closes: idle (ttl) or evicted (capacity).
        self.on_session_closed: Callable[[ConversationState, str], None] | None = None

    def close(self) -> None:
        """Releases the remote embeddings endpoint's thread and connections (when there is one)."""
        if self._embeddings_endpoint is not None:
            self._embeddings_endpoint.close()

    def process(self, trace: ReleasedTrace) -> Analysis | None:
        """Analyse ``trace``'s part of its conversation; None when it carries no conversation."""
        update = self.assemble(trace)
        if update is None:
            return None
        state = self.sessions.get(update.key)
        assert state is not None, "assemble() just touched it"
        try:
            analysis = analyze_update(
                state, update, self.signals.baseline_user_turns, self.agent_baselines, self._disabled
            )
            analysis.late_part = not self._record_trace(state, update, analysis)
        finally:
            # Counted once the trace's records are in (its signals, metrics, latest answer), and
            # when the analysis failed (an embeddings endpoint down): the merged messages count.
            self._resize(update.key)
        telemetry = self.telemetry
        for signal in analysis.new_signals:
            telemetry.detected_signals.labels(signal.type).inc()
        score = analysis.score
        telemetry.analysed_turns.labels(score.quality, "true" if score.flagged else "false").inc()
        telemetry.conversation_turns.observe(score.turn_count)
        return analysis

    def mark_spans(self, split: SplitRequest, request: bytes | None) -> None:
        """Mark whether each span record of a request holds a GenAI key prefix, on the event loop
        (it only reads the decoder's markers): a trace none of whose spans holds one then skips the
        analysis thread (AnalysisStage.take), and the analysis does not search a marked span again.
        Records cut from the request's bytes ``request`` are searched there, a few searches over
        the request rather than a few per span: searching span by span took a sixth of the
        sidecar's CPU on plain traffic (bench/RESULTS.md, 2026-11-29). Records serialized again (a
        span may then be framed otherwise) and those of OTLP/JSON requests are searched one by one."""
        records, starts = split.records, split.starts
        if starts is not None and request is not None:
            ends = [start + len(record.data) for start, record in zip(starts, records, strict=True)]
            marks = self.decoder.slices_might_carry_genai(request, starts, ends)
            for record, mark in zip(records, marks, strict=True):
                record.may_carry_genai = mark
            return
        might_carry_genai = self.decoder.might_carry_genai
        for record in records:
            record.may_carry_genai = might_carry_genai(record.data)

    def assemble(self, trace: ReleasedTrace) -> TraceUpdate | None:
        """Read ``trace``'s GenAI spans into its conversation; None when it carries no conversation."""
        if not trace.analyzable:
            return None
        decoder = self.decoder
        candidates = []
        for record in trace.spans:
            marked = record.may_carry_genai  # searched on intake (mark_spans), or None
            if marked or (marked is None and decoder.might_carry_genai(record.data)):
                candidates.append(record)
        if not candidates:
            return None
        self.telemetry.genai_spans.inc(len(candidates))
        candidate_ids = {id(record) for record in candidates}
        key_records = [
            record
            for record in trace.spans
            if id(record) not in candidate_ids and decoder.might_name_conversation(record.data)
        ]
        decoded = decoder.decode_trace(
            trace.trace_id,
            [self._serialized(record) for record in candidates],
            [self._serialized(record) for record in key_records],
            self._memory_of,
        )
        if decoded.undecodable:
            self.telemetry.unreadable_spans.labels("undecodable").inc(decoded.undecodable)
        views = decoded.genai + decoded.others
        for view in views:
            self._join_log_events(view)
        key, memory = decoded.key, decoded.memory
        readings: list[tuple[SpanView, SpanReading]] = []
        for view in decoded.genai:
            reading = self._read(view, memory)
            if reading is not None:
                readings.append((view, reading))
        if not readings:
            return None
        state = self.sessions.touch(key)
        state.decoder_memory = memory
        for view, reading in readings:
            if not (reading.input_messages or reading.output_messages or reading.tool_execution):
                # Its content may still come as log records: remember what identifies the call. (A
                # tool span carries its call and result as attributes, never as log records: most
                # GenAI spans of a tool-using agent, ~1 KB each here, for nothing.)
                self._read_spans[(view.trace_id, view.span_id)] = (key, _slim(view.attributes))
        while len(self._read_spans) > READ_SPANS_KEPT:
            self._read_spans.popitem(last=False)
        if state.conversation.agent_id is None:
            state.conversation.agent_id = agent_id_of(views)
        parents = {record.span_id: record.parent_span_id for record in trace.spans}
        update = apply_trace(state, trace.trace_id, readings, parents)
        self._merged(state, update)
        telemetry = self.telemetry
        telemetry.genai_traces.labels("captured" if update.content_captured else "absent").inc()
        telemetry.assembled_messages.inc(update.new_messages)
        return update

    def _read(self, view: SpanView, memory: ConversationMemory) -> SpanReading | None:
        """What one span gives the analysis, cut to ``analyzer.*`` (limits.py, counted); None when
        its convention reader finds nothing, or fails: a reader bug must not cost the other spans
        their analysis."""
        try:
            reading = self.decoder.read(view, memory)
        except Exception:
            self.telemetry.unreadable_spans.labels("reader_error").inc()
            self.telemetry.problems.warning("reader_error", "a convention reader failed on a span")
            logger.debug("reader failure", exc_info=True)
            return None
        if reading is None:
            return None
        cut: Counter[str] = Counter()
        cap_reading(reading, self.limits, cut, memory)
        for reason, count in cut.items():
            self.telemetry.truncated_for_analysis.labels(reason).inc(count)
            self.telemetry.problems.warning(
                f"truncated_{reason}", f"text cut for the analysis ({reason}; see analyzer.* in the config)"
            )
        return reading

    def _merged(self, state: ConversationState, update: TraceUpdate) -> None:
        """After ``update`` was merged into ``state``: the conversation trimmed to
        ``sessions.max_messages``, its older messages compacted (its size is counted once the
        trace is analysed: _resize)."""
        trimmed = state.trim(self.config.max_messages)
        if trimmed:
            # Indices moved: the trace's new messages now start that much earlier.
            update.first_new_message = max(0, update.first_new_message - trimmed)
            self.telemetry.trimmed_messages.inc(trimmed)
        self.telemetry.compacted_messages.inc(state.compact(update.first_new_message - PLAIN_MESSAGES))

    def apply_late_log_events(self) -> list[Analysis]:
        """Content that came as log records after its span was analysed: read it into the
        conversation now (the span itself has left; the conversation and its signals catch up)."""
        analyses = []
        for trace_id, span_id in self.log_events.waiting_spans():
            known = self._read_spans.get((trace_id, span_id))
            if known is None:
                continue
            key, attributes = known
            events = self.log_events.take(trace_id, span_id)
            state = self.sessions.get(key)
            if state is None:
                continue
            view = SpanView(trace_id, span_id, attributes=attributes, events=events)
            reading = self._read(view, state.decoder_memory)
            if reading is None or not (reading.input_messages or reading.output_messages):
                continue
            self.sessions.touch(key)  # content that came late is the conversation's activity
            reading.llm_call = None  # the model call was counted when the span was read
            state.seen_spans.discard(span_id)
            update = apply_trace(state, trace_id, [(view, reading)])
            self._merged(state, update)
            try:
                analyses.append(
                    analyze_update(
                        state, update, self.signals.baseline_user_turns, self.agent_baselines, self._disabled
                    )
                )
            finally:
                self._resize(key)
        return analyses

    def expire(self) -> None:
        self.sessions.expire()
        self.telemetry.sessions_cooled.labels("idle").inc(self.sessions.cool_idle())
        self.log_events.expire()
        self.telemetry.conversations.set(len(self.sessions))
        self.telemetry.cold_conversations.set(self.sessions.cold)
        self.telemetry.conversation_bytes.set(self.sessions.bytes)

    def _resize(self, key: str) -> None:
        """Count what the conversation now holds; past sessions.max_bytes, older ones go cold, then
        are evicted."""
        reads = expansions()
        self.telemetry.compacted_reads.inc(max(0, reads - self._compacted_reads))
        self._compacted_reads = reads
        self.telemetry.sessions_cooled.labels("bytes").inc(self.sessions.resize(key))
        self.telemetry.conversations.set(len(self.sessions))
        self.telemetry.cold_conversations.set(self.sessions.cold)
        self.telemetry.conversation_bytes.set(self.sessions.bytes)

    def _serialized(self, record: SpanRecord) -> SerializedSpan:
        resource, scope_name = self._context(record.context)
        return SerializedSpan(record.data, resource, scope_name)

    def _memory_of(self, key: str) -> ConversationMemory | None:
        state = self.sessions.get(key)
        return state.decoder_memory if state is not None else None

    def _join_log_events(self, view: SpanView) -> None:
        """Content some instrumentations send as log records, joined back to its span (in a new
        list: the view's own events may be the conversation's decode memo's, which never change)."""
        joined = self.log_events.take(view.trace_id, view.span_id)
        if joined:
            view.events = [*view.events, *joined]

    def _context(self, context: ScopeContext) -> tuple[dict, str]:
        key = (context.resource, context.scope)
        cached = self._contexts.get(key)
        if cached is None:
            if len(self._contexts) >= _CONTEXT_CACHE_LIMIT:
                self._contexts.clear()
            resource = (
                key_values(Resource.FromString(context.resource).attributes) if context.resource else {}
            )
            scope = InstrumentationScope.FromString(context.scope).name if context.scope else ""
            cached = self._contexts[key] = (resource, scope)
        return cached

    def _record_trace(self, state: ConversationState, update: TraceUpdate, analysis: Analysis) -> bool:
        """Keep what the session metrics need of this trace (once per trace: late parts add nothing);
        False for a late part."""
        if any(trace_id == update.trace_id for trace_id, _ in state.trace_spans):
            return False
        state.trace_spans.append((update.trace_id, update.analysed_span_id or b""))
        state.turn_latencies_ms.append(analysis.latency_ms)
        calls = [c.start_time_unix_nano for c in update.llm_calls if c.start_time_unix_nano]
        if calls and not state.first_seen_ns:
            state.first_seen_ns = min(calls)
        new_messages = state.conversation.messages[update.first_new_message :]
        state.record_trace_end(update.trace_id)
        metrics, output = trace_signals(
            update.trace_id.hex(), new_messages, analysis.new_signals, state.previous_outputs, self.embedder
        )
        state.trace_signals.append(metrics)
        if output is not None:
            state.previous_outputs.append(output)
        return True

    def _on_evict(self, state: ConversationState, reason: str) -> None:
        self.telemetry.session_evictions.labels(reason).inc()
        if self.on_session_closed is not None:
            try:
                self.on_session_closed(state, reason)
            except Exception:  # a failing session summary must not stop expiry
                self.telemetry.problems.warning("session_close_error", "summarising a closed session failed")
                logger.debug("session close failure", exc_info=True)


def create_analyzer(
    config: AnalyzerConfig,
    sessions: SessionsConfig,
    signals: SignalsConfig,
    evals: EvalsConfig,
    telemetry: Telemetry,
    on_session_closed: Callable[[ConversationState, str], None],
) -> Analyzer:
    """The analyzer of the ``analyzer`` section (its text limits) and the sections it reads:
    conversation state (``sessions``), detectors (``signals``) and per-trace metrics (``evals``).
    ``on_session_closed`` receives each session it closes."""
    analyzer = Analyzer(telemetry, sessions, signals, evals, config)
    analyzer.on_session_closed = on_session_closed
    return analyzer
