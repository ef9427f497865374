"""The triage priority: how much a conversation deserves a person's look, 0–100 (SPEC §9).

The §8 quality score answers "how did this conversation go?" for dashboards; the priority answers
"which conversations should someone read first?", and is built for ranking. It is a noisy-OR of
evidence terms, each the chance-like weight of one kind of trouble:

    priority = 100 × (1 − Π over hard terms (1 − p) × (1 − soft × damping))
    soft     = 1 − Π over soft terms (1 − p)

Hard evidence (the agent or its tools demonstrably went wrong, or the user left), per instance n:

    execution failures       1 − 0.85ⁿ   a failed tool call the agent caused or must handle (agents
                                         often recover from one: weak alone, strong repeated)
    execution loops          1 − 0.70ⁿ   retry, drift, oscillation: the agent stuck repeating itself
    environment exhaustion   1 − 0.90ⁿ   the outside world failed (less the agent's doing)
    escalation + quit        1 − 0.60ⁿ   the user asked for a person or gave up
    hand-off                 0.30        the agent passed the user to a person: it did not finish

Soft evidence (the conversation was hard going):

    negative stance          1 − 0.85ⁿ
    misalignment             1 − 0.88ⁿ   corrections, rephrasings, confusion
    repetition               1 − 0.75ⁿ   the agent repeating its answers
    tool-call volume         0.50 × v    v = log₂(calls ÷ the agent's median) ÷ log₂ 6, in [0, 1]:
                                         0 at or below the median, 1 at six times it
    turn volume              0.20 × t    t = log₂(user turns ÷ the agent's median) ÷ log₂ 3, in [0, 1]

Why these terms: on real agent conversations with benchmark outcomes (bench/triage_real.py),
failed conversations are the ones with more tool calls than the agent usually needs (searching,
looping), hand-offs, repeated answers and user trouble; tool errors are rare but always worth a
look. Volume is measured against **the agent's own running median** (:class:`AgentBaselines`: the
latest sizes of its recent conversations), so a coding agent that always makes 40 calls is not
ranked above a support agent that made 12 where it usually makes 3. Until an agent has
``min_conversations`` behind it, fixed scales stand in (calls: log(1 + n) ÷ log 41; turns: SPEC
§4's baseline of 5 user turns, full at 15).

Satisfaction damps only the soft part: ``damping = 1 − 0.3 × min(1, (success + confirmation +
0.5 × gratitude) ÷ 2)``. A thankful user makes a long conversation less suspicious, but never
cancels a failed tool call, a loop, an escalation or a hand-off (simulated and real users thank at
the end of nearly every conversation). Each term is reported with its contribution
(:attr:`Priority.terms`) and the larger ones as plain-language reasons.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from otelsignals.scoring import Score
from otelsignals.signals import taxonomy as tx

# Per-instance weights of the evidence terms (module docstring).
FAILURE_WEIGHT = 0.15
LOOP_WEIGHT = 0.30
EXHAUSTION_WEIGHT = 0.10
DISENGAGED_WEIGHT = 0.40  # escalation and quit
HANDOFF_WEIGHT = 0.30
NEGATIVE_STANCE_WEIGHT = 0.15
MISALIGNMENT_WEIGHT = 0.12
REPETITION_WEIGHT = 0.25
TOOL_VOLUME_WEIGHT = 0.50
TURN_VOLUME_WEIGHT = 0.20
TOOL_VOLUME_FULL_RATIO = 6.0  # calls ÷ median at which the volume term is full
TURN_VOLUME_FULL_RATIO = 3.0
COLD_TOOL_CALLS_FULL = 40  # fixed scale before the agent has a baseline
COLD_TURN_BASELINE, COLD_TURN_SPAN = 5, 10  # SPEC §4's 5 user turns; full 10 turns above
SATISFACTION_DAMPING = 0.3
GRATITUDE_SHARE = 0.5  # a thank-you counts half an explicit "that worked"
REASON_MIN_CONTRIBUTION = 0.05  # terms below this are not named as reasons


@dataclass(frozen=True)
class Priority:
    value: float  # 0–100
    terms: dict[str, float]  # term → its p in [0, 1] (before the noisy-OR), nonzero ones only
    reasons: list[str]  # plain-language, the heaviest first


NO_PRIORITY = Priority(0.0, {}, [])


@dataclass(frozen=True)
class Shape:
    """The structure the priority reads besides the signals."""

    user_turns: int
    tool_calls: int
    median_user_turns: float | None = None  # the agent's running medians, None before the baseline
    median_tool_calls: float | None = None


def _per_instance(weight: float, count: int) -> float:
    return 1.0 - (1.0 - weight) ** count if count > 0 else 0.0


def _log_ratio(value: float, median: float, full_ratio: float) -> float:
    if value <= median:
        return 0.0
    return min(1.0, math.log2(value / max(median, 1.0)) / math.log2(full_ratio))


def tool_volume(shape: Shape) -> float:
    if shape.median_tool_calls is None:
        return min(1.0, math.log1p(shape.tool_calls) / math.log1p(COLD_TOOL_CALLS_FULL))
    return _log_ratio(shape.tool_calls, shape.median_tool_calls, TOOL_VOLUME_FULL_RATIO)


def turn_volume(shape: Shape) -> float:
    if shape.median_user_turns is None:
        return min(1.0, max(0.0, (shape.user_turns - COLD_TURN_BASELINE) / COLD_TURN_SPAN))
    return _log_ratio(shape.user_turns, shape.median_user_turns, TURN_VOLUME_FULL_RATIO)


def priority(score: Score, shape: Shape, handoff: Mapping[str, Any] | None = None) -> Priority:
    """The priority of a conversation as it stands (``score``: its signals so far)."""
    leaves, counts = score.leaf_counts, score.counts
    disengaged = leaves.get(tx.ESCALATION, 0) + leaves.get(tx.QUIT, 0)
    hard = {
        "execution_failures": _per_instance(FAILURE_WEIGHT, counts.get(tx.FAILURE, 0)),
        "execution_loops": _per_instance(LOOP_WEIGHT, counts.get(tx.LOOPS, 0)),
        "environment_exhaustion": _per_instance(EXHAUSTION_WEIGHT, counts.get(tx.EXHAUSTION, 0)),
        "escalation_or_quit": _per_instance(DISENGAGED_WEIGHT, disengaged),
        "handoff": HANDOFF_WEIGHT if counts.get(tx.HANDOFF_CATEGORY, 0) else 0.0,
    }
    soft = {
        "negative_stance": _per_instance(NEGATIVE_STANCE_WEIGHT, leaves.get(tx.NEGATIVE_STANCE, 0)),
        "misalignment": _per_instance(MISALIGNMENT_WEIGHT, counts.get(tx.MISALIGNMENT, 0)),
        "repetition": _per_instance(REPETITION_WEIGHT, leaves.get(tx.REPETITION, 0)),
        "tool_volume": TOOL_VOLUME_WEIGHT * tool_volume(shape),
        "turn_volume": TURN_VOLUME_WEIGHT * turn_volume(shape),
    }
    satisfied = (
        leaves.get(tx.SUCCESS, 0)
        + leaves.get(tx.CONFIRMATION, 0)
        + GRATITUDE_SHARE * leaves.get(tx.GRATITUDE, 0)
    )
    damping = 1.0 - SATISFACTION_DAMPING * min(1.0, satisfied / 2.0)
    soft = {name: p * damping for name, p in soft.items()}
    untouched = 1.0
    for p in (*hard.values(), *soft.values()):
        untouched *= 1.0 - p
    terms = {name: round(p, 4) for name, p in (*hard.items(), *soft.items()) if p > 0}
    return Priority(round(100.0 * (1.0 - untouched), 1), terms, _reasons(terms, score, shape, handoff))


def _reasons(
    terms: dict[str, float], score: Score, shape: Shape, handoff: Mapping[str, Any] | None
) -> list[str]:
    leaves = score.leaf_counts
    out: list[tuple[float, str]] = []

    def named(selected: Iterable[str]) -> str:
        counted = sorted((leaf.rsplit(".", 1)[1], leaves.get(leaf, 0)) for leaf in selected)
        return ", ".join(f"{name}×{n}" if n > 1 else name for name, n in counted if n > 0)

    def leaf_list(category: str) -> str:
        return named(leaf for leaf in leaves if tx.category_of(leaf) == category)

    for name, p in terms.items():
        if p < REASON_MIN_CONTRIBUTION:
            continue
        if name == "execution_failures":
            text = f"{score.counts[tx.FAILURE]} failed tool call(s): {leaf_list(tx.FAILURE)}"
        elif name == "execution_loops":
            text = f"agent looping: {leaf_list(tx.LOOPS)}"
        elif name == "environment_exhaustion":
            text = f"outside failures: {leaf_list(tx.EXHAUSTION)}"
        elif name == "escalation_or_quit":
            text = f"user asked for a person or gave up: {named((tx.ESCALATION, tx.QUIT))}"
        elif name == "handoff":
            text = "agent handed the user to a person"
            if handoff:
                after = ", ".join(str(category) for category in handoff.get("after") or ())
                text += f" (asked by {handoff.get('asked_by')}" + (f", after {after})" if after else ")")
        elif name == "negative_stance":
            text = f"user frustrated ({leaves.get(tx.NEGATIVE_STANCE, 0)}×)"
        elif name == "misalignment":
            text = f"user corrected or re-asked: {leaf_list(tx.MISALIGNMENT)}"
        elif name == "repetition":
            text = f"agent repeated itself ({leaves.get(tx.REPETITION, 0)}×)"
        elif name == "tool_volume":
            text = f"{shape.tool_calls} tool calls" + (
                f" ({shape.tool_calls / max(shape.median_tool_calls, 1.0):.1f}× this agent's median of "
                f"{shape.median_tool_calls:g})"
                if shape.median_tool_calls is not None
                else ""
            )
        else:  # turn_volume
            text = f"{shape.user_turns} user turns" + (
                f" (this agent's median: {shape.median_user_turns:g})"
                if shape.median_user_turns is not None
                else ""
            )
        out.append((p, text))
    out.sort(key=lambda item: -item[0])
    return [text for _, text in out]


@dataclass
class _AgentSample:
    sizes: OrderedDict[str, tuple[int, int]] = field(default_factory=OrderedDict)  # key → (turns, calls)
    medians: tuple[float, float] | None = None
    changes: int = 0  # updates since the medians were computed


class AgentBaselines:
    """Per agent, the latest (user turns, tool calls) of its ``window`` most recently active
    conversations, and their medians: what "long" and "many tool calls" mean for that agent.

    A conversation's entry is updated as it grows, so the medians mix finished conversations with
    open ones (in a steady stream, mostly finished ones). The medians are recomputed after
    ``refresh`` updates, not on every turn. Bounded: ``max_agents`` agents (least recently seen
    forgotten) × ``window`` conversations.
    """

    def __init__(
        self, window: int = 200, min_conversations: int = 10, max_agents: int = 1000, refresh: int = 8
    ) -> None:
        self.window = window
        self.min_conversations = min_conversations
        self.max_agents = max_agents
        self.refresh = refresh
        self._agents: OrderedDict[str, _AgentSample] = OrderedDict()

    def __len__(self) -> int:
        return len(self._agents)

    def medians(self, agent: str | None) -> tuple[float, float] | None:
        """(median user turns, median tool calls) of the agent's other conversations; None while
        fewer than ``min_conversations`` are known."""
        sample = self._agents.get(agent or "")
        if sample is None or len(sample.sizes) < self.min_conversations:
            return None
        if sample.medians is None or sample.changes >= self.refresh:
            turns = sorted(size[0] for size in sample.sizes.values())
            calls = sorted(size[1] for size in sample.sizes.values())
            sample.medians = (_median(turns), _median(calls))
            sample.changes = 0
        return sample.medians

    def record(self, agent: str | None, conversation: str, user_turns: int, tool_calls: int) -> None:
        name = agent or ""
        sample = self._agents.get(name)
        if sample is None:
            sample = self._agents[name] = _AgentSample()
            if len(self._agents) > self.max_agents:
                self._agents.popitem(last=False)
        else:
            self._agents.move_to_end(name)
        sample.sizes[conversation] = (user_turns, tool_calls)
        sample.sizes.move_to_end(conversation)
        if len(sample.sizes) > self.window:
            sample.sizes.popitem(last=False)
        sample.changes += 1


def _median(ordered: list[int]) -> float:
    middle = len(ordered) // 2
    return float(ordered[middle]) if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0
