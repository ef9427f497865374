"""The inline triage sampler (pipeline stage ``sampler``, off by default): after analysis, keep the
conversations worth a look and drop most of the rest, like the Collector's tail sampling but driven
by the signals.

Rules, first match wins (``Decision.reason`` names the rule):

=============================  =====  =========================================================
reason                         keep   when
=============================  =====  =========================================================
``severe`` / ``poor``          yes    the conversation's quality is in ``keep_qualities``;
                                      always, whatever the budgets
``trace``                      both   a part of a trace decided before (spans that came after
                                      the trace was released): without a conversation, decided as
                                      that part was; with one, by the rules, but kept when an
                                      earlier part was kept
``session``                    yes    an earlier trace of the same session was kept
``priority``                   yes    the conversation's triage priority (triage.py) is at least
                                      ``keep_priority``; takes from ``budget_per_minute``
``flagged``                    yes    the turn is flagged (🚩: disengagement, stagnation > 2,
                                      execution failure or loop) and ``keep_flagged``; takes
                                      from ``budget_per_minute``
``exemplar``                   yes    a good example: not flagged, and quality ``excellent`` or
                                      satisfaction shown with efficiency 1.0; up to
                                      ``exemplars_per_minute`` overall and
                                      ``exemplars_per_agent_per_minute`` per agent (and the
                                      total budget); over budget it falls through to the draw
``weighted:<category>``        yes    draw < baseline_rate + Σ weights of the categories the
                                      conversation has shown + ``priority_weight`` × priority
                                      ÷ 100; ``<category>`` is the heaviest (``priority`` when
                                      only the priority term raised the probability)
``baseline``                   yes    draw < baseline_rate (the uninformative middle)
``not_conversation``           both   the trace carries no analysed conversation: kept unless
                                      ``non_conversation_traces`` is ``drop``
``budget_exhausted``           no     a flagged / weighted / baseline keep refused by the budget
``exemplar_budget_exhausted``  no     an exemplar over its budget, not picked by the draw
``sampled_out``                no     the draw said no
=============================  =====  =========================================================

Determinism. The draw is ``blake2b(session key) → [0, 1)``, the session key being the
conversation key (else the trace id), so every replica draws the same number for a session and
every trace of a session draws the same number. Category counts are cumulative over the
conversation, so the keep probability of a session only grows: once its draw is under it, it stays
under. Budgets are token buckets (capacity and refill = the per-minute figure) and are **per
replica**: split the figures by the number of replicas. Only the budget refusals can differ between
replicas; the decision of the rules and the draw cannot.

Sessions. A session's traces are kept or dropped together, from the first kept trace on: once a
session is kept (for any reason), its later traces are kept with reason ``session``, without
taking budget. A session whose first trace already has a keep reason is therefore kept whole. A
session that turns interesting later (typically it turns severe at turn 4) is kept from that
turning point on: its earlier traces have already been forwarded or dropped, and a streaming stage
cannot recall them (tail sampling's limit: the decision can wait for a trace, not for a session).
Such sessions are counted in ``partial_sessions``. To keep whole sessions, raise ``baseline_rate``
or send everything to a backend with its own retention and use ``signals.sampled`` as a filter.
The per-session state is bounded by ``max_sessions`` (least recently seen forgotten, counted in
``forgotten_sessions``); a forgotten kept session is decided afresh on its next trace, and since
the draw is deterministic and the quality cumulative it is usually kept again.

Kept conversation traces get ``signals.sampled = true`` and ``signals.sample_reason`` on the
analysed span and the root span (never overwriting an existing attribute); ``not_conversation``
traces pass untouched. Decisions are counted by reason in ``kept`` / ``dropped``;
:class:`SamplerCollector` exposes them as ``otelsignals_sampler_kept_traces_total{reason}`` and
``otelsignals_sampler_dropped_traces_total{reason}``.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from opentelemetry.proto.trace.v1.trace_pb2 import Span
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from otelsignals.analysis import Analysis
from otelsignals.config import ConfigError, SamplerConfig
from otelsignals.otlp.wire import SpanRecord
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.pipeline.enricher import write_attribute
from otelsignals.signals.taxonomy import SATISFACTION

# Keep reasons: a quality bucket named in keep_qualities ("severe", "poor"), or one of these.
SAME_TRACE = "trace"  # keep or drop: as the trace's earlier part was
SESSION = "session"
PRIORITY = "priority"
FLAGGED = "flagged"
EXEMPLAR = "exemplar"
WEIGHTED = "weighted:"  # + the category
BASELINE = "baseline"
NOT_CONVERSATION = "not_conversation"  # keep or drop, per non_conversation_traces
# Drop reasons.
BUDGET_EXHAUSTED = "budget_exhausted"
EXEMPLAR_BUDGET_EXHAUSTED = "exemplar_budget_exhausted"
SAMPLED_OUT = "sampled_out"
_DROP_REASONS = frozenset((BUDGET_EXHAUSTED, EXEMPLAR_BUDGET_EXHAUSTED, SAMPLED_OUT))

SAMPLED_ATTRIBUTE = "signals.sampled"
REASON_ATTRIBUTE = "signals.sample_reason"
_UNKNOWN_AGENT = ""
# Decisions remembered by trace id, so that a part of a trace that comes after the trace was
# released (a late span, a span exported long after its parent) is decided as the rest was: a trace
# is never half kept. About 150 bytes each; the least recently decided forgotten beyond.
REMEMBERED_TRACES = 65_536
_DRAW_PERSON = b"otelsig-sampler"  # blake2b personalisation: the draw is the sampler's own hash


@dataclass(frozen=True, slots=True)
class Decision:
    keep: bool
    reason: str
    span_id: bytes | None = None  # the analysed span, annotated on keep (with the root span)


def session_draw(key: str) -> float:
    """The session's deterministic draw in [0, 1): the same on every replica and every run."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8, person=_DRAW_PERSON)
    return int.from_bytes(digest.digest(), "big") / 2.0**64


class TokenBucket:
    """``per_minute`` tokens a minute, refilled continuously, holding at most a minute's worth."""

    __slots__ = ("capacity", "rate", "stamp", "tokens")

    def __init__(self, per_minute: float, now: float) -> None:
        self.capacity = max(0.0, float(per_minute))
        self.rate = self.capacity / 60.0
        self.tokens = self.capacity
        self.stamp = now

    def available(self, now: float) -> bool:
        if now > self.stamp:
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
        return self.tokens >= 1.0

    def take(self) -> None:
        self.tokens -= 1.0


@dataclass(slots=True)
class _SessionState:
    kept: bool = False
    dropped: int = 0  # traces dropped before it was kept


class TriageSampler:
    def __init__(self, config: SamplerConfig | None = None, clock: Callable[[], float] = time.monotonic):
        self.config = config = config or SamplerConfig()
        problems = config.validate()
        if problems:
            raise ConfigError.from_problems(problems, "sampler")
        self._clock = clock
        self._keep_qualities = frozenset(config.keep_quality_names())
        # Heaviest first, so the reason names the category that weighs most.
        self._weights = sorted(
            ((category, float(weight)) for category, weight in config.category_weights.items()),
            key=lambda item: -item[1],
        )
        self._baseline = float(config.baseline_rate)
        self._keep_priority = float(config.keep_priority)
        self._priority_weight = float(config.priority_weight)
        now = clock()
        self._budget = TokenBucket(config.budget_per_minute, now)
        self._exemplars = TokenBucket(config.exemplars_per_minute, now)
        self._agent_buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._sessions: OrderedDict[str, _SessionState] = OrderedDict()
        # trace id → kept; read and written on the event loop and the analysis thread (decide())
        self._traces: OrderedDict[bytes, bool] = OrderedDict()
        self._traces_lock = threading.Lock()
        self.kept: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        # Traces without a conversation are decided on the event loop (AnalysisStage.take), the
        # others on the analysis thread: both count here.
        self._counting = threading.Lock()
        self.partial_sessions = 0  # kept from a turning point, after earlier traces were dropped
        self.forgotten_sessions = 0  # session states evicted by max_sessions

    def __len__(self) -> int:
        return len(self._sessions)

    # -- deciding -------------------------------------------------------------------------------
    def decide(self, trace_id: bytes, session_key: str | None, analysis: Analysis | None) -> Decision:
        """Keep or drop one released trace, after its analysis (None: no conversation in it). A
        trace decided before (this is a part that came late) is decided the same way. With neither
        an analysis nor a session key no session state is read, and any thread may ask
        (AnalysisStage.take does, on the event loop)."""
        with self._traces_lock:
            earlier = self._traces.get(trace_id)
        if earlier is not None and analysis is None:
            return self._keep(SAME_TRACE, None) if earlier else self._drop(SAME_TRACE)
        # A part with a conversation goes by the rules (a severe turn is kept, whatever came
        # before it); only a part already kept keeps the rest of its trace from being dropped.
        decision = self._decide(trace_id, session_key, analysis)
        if earlier and not decision.keep:
            decision = self._kept_instead(decision)
        with self._traces_lock:
            self._traces[trace_id] = decision.keep
            self._traces.move_to_end(trace_id)
            if len(self._traces) > REMEMBERED_TRACES:
                self._traces.popitem(last=False)
        return decision

    def _kept_instead(self, dropped: Decision) -> Decision:
        """A drop turned into a keep (an earlier part of the trace was kept): counted as such."""
        with self._counting:
            self.dropped[dropped.reason] -= 1
            if not self.dropped[dropped.reason]:
                del self.dropped[dropped.reason]
        return self._keep(SAME_TRACE, None)

    def _decide(self, trace_id: bytes, session_key: str | None, analysis: Analysis | None) -> Decision:
        if analysis is None:
            if session_key is not None:
                state = self._sessions.get(session_key)
                if state is not None and state.kept:
                    self._sessions.move_to_end(session_key)
                    return self._keep(SESSION, None)
            if self.config.non_conversation_traces == "drop":
                return self._drop(NOT_CONVERSATION)
            return self._keep(NOT_CONVERSATION, None)

        key = session_key or analysis.conversation_id or trace_id.hex()
        state = self._session(key)
        reason = self._rule(key, state, analysis)
        if reason in _DROP_REASONS:
            state.dropped += 1
            return self._drop(reason)
        if not state.kept:
            state.kept = True
            if state.dropped:
                self.partial_sessions += 1
        return self._keep(reason, analysis.span_id)

    def _rule(self, key: str, state: _SessionState, analysis: Analysis) -> str:
        score = analysis.score
        if score.quality in self._keep_qualities:
            return score.quality
        if state.kept:
            return SESSION
        now = self._clock()
        priority = analysis.priority.value
        if priority >= self._keep_priority:
            return self._take(PRIORITY, now)
        if self.config.keep_flagged and score.flagged:
            return self._take(FLAGGED, now)
        exemplar = self._is_exemplar(analysis)
        if exemplar:
            agent = self._agent_bucket(analysis.agent_id, now)
            if self._exemplars.available(now) and agent.available(now) and self._budget.available(now):
                self._exemplars.take()
                agent.take()
                self._budget.take()
                return EXEMPLAR
        draw = session_draw(key)
        if draw < self._baseline:
            return self._take(BASELINE, now)
        probability = self._baseline
        heaviest = None
        for category, weight in self._weights:
            if weight > 0 and score.counts.get(category, 0) > 0:
                probability += weight
                heaviest = heaviest or category
        probability += self._priority_weight * priority / 100.0
        if draw < probability and (heaviest is not None or priority > 0):
            return self._take(WEIGHTED + heaviest if heaviest is not None else PRIORITY, now)
        return EXEMPLAR_BUDGET_EXHAUSTED if exemplar else SAMPLED_OUT

    def _take(self, reason: str, now: float) -> str:
        if self._budget.available(now):
            self._budget.take()
            return reason
        return BUDGET_EXHAUSTED

    @staticmethod
    def _is_exemplar(analysis: Analysis) -> bool:
        score = analysis.score
        if score.flagged:
            return False
        if score.quality == "excellent":
            return True
        return score.counts.get(SATISFACTION, 0) > 0 and score.efficiency_score >= 1.0

    def _session(self, key: str) -> _SessionState:
        sessions = self._sessions
        state = sessions.get(key)
        if state is not None:
            sessions.move_to_end(key)
            return state
        state = sessions[key] = _SessionState()
        while len(sessions) > self.config.max_sessions:
            sessions.popitem(last=False)
            self.forgotten_sessions += 1
        return state

    def _agent_bucket(self, agent_id: str | None, now: float) -> TokenBucket:
        agent = agent_id or _UNKNOWN_AGENT
        buckets = self._agent_buckets
        bucket = buckets.get(agent)
        if bucket is not None:
            buckets.move_to_end(agent)
            return bucket
        bucket = buckets[agent] = TokenBucket(self.config.exemplars_per_agent_per_minute, now)
        while len(buckets) > self.config.max_agents:
            buckets.popitem(last=False)
        return bucket

    def _keep(self, reason: str, span_id: bytes | None) -> Decision:
        with self._counting:
            self.kept[reason] += 1
        return Decision(True, reason, span_id)

    def _drop(self, reason: str) -> Decision:
        with self._counting:
            self.dropped[reason] += 1
        return Decision(False, reason)

    # -- applying -------------------------------------------------------------------------------
    def apply(self, trace: ReleasedTrace, decision: Decision) -> list[SpanRecord]:
        """The spans to forward: none on drop; on keep, the trace's spans with ``signals.sampled``
        and ``signals.sample_reason`` on the analysed span and the root span (added only where
        absent; ``trace.size`` follows). ``not_conversation`` traces are forwarded untouched."""
        if not decision.keep:
            return []
        if decision.reason in (NOT_CONVERSATION, SAME_TRACE):  # (a late part: annotated before)
            return trace.spans
        for record in trace.spans:
            if record.span_id != decision.span_id and not record.is_local_root:
                continue
            span = Span.FromString(record.data)
            present = {kv.key for kv in span.attributes}
            changed = False
            if SAMPLED_ATTRIBUTE not in present:
                write_attribute(span.attributes.add(), SAMPLED_ATTRIBUTE, True)
                changed = True
            if REASON_ATTRIBUTE not in present:
                write_attribute(span.attributes.add(), REASON_ATTRIBUTE, decision.reason)
                changed = True
            if changed:
                data = span.SerializeToString()
                trace.size += len(data) - len(record.data)
                record.data = data
        return trace.spans


class SamplerCollector:
    """A Prometheus collector reading the sampler's counts at scrape time (nothing per trace)."""

    def __init__(self, sampler: TriageSampler) -> None:
        self.sampler = sampler

    def describe(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        return self.collect(empty=True)

    def collect(self, empty: bool = False) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        sampler = self.sampler
        for name, help_text, counts in (
            ("otelsignals_sampler_kept_traces", "Traces kept by the triage sampler, by rule.", sampler.kept),
            (
                "otelsignals_sampler_dropped_traces",
                "Traces dropped by the triage sampler, by why (budget_exhausted, sampled_out, ...).",
                sampler.dropped,
            ),
        ):
            family = CounterMetricFamily(name, help_text, labels=["reason"])
            if not empty:
                for reason, value in sorted(dict(counts).items()):
                    family.add_metric([reason], value)
            yield family
        partial = CounterMetricFamily(
            "otelsignals_sampler_partial_sessions",
            "Sessions kept from a turning point on, after some of their traces had been dropped.",
        )
        forgotten = CounterMetricFamily(
            "otelsignals_sampler_forgotten_sessions",
            "Session keep states forgotten because sampler.max_sessions was reached.",
        )
        tracked = GaugeMetricFamily("otelsignals_sampler_sessions", "Sessions whose keep state is held.")
        if not empty:
            partial.add_metric([], sampler.partial_sessions)
            forgotten.add_metric([], sampler.forgotten_sessions)
            tracked.add_metric([], len(sampler))
        yield partial
        yield forgotten
        yield tracked


def create_sampler(config: SamplerConfig, registry: CollectorRegistry) -> TriageSampler | None:
    """The triage sampler of the ``sampler`` section, its decisions served as metrics; None when
    the section is not enabled (every trace is forwarded)."""
    if not config.enabled:
        return None
    sampler = TriageSampler(config)
    registry.register(SamplerCollector(sampler))
    return sampler
