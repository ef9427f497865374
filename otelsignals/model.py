"""The core's plain values: conversations as read from spans, and what the analysis finds in them.

Nothing here knows about protobuf, gRPC or files; every detector and score takes and returns these.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NoReturn, SupportsIndex, TypeVar


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(slots=True)
class ToolCall:
    """The assistant asking for a tool. ``arguments`` is parsed JSON when it was JSON, else the text."""

    name: str
    arguments: Any = None
    id: str | None = None


@dataclass(slots=True, eq=False)
class ToolResult:
    """What a tool gave back, or how it failed.

    ``content`` is the result text (None when not captured). ``error_type``, ``status_code`` and
    ``error_message`` come from the tool span's status, ``error.type``, HTTP status and exception
    event; ``is_error`` is set when any of them says the call failed.
    """

    call_id: str | None = None
    name: str | None = None
    content: str | None = None
    arguments: Any = None  # as the tool span recorded them, when it did
    is_error: bool = False
    error_type: str | None = None
    error_message: str | None = None
    status_code: int | None = None

    def __eq__(self, other: object) -> bool:
        # Not the dataclass's: a compacted result (compaction.py) equals a plain one with the same values.
        if not isinstance(other, ToolResult):
            return NotImplemented
        return _values(self, _TOOL_RESULT_FIELDS) == _values(other, _TOOL_RESULT_FIELDS)


class _NoToolCalls(list[ToolCall]):
    """The one empty tool-call list that every message without tool calls shares: a list of its
    own costs 56 bytes a message, 1 MiB of the real development set's session state. Its methods
    that add refuse (a message given calls later is given a new list); C code that writes a list
    directly (heapq) is not stopped, and none is used on messages."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("messages without tool calls share this empty list: assign a new list instead")

    # What would add to it; removing and reordering change nothing in an empty list.
    append = extend = insert = __setitem__ = __iadd__ = __imul__ = _refuse

    def __reduce__(self) -> str:
        return "NO_TOOL_CALLS"  # copied or unpickled: the same shared list


NO_TOOL_CALLS: list[ToolCall] = _NoToolCalls()


def _no_tool_calls() -> list[ToolCall]:
    return NO_TOOL_CALLS


@dataclass(slots=True, eq=False)
class Message:
    role: Role
    content: str | None = None  # None: not captured (instrumentation default), not "empty"
    tool_calls: list[ToolCall] = field(default_factory=_no_tool_calls)
    tool_result: ToolResult | None = None  # role TOOL only
    span_id: bytes = b""  # the span it was read from
    finish_reason: str | None = None
    # Set by the conversation builder the first time it compares this message (see conversation.py).
    fingerprint: int | None = field(default=None, repr=False, compare=False)

    @property
    def text(self) -> str:
        return self.content or ""

    def __eq__(self, other: object) -> bool:
        # Not the dataclass's: a compacted message (compaction.py) equals a plain one with the same values.
        if not isinstance(other, Message):
            return NotImplemented
        return _values(self, _MESSAGE_FIELDS) == _values(other, _MESSAGE_FIELDS)


def _compared_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.compare)


_MESSAGE_FIELDS = _compared_fields(Message)
_TOOL_RESULT_FIELDS = _compared_fields(ToolResult)


def _values(item: object, names: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(getattr(item, name) for name in names)


@dataclass(slots=True)
class LlmCall:
    """One model call (a chat span): its outcome matters even when it carries no messages."""

    span_id: bytes
    trace_id: bytes = b""
    model: str | None = None
    failed: bool = False
    error_type: str | None = None
    error_message: str | None = None
    status_code: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    start_time_unix_nano: int = 0
    end_time_unix_nano: int = 0


@dataclass(slots=True)
class Conversation:
    """Messages of one conversation key, in order, with the model calls that produced them (the
    pipeline keeps the latest RECENT_MODEL_CALLS of those, and of the trace ids)."""

    key: str
    messages: list[Message] = field(default_factory=list)
    llm_calls: list[LlmCall] = field(default_factory=list)
    agent_id: str | None = None
    trace_ids: list[bytes] = field(default_factory=list)
    content_captured: bool = True  # False when no message text at all was recorded
    # Messages dropped from the front to bound memory; message indices stay absolute:
    # messages[i] is message number message_offset + i of the conversation.
    message_offset: int = 0
    trimmed_user_turns: int = 0
    trimmed_assistant_turns: int = 0  # answers with text among the trimmed messages
    # The tools the agent was offered, by name ({"name", "description", "parameters"}), as the model
    # calls' spans list them (gen_ai.tool.definitions, OpenInference llm.tools): the judge's
    # tool_correctness compares the calls made with them.
    available_tools: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def user_turns(self) -> int:
        return sum(1 for m in self.messages if m.role is Role.USER)


@dataclass(slots=True)
class SignalInstance:
    """One detected signal. ``type`` is the dotted leaf type (``interaction.disengagement.escalation``)."""

    type: str
    message_index: int
    confidence: float
    snippet: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # Set the first time the metadata is redacted (signals.base.redacted_metadata): the conversation
    # index redacts every recent signal again for each turn's row. Metadata is final by then.
    redacted: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def layer(self) -> str:
        return self.type.split(".", 1)[0]

    @property
    def category(self) -> str:
        return self.type.rsplit(".", 1)[0]


T = TypeVar("T")


class RecentList(list[T]):
    """A list that keeps only its latest ``maxlen`` items: a bounded deque's behaviour at a list's
    size (an empty deque takes 760 bytes, and every conversation keeps several such records)."""

    __slots__ = ("maxlen",)

    def __init__(self, maxlen: int) -> None:
        super().__init__()
        self.maxlen = maxlen

    def append(self, item: T) -> None:
        super().append(item)
        if len(self) > self.maxlen:
            del self[0]

    def extend(self, items: Iterable[T]) -> None:
        super().extend(items)
        excess = len(self) - self.maxlen
        if excess > 0:
            del self[:excess]

    def __iadd__(self, items: Iterable[T]) -> RecentList[T]:  # type: ignore[override,misc]
        self.extend(items)
        return self

    def insert(self, index: SupportsIndex, item: T) -> None:
        raise TypeError("a RecentList only takes items at its end")

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt with its bound first, then its items (a list's default gives the items first).
        return (RecentList, (self.maxlen,), None, iter(self))


class RecentIds:
    """Fixed-width ids (a span's 8 bytes) remembered like a bounded set: at least the latest
    ``capacity`` additions and at most twice as many, in two generations, the older forgotten whole
    when the newer one fills. Each generation is one bytearray of ids back to back: 8 bytes an id,
    where a set of bytes objects took about 140 (bench/session_memory.py). A lookup is a scan in C,
    about 0.5 ns a byte: under 10 µs for a full memory of 2,048 span ids."""

    __slots__ = ("_newer", "_older", "capacity", "width")

    def __init__(self, capacity: int, width: int = 8) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.width = width
        self._newer = bytearray()
        self._older = bytearray()

    def _key(self, item: bytes) -> bytes:
        # OTLP's span ids are 8 bytes (the receiver drops others); any other id is kept by a digest
        # of that width, so that ids stay aligned.
        if len(item) == self.width:
            return item
        return hashlib.blake2b(item, digest_size=self.width).digest()

    def _position(self, ids: bytearray, key: bytes) -> int:
        """Where ``key`` starts in ``ids`` at an id's boundary, or -1."""
        position = ids.find(key)
        while position > 0 and position % self.width:
            position = ids.find(key, position + 1)
        return position

    def _remove(self, ids: bytearray, key: bytes) -> None:
        position = self._position(ids, key)
        if position >= 0:
            del ids[position : position + self.width]

    def __contains__(self, item: bytes) -> bool:
        key = self._key(item)
        return self._position(self._newer, key) >= 0 or self._position(self._older, key) >= 0

    def __len__(self) -> int:
        return (len(self._newer) + len(self._older)) // self.width

    def add(self, item: bytes) -> bool:
        """Remember ``item``; True if it was not remembered already."""
        key = self._key(item)
        if self._position(self._newer, key) >= 0:
            return False
        if len(self._newer) >= self.capacity * self.width:
            known = self._position(self._older, key) >= 0
            self._older, self._newer = self._newer, bytearray()
        else:
            position = self._position(self._older, key)
            known = position >= 0
            if known:  # moves to the newer generation: the two stay disjoint
                del self._older[position : position + self.width]
        self._newer += key
        return not known

    def discard(self, item: bytes) -> None:
        key = self._key(item)
        self._remove(self._newer, key)
        self._remove(self._older, key)
