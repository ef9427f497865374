"""interaction.disengagement: escalation, quit and negative stance, on short conversations run turn by turn.

The negative-stance cues with word lists (shouting, "!!!", rhetorical questions) have their examples in
phrases/disengagement.yaml, run by tests/signals/test_word_lists.py."""

from __future__ import annotations

import pytest

from otelsignals.signals import taxonomy as tx
from tests.signals.conversations import (
    A,
    Turn,
    U,
    assert_fires,
    only,
    opened,
)

# --- disengagement.escalation ----------------------------------------------------------------------

ESCALATION_POSITIVES = [
    [(U, "I want to talk to a human right now.")],  # any user message, even the first
    opened((U, "Get me a real person.")),
    opened((A, "I can't change the booking."), (U, "Can I speak to your manager?")),
    opened((U, "Please escalate this to your support team.")),
    opened((U, "TRANSFER ME TO AN AGENT")),
    opened((U, "Is there a human I can talk to?")),
    opened((U, "I want to file a complaint.")),
    opened((U, "pls escalte this")),  # typo
    opened((U, "Let me speak to a manger.")),  # typo
    opened((U, "Thanks for nothing. Connect me to someone from support.")),
]
ESCALATION_NEAR_MISSES = [
    opened((U, "The human resources portal is down.")),
    opened((U, "My colleague wrote:\n> get me a human\nWhat should I tell him?")),
    opened((U, "On Mon, 3 Jun 2024, Bob wrote:\nget me a human, this bot is useless")),
    opened((U, "I don't need to talk to a human, you're doing great.")),
    opened((U, "No need to escalate this, it's fixed.")),
    opened((U, "How do I escalate privileges with sudo?")),
    opened((U, "My manager wants the report by Friday.")),
    opened((U, "Please transfer 50 dollars to my savings account.")),
    opened((U, 'He said "get me a human" and hung up. Write a polite reply.')),
    opened((U, "Connect me"), (A, "I'll get you a human agent right away.")),  # the assistant
]


@pytest.mark.parametrize("turns", ESCALATION_POSITIVES)
def test_escalation_positive(turns: list[Turn]) -> None:
    assert_fires(tx.ESCALATION, turns)


@pytest.mark.parametrize("turns", ESCALATION_NEAR_MISSES)
def test_escalation_near_miss(turns: list[Turn]) -> None:
    assert only(tx.ESCALATION, turns) == []


# --- disengagement.quit ----------------------------------------------------------------------------

QUIT_POSITIVES = [
    opened((A, "Could you try once more?"), (U, "I give up.")),
    opened((U, "Forget it, I'll do it myself.")),
    opened((U, "I'm done with this, cancel my subscription.")),
    opened((U, "I'll take my business elsewhere.")),
    opened((U, "Never using this again.")),
    opened((U, "This is pointless. I'm out.")),
    opened((U, "i quit")),
    opened((U, "whatever, I'll just google it")),
    opened((U, "I'm givng up on this")),  # typo
    opened((U, "forget the upgrade then, I'll stay on my old plan")),
    opened((U, "forget the scanner, I'll use the one on the second floor")),
]
QUIT_NEAR_MISSES = [
    [(U, "Cancel my subscription please."), (A, "Done, it's cancelled.")],  # the task itself, first message
    opened((U, "I quit smoking last year.")),
    opened((U, "How do I quit vim?")),
    opened((U, "I'm not giving up yet, let's try another way.")),
    opened((U, "I won't cancel my subscription, it's great.")),
    opened((U, "I'm out of coffee, remind me to buy some.")),
    opened((U, "Please cancel my order #123.")),
    opened((U, "I'm leaving for Rome on Friday, any tips?")),
    opened((U, "I'm done with the form, what's next?")),
    opened((U, "I'm leasing a car next month, what should I check?")),  # protected word, not "leaving"
    opened((U, "don't forget the charger then, I'll need it")),
    opened((U, "forget what I said about Tuesday, I'll need it Monday")),
]


@pytest.mark.parametrize("turns", QUIT_POSITIVES)
def test_quit_positive(turns: list[Turn]) -> None:
    assert_fires(tx.QUIT, turns)


@pytest.mark.parametrize("turns", QUIT_NEAR_MISSES)
def test_quit_near_miss(turns: list[Turn]) -> None:
    assert only(tx.QUIT, turns) == []


# --- disengagement.negative_stance -----------------------------------------------------------------

NEGATIVE_STANCE_POSITIVES = [
    ([(U, "This is useless, I've asked three times.")], "complaint"),
    (opened((U, "I'm so frustrated with this bot.")), "complaint"),
    (opened((U, "which is down. brilliant.")), "complaint"),
    (opened((U, "great, now it's broken")), "complaint"),
    (opened((U, "perfect, another error")), "complaint"),
    (opened((U, "Still doesn't work.")), "complaint"),
    (opened((U, "What a waste of my time.")), "complaint"),
    (opened((U, "you're not listening")), "complaint"),
    (opened((U, "this is so frustating")), "complaint"),  # typo
    (opened((U, "you keep switching the setting back and forth")), "complaint"),
    (opened((U, "stop copy pasting the same apology")), "complaint"),
    (opened((U, "that doesn't answer my question. is it refundable")), "complaint"),
    (opened((U, "I emailed twice last week and nobody replied")), "complaint"),
    (opened((U, "the second outage this week. when is it back")), "complaint"),
    (opened((U, "took way too long for a password reset")), "complaint"),
    (opened((U, "they want $30 for a blanket? lame.")), "complaint"),
]
NEGATIVE_STANCE_NEAR_MISSES = [
    opened((U, "I'm not frustrated, just curious.")),
    opened((U, "Remove the useless imports from this file.")),
    opened((U, "How many times should I water my cactus?")),
    opened((U, "The log shows:\n```\nFATAL!!! DISK FULL ON NODE 3\n```\nwhat does it mean")),  # code
    opened((U, "Fix it"), (A, "THIS IS TERRIBLE!!! I'm sorry.")),  # the assistant
    opened((U, "The ferry goes back and forth between the islands, how often?")),
    opened((U, "If nobody replies by Friday, send a reminder.")),
    opened((U, "Book it for the third Tuesday this month.")),
    opened((U, "The hotel doesn't answer the phone, what now?")),
    opened((U, "Write a lame joke for my dad's card.")),
    opened((U, "Perfect, the error is gone now.")),  # sincere praise beside a fixed fault
    opened((U, "Great, thanks! The old laptop is broken anyway, recycle it.")),
]


@pytest.mark.parametrize(("turns", "pattern"), NEGATIVE_STANCE_POSITIVES)
def test_negative_stance_positive(turns: list[Turn], pattern: str) -> None:
    assert_fires(tx.NEGATIVE_STANCE, turns)
    assert pattern in {i.metadata["pattern_type"] for i in only(tx.NEGATIVE_STANCE, turns)}


@pytest.mark.parametrize("turns", NEGATIVE_STANCE_NEAR_MISSES)
def test_negative_stance_near_miss(turns: list[Turn]) -> None:
    assert only(tx.NEGATIVE_STANCE, turns) == []


def test_each_kind_of_negative_stance_cue_is_its_own_instance() -> None:
    """As the reference counts: one instance per kind of pattern that matched, each with the words
    it matched as the snippet (a run of "!"/"?" brings its sentence)."""
    text = "THIS IS USELESS, ARE YOU KIDDING ME???"
    found = only(tx.NEGATIVE_STANCE, opened((U, text)))
    by_kind = {i.metadata["pattern_type"]: i for i in found}
    assert list(by_kind) == ["complaint", "all_caps", "excessive_punctuation"] and len(found) == 3
    assert by_kind["complaint"].snippet == "THIS IS USELESS"
    assert by_kind["all_caps"].snippet == text.rstrip("?")
    assert by_kind["excessive_punctuation"].snippet == text
    assert by_kind["complaint"].confidence > by_kind["excessive_punctuation"].confidence


def test_the_same_kind_of_cue_twice_in_a_message_is_one_instance() -> None:
    found = only(tx.NEGATIVE_STANCE, opened((U, "this is useless!!! what a waste of time!!!")))
    assert sorted(i.metadata["pattern_type"] for i in found) == ["complaint", "excessive_punctuation"]


# --- context rule: frustration at the world, not the agent -----------------------------------------

ELSEWHERE_NEAR_MISSES = [
    "my flight got delayed again, so frustrating",
    "the courier lost my parcel, this is ridiculous",
    "my neighbours are drilling again, ugh",
    "the weather ruined our picnic, so annoying",
    "another company charged me twice, unbelievable",
    "my flight got delayed again, so frustrating. can you rebook me?",
    "Really?",
    "Really? That's great",
    "really? is it that cheap",
]
AT_THE_AGENT = [
    "you keep asking the same thing",
    "this is useless",
    "I'm getting frustrated with this chat",
    "the courier lost my parcel and you keep asking the same thing",
    "my flight got delayed and your app shows nothing, so frustrating",
    "really??",
    "wow. really.",
    "this is overwhelming",
    "I'm getting discouraged",
    "I feel like I'm going in circles",
]


@pytest.mark.parametrize("text", ELSEWHERE_NEAR_MISSES)
def test_frustration_at_the_world_or_surprise_is_no_negative_stance(text: str) -> None:
    assert only(tx.NEGATIVE_STANCE, opened((U, text))) == []


@pytest.mark.parametrize("text", AT_THE_AGENT)
def test_frustration_at_the_agent_is_negative_stance(text: str) -> None:
    assert_fires(tx.NEGATIVE_STANCE, opened((U, text)))
