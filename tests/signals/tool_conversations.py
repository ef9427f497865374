"""Builders for conversations with tool calls (user → assistant call → tool result …) and helpers that
run the execution and environment detectors over them."""

from __future__ import annotations

import itertools
from typing import Any

from otelsignals.model import Conversation, LlmCall, Message, Role, SignalInstance, ToolCall, ToolResult
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext
from otelsignals.signals.detect import detectors_of
from tests.signals.conversations import of_type

EXECUTION_DETECTORS = detectors_of(tx.FAILURE, tx.LOOPS)
ALL = (*EXECUTION_DETECTORS, *detectors_of(tx.EXHAUSTION))
_ids = itertools.count(1)


# --- builders ----------------------------------------------------------------------------------------


def user(text: str = "Please help.") -> Message:
    return Message(Role.USER, text)


def call(name: str, arguments: Any = None, call_id: str | None = "auto") -> ToolCall:
    return ToolCall(name, arguments, f"call_{next(_ids)}" if call_id == "auto" else call_id)


def assistant(*calls: ToolCall, text: str | None = None) -> Message:
    return Message(Role.ASSISTANT, text, tool_calls=list(calls))


def tool(content: str | None = None, *, answers: ToolCall | None = None, **fields: Any) -> Message:
    """A TOOL message; ``answers`` gives its call id and name, ``fields`` the ToolResult's others."""
    if answers is not None:
        fields.setdefault("call_id", answers.id)
        fields.setdefault("name", answers.name)
    result = ToolResult(content=content, **fields)
    return Message(Role.TOOL, content, tool_result=result)


def exchange(name: str, arguments: Any, content: str | None = None, **fields: Any) -> list[Message]:
    """An assistant call and its result."""
    c = call(name, arguments)
    return [assistant(c), tool(content, answers=c, **fields)]


def failed(name: str, arguments: Any, content: str | None = None, **fields: Any) -> list[Message]:
    """user → assistant call → failed tool result (message 2)."""
    return [user(), *exchange(name, arguments, content, is_error=True, **fields)]


def succeeded(name: str, arguments: Any, content: str) -> list[Message]:
    """user → assistant call → successful tool result (message 2)."""
    return [user(), *exchange(name, arguments, content)]


def run(
    messages: list[Message],
    detectors: tuple = ALL,
    llm_calls: list[LlmCall] | None = None,
    memory: dict[str, Any] | None = None,
) -> list[SignalInstance]:
    ctx = DetectionContext(
        Conversation("c", list(messages)), 0, list(llm_calls or []), {} if memory is None else memory
    )
    found: list[SignalInstance] = []
    for detector in detectors:
        found += detector(ctx)
    return found


def run_traces(
    traces: list[tuple[list[Message], list[LlmCall]]],
    detectors: tuple = ALL,
    memory: dict[str, Any] | None = None,
) -> list[SignalInstance]:
    """Feed a conversation trace by trace: the messages grow, ``new_from`` moves, ``memory`` (a new
    one by default) is kept."""
    conversation = Conversation("c")
    memory = {} if memory is None else memory
    found: list[SignalInstance] = []
    for messages, llm_calls in traces:
        start = len(conversation.messages)
        conversation.messages.extend(messages)
        ctx = DetectionContext(conversation, start, list(llm_calls), memory)
        for detector in detectors:
            found += detector(ctx)
    return found


def assert_one(messages: list[Message], leaf: str, index: int, **kwargs: Any) -> SignalInstance:
    found = run(messages, **kwargs)
    hits = of_type(found, leaf)
    assert [h.message_index for h in hits] == [index], found
    instance = hits[0]
    assert 0.0 <= instance.confidence <= 1.0
    assert instance.metadata["pattern"]
    assert instance.snippet is None or len(instance.snippet) <= 200
    # A leaf of one layer never comes with an execution failure on the same message unless it is it.
    same_message_failures = [
        i
        for i in found
        if i.message_index == index and i.type.startswith("execution.failure") and i.type != leaf
    ]
    assert not same_message_failures, found
    return instance


def assert_none(messages: list[Message], leaf: str) -> None:
    found = run(messages)
    assert not of_type(found, leaf), found


def assert_silent(messages: list[Message]) -> None:
    assert run(messages) == []


def repeated(name: str, arguments: list[Any], result: str = '{"ok": true}') -> list[Message]:
    """user, then one assistant call + result per arguments value (calls at 1, 3, 5, …)."""
    messages = [user()]
    for args in arguments:
        messages += exchange(name, args, result)
    return messages


def alternating(names: str, same_args: bool = True) -> list[Message]:
    """user, then one call + result per letter of ``names``, each letter a tool ("ABABAB")."""
    messages = [user()]
    for position, name in enumerate(names):
        messages += exchange(name, {"k": "v"} if same_args else {"k": position}, "ok")
    return messages
