"""Old messages kept small: their text compressed, expanded again when read.

A long conversation's old messages are read again only when someone asks for them (the admin API,
a judge, an export): the detectors look back a bounded number of messages. Their text is then kept
as zlib-compressed UTF-8 (a third of a Python string's size on agent text, which often holds a
character that makes CPython store every character in 4 bytes) and expanded on each read. The
object stays the same one, only its class changes, so whoever holds it (the history index, a
pending tool result) sees the same message; a plain message pays nothing for this.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from sys import getrefcount, getsizeof

from otelsignals.model import Message, Role, ToolResult

_MESSAGE_CONTENT = Message.__dict__["content"]  # the slot itself, under the properties below
_RESULT_CONTENT = ToolResult.__dict__["content"]
COMPACT_MIN_CHARACTERS = 64  # shorter texts cost less kept as they are
# Compacted text starts with its length in characters, so that a length is known without expanding.
_LENGTH_BYTES = 4


class _Expansions:
    """How many times compacted text was read back (a detector reaching too far back shows here)."""

    count = 0


def _expand(stored: bytes | str | None) -> str | None:
    if stored.__class__ is bytes:
        _Expansions.count += 1
        return zlib.decompress(memoryview(stored)[_LENGTH_BYTES:]).decode("utf-8", "surrogatepass")
    return stored  # type: ignore[return-value]


def expansions() -> int:
    return _Expansions.count


class CompactedMessage(Message):
    __slots__ = ()

    @property
    def content(self) -> str | None:
        return _expand(_MESSAGE_CONTENT.__get__(self))

    @content.setter
    def content(self, value: str | None) -> None:
        _MESSAGE_CONTENT.__set__(self, value)
        self.__class__ = Message  # type: ignore[assignment]


class CompactedToolResult(ToolResult):
    __slots__ = ()

    @property
    def content(self) -> str | None:
        return _expand(_RESULT_CONTENT.__get__(self))

    @content.setter
    def content(self, value: str | None) -> None:
        _RESULT_CONTENT.__set__(self, value)
        self.__class__ = ToolResult  # type: ignore[assignment]


def stored_content(item: Message | ToolResult) -> str | bytes | None:
    """The text as kept: a string, or the compressed bytes of a compacted one (not expanded)."""
    slot = _MESSAGE_CONTENT if isinstance(item, Message) else _RESULT_CONTENT
    return slot.__get__(item)


def content_length(item: Message | ToolResult) -> int:
    """``len(item.content or "")``, without expanding compacted text."""
    stored = stored_content(item)
    if stored.__class__ is bytes:
        return int.from_bytes(stored[:_LENGTH_BYTES], "little")
    return len(stored) if stored else 0


def content_lengths(messages: Sequence[Message]) -> list[int]:
    """:func:`content_length` of each message (a plain message's without a call: a resent
    history's hundreds of messages are measured on every model call)."""
    return [len(m.content or "") if m.__class__ is Message else content_length(m) for m in messages]


def compact(message: Message) -> bool:
    """Keep ``message``'s text (and its tool result's) compressed when that takes less memory;
    whether it was.

    Only text this message alone holds: another holder (a resent history read into objects of its
    own, conversation.SharedValues; a system prompt, which every model call sends again) would keep
    the string alive, and the compressed copy would only add to it."""
    if message.__class__ is not Message or message.role is Role.SYSTEM:
        return False
    content = message.content
    result = message.tool_result
    shared_with_result = result is not None and result.content is content
    packed = None
    if content is not None and _references(content) - _UNHELD <= 1 + shared_with_result:
        packed = _packed(content)
        if packed is not None:
            message.__class__ = CompactedMessage
            _MESSAGE_CONTENT.__set__(message, packed)
    if result is None or result.__class__ is not ToolResult:
        return packed is not None
    if shared_with_result:
        result_packed = packed
    else:
        result_content = result.content
        held_alone = result_content is not None and _references(result_content) - _UNHELD <= 1
        result_packed = _packed(result_content) if held_alone else None
    if result_packed is not None:
        result.__class__ = CompactedToolResult
        _RESULT_CONTENT.__set__(result, result_packed)
    return packed is not None or result_packed is not None


def _packed(text: str | None) -> bytes | None:
    """``text`` compacted, when it is long and smaller so."""
    if text is None or len(text) < COMPACT_MIN_CHARACTERS:
        return None
    packed = len(text).to_bytes(_LENGTH_BYTES, "little") + zlib.compress(
        text.encode("utf-8", "surrogatepass"), 1
    )
    return packed if getsizeof(packed) < getsizeof(text) else None


def _references(text: str) -> int:
    return getrefcount(text)


def _unheld() -> int:
    probe = "".join(("a string held by this variable only",) * 4)
    return _references(probe)


# What _references(variable) counts besides the objects holding the text: the variable and the
# call's own references (CPython's reference count; the overhead differs between versions).
_UNHELD = _unheld()
