"""The detector registry is built from the taxonomy and the category modules' declarations."""

from __future__ import annotations

import importlib

import pytest

from otelsignals.model import SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext, DetectorSpec
from otelsignals.signals.detect import DETECTORS, category_module_name, detectors_of, registered_for


def _nothing(ctx: DetectionContext) -> list[SignalInstance]:
    return []


def test_every_leaf_has_one_detector_in_its_own_category_module() -> None:
    for category in tx.CATEGORIES:
        module = importlib.import_module(category_module_name(category))
        declared = [leaf for spec in module.DETECTORS for leaf in spec.leaves]
        assert sorted(declared) == sorted(leaf for leaf in tx.LEAF_TYPES if tx.category_of(leaf) == category)


def test_detectors_run_in_the_taxonomy_order() -> None:
    order = [
        leaf
        for category in tx.CATEGORIES
        for spec in importlib.import_module(category_module_name(category)).DETECTORS
        for leaf in spec.leaves
    ]
    assert order == list(tx.LEAF_TYPES)
    assert [entry.group for entry in DETECTORS] == [tx.category_of(leaf) for leaf in tx.LEAF_TYPES]


def test_only_structural_detectors_run_without_message_text() -> None:
    structural = {entry.detector.__name__ for entry in DETECTORS if not entry.needs_content}
    expected = {"detect_dragging", "detect_handoff"} | {
        f"detect_{leaf.rsplit('.', 1)[1]}"
        for leaf in tx.LEAF_TYPES
        if tx.category_of(leaf) in (tx.FAILURE, tx.LOOPS, tx.EXHAUSTION)
    }
    assert structural == expected


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        ((DetectorSpec((tx.CORRECTION,), _nothing), DetectorSpec((tx.REPHRASE,), _nothing)), "missing"),
        (
            (
                DetectorSpec((tx.CORRECTION, tx.REPHRASE, tx.CLARIFICATION), _nothing),
                DetectorSpec((tx.QUIT,), _nothing),
            ),
            "not of this category \\['interaction.disengagement.quit'\\]",
        ),
        (
            (
                DetectorSpec((tx.CORRECTION, tx.REPHRASE), _nothing),
                DetectorSpec((tx.REPHRASE, tx.CLARIFICATION), _nothing),
            ),
            "declared twice \\['interaction.misalignment.rephrase'\\]",
        ),
    ],
)
def test_a_wrong_declaration_is_refused(specs: tuple[DetectorSpec, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        registered_for(tx.MISALIGNMENT, specs)


def test_a_detector_declaring_several_leaves_runs_once_at_its_first_leaf() -> None:
    both = DetectorSpec((tx.CLARIFICATION, tx.CORRECTION), _nothing)
    single = DetectorSpec((tx.REPHRASE,), _nothing)
    registered = registered_for(tx.MISALIGNMENT, (single, both))
    assert [entry.detector for entry in registered] == [both.detect, single.detect]


def test_detectors_of_selects_categories_in_run_order() -> None:
    selected = detectors_of(tx.LOOPS, tx.FAILURE)
    assert [d.__name__ for d in selected] == [
        "detect_invalid_args",
        "detect_bad_query",
        "detect_tool_not_found",
        "detect_auth_misuse",
        "detect_state_error",
        "detect_retry",
        "detect_parameter_drift",
        "detect_oscillation",
    ]


def test_disabled_leaves_and_categories_are_never_reported() -> None:
    from otelsignals.model import Conversation, Message, Role
    from otelsignals.signals.detect import detect

    conversation = Conversation(
        "c",
        messages=[
            Message(Role.USER, "book a table for two"),
            Message(Role.ASSISTANT, "Booked for four."),
            Message(Role.USER, "No, that's wrong, I said two."),
            Message(Role.ASSISTANT, "Sorry: booked for two."),
            Message(Role.USER, "Thanks!"),
        ],
    )

    def types(disabled: frozenset[str]) -> set[str]:
        found, _ = detect(DetectionContext(conversation, new_from=0), disabled)
        return {signal.type for signal in found}

    everything = types(frozenset())
    assert tx.CORRECTION in everything and tx.GRATITUDE in everything
    assert tx.CORRECTION not in types(frozenset([tx.CORRECTION]))
    without_satisfaction = types(frozenset([tx.SATISFACTION]))
    assert not any(t.startswith(tx.SATISFACTION + ".") for t in without_satisfaction)
    assert tx.CORRECTION in without_satisfaction
