"""The demo's summary: how the conversations scored, which signals fired, what was flagged."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from otelsignals.conversation import ConversationState
from otelsignals.scoring import BUCKETS, score


def quality_report(states: Iterable[ConversationState], baseline: int) -> list[str]:
    states = list(states)
    scored = [(state, score(state.conversation, state.leaf_counts, baseline)) for state in states]
    lines = ["conversations by quality"]
    buckets = Counter(result.quality for _, result in scored)
    for name, _ in BUCKETS:
        lines.append(f"  {name:<10} {buckets[name]:>3}  {'█' * buckets[name]}")
    signals: Counter[str] = Counter()
    for state in states:
        signals.update(state.leaf_counts)
    lines.append("top signals")
    # Ties go by name: conversations arrive over gRPC and HTTP at once, so first-seen order varies.
    for leaf, count in sorted(signals.items(), key=lambda item: (-item[1], item[0]))[:8]:
        lines.append(f"  {leaf:<44} {count:>3}")
    flagged = sorted(
        (item for item in scored if item[1].flagged),
        key=lambda item: (item[1].quality_score, item[0].conversation.key),
    )
    lines.append(f"flagged conversations ({len(flagged)} of {len(scored)})")
    for state, result in flagged:
        leaves = ", ".join(
            f"{leaf.rsplit('.', 1)[1]}×{n}" if n > 1 else leaf.rsplit(".", 1)[1]
            for leaf, n in Counter(state.leaf_counts).most_common(4)
        )
        lines.append(
            f"  {state.conversation.key:<28} {state.conversation.agent_id or '-':<18} "
            f"{result.quality:<8} {result.quality_score:>5.1f}  {leaves}"
        )
    ranked = sorted(states, key=lambda state: (-state.priority.value, state.conversation.key))[:5]
    lines.append("most worth a look (triage priority)")
    for state in ranked:
        why = "; ".join(state.priority.reasons[:2]) or "nothing stands out"
        lines.append(f"  {state.conversation.key:<28} {state.priority.value:>5.1f}  {why}")
    return lines
