"""The second blind corpus (tests/corpus_blind/*.yaml): schema, label placement and coverage minimums.

Same schema and label-placement checks as the main corpus (tests/corpus/checks.py, the labelling rules
at the top of tests/corpus/support.yaml). The set exists only to measure how the detectors generalise,
so no precision/recall is asserted here; `python -m tests.corpus_eval --blind` reports it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from otelsignals.model import Role
from otelsignals.signals.taxonomy import LEAF_TYPES
from tests.corpus import BLIND_DIR, CORPUS_DIR, HELDOUT_DIR, CorpusConversation, load_corpus, load_raw
from tests.corpus.checks import (
    check_conversation_schema,
    check_domain_files,
    check_expected_labels,
    check_loader,
    check_loop_labels,
    check_near_misses,
    check_user_turns,
    duplicate_ids,
)

RAW = load_raw(BLIND_DIR)
ALL_RAW: list[dict[str, Any]] = [conv for convs in RAW.values() for conv in convs]
CORPUS = load_corpus(BLIND_DIR)

REQUIRED_DOMAINS = {
    "support",
    "coding",
    "travel",
    "shopping",
    "it_helpdesk",
    "banking",
    "hr",
    "data_analysis",
    "healthcare_admin",
    "education",
}
ID_PREFIX = "bl-"
USER_TURNS = (4, 14)
MIN_CONVERSATIONS = 50
MIN_PER_INTERACTION_LEAF = 8
MIN_CLEAN = 8  # no label, or gratitude only
MIN_WITH_EXECUTION_OR_ENVIRONMENT = 10
MIN_NEAR_MISS_USER_MESSAGES = 30

ids = [conv["id"] for conv in ALL_RAW]


# ---------------------------------------------------------------- files and schema


def test_domain_files_present_and_named_after_their_domain() -> None:
    assert set(RAW) >= REQUIRED_DOMAINS, sorted(RAW)
    check_domain_files(RAW)


def test_header_says_second_blind_set_and_points_to_the_rules() -> None:
    head = (BLIND_DIR / "support.yaml").read_text(encoding="utf-8")[:4000]
    assert "SECOND BLIND" in head
    assert "2026-11-23" in head
    assert "tests/corpus/support.yaml" in head
    assert "Labelling rules" in (CORPUS_DIR / "support.yaml").read_text(encoding="utf-8")[:3000]


def test_ids_are_unique_prefixed_and_disjoint_from_the_other_corpora() -> None:
    assert not duplicate_ids(ALL_RAW)
    assert all(i.startswith(ID_PREFIX) for i in ids), [i for i in ids if not i.startswith(ID_PREFIX)]
    other_ids = {
        conv["id"] for d in (CORPUS_DIR, HELDOUT_DIR) for convs in load_raw(d).values() for conv in convs
    }
    assert not other_ids & set(ids)


@pytest.mark.parametrize("raw", ALL_RAW, ids=ids)
def test_conversation_schema(raw: dict[str, Any]) -> None:
    check_conversation_schema(raw)


@pytest.mark.parametrize("conv", CORPUS, ids=[c.id for c in CORPUS])
def test_user_turns_in_range(conv: CorpusConversation) -> None:
    check_user_turns(conv, *USER_TURNS)


# ---------------------------------------------------------------- label placement


@pytest.mark.parametrize("conv", CORPUS, ids=[c.id for c in CORPUS])
def test_expected_labels_follow_the_rules(conv: CorpusConversation) -> None:
    check_expected_labels(conv)


@pytest.mark.parametrize("conv", CORPUS, ids=[c.id for c in CORPUS])
def test_loop_labels_match_the_call_sequence(conv: CorpusConversation) -> None:
    check_loop_labels(conv)


@pytest.mark.parametrize("conv", CORPUS, ids=[c.id for c in CORPUS])
def test_near_misses_are_not_labels(conv: CorpusConversation) -> None:
    check_near_misses(conv)


def test_loader_returns_core_values() -> None:
    check_loader(CORPUS, ALL_RAW, lambda: load_corpus(BLIND_DIR))


# ---------------------------------------------------------------- coverage


def test_size_and_interaction_coverage() -> None:
    assert len(CORPUS) >= MIN_CONVERSATIONS
    counts = Counter(leaf for conv in CORPUS for leaf, _ in conv.expected)
    interaction = [leaf for leaf in LEAF_TYPES if leaf.startswith("interaction.")]
    short = {leaf: counts[leaf] for leaf in interaction if counts[leaf] < MIN_PER_INTERACTION_LEAF}
    assert not short, f"interaction leaves under {MIN_PER_INTERACTION_LEAF} instances: {short}"


def test_clean_and_tool_failure_conversations() -> None:
    gratitude = "interaction.satisfaction.gratitude"
    clean = [c for c in CORPUS if all(leaf == gratitude for leaf, _ in c.expected)]
    assert len(clean) >= MIN_CLEAN, [c.id for c in clean]
    assert all(not c.informative for c in clean), "a clean conversation is routine"
    structural = [
        c.id for c in CORPUS if any(leaf.startswith(("execution.", "environment.")) for leaf, _ in c.expected)
    ]
    assert len(structural) >= MIN_WITH_EXECUTION_OR_ENVIRONMENT, structural


def test_near_misses_are_plentiful() -> None:
    user_near = {
        (c.id, nm.message_index)
        for c in CORPUS
        for nm in c.near_misses
        if c.messages[nm.message_index].role is Role.USER
    }
    assert len(user_near) >= MIN_NEAR_MISS_USER_MESSAGES


def test_quoted_and_pasted_material_present() -> None:
    users = [m.text for c in CORPUS for m in c.messages if m.role is Role.USER]
    assert any("Traceback (most recent call last)" in t for t in users), "a pasted stack trace"
    assert any(any(line.startswith("> ") for line in t.splitlines()) for t in users), "a quoted message"
