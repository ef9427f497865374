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


STATES = [
    state("sess-a", {"interaction.disengagement.quit": 2, "interaction.satisfaction.gratitude": 1}),
    state("sess-b", {"environment.exhaustion.rate_limit": 2, "interaction.disengagement.quit": 1}),
    state("sess-c", {"interaction.stagnation.repetition": 3, "interaction.disengagement.quit": 1}),
    state("sess-d", {"interaction.disengagement.quit": 2}),
]


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]])
def test_summary_does_not_depend_on_arrival_order(order):
    assert quality_report([STATES[i] for i in order], 5) == quality_report(STATES, 5)


def test_signals_with_equal_counts_are_listed_by_name():
    lines = quality_report(STATES, 5)
    top = lines[lines.index("top signals") + 1 : lines.index("top signals") + 5]
    assert [line.split()[0] for line in top] == [
        "interaction.disengagement.quit",  # 5
        "interaction.stagnation.repetition",  # 3
        "environment.exhaustion.rate_limit",  # 2, before the other 2 by name
        "interaction.satisfaction.gratitude",  # 1
    ]
