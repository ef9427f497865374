"""Model-free proxies of two judge metrics, from the signals alone: ``confidence`` and
``tool_correctness`` (used per trace when no judge is configured)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from otelsignals.evals.session_metrics import MetricResult
from otelsignals.model import Conversation, Role

PROXY_SOURCE = "proxy"  # the metadata source of a proxy result (an LLM judge's is "llm_judge")

# ---- model-free proxies --------------------------------------------------------------------------

# Weight of one occurrence of each signal in proxy_confidence; a bare category key counts with the
# category's weight. Quitting or asking for a human is the strongest sign the answer was not accepted.
PROXY_CONFIDENCE_WEIGHTS: dict[str, float] = {
    "interaction.misalignment": 0.25,
    "interaction.misalignment.correction": 0.25,
    "interaction.misalignment.rephrase": 0.25,
    "interaction.misalignment.clarification": 0.25,
    "interaction.disengagement": 0.5,
    "interaction.disengagement.negative_stance": 0.5,
    "interaction.disengagement.escalation": 1.0,
    "interaction.disengagement.quit": 1.0,
}


def proxy_confidence(signal_counts: Mapping[str, int], *, threshold: float = 0.5) -> MetricResult:
    """Model-free confidence from misalignment and disengagement signal counts.

    confidence = 1 − (1 − exp(−Σ wᵢ·countᵢ)) = exp(−Σ wᵢ·countᵢ), with the weights in
    PROXY_CONFIDENCE_WEIGHTS (misalignment 0.25 each, negative stance 0.5, escalation/quit 1.0):
    no signals → 1.0; one correction → 0.78; two corrections → 0.61; one quit → 0.37. Other signal
    types are ignored; negative counts count as 0.
    """
    counted: dict[str, int] = {}
    load = 0.0
    for signal_type, count in signal_counts.items():
        weight = PROXY_CONFIDENCE_WEIGHTS.get(signal_type)
        if weight is None or not count or count < 0:
            continue
        counted[signal_type] = int(count)
        load += weight * count
    misalignment = sum(n for t, n in counted.items() if t.startswith("interaction.misalignment"))
    disengagement = sum(n for t, n in counted.items() if t.startswith("interaction.disengagement"))
    score = math.exp(-load)
    reason = (
        "No misalignment or disengagement signals."
        if not counted
        else f"{misalignment} misalignment and {disengagement} disengagement signals lower confidence."
    )
    metadata = {
        "source": PROXY_SOURCE,
        "status": "ok",
        "formula": "exp(-sum(weight * count))",
        "weighted_load": round(load, 6),
        "misalignment_count": misalignment,
        "disengagement_count": disengagement,
        "counted_signals": counted,
        "weights": {t: PROXY_CONFIDENCE_WEIGHTS[t] for t in counted},
    }
    return MetricResult("confidence", score, score >= threshold, reason, metadata, threshold)


def proxy_tool_correctness(conversation: Conversation, *, threshold: float = 0.5) -> MetricResult:
    """Model-free tool correctness: successful tool results / tool results (1.0 with none)."""
    results = [
        m.tool_result for m in conversation.messages if m.role is Role.TOOL and m.tool_result is not None
    ]
    failed = [r for r in results if r.is_error]
    total = len(results)
    score = 1.0 if total == 0 else (total - len(failed)) / total
    reason = "No tool results." if total == 0 else f"{total - len(failed)} of {total} tool calls succeeded."
    metadata = {
        "source": PROXY_SOURCE,
        "status": "ok",
        "tool_results": total,
        "failed": len(failed),
        "failed_tools": [r.name or "?" for r in failed],
    }
    return MetricResult("tool_correctness", score, score >= threshold, reason, metadata, threshold)
