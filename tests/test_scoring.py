"""Severity, efficiency, quality score and bucket, flag: SPEC §4 and §8, number by number."""

from __future__ import annotations

from collections import Counter

import pytest

from otelsignals.model import Conversation, Message, Role, ToolResult
from otelsignals.scoring import bucket, efficiency, score, severity
from otelsignals.signals import taxonomy as t


def conversation(user_turns: int, *, tools: list[bool] | None = None) -> Conversation:
    messages: list[Message] = []
    for turn in range(user_turns):
        messages += [Message(Role.USER, f"question {turn}"), Message(Role.ASSISTANT, f"answer {turn}")]
    for failed in tools or []:
        messages.append(Message(Role.TOOL, "result", tool_result=ToolResult(name="lookup", is_error=failed)))
    return Conversation("c", messages)


def signals(*types: str) -> Counter[str]:
    return Counter(types)


@pytest.mark.parametrize(("count", "expected"), [(0, 0), (1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (40, 3)])
def test_severity_bands(count, expected):
    assert severity(count) == expected


@pytest.mark.parametrize(
    ("turns", "expected"), [(1, 1.0), (5, 1.0), (6, 1 / 1.3), (8, 1 / 1.9), (9, 1 / 2.2)]
)
def test_efficiency_formula_with_baseline_five(turns, expected):
    assert efficiency(turns) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (100, "excellent"),
        (75, "excellent"),
        (74.99, "good"),
        (60, "good"),
        (59.9, "neutral"),
        (40, "neutral"),
        (39.9, "poor"),
        (25, "poor"),
        (24.9, "severe"),
        (0, "severe"),
    ],
)
def test_bucket_boundaries(value, name):
    assert bucket(value) == name


def test_clean_conversation_is_neutral_fifty():
    result = score(conversation(3), {})
    assert (result.quality_score, result.quality, result.flagged) == (50.0, "neutral", False)


@pytest.mark.parametrize(
    ("n", "expected"), [(1, 50 + 12 + 15), (2, 50 + 16 + 15), (3, 50 + 19 + 15), (7, 84)]
)
def test_satisfied_frictionless_efficient_conversation_reaches_excellent(n, expected):
    result = score(conversation(3), signals(*[t.GRATITUDE] * n))
    assert result.quality_score == pytest.approx(expected)
    assert result.quality == "excellent"


def test_working_tools_add_to_a_frictionless_conversation():
    assert score(conversation(2, tools=[False, False]), signals(t.SUCCESS)).quality_score == 82.0
    # A failed call is friction: the reference weights apply and no bonus is given.
    failing = score(conversation(2, tools=[False, True]), signals(t.SUCCESS, t.INVALID_ARGS))
    assert failing.quality_score == 50 + 12 - 8


def test_bonus_shrinks_with_inefficiency():
    long = score(conversation(9), signals(t.GRATITUDE))
    assert long.quality_score == round(62 + 15 / 2.2, 2)  # scores carry two decimals
    assert long.quality == "good"


def test_documented_example_escalation_and_negative_stance_is_severe():
    result = score(conversation(2), signals(t.NEGATIVE_STANCE, t.ESCALATION))
    assert (result.quality, result.quality_score, result.flagged) == ("severe", 0.0, True)
    assert result.counts[t.DISENGAGEMENT] == 2 and result.severity_of(t.DISENGAGEMENT) == 1


@pytest.mark.parametrize(
    "kinds",
    [[t.QUIT], [t.NEGATIVE_STANCE] * 5, [t.REPETITION] * 5, [t.GRATITUDE] * 3 + [t.ESCALATION]],
)
def test_immediately_severe(kinds):
    assert score(conversation(6), signals(*kinds)).quality_score == 0.0


def test_negative_stance_subtracts_ten_per_severity_level():
    assert score(conversation(4), signals(t.NEGATIVE_STANCE)).quality_score == 40.0
    assert score(conversation(4), signals(*[t.NEGATIVE_STANCE] * 3)).quality_score == 30.0


def test_misalignment_counts_only_above_thirty_percent_of_user_turns():
    assert score(conversation(10), signals(*[t.CORRECTION] * 3)).quality_score == 50.0  # 0.3, not above
    assert score(conversation(10), signals(*[t.CORRECTION] * 4)).quality_score == 35.0
    assert score(conversation(1), signals(t.REPHRASE)).quality == "poor"  # 1/1 > 0.3


def test_stagnation_counts_only_above_two():
    two = score(conversation(4), signals(t.REPETITION, t.REPETITION))
    assert (two.quality_score, two.flagged) == (50.0, False)
    three = score(conversation(4), signals(*[t.REPETITION] * 3))
    assert (three.quality_score, three.flagged) == (50 - 16, True)


def test_execution_and_environment_costs():
    result = score(conversation(3), signals(t.INVALID_ARGS, t.RETRY, t.RATE_LIMIT, t.TIMEOUT))
    assert result.quality_score == 50 - 8 - 5 - 3 - 3
    assert result.flagged  # failures and loops flag; exhaustion alone does not
    assert not score(conversation(3), signals(t.RATE_LIMIT)).flagged


def test_score_is_clamped():
    assert score(conversation(3), signals(*[t.BAD_QUERY] * 20)).quality_score == 0.0


def test_turn_count_is_user_plus_assistant_answers():
    messages = [
        Message(Role.SYSTEM, "be nice"),
        Message(Role.USER, "find my order"),
        Message(Role.ASSISTANT, None),  # only calls a tool
        Message(Role.TOOL, "{}", tool_result=ToolResult(name="get_order")),
        Message(Role.ASSISTANT, "It ships today."),
    ]
    result = score(Conversation("c", messages), {})
    assert (result.user_turns, result.turn_count) == (1, 2)


def test_turns_and_tool_outcomes_count_what_each_message_says():
    from otelsignals.compaction import Outcome, compact, expansions
    from otelsignals.scoring import tool_outcomes, turn_counts

    sentence = "The refund was approved and will reach your card within five working days."
    # (a text of its own, held by the message alone: a constant or a variable would hold it too)
    answers = [
        Message(Role.ASSISTANT, " ".join([sentence] * 2)),
        Message(Role.ASSISTANT, ""),
        Message(Role.ASSISTANT, None),
    ]
    assert compact(answers[0]) is Outcome.COMPACTED  # counted without being expanded (checked below)
    expanded = expansions()
    base = [
        Message(Role.SYSTEM, "be nice"),
        Message(Role.USER, "refund please"),
        *answers,
        Message(Role.TOOL, "no result object"),  # a tool message without a result: no tool outcome
        Message(Role.TOOL, "{}", tool_result=ToolResult(name="refund")),
    ]
    failed = Message(Role.TOOL, "boom", tool_result=ToolResult(name="refund", is_error=True))
    cases = [
        (base, (1, 2), (True, True)),
        ([*base, failed], (1, 2), (True, False)),
        ([m for m in base if m.role is not Role.TOOL], (1, 2), (False, True)),
        ([m for m in base if m.tool_result is None], (1, 2), (False, True)),
        ([], (0, 0), (False, True)),
    ]
    for messages, (users, turns), outcomes in cases:
        conversation = Conversation("c", messages, trimmed_user_turns=2, trimmed_assistant_turns=3)
        assert turn_counts(conversation) == (users + 2, turns + 5)  # the trimmed turns still count
        assert tool_outcomes(conversation) == outcomes
        result = score(conversation, {})
        assert (result.user_turns, result.turn_count) == (users + 2, turns + 5)
        assert result.tools_used is outcomes[0]
    assert expansions() == expanded
