"""Old messages kept small: their text compressed, expanded again when read.

A long conversation's old messages are read again only when someone asks for them (the admin API,
a judge, an export): the detectors look back a bounded number of messages. Their text is then kept
as Zstandard-compressed UTF-8 (a small fraction of a Python string's size on agent text, which often
holds a character that makes CPython store every character in 4 bytes) and expanded on each read. The
object stays the same one, only its class changes, so whoever holds it (the history index, a
pending tool result) sees the same message; a plain message pays nothing for this.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Sequence
from enum import Enum
from sys import getrefcount, getsizeof
from typing import Any

import zstandard

from otelsignals.model import Message, Role, ToolResult

_MESSAGE_CONTENT = Message.__dict__["content"]  # the slot itself, under the properties below
_RESULT_CONTENT = ToolResult.__dict__["content"]
COMPACT_MIN_CHARACTERS = 64  # shorter texts cost less kept as they are
# Compacted text starts with its length in characters, so that a length is known without expanding.
_LENGTH = struct.Struct("<I")
_LENGTH_BYTES = _LENGTH.size
_length_of: Callable[[bytes], tuple[int]] = _LENGTH.unpack_from
# Zstandard at level 1, not zlib: a message is compacted once, and zlib's set-up (it allocates and
# clears its tables on every call) made most of the cost of a short text: 2.1-2.5x the time for
# 0.3-2 % fewer bytes kept (`python bench/reuse.py`).
_ZSTD_LEVEL = 1


class _Codecs(threading.local):
    """A compressor and a decompressor per thread: one is not to be used by two threads at once."""

    def __init__(self) -> None:
        self.compress = zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress
        self.decompress = zstandard.ZstdDecompressor().decompress


_codecs = _Codecs()


class _Expansions:
    """How many times compacted text was expanded to be read (by whatever read it)."""

    count = 0


def _expand(stored: bytes | str | None) -> str | None:
    if stored.__class__ is bytes:
        _Expansions.count += 1
        return _codecs.decompress(memoryview(stored)[_LENGTH_BYTES:]).decode("utf-8", "surrogatepass")
    return stored  # type: ignore[return-value]


def expansions() -> int:
    return _Expansions.count


def _expanding_text(slot: Any, plain: type) -> Any:
    """A ``content`` property over ``slot``: expands compacted text when read; a text set makes the
    object ``plain`` again."""

    def read(item: Any) -> str | None:
        return _expand(slot.__get__(item))

    def write(item: Any, value: str | None) -> None:
        slot.__set__(item, value)
        item.__class__ = plain

    return property(read, write)


class CompactedMessage(Message):
    __slots__ = ()
    content = _expanding_text(_MESSAGE_CONTENT, Message)


class CompactedToolResult(ToolResult):
    __slots__ = ()
    content = _expanding_text(_RESULT_CONTENT, ToolResult)


# The text as kept, never expanded: a string, None, or a compacted text's bytes (never empty). For
# what only asks whether there is text, or how much memory it takes (a C call, no property).
stored_message_text: Callable[[Message], str | bytes | None] = _MESSAGE_CONTENT.__get__
stored_result_text: Callable[[ToolResult], str | bytes | None] = _RESULT_CONTENT.__get__


def is_compacted(item: Message | ToolResult) -> bool:
    return item.__class__ is CompactedMessage or item.__class__ is CompactedToolResult


def content_length(message: Message) -> int:
    """``len(message.content or "")``, without expanding compacted text."""
    stored = stored_message_text(message)
    if stored.__class__ is bytes:
        return _length_of(stored)[0]
    return len(stored) if stored else 0


def content_lengths(messages: Sequence[Message]) -> list[int]:
    """:func:`content_length` of each message, without a call of it (a resent history's hundreds of
    messages, most compacted once it is long, are measured on every model call)."""
    return [
        len(m.content or "")
        if m.__class__ is Message
        else _length_of(stored_message_text(m))[0]  # type: ignore[arg-type]
        if m.__class__ is CompactedMessage
        else content_length(m)
        for m in messages
    ]


class Outcome(Enum):
    COMPACTED = "compacted"
    LEFT_PLAIN = "left plain"  # a system prompt, no or short text, or text that does not shrink
    HELD_ELSEWHERE = "held elsewhere"  # worth trying again once the other holder lets go


def compact(message: Message) -> Outcome:
    """Keep ``message``'s text (and its tool result's) compressed when that takes less memory.

    Only text this message alone holds: another holder (a resent history read into objects of its
    own, conversation.SharedValues, a cache of recent texts) would keep the string alive, and the
    compressed copy would only add to it. A system prompt is left as it is: every model call sends
    it again."""
    if message.__class__ is not Message or message.role is Role.SYSTEM:
        return Outcome.LEFT_PLAIN
    content = message.content
    result = message.tool_result
    if result is not None and result.__class__ is not ToolResult:
        result = None  # compacted already, on its own
    shared = result is not None and result.content is content
    if _held_elsewhere(content, 1 + shared):
        return Outcome.HELD_ELSEWHERE
    result_content = None if result is None or shared else result.content
    if _held_elsewhere(result_content, 1):
        return Outcome.HELD_ELSEWHERE
    packed = _packed(content)
    if packed is not None:
        message.__class__ = CompactedMessage  # first: the class reads bytes and strings alike
        _MESSAGE_CONTENT.__set__(message, packed)
    result_packed = packed if shared else _packed(result_content)
    if result is not None and result_packed is not None:
        result.__class__ = CompactedToolResult
        _RESULT_CONTENT.__set__(result, result_packed)
    return Outcome.COMPACTED if packed is not None or result_packed is not None else Outcome.LEFT_PLAIN


def _held_elsewhere(text: str | None, holders: int) -> bool:
    """Whether objects besides the ``holders`` (and the caller's variable) hold ``text``: CPython's
    reference count, less what the call itself adds (calibrated at import)."""
    return text is not None and len(text) >= COMPACT_MIN_CHARACTERS and getrefcount(text) - _UNHELD > holders


def _packed(text: str | None) -> bytes | None:
    """``text`` compacted, when it is long and smaller so."""
    if text is None or len(text) < COMPACT_MIN_CHARACTERS:
        return None
    packed = _LENGTH.pack(len(text)) + _codecs.compress(text.encode("utf-8", "surrogatepass"))
    return packed if getsizeof(packed) < getsizeof(text) else None


def _calibrate() -> None:
    """Set _UNHELD to what getrefcount counts, inside _held_elsewhere called with a variable of its
    caller, for a text held by nothing else (the variable, the arguments on the way: the overhead
    differs between CPython versions), by asking _held_elsewhere itself."""
    global _UNHELD
    probe = "".join(("a string held by nothing but this variable",) * 4)
    _UNHELD = 0
    while _held_elsewhere(probe, 0):
        _UNHELD += 1


_UNHELD = 0
_calibrate()
