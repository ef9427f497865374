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
