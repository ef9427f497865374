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
    hand-off, unresolved     0.50        the hand-off says the problem outlasted what the agent tried
                                         ("despite the APN reset", "the issue persists": the
                                         hand-off's ``unresolved``): it gave up, not routed a case
    problem persists         0.50        the user's last word says the problem is still there
                                         ("it still failed", "nothing changed": an
                                         interaction.outcome.persists report that no later user
                                         message took back; signals/outcome.py, ``standing_report``
                                         of the conversation's detector memory, passed as
                                         ``persisting``; None leaves the term off). As heavy as
                                         an unresolved hand-off: on the development half any
                                         weight from 0.4 to 0.8 ranked alike (AUROC 0.904–0.906)
    turns cut off            1 − 0.40ⁿ   a whole agent turn (one trace) ended on a tool step: the
                                         tools its last assistant message asked for ran, and no
                                         model call or answer came after them (a step limit, a
                                         timeout, a crash in the agent's loop; conversation.TurnEnd);
                                         not counted for an agent whose turns end so in half of
                                         its latest conversations or more (its design: a
                                         final-answer tool, one model step per request)

Soft evidence (the conversation was hard going):

    negative stance          1 − 0.85ⁿ
    misalignment             1 − 0.88ⁿ   corrections, rephrasings, confusion
    repetition               1 − 0.75ⁿ   the agent repeating its answers
    tool-call volume         0.50 × v    v = max(relative, absolute), each in [0, 1]:
                                         relative = log₂(calls ÷ the agent's median) ÷ log₂ 6
                                         (0 at or below the median, 1 at six times it);
                                         absolute = log(calls ÷ 3) ÷ log(40 ÷ 3)
                                         (0 up to 3 calls, 1 at 40)
    turn volume              0.20 × t    t = max(log₂(user turns ÷ the agent's median) ÷ log₂ 3,
                                         (user turns − 5) ÷ 10), clipped to [0, 1]

Why these terms: on real agent conversations with benchmark outcomes (bench/triage_real.py),
failed conversations are the ones with more tool calls than the agent usually needs (searching,
looping), hand-offs, repeated answers and user trouble; tool errors are rare but always worth a
look. Volume counts in two ways and the larger wins. **Against the agent's own running median**
(:class:`AgentBaselines`: the latest sizes of its recent conversations): a support agent that made
12 calls where it usually makes 3 is struggling on what is usually easy. **In absolute terms**
(SPEC §4's 5 user turns as the base; 3 calls as what any task may need, 40 as many): a long
conversation is a hard task, and hard tasks fail more whatever the agent (on the development half,
agents whose conversations are longer fail several times as often; the per-agent measure alone
ranked them no higher than the short conversations of a rarely failing agent). The price: an
agent whose every conversation is long keeps a volume term on all of them, so its other evidence
decides their order. Before an agent has ``min_conversations`` behind it, only the absolute scale
counts.

Satisfaction damps only the soft part: ``damping = 1 − 0.3 × min(1, (success + confirmation +
0.5 × gratitude) ÷ 2)``. A thankful user makes a long conversation less suspicious, but never
cancels a failed tool call, a loop, an escalation or a hand-off (simulated and real users thank at
the end of nearly every conversation). Each term is reported with its contribution
(:attr:`Priority.terms`) and the larger ones as plain-language reasons.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from otelsignals.scoring import Score
from otelsignals.signals import taxonomy as tx

# Per-instance weights of the evidence terms (module docstring).
FAILURE_WEIGHT = 0.15
LOOP_WEIGHT = 0.30
EXHAUSTION_WEIGHT = 0.10
DISENGAGED_WEIGHT = 0.40  # escalation and quit
HANDOFF_WEIGHT = 0.30
UNRESOLVED_HANDOFF_WEIGHT = 0.50  # the agent gave up on the problem (handoff.py, "unresolved")
PERSISTS_WEIGHT = 0.50  # the user's last word: the problem persists (signals/outcome.py)
CUT_OFF_WEIGHT = 0.60  # the user got no answer at all: stronger than asking for a person
USUAL_CUT_OFF_SHARE = 0.5  # an agent whose conversations end turns on tools this often: its design
NEGATIVE_STANCE_WEIGHT = 0.15
MISALIGNMENT_WEIGHT = 0.12
REPETITION_WEIGHT = 0.25
TOOL_VOLUME_WEIGHT = 0.50
TURN_VOLUME_WEIGHT = 0.20
TOOL_VOLUME_FULL_RATIO = 6.0  # calls ÷ median at which the volume term is full
TURN_VOLUME_FULL_RATIO = 3.0
ABSOLUTE_TOOL_CALLS_BASE, ABSOLUTE_TOOL_CALLS_FULL = 3.0, 40.0  # the fixed scale of tool calls
ABSOLUTE_TURN_BASE, ABSOLUTE_TURN_SPAN = 5, 10  # SPEC §4's 5 user turns; full 10 turns above
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
    cut_off_turns: int = 0  # turns cut off (analysis.py)
    usual_cut_off_share: float | None = None  # of the agent's conversations with one; None: no baseline


def _per_instance(weight: float, count: int) -> float:
    return 1.0 - (1.0 - weight) ** count if count > 0 else 0.0


def _log_ratio(value: float, median: float, full_ratio: float) -> float:
    if value <= median:
        return 0.0
    return min(1.0, math.log2(value / max(median, 1.0)) / math.log2(full_ratio))


def absolute_tool_volume(shape: Shape) -> float:
    """Tool calls on a fixed scale, whatever the agent: 0 up to 3 (what any task may need), 1 at
    40, logarithmic between."""
    return _log_ratio(
        shape.tool_calls, ABSOLUTE_TOOL_CALLS_BASE, ABSOLUTE_TOOL_CALLS_FULL / ABSOLUTE_TOOL_CALLS_BASE
    )


def absolute_turn_volume(shape: Shape) -> float:
    """User turns on a fixed scale: 0 at SPEC §4's 5 turns, 1 at 15."""
    return min(1.0, max(0.0, (shape.user_turns - ABSOLUTE_TURN_BASE) / ABSOLUTE_TURN_SPAN))


def relative_tool_volume(shape: Shape) -> float:
    """Tool calls against the agent's running median (0 before the agent has a baseline)."""
    if shape.median_tool_calls is None:
        return 0.0
    return _log_ratio(shape.tool_calls, shape.median_tool_calls, TOOL_VOLUME_FULL_RATIO)


def relative_turn_volume(shape: Shape) -> float:
    if shape.median_user_turns is None:
        return 0.0
    return _log_ratio(shape.user_turns, shape.median_user_turns, TURN_VOLUME_FULL_RATIO)


def tool_volume(shape: Shape) -> float:
    """Many tool calls for this agent, or many in absolute terms: the larger of the two."""
    return max(relative_tool_volume(shape), absolute_tool_volume(shape))


def turn_volume(shape: Shape) -> float:
    return max(relative_turn_volume(shape), absolute_turn_volume(shape))


def counted_cut_off_turns(shape: Shape) -> int:
    """The turns cut off, unless the agent's turns end so in half of its conversations or more."""
    usual = shape.usual_cut_off_share
    return 0 if usual is not None and usual >= USUAL_CUT_OFF_SHARE else shape.cut_off_turns


def handoff_weight(handoff: Mapping[str, Any] | None) -> float:
    """The hand-off term: heavier when the latest hand-off says the agent gave up on the problem."""
    return UNRESOLVED_HANDOFF_WEIGHT if handoff and handoff.get("unresolved") else HANDOFF_WEIGHT


def persists_weight(score: Score, persisting: str | None) -> float:
    """The problem-persists term: the user's report that the problem is still there, when their last
    word leaves it standing (``persisting``: its library phrase, signals.outcome.standing_report)."""
    return PERSISTS_WEIGHT if persisting and score.leaf_counts.get(tx.PERSISTS, 0) else 0.0


def priority(
    score: Score, shape: Shape, handoff: Mapping[str, Any] | None = None, persisting: str | None = None
) -> Priority:
    """The priority of a conversation as it stands (``score``: its signals so far; ``handoff``: the
    latest hand-off's metadata; ``persisting``: the phrase of the report that the problem persists the
    user's last word leaves standing, signals.outcome.standing_report)."""
    leaves, counts = score.leaf_counts, score.counts
    disengaged = leaves.get(tx.ESCALATION, 0) + leaves.get(tx.QUIT, 0)
    hard = {
        "execution_failures": _per_instance(FAILURE_WEIGHT, counts.get(tx.FAILURE, 0)),
        "execution_loops": _per_instance(LOOP_WEIGHT, counts.get(tx.LOOPS, 0)),
        "environment_exhaustion": _per_instance(EXHAUSTION_WEIGHT, counts.get(tx.EXHAUSTION, 0)),
        "escalation_or_quit": _per_instance(DISENGAGED_WEIGHT, disengaged),
        "handoff": handoff_weight(handoff) if counts.get(tx.HANDOFF_CATEGORY, 0) else 0.0,
        "problem_persists": persists_weight(score, persisting),
        "cut_off_turns": _per_instance(CUT_OFF_WEIGHT, counted_cut_off_turns(shape)),
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
    reasons = _reasons(terms, score, shape, handoff, persisting)
    return Priority(round(100.0 * (1.0 - untouched), 1), terms, reasons)


def _named(leaves: Mapping[str, int], selected: Iterable[str]) -> str:
    counted = sorted((leaf.rsplit(".", 1)[1], leaves.get(leaf, 0)) for leaf in selected)
    return ", ".join(f"{name}×{n}" if n > 1 else name for name, n in counted if n > 0)


def _leaf_list(leaves: Mapping[str, int], category: str) -> str:
    return _named(leaves, (leaf for leaf in leaves if tx.category_of(leaf) == category))


def _reasons(
    terms: dict[str, float],
    score: Score,
    shape: Shape,
    handoff: Mapping[str, Any] | None,
    persisting: str | None = None,
) -> list[str]:
    leaves = score.leaf_counts
    out: list[tuple[float, str]] = []
    # (Functions of the module, not closures over each other: compiled (native.py), closures that
    # call each other form a reference cycle on every call.)
    named = functools.partial(_named, leaves)
    leaf_list = functools.partial(_leaf_list, leaves)
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
            text = _handoff_reason(handoff)
        elif name == "problem_persists":
            text = f"the user's last word: the problem persists ({persisting!r})"
        elif name == "cut_off_turns":
            turns = counted_cut_off_turns(shape)
            text = "agent's turn ended on a tool step, unanswered" + (f" ({turns}×)" if turns > 1 else "")
        elif name == "negative_stance":
            text = f"user frustrated ({leaves.get(tx.NEGATIVE_STANCE, 0)}×)"
        elif name == "misalignment":
            text = f"user corrected or re-asked: {leaf_list(tx.MISALIGNMENT)}"
        elif name == "repetition":
            text = f"agent repeated itself ({leaves.get(tx.REPETITION, 0)}×)"
        elif name == "tool_volume":
            text = _tool_volume_reason(shape)
        else:  # turn_volume
            text = _turn_volume_reason(shape)
        out.append((p, text))
    out.sort(key=lambda item: -item[0])
    return [text for _, text in out]


def _handoff_reason(handoff: Mapping[str, Any] | None) -> str:
    text = "agent handed the user to a person"
    if handoff and handoff.get("unresolved"):
        text += f", the problem unresolved ({handoff['unresolved']!r})"
    if handoff:
        after = ", ".join(str(category) for category in handoff.get("after") or ())
        text += f" (asked by {handoff.get('asked_by')}" + (f", after {after})" if after else ")")
    return text


def _tool_volume_reason(shape: Shape) -> str:
    text = f"{shape.tool_calls} tool calls"
    if shape.median_tool_calls is not None and relative_tool_volume(shape) > 0:
        ratio = shape.tool_calls / max(shape.median_tool_calls, 1.0)
        text += f" ({ratio:.1f}× this agent's median of {shape.median_tool_calls:g})"
    return text


def _turn_volume_reason(shape: Shape) -> str:
    text = f"{shape.user_turns} user turns"
    if shape.median_user_turns is not None and relative_turn_volume(shape) > 0:
        text += f" (this agent's median: {shape.median_user_turns:g})"
    return text


class Usual(NamedTuple):
    """What is usual for one agent: the medians of its conversations' sizes, and the share of its
    conversations with a turn cut off (triage.Shape)."""

    user_turns: float
    tool_calls: float
    cut_off_share: float


@dataclass
class _AgentSample:
    # key → (user turns, tool calls, whether a turn was cut off)
    sizes: OrderedDict[str, tuple[int, int, bool]] = field(default_factory=OrderedDict)
    usual: Usual | None = None
    changes: int = 0  # updates since ``usual`` was computed


class AgentBaselines:
    """Per agent, the latest sizes of its ``window`` most recently active conversations, and what is
    usual from them: what "long", "many tool calls" and "often cut off" mean for that agent.

    A conversation's entry is updated as it grows, so the medians mix finished conversations with
    open ones (in a steady stream, mostly finished ones). ``Usual`` is recomputed after ``refresh``
    updates, not on every turn. Bounded: ``max_agents`` agents (least recently seen forgotten) ×
    ``window`` conversations.
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

    def usual(self, agent: str | None) -> Usual | None:
        """What is usual for the agent's conversations; None while fewer than ``min_conversations``
        are known."""
        sample = self._agents.get(agent or "")
        if sample is None or len(sample.sizes) < self.min_conversations:
            return None
        if sample.usual is None or sample.changes >= self.refresh:
            sizes = sample.sizes.values()
            sample.usual = Usual(
                _median(sorted(size[0] for size in sizes)),
                _median(sorted(size[1] for size in sizes)),
                sum(1 for size in sizes if size[2]) / len(sizes),
            )
            sample.changes = 0
        return sample.usual

    def record(self, agent: str | None, conversation: str, shape: Shape) -> None:
        name = agent or ""
        sample = self._agents.get(name)
        if sample is None:
            sample = self._agents[name] = _AgentSample()
            if len(self._agents) > self.max_agents:
                self._agents.popitem(last=False)
        else:
            self._agents.move_to_end(name)
        sample.sizes[conversation] = (shape.user_turns, shape.tool_calls, shape.cut_off_turns > 0)
        sample.sizes.move_to_end(conversation)
        if len(sample.sizes) > self.window:
            sample.sizes.popitem(last=False)
        sample.changes += 1


def _median(ordered: list[int]) -> float:
    middle = len(ordered) // 2
    return float(ordered[middle]) if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0
