"""interaction.misalignment: correction and clarification, on short conversations run turn by turn.

The rules with word lists (piecemeal, contrast, term and echo questions) have their examples in
phrases/misalignment.yaml, run by tests/signals/test_word_lists.py."""

from __future__ import annotations

import pytest

from otelsignals.signals import taxonomy as tx
from tests.signals.conversations import (
    A,
    T,
    Turn,
    U,
    assert_fires,
    only,
    opened,
)

# --- misalignment.correction -----------------------------------------------------------------------

CORRECTION_POSITIVES = [
    [
        (U, "Book me a flight to Paris on Friday"),
        (A, "I found flights to Paris on Saturday."),
        (U, "No, I meant Friday, not Saturday."),
    ],
    [(U, "Convert 10 miles to km"), (A, "10 miles is 6.2 km."), (U, "That's wrong, it's 16.1 km.")],
    [
        (U, "Summarise this document"),
        (A, "Here is a translation of the document."),
        (U, "That's not what I asked for."),
    ],
    opened(
        (U, "I want the cheapest plan"),
        (A, "The Premium plan is $40."),
        (U, "You misunderstood, I want the CHEAPEST option."),
    ),
    opened(
        (U, "When is the deadline?"), (A, "The deadline is May 5th."), (U, "You got it wrong, it's May 3rd.")
    ),
    opened((A, "I have processed your refund."), (U, "I never said I wanted a refund.")),
    opened((U, "nope, thats incorrect")),
    opened((U, "Like I said, the size is medium.")),
    opened((U, "you misunderstod me, the blue one")),  # typo
    opened((U, "Not quite \u2014 the total should include tax.")),
    opened((A, "Sent the invoice to ana@corp.com."), (U, "you sent it to the wrong email, it's ana@corp.io")),
    opened((A, "Your total is $90."), (U, "the total is wrong, it should be 84")),
    opened((A, "Applied your order."), (U, "you forgot the discount code")),
    opened((A, "Here is order 5510."), (U, "that's not my order, mine is 5512")),
    opened((A, "Voucher sent."), (U, "I asked for a refund, not a voucher")),
]
CORRECTION_NEAR_MISSES = [
    [
        (U, "That's wrong? My bank says my balance is off."),
        (A, "Let me look into it."),
    ],  # no assistant before
    opened((U, "Can you tell me what is wrong with this query?")),
    opened((U, "I meant to ask, do you ship to Canada?")),
    opened((U, "I don't think that's wrong, just unusual.")),
    opened((U, "My boss replied:\n> That's wrong, fix it\nCan you help me answer?")),
    opened((U, "Is it wrong to put pineapple on pizza?")),
    opened((U, "Everything is correct, thanks.")),
    opened((U, "Fix the typo"), (A, "That's wrong, let me fix it: 'recieve' → 'receive'.")),  # assistant
    opened((U, "Run the linter"), (T, "that's wrong: E501 line too long")),  # tool
    opened((U, "Did I pick the wrong size?")),
    opened((U, "the total is wrong?")),  # asks
    opened((U, "If you forgot your password, where do I reset it?")),
]


@pytest.mark.parametrize("turns", CORRECTION_POSITIVES)
def test_correction_positive(turns: list[Turn]) -> None:
    assert_fires(tx.CORRECTION, turns)


@pytest.mark.parametrize("turns", CORRECTION_NEAR_MISSES)
def test_correction_near_miss(turns: list[Turn]) -> None:
    assert only(tx.CORRECTION, turns) == []


# --- misalignment.clarification --------------------------------------------------------------------

CLARIFICATION_POSITIVES = [
    opened((A, "You need an escrow account."), (U, "What do you mean by 'escrow'?")),
    opened((A, "Use a webhook."), (U, "huh?")),
    opened(
        (A, "You can ask for the overpayment to be re-applied to the term within 30 days."),
        (U, "what does 're-applied to the term' mean, will the 8k be moved?"),
    ),
    opened(
        (A, "Use the service name as host instead."), (U, "what means 'service name'? where is this defined")
    ),
    opened(
        (A, "Standard is $139/night and non-refundable."),
        (U, "hmm. what does non-refundable mean exactly here, if I cancel do I lose all 4 nights?"),
    ),
    opened((U, "I don't understand, which button?")),
    opened((U, "That makes no sense, the file exists.")),
    opened((U, "Can you clarify the second step?")),
    opened((U, "im confused")),
    opened((U, "What?")),
    opened((U, "Sorry, I'm not following.")),
    opened((U, "I dont undrestand the last part")),  # typo
    opened((U, "Wait, what? You deleted it?")),
    opened((A, "The fee applies to the old card."), (U, "wait so am I paying it twice or not?")),
    opened((A, "The refund goes to the original method."), (U, "so you're saying it goes to my old card?")),
]
CLARIFICATION_NEAR_MISSES = [
    opened((A, "Because the cache expired."), (U, "why?")),
    opened((A, "Which file?"), (U, "this")),
    opened((A, "Should I run it?"), (U, "again")),
    [(U, "I don't understand why my tests fail on CI"), (A, "Let's look at the logs.")],  # first message
    opened((U, "I know what you mean.")),
    opened((U, "What does that mean for my budget?")),
    opened((U, "He wrote:\n> I don't understand your invoice\nHow should I reply?")),
    opened((U, "Huh, interesting, tell me more about it")),
    opened((U, "I'm not confused anymore, thanks")),
    opened((U, "I had to wait so long at the desk.")),
    opened((U, "What are you saying in the cover letter?")),
    # a quoted phrase the agent never used, and a long unquoted question, are new questions
    opened(
        (A, "Use the service name as host instead."), (U, "what does 'docker compose up' mean for my laptop?")
    ),
    opened(
        (A, "Standard is $139/night and non-refundable."),
        (U, "what does the standard night rate include here?"),
    ),
]


@pytest.mark.parametrize("turns", CLARIFICATION_POSITIVES)
def test_clarification_positive(turns: list[Turn]) -> None:
    assert_fires(tx.CLARIFICATION, turns)


@pytest.mark.parametrize("turns", CLARIFICATION_NEAR_MISSES)
def test_clarification_near_miss(turns: list[Turn]) -> None:
    assert only(tx.CLARIFICATION, turns) == []


MISSED_REQUEST = [
    "not really what I was asking",
    "that's not quite what I meant",
    "that doesn't answer my question",
    "hmm, not exactly what I wanted",
]


@pytest.mark.parametrize("text", MISSED_REQUEST)
def test_an_answer_that_missed_the_request_is_a_correction(text: str) -> None:
    assert_fires(tx.CORRECTION, opened((U, "Does it ship to Canada?"), (A, "We ship worldwide."), (U, text)))


# --- "I meant…" answering the agent's "which one do you mean?" ------------------------------------------


@pytest.mark.parametrize(
    "question",
    ["Which Blue do you mean? There are two albums.", "Did you mean the savings or the checking account?"],
)
def test_i_meant_answering_which_one_is_no_correction(question: str) -> None:
    assert only(tx.CORRECTION, [(U, "What's on Blue?"), (A, question), (U, "I meant the US one")]) == []


def test_i_meant_after_a_statement_is_a_correction() -> None:
    assert_fires(
        tx.CORRECTION,
        [(U, "What's on Blue?"), (A, "Blue (UK, 1995) opens with Tiny."), (U, "I meant the US one")],
    )
