"""The blind corpora (tests/corpus_heldout/, tests/corpus_blind/, tests/corpus_blind3/ to
tests/corpus_blind12/): schema, label placement and coverage.

Same schema and label-placement checks as the main corpus (tests/corpus/checks.py, the labelling rules
at the top of tests/corpus/support.yaml). Each set was written from the rules alone, without access to
the detectors, and exists to measure how they generalise: the coverage minimums are each set's own,
and no precision/recall is asserted here (`python -m tests.corpus_eval --heldout` / `--blind` /
`--dir tests/corpus_blindN`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from otelsignals.model import Role
from otelsignals.signals.taxonomy import LABELLED_LEAF_TYPES
from tests.corpus import (
    BLIND3_DIR,
    BLIND4_DIR,
    BLIND5_DIR,
    BLIND6_DIR,
    BLIND7_DIR,
    BLIND8_DIR,
    BLIND9_DIR,
    BLIND10_DIR,
    BLIND11_DIR,
    BLIND12_DIR,
    BLIND_DIR,
    CORPUS_DIR,
    HELDOUT_DIR,
    CorpusConversation,
    load_corpus,
    load_raw,
)
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

DOMAINS = {"support", "coding", "travel", "shopping", "it_helpdesk", "banking", "hr", "data_analysis"}
USER_TURNS = (4, 14)
MIN_PER_INTERACTION_LEAF = 8


@dataclass(frozen=True)
class BlindSet:
    directory: Path
    id_prefix: str
    header_marks: tuple[str, ...]  # what the header of its support.yaml says
    domains: frozenset[str]
    min_conversations: int
    min_clean: int  # conversations with no label, or gratitude only
    min_with_execution_or_environment: int
    min_near_miss_user_messages: int  # 0: no floor
    quoted_and_pasted: bool  # a quoted message and a pasted stack trace among the user messages
    header_file: str = "support.yaml"  # the file whose header says how the set was written
    min_per_interaction_leaf: int = MIN_PER_INTERACTION_LEAF
    # Leaves its brief did not ask for (the twelfth's listed the user-message leaves only, so its
    # stagnation labels are the writer's own, fewer than the floor).
    unasked: frozenset[str] = frozenset()

    @property
    def raw(self) -> list[dict[str, Any]]:
        return [conv for convs in load_raw(self.directory).values() for conv in convs]


HELDOUT = BlindSet(HELDOUT_DIR, "ho-", ("BLIND HELD-OUT",), frozenset(DOMAINS), 40, 6, 8, 0, False)
SECOND = BlindSet(
    BLIND_DIR,
    "bl-",
    ("SECOND BLIND", "2026-11-23"),
    frozenset(DOMAINS | {"healthcare_admin", "education"}),
    50,
    8,
    10,
    30,
    True,
)
THIRD = BlindSet(
    BLIND3_DIR,
    "b3-",
    ("THIRD BLIND", "2026-12-02"),
    frozenset({"telecom", "insurance_claims", "logistics", "devops", "real_estate", "government_services"}),
    42,
    1,
    25,
    80,
    True,
    header_file="telecom.yaml",
    min_per_interaction_leaf=6,
)
FOURTH = BlindSet(
    BLIND4_DIR,
    "b4-",
    ("FOURTH BLIND", "2026-12-02"),
    frozenset(
        {
            "automotive_service",
            "energy_utility",
            "food_delivery",
            "gaming_support",
            "legal_intake",
            "media_subscriptions",
        }
    ),
    42,
    6,
    28,
    75,
    True,
    header_file="automotive_service.yaml",
    min_per_interaction_leaf=6,
)
FIFTH = BlindSet(
    BLIND5_DIR,
    "b5-",
    ("FIFTH BLIND", "2026-12-02"),
    frozenset(
        {
            "cloud_billing",
            "event_ticketing",
            "fitness_app",
            "home_services",
            "pet_care",
            "pharmacy",
        }
    ),
    42,
    6,
    28,
    85,
    True,
    header_file="cloud_billing.yaml",
    min_per_interaction_leaf=8,
)


def briefed(
    directory: Path,
    prefix: str,
    mark: str,
    domains: str,
    header_file: str,
    written: str = "2026-12-02",
    unasked: frozenset[str] = frozenset(),
) -> BlindSet:
    """A set written (on ``written``) from the same brief (six domains of seven conversations, every
    interaction leaf at least 6 times, 28 with a tool or environment failure, 6 clean, 85 user
    messages with a near miss, a quoted message and a pasted traceback)."""
    return BlindSet(
        directory,
        prefix,
        (mark, written),
        frozenset(domains.split()),
        42,
        6,
        28,
        85,
        True,
        header_file=header_file,
        min_per_interaction_leaf=6,
        unasked=unasked,
    )


SIXTH = briefed(
    BLIND6_DIR,
    "b6-",
    "SIXTH BLIND",
    "smart_home tax_filing car_rental language_learning recruiting print_shop",
    "smart_home.yaml",
)
SEVENTH = briefed(
    BLIND7_DIR,
    "b7-",
    "SEVENTH BLIND",
    "dental_clinic moving_company crm_admin library_services parking_permits wedding_planning",
    "dental_clinic.yaml",
)
EIGHTH = briefed(
    BLIND8_DIR,
    "b8-",
    "EIGHTH BLIND",
    "airline_loyalty home_insurance university_admissions grocery_delivery web_hosting vet_clinic",
    "airline_loyalty.yaml",
)
NINTH = briefed(
    BLIND9_DIR,
    "b9-",
    "NINTH BLIND",
    "gym_membership freelance_invoicing solar_installation school_portal bike_repair concert_streaming",
    "gym_membership.yaml",
)
TENTH = briefed(
    BLIND10_DIR,
    "b10-",
    "TENTH BLIND",
    "hotel_reservations mortgage_servicing furniture_returns childcare_booking marketplace_seller_support"
    " phone_repair",
    "hotel_reservations.yaml",
    written="2026-12-03",
)
ELEVENTH = briefed(
    BLIND11_DIR,
    "b11-",
    "ELEVENTH BLIND",
    "camping_reservations charity_donations driving_school ev_charging pension_admin storage_units",
    "camping_reservations.yaml",
    written="2026-12-03",
)

TWELFTH = briefed(
    BLIND12_DIR,
    "b12-",
    "TWELFTH BLIND",
    "veterinary_pharmacy coworking_spaces museum_tickets boat_rentals home_broadband_install student_loans",
    "veterinary_pharmacy.yaml",
    written="2026-12-03",
    unasked=frozenset({"interaction.stagnation.repetition", "interaction.stagnation.dragging"}),
)

SETS = {
    "heldout": HELDOUT,
    "blind": SECOND,
    "blind3": THIRD,
    "blind4": FOURTH,
    "blind5": FIFTH,
    "blind6": SIXTH,
    "blind7": SEVENTH,
    "blind8": EIGHTH,
    "blind9": NINTH,
    "blind10": TENTH,
    "blind11": ELEVENTH,
    "blind12": TWELFTH,
}
CONVERSATIONS = [(name, conv) for name, blind in SETS.items() for conv in load_corpus(blind.directory)]
RAW_CONVERSATIONS = [(name, raw) for name, blind in SETS.items() for raw in blind.raw]


def conversations(blind: BlindSet) -> list[CorpusConversation]:
    return load_corpus(blind.directory)


by_set = pytest.mark.parametrize("blind", SETS.values(), ids=SETS.keys())
each_conversation = pytest.mark.parametrize(
    "conv", [conv for _, conv in CONVERSATIONS], ids=[conv.id for _, conv in CONVERSATIONS]
)


# ---------------------------------------------------------------- files and schema


@by_set
def test_domain_files_present_and_named_after_their_domain(blind: BlindSet) -> None:
    raw = load_raw(blind.directory)
    assert set(raw) >= blind.domains, sorted(raw)
    check_domain_files(raw)


@by_set
def test_header_says_blind_and_points_to_the_rules(blind: BlindSet) -> None:
    head = (blind.directory / blind.header_file).read_text(encoding="utf-8")[:4000]
    for mark in blind.header_marks:
        assert mark in head
    assert "tests/corpus/support.yaml" in head
    assert "Labelling rules" in (CORPUS_DIR / "support.yaml").read_text(encoding="utf-8")[:3000]


@by_set
def test_ids_are_unique_prefixed_and_disjoint_from_the_other_corpora(blind: BlindSet) -> None:
    ids = [conv["id"] for conv in blind.raw]
    assert not duplicate_ids(blind.raw)
    assert all(i.startswith(blind.id_prefix) for i in ids), [
        i for i in ids if not i.startswith(blind.id_prefix)
    ]
    others = [
        d
        for d in (
            CORPUS_DIR,
            HELDOUT_DIR,
            BLIND_DIR,
            BLIND3_DIR,
            BLIND4_DIR,
            BLIND5_DIR,
            BLIND6_DIR,
            BLIND7_DIR,
        )
        if d != blind.directory
    ]
    other_ids = {conv["id"] for d in others for convs in load_raw(d).values() for conv in convs}
    assert not other_ids & set(ids)


@pytest.mark.parametrize(
    "raw", [raw for _, raw in RAW_CONVERSATIONS], ids=[r["id"] for _, r in RAW_CONVERSATIONS]
)
def test_conversation_schema(raw: dict[str, Any]) -> None:
    check_conversation_schema(raw)


@each_conversation
def test_user_turns_in_range(conv: CorpusConversation) -> None:
    check_user_turns(conv, *USER_TURNS)


# ---------------------------------------------------------------- label placement


@each_conversation
def test_expected_labels_follow_the_rules(conv: CorpusConversation) -> None:
    check_expected_labels(conv)


@each_conversation
def test_loop_labels_match_the_call_sequence(conv: CorpusConversation) -> None:
    check_loop_labels(conv)


@each_conversation
def test_near_misses_are_not_labels(conv: CorpusConversation) -> None:
    check_near_misses(conv)


@by_set
def test_loader_returns_core_values(blind: BlindSet) -> None:
    check_loader(conversations(blind), blind.raw, lambda: load_corpus(blind.directory))


# ---------------------------------------------------------------- coverage


@by_set
def test_size_and_interaction_coverage(blind: BlindSet) -> None:
    corpus = conversations(blind)
    assert len(corpus) >= blind.min_conversations
    counts = Counter(leaf for conv in corpus for leaf, _ in conv.expected)
    interaction = [
        leaf for leaf in LABELLED_LEAF_TYPES if leaf.startswith("interaction.") and leaf not in blind.unasked
    ]
    short = {leaf: counts[leaf] for leaf in interaction if counts[leaf] < blind.min_per_interaction_leaf}
    assert not short, f"interaction leaves under {blind.min_per_interaction_leaf} instances: {short}"


@by_set
def test_clean_and_tool_failure_conversations(blind: BlindSet) -> None:
    corpus = conversations(blind)
    gratitude = "interaction.satisfaction.gratitude"
    clean = [c for c in corpus if all(leaf == gratitude for leaf, _ in c.expected)]
    assert len(clean) >= blind.min_clean, [c.id for c in clean]
    assert all(not c.informative for c in clean), "a clean conversation is routine"
    structural = [
        c.id for c in corpus if any(leaf.startswith(("execution.", "environment.")) for leaf, _ in c.expected)
    ]
    assert len(structural) >= blind.min_with_execution_or_environment, structural


@by_set
def test_near_misses_are_plentiful(blind: BlindSet) -> None:
    user_near = {
        (c.id, nm.message_index)
        for c in conversations(blind)
        for nm in c.near_misses
        if c.messages[nm.message_index].role is Role.USER
    }
    assert len(user_near) >= blind.min_near_miss_user_messages


@pytest.mark.parametrize(
    "blind",
    [b for b in SETS.values() if b.quoted_and_pasted],
    ids=[name for name, b in SETS.items() if b.quoted_and_pasted],
)
def test_quoted_and_pasted_material_present(blind: BlindSet) -> None:
    users = [m.text for c in conversations(blind) for m in c.messages if m.role is Role.USER]
    assert any("Traceback (most recent call last)" in t for t in users), "a pasted stack trace"
    assert any(any(line.startswith("> ") for line in t.splitlines()) for t in users), "a quoted message"
