"""The triage priority on the labelled sets (bench/triage_labelled.py run as a test).

Every labelled set's writer marked each conversation ``informative`` (worth a look); pooled over the
ten sets, most of them written blind, the priority must rank those conversations ahead of random and
of every trivial ranking read from the conversation itself (tool calls, messages, user turns).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "triage_labelled.py"
spec = importlib.util.spec_from_file_location("triage_labelled", BENCH)
assert spec is not None and spec.loader is not None
triage_labelled = importlib.util.module_from_spec(spec)
sys.modules["triage_labelled"] = triage_labelled
spec.loader.exec_module(triage_labelled)

from tests.corpus import ALL_SETS, load_corpus  # noqa: E402


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
