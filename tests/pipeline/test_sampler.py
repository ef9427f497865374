"""The triage sampler: always-keep rules, budgets, deterministic draws, sessions kept together,
the attributes it writes and the counts it keeps."""

from __future__ import annotations

import math

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from prometheus_client import CollectorRegistry

from otelsignals.analysis import Analysis
from otelsignals.config import ConfigError
from otelsignals.otlp.wire import ScopeContext, SpanRecord
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.pipeline.enricher import write_attribute
from otelsignals.pipeline.sampler import (
    SamplerCollector,
    SamplerConfig,
    TriageSampler,
    session_draw,
)
from otelsignals.scoring import Score
from otelsignals.signals.taxonomy import CATEGORIES
from otelsignals.telemetry import metric_total
from otelsignals.triage import Priority

CONTEXT = ScopeContext(None, "", None, "")
SCORES = {"excellent": 80.0, "good": 65.0, "neutral": 50.0, "poor": 30.0, "severe": 0.0}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def analysis(
    conversation: str = "c",
    quality: str = "neutral",
    flagged: bool = False,
    counts: dict[str, int] | None = None,
    efficiency: float = 1.0,
    agent: str | None = "agent-a",
    span_id: bytes = b"\x02" * 8,
    priority: float = 0.0,
) -> Analysis:
    all_counts = dict.fromkeys(CATEGORIES, 0) | (counts or {})
    score = Score(
        quality=quality,
        quality_score={"excellent": 80.0, "good": 65.0, "neutral": 50.0, "poor": 30.0, "severe": 0.0}[
            quality
        ],
        efficiency_score=efficiency,
        flagged=flagged,
        counts=all_counts,
        leaf_counts={},
        user_turns=2,
        turn_count=4,
        tools_used=False,
    )
    return Analysis(conversation, b"\x01" * 16, span_id, agent, score, priority=Priority(priority, {}, []))


def tid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def exemplar(conversation: str, agent: str = "agent-a") -> Analysis:
    return analysis(conversation, "excellent", counts={"interaction.satisfaction": 1}, agent=agent)


def sampler(clock: Clock | None = None, **options: object) -> TriageSampler:
    return TriageSampler(SamplerConfig(enabled=True, **options), clock=clock or Clock())  # type: ignore[arg-type]


def keys_with_draw(below: float | None = None, above: float | None = None, n: int = 1) -> list[str]:
    """Session keys whose deterministic draw is below / above a bound."""
    found = []
    i = 0
    while len(found) < n:
        key = f"session-{i}"
        draw = session_draw(key)
        if (below is None or draw < below) and (above is None or draw >= above):
            found.append(key)
        i += 1
    return found


# -- always-keep rules ----------------------------------------------------------------------------
def test_severe_and_poor_are_kept_even_with_zero_budget() -> None:
    s = sampler(budget_per_minute=0, exemplars_per_minute=0, baseline_rate=0.0)
    for i in range(100):
        d = s.decide(tid(i), f"sev-{i}", analysis(f"sev-{i}", "severe", flagged=True))
        assert (d.keep, d.reason) == (True, "severe")
        d = s.decide(tid(1000 + i), f"poor-{i}", analysis(f"poor-{i}", "poor", flagged=True))
        assert (d.keep, d.reason) == (True, "poor")
    # Outside the always-keep rules, nothing fits in a zero budget.
    d = s.decide(tid(5000), "flag", analysis("flag", "neutral", flagged=True))
    assert (d.keep, d.reason) == (False, "budget_exhausted")
    assert s.kept == {"severe": 100, "poor": 100}


def test_flagged_kept_within_budget_then_refused_and_refilled() -> None:
    clock = Clock()
    s = sampler(clock, budget_per_minute=3)
    reasons = [s.decide(tid(i), f"f{i}", analysis(f"f{i}", flagged=True)).reason for i in range(5)]
    assert reasons == ["flagged"] * 3 + ["budget_exhausted"] * 2
    clock.now += 20  # a third of a minute refills one token
    assert s.decide(tid(9), "f9", analysis("f9", flagged=True)).reason == "flagged"
    assert s.decide(tid(10), "f10", analysis("f10", flagged=True)).reason == "budget_exhausted"


# -- exemplars ------------------------------------------------------------------------------------
def test_exemplar_budget_per_minute() -> None:
    clock = Clock()
    s = sampler(clock, exemplars_per_minute=5, exemplars_per_agent_per_minute=100, baseline_rate=0.0)
    first = [s.decide(tid(i), f"e{i}", exemplar(f"e{i}", agent=f"a{i}")) for i in range(8)]
    assert [d.reason for d in first] == ["exemplar"] * 5 + ["exemplar_budget_exhausted"] * 3
    assert not any(d.keep for d in first[5:])
    clock.now += 60  # a full minute: the bucket is full again (never more than a minute's worth)
    second = [s.decide(tid(100 + i), f"x{i}", exemplar(f"x{i}", agent=f"b{i}")) for i in range(8)]
    assert sum(d.keep for d in second) == 5


def test_exemplar_budget_per_agent() -> None:
    clock = Clock()
    s = sampler(clock, exemplars_per_minute=100, exemplars_per_agent_per_minute=2, baseline_rate=0.0)
    a = [s.decide(tid(i), f"a{i}", exemplar(f"a{i}", agent="A")).keep for i in range(4)]
    b = [s.decide(tid(10 + i), f"b{i}", exemplar(f"b{i}", agent="B")).keep for i in range(4)]
    assert a == [True, True, False, False]
    assert b == [True, True, False, False]  # agent A's excess does not use B's share
    clock.now += 30  # half a minute: one more for each
    assert s.decide(tid(20), "a9", exemplar("a9", agent="A")).keep
    assert not s.decide(tid(21), "a10", exemplar("a10", agent="A")).keep


def test_exemplar_definition() -> None:
    s = sampler(baseline_rate=0.0)
    satisfied_efficient = analysis("s1", "good", counts={"interaction.satisfaction": 2})
    satisfied_dragging = analysis("s2", "good", counts={"interaction.satisfaction": 2}, efficiency=0.6)
    excellent_but_flagged = analysis("s3", "excellent", flagged=True, counts={"execution.loops": 1})
    assert s.decide(tid(1), "s1", satisfied_efficient).reason == "exemplar"
    assert s.decide(tid(2), "s2", satisfied_dragging).reason == "sampled_out"
    assert s.decide(tid(3), "s3", excellent_but_flagged).reason == "flagged"


def test_exemplar_over_budget_still_gets_the_draw() -> None:
    key = keys_with_draw(below=0.05)[0]
    s = sampler(exemplars_per_minute=0, baseline_rate=0.05)
    assert s.decide(tid(1), key, exemplar(key)).reason == "baseline"


# -- the random draw --------------------------------------------------------------------------------
def test_baseline_rate_over_10000_sessions() -> None:
    rate = 0.05
    s = sampler(baseline_rate=rate, budget_per_minute=1e9)
    n = 10_000
    kept = sum(s.decide(tid(i), f"session-{i}", analysis(f"session-{i}")).keep for i in range(n))
    # Binomial(10 000, 0.05): sd ≈ 21.8; 4 sd either side. Deterministic: the draw is a hash.
    assert abs(kept - rate * n) < 4 * math.sqrt(n * rate * (1 - rate))
    assert s.kept["baseline"] == kept
    assert s.dropped["sampled_out"] == n - kept


def test_draws_are_uniform_and_stable() -> None:
    draws = [session_draw(f"k{i}") for i in range(10_000)]
    assert all(0.0 <= d < 1.0 for d in draws)
    assert abs(sum(draws) / len(draws) - 0.5) < 0.01
    assert session_draw("k1") == session_draw("k1")
    assert session_draw("k1") != session_draw("k2")


def test_category_weights_raise_the_keep_probability() -> None:
    n = 4000
    s = sampler(
        baseline_rate=0.05,
        budget_per_minute=1e9,
        category_weights={"environment.exhaustion": 0.5, "execution.failure": 1.0},
        keep_flagged=False,
    )
    exhausted = [
        s.decide(tid(i), f"x{i}", analysis(f"x{i}", counts={"environment.exhaustion": 1})) for i in range(n)
    ]
    kept = [d for d in exhausted if d.keep]
    assert abs(len(kept) / n - 0.55) < 4 * math.sqrt(0.55 * 0.45 / n)
    assert {d.reason for d in kept} == {"baseline", "weighted:environment.exhaustion"}
    # Weights add up; the reason names the heaviest category present.
    both = analysis("y", counts={"environment.exhaustion": 1, "execution.failure": 2}, flagged=True)
    assert s.decide(tid(n), "y", both).reason in ("baseline", "weighted:execution.failure")
    assert s.decide(tid(n + 1), "y", both).keep


def test_high_priority_is_kept_within_budget_ahead_of_the_draw() -> None:
    s = sampler(baseline_rate=0.0, budget_per_minute=2, keep_flagged=False, priority_weight=0.0)
    decisions = [s.decide(tid(i), f"p{i}", analysis(f"p{i}", priority=72.5)) for i in range(3)]
    assert [(d.keep, d.reason) for d in decisions] == [(True, "priority")] * 2 + [(False, "budget_exhausted")]
    below = s.decide(tid(9), "low", analysis("low", priority=49.9))
    assert (below.keep, below.reason) == (False, "sampled_out")


def test_priority_raises_the_keep_probability_of_the_draw() -> None:
    n = 4000
    s = sampler(baseline_rate=0.05, budget_per_minute=1e9, keep_priority=101, priority_weight=0.5)
    decisions = [s.decide(tid(i), f"q{i}", analysis(f"q{i}", priority=40.0)) for i in range(n)]
    kept = [d for d in decisions if d.keep]
    expected = 0.05 + 0.5 * 0.40
    assert abs(len(kept) / n - expected) < 4 * math.sqrt(expected * (1 - expected) / n)
    assert {d.reason for d in kept} == {"baseline", "priority"}


def test_replicas_agree() -> None:
    """Two sampler instances (two replicas), seeing the sessions in different orders, make the same
    decision for every session (budgets are per replica, so they are out of the way here)."""
    one, two = (sampler(baseline_rate=0.2, budget_per_minute=1e9) for _ in range(2))
    cases = [
        analysis(f"r{i}", counts={"environment.exhaustion": i % 2, "interaction.misalignment": i % 3 == 0})
        for i in range(2000)
    ]
    first = [one.decide(tid(i), None, a) for i, a in enumerate(cases)]
    second = [two.decide(tid(i), None, a) for i, a in enumerate(reversed(cases))][::-1]
    assert first == second
    assert 0 < sum(d.keep for d in first) < len(first)


def test_the_draw_is_per_session_not_per_trace() -> None:
    s = sampler(baseline_rate=0.5)
    for key in keys_with_draw(below=0.5, n=20) + keys_with_draw(above=0.5, n=20):
        decisions = {s.decide(tid(t), key, analysis(key)).keep for t in range(5)}
        assert len(decisions) == 1, key  # every trace of the session gets the same draw


def test_trace_id_is_the_key_without_a_session() -> None:
    s = sampler(baseline_rate=0.05)
    low = next(t for t in map(tid, range(10_000)) if session_draw(t.hex()) < 0.05)
    high = next(t for t in map(tid, range(10_000)) if session_draw(t.hex()) >= 0.05)
    assert s.decide(low, None, analysis(conversation="")).reason == "baseline"
    assert s.decide(high, None, analysis(conversation="")).reason == "sampled_out"
    # The conversation key wins over the trace id when the caller passes no session key.
    key = keys_with_draw(below=0.05)[0]
    another_high = next(t for t in map(tid, range(10_000)) if session_draw(t.hex()) >= 0.05 and t != high)
    assert s.decide(another_high, None, analysis(key)).reason == "baseline"


# -- sessions -------------------------------------------------------------------------------------
def test_a_kept_session_keeps_its_later_traces() -> None:
    key = keys_with_draw(above=0.9)[0]  # never picked by the baseline draw
    s = sampler(budget_per_minute=0, baseline_rate=0.05)
    assert s.decide(tid(1), key, analysis(key)).reason == "sampled_out"
    assert s.decide(tid(2), key, analysis(key, "severe", flagged=True)).reason == "severe"
    # Later traces: kept with the session even as the quality recovers, and without budget.
    later = s.decide(tid(3), key, analysis(key, "neutral"))
    assert (later.keep, later.reason) == (True, "session")
    assert s.decide(tid(4), key, None).reason == "session"  # a trace of it without a conversation
    # The first trace was already dropped: the session is kept from its turning point on.
    assert s.partial_sessions == 1


def test_a_session_kept_from_its_first_trace_is_kept_whole() -> None:
    key = keys_with_draw(above=0.9)[0]
    s = sampler(budget_per_minute=10)
    decisions = [s.decide(tid(1), key, analysis(key, flagged=True, counts={"execution.failure": 1}))]
    decisions += [s.decide(tid(t), key, analysis(key, counts={"execution.failure": 1})) for t in (2, 3)]
    assert [d.reason for d in decisions] == ["flagged", "session", "session"]
    assert s.partial_sessions == 0


def test_session_state_is_bounded() -> None:
    s = sampler(max_sessions=100, baseline_rate=0.0)
    for i in range(1000):
        s.decide(tid(i), f"s{i}", analysis(f"s{i}", "severe"))
    assert len(s) == 100
    assert s.forgotten_sessions == 900
    # A forgotten session is decided afresh (here: dropped, its new trace is uninformative).
    assert s.decide(tid(5000), "s0", analysis("s0")).reason == "sampled_out"
    assert s.decide(tid(5001), "s999", analysis("s999")).reason == "session"


# -- traces without a conversation ---------------------------------------------------------------
def test_non_conversation_traces_are_kept_by_default() -> None:
    s = sampler(budget_per_minute=0, baseline_rate=0.0)
    d = s.decide(tid(1), None, None)
    assert (d.keep, d.reason) == (True, "not_conversation")
    dropping = sampler(non_conversation_traces="drop")
    d = dropping.decide(tid(1), None, None)
    assert (d.keep, d.reason) == (False, "not_conversation")
    assert dropping.dropped == {"not_conversation": 1}


# -- what apply writes ------------------------------------------------------------------------------
def record(span_id: int, parent: int = 0, **attributes: object) -> SpanRecord:
    span = Span(
        trace_id=tid(7), span_id=span_id.to_bytes(8, "big"), name=f"span-{span_id}", start_time_unix_nano=1
    )
    if parent:
        span.parent_span_id = parent.to_bytes(8, "big")
    for key, value in attributes.items():
        write_attribute(span.attributes.add(), key, value)
    return SpanRecord(tid(7), span.span_id, span.parent_span_id, span.SerializeToString(), CONTEXT)


def attributes_of(rec: SpanRecord) -> dict[str, object]:
    out: dict[str, object] = {}
    for kv in Span.FromString(rec.data).attributes:
        out[kv.key] = getattr(kv.value, kv.value.WhichOneof("value"))
    return out


def trace_of(*records: SpanRecord) -> ReleasedTrace:
    return ReleasedTrace(tid(7), list(records), "complete", sum(len(r.data) for r in records))


def test_apply_marks_the_analysed_and_root_spans() -> None:
    root, middle, llm = record(1), record(2, parent=1), record(3, parent=2, **{"gen_ai.system": "openai"})
    middle_before = middle.data
    trace = trace_of(root, middle, llm)
    s = sampler()
    decision = s.decide(tid(7), "c", analysis("c", "severe", span_id=(3).to_bytes(8, "big")))
    kept = s.apply(trace, decision)
    assert kept == trace.spans and len(kept) == 3
    for rec in (root, llm):
        attrs = attributes_of(rec)
        assert attrs["signals.sampled"] is True
        assert attrs["signals.sample_reason"] == "severe"
    assert attributes_of(llm)["gen_ai.system"] == "openai"
    assert middle.data == middle_before  # other spans untouched
    assert trace.size == sum(len(r.data) for r in trace.spans)


def test_apply_never_overwrites() -> None:
    root = record(1, **{"signals.sample_reason": "upstream"})
    trace = trace_of(root)
    s = sampler()
    s.apply(trace, s.decide(tid(7), "c", analysis("c", "poor", span_id=b"\x09" * 8)))
    attrs = attributes_of(root)
    assert attrs["signals.sample_reason"] == "upstream"
    assert attrs["signals.sampled"] is True
    assert [kv.key for kv in Span.FromString(root.data).attributes].count("signals.sample_reason") == 1


def test_apply_drops_and_leaves_non_conversation_traces_untouched() -> None:
    s = sampler(baseline_rate=0.0)
    root = record(1)
    before = root.data
    assert s.apply(trace_of(root), s.decide(tid(7), "x", analysis("x"))) == []
    assert s.apply(trace_of(root), s.decide(tid(8), None, None)) == [root]
    assert root.data == before


@pytest.mark.parametrize("non_conversation_traces", ["keep", "drop"])
def test_a_late_part_of_a_trace_is_decided_as_the_trace_was(non_conversation_traces: str) -> None:
    """Spans that come after their trace was released (a late child without GenAI attributes) are
    a trace of their own to the sampler: they were decided as not_conversation, so a dropped trace
    had its late parts kept (1 of 3 spans reached the backend) and, with non_conversation_traces
    drop, a kept one lost them. Now a later part without a conversation is decided as the trace was."""
    out_key = keys_with_draw(above=0.9)[0]
    s = sampler(baseline_rate=0.0, non_conversation_traces=non_conversation_traces)
    assert not s.decide(tid(1), out_key, analysis(out_key)).keep  # sampled out
    late = s.decide(tid(1), None, None)  # its late part, on the event loop
    assert (late.keep, late.reason) == (False, "trace")
    assert s.decide(tid(2), "kept", analysis("kept", "severe")).keep
    late = s.decide(tid(2), None, None)
    assert (late.keep, late.reason) == (True, "trace")
    root = record(1)
    before = root.data
    assert s.apply(trace_of(root), late) == [root] and root.data == before  # annotated with its trace
    # A part with a conversation goes by the rules, after any part: kept when severe, kept when an
    # earlier part was kept (its spans are gone: the trace is kept whole), else as the rules say.
    s.decide(tid(3), None, None)  # a plain part first (decided on the event loop)
    keep_plain = non_conversation_traces == "keep"
    decided = s.decide(tid(3), out_key, analysis(out_key))
    assert (decided.keep, decided.reason) == ((True, "trace") if keep_plain else (False, "sampled_out"))
    s.decide(tid(4), None, None)
    assert s.decide(tid(4), "bad", analysis("bad", "severe")).reason == "severe"
    assert s.dropped["sampled_out"] == 1 + (0 if keep_plain else 1)  # a drop turned keep is not counted


def test_a_trace_of_several_turns_keeps_a_severe_turn_after_a_sampled_out_one() -> None:
    """The first turn's drop held for the trace's later turns: a severe turn in the same trace was
    dropped, against "severe is always kept"."""
    out_key = keys_with_draw(above=0.9)[0]
    s = sampler(baseline_rate=0.0)
    assert not s.decide(tid(1), out_key, analysis(out_key)).keep
    later = s.decide(tid(1), out_key, analysis(out_key, "severe"))
    assert (later.keep, later.reason) == (True, "severe")
    assert s.decide(tid(2), out_key, analysis(out_key)).reason == "session"  # the session is kept on


def test_decisions_by_trace_are_bounded() -> None:
    from otelsignals.pipeline import sampler as sampler_module

    s = sampler(baseline_rate=1.0)
    for n in range(sampler_module.REMEMBERED_TRACES + 10):
        s.decide(n.to_bytes(16, "big"), None, None)
    assert len(s._traces) == sampler_module.REMEMBERED_TRACES
    assert s.decide((5).to_bytes(16, "big"), None, None).reason == "not_conversation"  # forgotten


# -- counts and metrics ---------------------------------------------------------------------------
def test_decisions_are_counted_by_reason_and_exported() -> None:
    key_out = keys_with_draw(above=0.9)[0]
    s = sampler(budget_per_minute=1, baseline_rate=0.0)
    s.decide(tid(1), "a", analysis("a", "severe"))
    s.decide(tid(2), "b", analysis("b", flagged=True))
    s.decide(tid(3), "c", analysis("c", flagged=True))  # the budget of one is spent
    s.decide(tid(4), key_out, analysis(key_out))
    s.decide(tid(5), None, None)
    assert s.kept == {"severe": 1, "flagged": 1, "not_conversation": 1}
    assert s.dropped == {"budget_exhausted": 1, "sampled_out": 1}
    registry = CollectorRegistry()
    registry.register(SamplerCollector(s))
    assert metric_total(registry, "otelsignals_sampler_kept_traces", reason="severe") == 1
    assert metric_total(registry, "otelsignals_sampler_dropped_traces", reason="sampled_out") == 1
    assert metric_total(registry, "otelsignals_sampler_dropped_traces", reason="budget_exhausted") == 1


# -- configuration --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"baseline_rate": 1.5}, "sampler.baseline_rate"),
        ({"baseline_rate": float("nan")}, "sampler.baseline_rate"),
        ({"keep_qualities": ("severe", "awful")}, "sampler.keep_qualities"),
        ({"category_weights": {"execution.oops": 1.0}}, "sampler.category_weights.execution.oops"),
        ({"category_weights": {"execution.failure": -1}}, "sampler.category_weights.execution.failure"),
        ({"budget_per_minute": -1}, "sampler.budget_per_minute"),
        ({"max_sessions": 0}, "sampler.max_sessions"),
        ({"keep_priority": -5}, "sampler.keep_priority"),
        ({"priority_weight": 2.0}, "sampler.priority_weight"),
    ],
)
def test_bad_config_names_the_key(options: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        TriageSampler(SamplerConfig(**options))  # type: ignore[arg-type]
    assert info.value.key == key


def test_config_values_as_the_loader_gives_them() -> None:
    """Today's config loader turns mapping values into strings and environment lists into text."""
    s = sampler(
        keep_qualities="severe, poor",  # type: ignore[arg-type]
        category_weights={"environment.exhaustion": "1.0"},  # type: ignore[dict-item]
        keep_flagged=False,
    )
    assert s.decide(tid(1), "p", analysis("p", "poor")).reason == "poor"
    x = s.decide(tid(2), "x", analysis("x", counts={"environment.exhaustion": 1}))
    assert x.keep


def test_off_by_default() -> None:
    assert SamplerConfig().enabled is False
    assert SamplerConfig().non_conversation_traces == "keep"
