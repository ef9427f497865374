"""interaction.satisfaction: gratitude, confirmation and success, on short conversations run turn by turn."""

from __future__ import annotations

import pytest

from otelsignals.signals import taxonomy as tx
from tests.signals.conversations import (
    INTERACTION_DETECTORS,
    A,
    T,
    Turn,
    U,
    assert_fires,
    only,
    opened,
    run_incrementally,
)

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
    opened((U, "yes perfect")),  # "yes" is a lead-in like "yeah" (YAML once read it as a boolean)
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
    opened((U, "yes great, but it still doesn't compile")),  # a lead-in, then a complaint
    opened((U, "yes, the great wall")),  # "great" is not the whole reply after the lead-in
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


# --- context rules: acknowledgements after bad news, polite closings -------------------------------

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
