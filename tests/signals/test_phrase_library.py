"""The phrase library self-test: every positive fires its group, every near-miss fires nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from otelsignals.signals import taxonomy as tx
from otelsignals.signals.disengagement import detect_escalation, detect_negative_stance, detect_quit
from otelsignals.signals.matching import PhraseGroup, PhraseMatcher, phrase_tokens, split_wildcards
from otelsignals.signals.misalignment import detect_clarification, detect_correction
from otelsignals.signals.outcome import detect_persists
from otelsignals.signals.phrase_analysis import (
    PhraseLibrary,
    analyse_text,
    expand_slots,
    library_data,
    parse_library,
    phrase_library,
    written_out,
)
from otelsignals.signals.rephrase import detect_rephrase
from otelsignals.signals.satisfaction import detect_confirmation, detect_gratitude, detect_success
from tests.signals.conversations import OPENING, of_type, run_incrementally

LIBRARY = phrase_library()
DETECTOR = {
    tx.CORRECTION: detect_correction,
    tx.REPHRASE: detect_rephrase,
    tx.CLARIFICATION: detect_clarification,
    tx.ESCALATION: detect_escalation,
    tx.QUIT: detect_quit,
    tx.NEGATIVE_STANCE: detect_negative_stance,
    tx.GRATITUDE: detect_gratitude,
    tx.CONFIRMATION: detect_confirmation,
    tx.SUCCESS: detect_success,
    tx.PERSISTS: detect_persists,
}
POSITIVES = [(name, text) for name, spec in LIBRARY.groups.items() for text in spec.positives]
NEAR_MISSES = [(name, text) for name, spec in LIBRARY.groups.items() for text in spec.near_misses]


def fire(signal: str, text: str) -> list:
    """The instances of ``signal`` for ``text`` sent as a user message after an assistant turn."""
    return of_type(run_incrementally([DETECTOR[signal]], [*OPENING, ("user", text)]), signal)


@pytest.mark.parametrize(("group", "text"), POSITIVES, ids=[f"{g}:{t[:40]}" for g, t in POSITIVES])
def test_positive_fires_its_group(group: str, text: str) -> None:
    signal = LIBRARY.signal_of(group)
    assert group in {m.group for m in analyse_text(text).hits.get(signal, [])}
    found = fire(signal, text)
    assert found
    for instance in found:  # one per kind of pattern (complaint, shouting, "???"…), all on this message
        assert instance.message_index == 2
        assert instance.snippet and instance.snippet in text


@pytest.mark.parametrize(("group", "text"), NEAR_MISSES, ids=[f"{g}:{t[:40]}" for g, t in NEAR_MISSES])
def test_near_miss_fires_nothing_of_its_signal(group: str, text: str) -> None:
    assert fire(LIBRARY.signal_of(group), text) == []


@pytest.mark.parametrize("name", list(LIBRARY.groups))
def test_every_group_is_documented_by_examples(name: str) -> None:
    spec = LIBRARY.groups[name]
    assert len(spec.positives) >= 8 and len(spec.near_misses) >= 8
    assert len(spec.group.phrases) >= 15
    assert 0 < spec.group.confidence <= 1


def test_every_phrase_leaf_has_groups() -> None:
    assert {spec.signal for spec in LIBRARY.groups.values()} == set(DETECTOR)


def test_phrases_are_unique_within_a_group() -> None:
    for spec in LIBRARY.groups.values():
        keys = [
            (tuple(phrase_tokens(p)[0]), *phrase_tokens(p)[1:], split_wildcards(p)[1])
            for p in spec.group.phrases
        ]
        assert len(keys) == len(set(keys)), spec.group.name


@pytest.mark.parametrize(
    ("mutation", "message"),
    [
        ({"signal": "interaction.nope.nothing"}, "unknown signal"),
        ({"negation": "sometimes"}, "negation must be"),
        ({"confidence": 1.5}, "outside [0, 1]"),
        ({"phrases": ["!!!"]}, "has no words"),
    ],
)
def test_bad_library_data_is_rejected(mutation: dict, message: str) -> None:
    data = library_data()
    data["groups"]["gratitude"].update(mutation)
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        parse_library(data)


# What YAML makes of unquoted yes/no/on/off (booleans) and of numbers, in every list of words.
@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        (("lead_ins",), ["ok", True], "lead_ins must be a list of strings"),
        (("trailers",), [False], "trailers must be"),
        (("praise_words",), ["great", 1], "praise_words must be"),
        (("negators",), ["not", False], "negators must be"),
        (("protected_words",), "ok", "protected_words must be"),
        (("groups", "gratitude", "phrases"), ["thanks", True], "'gratitude': phrases must be"),
        (("groups", "gratitude", "exclude"), [False], "'gratitude': exclude must be"),
        (("groups", "confirmation", "whole_message"), [True], "'confirmation': whole_message must be"),
        (("groups", "gratitude", "starts_with"), [3], "'gratitude': starts_with must be"),
        (("cues", "third_party", "phrases"), ["courier", None], "'third_party': phrases must be"),
    ],
)
def test_a_word_list_entry_that_is_no_string_is_rejected(
    where: tuple[str, ...], value: object, message: str
) -> None:
    data = library_data()
    parent = data
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    with pytest.raises(ValueError, match=message):
        parse_library(data)


def test_the_shipped_lists_are_strings_and_parse_as_words() -> None:
    """Every lead-in is a word of its own (an unquoted ``yes`` once became the word "true")."""
    data = library_data()
    assert all(isinstance(word, str) for word in data["lead_ins"])
    assert "yes" in phrase_library().matcher.lead_ins
    assert "true" not in phrase_library().matcher.lead_ins


DICTIONARY = Path("/usr/share/dict/words")
TYPO_TARGETS = {"manger", "prefect"}  # real but rare words, far likelier typos of phrase words


def test_real_words_are_never_typo_corrected() -> None:
    """Every dictionary word one interior edit from a phrase word is protected (regenerate the YAML's
    protected_words when phrases change)."""
    speller = LIBRARY.matcher._speller
    words = {
        line.strip().replace("'", "")
        for line in DICTIONARY.read_text(encoding="utf-8", errors="replace").splitlines()
        if line.strip().islower() and not line.strip().endswith("'s")
    }
    corrected = sorted(w for w in words - TYPO_TARGETS if speller.eligible(w) and speller.correct(w))
    assert corrected == []


OPENING_POSITIVES = [(name, text) for name, spec in LIBRARY.groups.items() for text in spec.opening_positives]
OPENING_NEAR_MISSES = [
    (name, text) for name, spec in LIBRARY.groups.items() for text in spec.opening_near_misses
]


def fire_first(signal: str, text: str) -> list:
    """The instances of ``signal`` for ``text`` sent as the conversation's first message."""
    return of_type(run_incrementally([DETECTOR[signal]], [("user", text)]), signal)


@pytest.mark.parametrize(
    ("group", "text"), OPENING_POSITIVES, ids=[f"{g}:{t[:40]}" for g, t in OPENING_POSITIVES]
)
def test_opening_positive_fires_on_a_first_message(group: str, text: str) -> None:
    spec = LIBRARY.groups[group]
    assert spec.first_message, f"{group}: opening_positives need first_message: true"
    assert group in {m.group for m in analyse_text(text).hits.get(spec.signal, [])}
    (instance,) = fire_first(spec.signal, text)
    assert instance.message_index == 0


@pytest.mark.parametrize(
    ("group", "text"), OPENING_NEAR_MISSES, ids=[f"{g}:{t[:40]}" for g, t in OPENING_NEAR_MISSES]
)
def test_opening_near_miss_fires_nothing_on_a_first_message(group: str, text: str) -> None:
    assert fire_first(LIBRARY.signal_of(group), text) == []


@pytest.mark.parametrize("name", [n for n, spec in LIBRARY.groups.items() if spec.first_message])
def test_first_message_groups_are_documented_as_first_messages(name: str) -> None:
    spec = LIBRARY.groups[name]
    assert len(spec.opening_positives) >= 3 and len(spec.opening_near_misses) >= 4


CUE_POSITIVES = [(name, text) for name, (pos, _) in LIBRARY.cue_examples.items() for text in pos]
CUE_NEAR_MISSES = [(name, text) for name, (_, near) in LIBRARY.cue_examples.items() for text in near]


def test_every_cue_list_is_there_and_documented() -> None:
    assert set(LIBRARY.cue_examples) == {"third_party", "agent", "bad_news", "asked_which", "greeting"}
    for positives, near_misses in LIBRARY.cue_examples.values():
        assert len(positives) >= 8 and len(near_misses) >= 8


@pytest.mark.parametrize(("cue", "text"), CUE_POSITIVES, ids=[f"{c}:{t[:40]}" for c, t in CUE_POSITIVES])
def test_cue_positive_hits_its_list(cue: str, text: str) -> None:
    assert cue in LIBRARY.cue_hits(text)


@pytest.mark.parametrize(("cue", "text"), CUE_NEAR_MISSES, ids=[f"{c}:{t[:40]}" for c, t in CUE_NEAR_MISSES])
def test_cue_near_miss_misses_its_list(cue: str, text: str) -> None:
    assert cue not in LIBRARY.cue_hits(text)


def test_unknown_cue_list_is_rejected() -> None:
    data = library_data()
    data["cues"]["weather"] = {"phrases": ["rain"]}
    with pytest.raises(ValueError, match="cue list 'weather'"):
        parse_library(data)


def test_a_phrase_with_slots_stands_for_every_combination_once() -> None:

    slots = {"reach": ("talk to", "call"), "a_human": ("a human", "a real  person")}
    assert expand_slots(("{reach} {a_human}", "call a human", "agent please"), slots, "test") == (
        "talk to a human",
        "talk to a real person",
        "call a human",
        "call a real person",
        "agent please",
    )


def test_a_one_word_slot_after_the_first_is_one_set_of_alternatives_matching_the_same() -> None:
    """ "you {said} {what} {when}$": {said} is expanded (it makes the matcher's keys: no key as common as
    "you"), one-word {when} is one set: an entry per {said} and {what}, not per triple; it finds what
    the triples would. A slot glued to other characters, or after a slot that may be empty, is
    expanded: a set must stand as a word after a word."""
    slots = {
        "said": ("said", "wrote", "it's"),
        "what": ("this", "the same"),
        "when": ("before", "already"),
        "degree": ("", "so"),
    }
    phrases = ("you {said} {what} {when}$", "{degree} {said} it", "my {said}'s")
    written = expand_slots(phrases, slots, "test")
    assert written[:6] == (
        "you said this (before|already)$",
        "you said the same (before|already)$",
        "you wrote this (before|already)$",
        "you wrote the same (before|already)$",
        "you it's this (before|already)$",
        "you it's the same (before|already)$",
    )
    assert written[6:] == (
        "said it",
        "wrote it",
        "it's it",
        "so said it",
        "so wrote it",
        "so it's it",
        "my said's",
        "my wrote's",
        "my it's's",
    )
    matcher = PhraseMatcher([PhraseGroup("told", written[:6])])
    triples = tuple(
        f"you {said} {what} {when}$"
        for said in slots["said"]
        for what in slots["what"]
        for when in slots["when"]
    )
    expanded = PhraseMatcher([PhraseGroup("told", triples)])
    texts = [
        "you wrote the same before.",
        "You said this already",
        "you wrote this before the fix",
        "you it's this before",
        "you told this before",
        "you said the same already, thanks",
    ]
    assert any(expanded.find(text) for text in texts)
    for text in texts:
        assert [(m.start, m.end) for m in matcher.find(text)] == [
            (m.start, m.end) for m in expanded.find(text)
        ], text


CONTRACTIONS = {
    "don't": ("do not",),
    "can't": ("cannot", "can not"),
    "it's": ("it is",),
    "didn't": ("did not",),
    "isn't": ("is not",),
}


@pytest.mark.parametrize(
    ("phrase", "variants"),
    [
        ("i don't follow", ("i don't follow", "i do not follow")),
        ("^can't log in$", ("^can't log in$", "^cannot log in$", "^can not log in$")),
        (
            "it's not what i asked",  # every combination of what is written out
            ("it's not what i asked", "it is not what i asked"),
        ),
        (
            "i don't think it's fine",
            (
                "i don't think it's fine",
                "i don't think it is fine",
                "i do not think it's fine",
                "i do not think it is fine",
            ),
        ),
        ("its owner", ("its owner",)),  # "its" is no "it's"
        ("it's been fine since", ("it's been fine since", "it has been fine since")),  # "'s" as "has"
        ("dont't", ("dont't",)),  # inside another word: nothing
        # a question's "not" follows its subject, written out
        ("why didn't you say so", ("why didn't you say so", "why did you not say so")),
        ("^can't you read", ("^can't you read", "^can you not read")),
        # no question's word order: "not" stays
        ("how come it isn't here", ("how come it isn't here", "how come it is not here")),
        ("that isn't it", ("that isn't it", "that is not it")),  # a statement: "not" stays
        ("thank you", ("thank you",)),
    ],
)
def test_contractions_are_also_matched_written_out(phrase: str, variants: tuple[str, ...]) -> None:
    assert written_out((phrase,), CONTRACTIONS) == variants


WITHOUT_CONTRACTIONS = parse_library(
    {key: value for key, value in library_data().items() if key != "contractions"}
)


@pytest.mark.parametrize(
    ("text", "signal"),
    [
        ("I do not follow. What is the escrow account?", tx.CLARIFICATION),
        ("I am so frustrated", tx.NEGATIVE_STANCE),
        ("I cannot believe this", tx.NEGATIVE_STANCE),
        ("Why did you not tell me that before I paid?", tx.NEGATIVE_STANCE),
    ],
)
def test_the_library_reads_contractions_written_out(text: str, signal: str) -> None:
    """Written as the library's phrases are not ("I'm so frustrated"), found all the same."""

    def signals(library: PhraseLibrary) -> set[str]:
        return {library.signal_of(match.group) for match in library.matcher.find(text)}

    assert signal in signals(LIBRARY) and signal not in signals(WITHOUT_CONTRACTIONS)


@pytest.mark.parametrize(
    ("phrase", "message"),
    [("{reach} {nobody}", "names no slot nobody"), ("{many} {many}", "more than 2000 phrases")],
)
def test_a_phrase_naming_an_unknown_slot_or_too_many_phrases_is_refused(phrase: str, message: str) -> None:

    slots = {"reach": ("call",), "many": tuple(f"two words{n}" for n in range(50))}
    with pytest.raises(ValueError, match=message):
        expand_slots((phrase,), slots, "test")


# Counted in a child process running the source (OTELSIGNALS_PURE_PYTHON=1): the compiled core calls
# its own functions directly, so a counter patched in here would count nothing. The compiled module is
# built from this source (tests/test_native.py compares the two).
_COUNT_HYPOTHETICAL_WORK = """
import json, sys
import otelsignals.signals.phrase_analysis as phrase_analysis
calls = 0
sequence_at = phrase_analysis._sequence_at
def counted(*args):
    global calls
    calls += 1
    return sequence_at(*args)
phrase_analysis._sequence_at = counted
work = []
for repeats in (100, 1000):
    calls = 0
    phrase_analysis.analyse_text(sys.argv[1] * repeats)
    work.append(calls)
print(json.dumps(work))
"""


@pytest.mark.parametrize(
    "unit",
    [
        "let me speak to a human ",  # one long sentence of requests: one clause, read once
        "if I would want to speak to a human ",  # conditions and hypothetical wants throughout
        "get me a human. if not I'd have to cancel, ",  # many short sentences and clauses
    ],
)
def test_the_hypothetical_check_reads_each_word_a_bounded_number_of_times(unit: str) -> None:
    """Every request of a long message is checked for a condition about later, but its clause and
    sentence are read once: the work grows with the text, not with requests × text."""
    env = {**os.environ, "OTELSIGNALS_PURE_PYTHON": "1"}
    child = subprocess.run(
        [sys.executable, "-c", _COUNT_HYPOTHETICAL_WORK, unit],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    small, large = json.loads(child.stdout)
    assert small > 0 and large <= 11 * small
