"""interaction.misalignment.rephrase, on short conversations run turn by turn.

The restatement, insistence and asked-again rules have their examples in phrases/misalignment.yaml,
run by tests/signals/test_word_lists.py."""

from __future__ import annotations

import pytest

from otelsignals.model import Conversation, Message, Role
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext
from otelsignals.signals.rephrase import (
    REPHRASE_SIMILARITY,
    KeptSentence,
    detect_rephrase,
    sentence_keys,
    stem,
)
from tests.signals.conversations import (
    A,
    Turn,
    U,
    assert_fires,
    of_type,
    only,
    opened,
    rule_conversations,
    run_incrementally,
)

# --- misalignment.rephrase -------------------------------------------------------------------------

# Calibration pairs for REPHRASE_SIMILARITY / REPHRASE_ORDER_SIMILARITY: (earlier, later, restated?).
REPHRASE_PAIRS = [
    ("How do I export my contacts to CSV?", "How can I export my contacts as a CSV file?", True),
    ("Find vegan restaurants near Union Square", "vegan restaurants near union square please", True),
    (
        "What is the refund policy for damaged items?",
        "What's the refund policy for items that arrived damaged?",
        True,
    ),
    (
        "Can you book me a flight from Boston to Denver on May 3?",
        "I need a flight from Boston to Denver on May 3, can you book it?",
        True,
    ),
    (
        "Reset my password for the billing portal",
        "I want to reset the password of my billing portal account",
        True,
    ),
    (
        "Show me the logs for the payment service from last night",
        "show me last night's logs for the payment service",
        True,
    ),
    (
        "Translate this sentence into German: the train is late",
        "Please translate 'the train is late' into German",
        True,
    ),
    ("Cancel my order 4411 and refund the card", "I need you to cancel order 4411 and refund my card", True),
    (
        "Why is my docker container exiting immediately after start?",
        "my docker container exits immediately after starting, why?",
        True,
    ),
    (
        "What time does the pharmacy on Main Street close today?",
        "When does the Main Street pharmacy close today?",
        True,
    ),
    (
        "Give me three vegetarian dinner ideas without mushrooms",
        "three vegetarian dinner ideas, no mushrooms please",
        True,
    ),
    ("How do I sort a list in Python?", "How do I sort a dictionary by value in Python?", False),
    ("Book a table for two at 7pm at Luigi's", "Book a table for four at 8pm at Sakura", False),
    ("What's the weather in Oslo tomorrow?", "What's the weather in Bergen next week?", False),
    ("Show me the logs for the payment service", "Show me the metrics for the checkout service", False),
    ("Write a SQL query that counts users by country", "Write a SQL query that lists orders by date", False),
    ("How do I export my contacts to CSV?", "How do I import contacts from a CSV file?", False),
    ("Translate this into German: good morning", "Translate this into Spanish: good night", False),
    (
        "Can you book me a flight from Boston to Denver on May 3?",
        "Can you book me a hotel in Denver from May 3 to May 5?",
        False,
    ),
    ("Find vegan restaurants near Union Square", "Find parking near Union Square", False),
    ("Add milk, eggs and bread to my shopping list", "Remove eggs from my shopping list", False),
    ("Summarise the first chapter of the report", "Summarise the second chapter of the report", False),
    (
        "How do I sort a list in Python?",
        "How do I sort a list in Python in reverse order without modifying the original list?",
        False,
    ),
    ("Create a Jira ticket for the login bug", "Create a Jira ticket for the signup bug", False),
    ("why?", "why?", False),
    ("this", "this", False),
    ("again", "again", False),
    ("yes", "yes", False),
    ("ok thanks", "ok thanks", False),
]


@pytest.mark.parametrize(("earlier", "later", "restated"), REPHRASE_PAIRS)
def test_rephrase_calibration(earlier: str, later: str, restated: bool) -> None:
    turns = opened((U, earlier), (A, "Here is what I found."), (U, later))
    if restated:
        assert_fires(tx.REPHRASE, turns)
        (instance,) = only(tx.REPHRASE, turns)
        assert instance.metadata["pattern"] == "near_duplicate" and instance.metadata["similar_to"] == 2
        assert instance.metadata["ratio"] >= REPHRASE_SIMILARITY / 100
    else:
        assert only(tx.REPHRASE, turns) == []


REPHRASE_POSITIVES = [
    opened((U, "Let me rephrase: which plan is cheapest for two users?")),
    opened((U, "In other words, can I cancel without a fee?")),
    opened((U, "Again: what is the checked baggage allowance?")),
    opened((U, "What I'm asking is whether the API supports pagination.")),
    opened((U, "let me rephrse that: the export button is greyed out")),  # typo
    opened(
        (U, "What is the refund policy for damaged items?"),
        (A, "Our store is open 9-5."),
        (U, "ok"),
        (A, "Anything else?"),
        (U, "What's the refund policy for items that arrived damaged?"),
    ),
    opened(
        (U, "How do I export my contacts to CSV?"),
        (A, "You can share contacts by email."),
        (U, "How can I export my contacts as a CSV file?"),
    ),
    opened(
        (U, "Find vegan restaurants near Union Square"),
        (A, "Here are three steakhouses."),
        (U, "VEGAN restaurants near Union Square, please!"),
    ),
]
REPHRASE_NEAR_MISSES = [
    opened((U, "why?"), (A, "Because of the cache."), (U, "why?")),
    opened((U, "this"), (A, "Which one?"), (U, "this")),
    opened((U, "again"), (A, "Again what?"), (U, "again")),
    opened((U, "yes"), (A, "Shall I continue?"), (U, "yes")),
    opened(
        (U, "What's the weather in Oslo tomorrow?"), (U, "What's the weather in Oslo tomorrow?")
    ),  # unanswered
    opened((U, "Thanks, it works now!"), (A, "Great!"), (U, "Thanks, it works now!")),  # satisfied
    opened((U, "Can you rephrase this paragraph for my essay?")),
    opened((U, "Again, thanks a lot!")),
    [(U, "Let me rephrase my earlier email for the client"), (A, "Sure, paste it.")],  # no assistant before
    [  # only a greeting between the two: the agent answered nothing yet
        (U, "I need to cancel order 4417 please"),
        (A, "Hi! How can I help you today?"),
        (U, "I need to cancel order 4417, please."),
    ],
    opened(
        (U, "Book a table for two at 7pm at Luigi's"),
        (A, "Booked."),
        (U, "Book a table for four at 8pm at Sakura"),
    ),
]


# Restatement in other words: a short request sentence whose key words (stemmed, synonyms, numbers as
# digits) mostly repeat one earlier sentence of the user's, after the assistant answered.


def test_insistence_remembers_the_task_across_calls_and_rebuilds_it() -> None:
    # the insistence example whose task reaches back past the last three user messages
    turns = max(rule_conversations("misalignment", "insistence", "positives"), key=len)
    for step in (1, 2, 5):
        (instance,) = of_type(run_incrementally([detect_rephrase], turns, step=step), tx.REPHRASE)
        assert instance.message_index == len(turns) - 1 and instance.metadata["pattern"] == "insistence"
    # memory lost before the last message: the task is found again by the bounded look-back
    convo = Conversation("c", [Message(Role(role), text) for role, text in turns])
    ctx = DetectionContext(convo, new_from=len(turns) - 1, memory={})
    (instance,) = detect_rephrase(ctx)
    assert instance.metadata["similar_to"] == 2


def test_restatement_keys_canonicalise_inflection_times_and_synonyms() -> None:
    def keys(text: str) -> tuple[KeptSentence, ...]:
        return sentence_keys(DetectionContext(Conversation("c"), new_from=0), text)

    assert keys("it has to leave after five") == keys("it has to depart after 5pm")
    assert set(keys("I want to dispute it")[0].keys) <= set(keys("I want to disputing it")[0].keys)


@pytest.mark.parametrize("turns", REPHRASE_POSITIVES)
def test_rephrase_positive(turns: list[Turn]) -> None:
    assert_fires(tx.REPHRASE, turns)


@pytest.mark.parametrize("turns", REPHRASE_NEAR_MISSES)
def test_rephrase_near_miss(turns: list[Turn]) -> None:
    assert only(tx.REPHRASE, turns) == []


def test_rephrase_compares_only_the_last_three_user_messages() -> None:
    request = "How do I export my contacts to CSV?"
    others = [
        "What is my account balance today?",
        "Show my last five invoices please",
        "Update my billing address now",
    ]
    turns = opened((U, request), (A, "..."))
    for other in others:
        turns += [(U, other), (A, "Done.")]
    turns.append((U, "How can I export my contacts as a CSV file?"))
    assert only(tx.REPHRASE, turns) == []
    assert len(only(tx.REPHRASE, turns[:4] + turns[-3:])) == 1  # within the window it does


def test_stemming_catches_inflected_restatements() -> None:
    assert stem("counting") == stem("counts") == "count"
    assert stem("exits") == stem("exiting") == "exit"
    assert (
        stem("bus") == "bus" and stem("class") == "clas"
    )  # short words untouched; crude but same both sides
