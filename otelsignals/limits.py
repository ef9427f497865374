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
from otelsignals.conventions.memory import ConversationMemory, MeasuredHistory
from otelsignals.model import Message, leading_system_prompts


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


def cap_reading(
    reading: SpanReading, limits: TextLimits, cut: Counter[str], memory: ConversationMemory | None = None
) -> None:
    """Cut one span's reading to ``limits`` in place (module docstring); ``cut`` counts by reason.
    ``memory``: the conversation's (its history's messages measured before are not measured again)."""
    reading.input_messages = cap_messages(reading.input_messages, limits, cut, memory)
    reading.output_messages = cap_messages(reading.output_messages, limits, cut)
    result = reading.tool_execution.result if reading.tool_execution is not None else None
    if result is not None and result.content:
        shorter = _cut(result.content, limits.max_message_bytes)
        if shorter is not None:
            result.content = shorter
            cut["tool_result_bytes"] += 1


# Histories whose measure is remembered per conversation: a few, for sub-agents' histories beside the
# main agent's.
MEASURED_HISTORIES = 4
# A shorter history is measured whole: that costs less than looking for what was measured of it.
MEASURED_MIN_MESSAGES = 16


def cap_messages(
    messages: list[Message], limits: TextLimits, cut: Counter[str], memory: ConversationMemory | None = None
) -> list[Message]:
    """The part of ``messages`` (one span's history or answer) the analysis reads; ``cut`` counts
    what was cut by reason. Messages are cut in place: the same object may be read again from the
    decoding memo, and must then look the same.

    With the conversation's ``memory``, the messages a history shares, as the same objects, with a
    history measured before are neither cut again nor measured again (their total is remembered):
    beyond a comparison of the lists (in C, identity first), a history costs what it adds. Measured
    again are the leading system prompts a reader gives each span a message of its own for
    (conventions/genai.py). Each message's size is needed only when the history is over a limit of
    its own."""
    remembered = memory if memory is not None and len(messages) >= MEASURED_MIN_MESSAGES else None
    lists = remembered.histories.message_lists() if remembered is not None else []
    known = _measured_before(messages, remembered.measured) if remembered is not None else None
    if known is not None:
        fresh, start, kept = known.fresh, known.count, known.total
        body = _body(messages, fresh, lists)[1]
    else:
        fresh, body = _body(messages, None, lists) if remembered is not None else (0, None)
        start, kept = fresh, 0
    sizes = _cut_sizes(messages[start:] if start else messages, limits, cut)
    kept += sum(sizes)
    if remembered is not None and body is not None:
        _remember(remembered, MeasuredHistory(body, fresh, kept), known, lists)
    total = kept + sum(_cut_sizes(messages[:fresh], limits, cut)) if fresh else kept
    if len(messages) <= limits.max_messages_per_span and total <= limits.max_span_text_bytes:
        return messages
    if start:
        sizes = content_lengths(messages)  # the new messages' only so far: the limits below need each
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


def _cut_sizes(messages: list[Message], limits: TextLimits, cut: Counter[str]) -> list[int]:
    """The size of each of ``messages`` once cut to ``max_message_bytes``. One pass over their
    lengths (no call per message) finds the few that may need a cut: len() in characters is a lower
    bound of the UTF-8 size and exact for ASCII; the exact size is computed only near the limit."""
    sizes = content_lengths(messages)
    if sizes and max(sizes) > limits.max_message_bytes // 4:
        for index, size in enumerate(sizes):
            sizes[index] = _cut_to_size(messages[index], size, limits, cut)
    return sizes


def _cut_to_size(message: Message, size: int, limits: TextLimits, cut: Counter[str]) -> int:
    """``message``'s size once cut to ``max_message_bytes`` (``size``: its length before)."""
    # A compacted message was cut when first read (and is not expanded to be measured).
    if size <= limits.max_message_bytes // 4 or is_compacted(message):
        return size
    shorter = _cut(message.content, limits.max_message_bytes)  # type: ignore[arg-type]
    if shorter is None:
        return size
    message.content = shorter
    cut["message_bytes"] += 1
    return len(shorter)


def _measured_before(
    messages: list[Message], measured: tuple[MeasuredHistory, ...]
) -> MeasuredHistory | None:
    """The longest history measured before that ``messages`` continues: the same messages at the
    same positions, but for its leading ones that are measured again anyway. (Lists compared with
    ``==``, which looks at each pair's identity first, in C: the same objects, or else equal
    messages, which hold the same text.)"""
    found: MeasuredHistory | None = None
    for history in measured:
        fresh, count, body = history.fresh, history.count, history.body
        if count > len(messages) or (found is not None and count <= found.count):
            continue
        if messages[count - 1] is not body[count - 1 - fresh] or messages[fresh] is not body[0]:
            continue  # the quick test: most histories that differ, differ at an end
        if messages[fresh:count] == body[: count - fresh]:
            found = history
    return found


def _body(
    messages: list[Message], fresh: int | None, lists: list[list[Message]]
) -> tuple[int, list[Message] | None]:
    """(``fresh``, the history cache's own list of ``messages[fresh:]``, one of ``lists``), or (0,
    None) when the cache holds no such list (then nothing is remembered: a list of its own would
    cost the conversation memory, and its messages would not be adopted: conversation.py). ``fresh``
    None: the first of the history's leading system prompts from which the cache holds the rest."""
    offsets = range(leading_system_prompts(messages) + 1) if fresh is None else range(fresh, fresh + 1)
    for offset in offsets:
        length = len(messages) - offset
        for held in lists:
            if (
                length
                and len(held) == length
                and held[0] is messages[offset]
                and held[-1] is messages[-1]
                and held == messages[offset:]
            ):
                return offset, held
    return 0, None


def _remember(
    memory: ConversationMemory,
    history: MeasuredHistory,
    extended: MeasuredHistory | None,
    lists: list[list[Message]],
) -> None:
    """``history`` remembered first, in place of the one it ``extended``, and of those whose body
    the history cache no longer holds (``lists``): it would stay alive here."""
    others = [
        other
        for other in memory.measured
        if other is not extended and any(other.body is held for held in lists)
    ]
    memory.measured = (history, *others[: MEASURED_HISTORIES - 1])
