"""interaction.stagnation: dragging and repetition, on short conversations run turn by turn."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rapidfuzz import fuzz

from otelsignals.signals import taxonomy as tx
from otelsignals.signals.phrase_analysis import COMPARE_CHARS, sentence_spans
from otelsignals.signals.stagnation import (
    REPETITION_CONTAINED_SIMILARITY,
    REPETITION_SIMILARITY,
    Answer,
    comparable_answer,
    efficiency,
    partial_ratio_bound,
)
from otelsignals.signals.tokens import tokens_of, unify
from tests.signals.conversations import (
    INTERACTION_DETECTORS,
    A,
    T,
    Turn,
    U,
    of_type,
    only,
    run_incrementally,
)

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


# --- the partial_ratio bound that skips most containment checks --------------------------------------
_LETTERS = "abcde ."  # few letters: most drawn pairs are close, many score above the threshold


@st.composite
def needle_in_text(draw: st.DrawFn) -> tuple[str, str]:
    """A text and a longer one holding an edited copy of it (both sides of the 64-character needle
    limit where rapidfuzz changes algorithm)."""
    size = draw(st.sampled_from((1, 20, 64, 65, 150)))
    needle = draw(st.text(_LETTERS, min_size=size, max_size=size))
    copy = list(needle)
    for _ in range(draw(st.integers(0, max(8, size // 5)))):
        at = draw(st.integers(0, len(copy)))
        edit = draw(st.sampled_from(("insert", "delete", "replace")))
        if edit == "insert" or at == len(copy):
            copy.insert(at, draw(st.sampled_from(_LETTERS)))
        elif edit == "delete":
            del copy[at]
        else:
            copy[at] = draw(st.sampled_from(_LETTERS))
    around = st.text(_LETTERS, max_size=60)
    return needle, draw(around) + "".join(copy) + draw(around)


@settings(max_examples=1000, deadline=None)  # 3,000 took 30 s of CI for the same property
@given(needle_in_text())
def test_partial_ratio_bound_holds(texts: tuple[str, str]) -> None:
    """The bound is never below partial_ratio, so a pair it skips scores below the threshold too."""
    short, long = sorted(texts, key=len)
    bound = partial_ratio_bound(short, long)
    assert fuzz.partial_ratio(short, long) <= bound + 1e-9
    if bound < REPETITION_CONTAINED_SIMILARITY:
        assert fuzz.partial_ratio(short, long, score_cutoff=REPETITION_CONTAINED_SIMILARITY) == 0


@pytest.mark.parametrize(
    ("text", "words", "sentences"),
    [
        ("Done. The refund is issued!", "done the refund is issued", ["done", "the refund is issued"]),
        ("One sentence, with a clause", "one sentence with a clause", ["one sentence with a clause"]),
        ("first line\nsecond line", "first line second line", ["first line", "second line"]),
        ("", "", []),
        ("...!?", "", []),  # no word: no sentence
        ("Great 👍 thanks", "great thumbsup thanks", ["great thumbsup thanks"]),
        ("Great👍 thanks", "great thumbsup thanks", ["great", "thumbsup thanks"]),  # glued: tokens_of's flag
        # apostrophes: dropped inside a word, a boundary at its edge or two in a row
        (
            "Don't stop, it's 'fine' - dogs' toys",
            "dont stop its fine dogs toys",
            ["dont stop its fine dogs toys"],
        ),
        ("rock'n'roll a''b '''c", "rocknroll a b c", ["rocknroll a b c"]),
        ("it'\n's", "it s", ["it", "s"]),
        # every sentence mark splits, inside a word too; other punctuation only separates words
        ("3.5 mm; e.g. this?Yes", "3 5 mm e g this yes", ["3", "5 mm", "e", "g", "this", "yes"]),
        (
            "27\u00b0C, \u20ac4.90 \u2192 ok\u2028fine",
            "27 c 4 90 ok fine",
            ["27 c 4", "90 ok fine"],
        ),  # symbols separate
        # more symbols outside ASCII than the byte path takes: the tokeniser reads the same
        ("a\u20ac" * 40, " ".join(["a"] * 40), [" ".join(["a"] * 40)]),
        ("snake_case/path-name#1", "snake case path name 1", ["snake case path name 1"]),
        (
            "Caf\u00e9 na\u00efve \u2014 \u00fcber",
            "caf\u00e9 na\u00efve \u00fcber",
            ["caf\u00e9 na\u00efve \u00fcber"],
        ),
        # Past MAX_SENTENCES (12): every word kept, the first 12 sentences compared.
        (
            " ".join(f"S{n} x." for n in range(14)),
            " ".join(f"s{n} x" for n in range(14)),
            [f"s{n} x" for n in range(12)],
        ),
    ],
)
def test_an_answer_s_sentences_are_slices_of_its_words(text: str, words: str, sentences: list[str]) -> None:
    answer = comparable_answer(text)
    assert answer.text == words
    assert answer.sentences == sentences


def answer_from_tokens(text: str) -> Answer:
    """comparable_answer as tokens_of and sentence_spans define it, one Token per word."""
    tokens = tokens_of(unify(text[:COMPARE_CHARS]))
    norms = [t.norm for t in tokens]
    ends, end = [], -1
    for first, last in sentence_spans(tokens):
        end += len(" ".join(norms[first:last])) + 1
        ends.append(end)
    return Answer(" ".join(norms), tuple(ends))


# Answers made of pieces the byte path treats specially (apostrophes alone, doubled and inside words,
# sentence marks, what unify makes ASCII), any ASCII character, symbols outside ASCII (separators) and
# letters, digits and emoji words outside it (tokens_of's path).
_ANSWER_TEXT = st.lists(
    st.one_of(
        st.sampled_from(["a", "Z9", "don't", "'", "''", "'''", " ", "\n", ".", ";", "?!", "-", "_", "e.g."]),
        st.sampled_from(
            ["\u2019", "\u2014", "\u2026", "\u201c", "\u00a0", "\u20ac", "\u00b0", "\u2192", "\u2028"]
        ),
        st.characters(max_codepoint=127),
        st.sampled_from(["\u00e9", "\u00df", "\u0130", "\u2167", "\u0301", "\U0001f44d", "\U0001f600"]),
    ),
    max_size=40,
).map("".join)


@settings(max_examples=1000)  # 3,000 took 17 s of CI for the same property
@given(_ANSWER_TEXT)
def test_an_answer_reads_as_its_tokens_do(text: str) -> None:
    """The byte path of ASCII answers (tokens.sentence_norms) gives tokens_of's words and sentences."""
    assert comparable_answer(text) == answer_from_tokens(text)


def test_reading_answers_leaves_no_cyclic_garbage() -> None:
    """Every path of comparable_answer (bytes, symbols outside ASCII, a letter that sends the text to
    the tokeniser) is freed by reference counting: the collector is frozen in production (gc_policy)."""
    texts = ["plain. two", "27\u00b0C \u20ac5", "caf\u00e9 \u20ac ok", "a\u20ac" * 40, "great\U0001f44d"]
    gc.collect()
    gc.disable()
    try:
        for text in texts * 20:
            comparable_answer(text)
        assert gc.collect() == 0
    finally:
        gc.enable()
