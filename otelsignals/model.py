"""The core's plain values: conversations as read from spans, and what the analysis finds in them.

Nothing here knows about protobuf, gRPC or files; every detector and score takes and returns these.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import operator
from array import array
from collections.abc import Iterable, Iterator, MutableSequence, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NoReturn, SupportsIndex, TypeVar, overload


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


def leading_system_prompts(messages: Sequence[Message]) -> int:
    """How many system prompts ``messages`` starts with."""
    count = 0
    while count < len(messages) and messages[count].role is Role.SYSTEM:
        count += 1
    return count


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


_ABSENT = -(2**63)  # None in RecentModelCalls' integer columns
_INT64 = range(_ABSENT + 1, 2**63)
_COLUMNED_INTEGERS = (
    "status_code",
    "input_tokens",
    "output_tokens",
    "start_time_unix_nano",
    "end_time_unix_nano",
)
_integers_of = operator.attrgetter(*_COLUMNED_INTEGERS)


class RecentModelCalls(MutableSequence[LlmCall]):
    """A conversation's latest model calls, kept column by column: about 67 bytes a call, where an
    ``LlmCall`` with its span id and its integers took about 260 (bench/session_memory.py). The
    span ids and five integers are in arrays, the trace ids and model names are references to
    shared objects. Each read builds the call anew, so changing a call read does not change the
    one kept. A call that failed or names an error, whose span id is not 8 bytes, or whose integers
    are not ``int``s of 64 bits is kept as its own object: rare.

    The pipeline appends and trims the front; deleting the end (pop, clear) is done in place too;
    other changes (insert, replace, reverse) build the columns anew."""

    __slots__ = ("_models", "_numbers", "_span_ids", "_trace_ids", "_trimmed", "_whole")

    def __init__(self, calls: Iterable[LlmCall] = ()) -> None:
        self._span_ids = array("Q")  # 8-byte span ids as integers
        self._trace_ids: list[bytes] = []
        self._models: list[str | None] = []
        self._numbers = array("q")  # the _COLUMNED_INTEGERS of each call, _ABSENT for None
        # The calls not in the columns, by their position counted from the first call ever kept
        # (None while there is none: a list of a None per call cost 8 bytes a call).
        self._whole: dict[int, LlmCall] | None = None
        self._trimmed = 0  # calls trimmed from the front since the first
        self.extend(calls)

    def __len__(self) -> int:
        return len(self._span_ids)

    def _call(self, index: int) -> LlmCall:
        if self._whole is not None:
            whole = self._whole.get(self._trimmed + index)
            if whole is not None:
                return whole
        at = index * len(_COLUMNED_INTEGERS)
        # in the order of _COLUMNED_INTEGERS; times are always ints (a call without is kept whole)
        status, input_tokens, output_tokens, start, end = self._numbers[at : at + len(_COLUMNED_INTEGERS)]
        return LlmCall(
            self._span_ids[index].to_bytes(8, "big"),
            self._trace_ids[index],
            self._models[index],
            status_code=None if status == _ABSENT else status,
            input_tokens=None if input_tokens == _ABSENT else input_tokens,
            output_tokens=None if output_tokens == _ABSENT else output_tokens,
            start_time_unix_nano=start,
            end_time_unix_nano=end,
        )

    @overload
    def __getitem__(self, index: int) -> LlmCall: ...
    @overload
    def __getitem__(self, index: slice) -> list[LlmCall]: ...
    def __getitem__(self, index: int | slice) -> LlmCall | list[LlmCall]:
        if isinstance(index, slice):
            return [self._call(position) for position in range(*index.indices(len(self)))]
        return self._call(range(len(self))[index])

    def __iter__(self) -> Iterator[LlmCall]:
        return map(self._call, range(len(self)))

    def append(self, call: LlmCall) -> None:
        numbers = _integers_of(call)
        columned = (
            not call.failed
            and call.error_type is None
            and call.error_message is None
            and len(call.span_id) == 8
            and call.start_time_unix_nano.__class__ is int
            and call.end_time_unix_nano.__class__ is int
            and all(number is None or (number.__class__ is int and number in _INT64) for number in numbers)
        )
        self._span_ids.append(int.from_bytes(call.span_id, "big") if columned else 0)
        self._trace_ids.append(call.trace_id)
        self._models.append(call.model)
        self._numbers.extend([_ABSENT if number is None or not columned else number for number in numbers])
        if not columned:
            if self._whole is None:
                self._whole = {}
            self._whole[self._trimmed + len(self) - 1] = call

    def extend(self, calls: Iterable[LlmCall]) -> None:
        for call in list(calls) if calls is self else calls:
            self.append(call)

    def __delitem__(self, index: int | slice) -> None:
        positions = range(len(self))[index]
        if isinstance(positions, int):
            positions = range(positions, positions + 1)
        if not positions:
            return  # the pipeline's trimming of a conversation under its bound
        start, stop = positions.start, positions.stop
        if positions.step != 1 or (start != 0 and stop != len(self)):
            # Not the front (the pipeline's trimming) nor the end (pop, clear): built anew.
            calls = list(self)
            del calls[index]
            self._replace(calls)
            return
        low, high = self._trimmed + start, self._trimmed + stop  # the positions of the calls deleted
        for column in (self._span_ids, self._trace_ids, self._models):
            del column[start:stop]
        del self._numbers[start * len(_COLUMNED_INTEGERS) : stop * len(_COLUMNED_INTEGERS)]
        if start == 0:
            self._trimmed += stop
        if self._whole is not None:
            kept = {position: call for position, call in self._whole.items() if not low <= position < high}
            self._whole = kept or None

    def insert(self, index: int, call: LlmCall) -> None:
        calls = list(self)
        calls.insert(index, call)
        self._replace(calls)

    @overload
    def __setitem__(self, index: int, value: LlmCall) -> None: ...
    @overload
    def __setitem__(self, index: slice, value: Iterable[LlmCall]) -> None: ...
    def __setitem__(self, index: int | slice, value: Any) -> None:
        calls = list(self)
        calls[index] = value
        self._replace(calls)

    def reverse(self) -> None:
        self._replace(list(self)[::-1])

    def _replace(self, calls: list[LlmCall]) -> None:
        # The columns of ``calls`` are made apart first: a call that cannot be kept leaves these as
        # they were.
        made = RecentModelCalls(calls)
        for name in self.__slots__:
            setattr(self, name, getattr(made, name))

    def __copy__(self) -> RecentModelCalls:
        return RecentModelCalls(self)  # the copy's own columns, as a list's copy

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, list | RecentModelCalls):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list

    def __repr__(self) -> str:
        return f"RecentModelCalls({list(self)!r})"


@dataclass(slots=True)
class Conversation:
    """Messages of one conversation key, in order, with the model calls that produced them (the
    pipeline keeps the latest RECENT_MODEL_CALLS of those, and of the trace ids)."""

    key: str
    messages: list[Message] = field(default_factory=list)
    llm_calls: MutableSequence[LlmCall] = field(default_factory=list)
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
    """Span ids remembered like a bounded set: at least the latest ``capacity`` new ones and at
    most twice as many, in two generations, the older forgotten whole when the newer one fills.
    Each generation is a sorted array of the ids as 64-bit integers: 8 bytes an id, where a set of
    bytes objects took about 140 (bench/session_memory.py). A lookup is a binary search, an
    addition one move of the array's tail in C."""

    __slots__ = ("_newer", "_older", "capacity")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._newer = array("Q")
        self._older = array("Q")

    @staticmethod
    def _number(item: bytes) -> int:
        # OTLP's span ids are 8 bytes (the receiver drops others); any other id is kept by a digest
        # of 8 bytes.
        if len(item) != 8:
            item = hashlib.blake2b(item, digest_size=8).digest()
        return int.from_bytes(item, "big")

    @staticmethod
    def _position(ids: array[int], number: int) -> int:
        """Where ``number`` is in the sorted ``ids``, or -1."""
        at = bisect.bisect_left(ids, number)
        return at if at < len(ids) and ids[at] == number else -1

    def __contains__(self, item: bytes) -> bool:
        number = self._number(item)
        return self._position(self._newer, number) >= 0 or self._position(self._older, number) >= 0

    def __len__(self) -> int:
        return len(self._newer) + len(self._older)

    def admit(self, items: Iterable[bytes]) -> list[bool]:
        """Which of ``items`` are new: not remembered, nor earlier among ``items``. Every item is
        looked up before any is remembered, so that one trace's new spans cannot push the older
        generation out before its resent spans are found there."""
        numbers = [self._number(item) for item in items]
        newer, older, position = self._newer, self._older, self._position
        new = [position(newer, number) < 0 and position(older, number) < 0 for number in numbers]
        taken: set[int] = set()
        for index, number in enumerate(numbers):
            if not new[index]:
                continue
            if number in taken:
                new[index] = False
                continue
            taken.add(number)
            if len(self._newer) >= self.capacity:
                self._older, self._newer = self._newer, array("Q")
            bisect.insort(self._newer, number)
        return new

    def discard(self, item: bytes) -> None:
        number = self._number(item)
        for ids in (self._newer, self._older):
            at = self._position(ids, number)
            if at >= 0:
                del ids[at]
