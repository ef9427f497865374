"""Session metrics: ``agent_reliability`` and ``agent_consistency`` (SPEC §6).

Pure math over per-trace signals that were computed earlier (confidence, loop_detection,
tool_correctness, coherence; each in [0, 1], higher is better, ``None`` when absent). No I/O,
no model calls.

``agent_reliability`` looks at the worst moments of a session (max-compose per trace, then the
top 15 % of trace risks blended with the single worst one): one catastrophic trace sinks it.

``agent_consistency`` looks at the whole session (weighted RMS of the confidence risk, amplified
by the other signals' risks): many moderate problems sink it even if none is catastrophic.

Metadata holds full-precision floats (no rounding), so callers and tests see the exact numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

SIGNAL_NAMES: tuple[str, ...] = ("confidence", "loop_detection", "tool_correctness", "coherence")
# The signals that amplify the confidence risk in agent_consistency.
SITUATIONAL_SIGNALS: tuple[str, ...] = ("loop_detection", "tool_correctness", "coherence")
SIGNAL_SOURCES: frozenset[str] = frozenset({"llm_judge", "proxy", "embedding"})
UNSPECIFIED_SOURCE = "unspecified"

DEFAULT_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {"confidence": 1.0, "loop_detection": 1.0, "tool_correctness": 0.8, "coherence": 1.0}
)
DEFAULT_THRESHOLD = 0.5

# agent_reliability
TOP_K_PERCENT = 15  # top_k_percentile 0.15, kept as an integer percentage so ceil() is exact
TOP_K_PERCENTILE = TOP_K_PERCENT / 100
ENSEMBLE_WEIGHT = 0.1  # weight of the single worst trace risk in the blend
FLAG_RISK = 0.5  # a trace whose risk exceeds this is flagged

RELIABILITY = "agent_reliability"
CONSISTENCY = "agent_consistency"
NO_SIGNALS_REASON = "No traces or signals to evaluate."
NO_EVALUABLE_REASON = "No evaluable traces."


def _check_unit(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"signal {name!r} must be a number or None, got {type(value).__name__}")
    number = float(value)
    if not (0.0 <= number <= 1.0):  # also rejects NaN
        raise ValueError(f"signal {name!r} must be in [0, 1], got {value!r}")
    return number


@dataclass(frozen=True, slots=True)
class TraceSignals:
    """One trace's per-trace signals, each in [0, 1]; ``None`` means the signal is not present.
    Slots: a conversation keeps one per trace; 80 bytes, where without slots Python 3.11 kept its
    attribute values apart from the object (128 bytes in all, of which ``sys.getsizeof`` and so the
    session memory bench saw 56)."""

    trace_id: str
    confidence: float | None = None
    loop_detection: float | None = None
    tool_correctness: float | None = None
    coherence: float | None = None
    # signal name -> "llm_judge" | "proxy" | "embedding"
    sources: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict, as ``dataclasses.asdict`` gives them, ten times faster (that
        one copies recursively): the conversation index writes every trace's on every turn."""
        return {
            "trace_id": self.trace_id,
            "confidence": self.confidence,
            "loop_detection": self.loop_detection,
            "tool_correctness": self.tool_correctness,
            "coherence": self.coherence,
            "sources": dict(self.sources),
        }

    def __post_init__(self) -> None:
        if not isinstance(self.trace_id, str) or not self.trace_id:
            raise ValueError("trace_id must be a non-empty string")
        for name in SIGNAL_NAMES:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _check_unit(name, value))
        for name, source in self.sources.items():
            if name not in SIGNAL_NAMES:
                raise ValueError(
                    f"sources names an unknown signal {name!r}; known: {', '.join(SIGNAL_NAMES)}"
                )
            if source not in SIGNAL_SOURCES:
                known = ", ".join(sorted(SIGNAL_SOURCES))
                raise ValueError(f"unknown source {source!r} for signal {name!r}; known: {known}")

    def present(self) -> dict[str, float]:
        """The present signals, in SIGNAL_NAMES order."""
        return {name: value for name in SIGNAL_NAMES if (value := getattr(self, name)) is not None}

    def source_of(self, name: str) -> str:
        return self.sources.get(name, UNSPECIFIED_SOURCE)


# Per-trace risk keys in the session metrics' metadata, named as the reference names them.
RISK_KEYS = {"loop_detection": "loop_risk", "tool_correctness": "tool_risk"}


@dataclass(frozen=True)
class MetricResult:
    name: str  # "agent_reliability" | "agent_consistency"
    score: float  # 0..1, higher is better
    passed: bool  # score >= threshold
    reason: str
    metadata: dict[str, Any]
    # Written into the metadata with "success" (= passed), as the reference has them in every metric.
    threshold: float | None = None

    def __post_init__(self) -> None:
        if self.threshold is not None:
            self.metadata.setdefault("threshold", self.threshold)
        self.metadata.setdefault("success", self.passed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "score": self.score,
            "passed": self.passed,
            "reason": self.reason,
            "metadata": self.metadata,
        }


def resolve_weights(weights: Mapping[str, float] | None = None) -> dict[str, float]:
    """DEFAULT_WEIGHTS with a (possibly partial) override merged on top; validated."""
    merged = dict(DEFAULT_WEIGHTS)
    for name, weight in (weights or {}).items():
        if name not in DEFAULT_WEIGHTS:
            raise ValueError(f"unknown signal weight {name!r}; known: {', '.join(SIGNAL_NAMES)}")
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise TypeError(f"weight for {name!r} must be a number, got {type(weight).__name__}")
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"weight for {name!r} must be finite and >= 0, got {weight!r}")
        merged[name] = float(weight)
    return merged


def _check_inputs(traces: Sequence[TraceSignals], threshold: float) -> None:
    if not math.isfinite(threshold):
        raise ValueError(f"threshold must be finite, got {threshold!r}")
    seen: set[str] = set()
    for trace in traces:
        if not isinstance(trace, TraceSignals):
            raise TypeError(f"expected TraceSignals, got {type(trace).__name__}")
        if trace.trace_id in seen:
            raise ValueError(f"duplicate trace_id {trace.trace_id!r}")
        seen.add(trace.trace_id)


def _clamp01(value: float) -> float:
    return max(0.0, min(1.0, value))


def _source_summary(evaluated: list[TraceSignals], names: Sequence[str]) -> dict[str, list[str]]:
    """signal name -> sorted distinct sources among the evaluated traces that carry the signal."""
    summary: dict[str, set[str]] = {}
    for trace in evaluated:
        for name in names:
            if getattr(trace, name) is not None:
                summary.setdefault(name, set()).add(trace.source_of(name))
    return {name: sorted(summary[name]) for name in SIGNAL_NAMES if name in summary}


def _empty(
    name: str, reason: str, traces: Sequence[TraceSignals], weights: dict[str, float], threshold: float
) -> MetricResult:
    return MetricResult(
        name=name,
        score=1.0,
        passed=threshold <= 1.0,  # score 1.0 >= threshold
        reason=reason,
        threshold=threshold,
        metadata={
            "note": "empty_session" if reason == NO_SIGNALS_REASON else "no_evaluable_traces",
            "total_traces_in_session": len(traces),
            "traces_evaluated": 0,
            "signal_weights": weights,
        },
    )


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def agent_reliability(
    traces: Sequence[TraceSignals],
    weights: Mapping[str, float] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> MetricResult:
    """Worst-case failure risk of a session: max-compose per trace, top-k tail risk across traces.

    risk(signal) = 1 − score; trace risk = max over present signals of weight × risk (a trace with
    no signal is skipped). Trace risks sorted descending, k = max(1, ceil(n × 0.15));
    raw = 0.9 × mean(top k) + 0.1 × max; score = clamp(1 − raw, 0, 1). Risk > 0.5 → flagged.
    """
    resolved = resolve_weights(weights)
    _check_inputs(traces, threshold)
    if not traces or not any(trace.present() for trace in traces):
        return _empty(RELIABILITY, NO_SIGNALS_REASON, traces, resolved, threshold)

    evaluated: list[TraceSignals] = []
    risks: list[float] = []
    per_trace: dict[str, dict[str, Any]] = {}
    flagged: list[str] = []
    skipped: list[str] = []
    for trace in traces:
        present = trace.present()
        if not present:
            skipped.append(trace.trace_id)
            continue
        detail: dict[str, Any] = {}
        weighted: list[float] = []
        for name, value in present.items():
            risk = 1.0 - value
            detail[RISK_KEYS.get(name, f"{name}_risk")] = risk
            weighted.append(resolved[name] * risk)
        step_risk = max(weighted)
        detail["step_risk"] = step_risk
        detail["sources"] = {name: trace.source_of(name) for name in present}
        per_trace[trace.trace_id] = detail
        evaluated.append(trace)
        risks.append(step_risk)
        if step_risk > FLAG_RISK:
            flagged.append(trace.trace_id)

    if not risks:  # unreachable while every present signal counts; kept for the §6 contract
        return _empty(RELIABILITY, NO_EVALUABLE_REASON, traces, resolved, threshold)

    n = len(risks)
    ordered = sorted(risks, reverse=True)
    k = max(1, -(-n * TOP_K_PERCENT // 100))  # ceil(n × 0.15) in exact integer arithmetic
    mean_top_k = sum(ordered[:k]) / k
    max_risk = ordered[0]
    raw = (1.0 - ENSEMBLE_WEIGHT) * mean_top_k + ENSEMBLE_WEIGHT * max_risk
    score = _clamp01(1.0 - raw)
    worst = evaluated[risks.index(max_risk)].trace_id  # first trace with the highest risk

    reason = (
        f"{len(flagged)} of {_plural(n, 'trace')} risky; worst trace {worst} risk {max_risk:.2f}; "
        f"top-{k} mean risk {mean_top_k:.2f}, score {score:.2f}"
    )
    if skipped:
        reason += f" ({_plural(len(skipped), 'trace')} without signals skipped)"
    reason += "."

    return MetricResult(
        name=RELIABILITY,
        score=score,
        passed=score >= threshold,
        reason=reason,
        threshold=threshold,
        metadata={
            "total_traces_in_session": len(traces),
            "traces_evaluated": n,
            "raw_risk": raw,
            "signal_weights": resolved,
            "per_trace_signals": per_trace,
            "flagged_traces": flagged,
            "skipped_traces": skipped,
            "worst_trace": worst,
            "signal_sources": _source_summary(evaluated, SIGNAL_NAMES),
            "aggregation": {
                "method": "max_compose_top_k",
                "top_k_percentile": TOP_K_PERCENTILE,
                "ensemble_weight": ENSEMBLE_WEIGHT,
                "top_k": k,
                "mean_top_k_risk": mean_top_k,
                "max_risk": max_risk,
            },
        },
    )


def agent_consistency(
    traces: Sequence[TraceSignals],
    weights: Mapping[str, float] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> MetricResult:
    """Overall stability of a session: weighted RMS of the amplified confidence risk.

    Only traces with a confidence signal count. Per trace: penalty = Σ weight × (1 − signal) over
    the present loop_detection / tool_correctness / coherence signals; weighted_uncertainty =
    (1 + penalty) × w_conf × (1 − confidence). rms = sqrt(mean(wu²)); score = clamp(1 − rms, 0, 1).
    """
    resolved = resolve_weights(weights)
    _check_inputs(traces, threshold)
    if not traces or not any(trace.present() for trace in traces):
        return _empty(CONSISTENCY, NO_SIGNALS_REASON, traces, resolved, threshold)

    evaluated: list[TraceSignals] = []
    uncertainties: list[float] = []
    per_trace: dict[str, dict[str, Any]] = {}
    skipped: list[str] = []
    for trace in traces:
        if trace.confidence is None:
            skipped.append(trace.trace_id)
            continue
        confidence_risk = 1.0 - trace.confidence
        detail: dict[str, Any] = {"confidence_risk": confidence_risk}
        penalty = 0.0
        for name in SITUATIONAL_SIGNALS:
            value = getattr(trace, name)
            if value is None:
                continue
            risk = 1.0 - value
            detail[RISK_KEYS.get(name, f"{name}_risk")] = risk
            penalty += resolved[name] * risk
        wu = (1.0 + penalty) * resolved["confidence"] * confidence_risk
        detail["situational_penalty"] = penalty
        detail["weighted_uncertainty"] = wu
        detail["sources"] = {name: trace.source_of(name) for name in trace.present()}
        per_trace[trace.trace_id] = detail
        evaluated.append(trace)
        uncertainties.append(wu)

    if not uncertainties:
        return _empty(CONSISTENCY, NO_EVALUABLE_REASON, traces, resolved, threshold)

    n = len(uncertainties)
    rms = math.sqrt(sum(wu * wu for wu in uncertainties) / n)
    score = _clamp01(1.0 - rms)
    highest = max(uncertainties)
    worst = evaluated[uncertainties.index(highest)].trace_id

    reason = (
        f"RMS weighted uncertainty {rms:.2f} over {_plural(n, 'trace')} with confidence; "
        f"highest trace {worst} {highest:.2f}, score {score:.2f}"
    )
    if skipped:
        reason += f" ({_plural(len(skipped), 'trace')} without confidence skipped)"
    reason += "."

    return MetricResult(
        name=CONSISTENCY,
        score=score,
        passed=score >= threshold,
        reason=reason,
        threshold=threshold,
        metadata={
            "total_traces_in_session": len(traces),
            "traces_evaluated": n,
            "raw_instability": rms,
            "signal_weights": resolved,
            "per_trace_signals": per_trace,
            "skipped_traces": skipped,
            "worst_trace": worst,
            "signal_sources": _source_summary(evaluated, SIGNAL_NAMES),
            "aggregation": {"method": "weighted_rms", "rms_value": rms},
        },
    )


__all__ = [
    "CONSISTENCY",
    "DEFAULT_THRESHOLD",
    "DEFAULT_WEIGHTS",
    "ENSEMBLE_WEIGHT",
    "NO_EVALUABLE_REASON",
    "NO_SIGNALS_REASON",
    "RELIABILITY",
    "SIGNAL_NAMES",
    "SIGNAL_SOURCES",
    "TOP_K_PERCENTILE",
    "MetricResult",
    "TraceSignals",
    "agent_consistency",
    "agent_reliability",
    "resolve_weights",
]
