"""compaction.py: an old message's text kept compressed reads back the same, and what must stay a
string stays one."""

from __future__ import annotations

import random
import sys
import threading

import pytest
import zstandard

from otelsignals.compaction import (
    COMPACT_MIN_CHARACTERS,
    Outcome,
    compact,
    content_length,
    expansions,
    stored_message_text,
    stored_result_text,
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
    assert compact(message) is Outcome.COMPACTED
    stored = stored_message_text(message)
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
    assert compact(message) is Outcome.LEFT_PLAIN
    assert type(message) is Message and stored_message_text(message) == text


def test_text_another_object_holds_stays_plain_a_compressed_copy_would_only_add_to_it() -> None:
    text = _fresh(PROSE)
    message = Message(Role.ASSISTANT, content=text)
    assert compact(message) is Outcome.HELD_ELSEWHERE
    assert stored_message_text(message) is text
    del text
    assert compact(message) is Outcome.COMPACTED  # now the message alone holds it


def test_a_tool_message_and_its_result_share_one_compressed_text() -> None:
    result = ToolResult(call_id="c1", name="lookup", content=_fresh(PROSE))
    message = Message(Role.TOOL, content=result.content, tool_result=result)
    assert compact(message) is Outcome.COMPACTED
    assert stored_message_text(message) is stored_result_text(result)
    assert isinstance(stored_result_text(result), bytes)
    assert result.content == PROSE == message.content
    assert result == ToolResult(call_id="c1", name="lookup", content=PROSE)
    # A result with a text of its own is compacted on its own.
    other = ToolResult(content=_fresh(PROSE + "!"))
    message = Message(Role.TOOL, content=_fresh(PROSE), tool_result=other)
    assert compact(message) is Outcome.COMPACTED
    assert other.content == PROSE + "!" and message.content == PROSE


def test_setting_the_text_of_a_compacted_message_makes_it_plain_again() -> None:
    message = Message(Role.USER, content=_fresh(PROSE))
    assert compact(message) is Outcome.COMPACTED
    message.content = "cut short"
    assert type(message) is Message and stored_message_text(message) == "cut short"
    assert compact(message) is Outcome.LEFT_PLAIN  # too short now
    result = ToolResult(content=_fresh(PROSE))
    compacted = compact(Message(Role.TOOL, content=result.content, tool_result=result))
    assert compacted is Outcome.COMPACTED and type(result) is not ToolResult
    result.content = None
    assert type(result) is ToolResult and result.content is None


def test_a_message_is_compacted_once_and_only_reads_are_counted() -> None:
    message = Message(Role.USER, content=_fresh(PROSE))
    assert compact(message) is Outcome.COMPACTED
    packed = stored_message_text(message)
    assert compact(message) is Outcome.LEFT_PLAIN
    assert stored_message_text(message) is packed
    before = expansions()
    assert content_length(message) == len(PROSE)
    assert stored_message_text(message) is packed
    assert expansions() == before
    assert message.content == PROSE
    assert message.content == PROSE
    assert expansions() == before + 2


def test_a_result_with_its_own_text_held_elsewhere_keeps_the_message_plain_too() -> None:
    held = _fresh(PROSE + "?")
    result = ToolResult(content=held)
    message = Message(Role.TOOL, content=_fresh(PROSE), tool_result=result)
    assert compact(message) is Outcome.HELD_ELSEWHERE
    assert type(message) is Message and type(result) is ToolResult


def test_what_only_asks_for_presence_or_length_does_not_expand() -> None:
    from collections import Counter

    from otelsignals.limits import TextLimits, cap_messages
    from otelsignals.pipeline.sessions import text_storage_bytes
    from otelsignals.scoring import turn_counts

    long_text = _fresh("word " * 20_000)  # over max_message_bytes // 4 characters, already cut
    messages = [Message(Role.USER, content=_fresh(PROSE)), Message(Role.ASSISTANT, content=long_text)]
    del long_text
    assert [compact(m) for m in messages] == [Outcome.COMPACTED, Outcome.COMPACTED]
    before = expansions()
    assert cap_messages(messages, TextLimits(max_message_bytes=64 * 1024), Counter()) == messages
    assert text_storage_bytes(messages) < 20_000
    from otelsignals.model import Conversation

    assert turn_counts(Conversation("c", messages)) == (1, 2)
    assert expansions() == before


def test_tokens_are_built_with_every_field() -> None:
    # tokens.py builds Token tuples directly (no field-count check): a new field must be set there.
    from otelsignals.signals.tokens import Token, tokens_of

    token = tokens_of("Hello, world")[0]
    assert token == Token("hello", 0, 5, True, True) and len(token) == len(Token._fields)


def test_threads_compacting_and_reading_at_once_each_get_their_own_texts_back() -> None:
    """The compressor and decompressor are per thread: one shared by threads at once (each call lets
    go of the GIL) crashes the process or mixes texts up (zlib, before, was safe either way)."""
    errors: list[str] = []

    def work(worker: int) -> None:
        for n in range(1_000):
            text = f"worker {worker}, message {n}: " + (PROSE * 4)[: 100 + n]
            message = Message(Role.USER, content=_fresh(text), span_id=b"s")
            try:
                if compact(message) is not Outcome.COMPACTED or message.content != text:
                    errors.append(f"worker {worker}, message {n}: another text")
            except zstandard.ZstdError as error:
                errors.append(f"worker {worker}, message {n}: {error}")

    threads = [threading.Thread(target=work, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
