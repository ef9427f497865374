"""Precision and recall per leaf type on the labelled corpus (tests/corpus).

The product's bar is 0.9 for both, for every leaf type: a leaf below it fails the suite. The full
table, with every miss: `python -m tests.corpus_eval`.
"""

from __future__ import annotations

import pytest

from tests.corpus import ALL_SETS, load_corpus
from tests.corpus_eval import evaluate, totals

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


def test_every_set_is_totalled_and_every_label_counted_once() -> None:
    """``python -m tests.corpus_eval --all``: a line per set, whose hits and misses add up to its labels
    (kept-blind sets are read through these totals only)."""
    found = totals()
    assert list(found) == list(ALL_SETS)
    for name, directory in ALL_SETS.items():
        labels = sum(len(conv.expected) for conv in load_corpus(directory))
        assert found[name].true_positives + found[name].false_negatives == labels, name
