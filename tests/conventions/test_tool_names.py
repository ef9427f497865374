"""Tool results named after the calls they answer (conventions.base.link_tool_names)."""

from __future__ import annotations

import pytest

from otelsignals.conventions.base import link_tool_names
from otelsignals.model import Message, Role, ToolCall, ToolResult


def _calls(*ids: str | None) -> Message:
    return Message(
        Role.ASSISTANT, None, tool_calls=[ToolCall(f"tool_{n}", {}, id=i) for n, i in enumerate(ids)]
    )


def _results(*ids: str | None) -> list[Message]:
    return [Message(Role.TOOL, "ok", tool_result=ToolResult(call_id=i)) for i in ids]


def _names(messages: list[Message]) -> list[str | None]:
    return [m.tool_result.name for m in messages if m.tool_result is not None]


@pytest.mark.parametrize(
    ("history", "names"),
    [
        # by id, the usual case
        ([_calls("c1", "c2"), *_results("c2", "c1")], ["tool_1", "tool_0"]),
        # calls written with their item ids, results with the call ids (OpenLLMetry's Responses API
        # wrapper: fc_… against call_…): by order, as many of each, the calls just before the results
        ([_calls("fc_1", "fc_2"), *_results("call_a", "call_b")], ["tool_0", "tool_1"]),
        ([_calls("fc_1"), _calls("fc_2"), *_results("call_a", "call_b")], ["tool_0", "tool_0"]),
        # near misses: counts that differ, a result whose call a window cut off, calls already answered
        ([_calls("fc_1", "fc_2"), *_results("call_a")], [None]),
        ([Message(Role.USER, "hi"), *_results("call_a")], [None]),
        ([_calls("c1", "c2"), *_results("c1", "c2", "c9")], ["tool_0", "tool_1", None]),
        ([_calls("c1"), *_results("c1"), _calls("c2"), *_results("zz", "yy")], ["tool_0", None, None]),
    ],
)
def test_results_are_named_after_their_calls(history: list[Message], names: list[str | None]) -> None:
    link_tool_names(history)
    assert _names(history) == names
