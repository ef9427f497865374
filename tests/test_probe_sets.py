"""The probe sets from unseen writers (tests/probes; README, "Probe sets from unseen writers"): their
shape, and a floor under the detectors' precision on them. Recall is measured, not asserted
(``python -m tests.probe_eval``): the test halves are kept for measuring what transfers."""

from __future__ import annotations

import itertools

import pytest

from tests.probe_eval import HALVES, LEAVES, load, score

# Below this, a detector change fires on too many of the near misses the writers chose (the lowest
# measured today: negative stance's test half, 0.78, its second writer's complaints aimed elsewhere).
PRECISION_FLOOR = 0.75


@pytest.mark.parametrize("leaf", sorted(LEAVES))
@pytest.mark.parametrize("half", HALVES)
def test_probe_items_are_conversations_ending_with_the_user(leaf: str, half: str) -> None:
    items = load(leaf, half)
    assert len(items) >= 40
    assert len({item["id"] for item in items}) == len(items)
    assert sum(item["label"] for item in items) >= 20 and sum(not item["label"] for item in items) >= 20
    for item in items:
        roles = [role for role, _ in item["turns"]]
        assert roles[-1] == "user", item["id"]  # some open with the agent's greeting or last step
        assert all(a != b for a, b in itertools.pairwise(roles)), item["id"]
        assert set(roles) <= {"user", "assistant"} and isinstance(item["label"], bool), item["id"]
        assert all(isinstance(text, str) and text.strip() for _, text in item["turns"]), item["id"]


def test_the_halves_share_no_judged_message() -> None:
    for leaf in LEAVES:
        dev, test = ({item["turns"][-1][1] for item in load(leaf, half)} for half in HALVES)
        assert not dev & test, leaf


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_precision_on_the_near_misses_stays_above_the_floor(leaf: str) -> None:
    for half in HALVES:
        result = score(leaf, half)
        assert result.precision >= PRECISION_FLOOR, (leaf, half, result)
