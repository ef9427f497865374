"""The execution layer read trace by trace (what otelsignals.signals.tool_calls keeps between traces:
the progress of each detector, the calls remembered): the same instances as one pass, bounded memory,
absolute indices when the start of a conversation was trimmed."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from otelsignals.model import Conversation, Message, Role
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext
from tests.signals.conversations import key, of_type
from tests.signals.tool_conversations import (
    EXECUTION_DETECTORS,
    alternating,
    exchange,
    failed,
    repeated,
    run,
    run_traces,
    succeeded,
    tool,
    user,
)


def _long_conversation() -> list[Message]:
    messages: list[Message] = [Message(Role.SYSTEM, "You are a travel agent.")]
    messages += repeated("get_weather", [{"city": "Paris"}] * 4)
    messages += [user("flights?")]
    messages += repeated(
        "search_flights",
        [{"q": "cheap flights paris"}, {"q": "cheap flights to paris"}, {"q": "cheap flights to paris june"}],
    )[1:]
    messages += alternating("ABABABAB")
    messages += failed("book", {"id": 1}, status_code=401)
    messages += failed("book", {"id": 1}, status_code=429)
    messages += failed("get_wether", {}, error_message="Unknown tool: get_wether")
    messages += succeeded("search_hotels", {"query": "5 star under $10"}, "[]")
    messages += [user(), *(tool("ok", name="fetch", arguments={"u": 1}, call_id=f"f{i}") for i in range(3))]
    return messages


@pytest.mark.parametrize("step", [1, 2, 3, 5, 7])
def test_trace_by_trace_gives_the_same_instances_as_one_pass(step: int) -> None:
    messages = _long_conversation()
    whole = run(messages)
    traces = [(messages[i : i + step], []) for i in range(0, len(messages), step)]
    pieces = run_traces(traces)
    assert sorted(map(key, pieces)) == sorted(map(key, whole))
    leaves = {i.type for i in whole}
    assert {
        tx.RETRY,
        tx.PARAMETER_DRIFT,
        tx.OSCILLATION,
        tx.AUTH_MISUSE,
        tx.RATE_LIMIT,
        tx.TOOL_NOT_FOUND,
        tx.BAD_QUERY,
    } <= leaves


def test_memory_stays_bounded() -> None:
    memory: dict[str, Any] = {}
    conversation = Conversation("c")
    sizes = {}
    for turn in range(300):
        start = len(conversation.messages)
        conversation.messages += exchange("t", {"i": turn % 7}, "ok")
        ctx = DetectionContext(conversation, start, [], memory)
        for detector in EXECUTION_DETECTORS:
            detector(ctx)
        if turn + 1 in (10, 300):
            sizes[turn + 1] = len(pickle.dumps(memory))
    # what the detectors keep does not grow with the calls (the latest arguments, not a list of them)
    assert sizes[300] <= sizes[10] * 1.05


def test_trimmed_conversation_keeps_absolute_indices() -> None:
    messages = repeated("get_weather", [{"city": "Paris"}] * 3)
    conversation = Conversation("c", messages[2:], message_offset=2)
    ctx = DetectionContext(conversation, 0, [], {})
    found = [i for d in EXECUTION_DETECTORS for i in d(ctx)]
    # the first call was trimmed away: two calls remain, no retry; indices stay absolute
    assert not of_type(found, tx.RETRY)
    start = len(conversation.messages)
    conversation.messages += exchange("get_weather", {"city": "Paris"}, "ok")
    ctx = DetectionContext(conversation, start, [], ctx.memory)
    found = [i for d in EXECUTION_DETECTORS for i in d(ctx)]
    assert [(i.type, i.message_index) for i in found] == [(tx.RETRY, 7)]
