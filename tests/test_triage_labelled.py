"""The triage priority on the labelled sets (bench/triage_labelled.py run as a test).

Every labelled set's writer marked each conversation ``informative`` (worth a look); pooled over the
ten sets, most of them written blind, the priority must rank those conversations ahead of random and
of every trivial ranking read from the conversation itself (tool calls, messages, user turns).
"""

from __future__ import annotations

from bench import triage_labelled
from tests.corpus import ALL_SETS, load_corpus


def test_figures_by_hand() -> None:
    rows = [
        triage_labelled.Ranked(True, {"priority": 3.0, "messages": 1.0}),
        triage_labelled.Ranked(False, {"priority": 1.0, "messages": 2.0}),
        triage_labelled.Ranked(True, {"priority": 2.0, "messages": 2.0}),
    ]
    found = triage_labelled.figures(rows)
    assert found["priority"][0] == 1.0  # both informative ones above the other
    assert found["messages"][0] == 0.25  # one below, one tied (half)
    assert "| pooled | 3 | 0.67 |" in triage_labelled.table({"hand": rows})


def test_priority_ranks_informative_conversations_ahead_of_trivial_rankings() -> None:
    rows = [
        triage_labelled.ranked(entry) for directory in ALL_SETS.values() for entry in load_corpus(directory)
    ]
    found = triage_labelled.figures(rows)
    priority = found["priority"][0]
    assert priority > 0.9, found
    for name in triage_labelled.RANKINGS:
        assert priority > found[name][0] + 0.05, (name, found)
