"""agent_reliability and agent_consistency (SPEC §6) against hand-computed numbers.

Default weights: confidence 1.0, loop_detection 1.0, tool_correctness 0.8, coherence 1.0.
Reliability: trace risk = max(weight × (1 − signal)); k = max(1, ceil(0.15 n));
raw = 0.9 × mean(top k) + 0.1 × max; score = clamp(1 − raw).
Consistency: penalty = Σ w × (1 − s) over loop/tool/coherence; wu = (1 + penalty) × w_conf × (1 − conf);
score = clamp(1 − sqrt(mean(wu²))).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelsignals.evals import (
    DEFAULT_WEIGHTS,
    MetricResult,
    TraceSignals,
    agent_consistency,
    agent_reliability,
)
from otelsignals.evals.session_metrics import NO_EVALUABLE_REASON, NO_SIGNALS_REASON, resolve_weights


def approx(value: float) -> object:
    return pytest.approx(value, rel=1e-12, abs=1e-12)


def fine(trace_id: str, value: float = 0.95) -> TraceSignals:
    return TraceSignals(
        trace_id, confidence=value, loop_detection=value, tool_correctness=value, coherence=value
    )


# --- one catastrophic trace among fine ones -------------------------------------------------------


def catastrophic_session() -> list[TraceSignals]:
    # t0..t8 fine (all signals 0.95); t9 has confidence 0.05, the rest 0.95.
    traces = [fine(f"t{i}") for i in range(9)]
    traces.append(
        TraceSignals("t9", confidence=0.05, loop_detection=0.95, tool_correctness=0.95, coherence=0.95)
    )
    return traces


def test_reliability_one_catastrophic_trace():
    result = agent_reliability(catastrophic_session())
    # fine trace: risks 0.05 (conf), 0.05 (loop), 0.8 × 0.05 = 0.04 (tool), 0.05 (coh) → step 0.05
    # t9: conf risk 0.95 → step 0.95
    # n = 10, k = max(1, ceil(1.5)) = 2; top 2 = [0.95, 0.05] → mean 0.5; max 0.95
    # raw = 0.9 × 0.5 + 0.1 × 0.95 = 0.45 + 0.095 = 0.545; score = 1 − 0.545 = 0.455
    assert result.name == "agent_reliability"
    assert result.score == approx(0.455)
    assert result.passed is False
    meta = result.metadata
    assert meta["raw_risk"] == approx(0.545)
    assert meta["total_traces_in_session"] == 10
    assert meta["traces_evaluated"] == 10
    assert meta["flagged_traces"] == ["t9"]
    assert meta["skipped_traces"] == []
    agg = meta["aggregation"]
    assert agg["method"] == "max_compose_top_k"
    assert agg["top_k_percentile"] == 0.15
    assert agg["ensemble_weight"] == 0.1
    assert agg["top_k"] == 2
    assert agg["mean_top_k_risk"] == approx(0.5)
    assert agg["max_risk"] == approx(0.95)
    assert meta["signal_weights"] == {
        "confidence": 1.0,
        "loop_detection": 1.0,
        "tool_correctness": 0.8,
        "coherence": 1.0,
    }
    t0 = meta["per_trace_signals"]["t0"]
    assert t0["confidence_risk"] == approx(0.05)
    assert t0["loop_risk"] == approx(0.05)
    assert t0["tool_risk"] == approx(0.05)  # unweighted risk; weighted 0.04
    assert t0["coherence_risk"] == approx(0.05)
    assert t0["step_risk"] == approx(0.05)
    assert meta["per_trace_signals"]["t9"]["step_risk"] == approx(0.95)
    assert result.reason.startswith("1 of 10 traces risky; worst trace t9 risk 0.95")


def test_consistency_one_catastrophic_trace():
    result = agent_consistency(catastrophic_session())
    # every trace: penalty = 0.05 (loop) + 0.8 × 0.05 (tool) + 0.05 (coh) = 0.14 → amplification 1.14
    # fine: wu = 1.14 × 1.0 × 0.05 = 0.057, wu² = 0.003249
    # t9:   wu = 1.14 × 1.0 × 0.95 = 1.083, wu² = 1.172889
    # mean wu² = (9 × 0.003249 + 1.172889) / 10 = (0.029241 + 1.172889) / 10 = 0.120213
    # rms = sqrt(0.120213) ≈ 0.3467175; score ≈ 0.6532825 (consistency forgives a single bad trace)
    rms = math.sqrt(0.120213)
    assert result.name == "agent_consistency"
    assert result.score == approx(1 - rms)
    assert result.passed is True
    meta = result.metadata
    assert meta["raw_instability"] == approx(rms)
    assert meta["aggregation"] == {"method": "weighted_rms", "rms_value": approx(rms)}
    assert meta["traces_evaluated"] == 10
    t9 = meta["per_trace_signals"]["t9"]
    assert t9["confidence_risk"] == approx(0.95)
    assert t9["situational_penalty"] == approx(0.14)
    assert t9["weighted_uncertainty"] == approx(1.083)
    assert meta["per_trace_signals"]["t0"]["weighted_uncertainty"] == approx(0.057)
    assert meta["worst_trace"] == "t9"


# --- many moderate traces -------------------------------------------------------------------------


def moderate_session() -> list[TraceSignals]:
    return [
        TraceSignals(f"m{i}", confidence=0.6, loop_detection=0.7, tool_correctness=0.5, coherence=0.65)
        for i in range(10)
    ]


def test_reliability_many_moderate_traces():
    result = agent_reliability(moderate_session())
    # risks: conf 0.4, loop 0.3, tool 0.8 × 0.5 = 0.4, coh 0.35 → step 0.4 (not > 0.5: not flagged)
    # k = 2; mean top 2 = 0.4; max 0.4; raw = 0.9 × 0.4 + 0.1 × 0.4 = 0.4; score 0.6
    assert result.score == approx(0.6)
    assert result.passed is True
    assert result.metadata["flagged_traces"] == []
    assert result.metadata["raw_risk"] == approx(0.4)
    assert result.reason.startswith("0 of 10 traces risky; worst trace m0 risk 0.40")


def test_consistency_many_moderate_traces():
    result = agent_consistency(moderate_session())
    # penalty = 0.3 + 0.8 × 0.5 + 0.35 = 1.05; wu = (1 + 1.05) × 1.0 × 0.4 = 0.82 for every trace
    # rms = sqrt(mean(0.82²)) = 0.82; score = 0.18 (consistency punishes many moderate problems)
    assert result.score == approx(0.18)
    assert result.passed is False
    assert result.metadata["per_trace_signals"]["m3"]["situational_penalty"] == approx(1.05)
    assert result.metadata["per_trace_signals"]["m3"]["weighted_uncertainty"] == approx(0.82)
    assert result.metadata["raw_instability"] == approx(0.82)


# --- missing signals ------------------------------------------------------------------------------


def sparse_session() -> list[TraceSignals]:
    return [
        TraceSignals("a", confidence=0.9, coherence=0.2),
        TraceSignals("b", tool_correctness=0.25),
        TraceSignals("c", loop_detection=0.7),
        TraceSignals("d"),  # no signals at all: skipped
        TraceSignals("e", confidence=1.0, loop_detection=1.0),
    ]


def test_reliability_missing_signals():
    result = agent_reliability(sparse_session())
    # a: conf risk 0.1, coh risk 0.8 → step 0.8 (flagged)
    # b: tool risk 0.75, weighted 0.8 × 0.75 = 0.6 → step 0.6 (flagged)
    # c: loop risk 0.3 → step 0.3
    # d: skipped
    # e: risks 0, 0 → step 0
    # n = 4, k = max(1, ceil(0.6)) = 1; mean top 1 = 0.8; max 0.8; raw = 0.72 + 0.08 = 0.8; score 0.2
    assert result.score == approx(0.2)
    meta = result.metadata
    assert meta["total_traces_in_session"] == 5
    assert meta["traces_evaluated"] == 4
    assert meta["skipped_traces"] == ["d"]
    assert "d" not in meta["per_trace_signals"]
    assert meta["flagged_traces"] == ["a", "b"]
    assert meta["aggregation"]["top_k"] == 1
    assert meta["per_trace_signals"]["a"] == {
        "confidence_risk": approx(0.1),
        "coherence_risk": approx(0.8),
        "step_risk": approx(0.8),
        "sources": {"confidence": "unspecified", "coherence": "unspecified"},
    }
    assert meta["per_trace_signals"]["b"]["tool_risk"] == approx(0.75)
    assert meta["per_trace_signals"]["b"]["step_risk"] == approx(0.6)
    assert meta["per_trace_signals"]["e"]["step_risk"] == 0.0
    assert "1 trace without signals skipped" in result.reason


def test_consistency_missing_signals():
    result = agent_consistency(sparse_session())
    # only a and e have confidence.
    # a: penalty = 1.0 × 0.8 (coh) = 0.8; wu = 1.8 × 0.1 = 0.18; wu² = 0.0324
    # e: penalty 0 (loop risk 0); wu = 1 × 0 = 0
    # rms = sqrt(0.0324 / 2) = sqrt(0.0162) ≈ 0.1272792; score ≈ 0.8727208
    assert result.score == approx(1 - math.sqrt(0.0162))
    meta = result.metadata
    assert meta["traces_evaluated"] == 2
    assert meta["skipped_traces"] == ["b", "c", "d"]
    assert set(meta["per_trace_signals"]) == {"a", "e"}
    assert meta["per_trace_signals"]["a"]["situational_penalty"] == approx(0.8)
    assert meta["per_trace_signals"]["a"]["weighted_uncertainty"] == approx(0.18)
    assert "loop_risk" not in meta["per_trace_signals"]["a"]
    assert "3 traces without confidence skipped" in result.reason


# --- one trace, none, all None --------------------------------------------------------------------


def test_one_trace_is_evaluated_normally():
    traces = [TraceSignals("only", confidence=0.3, tool_correctness=0.0)]
    reliability = agent_reliability(traces)
    # risks: conf 0.7, tool 0.8 × 1.0 = 0.8 → step 0.8; k = 1; raw = 0.9 × 0.8 + 0.1 × 0.8 = 0.8
    assert reliability.score == approx(0.2)
    assert reliability.metadata["traces_evaluated"] == 1
    assert reliability.metadata["flagged_traces"] == ["only"]
    consistency = agent_consistency(traces)
    # penalty = 0.8 × 1.0 = 0.8; wu = 1.8 × 0.7 = 1.26; rms 1.26 → 1 − 1.26 < 0 → clamped to 0
    assert consistency.score == 0.0
    assert consistency.metadata["raw_instability"] == approx(1.26)
    assert consistency.passed is False


@pytest.mark.parametrize("metric", [agent_reliability, agent_consistency])
def test_no_traces(metric):
    result = metric([])
    assert result.score == 1.0
    assert result.passed is True
    assert result.reason == NO_SIGNALS_REASON
    assert result.metadata["traces_evaluated"] == 0
    assert result.metadata["total_traces_in_session"] == 0


@pytest.mark.parametrize("metric", [agent_reliability, agent_consistency])
def test_all_signals_none(metric):
    result = metric([TraceSignals("x"), TraceSignals("y")])
    assert result.score == 1.0
    assert result.reason == NO_SIGNALS_REASON
    assert result.metadata["total_traces_in_session"] == 2
    assert result.metadata["traces_evaluated"] == 0


def test_consistency_without_any_confidence_is_not_evaluable():
    traces = [TraceSignals("x", loop_detection=0.1), TraceSignals("y", coherence=0.0, tool_correctness=0.0)]
    result = agent_consistency(traces)
    assert result.score == 1.0
    assert result.passed is True
    assert result.reason == NO_EVALUABLE_REASON
    # reliability still sees them: x step 0.9, y max(1.0, 0.8) = 1.0; k = 1
    # raw = 0.9 × 1.0 + 0.1 × 1.0 = 1.0; score 0.0
    assert agent_reliability(traces).score == approx(0.0)


def test_consistency_confidence_only():
    traces = [TraceSignals("p", confidence=0.8), TraceSignals("q", confidence=0.4)]
    # no situational signals: penalty 0; wu = 0.2 and 0.6; rms = sqrt((0.04 + 0.36) / 2) = sqrt(0.2)
    result = agent_consistency(traces)
    assert result.score == approx(1 - math.sqrt(0.2))
    assert result.metadata["per_trace_signals"]["q"]["situational_penalty"] == 0.0


# --- weights --------------------------------------------------------------------------------------


def test_tool_weight_changes_reliability():
    traces = [TraceSignals("t", confidence=0.85, tool_correctness=0.0)]
    # default: tool 0.8 × 1.0 = 0.8 beats conf 0.15 → raw 0.8, score 0.2, flagged
    default = agent_reliability(traces)
    assert default.score == approx(0.2)
    assert default.metadata["flagged_traces"] == ["t"]
    # tool weight 1.0: step 1.0 → raw 1.0 → score 0.0
    assert agent_reliability(traces, {"tool_correctness": 1.0}).score == approx(0.0)
    # tool weight 0.5: step 0.5, not > 0.5 so not flagged; raw = 0.45 + 0.05 = 0.5; score 0.5 passes
    half = agent_reliability(traces, {"tool_correctness": 0.5})
    assert half.score == approx(0.5)
    assert half.passed is True
    assert half.metadata["flagged_traces"] == []
    # tool weight 0: confidence decides, step 0.15 → score 0.85
    assert agent_reliability(traces, {"tool_correctness": 0.0}).score == approx(0.85)


def test_partial_override_merges_with_defaults():
    result = agent_reliability([fine("t")], {"tool_correctness": 1.0})
    assert result.metadata["signal_weights"] == {
        "confidence": 1.0,
        "loop_detection": 1.0,
        "tool_correctness": 1.0,
        "coherence": 1.0,
    }
    assert dict(DEFAULT_WEIGHTS)["tool_correctness"] == 0.8  # defaults untouched


def test_tool_weight_changes_consistency():
    traces = [TraceSignals("t", confidence=0.5, tool_correctness=0.5)]
    # default: penalty = 0.8 × 0.5 = 0.4; wu = 1.4 × 0.5 = 0.7; score 0.3
    assert agent_consistency(traces).score == approx(0.3)
    # tool 0.2: penalty 0.1; wu = 1.1 × 0.5 = 0.55; score 0.45
    assert agent_consistency(traces, {"tool_correctness": 0.2}).score == approx(0.45)
    # confidence weight 0.5 halves every wu: 1.4 × 0.5 × 0.5 = 0.35; score 0.65
    assert agent_consistency(traces, {"confidence": 0.5}).score == approx(0.65)


def test_reliability_clamps_at_zero_with_heavy_weights():
    # conf weight 2: step = 2 × 0.8 = 1.6; raw 1.6; 1 − 1.6 < 0 → 0.0; raw_risk keeps 1.6
    result = agent_reliability([TraceSignals("t", confidence=0.2)], {"confidence": 2.0})
    assert result.score == 0.0
    assert result.metadata["raw_risk"] == approx(1.6)


def test_perfect_session_scores_one():
    traces = [fine(f"p{i}", 1.0) for i in range(3)]
    assert agent_reliability(traces).score == 1.0
    assert agent_consistency(traces).score == 1.0


def test_custom_threshold():
    result = agent_reliability(moderate_session(), threshold=0.7)  # score 0.6
    assert result.score == approx(0.6)
    assert result.passed is False


# --- top k ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "k"), [(1, 1), (6, 1), (7, 2), (13, 2), (14, 3), (20, 3), (21, 4), (100, 15)])
def test_top_k_is_ceil_of_fifteen_percent(n, k):
    # risks i / n for confidence = 1 − i / n (i = 1..n); top k are n/n, (n−1)/n, ...
    traces = [TraceSignals(f"t{i}", confidence=1 - i / n) for i in range(1, n + 1)]
    result = agent_reliability(traces)
    risks = sorted((1 - (1 - i / n) for i in range(1, n + 1)), reverse=True)
    mean_top_k = sum(risks[:k]) / k
    assert result.metadata["aggregation"]["top_k"] == k
    assert result.metadata["aggregation"]["mean_top_k_risk"] == approx(mean_top_k)
    assert result.score == approx(1 - (0.9 * mean_top_k + 0.1 * risks[0]))


def test_top_k_twenty_traces_by_hand():
    # 17 traces at risk 0.1 (confidence 0.9), three at 0.9, 0.7, 0.5 (confidence 0.1, 0.3, 0.5)
    # n = 20, k = ceil(3.0) = 3; mean top 3 = (0.9 + 0.7 + 0.5) / 3 = 0.7; max 0.9
    # raw = 0.63 + 0.09 = 0.72; score 0.28; flagged: risk > 0.5 → the 0.9 and 0.7 traces (0.5 is not)
    traces = [TraceSignals(f"ok{i}", confidence=0.9) for i in range(17)]
    traces += [
        TraceSignals("bad", confidence=0.1),
        TraceSignals("poor", confidence=0.3),
        TraceSignals("edge", confidence=0.5),
    ]
    result = agent_reliability(traces)
    assert result.metadata["aggregation"]["top_k"] == 3
    assert result.metadata["aggregation"]["mean_top_k_risk"] == approx(0.7)
    assert result.score == approx(0.28)
    assert result.metadata["flagged_traces"] == ["bad", "poor"]
    assert result.reason.startswith("2 of 20 traces risky; worst trace bad risk 0.90")


# --- sources, result shape, validation ------------------------------------------------------------


def test_sources_are_reported():
    traces = [
        TraceSignals(
            "j",
            confidence=0.9,
            tool_correctness=1.0,
            coherence=0.8,
            sources={"confidence": "llm_judge", "tool_correctness": "llm_judge", "coherence": "embedding"},
        ),
        TraceSignals(
            "p",
            confidence=0.7,
            loop_detection=0.9,
            sources={"confidence": "proxy", "loop_detection": "embedding", "coherence": "embedding"},
        ),
    ]
    for metric in (agent_reliability, agent_consistency):
        meta = metric(traces).metadata
        assert meta["signal_sources"] == {
            "confidence": ["llm_judge", "proxy"],
            "loop_detection": ["embedding"],
            "tool_correctness": ["llm_judge"],
            "coherence": ["embedding"],
        }
        # per trace: only the signals that are present (p has no coherence value)
        assert meta["per_trace_signals"]["p"]["sources"] == {
            "confidence": "proxy",
            "loop_detection": "embedding",
        }


def test_result_shape():
    result = agent_reliability(catastrophic_session())
    assert isinstance(result, MetricResult)
    as_dict = result.as_dict()
    assert set(as_dict) == {"name", "score", "passed", "reason", "metadata"}
    assert 0.0 <= result.score <= 1.0


def test_integer_signals_are_accepted():
    trace = TraceSignals("i", confidence=1, coherence=0)
    assert trace.confidence == 1.0 and isinstance(trace.confidence, float)


@pytest.mark.parametrize("value", [1.5, -0.1, math.nan, math.inf])
def test_out_of_range_signal_rejected(value):
    with pytest.raises(ValueError):
        TraceSignals("t", confidence=value)


def test_non_numeric_signal_rejected():
    with pytest.raises(TypeError):
        TraceSignals("t", coherence="0.5")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        TraceSignals("t", coherence=True)


@pytest.mark.parametrize(
    "sources", [{"confidence": "guess"}, {"plan_quality": "llm_judge"}], ids=["bad-source", "bad-signal"]
)
def test_bad_sources_rejected(sources):
    with pytest.raises(ValueError):
        TraceSignals("t", confidence=0.5, sources=sources)


@pytest.mark.parametrize(
    "weights", [{"tool_correct": 0.8}, {"coherence": -1.0}, {"coherence": math.nan}], ids=str
)
def test_bad_weights_rejected(weights):
    with pytest.raises(ValueError):
        resolve_weights(weights)
    with pytest.raises(ValueError):
        agent_reliability([fine("t")], weights)


def test_duplicate_trace_ids_rejected():
    with pytest.raises(ValueError, match="duplicate"):
        agent_consistency([fine("t"), fine("t")])


@given(
    st.builds(
        TraceSignals,
        trace_id=st.text(min_size=1, max_size=8),
        confidence=st.none() | st.floats(0, 1),
        loop_detection=st.none() | st.floats(0, 1),
        tool_correctness=st.none() | st.floats(0, 1),
        coherence=st.none() | st.floats(0, 1),
        sources=st.dictionaries(
            st.sampled_from(["confidence", "coherence"]), st.sampled_from(["proxy", "embedding"])
        ),
    )
)
def test_as_dict_is_dataclasses_asdict(signals: TraceSignals) -> None:
    """The fast copy the conversation index writes has every field, as asdict gives them."""
    assert signals.as_dict() == dataclasses.asdict(signals)
    assert signals.as_dict()["sources"] is not signals.sources
