"""What the interaction detectors share (otelsignals.signals.phrase_analysis): questions, confidence,
first messages, and the layer run as a whole, incrementally."""

from __future__ import annotations

import pytest
from rapidfuzz import fuzz

from otelsignals.model import Conversation, Message, Role
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext
from otelsignals.signals.phrase_analysis import asked
from tests.signals.conversations import (
    INTERACTION_DETECTORS,
    A,
    T,
    Turn,
    U,
    assert_fires,
    key,
    of_type,
    only,
    opened,
    run_incrementally,
    run_once,
)

# --- questions and confidence ----------------------------------------------------------------------


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
    assert escalation.snippet == "get me a human" and escalation.confidence >= 0.9 * 0.6
    (stance,) = of_type(found, tx.NEGATIVE_STANCE)
    assert stance.metadata["pattern_type"] == "excessive_punctuation"
    assert stance.snippet == "Anyway, get me a human!!!"  # a "!!!" run brings its sentence
    assert fuzz.ratio("a", "a") == 100  # rapidfuzz is the one installed


# --- first messages: unambiguous statements fire without an assistant turn before them -------------

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


# An agent's greeting answers nothing: the request after it is still a first message, whether the
# agent spoke first or greeted back.
GREETINGS = [
    [(A, "Hi! How can I help you today?")],
    [(A, "Welcome to Acme Bank support. What can I do for you?")],
    [(U, "hi"), (A, "Hello! How may I assist you?")],
    [("system", "You are a shop assistant."), (A, "Hey there, how can I help?")],
    [(A, "Good morning! I'm Ava, your virtual assistant. How can I help?")],
    [(A, "Hi, this is Sam from IT support. How can I help?")],
]


@pytest.mark.parametrize("greeting", GREETINGS)
@pytest.mark.parametrize(("signal", "text"), FIRST_MESSAGE_NEAR_MISSES)
def test_a_greeting_is_no_answer_to_react_to(greeting: list[Turn], signal: str, text: str) -> None:
    assert only(signal, [*greeting, (U, text)]) == []


@pytest.mark.parametrize("greeting", GREETINGS)
@pytest.mark.parametrize(("signal", "text"), FIRST_MESSAGE_POSITIVES)
def test_unambiguous_signals_fire_after_a_greeting(greeting: list[Turn], signal: str, text: str) -> None:
    assert_fires(signal, [*greeting, (U, text)])


# Near misses of the greeting: an agent's first message that says something is an answer to react to.
OPENING_ANSWERS = [
    "Your card ending 4421 has been blocked.",
    "Hi! Your parcel was delivered to the front desk at 9:40 this morning.",
    "Welcome to Acme Bank. I see a payment of $240 to Volt Energy failed yesterday; it was retried today,"
    " and your statement now shows both the failed attempt and the successful one, which is expected.",
    # an offer of help beside an answer is no bare greeting
    "Done, order 4417 is cancelled. Need help with anything else?",
    "Welcome back! Your card ending 4421 has been blocked.",
    "Sorry, I can only answer billing questions. How can I help?",
]


@pytest.mark.parametrize("answer", OPENING_ANSWERS)
def test_an_agent_s_first_message_with_content_is_an_answer(answer: str) -> None:
    assert_fires(tx.CORRECTION, [(A, answer), (U, "no, I meant the other one")])
    assert_fires(tx.CLARIFICATION, [(A, answer), (U, "I don't understand, what does that mean?")])


def test_first_message_seen_after_a_system_prompt_still_counts_as_first() -> None:
    assert_fires(
        tx.QUIT, [("system", "You are a shop assistant."), (U, "forget it, I'll just go to the store")]
    )


@pytest.mark.source_modules
def test_one_call_scans_each_user_message_once_however_long_they_are(monkeypatch) -> None:
    # Four long messages are each scanned once in a detection call, not once per phrase detector
    # reading them (analysis_of keeps the call's analyses, whatever their size).
    from otelsignals.signals import phrase_analysis
    from otelsignals.signals.detect import detect

    library = phrase_analysis.phrase_library()
    scanned: list[int] = []
    original = library.matcher.scan

    def counted(text: str):  # type: ignore[no-untyped-def]
        scanned.append(len(text))
        return original(text)

    monkeypatch.setattr(library.matcher, "scan", counted)
    long = 70_000
    texts = [f"request {n}: " + "please check the order status again " * (long // 36) for n in range(4)]
    messages = [Message(Role.ASSISTANT, "How can I help?")]
    for text in texts:
        messages += [Message(Role.USER, text), Message(Role.ASSISTANT, "Checking.")]
    detect(DetectionContext(Conversation("c", messages), new_from=0))
    # (Their first COMPARE_CHARS characters are read apart, by the sentence-level rules.)
    assert [n for n in scanned if n > phrase_analysis.COMPARE_CHARS] == [len(text) for text in texts]


def test_remembered_messages_keep_the_latest_few_at_a_list_s_size() -> None:
    # Every open conversation keeps three of these: a bounded deque costs 760 bytes even when
    # nearly empty (its first block), a RecentList what it holds.
    from otelsignals.model import RecentList
    from otelsignals.signals.phrase_analysis import recent_messages

    messages = [Message(Role.USER if i % 2 == 0 else Role.ASSISTANT, f"message {i}") for i in range(12)]
    ctx = DetectionContext(Conversation("c", messages=messages), new_from=12)
    recent = recent_messages(ctx, "test.recent", Role.USER, 3, str.upper)
    assert isinstance(recent, RecentList) and recent == [
        (6, "MESSAGE 6"),
        (8, "MESSAGE 8"),
        (10, "MESSAGE 10"),
    ]
    recent.append((12, "MESSAGE 12"))
    assert recent == [(8, "MESSAGE 8"), (10, "MESSAGE 10"), (12, "MESSAGE 12")]
    assert ctx.memory["test.recent"] is recent
    assert recent.__sizeof__() < 200


@pytest.mark.parametrize(
    ("tool_messages_between", "seeded"),
    [
        (0, [(1, "FIRST ASK"), (3, "SECOND ASK")]),
        # Far beyond the 50 messages the other look-backs read: a cold conversation's memory is
        # seeded with what it would have remembered, however long the agent worked in between.
        (300, [(1, "FIRST ASK"), (303, "SECOND ASK")]),
    ],
)
def test_a_new_memory_is_seeded_with_the_latest_messages_of_its_role_however_far_back(
    tool_messages_between: int, seeded: list[tuple[int, str]]
) -> None:
    from otelsignals.signals.phrase_analysis import recent_messages

    messages = [Message(Role.SYSTEM, "You are a helpful agent."), Message(Role.USER, "first ask")]
    messages += [Message(Role.TOOL, f"result {n}") for n in range(tool_messages_between)]
    messages += [Message(Role.ASSISTANT, "Done."), Message(Role.USER, "second ask")]
    messages += [Message(Role.USER, "")]  # no text: not remembered
    messages += [Message(Role.ASSISTANT, "Anything else?"), Message(Role.USER, "third ask")]
    ctx = DetectionContext(Conversation("c", messages=messages), new_from=len(messages) - 1)
    assert recent_messages(ctx, "test.recent", Role.USER, 3, str.upper) == seeded
    # Only the latest few are prepared, whatever number came before them.
    prepared: list[str] = []
    more = [Message(Role.USER, f"ask {n}") for n in range(40)] + messages
    ctx = DetectionContext(Conversation("c", messages=more), new_from=len(more) - 1)
    recent_messages(ctx, "test.recent", Role.USER, 3, lambda text: prepared.append(text) or text)
    assert prepared == ["second ask", "first ask", "ask 39"]
