"""compaction.py: an old message's text kept compressed reads back the same, and what must stay a
string stays one."""

from __future__ import annotations

import random
import sys

import pytest

from otelsignals.compaction import (
    COMPACT_MIN_CHARACTERS,
    compact,
    content_length,
    expansions,
    stored_content,
)
from otelsignals.model import Message, Role, ToolResult

PROSE = "The parcel left the depot on Tuesday and should arrive by Friday at the latest. " * 6

TEXTS = {
    "ascii prose": PROSE,
    "an emoji widens every character to 4 bytes": PROSE + " 👍",
    "accented": "Größe und Gewicht der Sendung: " * 10,
    "JSON tool output": '{"order": 81723, "status": "shipped", "items": [1, 2, 3]}' * 8,
    "lone surrogate (from a JSON \\ud800 escape)": PROSE + "\ud800",
    "exactly the shortest compacted": ("ab" * COMPACT_MIN_CHARACTERS)[:COMPACT_MIN_CHARACTERS],
}


def _fresh(text: str) -> str:
    """An equal string no other object holds (the literal above is held by the table)."""
    return "".join(list(text))


@pytest.mark.parametrize("text", TEXTS.values(), ids=TEXTS.keys())
def test_a_compacted_message_reads_back_its_text_and_takes_less_memory(text: str) -> None:
    message = Message(Role.USER, content=_fresh(text), span_id=b"s")
    plain_size = sys.getsizeof(message.content)
    assert compact(message)
    stored = stored_content(message)
    assert isinstance(stored, bytes) and sys.getsizeof(stored) < plain_size
    assert message.content == text
    assert message.text == text
    assert content_length(message) == len(text)
    assert message == Message(Role.USER, content=text, span_id=b"s")
    assert Message(Role.USER, content=text, span_id=b"s") == message
    assert message != Message(Role.USER, content=text + ".", span_id=b"s")


_RANDOM = random.Random(7)
NOT_COMPACTED = {
    "a system prompt (every call resends it: its text is held anyway)": (Role.SYSTEM, PROSE),
    "shorter than the minimum": (Role.USER, "x" * (COMPACT_MIN_CHARACTERS - 1)),
    "no text": (Role.ASSISTANT, None),
    "incompressible": (Role.USER, "".join(chr(_RANDOM.randrange(0x4E00, 0x9FFF)) for _ in range(80))),
}


@pytest.mark.parametrize(("role", "text"), NOT_COMPACTED.values(), ids=NOT_COMPACTED.keys())
def test_near_misses_stay_plain(role: Role, text: str | None) -> None:
    message = Message(role, content=None if text is None else _fresh(text))
    assert not compact(message)
    assert type(message) is Message and stored_content(message) == text


def test_text_another_object_holds_stays_plain_a_compressed_copy_would_only_add_to_it() -> None:
    text = _fresh(PROSE)
    message = Message(Role.ASSISTANT, content=text)
    assert not compact(message)
    assert stored_content(message) is text
    del text
    assert compact(message)  # now the message alone holds it


def test_a_tool_message_and_its_result_share_one_compressed_text() -> None:
    result = ToolResult(call_id="c1", name="lookup", content=_fresh(PROSE))
    message = Message(Role.TOOL, content=result.content, tool_result=result)
    assert compact(message)
    assert stored_content(message) is stored_content(result)
    assert isinstance(stored_content(result), bytes)
    assert result.content == PROSE == message.content
    assert result == ToolResult(call_id="c1", name="lookup", content=PROSE)
    # A result with a text of its own is compacted on its own.
    other = ToolResult(content=_fresh(PROSE + "!"))
    message = Message(Role.TOOL, content=_fresh(PROSE), tool_result=other)
    assert compact(message)
    assert other.content == PROSE + "!" and message.content == PROSE


def test_setting_the_text_of_a_compacted_message_makes_it_plain_again() -> None:
    message = Message(Role.USER, content=_fresh(PROSE))
    assert compact(message)
    message.content = "cut short"
    assert type(message) is Message and stored_content(message) == "cut short"
    assert not compact(message)  # too short now
    result = ToolResult(content=_fresh(PROSE))
    compacted = compact(Message(Role.TOOL, content=result.content, tool_result=result))
    assert compacted and type(result) is not ToolResult
    result.content = None
    assert type(result) is ToolResult and result.content is None


def test_a_message_is_compacted_once_and_only_reads_are_counted() -> None:
    message = Message(Role.USER, content=_fresh(PROSE))
    assert compact(message)
    packed = stored_content(message)
    assert not compact(message)
    assert stored_content(message) is packed
    before = expansions()
    assert content_length(message) == len(PROSE)
    assert stored_content(message) is packed
    assert expansions() == before
    assert message.content == PROSE
    assert message.content == PROSE
    assert expansions() == before + 2
