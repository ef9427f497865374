"""The user's report that the problem persists (interaction.outcome.persists), and which report their
last word leaves standing for the triage priority (otelsignals/signals/outcome.py)."""

from __future__ import annotations

from typing import Any

import pytest

from otelsignals.conversation import ConversationState
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.detect import REBUILT_WHEN_MISSING, detectors_of
from otelsignals.signals.outcome import detect_persists, standing_report
from tests.signals.conversations import OPENING, A, Turn, U, of_type, run_incrementally, run_once


def reports(turns: list[Turn]) -> list[Any]:
    return of_type(run_incrementally([detect_persists], turns), tx.PERSISTS)


def standing(turns: list[Turn], step: int = 1) -> str | None:
    memory: dict[str, Any] = {}
    run_incrementally([detect_persists], turns, step=step, memory=memory)
    return standing_report(memory)


# --- what is a report ----------------------------------------------------------------------------------

# (domain, the user's message after an assistant turn, the phrase as written in the library)
REPORTS = [
    ("telecom", "I restarted the phone, but there's still no signal.", "still no"),
    ("telecom", "it's still showing no service", "still showing"),
    ("telecom", 'I turned airplane mode off. The status bar still shows "No Signal".', "still shows"),
    ("telecom", "The speed is still slow, around 5 Mbps.", "still slow"),
    ("telecom", "The speed test failed again, indicating no connection.", "test failed"),
    ("telecom", "Unfortunately the reboot didn't help.", "didn't help"),
    ("software", "Reinstalled the package and the build still fails.", "still fails"),
    ("software", "Same error: ModuleNotFoundError: No module named 'yaml'.", "same error"),
    ("software", "Pinned numpy as you said. It doesn't work, same traceback.", "it doesn't work"),
    ("software", "the upload keeps failing at 99%", "keeps failing"),
    ("software", "cleared the cache, back to square one", "back to square one"),
    ("orders", "My order still hasn't arrived.", "still hasn't"),
    ("orders", "I haven't received the replacement card.", "haven't received"),
    ("billing", "I paid, but the late fee is still on my statement.", "still on my statement"),
    ("billing", "The duplicate charge is still there.", "is still there"),
    ("billing", "the payment keeps getting declined", "keeps getting declined"),
    ("any", "Rebooted twice. Nothing changed.", "nothing changed$"),
    ("any", "I toggled it off and on, no change.", "no change$"),
    ("any", "OK it's the same as before, the page just spins.", "it's the same as before"),
    ("any", "The issue persists after the update.", "the issue persists"),
    ("any", "thanks, but I'm still getting the same error", "still getting the same"),
    ("any", "Calls work now, but the data is still slow.", "still slow"),  # a success before it
]


@pytest.mark.parametrize(("domain", "text", "phrase"), REPORTS, ids=[f"{d}:{t[:40]}" for d, t, _ in REPORTS])
def test_a_report_that_the_problem_persists(domain: str, text: str, phrase: str) -> None:
    (found,) = reports([*OPENING, (U, text)])
    assert found.message_index == 2 and found.metadata["phrase"] == phrase
    assert found.snippet and found.snippet in text


NOT_REPORTS = [
    ("a question about the state", "Is it still under warranty?"),
    ("a question whether it is still broken", "Is it still broken for everyone, or just me?"),
    ("still with a good state", "I still have my receipt, do you need it?"),
    ("still as 'however'", "Still, thanks for trying."),
    ("it still works", "It still works great now, thanks!"),
    ("a success after it in the message", "Nothing changed on my end since yesterday, but it works now."),
    ("negated", "It's not still broken, it works since the update."),
    ("across a clause boundary", "Still, no thanks, I'll keep my current plan."),
    ("a readout of a good state", "The status bar still shows excellent signal. Should I run the test?"),
    ("a conditional", "If it doesn't work, can I return it?"),
    ("a past event", "My first payment failed last month, can I see that invoice?"),
    ("no rush", "No rush, there's still no hurry on the invoice."),
    ("undecided, not broken", "I'm still not sure which plan to pick."),
    ("quoted", '"still no signal" is what my sister wrote, can you translate it?'),
    ("wanted, not reported", "I want the same result as last month's report."),
]


@pytest.mark.parametrize(("why", "text"), NOT_REPORTS, ids=[why for why, _ in NOT_REPORTS])
def test_near_misses_report_nothing(why: str, text: str) -> None:
    assert reports([*OPENING, (U, text)]) == []


def test_only_the_users_words_after_their_first_message_count() -> None:
    # the agent saying the problem persists is no user report
    assert reports([*OPENING, (A, "I see the problem persists; it still fails on my side too.")]) == []
    # the first message states the task, even after the agent's greeting
    assert reports([(A, "Hi! How can I help?"), (U, "My data still doesn't work since this morning.")]) == []
    assert reports([(U, "hi, still no refund for order NW-55821")]) == []
    # the agent asking "did that fix it?" is no report; the user's answer is
    answer = [*OPENING, (A, "Did that fix it?"), (U, "No, it still fails.")]
    assert [r.message_index for r in reports(answer)] == [3]


# --- which report stands -------------------------------------------------------------------------------

STILL = (U, "I restarted it, but it still says no service.")
ASKS = (A, "Please restart the phone and tell me what the status bar shows.")

STANDING = [
    ("the last word", [*OPENING, ASKS, STILL], "still says"),
    (
        "a later success",
        [*OPENING, ASKS, STILL, (A, "Toggle airplane mode."), (U, "Oh wait, it works now!")],
        None,
    ),
    (
        "a later 'back to normal'",
        [*OPENING, ASKS, STILL, (A, "Try again."), (U, "It's back to normal, thanks")],
        None,
    ),
    ("a later thank-you", [*OPENING, ASKS, STILL, (A, "I'm sorry."), (U, "Thanks anyway.")], "still says"),
    (
        "a later 'I'll wait'",
        [*OPENING, ASKS, STILL, (A, "Transferring you."), (U, "Understood, I'll wait for the human agent.")],
        "still says",
    ),
    ("a later goodbye", [*OPENING, ASKS, STILL, (A, "Sorry about that."), (U, "ok bye then")], "still says"),
    (
        "a later new finding",
        [
            *OPENING,
            ASKS,
            STILL,
            (A, "Check the SIM."),
            (U, "It looks like the SIM card is locked with a PIN."),
        ],
        None,
    ),
    ("a later question", [*OPENING, ASKS, STILL, (A, "Hmm."), (U, "Should I try the other SIM?")], None),
    (
        "a later request",
        [*OPENING, ASKS, STILL, (A, "Hmm."), (U, "Please send me a new SIM to my home address.")],
        None,
    ),
    (
        "reported again after a success",
        [
            *OPENING,
            STILL,
            (A, "Try this."),
            (U, "That worked."),
            (A, "Great."),
            (U, "Now the data is still slow."),
        ],
        "still slow",
    ),
    ("a later 'no.'", [*OPENING, ASKS, STILL, (A, "Did the reboot fix it?"), (U, "No.")], "still says"),
    (
        "a later 'yes'",
        [*OPENING, ASKS, STILL, (A, "And after the second reboot?"), (U, "Yes, all good now")],
        None,
    ),
    ("no report at all", [*OPENING, (A, "Done."), (U, "Thanks, that's all.")], None),
    ("only the agent says so", [*OPENING, (A, "The problem persists, I'll transfer you.")], None),
]


@pytest.mark.parametrize(("why", "turns", "phrase"), STANDING, ids=[why for why, _, _ in STANDING])
def test_the_report_the_users_last_word_leaves_standing(
    why: str, turns: list[Turn], phrase: str | None
) -> None:
    assert standing(turns) == phrase
    assert standing(turns, step=len(turns)) == phrase  # one trace or one per message: the same


def test_the_standing_report_outlives_a_cold_conversation() -> None:
    """Not a cache rebuilt from the messages: going cold keeps it (the messages it came from may be gone)."""
    state = ConversationState.new("c")
    run_incrementally([detect_persists], [*OPENING, ASKS, STILL], memory=state.detector_memory)
    state.go_cold(REBUILT_WHEN_MISSING)
    assert standing_report(state.detector_memory) == "still says"


def test_the_detector_is_registered_for_its_leaf() -> None:
    assert detectors_of(tx.OUTCOME) == (detect_persists,)
    found = run_once(detectors_of(tx.OUTCOME), [*OPENING, ASKS, STILL])
    assert [s.type for s in found] == [tx.PERSISTS]
    assert tx.PERSISTS not in tx.LABELLED_LEAF_TYPES  # the corpora label SPEC §3's twenty leaves
