"""The interaction detectors, leaf by leaf, on short conversations run turn by turn."""

from __future__ import annotations

import pytest
from rapidfuzz import fuzz

from otelsignals.model import Conversation, Message, Role
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext
from otelsignals.signals.detect import detectors_of
from otelsignals.signals.phrase_analysis import asked
from otelsignals.signals.rephrase import REPHRASE_SIMILARITY, detect_rephrase, sentence_keys, stem
from otelsignals.signals.stagnation import REPETITION_SIMILARITY, efficiency
from tests.signals.conversations import OPENING, Turn, key, of_type, run_incrementally, run_once

INTERACTION_DETECTORS = detectors_of(tx.MISALIGNMENT, tx.STAGNATION, tx.DISENGAGEMENT, tx.SATISFACTION)

U, A, T = "user", "assistant", "tool"


def only(signal: str, turns: list[Turn]) -> list:
    return of_type(run_incrementally(INTERACTION_DETECTORS, turns), signal)


def assert_fires(signal: str, turns: list[Turn], index: int | None = None) -> None:
    """Exactly one instance of ``signal``, on message ``index`` (default: the last), whose snippet
    is that user's own words."""
    index = len(turns) - 1 if index is None else index
    (instance,) = only(signal, turns)
    assert instance.type == signal
    assert instance.message_index == index
    assert 0.0 <= instance.confidence <= 1.0
    assert instance.snippet and instance.snippet in turns[index][1] and len(instance.snippet) <= 200
    assert instance.metadata["pattern"]


def opened(*turns: Turn) -> list[Turn]:
    return [*OPENING, *turns]


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


# "X…, not Y": the user sets the right thing against a wrong one from the conversation.
CONTRAST_POSITIVES = [
    opened(
        (U, "two weeks in japan, start in tokyo?"),
        (A, "Day 1: land in Tokyo."),
        (U, "we fly into osaka actually, not tokyo"),
    ),
    opened((A, "Here is the summary of chapter 2."), (U, "I wanted chapter 3 actually — not chapter 2")),
    opened(
        (U, "how many active customers did we have in Q1 by region?"),
        (A, "Active customers by region: AMER 6,633, EMEA 4,120."),
        (U, "that's everyone with an active status today, not Q1"),
    ),
    opened((A, "I converted it to Fahrenheit: 68F."), (U, "I need Celsius, not Fahrenheit.")),
    opened((A, "Your flight leaves from Gatwick at 9."), (U, "it's Heathrow, not Gatwick. check again")),
]
CONTRAST_NEAR_MISSES = [
    opened((A, "Sure."), (U, "Actually, not bad at all!")),  # nothing set against it
    opened((A, "Sure."), (U, "I'm actually not sure which one is cheaper.")),  # "not" opens no clause
    opened((A, "Sure."), (U, "It's for my son, not me.")),  # no content word rejected
    opened((A, "Window or aisle?"), (U, "the window, not the aisle")),  # a choice after a question
    opened((A, "Done."), (U, "I'd like the red one, not the blue one.")),  # nothing in the conversation
    opened((A, "Your total is $40."), (U, "Great, not a problem at all.")),  # satisfied, idiom
    opened(
        (A, "Sent to Gatwick desk."), (U, "Thanks, that's it, not Gatwick though, ok whatever")
    ),  # satisfied
    opened((A, "It's on sale."), (U, "not tokyo, osaka")),  # nothing before "not" in the sentence
    opened((A, "Paris is lovely in May."), (U, 'He wrote "Paris actually, not Rome" in the card, why?')),
    opened((A, "Try Tokyo."), (U, "Tokyo, not yet. first Kyoto")),  # hedge, not a rejection
]


# "you don't need to check them one by one, just…": a needlessly piecemeal approach.
PIECEMEAL_POSITIVES = [
    opened(
        (U, "which branches have the blue kettle?"),
        (A, "The Leeds branch has none."),
        (U, "you don't need to check every branch one by one, search them all"),
    ),
    opened(
        (U, "rename the photos by date"),
        (A, "Renamed IMG_001.jpg to 2024-05-01.jpg."),
        (U, "no need to rename them one at a time, use a pattern"),
    ),
    opened(
        (U, "refund the three items"),
        (A, "Refunded the lamp."),
        (U, "you don't have to refund them individually, do the whole order"),
    ),
    opened(
        (U, "find a room for 12 people"),
        (A, "Room 2A is taken."),
        (U, "stop checking room by room. there's a capacity filter"),
    ),
    opened(
        (U, "list the failing tests"),
        (A, "test_a fails."),
        (U, "why are you running them separately, run the whole suite"),
    ),
    opened(
        (U, "update the prices"),
        (A, "Updated SKU 1."),
        (U, "so you don't need to go file by file, the script takes a folder"),
    ),
    opened(
        (U, "email the team"),
        (A, "Sent to Ana."),
        (U, "instead of sending each one separately, use the team list"),
    ),
    opened(
        (U, "check the fares"),
        (A, "The 7:00 fare is non-refundable."),
        (U, "you do not need to look at each one, filter on refundable"),
    ),
]
PIECEMEAL_NEAR_MISSES = [
    opened((A, "Renamed a.txt."), (U, "Do I need to check them one by one?")),  # no "you" head
    opened((A, "Paid the gas bill."), (U, "you don't have to pay them one by one, right?")),  # asks
    opened((A, "Paid the gas bill."), (U, "You don't have to pay them one by one?")),  # asks
    opened((A, "Wrap each gift."), (U, "stop by the shop one at a time")),  # "stop by": a visit
    opened((A, "Day 1: Rome."), (U, "let's take it day by day")),  # no head
    opened((A, "Sure."), (U, "you don't need to hurry, take it one step at a time")),  # no marker
    opened((A, "Sure."), (U, "No need to rush. They arrive one by one anyway.")),  # another sentence
    opened((A, "Sure."), (U, 'He said "you don\'t need to check them one by one" and left.')),  # quoted
    opened((A, "Sure."), (U, "stop the timer. we'll go one by one after lunch")),  # another sentence
]


@pytest.mark.parametrize("turns", PIECEMEAL_POSITIVES)
def test_piecemeal_correction_positive(turns: list[Turn]) -> None:
    assert_fires(tx.CORRECTION, turns)
    assert only(tx.CORRECTION, turns)[0].metadata["pattern"] == "piecemeal"


@pytest.mark.parametrize("turns", PIECEMEAL_NEAR_MISSES)
def test_piecemeal_correction_near_miss(turns: list[Turn]) -> None:
    assert only(tx.CORRECTION, turns) == []


@pytest.mark.parametrize("turns", CONTRAST_POSITIVES)
def test_contrast_correction_positive(turns: list[Turn]) -> None:
    assert_fires(tx.CORRECTION, turns)
    assert only(tx.CORRECTION, turns)[0].metadata["pattern"] in {
        "contrast",
        "correction",
        "correction_negated",
    }


@pytest.mark.parametrize("turns", CONTRAST_NEAR_MISSES)
def test_contrast_correction_near_miss(turns: list[Turn]) -> None:
    assert only(tx.CORRECTION, turns) == []


@pytest.mark.parametrize("turns", CORRECTION_POSITIVES)
def test_correction_positive(turns: list[Turn]) -> None:
    assert_fires(tx.CORRECTION, turns)


@pytest.mark.parametrize("turns", CORRECTION_NEAR_MISSES)
def test_correction_near_miss(turns: list[Turn]) -> None:
    assert only(tx.CORRECTION, turns) == []


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
    ("Cancel my order 4411 and refund the card", "I asked you to cancel order 4411 and refund my card", True),
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
    opened(
        (U, "Book a table for two at 7pm at Luigi's"),
        (A, "Booked."),
        (U, "Book a table for four at 8pm at Sakura"),
    ),
]


# Restatement in other words: a short request sentence whose key words (stemmed, synonyms, numbers as
# digits) mostly repeat one earlier sentence of the user's, after the assistant answered.
RESTATEMENT_POSITIVES = [
    opened(
        (U, "no. I want to dispute it"),
        (A, "Before disputing, have you tried contacting the merchant?"),
        (U, "why would I contact a restaurant I've never been to. I want to dispute the charge"),
    ),
    opened(
        (U, "find me a train to Leeds after 5pm"),
        (A, "The 16:10 from King's Cross arrives at 18:25."),
        (U, "it has to leave after five"),
    ),
    opened(
        (U, "I need a cheap hotel near the station"),
        (A, "The Grand is 5 minutes from the station, $320 a night."),
        (U, "I need something cheaper near the station please"),
    ),
    opened(
        (U, "I want to repair my bike's brakes myself"),
        (A, "A bike shop can service your brakes for $40."),
        (U, "no, I want to fix the brakes myself"),
    ),
    opened(  # the restating clause first, a reaction to the agent's answer after it
        (U, "find me a bus to Bristol tomorrow before 9am"),
        (A, "National Express at 10:40 and 13:15."),
        (U, "it has to leave before nine, the 10:40 is too late"),
    ),
    opened(
        (U, "I need a quiet room on a high floor"),
        (A, "Room 104 is available, next to the lift."),
        (U, "I need a room on a high floor, 104 won't do"),
    ),
    opened(  # an acceptance pushed back with "but"
        (U, "I need a password reset for the HR portal"),
        (A, "The HR portal is at hr.example.com."),
        (U, "yes but I need the password reset, I can't log in"),
    ),
]
RESTATEMENT_NEAR_MISSES = [
    opened(
        (U, "my router says offline"),
        (A, "Cancel the update and retry."),
        (U, "cancelled it. still says offline"),
    ),
    opened(
        (U, "find flights to osaka"),
        (A, "ANA has two daily flights."),
        (U, "are the flights to osaka direct?"),
    ),  # a follow-up question
    opened(
        (U, "find flights to osaka"), (A, "ANA NH15 at 9:00, $820."), (U, "ok, book the flight to osaka")
    ),  # moves the task on
    opened(
        (U, "I want the 9am osaka flight on monday morning"),
        (A, "NH15 at 9:00, $820."),
        (U, "I want to pay for the osaka flight"),
    ),  # a progress verb
    opened(
        (U, "he has loads of bird books"),
        (A, "How about a bird book?"),
        (U, "I literally just said he has loads of bird books"),
    ),  # a report, not a request (the correction covers it)
    opened((U, "I need a hotel in Rome"), (U, "I need a hotel in Rome please")),  # not answered in between
    opened(
        (U, "I want to dispute the charge"),
        (A, "Done, the dispute is filed."),
        (U, "thanks, I wanted to dispute the charge"),
    ),  # satisfied
    opened(
        (U, "I need a summary of chapter one"),
        (A, "Here is chapter one."),
        (
            U,
            "I need the summary of chapter two, the appendix, the index, the notes, the glossary"
            " and the preface",
        ),
    ),  # a long, fuller request
    opened(
        (U, "I need a dentist in Leeds"),
        (A, "Dr Patel, 12 Park Row."),
        (U, "I need a dentist in Bristol now"),
    ),  # only one key word shared
    opened(
        (U, "compare the premium and basic plans"),
        (A, "Premium has 4K; basic is HD."),
        (U, "I don't want the premium plan. What does the basic plan include?"),
    ),  # refuses rather than requests
    opened(
        (U, "I want to change my delivery address"),
        (A, "Your address is now 5 Elm St."),
        (U, "I also want to change my delivery time"),
    ),  # adds to the task
    opened(
        (U, "I need a password reset for the HR portal"),
        (A, "Done, check your email for the link."),
        (U, "ok, I need the password reset for the VPN too"),
    ),  # accepted, then more
]

# Insistence: the request brought back after the agent steered away from it (an offer, a question, an
# upsell), the message rejecting the detour or angry, and a shared word the agent's answer dropped.
INSISTENCE_POSITIVES = [
    opened(
        (U, "I want to cancel my gym membership"),
        (A, "Before you go, how about two free months?"),
        (U, "nope, just cancel it"),
    ),
    opened(
        (U, "I want to cancel my gym membership"),
        (A, "We can freeze it for three months instead."),
        (U, "I don't want a freeze. how do I cancel"),
    ),
    opened(
        (U, "please close my savings account"),
        (A, "Our new saver pays 4.1%, shall I switch you?"),
        (U, "are you kidding. CLOSE THE ACCOUNT"),
    ),
    opened(
        (U, "book me a flight to Rome on Friday"),
        (A, "Would you like travel insurance for $20?"),
        (U, "no thanks, just book the flight"),
    ),
    opened(
        (U, "I'd like a refund for the broken lamp"),
        (A, "I can send you a 20% voucher for your next order."),
        (U, "not interested. can you refund it"),
    ),
    opened(
        (U, "I want to unsubscribe from the newsletter"),
        (A, "You could get fewer emails with a weekly digest."),
        (U, "this is ridiculous, unsubscribe me"),
    ),
    opened(  # the task reaches back past the last three user messages
        (U, "I want to cancel my phone contract"),
        (A, "May I ask why?"),
        (U, "too expensive"),
        (A, "We have a cheaper plan at $20."),
        (U, "what does it include?"),
        (A, "5 GB and unlimited calls."),
        (U, "hmm"),
        (A, "Shall I switch you to it?"),
        (U, "no. cancel the contract"),
    ),
    opened(
        (U, "I need my password reset for the payroll portal"),
        (A, "Have you tried the self-service page?"),
        (U, "ugh, seriously. reset the password please"),
    ),
]
INSISTENCE_NEAR_MISSES = [
    opened(
        (U, "book me a flight to Rome on Friday"), (A, "Shall I book the 7:05 to Rome?"), (U, "book it")
    ),  # the agent offered that very thing
    opened(
        (U, "book me a flight to Rome on Friday"),
        (A, "Shall I book the 7:05 to Rome?"),
        (U, "no, book the 9:40 one"),
    ),  # another option, not the request again
    opened(
        (U, "cancel my gym membership please"),
        (A, "Would pausing work instead?"),
        (U, "No, I said cancel, not pause."),
    ),  # the correction covers it
    opened(
        (U, "I want to cancel my gym membership"),
        (A, "Shall I cancel it now?"),
        (U, "no, cancel it at the end of the month"),
    ),  # the agent already says "cancel"
    opened(
        (U, "I want to cancel my gym membership"),
        (A, "Before you go, how about two free months?"),
        (U, "just cancel it"),
    ),  # no rejection, no anger: a plain reply
    opened(
        (U, "my chair arrived broken"),
        (A, "Do you have the order number?"),
        (U, "no, it's in the email I think"),
    ),  # answers the question
    opened(
        (U, "I want to change my delivery address"),
        (A, "Your address is now 5 Elm St."),
        (U, "ugh, I also want to change my phone number"),
    ),  # adds to the task
    opened(
        (U, "I need a hotel in Rome for 3 nights"),
        (A, "Here are 3 hotels in Rome."),
        (U, "nope, I need one near the station"),
    ),  # a new constraint, no shared request word
    opened(
        (U, "I want to cancel my gym membership"),
        (A, "Would you like a free month instead?"),
        (U, "nope, thanks for cancelling though!"),
    ),  # satisfied
]


@pytest.mark.parametrize("turns", INSISTENCE_POSITIVES)
def test_insistence_positive(turns: list[Turn]) -> None:
    assert_fires(tx.REPHRASE, turns)
    (instance,) = only(tx.REPHRASE, turns)
    assert instance.metadata["pattern"] in {"insistence", "restatement", "near_duplicate"}


@pytest.mark.parametrize("turns", INSISTENCE_NEAR_MISSES)
def test_insistence_near_miss(turns: list[Turn]) -> None:
    assert only(tx.REPHRASE, turns) == []


def test_insistence_remembers_the_task_across_calls_and_rebuilds_it() -> None:
    turns = INSISTENCE_POSITIVES[6]
    for step in (1, 2, 5):
        (instance,) = of_type(run_incrementally([detect_rephrase], turns, step=step), tx.REPHRASE)
        assert instance.message_index == len(turns) - 1 and instance.metadata["pattern"] == "insistence"
    # memory lost before the last message: the task is found again by the bounded look-back
    convo = Conversation("c", [Message(Role(role), text) for role, text in turns])
    ctx = DetectionContext(convo, new_from=len(turns) - 1, memory={})
    (instance,) = detect_rephrase(ctx)
    assert instance.metadata["similar_to"] == 2


# Asked again after a repeated answer: the agent pasted (nearly) the same answer as before and the user
# asks again about what they asked (a key word shared with an earlier sentence of theirs).
_HOURS = "Our branches open 9am to 5pm on weekdays. You can find your nearest branch in the app."
REASK_POSITIVES = [
    opened(
        (U, "can I open the branch safe deposit box on saturday?"),
        (A, _HOURS),
        (U, "and on saturday?"),
        (A, _HOURS),
        (U, "right but I need to know about saturday. is it open or not"),
    ),
    opened(
        (U, "I want the loan term shorter, not lower payments"),
        (A, "You can overpay up to 10% of your balance each year without a charge."),
        (U, "ok and how do I ask for the shorter term?"),
        (A, "You can overpay up to 10% of your balance each year without a charge."),
        (U, "how do I get the term reduced then"),
    ),
]
REASK_NEAR_MISSES = [
    opened(  # a complaint about the repeat, no question
        (U, "can I open the branch safe deposit box on saturday?"),
        (A, _HOURS),
        (U, "and on saturday?"),
        (A, _HOURS),
        (U, "you literally just pasted the same thing again. wow"),
    ),
    opened(  # escalates rather than restates
        (U, "can I open the branch safe deposit box on saturday?"),
        (A, _HOURS),
        (U, "and on saturday?"),
        (A, _HOURS),
        (U, "is there a human I can talk to about the saturday thing?"),
    ),
    opened(  # the answer was not repeated: a follow-up
        (U, "can I open the branch safe deposit box on saturday?"),
        (A, "Branches open 9am to 1pm on Saturdays; safe deposit access needs an appointment."),
        (U, "how do I book the saturday appointment?"),
    ),
    opened(  # a new request after the repeat, nothing the user asked before
        (U, "can I open the branch safe deposit box on saturday?"),
        (A, _HOURS),
        (U, "and on saturday?"),
        (A, _HOURS),
        (U, "ok, how do I change my address in the app?"),
    ),
]


@pytest.mark.parametrize("turns", REASK_POSITIVES)
def test_reask_after_repeated_answer_positive(turns: list[Turn]) -> None:
    assert_fires(tx.REPHRASE, turns)
    assert only(tx.REPHRASE, turns)[0].metadata["pattern"] in {"asked_again", "restatement", "insistence"}


@pytest.mark.parametrize("turns", REASK_NEAR_MISSES)
def test_reask_after_repeated_answer_near_miss(turns: list[Turn]) -> None:
    assert only(tx.REPHRASE, turns) == []


@pytest.mark.parametrize("turns", RESTATEMENT_POSITIVES)
def test_restatement_positive(turns: list[Turn]) -> None:
    assert_fires(tx.REPHRASE, turns)
    assert only(tx.REPHRASE, turns)[0].metadata["pattern"] == "restatement"


@pytest.mark.parametrize("turns", RESTATEMENT_NEAR_MISSES)
def test_restatement_near_miss(turns: list[Turn]) -> None:
    assert only(tx.REPHRASE, turns) == []


def test_restatement_keys_canonicalise_inflection_times_and_synonyms() -> None:
    assert sentence_keys("it has to leave after five") == sentence_keys("it has to depart after 5pm")
    assert sentence_keys("I want to dispute it")[0][0] <= sentence_keys("I want to disputing it")[0][0]


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


# --- stagnation.dragging ---------------------------------------------------------------------------


def dragging_turns(user_turns: int, *, tools: bool = False) -> list[Turn]:
    turns: list[Turn] = []
    for n in range(user_turns):
        turns.append((U, f"question number {n}"))
        if tools:
            turns.append((T, "result"))
        turns.append((A, f"answer number {n}"))
    return turns


@pytest.mark.parametrize(
    ("baseline", "user_turns", "tools"),
    [
        (5, 9, False),
        (5, 12, False),
        (5, 30, False),
        (3, 7, False),
        (1, 5, False),
        (10, 14, False),
        (0, 4, False),
        (5, 9, True),
        (5, 10, True),
    ],
)
def test_dragging_positive(baseline: int, user_turns: int, tools: bool) -> None:
    turns = dragging_turns(user_turns, tools=tools)
    found = of_type(run_incrementally(INTERACTION_DETECTORS, turns, baseline=baseline), tx.DRAGGING)
    (instance,) = found
    crossing = baseline + 4  # 1 / (1 + 0.3 × 4) = 0.4545 < 0.5 ≤ 1 / (1 + 0.3 × 3)
    user_indices = [i for i, (role, _) in enumerate(turns) if role == U]
    assert instance.message_index == user_indices[crossing - 1]
    assert instance.metadata == {
        "pattern": "turn_count",
        "user_turns": crossing,
        "baseline": baseline,
        "efficiency": round(1 / 2.2, 4),
    }
    assert instance.snippet is None


@pytest.mark.parametrize(
    ("baseline", "user_turns", "tools"),
    [
        (5, 8, False),
        (5, 5, False),
        (5, 1, False),
        (10, 13, False),
        (3, 6, False),
        (5, 8, True),
        (5, 0, False),
        (20, 23, False),
    ],
)
def test_dragging_near_miss(baseline: int, user_turns: int, tools: bool) -> None:
    turns = dragging_turns(user_turns, tools=tools) + [(A, "Anything else?")] * 10
    assert of_type(run_incrementally(INTERACTION_DETECTORS, turns, baseline=baseline), tx.DRAGGING) == []


def test_efficiency_formula() -> None:
    assert efficiency(5, 5) == 1.0 and efficiency(0, 5) == 1.0
    assert efficiency(6, 5) == pytest.approx(1 / 1.3)
    assert efficiency(8, 5) > 0.5 > efficiency(9, 5)


# --- stagnation.repetition -------------------------------------------------------------------------

# Calibration pairs for REPETITION_SIMILARITY: (earlier answer, later answer, repeated?).
REPETITION_PAIRS = [
    (
        "I'm sorry, I couldn't find any bookings under that name. Could you double-check the spelling?",
        "Sorry, I couldn't find any bookings under that name. Could you double-check the spelling?",
        True,
    ),
    (
        "I apologize for the confusion. Let me retry: order #4411 is on its way, it should arrive soon.",
        "I apologize for the confusion. Let me retry: order #4411 is on its way, it should arrive shortly.",
        True,
    ),
    (
        "To reset your password, go to Settings > Security and click 'Reset password'.",
        "To reset your password, go to Settings > Security, then click 'Reset password'.",
        True,
    ),
    (
        "I understand your frustration. Unfortunately I am unable to process refunds directly.",
        "I understand your frustration. Unfortunately, I'm unable to process refunds directly.",
        True,
    ),
    (
        "I can help you with that. What is your order number?",
        "I can help you with that! What's your order number?",
        True,
    ),
    (
        "The flight AF123 departs at 10:40 from Terminal 2E.",
        "The flight AF123 departs at 10:40 from terminal 2E.",
        True,
    ),
    (
        "Could you please provide more details about the issue you are experiencing?",
        "Could you provide more details about the issue you're experiencing?",
        True,
    ),
    (
        "I'm sorry, but I can't help with that request.",
        "I'm sorry, but I cannot help with that request.",
        True,
    ),
    ("Let me check that for you. One moment please.", "Let me check that for you. One moment, please!", True),
    (
        "Your order #1234 has shipped and will arrive Monday.",
        "Your order #5678 has shipped and will arrive Tuesday.",
        False,
    ),
    (
        "Here are the flights from Paris to London on Monday: AF1 at 9:00, BA2 at 11:00.",
        "Here are the flights from Paris to Rome on Tuesday: AZ3 at 8:00, AF4 at 12:30.",
        False,
    ),
    ("The capital of France is Paris.", "The capital of Germany is Berlin.", False),
    ("I've added milk to your shopping list.", "I've added eggs to your shopping list.", False),
    (
        "Step 1: open the settings page. Step 2: click on Security.",
        "Step 3: click Reset. Step 4: confirm by email.",
        False,
    ),
    ("Sure! What date would you like to travel?", "Sure! How many passengers are travelling?", False),
    (
        "The test suite passed: 42 tests, 0 failures.",
        "The test suite failed: 40 tests passed, 2 failures.",
        False,
    ),
    ("Booked a table for two at 7pm at Luigi's.", "Booked a table for four at 8pm at Sakura.", False),
    ("Done.", "Done.", False),  # too short to mean anything
    ("OK, I will do that.", "OK, I will do that.", False),  # 18 characters normalised: below the minimum
]


@pytest.mark.parametrize(("earlier", "later", "repeated"), REPETITION_PAIRS)
def test_repetition_calibration(earlier: str, later: str, repeated: bool) -> None:
    turns = [(U, "help"), (A, earlier), (U, "hmm, and?"), (A, later)]
    found = only(tx.REPETITION, turns)
    if repeated:
        (instance,) = found
        assert instance.message_index == 3 and instance.snippet and instance.snippet in later
        assert (
            instance.metadata["similar_to"] == 1 and instance.metadata["ratio"] >= REPETITION_SIMILARITY / 100
        )
        assert 0.6 <= instance.confidence <= 0.95
    else:
        assert found == []


def test_repetition_window_is_five_assistant_messages() -> None:
    answer = "I'm sorry, I couldn't find any bookings under that name. Could you double-check the spelling?"
    others = [
        "Your parcel left the warehouse this morning.",
        "The weather in Lisbon will be sunny all week.",
        "Python lists are ordered and mutable collections.",
        "Our office opens at nine and closes at five.",
        "Two plus two equals four, as you know.",
    ]
    turns = [(U, "find my booking"), (A, answer)]
    for n, other in enumerate(others):
        turns += [(U, f"try {n}"), (A, other)]
    turns += [(U, "again"), (A, answer)]
    assert only(tx.REPETITION, turns) == []
    del turns[2:4]  # now the first answer is 5 assistant messages back
    (instance,) = only(tx.REPETITION, turns)
    assert instance.metadata["similar_to"] == 1


def test_repetition_ignores_user_and_tool_messages() -> None:
    text = "I'm sorry, I couldn't find any bookings under that name."
    assert only(tx.REPETITION, [(U, text), (A, "Let me look."), (U, text), (T, text), (T, text)]) == []


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
    ([(U, "This is useless, I've asked three times.")], "phrase"),
    (opened((U, "I'm so frustrated with this bot.")), "phrase"),
    (opened((U, "WHY DOES THIS KEEP FAILING")), "all_caps"),
    (opened((U, "Where is my refund???")), "excessive_punctuation"),
    (opened((U, "You cancelled it?!?!")), "excessive_punctuation"),
    (opened((U, "usually?? this happened in july as well")), "excessive_punctuation"),
    (opened((U, "no?? it scans 90 days of raw events")), "excessive_punctuation"),
    (opened((U, "my card got declined. I TOLD the bank I was travelling!!")), "excessive_punctuation"),
    (opened((U, "why is it still charging me!!")), "excessive_punctuation"),
    (opened((U, "which is down. brilliant.")), "phrase"),
    (opened((U, "great, now it's broken")), "phrase"),
    (opened((U, "perfect, another error")), "phrase"),
    (opened((U, "Still doesn't work.")), "phrase"),
    (opened((U, "What a waste of my time.")), "phrase"),
    (opened((U, "THIS IS NOT WHAT I ORDERED!!!")), "all_caps"),
    (opened((U, "you're not listening")), "phrase"),
    (opened((U, "this is so frustating")), "phrase"),  # typo
    # "!!!" closing a complaining sentence, or in a message that complains elsewhere
    (opened((U, "why is it charging me twice!!!")), "excessive_punctuation"),
    (opened((U, "it doesn't print!!!")), "excessive_punctuation"),
    (opened((U, "the label is wrong again!!!")), "excessive_punctuation"),
    (opened((U, "stop emailing me!!!")), "excessive_punctuation"),
    (opened((U, "great trip so far. but the hotel still has no hot water!!!")), "excessive_punctuation"),
    # a question the user answers themself: closed with "." or "!" instead of "?"
    (opened((U, "why would I call a shop I've never been to. I want a refund")), "rhetorical_question"),
    (opened((U, "How would I know. You have my order number")), "rhetorical_question"),
    (opened((U, "why should I pay for a new one!")), "rhetorical_question"),
    (opened((U, "ok. how is that helpful.")), "rhetorical_question"),
    (opened((U, "you keep switching the setting back and forth")), "phrase"),
    (opened((U, "stop copy pasting the same apology")), "phrase"),
    (opened((U, "that doesn't answer my question. is it refundable")), "phrase"),
    (opened((U, "I emailed twice last week and nobody replied")), "phrase"),
    (opened((U, "the second outage this week. when is it back")), "phrase"),
    (opened((U, "took way too long for a password reset")), "phrase"),
    (opened((U, "they want $30 for a blanket? lame.")), "phrase"),
]
NEGATIVE_STANCE_NEAR_MISSES = [
    opened((U, "I'm not frustrated, just curious.")),
    opened((U, "Remove the useless imports from this file.")),
    opened((U, "How many times should I water my cactus?")),
    opened((U, "Thanks so much!!!")),  # enthusiasm, not frustration
    opened((U, "THANK YOU SO MUCH, IT WORKS")),
    opened((U, "I use AWS and GCP with the SDK")),  # acronyms are not shouting
    opened((U, "OK")),
    opened((U, 'The error says "CONNECTION REFUSED BY REMOTE HOST" again')),  # quoted
    opened((U, "The log shows:\n```\nFATAL!!! DISK FULL ON NODE 3\n```\nwhat does it mean")),  # code
    opened((U, "Fix it"), (A, "THIS IS TERRIBLE!!! I'm sorry.")),  # the assistant
    # "!!!" of excitement: no complaint in its sentence nor in the message
    opened((U, "it's for my son's 10th birthday!!! he's going to love it. can it arrive by saturday?")),
    opened((U, "we're finally going to Japan!!!")),
    opened((U, "just got engaged!!! need a restaurant for saturday")),
    opened((U, "she said yes!!!")),
    opened((U, "our first house!!! what insurance do we need?")),
    opened((U, "Why not! It is not bad. Best news ever!!!")),  # the complaint words are in other sentences
    opened((U, "omg it's snowing!!!")),
    # real questions: closed with "?" or not closed at all, or the opening is not a sentence's
    opened((U, "Why would I need a visa for Japan?")),
    opened((U, "why would I get charged twice")),
    opened((U, "How would I know which size fits? The chart is confusing.")),
    opened((U, "Why should I update the BIOS first?")),
    opened((U, "Explain why would I need it.")),
    opened((U, '"Why would I do that." is a line in the play, translate it')),
    opened((U, "How does that help with battery life? Just curious.")),
    opened((U, "why on earth is the sky blue? my kid asked")),
    opened((U, "> STOP!!! why\nlovely, my sister wrote that, can you reply?")),  # quoted
    opened((U, "The ferry goes back and forth between the islands, how often?")),
    opened((U, "If nobody replies by Friday, send a reminder.")),
    opened((U, "Book it for the third Tuesday this month.")),
    opened((U, "The hotel doesn't answer the phone, what now?")),
    opened((U, "Write a lame joke for my dad's card.")),
    opened((U, "so that makes a new key on every retry of the request??")),  # a long question
    opened((U, "which one is right??")),  # the whole message: a question
    opened((U, "that did it!! builds and runs on the mac now")),  # rejoicing
    opened((U, "it's for my son's 10th birthday!!")),
    opened((U, "Perfect, the error is gone now.")),  # sincere praise beside a fixed fault
    opened((U, "Great, thanks! The old laptop is broken anyway, recycle it.")),
]


@pytest.mark.parametrize(("turns", "pattern"), NEGATIVE_STANCE_POSITIVES)
def test_negative_stance_positive(turns: list[Turn], pattern: str) -> None:
    assert_fires(tx.NEGATIVE_STANCE, turns)
    (instance,) = only(tx.NEGATIVE_STANCE, turns)
    assert instance.metadata["pattern"] == pattern


@pytest.mark.parametrize("turns", NEGATIVE_STANCE_NEAR_MISSES)
def test_negative_stance_near_miss(turns: list[Turn]) -> None:
    assert only(tx.NEGATIVE_STANCE, turns) == []


def test_negative_stance_cues_combine_into_one_instance() -> None:
    (instance,) = only(tx.NEGATIVE_STANCE, opened((U, "THIS IS USELESS, ARE YOU KIDDING ME???")))
    assert instance.metadata["cues"] == ["phrase", "all_caps", "excessive_punctuation"]
    assert instance.confidence == pytest.approx(min(0.95, 0.75 + 0.2))


# --- satisfaction.gratitude ------------------------------------------------------------------------

GRATITUDE_POSITIVES = [
    opened((A, "Done, the file is saved."), (U, "thanks")),  # the reference missed this
    opened((U, "thank you")),
    opened((U, "Thank you!")),
    opened((U, "THANKS")),
    opened((U, "ty")),
    opened((U, "thx, that saved me hours")),
    opened((U, "Much appreciated.")),
    opened((U, "thnak you so much")),  # typo
    opened((U, "No problem, thanks!")),
    opened((U, "Cheers")),
    opened((A, "Mapped the drive."), (U, "it shows up now. ta")),  # British "ta" as its own clause
]
GRATITUDE_NEAR_MISSES = [
    [(U, "Thanks in advance, can you book a table?"), (A, "Sure.")],  # first message
    opened((U, "Any recipes for Thanksgiving plans?")),
    opened((U, "no thanks, I'm fine")),  # declining an offer is not gratitude
    opened((U, "Thanks in advance for checking.")),
    opened((U, "Write a thank you note to my aunt.")),
    opened((U, "Thanks to the storm, my flight got cancelled.")),
    opened((U, "Thanks for nothing.")),
    opened((U, "Summarise this email:\n> Thanks for your order\n> Best, Shop")),
    opened((U, "Thanks, but it still crashes.")),
    opened((U, "Say hi"), (A, "Thank you for your patience!")),  # the assistant
    opened((U, "my TA said the lab is due Friday")),
]


@pytest.mark.parametrize("turns", GRATITUDE_POSITIVES)
def test_gratitude_positive(turns: list[Turn]) -> None:
    assert_fires(tx.GRATITUDE, turns)


@pytest.mark.parametrize("turns", GRATITUDE_NEAR_MISSES)
def test_gratitude_near_miss(turns: list[Turn]) -> None:
    assert only(tx.GRATITUDE, turns) == []


# --- satisfaction.confirmation ---------------------------------------------------------------------

CONFIRMATION_POSITIVES = [
    opened((A, "Here is the summary."), (U, "Perfect!")),
    opened((U, "That's exactly what I needed.")),
    opened((U, "Got it, thanks.")),
    opened((U, "ok got it")),
    opened((U, "Makes sense now.")),
    opened((U, "Great, that clears it up.")),
    opened((U, "Sounds good to me.")),
    opened((U, "This is super helpful.")),
    opened((U, "Awesome.")),
    opened((U, "Prefect, thanks")),  # typo
    opened((U, "ok great, thank you")),  # a lead-in before "^great$"
    opened((U, "awesome thanks")),  # a trailer after it
    opened((U, "yeah perfect")),
    opened((U, "the 9:40 one is perfect, I'll take it")),
    opened((U, "thanks, that explains the extra charge")),
    opened((U, "yep, the USB-C cable is the one I needed")),
    opened((U, "fair enough, I'll wait until Monday")),
]
CONFIRMATION_NEAR_MISSES = [
    [(U, "Perfect, now book it for Friday"), (A, "Booked.")],  # first message
    opened((U, "Perfect competition is an economics term.")),
    opened((U, "Find me the perfect gift for my dad.")),
    opened((U, "I got it from the store yesterday.")),
    opened((U, "Not great, the code still fails.")),
    opened((U, "Great, but it still doesn't compile.")),
    opened((U, "It would be very helpful if you added comments.")),
    opened((U, "That's not perfect yet.")),
    opened((U, "Is this a great idea?")),
    opened((U, "Check"), (A, "Perfect, that makes sense.")),  # the assistant
    opened((U, "oh great, now the login page is broken too")),  # "oh" is no lead-in: sarcasm as often
    opened((U, "great thanks for nothing")),  # "for" is no trailer
    opened((U, "sounds good?")),  # asked, not said
    opened((U, "Nobody is perfect.")),
    opened((U, "Does that explain the fee?")),
    opened((U, "fair enough but the fee is still wrong")),
    opened((U, "great, now it's even worse")),  # sarcasm: a complaint in the same message
]


@pytest.mark.parametrize("turns", CONFIRMATION_POSITIVES)
def test_confirmation_positive(turns: list[Turn]) -> None:
    assert_fires(tx.CONFIRMATION, turns)


@pytest.mark.parametrize("turns", CONFIRMATION_NEAR_MISSES)
def test_confirmation_near_miss(turns: list[Turn]) -> None:
    assert only(tx.CONFIRMATION, turns) == []


# --- satisfaction.success --------------------------------------------------------------------------

SUCCESS_POSITIVES = [
    opened((A, "Try restarting the service."), (U, "It works now!")),
    opened((U, "That fixed it.")),
    opened((U, "All tests pass.")),
    opened((U, "The booking went through.")),
    opened((U, "works like a charm")),
    opened((U, "Yep, that did the trick.")),
    opened((U, "Problem solved.")),
    opened((U, "Finally working, the build is green.")),
    opened((U, "it's workng now")),  # typo
    opened((U, "connected, I can see the shared drive")),  # a status word as its own clause
    opened((U, "ok sorted")),
    opened((U, "fixed! thanks")),
    opened((A, "Resent the invite to her new address."), (U, "she got it now, thanks")),
]
SUCCESS_NEAR_MISSES = [
    [(U, "It works on Linux, how about Windows?"), (A, "Let me check.")],  # first message
    opened((U, "Explain how it works in simple terms.")),
    opened((U, "Can you check if it works on Windows?")),
    opened((U, "It worked yesterday, but now it crashes.")),
    opened((U, "I went through the docs twice.")),
    opened((U, "Make the tests pass please.")),
    opened((U, "Does it work with Python 3.12?")),
    opened((U, "Not sure it works yet.")),
    opened((U, "Run them"), (T, "All tests passed.")),  # the tool
    opened((U, "Run them"), (A, "It works now! All tests pass.")),  # the assistant
    opened((U, "is it working now?")),  # asked
    opened((U, "fixed? it still crashes on start")),  # a "?" inside the phrase
    opened((U, "it worked fine on friday, now nothing")),  # the past, not now
    opened((U, "Connected but no internet.")),
    opened((U, "he got it wrong again")),
]


@pytest.mark.parametrize("turns", SUCCESS_POSITIVES)
def test_success_positive(turns: list[Turn]) -> None:
    assert_fires(tx.SUCCESS, turns)


@pytest.mark.parametrize("turns", SUCCESS_NEAR_MISSES)
def test_success_near_miss(turns: list[Turn]) -> None:
    assert only(tx.SUCCESS, turns) == []


# --- confidence ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "phrase", "question"),
    [
        ("it works now?", "works now", True),
        ("it works now, can you also add logging?", "works now", False),  # the clause closes with ","
        ("fixed? it still crashes", "fixed? it", True),  # a "?" inside the hit
        ("all set. any questions?", "all set", False),
        ("perfect", "perfect", False),
        ("perfect" + " x" * 300 + "?", "perfect", False),  # beyond the look-ahead: not read
    ],
)
def test_a_hit_in_a_question_is_asked(text: str, phrase: str, question: bool) -> None:
    start = text.index(phrase)
    assert asked(text, start, start + len(phrase)) is question


def test_confidence_rule() -> None:
    exact = only(tx.ESCALATION, opened((U, "get me a human")))[0].confidence
    typo = only(tx.ESCALATION, opened((U, "get me a humman")))[0].confidence
    long = only(tx.ESCALATION, opened((U, "get me a human. " + "Here is my long story. " * 100)))[
        0
    ].confidence
    assert exact == 0.9 and typo == pytest.approx(0.75) and 0.9 * 0.6 <= long < exact
    whole = only(tx.GRATITUDE, opened((U, "ty")))[0].confidence
    assert whole == pytest.approx(0.95)


def test_one_instance_per_leaf_and_message() -> None:
    found = only(tx.GRATITUDE, opened((U, "Thanks! Thank you so much, many thanks, much appreciated.")))
    assert len(found) == 1 and found[0].metadata["matches"] >= 4


# --- the whole layer -------------------------------------------------------------------------------

STORY: list[Turn] = [
    (U, "I need to change my flight AF123 to Friday."),
    (A, "I can help with that. What is your booking reference?"),
    (U, "It's XK42PL."),
    (T, '{"error": "not found"}'),
    (A, "I'm sorry, I couldn't find any bookings under that reference. Could you double-check it?"),
    (U, "I need to change my flight AF123 to Friday, reference XK42PL"),
    (A, "I'm sorry, I couldn't find any bookings under that reference. Could you double check it?"),
    (U, "THIS IS RIDICULOUS!!! get me a human"),
    (A, "I understand. Let me transfer you."),
    (U, "No, I meant transfer me to Air France support, not yours."),
    (A, "Done: you're in the queue for Air France support."),
    (U, "ok the transfer went through, thank you"),
    (A, "You're welcome!"),
    (U, "question 5"),
    (A, "answer"),
    (U, "question 6"),
    (U, "question 7"),
    (U, "question 8"),
    (U, "question 9"),
    (A, "answer"),
    (U, "question 10"),
]


def test_story_fires_the_expected_leaves() -> None:
    found = {(i.type, i.message_index) for i in run_incrementally(INTERACTION_DETECTORS, STORY)}
    assert found == {
        (tx.REPHRASE, 5),
        (tx.REPETITION, 6),
        (tx.NEGATIVE_STANCE, 7),
        (tx.ESCALATION, 7),
        (tx.CORRECTION, 9),
        (tx.SUCCESS, 11),
        (tx.GRATITUDE, 11),
        (tx.DRAGGING, 16),  # the 9th user turn: efficiency 1 / (1 + 0.3 × 4) < 0.5
    }


@pytest.mark.parametrize("step", [1, 2, 3, 5])
def test_incremental_runs_equal_one_run_at_the_end(step: int) -> None:
    once = sorted(key(i) for i in run_once(INTERACTION_DETECTORS, STORY))
    stepped = sorted(key(i) for i in run_incrementally(INTERACTION_DETECTORS, STORY, step=step))
    assert stepped == once


def test_dragging_and_repetition_fire_exactly_once_across_calls() -> None:
    memory: dict = {}
    first = run_incrementally(INTERACTION_DETECTORS, STORY, memory=memory)
    convo = Conversation("conv-1", [Message(Role(r), t) for r, t in STORY])
    again = []
    for detector in INTERACTION_DETECTORS:  # the same conversation re-analysed with nothing new
        again += detector(DetectionContext(convo, new_from=len(STORY), memory=memory))
    assert again == []
    assert len(of_type(first, tx.DRAGGING)) == 1 and len(of_type(first, tx.REPETITION)) == 1
    more = STORY + [(U, f"question {n}") for n in range(11, 20)]
    assert len(of_type(run_incrementally(INTERACTION_DETECTORS, more), tx.DRAGGING)) == 1


def test_memory_lost_mid_conversation_is_rebuilt_from_a_bounded_look_back() -> None:
    convo = Conversation("conv-1", [Message(Role(r), t) for r, t in STORY[:7]])
    found = []
    for detector in INTERACTION_DETECTORS:  # a fresh memory, but messages 0..4 were analysed elsewhere
        found += detector(DetectionContext(convo, new_from=5, memory={}))
    assert {(i.type, i.message_index) for i in found} == {(tx.REPHRASE, 5), (tx.REPETITION, 6)}


def test_dropped_history_keeps_absolute_indices() -> None:
    convo = Conversation("conv-1", [Message(Role.USER, "get me a human"), Message(Role.USER, "thanks")])
    convo.message_offset = 40
    found = []
    for detector in INTERACTION_DETECTORS:
        found += detector(DetectionContext(convo, new_from=0, memory={}))
    assert {(i.type, i.message_index) for i in found} == {(tx.ESCALATION, 40), (tx.GRATITUDE, 41)}


def test_messages_without_content_are_skipped() -> None:
    turns = [(U, None), (A, None), (U, None)]
    assert run_incrementally(INTERACTION_DETECTORS, turns) == []  # type: ignore[arg-type]


def test_100kb_user_message_is_analysed() -> None:
    text = ("The quick brown fox jumps over the lazy dog. " * 2300) + "Anyway, get me a human!!!"
    assert len(text) > 100_000
    found = run_incrementally(INTERACTION_DETECTORS, opened((U, text)))
    escalation = of_type(found, tx.ESCALATION)[0]
    assert escalation.snippet == "Anyway, get me a human!!!" and escalation.confidence >= 0.9 * 0.6
    assert of_type(found, tx.NEGATIVE_STANCE)[0].metadata["pattern"] == "excessive_punctuation"
    assert fuzz.ratio("a", "a") == 100  # rapidfuzz is the one installed


# --- partial shouting (negative_stance), contained repetition, term questions (clarification) ---------

CAPS_RUN_POSITIVES = [
    opened((U, "I ALREADY PRUNED. read the dockerfile")),
    opened((U, "please STOP SUGGESTING that, it does not work")),
    opened((U, "the order was for TWO CHAIRS not one")),
]
CAPS_RUN_NEAR_MISSES = [
    opened((U, "the tv supports HDMI/VRR, which cable?")),
    opened((U, "my CAPS LOCK key is stuck")),
    opened((U, "use a LEFT JOIN on orders")),
    opened((U, "ok adding ARG TARGETARCH after the FROM golang line")),
    opened((U, "set MAX_RETRIES to 3 in the config")),
    opened((U, "ask IT about the PR before CI runs")),
    opened((U, "the AWS IAM role is missing")),
    opened((U, "my NASA mug and a USB cable")),
    opened((U, "call the HTTP API with JSON")),
    opened((U, "THANK YOU SO MUCH")),
]


@pytest.mark.parametrize("turns", CAPS_RUN_POSITIVES)
def test_partial_shouting_positive(turns: list[Turn]) -> None:
    (instance,) = only(tx.NEGATIVE_STANCE, turns)
    assert instance.metadata["pattern"] == "all_caps"


@pytest.mark.parametrize("turns", CAPS_RUN_NEAR_MISSES)
def test_partial_shouting_near_miss(turns: list[Turn]) -> None:
    assert only(tx.NEGATIVE_STANCE, turns) == []


CONTAINED_REPETITION_PAIRS = [
    (
        "The printer itself is online. Try removing and re-adding it: Settings → Printers & scanners → "
        "HP-3F-02 → Remove, then Add device.",
        "Try removing and re-adding it: Settings → Printers & scanners → HP-3F-02 → Remove, "
        "and then Add device.",
        True,
    ),
    (
        "How about a garden kneeler and seat ($39) or a bird identification book ($25)?",
        "I couldn't find a camera under $80. How about a garden kneeler and seat ($39) or a bird "
        "identification book ($25)?",
        True,
    ),
    (
        "Let me check that for you.",
        "Let me check that for you. Your order #1234 shipped on Monday and arrives soon.",
        False,
    ),
    (
        "Here are the flights from Paris to London on Monday: AF1 at 9:00, BA2 at 11:00.",
        "Here are the flights from Paris to Rome on Tuesday: AZ3 at 8:00, AF4 at 12:30.",
        False,
    ),
]


# The same answer behind a new opening: sentences of one earlier answer make up most of the new one.
REPEATED_SENTENCES_PAIRS = [
    (
        "Your booking exists but the payment is still pending. Payments usually confirm within a few "
        "hours, and if it fails the hold on your card is released automatically.",
        "I understand your concern. Payments usually confirm within a few hours, and if it fails, the "
        "hold on your card is released automatically.",
        True,
    ),
    (
        "There is a known outage in your area since 6am. I'm sorry for the inconvenience. Engineers are "
        "working to restore service as quickly as possible and you'll get a text when it's back.",
        "I'm sorry for the inconvenience. Engineers are working to restore service as quickly as "
        "possible, and you'll get a text once it's back.",
        True,
    ),
    (
        "Your parcel left the depot this morning. It should arrive by 6pm and the driver will call "
        "ahead. You can track it with the link in your email.",
        "Thanks for your patience! It should arrive by 6pm, and the driver will call ahead. You can "
        "track it with the link in your email.",
        True,
    ),
    (
        "Step 1: open Settings and choose Accounts. Step 2: select Sign-in options and remove the PIN.",
        "Sure. Step 1: open Settings and choose Accounts. Step 2: select Sign-in options and remove the PIN.",
        True,
    ),
    (
        "I'm sorry for the inconvenience. Your refund of $40 was issued today and will show in 3-5 days.",
        "I'm sorry for the inconvenience. The replacement ships tomorrow by express and arrives Thursday.",
        False,
    ),  # a stock apology, then new content
    (
        "Your order #1234 has shipped. It will arrive on Monday between 9 and 12.",
        "Your order #5678 has shipped. It will arrive on Tuesday between 2 and 5.",
        False,
    ),  # a template with other data
    (
        "Added the blue kettle to your basket. Delivery is free over $50.",
        "Added the red toaster to your basket. Your total is now $74.",
        False,
    ),
    (
        "Is there anything else I can help you with today? Have a lovely evening.",
        "Your table for four is booked at 8pm at Sakura, under the name Patel, with a window seat. "
        "Is there anything else I can help you with today?",
        False,
    ),  # a repeated closing line is a small part of the new answer
    (
        "The museum opens at 9am. Tickets are 15 euros and free for children under 12.",
        "The castle opens at 10am. Tickets are 12 euros and free for children under 6.",
        False,
    ),
]


@pytest.mark.parametrize(("earlier", "later", "repeated"), REPEATED_SENTENCES_PAIRS)
def test_repeated_sentences(earlier: str, later: str, repeated: bool) -> None:
    found = only(tx.REPETITION, [(U, "help"), (A, earlier), (U, "and?"), (A, later)])
    assert [i.message_index for i in found] == ([3] if repeated else [])


@pytest.mark.parametrize(("earlier", "later", "repeated"), CONTAINED_REPETITION_PAIRS)
def test_contained_repetition(earlier: str, later: str, repeated: bool) -> None:
    found = only(tx.REPETITION, [(U, "help"), (A, earlier), (U, "and?"), (A, later)])
    assert [i.message_index for i in found] == ([3] if repeated else [])


TERM = "The install waits for Intune; open Company Portal and sync. BuildKit sets TARGETARCH."
TERM_QUESTION_POSITIVES = [
    [(U, "install tableau"), (A, TERM), (U, "what's intune? is that the portal thing?")],
    [(U, "install tableau"), (A, TERM), (U, "ok. what is TARGETARCH?")],
    [(U, "install tableau"), (A, TERM), (U, "whats company portal?")],
    [(U, "install tableau"), (A, TERM), (U, "what does TARGETARCH mean?")],
    [(U, "install tableau"), (A, TERM), (U, "ok. what does BuildKit stand for?")],
]
TERM_QUESTION_NEAR_MISSES = [
    [(U, "install tableau"), (A, TERM), (U, "what's the weather?")],  # not the agent's word
    [(U, "install tableau"), (A, TERM), (U, "whats the difference between intune and company portal")],
    [(U, "install tableau"), (A, TERM), (U, "what's intune doing with my laptop? it is slow")],
    [(U, "install tableau"), (A, TERM), (U, "intune is fine. what is next?")],
    [(U, "install tableau"), (A, TERM), (U, "what is the install")],  # stop word / no question mark
    [(U, "install tableau"), (A, TERM), (U, "I know what intune is.")],
    [(U, "install tableau"), (A, TERM), (U, "> what's intune?\nmy colleague asked that")],
    [(U, "what's intune?"), (A, TERM)],  # before any assistant turn
    [(U, "install tableau"), (A, TERM), (U, "what does carpe diem mean?")],  # not the agent's words
    [(U, "install tableau"), (A, TERM), (U, "what does intune mean for my battery life?")],
]


@pytest.mark.parametrize("turns", TERM_QUESTION_POSITIVES)
def test_term_question_positive(turns: list[Turn]) -> None:
    (instance,) = only(tx.CLARIFICATION, turns)
    assert instance.metadata["pattern"] == "term_question"


@pytest.mark.parametrize("turns", TERM_QUESTION_NEAR_MISSES)
def test_term_question_near_miss(turns: list[Turn]) -> None:
    assert only(tx.CLARIFICATION, turns) == []


# A bare "what <the agent's words>?" echoes them back: the user does not know what the agent means.
ECHO = "There's an unpaid invoice of $15.99 and a late fee, so I can't cancel until it's settled."
ECHO_QUESTION_POSITIVES = [
    [(U, "cancel my plan"), (A, ECHO), (U, "what unpaid invoice? I've never missed a payment")],
    [(U, "cancel my plan"), (A, ECHO), (U, "what late fee?")],
    [(U, "cancel my plan"), (A, ECHO), (U, "ok. what invoice??")],
    [(U, "my balance?"), (A, "It's $20 after the overdraft charge."), (U, "What overdraft charge?")],
    [(U, "dinner ideas"), (A, "Try the risotto or the tagine."), (U, "what tagine? is it spicy")],
    [(U, "book it"), (A, "Booked under your usual alias."), (U, "what alias?")],
    [(U, "deploy"), (A, "Deploy blocked by the freeze window."), (U, "what freeze window?")],
    [(U, "ship it"), (A, "It needs the customs form first."), (U, "what customs form? nobody said")],
]
ECHO_QUESTION_NEAR_MISSES = [
    [(U, "cancel my plan"), (A, ECHO), (U, "what else?")],  # asks for more
    [(U, "cancel my plan"), (A, ECHO), (U, "what about the late fee?")],  # moves on
    [(U, "cancel my plan"), (A, ECHO), (U, "what happened to my payment?")],  # not the agent's words
    [(U, "cancel my plan"), (A, ECHO), (U, "what discount?")],  # the agent never said "discount"
    [(U, "cancel my plan"), (A, ECHO), (U, "what unpaid invoice is that, the May one or the June one?")],
    [(U, "cancel my plan"), (A, ECHO), (U, "what invoice.")],  # no question mark: said, not asked
    [(U, "cancel my plan"), (A, ECHO), (U, "> what invoice?\nmy wife asked that")],  # quoted
    [(U, "what late fee?"), (A, ECHO)],  # before any assistant turn
    [(U, "router"), (A, "The router restarted, it happened at 5."), (U, "what happened?")],
]


@pytest.mark.parametrize("turns", ECHO_QUESTION_POSITIVES)
def test_echo_question_positive(turns: list[Turn]) -> None:
    (instance,) = only(tx.CLARIFICATION, turns)
    assert instance.metadata["pattern"] == "echo_question"


@pytest.mark.parametrize("turns", ECHO_QUESTION_NEAR_MISSES)
def test_echo_question_near_miss(turns: list[Turn]) -> None:
    assert only(tx.CLARIFICATION, turns) == []


def test_stemming_catches_inflected_restatements() -> None:
    assert stem("counting") == stem("counts") == "count"
    assert stem("exits") == stem("exiting") == "exit"
    assert (
        stem("bus") == "bus" and stem("class") == "clas"
    )  # short words untouched; crude but same both sides


# --- context rules: acknowledgements after bad news, complaints about the world, first messages ------

REFUSAL = "Unfortunately that fare is non-refundable, so I can't cancel it for a refund."
HELPFUL = "The defaults are in the DEFAULTS dict at the top of config.py."

ACKNOWLEDGEMENT_AFTER_BAD_NEWS = ["I see.", "Understood.", "Got it.", "ok, noted", "fair enough", "ah I see"]


@pytest.mark.parametrize("text", ACKNOWLEDGEMENT_AFTER_BAD_NEWS)
def test_acknowledgement_after_bad_news_is_no_confirmation(text: str) -> None:
    assert only(tx.CONFIRMATION, opened((U, "Cancel my flight please"), (A, REFUSAL), (U, text))) == []


@pytest.mark.parametrize("text", ACKNOWLEDGEMENT_AFTER_BAD_NEWS)
def test_acknowledgement_after_a_helpful_answer_is_confirmation(text: str) -> None:
    assert_fires(tx.CONFIRMATION, opened((U, "Where are the defaults?"), (A, HELPFUL), (U, text)))


@pytest.mark.parametrize(
    "text", ["yes, that's correct", "perfect, that works", "that's exactly what I needed", "got it, perfect"]
)
def test_explicit_confirmation_after_bad_news_still_counts(text: str) -> None:
    assert_fires(tx.CONFIRMATION, opened((U, "Cancel my flight please"), (A, REFUSAL), (U, text)))


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


MISSED_REQUEST = [
    "not really what I was asking",
    "that's not quite what I meant",
    "that doesn't answer my question",
    "hmm, not exactly what I wanted",
]


@pytest.mark.parametrize("text", MISSED_REQUEST)
def test_an_answer_that_missed_the_request_is_a_correction(text: str) -> None:
    assert_fires(tx.CORRECTION, opened((U, "Does it ship to Canada?"), (A, "We ship worldwide."), (U, text)))


FIRST_MESSAGE_POSITIVES = [
    (tx.CLARIFICATION, "I'm confused, I don't understand these charges"),
    (tx.CLARIFICATION, "I'm lost."),
    (tx.QUIT, "forget it, I'll just go to the store"),
    (tx.QUIT, "Forget it. I'll take my business elsewhere."),
    (tx.CONFIRMATION, "perfect, that's exactly what I needed"),
    (tx.SUCCESS, "thanks, that worked"),
    (tx.ESCALATION, "I want to talk to a human"),
]
FIRST_MESSAGE_NEAR_MISSES = [
    (tx.QUIT, "how do I quit vim?"),
    (tx.CLARIFICATION, "I'm confused about which plan is cheaper, can you compare them?"),
    (tx.CLARIFICATION, "I don't understand why my tests fail on CI"),
    (tx.CORRECTION, "no, I meant the other one"),  # nothing to correct yet
    (tx.CORRECTION, "that's not quite what I meant"),
    (tx.REPHRASE, "let me rephrase: I want flights under $300"),
    (tx.GRATITUDE, "thanks!"),  # gratitude is unchanged: it needs an answer to thank for
    (tx.CONFIRMATION, "Perfect, now book it for Friday"),
    (tx.CONFIRMATION, "Got it."),  # an acknowledgement needs something to acknowledge
    (tx.SUCCESS, "It works on Linux, how about Windows?"),
]


@pytest.mark.parametrize(("signal", "text"), FIRST_MESSAGE_POSITIVES)
def test_unambiguous_signals_fire_on_the_first_message(signal: str, text: str) -> None:
    assert_fires(signal, [(U, text)])


@pytest.mark.parametrize(("signal", "text"), FIRST_MESSAGE_NEAR_MISSES)
def test_context_dependent_signals_need_an_assistant_turn(signal: str, text: str) -> None:
    assert only(signal, [(U, text)]) == []


def test_first_message_seen_after_a_system_prompt_still_counts_as_first() -> None:
    assert_fires(
        tx.QUIT, [("system", "You are a shop assistant."), (U, "forget it, I'll just go to the store")]
    )


CLOSINGS = [
    "thanks, bye",
    "Thanks, bye!",
    "ok thanks bye",
    "thank you, goodbye",
    "cheers, bye",
    "thanks, I'm done",
    "thanks, that's all",
    "no, that's all, thanks",
    "thanks, have a nice day",
    "ok bye then, thank you!",
]


@pytest.mark.parametrize("text", CLOSINGS)
def test_a_polite_closing_is_gratitude_only(text: str) -> None:
    turns = opened((U, "Book it"), (A, "Booked, ref AB12."), (U, text))
    found = [i for i in run_incrementally(INTERACTION_DETECTORS, turns) if i.message_index == len(turns) - 1]
    assert [i.type for i in found] == [tx.GRATITUDE]
