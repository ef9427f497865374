"""The demo's summary is the same whatever order the conversations arrived in (gRPC and HTTP race)."""

from __future__ import annotations

from collections import Counter

import pytest

from otelsignals.conversation import ConversationState
from otelsignals.demo.report import quality_report
from otelsignals.model import Conversation, Message, Role


def state(key: str, leaves: dict[str, int]) -> ConversationState:
    conversation = Conversation(key=key, messages=[Message(role=Role.USER, content="hello")])
    return ConversationState(conversation=conversation, leaf_counts=Counter(leaves))


QUIT = "interaction.disengagement.quit"
# Two signals fire more than once; seven fire once and only six of them fit in the top eight. The
# first seen of those seven (in STATES' order) sorts last by name: a cut in arrival order keeps it.
STATES = [
    state("sess-a", {QUIT: 2, "interaction.satisfaction.gratitude": 1, "execution.loops.retry": 1}),
    state(
        "sess-b", {"environment.exhaustion.rate_limit": 1, QUIT: 1, "interaction.misalignment.rephrase": 1}
    ),
    state(
        "sess-c", {"interaction.stagnation.repetition": 3, QUIT: 1, "interaction.misalignment.correction": 1}
    ),
    state("sess-d", {QUIT: 1, "interaction.disengagement.negative_stance": 1}),
    state("sess-e", {"interaction.satisfaction.confirmation": 1}),
]


@pytest.mark.parametrize("order", [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 0, 4, 3, 1]])
def test_summary_does_not_depend_on_arrival_order(order):
    assert quality_report([STATES[i] for i in order], 5) == quality_report(STATES, 5)


def test_signals_with_equal_counts_are_listed_by_name():
    lines = quality_report(STATES, 5)
    first = lines.index("top signals") + 1
    assert [line.split() for line in lines[first : first + 8]] == [
        [QUIT, "5"],
        ["interaction.stagnation.repetition", "3"],
        ["environment.exhaustion.rate_limit", "1"],
        ["execution.loops.retry", "1"],
        ["interaction.disengagement.negative_stance", "1"],
        ["interaction.misalignment.correction", "1"],
        ["interaction.misalignment.rephrase", "1"],
        ["interaction.satisfaction.confirmation", "1"],  # gratitude, last by name, is cut
    ]
    assert lines[first + 8].startswith("flagged conversations")
