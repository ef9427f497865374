"""How much of one span's text the analysis reads (``analyzer.*``), so that one huge request cannot
stall the pipeline or blow up its memory. The span itself is forwarded untouched; only what the
detectors see is cut, and every cut is reported with its reason: once per message, since a history
or system prompt resent and handed back by the conversation's memory (conventions/memory.py) comes
back cut already.

Rules, applied to each span's reading in this order (each is consistent from one span to the next,
so that a history resent on every call still aligns with what was read before):

- ``message_bytes``: a message's text is cut to ``max_message_bytes`` (UTF-8, at a character
  boundary). The same message is always cut the same way.
- ``messages_per_span``: of a history longer than ``max_messages_per_span``, only the latest
  messages are read, as a sliding-window API would send them.
- ``span_text_bytes``: while a span's messages hold more than ``max_span_text_bytes`` of text
  (counted in characters: bytes for ASCII), its oldest messages are dropped (whole), again like a
  sliding window.

A tool span's result text is cut like a message (``tool_result_bytes`` counts it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from otelsignals.compaction import content_lengths, is_compacted
from otelsignals.conventions.base import SpanReading
from otelsignals.model import Message


@dataclass(frozen=True)
class TextLimits:
    max_message_bytes: int = 64 * 1024
    max_messages_per_span: int = 2000
    max_span_text_bytes: int = 1024**2


def _cut(text: str, limit: int) -> str | None:
    """``text`` cut to at most ``limit`` UTF-8 bytes, or None when it already fits."""
    if len(text) <= limit // 4:  # 4 bytes per character at most: fits without encoding
        return None
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= limit:
        return None
    return encoded[:limit].decode("utf-8", "ignore")


def cap_reading(reading: SpanReading, limits: TextLimits, cut: Counter[str]) -> None:
    """Cut one span's reading to ``limits`` in place (module docstring); ``cut`` counts by reason."""
    reading.input_messages = cap_messages(reading.input_messages, limits, cut)
    reading.output_messages = cap_messages(reading.output_messages, limits, cut)
    result = reading.tool_execution.result if reading.tool_execution is not None else None
    if result is not None and result.content:
        shorter = _cut(result.content, limits.max_message_bytes)
        if shorter is not None:
            result.content = shorter
            cut["tool_result_bytes"] += 1


def cap_messages(messages: list[Message], limits: TextLimits, cut: Counter[str]) -> list[Message]:
    """The part of ``messages`` (one span's history or answer) the analysis reads; ``cut`` counts
    what was cut by reason. Messages are cut in place: the same object may be read again from the
    decoding memo, and must then look the same."""
    # A resent history's messages were cut when first read: one pass over their lengths (no call
    # per message) finds the few that may need it. len() in characters is a lower bound of the
    # UTF-8 size and exact for ASCII; the exact size is computed only near the limit.
    sizes = content_lengths(messages)
    fits = limits.max_message_bytes // 4
    if sizes and max(sizes) > fits:
        for index, message in enumerate(messages):
            # A compacted message was cut when first read (and is not expanded to be measured).
            long = sizes[index] > fits and not is_compacted(message)
            shorter = _cut(message.content, limits.max_message_bytes) if long else None  # type: ignore[arg-type]
            if shorter is not None:
                message.content = shorter
                sizes[index] = len(shorter)
                cut["message_bytes"] += 1
    if len(messages) > limits.max_messages_per_span:
        cut["messages_per_span"] += len(messages) - limits.max_messages_per_span
        messages = messages[-limits.max_messages_per_span :]
        sizes = sizes[-limits.max_messages_per_span :]
    total = sum(sizes)
    if total > limits.max_span_text_bytes:
        first = 0
        while first < len(messages) - 1 and total > limits.max_span_text_bytes:
            total -= sizes[first]
            first += 1
        cut["span_text_bytes"] += first
        messages = messages[first:]
    return messages
