"""Precision and recall per leaf type on the labelled corpus (tests/corpus).

The product's bar is 0.9 for both, for every leaf type: a leaf below it fails the suite. The full
table, with every miss: `python -m tests.corpus_eval`.
"""

from __future__ import annotations

import pytest

from tests.corpus_eval import evaluate

GOAL = 0.9


@pytest.fixture(scope="module")
def evaluation():
    return evaluate()


def test_every_leaf_type_meets_its_bar(evaluation):
    weak = [
        f"{leaf}: precision {score.precision:.2f}, recall {score.recall:.2f} (bar {GOAL} for both)"
        for leaf, score in evaluation.leaves.items()
        if score.precision < GOAL or score.recall < GOAL
    ]
    assert not weak, "\n".join(weak) + "\n\n" + evaluation.table() + "\n\n" + "\n".join(evaluation.misses)


def test_overall_precision_and_recall(evaluation):
    found = sum(s.true_positives + s.false_positives for s in evaluation.leaves.values())
    expected = sum(s.true_positives + s.false_negatives for s in evaluation.leaves.values())
    hits = sum(s.true_positives for s in evaluation.leaves.values())
    assert hits / found >= 0.98
    assert hits / expected >= GOAL


def test_every_leaf_type_was_actually_measured(evaluation):
    unmeasured = [leaf for leaf, s in evaluation.leaves.items() if s.true_positives + s.false_negatives < 6]
    assert not unmeasured
