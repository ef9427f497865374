"""Every rule of the data files (the ``rules`` section of ``phrases/<category>.yaml``): its word lists are
well formed and each of its examples behaves as written when run through the registered detectors.

Adding a word or a rule needs no test code: its positives and near-misses are picked up here.
"""

from __future__ import annotations

from typing import Any

import pytest

from otelsignals.signals import taxonomy as tx
from otelsignals.signals import word_lists
from otelsignals.signals.failure import is_query_call, records_of_an_item
from otelsignals.signals.tokens import tokenise
from otelsignals.signals.word_lists import canonical_forms, phrase_file, word_sequences, word_set
from tests.signals.conversations import assert_fires, of_type, only, rule_conversations
from tests.signals.tool_conversations import (
    EXECUTION_DETECTORS,
    assert_none,
    assert_one,
    exchange,
    repeated,
    run,
    succeeded,
)

RULE_FILES = ("interaction", "misalignment", "disengagement", "failure", "loops", "tool_calls")
RULES: dict[tuple[str, str], dict[str, Any]] = {
    (category, name): entry
    for category in RULE_FILES
    for name, entry in phrase_file(category)["rules"].items()
}
EXAMPLE_KEYS = ("leaf", "patterns", "opening", "positives", "near_misses")


def rules_of(layer: str) -> list[tuple[str, str]]:
    return [rule for rule, entry in RULES.items() if entry["leaf"].startswith(f"{layer}.")]


def conversations(kind: str) -> list[Any]:
    return [
        pytest.param(category, name, turns, id=f"{category}:{name}:{turns[-1][1][:40]}")
        for category, name in rules_of("interaction")
        for turns in rule_conversations(category, name, kind)
    ]


def tool_examples(leaf: str, kind: str, rule: str | None = None) -> list[Any]:
    """The ``kind`` examples of every rule of ``leaf`` (only of ``rule`` when given)."""
    return [
        pytest.param(example, id=f"{category}:{name}:{example}"[:80])
        for (category, name), entry in RULES.items()
        if entry["leaf"] == leaf and rule in (None, name)
        for example in entry[kind]
    ]


# --- the rules and their word lists ------------------------------------------------------------------


@pytest.mark.parametrize(("category", "name"), list(RULES), ids=[f"{c}:{n}" for c, n in RULES])
def test_every_rule_names_its_leaf_and_has_examples(category: str, name: str) -> None:
    entry = RULES[category, name]
    assert entry["leaf"] in tx.LEAF_TYPES
    assert entry["positives"] and entry["near_misses"]
    if entry["leaf"].startswith("interaction."):
        assert entry["patterns"] and all(isinstance(p, str) for p in entry["patterns"])
        assert isinstance(entry["opening"], bool)


def listed_words(entry: dict[str, Any]) -> list[str]:
    words: list[str] = []
    for key, value in entry.items():
        if key in EXAMPLE_KEYS or key == "characters":  # emoji: no words
            continue
        entries = value.items() if isinstance(value, dict) else [value] if isinstance(value, str) else value
        for item in entries:
            words += " ".join(item).split() if isinstance(item, tuple) else str(item).split()
    return words


@pytest.mark.parametrize(
    ("category", "name"), rules_of("interaction"), ids=[f"{c}:{n}" for c, n in rules_of("interaction")]
)
def test_words_are_written_as_the_tokeniser_leaves_them(category: str, name: str) -> None:
    """A word the tokeniser would read otherwise ("don't", "Why") could never match a message's word."""
    for word in listed_words(RULES[category, name]):
        assert [token.norm for token in tokenise(word)] == [word], word


@pytest.mark.parametrize(
    ("category", "name"), rules_of("execution"), ids=[f"{c}:{n}" for c, n in rules_of("execution")]
)
def test_tool_words_are_lower_case_words(category: str, name: str) -> None:
    for word in listed_words(RULES[category, name]):
        assert word.isalnum() and word == word.lower(), word


@pytest.mark.parametrize(
    ("read", "value", "message"),
    [
        (word_set, False, "must be a string of words"),  # YAML reads a bare "no" or "off" as a boolean
        (word_sequences, ["stop", False], "must be a list of word strings"),
        (word_sequences, ["   "], "must be a list of word strings"),
        (canonical_forms, {"two": 2}, "must map words to words"),
    ],
)
def test_a_list_that_is_not_words_is_rejected(
    monkeypatch: pytest.MonkeyPatch, read: Any, value: Any, message: str
) -> None:
    monkeypatch.setattr(word_lists, "_parsed", lambda name: {"rules": {"rule": {"words": value}}})
    with pytest.raises(ValueError, match=message):
        read("category", "rule", "words")


@pytest.mark.parametrize(
    ("value", "numbers", "read"),
    [
        (None, False, ()),
        (["a b", "c"], False, ("a b", "c")),
        ([404, "timeout"], True, ("404", "timeout")),
        ([404], False, None),  # a number where words are expected
        ([True], True, None),  # a boolean is no number here (YAML's yes / on)
        (["ok", False], False, None),
        ("ok", False, None),  # one string is not a list of them
        ("", False, None),
        (0, True, None),
    ],
)
def test_strings_reads_lists_of_strings_only(value: Any, numbers: bool, read: tuple[str, ...] | None) -> None:
    if read is None:
        with pytest.raises(ValueError, match="where must be a list of strings"):
            word_lists.strings(value, "where", numbers=numbers)
    else:
        assert word_lists.strings(value, "where", numbers=numbers) == read


def test_an_unknown_rule_is_rejected() -> None:
    with pytest.raises(ValueError, match="has no rule 'nope'"):
        word_set("misalignment", "nope", "words")


# --- conversation examples: the interaction layer -----------------------------------------------------


@pytest.mark.parametrize(("category", "name", "turns"), conversations("positives"))
def test_conversation_positive_fires_its_rule(category: str, name: str, turns: list[tuple[str, str]]) -> None:
    entry = RULES[category, name]
    assert_fires(entry["leaf"], turns)
    assert {instance.metadata["pattern"] for instance in only(entry["leaf"], turns)} & set(entry["patterns"])


@pytest.mark.parametrize(("category", "name", "turns"), conversations("near_misses"))
def test_conversation_near_miss_fires_nothing_of_its_leaf(
    category: str, name: str, turns: list[tuple[str, str]]
) -> None:
    assert only(RULES[category, name]["leaf"], turns) == []


# --- tool-call examples: the execution layer ----------------------------------------------------------


@pytest.mark.parametrize("example", tool_examples(tx.BAD_QUERY, "positives", "query_argument"))
def test_a_query_call_with_an_empty_result_is_a_bad_query(example: list[Any]) -> None:
    tool, arguments = example
    assert is_query_call(tool, arguments)
    instance = assert_one(succeeded(tool, arguments, "[]"), tx.BAD_QUERY, 2)
    assert instance.metadata["pattern"] == "empty_result:empty"


@pytest.mark.parametrize("example", tool_examples(tx.BAD_QUERY, "near_misses", "query_argument"))
def test_another_call_with_an_empty_result_is_no_bad_query(example: list[Any]) -> None:
    tool, arguments = example
    assert not is_query_call(tool, arguments)
    assert_none(succeeded(tool, arguments, "[]"), tx.BAD_QUERY)


@pytest.mark.parametrize("example", tool_examples(tx.BAD_QUERY, "positives", "records_of_an_item"))
def test_a_query_that_narrows_beyond_an_item_is_a_bad_query(example: list[Any]) -> None:
    tool, arguments = example
    assert is_query_call(tool, arguments) and not records_of_an_item(tool, arguments)
    assert_one(succeeded(tool, arguments, "[]"), tx.BAD_QUERY, 2)


@pytest.mark.parametrize("example", tool_examples(tx.BAD_QUERY, "near_misses", "records_of_an_item"))
def test_an_items_records_found_empty_are_no_bad_query(example: list[Any]) -> None:
    tool, arguments = example
    assert is_query_call(tool, arguments) and records_of_an_item(tool, arguments)
    assert_none(succeeded(tool, arguments, "[]"), tx.BAD_QUERY)


@pytest.mark.parametrize("example", tool_examples(tx.BAD_QUERY, "positives", "adjusted_after_empty"))
def test_an_empty_result_the_agent_adjusts_after_is_a_bad_query(example: list[Any]) -> None:
    tool, first, adjusted = example
    assert not is_query_call(tool, first)
    messages = [*succeeded(tool, first, "[]"), *exchange(tool, adjusted, '[{"id": 1}]')]
    instance = assert_one(messages, tx.BAD_QUERY, 2)
    assert instance.metadata["pattern"] == "adjusted_after_empty:empty"


@pytest.mark.parametrize("example", tool_examples(tx.BAD_QUERY, "near_misses", "adjusted_after_empty"))
def test_an_empty_result_followed_by_another_request_is_no_bad_query(example: list[Any]) -> None:
    tool, first, other = example
    assert_none([*succeeded(tool, first, "[]"), *exchange(tool, other, '[{"id": 1}]')], tx.BAD_QUERY)


NOTHING_FOUND = '{"results": [], "total": 0}'  # a result that makes the agent adjust its next call


@pytest.mark.parametrize("arguments", tool_examples(tx.PARAMETER_DRIFT, "positives"))
def test_three_calls_drifting_are_parameter_drift(arguments: list[Any]) -> None:
    messages = repeated("search", arguments, NOTHING_FOUND)
    instance = assert_one(messages, tx.PARAMETER_DRIFT, len(messages) - 2, detectors=EXECUTION_DETECTORS)
    assert instance.metadata["run_length"] == 3


@pytest.mark.parametrize("arguments", tool_examples(tx.PARAMETER_DRIFT, "near_misses"))
def test_three_calls_for_other_items_are_no_parameter_drift(arguments: list[Any]) -> None:
    messages = repeated("search", arguments, NOTHING_FOUND)
    assert not of_type(run(messages, EXECUTION_DETECTORS), tx.PARAMETER_DRIFT)
