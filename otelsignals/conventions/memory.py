"""What the span decoder remembers of each conversation, so that a span costs what it adds to
the conversation rather than what it resends: the byte-level decode memo (decoding.py) and the
history cache. Kept with the conversation's state, dropped with it; never shared between
conversations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from sys import getsizeof
from typing import Any, NamedTuple

import orjson
import xxhash

from otelsignals.conventions.base import JSON_WHITESPACE, ReadAgain, ReadText, json_or_text, link_tool_names
from otelsignals.conventions.decoding import EventView, SpanDecodeMemo, Utf8Text
from otelsignals.model import Message


class HistoryCache:
    """Per conversation, what was read of the history last time, to read only what is new (the
    conversation's :class:`~otelsignals.conventions.base.Histories`).

    Stateless chat APIs resend the whole history on every call, and instrumentations write it the
    same way each time. Two forms are remembered:

    - a history written as one JSON string (:meth:`messages`): a new history string usually starts
      with the previous one minus its closing ``]`` (or ``]}``), and then only the new tail is parsed;
    - a history written one message per index (:meth:`indexed`: OpenLLMetry's
      ``gen_ai.prompt.{i}.*``, OpenInference's ``llm.input_messages.{i}.*``, one deprecated
      ``gen_ai.*.message`` event per message): the reader gives, per position, the raw values it
      reads there, and the leading positions whose raw values equal those of a history read before
      give back the messages built then.

    Either way the messages read before are the same objects (their fingerprints are computed
    once), and the cost of a turn stays the cost of its new messages, however long the
    conversation. What is remembered is bounded (the last history string per key, a few indexed
    histories per namespace), and the cache is per conversation: messages are never shared
    between conversations.
    """

    def __init__(self) -> None:
        self._last: dict[str, list[_JsonHistory]] = {}
        self._indexed: dict[str, list[_IndexedHistory]] = {}
        # The latest text read through :meth:`repeated`: (its key, the xxh3-128 hash of its UTF-8
        # bytes, its message). One: a conversation's model calls resend one system prompt.
        self._repeated: tuple[str, int, Message] | None = None
        # Messages built here so far (the session byte bound recounts what the cache holds as this
        # grows: a cache of steady size can still hold other messages than at the last count).
        self.built = 0

    def messages(
        self,
        key: str,
        text: str | Utf8Text,
        read: Callable[[Any], list[Message]],
        items: Callable[[list[Any]], list[Message]] | None = None,
        closing: str = "]",
    ) -> list[Message]:
        """The messages of a history written as one JSON text (a str, or the UTF-8 bytes it came
        as: compared, and its tail parsed, as UTF-8 either way).

        ``read(value)`` reads the whole text: its parsed JSON, or the text itself when it is not
        JSON. A text that continues the previous one of ``key`` (the same up to the ``closing``
        that ends its last array, then ``,`` and further values of that array, then ``closing``)
        gives the previous messages plus ``items(further values)`` (``read`` by default).
        ``closing`` is ``]`` for a JSON array; ``]}`` for an object whose last key holds the
        array, when reading the object amounts to reading its arrays in order.
        """
        remembered = self._last.setdefault(key, [])
        # The head of a long history is hashed on every call, as its UTF-8 bytes (xxh3): a history
        # read from a span already is bytes (decoding.Utf8Text), never decoded whole.
        data = text.utf8 if isinstance(text, Utf8Text) else memoryview(text.encode("utf-8", "surrogatepass"))
        end = closing.encode()
        longest: _JsonHistory | None = None
        found: _Continuation | None = None
        for history in remembered:
            if longest is None or history.head_length > longest.head_length:
                continuation = history.continued_by(data, end)
                if continuation is not None:
                    longest, found = history, continuation
        if longest is not None and found is not None:
            further = found.further
            messages = longest.messages + ((items or read)(further) if further else [])
            self.built += len(messages) - len(longest.messages)
            link_tool_names(messages, len(longest.messages))
            self._remember(remembered, data, end, messages, (longest.head_length, found.head_hasher))
            return messages
        value = json_or_text(text)
        messages = read(value)
        self.built += len(messages)
        if not isinstance(value, str):  # only valid JSON is continued
            self._remember(remembered, data, end, messages)
        return messages

    def repeated(self, key: str, text: str | Utf8Text, read: ReadText, again: ReadAgain) -> Message | None:
        """The message of a text written again with every call (a system prompt, resent whole and
        alike by every model call: on the real agent trajectories 10 KB on each of 10,000 calls):
        ``read(text)``, remembered by the xxh3-128 hash of the text's UTF-8 bytes (not the text);
        while the text of ``key`` hashes the same, ``again(message)`` of the message given last
        (the reader's message for this span, with that message's text: neither parsed nor held
        again). The message given is remembered in turn, so the text it holds is the one the
        conversation shares once it has merged one of them (conversation.SharedValues)."""
        data = text.utf8 if isinstance(text, Utf8Text) else memoryview(text.encode("utf-8", "surrogatepass"))
        digest = _hash(data)
        last = self._repeated
        if last is not None and last[0] == key and last[1] == digest:
            message: Message | None = again(last[2])
        else:
            message = read(text)
            if message is not None:
                self.built += 1
        self._repeated = (key, digest, message) if message is not None else None
        return message

    @staticmethod
    def _remember(
        remembered: list[_JsonHistory],
        data: memoryview,
        closing: bytes,
        messages: list[Message],
        hashed: tuple[int, xxhash.xxh3_128] | None = None,
    ) -> None:
        history = _JsonHistory.of(data, closing, messages, hashed)
        if history is None:
            return
        remembered[:] = [h for h in remembered if h.head_length != history.head_length]
        remembered.insert(0, history)
        del remembered[_JSON_HISTORIES:]

    def indexed(
        self, namespace: str, raws: list[Any], build: Callable[[Any], list[Message]]
    ) -> list[Message]:
        """The messages of a history given as one raw key per position, in order.

        ``raws[i]`` is what the reader reads for position ``i`` (the attribute values of one index,
        one event's name and attributes …): everything the messages built for that position depend
        on, compared with ``==``. ``build(raws[i])`` builds them (none, one or several messages).

        The longest run of leading positions whose raw keys equal those of a history read before
        reuses the messages built then; the rest is built. A position is reused only when every
        position before it matched too, so a history edited in the middle, cut at the front or
        belonging to another agent is read exactly as a cache-less read would read it.
        ``namespace`` keeps apart histories that must never share messages (the inputs of one
        convention from its outputs and from another convention's). A few histories are kept per
        namespace (the latest used first), so spans of two agents in one conversation, or an
        agent span next to its model calls, do not evict each other on every call.
        """
        if not raws:
            return []  # a span without this history (a tool span…) leaves the memo alone
        branches = self._indexed.setdefault(namespace, [])
        best: _IndexedHistory | None = None
        kept = 0
        for branch in branches:
            common = branch.common_prefix(raws)
            if common > kept:
                best, kept = branch, common
                if common == len(raws):
                    break  # the whole history: nothing longer to find
        if best is not None and kept == len(raws):
            # This history or an older one of the same branch (a late span): nothing new.
            branches.remove(best)
            branches.insert(0, best)
            return best.messages[: best.ends[kept - 1]]
        if best is not None and kept == len(best.raws):
            branch = best  # the common case: the last history, resent with more
            branches.remove(best)
        else:
            branch = best.fork(kept) if best is not None else _IndexedHistory()
        branches.insert(0, branch)
        del branches[_INDEXED_BRANCHES:]
        for raw in raws[kept:]:
            built = build(raw)
            self.built += len(built)
            branch.add(raw, built)
        return list(branch.messages)

    def message_lists(self) -> list[list[Message]]:
        """The message lists of the histories remembered here (also for the session byte bound,
        which counts the messages the conversation does not hold itself: pipeline/sessions.py)."""
        lists = [history.messages for remembered in self._last.values() for history in remembered]
        if self._repeated is not None:
            lists.append([self._repeated[2]])
        return lists + [branch.messages for branches in self._indexed.values() for branch in branches]

    def raw_keys(self) -> list[tuple[list[Any], list[int]]]:
        """The raw keys of the indexed histories remembered here and the bytes of the texts each
        holds (:func:`raw_text_bytes`), a pair of lists per history (a fork holds its own lists of
        the keys it shares)."""
        return [
            (branch.raws, branch.text_bytes) for branches in self._indexed.values() for branch in branches
        ]

    def holds(self, messages: list[Message]) -> bool:
        """Whether ``messages`` is the very list of a history remembered here (which :meth:`adopt`
        changes)."""
        return any(messages is history for history in self.message_lists())

    def adopt(self, replacements: Mapping[int, Message], start: int, end: int) -> None:
        """Hand back ``replacements[id(message)]`` instead of ``message`` from now on, at the
        positions ``start`` to ``end`` of every history remembered, and as many from its end (the
        reader may have read only its latest messages). The conversation gives its own message for a
        history's copy of it that reads the same, so that the copy does not keep the message's text
        alive. (The spans of one trace are all read before any is merged: a later call's history
        extends the one whose copies are adopted, the same objects at the same positions.)"""
        for messages in self.message_lists():
            adopt_in(messages, replacements, start, end)
            if len(messages) > end:
                adopt_in(messages, replacements, len(messages) - (end - start), len(messages))


def adopt_in(messages: list[Message], replacements: Mapping[int, Message], start: int, end: int) -> None:
    """Replace, at the positions ``start`` to ``end`` of ``messages``, each one ``replacements``
    names by id."""
    for index in range(max(0, start), min(end, len(messages))):
        replacement = replacements.get(id(messages[index]))
        if replacement is not None:
            messages[index] = replacement


# JSON histories remembered per key of a conversation: an agent span's short input next to its model
# calls' whole histories must not make each call parse its history again.
_JSON_HISTORIES = 4


class _JsonHistory:
    """A history read before from one JSON text, remembered by the length and hash of its UTF-8
    bytes up to its closing (not the bytes themselves: a conversation's history can be megabytes).
    The hash is xxh3-128: two different heads collide with probability 2**-128."""

    __slots__ = ("head_hash", "head_length", "messages")

    def __init__(self, head_length: int, head_hash: int, messages: list[Message]) -> None:
        self.head_length = head_length
        self.head_hash = head_hash
        self.messages = messages

    @classmethod
    def of(
        cls,
        data: memoryview,
        closing: bytes,
        messages: list[Message],
        hashed: tuple[int, xxhash.xxh3_128] | None = None,
    ) -> _JsonHistory | None:
        """``data`` remembered, when it ends with ``closing`` (and JSON whitespace). ``hashed``: (n, an
        xxh3-128 state that has read ``data[:n]``), taken over, so that the head is hashed only from
        ``n`` on: a continued history's bytes are then read once, not twice."""
        end = len(data)
        while end and data[end - 1] in JSON_WHITESPACE:
            end -= 1
        head_length = end - len(closing)
        if head_length <= 0 or data[head_length:end] != closing:
            return None
        last = head_length
        while last and data[last - 1] in JSON_WHITESPACE:
            last -= 1
        if last and data[last - 1] == _OPENING_BRACKET:
            return None  # an empty array: "[" + ",1]" would read as a continuation of it
        if hashed is not None and hashed[0] <= head_length:
            hasher = hashed[1]
            hasher.update(data[hashed[0] : head_length])
            return cls(head_length, hasher.intdigest(), messages)
        return cls(head_length, _hash(data[:head_length]), messages)

    def continued_by(self, data: memoryview, closing: bytes) -> _Continuation | None:
        """The values ``data`` adds to the last array of this history ([] when it is this history
        again), or None when it does not merely continue it."""
        head_length = self.head_length
        if len(data) < head_length:
            return None
        hasher = xxhash.xxh3_128(data[:head_length])
        if hasher.intdigest() != self.head_hash:
            return None
        rest = bytes(data[head_length:]).strip(JSON_WHITESPACE)
        if rest == closing:
            return _Continuation([], hasher)
        if not rest.startswith(b",") or not rest.endswith(closing):
            return None
        try:
            further = orjson.loads(b"[" + rest[1 : len(rest) - len(closing) + 1])
        except orjson.JSONDecodeError:
            return None
        return _Continuation(further, hasher) if isinstance(further, list) else None


class _Continuation(NamedTuple):
    further: list[Any]  # the values the new history adds
    head_hasher: xxhash.xxh3_128  # the state that has read the continued history's head (for its successor)


_hash = xxhash.xxh3_128_intdigest
_OPENING_BRACKET = ord("[")


# Indexed histories remembered per namespace of a conversation (each at most one history long).
_INDEXED_BRANCHES = 4


class _IndexedHistory:
    """The raw keys of an indexed history read before, the messages each position gave, and all
    of those messages in order."""

    __slots__ = ("ends", "messages", "raws", "text_bytes")

    def __init__(self) -> None:
        self.raws: list[Any] = []
        self.ends: list[int] = []  # ends[i]: len(messages) once position i is read
        self.messages: list[Message] = []
        self.text_bytes: list[int] = []  # raw_text_bytes(raws[i]), for the session byte bound

    def common_prefix(self, raws: list[Any]) -> int:
        """How many leading positions of ``raws`` equal this history's."""
        held = self.raws
        count = min(len(held), len(raws))
        if raws[:count] == held[:count]:
            return count  # the common case: this history resent, usually with more
        # A binary search on slice comparisons (made in C): the first ``low`` positions are
        # equal, the first ``high`` are not.
        low, high = 0, count
        while high - low > 1:
            middle = (low + high) // 2
            if raws[low:middle] == held[low:middle]:
                low = middle
            else:
                high = middle
        return low

    def add(self, raw: Any, messages: list[Message]) -> None:
        self.raws.append(raw)
        self.messages.extend(messages)
        self.ends.append(len(self.messages))
        self.text_bytes.append(raw_text_bytes(raw))

    def fork(self, positions: int) -> _IndexedHistory:
        """A new history holding this one's first ``positions`` positions (the same messages)."""
        fork = _IndexedHistory()
        fork.raws = self.raws[:positions]
        fork.ends = self.ends[:positions]
        fork.text_bytes = self.text_bytes[:positions]
        fork.messages = self.messages[: fork.ends[-1]] if positions else []
        return fork


# Strings shorter than this in a raw key are names and roles, shared or small: not counted.
_LONG_TEXT = 64


def raw_text_bytes(raw: Any) -> int:
    """The bytes of the texts a raw key holds (an entry's fields, an event's attributes, nested):
    read again from a history resent from another start, its texts are strings of its own."""
    size = 0
    stack = [raw]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            size += getsizeof(item) if len(item) >= _LONG_TEXT else 0
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, EventView):
            stack.append(item.attributes)
    return size


@dataclass(slots=True, eq=False)
class ConversationMemory:
    """One conversation's memory: what was decoded of its latest long spans, what was read of its
    histories, and what the analysis measured of them (limits.py)."""

    spans: SpanDecodeMemo = field(default_factory=SpanDecodeMemo)
    histories: HistoryCache = field(default_factory=HistoryCache)
    measured: tuple[MeasuredHistory, ...] = ()  # the latest measured first (a tuple: smaller)

    def text_given(self) -> None:
        """A message read before was given its text (conversation.py: a tool result without text
        gets its tool span's, or a tool span's result a history's): what was measured of the
        histories no longer holds."""
        self.measured = ()


class MeasuredHistory:
    """What the analysis measured of a history (limits.cap_messages), so that the next history, which
    continues it, costs only its new messages: of its first ``count`` messages, those after the
    ``fresh`` leading ones, at the start of ``body`` (the history cache's own list of them, which
    may have grown since), held ``total`` characters of text."""

    __slots__ = ("body", "count", "fresh", "total")

    def __init__(self, body: list[Message], fresh: int, total: int) -> None:
        self.body = body
        self.count = fresh + len(body)
        self.fresh = fresh
        self.total = total
