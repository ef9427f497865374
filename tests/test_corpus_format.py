"""The labelled corpus (tests/corpus/*.yaml): schema, label placement and coverage.

The labelling rules are the comment block at the top of tests/corpus/support.yaml; these tests check
that every label sits where those rules put it (the checks live in tests/corpus/checks.py, shared with
the held-out set's format test) and that the corpus covers every leaf type.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from otelsignals.model import Role
from otelsignals.signals.taxonomy import LABELLED_LEAF_TYPES
from tests.corpus import CORPUS_DIR, CorpusConversation, load_corpus, load_raw
from tests.corpus.checks import (
    DRAG_AT_USER_TURN,
    check_conversation_schema,
    check_domain_files,
    check_expected_labels,
    check_loader,
    check_loop_labels,
    check_near_misses,
    check_user_turns,
    duplicate_ids,
)

RAW = load_raw()
ALL_RAW: list[dict[str, Any]] = [conv for convs in RAW.values() for conv in convs]
CORPUS = load_corpus()
BY_ID = {conv.id: conv for conv in CORPUS}

REQUIRED_DOMAINS = {"support", "coding", "travel", "shopping"}

MIN_CONVERSATIONS = 64
MIN_PER_LEAF = 6
MIN_CLEAN = 12
MIN_WITH_TOOLS = 24
MIN_NEAR_MISS_USER_MESSAGES = 40
USER_TURNS = (3, 14)

ids = [conv["id"] for conv in ALL_RAW]


# ---------------------------------------------------------------- files and schema


def test_domain_files_present_and_named_after_their_domain() -> None:
    assert set(RAW) >= REQUIRED_DOMAINS, sorted(RAW)
    check_domain_files(RAW)


def test_rules_live_with_the_data() -> None:
    head = (CORPUS_DIR / "support.yaml").read_text(encoding="utf-8")[:3000]
    assert "Labelling rules" in head


def test_ids_are_unique() -> None:
    assert not duplicate_ids(ALL_RAW)


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


# ---------------------------------------------------------------- loader


def test_loader_returns_core_values() -> None:
    check_loader(CORPUS, ALL_RAW, load_corpus)


def test_tool_argument_json_survives() -> None:
    conv = BY_ID["coding-013"]
    calls = [c for m in conv.messages for c in m.tool_calls if c.name == "run_shell"]
    assert calls[0].arguments == {"command": ["ruff", "check", "."]}


# ---------------------------------------------------------------- coverage


def test_corpus_size_and_domains() -> None:
    assert len(CORPUS) >= MIN_CONVERSATIONS
    domains = Counter(c.domain for c in CORPUS)
    assert set(domains) >= REQUIRED_DOMAINS


def test_every_leaf_is_covered() -> None:
    counts = Counter(leaf for conv in CORPUS for leaf, _ in conv.expected)
    short = {leaf: counts[leaf] for leaf in LABELLED_LEAF_TYPES if counts[leaf] < MIN_PER_LEAF}
    assert not short, f"leaves under {MIN_PER_LEAF} instances: {short}"


def test_clean_and_tool_conversations() -> None:
    clean = [c.id for c in CORPUS if not c.expected]
    with_tools = [c.id for c in CORPUS if any(m.tool_calls for m in c.messages)]
    assert len(clean) >= MIN_CLEAN, clean
    assert len(with_tools) >= MIN_WITH_TOOLS
    assert all(not BY_ID[cid].informative for cid in clean), "a clean conversation is routine"


def test_near_misses_are_plentiful() -> None:
    user_near = {
        (c.id, nm.message_index)
        for c in CORPUS
        for nm in c.near_misses
        if c.messages[nm.message_index].role is Role.USER
    }
    assert len(user_near) >= MIN_NEAR_MISS_USER_MESSAGES


def test_corpus_has_long_and_quoted_material() -> None:
    users = [m.text for c in CORPUS for m in c.messages if m.role is Role.USER]
    assert any("Traceback (most recent call last)" in t for t in users), "a pasted stack trace"
    assert any(any(line.startswith("> ") for line in t.splitlines()) for t in users), "a quoted email"
    assert sum(1 for t in users if len(t) > 300) >= 3, "some long user messages"
    assert sum(1 for c in CORPUS if c.user_turns >= DRAG_AT_USER_TURN) >= MIN_PER_LEAF
