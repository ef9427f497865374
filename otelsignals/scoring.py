"""Severity, efficiency, the quality score and its bucket, and the flag (SPEC §4, §8).

The weights are the reference implementation's, kept as they are, plus one documented positive
term the reference lacks (it could never reach ``excellent`` and scored a clean conversation 50):

    frictionless bonus = 15 × efficiency, when the user showed satisfaction and nothing negative
    happened (no disengagement, misalignment, stagnation, execution failure, loop or exhaustion),
    + 5 more when the agent used tools and every call succeeded.

So an efficient, satisfied, frictionless conversation scores 62 + 15 = 77 (excellent) with one
satisfaction signal and up to 89 with three and working tools; a clean conversation with no
satisfaction stays neutral (50), because nothing says the user was served well.
"""

from __future__ import annotations

import itertools
import operator
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from otelsignals.compaction import stored_message_text
from otelsignals.model import Conversation, Role
from otelsignals.signals.base import BASELINE_USER_TURNS
from otelsignals.signals.taxonomy import (
    CATEGORIES,
    DISENGAGEMENT,
    ESCALATION,
    EXHAUSTION,
    FAILURE,
    HANDOFF_CATEGORY,
    LOOPS,
    MISALIGNMENT,
    QUIT,
    SATISFACTION,
    STAGNATION,
    category_of,
)

BUCKETS = (("excellent", 75.0), ("good", 60.0), ("neutral", 40.0), ("poor", 25.0), ("severe", 0.0))
NEUTRAL_START = 50.0
SATISFACTION_POINTS = 20.0
SATISFACTION_FACTORS = {1: 0.6, 2: 0.8}  # 3 or more: 0.95
DISENGAGEMENT_PER_SEVERITY = 10.0
MISALIGNMENT_PENALTY = 15.0
MISALIGNMENT_RATIO = 0.3  # of user turns
STAGNATION_PER_SEVERITY = 8.0
STAGNATION_MIN_COUNT = 3  # "count > 2"
PER_FAILURE, PER_LOOP, PER_EXHAUSTION = 8.0, 5.0, 3.0
FRICTIONLESS_BONUS = 15.0
TOOL_SUCCESS_BONUS = 5.0
EFFICIENCY_DECAY = 0.3
DRAGGING_EFFICIENCY = 0.5


def severity(count: int) -> int:
    """0 none, 1 mild (1–2), 2 moderate (3–4), 3 severe (5+)."""
    if count <= 0:
        return 0
    if count <= 2:
        return 1
    if count <= 4:
        return 2
    return 3


def efficiency(user_turns: int, baseline: int = BASELINE_USER_TURNS) -> float:
    if user_turns <= baseline:
        return 1.0
    return 1.0 / (1.0 + EFFICIENCY_DECAY * (user_turns - baseline))


def bucket(score: float) -> str:
    for name, lower in BUCKETS:
        if score >= lower:
            return name
    return "severe"


@dataclass(frozen=True)
class Score:
    quality: str
    quality_score: float
    efficiency_score: float
    flagged: bool
    counts: dict[str, int]  # per category ("interaction.misalignment" → n), zero counts included
    leaf_counts: dict[str, int]
    user_turns: int
    turn_count: int  # user + assistant turns
    tools_used: bool

    def severity_of(self, category: str) -> int:
        return severity(self.counts.get(category, 0))


def turn_counts(conversation: Conversation) -> tuple[int, int]:
    """(user turns, user + assistant turns). An assistant turn is an answer with text: a message
    that only calls tools is the agent working, not a turn of the conversation."""
    return _counts(conversation)[:2]


def tool_outcomes(conversation: Conversation) -> tuple[bool, bool]:
    """(any tool used, every tool result succeeded)."""
    return _counts(conversation)[2:]


_ROLE = operator.attrgetter("role")
_TOOL_RESULT = operator.attrgetter("tool_result")
_IS_ERROR = operator.attrgetter("is_error")


def _counts(conversation: Conversation) -> tuple[int, int, bool, bool]:
    """:func:`turn_counts`, then :func:`tool_outcomes`. Every turn scores the whole conversation,
    up to thousands of messages: each pass over them runs in C (map, compress, filter)."""
    messages = conversation.messages
    roles = list(map(_ROLE, messages))
    # Turns in the part trimmed away to bound memory still count.
    user = conversation.trimmed_user_turns + sum(map(operator.is_, roles, itertools.repeat(Role.USER)))
    answers = itertools.compress(messages, map(operator.is_, roles, itertools.repeat(Role.ASSISTANT)))
    # (compacted text is never empty: the stored text says whether there is any without expanding it)
    assistant = conversation.trimmed_assistant_turns + sum(map(bool, map(stored_message_text, answers)))
    tools = itertools.compress(messages, map(operator.is_, roles, itertools.repeat(Role.TOOL)))
    results = list(filter(None, map(_TOOL_RESULT, tools)))
    return user, user + assistant, bool(results), not any(map(_IS_ERROR, results))


def score(
    conversation: Conversation, leaf_counts: Mapping[str, int], baseline: int = BASELINE_USER_TURNS
) -> Score:
    """Score a conversation from how many instances of each leaf type it has shown so far."""
    leaf_counts = Counter(leaf_counts)
    counts = dict.fromkeys(CATEGORIES, 0)
    for leaf, n in leaf_counts.items():
        category = category_of(leaf)
        counts[category] = counts.get(category, 0) + n
    user_turns, turn_count, tools_used, tools_ok = _counts(conversation)
    eff = efficiency(user_turns, baseline)
    quality_score = _quality_score(counts, leaf_counts, user_turns, eff, tools_used and tools_ok)
    quality = bucket(quality_score)
    flagged = (
        counts[DISENGAGEMENT] > 0
        or counts[STAGNATION] >= STAGNATION_MIN_COUNT
        or counts[FAILURE] > 0
        or counts[LOOPS] > 0
        or quality in ("poor", "severe")
    )
    return Score(
        quality=quality,
        quality_score=quality_score,
        efficiency_score=round(eff, 4),
        flagged=flagged,
        counts=counts,
        leaf_counts=dict(leaf_counts),
        user_turns=user_turns,
        turn_count=turn_count,
        tools_used=tools_used,
    )


def _quality_score(
    counts: dict[str, int], leaf_counts: Counter[str], user_turns: int, eff: float, tools_succeeded: bool
) -> float:
    if (
        leaf_counts[ESCALATION] > 0
        or leaf_counts[QUIT] > 0
        or severity(counts[DISENGAGEMENT]) == 3
        or severity(counts[STAGNATION]) == 3
    ):
        return 0.0
    value = NEUTRAL_START
    satisfied = counts[SATISFACTION]
    if satisfied:
        value += SATISFACTION_POINTS * SATISFACTION_FACTORS.get(satisfied, 0.95)
    value -= DISENGAGEMENT_PER_SEVERITY * severity(counts[DISENGAGEMENT])
    misaligned = counts[MISALIGNMENT] / max(user_turns, 1) > MISALIGNMENT_RATIO
    if misaligned:
        value -= MISALIGNMENT_PENALTY
    stagnating = counts[STAGNATION] >= STAGNATION_MIN_COUNT
    if stagnating:
        value -= STAGNATION_PER_SEVERITY * severity(counts[STAGNATION])
    value -= PER_FAILURE * counts[FAILURE] + PER_LOOP * counts[LOOPS] + PER_EXHAUSTION * counts[EXHAUSTION]
    negative = (
        counts[DISENGAGEMENT]
        or counts[MISALIGNMENT]
        or counts[STAGNATION]
        or counts[FAILURE]
        or counts[LOOPS]
        or counts[EXHAUSTION]
        or counts[HANDOFF_CATEGORY]  # handed to a person: not served frictionlessly by the agent
    )
    if satisfied and not negative:
        value += FRICTIONLESS_BONUS * eff + (TOOL_SUCCESS_BONUS if tools_succeeded else 0.0)
    return round(min(100.0, max(0.0, value)), 2)
