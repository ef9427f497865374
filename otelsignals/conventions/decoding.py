"""A span's protobuf as plain Python values, parsing and decoding only what is new since the
conversation's previous spans.

Stateless chat APIs resend the whole history on every call, and the indexed conventions write it
as hundreds of attributes (OpenLLMetry's ``gen_ai.prompt.{i}.*``, OpenInference's
``llm.input_messages.{i}.*``) or events (one deprecated GenAI event per message): the same ones as
last time, plus a few. Turning each into Python values costs about half a microsecond, which at 80
turns is most of a turn's cost and grows with the history. So, per conversation
(:class:`SpanDecodeMemo`, kept in the conversation's memory by the span decoder):

- attributes: the serialized attributes of the conversation's latest long spans are kept; the
  leading attributes of a new span that are byte for byte the same (one vectorised comparison)
  give back the values decoded then, and only the rest is decoded. Readers that group indexed
  attributes get, through :func:`indexed.indexed_groups`, the groups built then for the same
  attributes;
- events: the serialized events of the conversation's latest span with many events are kept, and
  the leading events of a new span that are the same but for their timestamps (instrumentations
  stamp every resent event anew; one vectorised comparison with the timestamps masked) are the
  views made then. Only the rest is decoded.

What a span shares is cut out of the bytes before they are parsed, so the protobuf parse too is of
the new part only.

The same bytes decode to the same values, so the result is what a full decode gives. When a span is
not laid out the way conforming encoders write it (one run of attributes, then one run of events,
each event's timestamp first), it is simply decoded in full.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from sys import getsizeof
from typing import Any

import numpy as np
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otelsignals.conventions.indexed import IndexedFold


@dataclass(slots=True, frozen=True)
class EventView:
    """A span event as the readers read it: its name and attributes (its time is not read). The
    views of a resent history are shared between spans: never changed."""

    name: str
    attributes: dict[str, Any] = field(default_factory=dict)


def any_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return key_values(value.kvlist_value.values)
    return getattr(value, kind)


def key_values(items: Any) -> dict[str, Any]:
    return dict(_pairs(items))


def _pairs(items: Any) -> list[tuple[str, Any]]:
    # Most attributes are strings, and a span resending a long history has hundreds of them: the
    # string is taken without asking which field is set (an empty string_value is also what any
    # other kind reads as, so those go through any_value, which gives "" for an empty string).
    return [(kv.key, kv.value.string_value or any_value(kv.value)) for kv in items]


def _span_pairs(items: Any) -> list[tuple[str, Any]]:
    """A span's own attributes: as :func:`_pairs`, but the long histories stay bytes (Utf8Text).
    The key is read once per attribute (the walrus in an always-true filter): each read of a
    protobuf field makes a new str."""
    return [
        (key, _as_utf8(kv.value) if key in UTF8_TEXT_KEYS else kv.value.string_value or any_value(kv.value))
        for kv in items
        if (key := kv.key) is not None
    ]


@dataclass(slots=True, frozen=True, eq=False)
class Utf8Text:
    """A long string attribute as the UTF-8 bytes it came in, not decoded to a str: a history
    resent whole on every model call (``UTF8_TEXT_KEYS``) is compared with the one read before by
    a hash of these bytes and only its new tail is parsed (memory.HistoryCache), so the whole of
    it is never turned into Python characters, which costs up to ~1 ns per character. Two are
    equal when their texts are."""

    data: bytes  # bytes holding the text: the span it came in, or its serialized AnyValue
    start: int  # where the text starts in ``data``
    end: int  # and ends

    @property
    def utf8(self) -> memoryview:
        return memoryview(self.data)[self.start : self.end]

    def __len__(self) -> int:
        return self.end - self.start  # bytes

    def __str__(self) -> str:
        return self.data[self.start : self.end].decode("utf-8", "replace")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Utf8Text) and self.utf8 == other.utf8

    def __hash__(self) -> int:
        return hash(self.data[self.start : self.end])


# A span's own attributes read as Utf8Text when their text is this long or longer.
# (A system prompt, resent alike with every call, is remembered by its hash too: memory.HistoryCache.)
UTF8_TEXT_KEYS = frozenset(
    {"gen_ai.input.messages", "gen_ai.system_instructions", "ai.prompt.messages", "ai.prompt"}
)
UTF8_TEXT_MIN_BYTES = 1024
_UTF8_TEXT_KEY_BYTES = frozenset(key.encode() for key in UTF8_TEXT_KEYS)
_UTF8_TEXT_KEY_LENGTHS = frozenset(len(key) for key in _UTF8_TEXT_KEY_BYTES)
KEY_TAG, VALUE_TAG = 0x0A, 0x12  # KeyValue.key: field 1, .value: field 2 (length-delimited)
# Each such key as a KeyValue starts: the key's tag and length, the key, the value's tag. A span
# without any is not walked (a walk of hundreds of indexed attributes costs more than their parse).
# One search for all of them: a search per key read all of a 90 KB span for each key it lacks
# (45 µs per span against 1.2 on the agent workload's).
_UTF8_TEXT_KEY_MARKER = re.compile(
    b"|".join(
        re.escape(bytes((KEY_TAG, len(key))) + key + bytes((VALUE_TAG,)))
        for key in sorted(_UTF8_TEXT_KEY_BYTES)
    )
)
# A length written in more bytes than this is refused by the parse: such a field is left to it.
_MAX_LENGTH_BYTES = 5
# A span this long may hold such a history: its bytes are walked to cut it out before parsing.
CUT_MIN_BYTES = 4096
_STRING_VALUE_TAG = 0x0A  # AnyValue.string_value: field 1, length-delimited


def _as_utf8(value: AnyValue) -> Any:
    """The value; a long string as its UTF-8 bytes (found without decoding it)."""
    if not value.HasField("string_value"):
        return any_value(value)
    data = value.SerializeToString()  # a copy of the bytes; no decoding
    length, start = varint(data, 1)  # past the string_value tag: its length, then the text
    if length < UTF8_TEXT_MIN_BYTES or data[0] != _STRING_VALUE_TAG:
        return value.string_value
    return Utf8Text(data, start, start + length)


# Below these sizes a span is decoded in full, and its runs are not kept: comparing and keeping
# them would cost more than it saves.
MEMO_MIN_BYTES = 4096
MEMO_MIN_ATTRIBUTES = 64
MEMO_MIN_EVENTS = 16
# Long spans whose attributes are kept per conversation (an agent's calls of one turn extend each
# other; a second branch keeps the previous turn's call while the latest one differs at its end).
ATTRIBUTE_BRANCHES = 2
# What a model call adds after its history (the answer, token usage…): a span sharing all of a kept
# one's attributes but as many as this is taken to extend it, without comparing the other branch.
ANSWER_ATTRIBUTES = 16
# What a kept attribute or event holds besides its key and value strings (held_bytes): the pair's
# tuple and dict slot, or the view and its dict, and the readers' groups made of them (measured with
# bench/session_memory.py --conventions).
MEMO_BYTES_PER_ATTRIBUTE = 150
MEMO_BYTES_PER_EVENT = 400

# One-byte tags of the Span fields read here (field number << 3 | wire type 2, length-delimited).
_ATTRIBUTES_FIELD, _EVENTS_FIELD = 9, 11
_ATTRIBUTE_TAG, _EVENT_TAG = 0x4A, 0x5A
_EVENT_TIME_TAG = 0x09  # Event.time_unix_nano: field 1, fixed64
_STAMP_BYTES = np.arange(8, dtype=np.int64)
_NO_SIZES = np.zeros(0, dtype=np.int64)


@dataclass(slots=True, eq=False)
class DecodedAttributes:
    """One span's attributes as decoded: their serialized run, where each one ends in it, their
    values, and what readers derived from them (:func:`indexed.indexed_groups`)."""

    region: bytes
    ends: np.ndarray  # int64
    pairs: list[tuple[str, Any]]
    values: dict[str, Any]  # dict(pairs): also the span view's attributes, never changed
    # int64: what each pair's key and value take (mostly objects of their own: the messages read
    # from them are built anew), carried over with the pairs a span shares with its base
    sizes: np.ndarray
    groups: dict[str, IndexedFold] = field(default_factory=dict)

    def held_bytes(self) -> int:
        """The memory this record holds (for the session byte bound, pipeline/sessions.py)."""
        return (
            getsizeof(self.region)
            + self.ends.nbytes
            + self.sizes.nbytes
            + getsizeof(self.pairs)
            + getsizeof(self.values)
            + int(self.sizes.sum())
            + MEMO_BYTES_PER_ATTRIBUTE * len(self.pairs)
        )


@dataclass(slots=True)
class AttributeOrigin:
    """How a span's attributes were decoded: ``decoded`` is this span's own record, and its first
    ``shared`` attributes are ``base``'s first ``shared`` (the same objects)."""

    decoded: DecodedAttributes
    base: DecodedAttributes | None = None
    shared: int = 0
    replaced: tuple[int, ...] = ()  # positions below ``shared`` whose value is not ``base``'s


@dataclass(slots=True, eq=False)
class DecodedEvents:
    """One span's events as decoded: their serialized run, where each one ends in it, where the
    timestamps are in it (masked when compared), and their views."""

    region: bytes
    ends: np.ndarray  # int64
    stamps: np.ndarray  # int64: offset of each 8-byte timestamp
    views: list[EventView]
    sizes: np.ndarray  # int64: what each view's attribute keys and values take

    def held_bytes(self) -> int:
        """The memory this record holds (for the session byte bound, pipeline/sessions.py)."""
        return (
            getsizeof(self.region)
            + self.ends.nbytes
            + self.stamps.nbytes
            + self.sizes.nbytes
            + getsizeof(self.views)
            + int(self.sizes.sum())
            + MEMO_BYTES_PER_EVENT * len(self.views)
        )


def _value_size(value: Any) -> int:
    """What a decoded value holds: a string's size; an array's or a key-value list's with what it
    holds; a Utf8Text's with its bytes (in a kept record, the value's own serialized copy)."""
    kind = type(value)
    if kind is list:
        return getsizeof(value) + sum(map(_value_size, value))
    if kind is dict:
        return getsizeof(value) + sum(getsizeof(key) + _value_size(item) for key, item in value.items())
    if kind is Utf8Text:
        return getsizeof(value) + getsizeof(value.data)
    return getsizeof(value)


def _sizes(shared: np.ndarray, fresh: list[int]) -> np.ndarray:
    """The sizes of a record: ``shared`` (its base's, for the items it shares), then ``fresh``."""
    sizes = np.empty(len(shared) + len(fresh), dtype=np.int64)
    sizes[: len(shared)] = shared
    sizes[len(shared) :] = fresh
    return sizes


def _pair_sizes(pairs: list[tuple[str, Any]]) -> list[int]:
    return [getsizeof(key) + _value_size(value) for key, value in pairs]


def _view_sizes(views: list[EventView]) -> list[int]:
    return [
        sum(map(getsizeof, view.attributes)) + sum(map(_value_size, view.attributes.values()))
        for view in views
    ]


class SpanDecodeMemo:
    """Per conversation, what was decoded of its latest long spans (bounded; see module doc)."""

    __slots__ = ("branches", "events")

    def __init__(self) -> None:
        self.branches: list[DecodedAttributes] = []
        self.events: DecodedEvents | None = None

    def closest(self, data: bytes, start: int) -> tuple[DecodedAttributes | None, _Match]:
        """The kept span sharing the most leading attributes with ``data``'s run at ``start``."""
        best, found = None, _NO_MATCH
        for branch in self.branches:
            match = _match(data, start, branch)
            if match.shared > found.shared:
                best, found = branch, match
            if match.shared + ANSWER_ATTRIBUTES >= len(branch.ends):
                break  # the span resends this one whole but for its answer: no other can do better
        return best, found

    def held_bytes(self) -> int:
        """The memory the kept records hold (for the session byte bound, pipeline/sessions.py); a
        value two records share is counted in each."""
        events = 0 if self.events is None else self.events.held_bytes()
        return events + sum(branch.held_bytes() for branch in self.branches)

    def keep(self, decoded: DecodedAttributes, base: DecodedAttributes | None, shared: int) -> None:
        # A base the new span extends whole is of no further use; one it differs from at its end
        # (the previous call's answer) may still be extended by a late or parallel span.
        rest = [b for b in self.branches if b is not base]
        if base is not None and shared < len(base.ends):
            rest.insert(0, base)
        self.branches = [decoded, *rest][:ATTRIBUTE_BRANCHES]


def decode_span(
    data: bytes, memo: SpanDecodeMemo | None
) -> tuple[Span, dict[str, Any], list[EventView], AttributeOrigin | None]:
    """``data`` parsed: (the span, its attributes, its events, how its attributes were decoded).

    With the conversation's ``memo``, the attributes and events the span shares with the
    conversation's earlier spans are neither parsed nor decoded again: they are cut out of the
    bytes parsed (so the returned ``Span`` holds only the others), and their values are the ones
    decoded then. A long JSON history (``UTF8_TEXT_KEYS``) is cut out of the bytes parsed too, and
    read from them as a :class:`Utf8Text`. Raises ``DecodeError`` for bytes that are not a span;
    ``data`` must come from a request that was parsed whole (the receivers, the disk queue's
    recovery), because the bytes of a cut history are not checked again (its UTF-8 is only decoded
    with replacement).
    """
    if memo is not None and len(data) >= MEMO_MIN_BYTES:
        if not memo.branches and memo.events is None:
            # Nothing to share yet: worth laying out only if the span itself is worth keeping.
            decoded = _decode_bytes(data)
            if len(decoded[1]) < MEMO_MIN_ATTRIBUTES and len(decoded[2]) < MEMO_MIN_EVENTS:
                return decoded
        try:
            layout = _layout(data, memo)
        except IndexError:  # not what a conforming encoder writes: read it in full
            layout = None
        if layout is not None:
            laid_out = _decode_laid_out(data, layout, memo)
            if laid_out is not None:
                return laid_out
    return _decode_bytes(data)


def _decode_bytes(data: bytes) -> tuple[Span, dict[str, Any], list[EventView], None]:
    """``data`` decoded in full, without a memo: :func:`decode_whole` of its parse, but for its long
    histories, cut out of the bytes before the parse (which would copy and check every character)
    and read from them as :class:`Utf8Text` (the returned ``Span`` does not hold them)."""
    cut = None
    if len(data) >= CUT_MIN_BYTES and _UTF8_TEXT_KEY_MARKER.search(data):
        try:
            cut = _without_long_texts(data)
        except IndexError:  # not what a conforming encoder writes: the parse says what is wrong
            cut = None
    if cut is None:
        return decode_whole(Span.FromString(data))
    rest, texts = cut
    span = Span.FromString(rest)
    pairs = _span_pairs(span.attributes)
    for position, key, text in texts:  # in the order they came: each goes back where it was
        pairs.insert(position, (key, text))
    return span, dict(pairs), _full_events(span.events), None


def _without_long_texts(data: bytes) -> tuple[bytes, list[tuple[int, str, Utf8Text]]] | None:
    """(the span's bytes without its long histories, each history as (its position among the
    span's attributes, its key, its text)); None when it has none. Raises IndexError for bytes
    that end inside a field or write a length in more bytes than a parse takes."""
    texts: list[tuple[int, str, Utf8Text]] = []
    kept: list[bytes] = []
    pos, end, position, kept_from = 0, len(data), 0, 0
    while pos < end:
        # A span's tags are one byte (field numbers under 16), so the varint call is rare.
        tag = data[pos]
        after = pos + 1
        if tag >= 0x80:
            tag, after = varint(data, pos)
        if tag & 7 != 2:
            pos = skip_field(data, tag & 7, after)
            continue
        length, body = varint(data, after)
        if body - after > _MAX_LENGTH_BYTES:
            raise IndexError("a length the parse refuses")
        field_end = body + length
        if tag == _ATTRIBUTE_TAG:
            found = _long_text(data, body, field_end)
            if found is not None:
                texts.append((position, *found))
                kept.append(data[kept_from:pos])
                kept_from = field_end
            position += 1
        pos = field_end
    if pos > end:
        raise IndexError("truncated span")
    if not texts:
        return None
    kept.append(data[kept_from:])
    return b"".join(kept), texts


def _long_text(data: bytes, start: int, end: int) -> tuple[str, Utf8Text] | None:
    """(key, text) of the KeyValue at ``data[start:end]`` when it is a history of ``UTF8_TEXT_KEYS``
    of ``UTF8_TEXT_MIN_BYTES`` or more, laid out as encoders write it: the key, then a value that
    is a string and nothing else."""
    if data[start] != KEY_TAG:
        return None
    key_length, key_at = varint(data, start + 1)
    if key_length not in _UTF8_TEXT_KEY_LENGTHS:  # most keys: not sliced to be looked up
        return None
    value_tag_at = key_at + key_length
    key = data[key_at:value_tag_at]
    if key not in _UTF8_TEXT_KEY_BYTES or value_tag_at >= end or data[value_tag_at] != VALUE_TAG:
        return None
    value_length, value_at = varint(data, value_tag_at + 1)
    if value_at + value_length != end or data[value_at] != _STRING_VALUE_TAG:
        return None
    text_length, text_at = varint(data, value_at + 1)
    if text_at + text_length != end or text_length < UTF8_TEXT_MIN_BYTES:
        return None
    if max(key_at - start, value_at - value_tag_at, text_at - value_at) - 1 > _MAX_LENGTH_BYTES:
        return None  # a length written at such length is the parse's to judge
    return key.decode(), Utf8Text(data, text_at, end)


def decode_whole(span: Span) -> tuple[Span, dict[str, Any], list[EventView], None]:
    """A parsed span decoded in full, without a memo (the same tuple as :func:`decode_span`)."""
    return span, dict(_span_pairs(span.attributes)), _full_events(span.events), None


@dataclass(slots=True)
class _Layout:
    """Where a span's attribute and event runs are, and what they share with the memo's."""

    attributes_at: int
    attributes_end: int
    base: DecodedAttributes | None
    match: _Match
    attribute_tail: list[int]  # end offsets, in the run, of the attributes after the shared ones
    events_at: int
    events_end: int
    kept_events: DecodedEvents | None
    shared_events: int
    event_tail: list[int]  # end offsets, in the run, of the events after the shared ones
    stamps: list[int]  # offsets, in the run, of the timestamps of those events

    @property
    def shared_attribute_bytes(self) -> int:
        return int(self.match.ends[-1]) if self.match.shared else 0

    @property
    def shared_event_bytes(self) -> int:
        return (
            int(self.kept_events.ends[self.shared_events - 1])
            if self.kept_events and self.shared_events
            else 0
        )


def _layout(data: bytes, memo: SpanDecodeMemo) -> _Layout | None:
    """The span's layout, or None when it is not one run of attributes followed (after other
    fields, if any) by one run of events, with neither coming again."""
    attributes_at = _field_start(data, _ATTRIBUTES_FIELD, 0)
    if attributes_at is None:
        return None
    base, match = memo.closest(data, attributes_at)
    layout = _Layout(attributes_at, 0, base, match, [], 0, 0, memo.events, 0, [], [])
    tail, layout.attributes_end = _run(data, attributes_at + layout.shared_attribute_bytes, _ATTRIBUTE_TAG)
    layout.attribute_tail = [e - attributes_at for e in tail]
    events_at = _next_field(data, layout.attributes_end, _EVENTS_FIELD)
    if events_at is None:
        return None
    layout.events_at = events_at
    if layout.kept_events is not None:
        layout.shared_events = _shared_events(data, events_at, layout.kept_events)
    pos = events_at + layout.shared_event_bytes
    event_tail, stamps = layout.event_tail, layout.stamps
    end = len(data)
    while pos < end and data[pos] == _EVENT_TAG:
        length, body = varint(data, pos + 1)
        if data[body] == _EVENT_TIME_TAG:
            stamps.append(body + 1 - events_at)
        pos = body + length
        event_tail.append(pos - events_at)
    if pos > end or _next_field(data, pos, None) is None:
        return None
    layout.events_end = pos
    return layout


def _decode_laid_out(
    data: bytes, layout: _Layout, memo: SpanDecodeMemo
) -> tuple[Span, dict[str, Any], list[EventView], AttributeOrigin | None] | None:
    at, events_at = layout.attributes_at, layout.events_at
    # The span without what it shares: only what is new is parsed.
    span = Span.FromString(
        data[:at]
        + data[at + layout.shared_attribute_bytes : events_at]
        + data[events_at + layout.shared_event_bytes :]
    )
    if len(span.attributes) != len(layout.attribute_tail) or len(span.events) != len(layout.event_tail):
        return None
    values, origin = _attribute_values(data, layout, span, memo)
    return span, values, _event_views(data, layout, span, memo), origin


def _attribute_values(
    data: bytes, layout: _Layout, span: Span, memo: SpanDecodeMemo
) -> tuple[dict[str, Any], AttributeOrigin | None]:
    base, match = layout.base, layout.match
    fresh = _span_pairs(span.attributes)
    tail_ends = np.array(layout.attribute_tail, dtype=np.int64)
    if base is None or not match.shared:
        values = dict(fresh)
        if len(fresh) < MEMO_MIN_ATTRIBUTES:
            return values, None
        decoded = DecodedAttributes(
            data[layout.attributes_at : layout.attributes_end],
            tail_ends,
            fresh,
            values,
            _sizes(_NO_SIZES, _pair_sizes(fresh)),
        )
        memo.keep(decoded, None, 0)
        return values, AttributeOrigin(decoded)
    shared = match.shared
    pairs = base.pairs[:shared]
    for position in match.replaced:
        pairs[position] = _span_pairs([_attribute_at(data, layout.attributes_at, match.ends, position)])[0]
    values = _values(base, pairs, shared, match.replaced)
    sizes = _sizes(base.sizes[:shared], _pair_sizes(fresh))
    for position in match.replaced:
        sizes[position] = _pair_sizes([pairs[position]])[0]
    pairs += fresh
    values.update(fresh)
    decoded = DecodedAttributes(
        data[layout.attributes_at : layout.attributes_end],
        np.concatenate((match.ends, tail_ends)),
        pairs,
        values,
        sizes,
    )
    if len(pairs) >= MEMO_MIN_ATTRIBUTES:
        memo.keep(decoded, base, shared)
    return values, AttributeOrigin(decoded, base, shared, match.replaced)


def _values(
    base: DecodedAttributes, pairs: list[tuple[str, Any]], shared: int, replaced: tuple[int, ...]
) -> dict:
    """dict(pairs) for the first ``shared`` pairs, which are ``base``'s but for ``replaced`` ones:
    ``base``'s values copied, less its later keys, when that keeps the order a dict of them has."""
    old = base.pairs
    if len(base.values) == len(old) and all(pairs[p][0] == old[p][0] for p in replaced):
        # Every key of base once, and the replaced ones in their places: what base has after
        # ``shared`` is removed, and the replaced values set where they are.
        values = base.values.copy()
        for key, _ in old[shared:]:
            del values[key]
        for position in replaced:
            values[pairs[position][0]] = pairs[position][1]
        return values
    return dict(pairs)


def _attribute_at(data: bytes, start: int, ends: np.ndarray, position: int) -> KeyValue:
    """The ``position``-th attribute of the run at ``start`` (``ends``: where each one ends)."""
    field_at = start + (int(ends[position - 1]) if position else 0)
    _, body = varint(data, field_at + 1)  # past the tag and the length
    return KeyValue.FromString(data[body : start + int(ends[position])])


def _event_views(data: bytes, layout: _Layout, span: Span, memo: SpanDecodeMemo) -> list[EventView]:
    kept, shared = layout.kept_events, layout.shared_events
    fresh = _full_events(span.events)
    views = fresh
    ends = np.array(layout.event_tail, dtype=np.int64)
    stamps = np.array(layout.stamps, dtype=np.int64)
    shared_sizes = _NO_SIZES
    if kept is not None and shared:
        views = kept.views[:shared] + fresh
        ends = np.concatenate((kept.ends[:shared], ends))
        stamps = np.concatenate((kept.stamps[kept.stamps < layout.shared_event_bytes], stamps))
        shared_sizes = kept.sizes[:shared]
    if len(views) >= MEMO_MIN_EVENTS and (kept is None or shared < len(views) or len(kept.views) <= shared):
        # (a late span with a shorter history leaves the longer one kept)
        sizes = _sizes(shared_sizes, _view_sizes(fresh))
        memo.events = DecodedEvents(data[layout.events_at : layout.events_end], ends, stamps, views, sizes)
    return views


def _shared_events(data: bytes, start: int, kept: DecodedEvents) -> int:
    """How many leading events of ``data``'s run at ``start`` are ``kept``'s but for their timestamps."""
    region = kept.region
    length = min(len(data) - start, len(region))
    if length <= 0:
        return 0
    differ = np.frombuffer(data, np.uint8, length, start) != np.frombuffer(region, np.uint8, length)
    stamps = kept.stamps[kept.stamps <= length - 8]
    differ[(stamps[:, None] + _STAMP_BYTES).ravel()] = False
    first = int(differ.argmax())
    same = first if differ[first] else length
    return int(kept.ends.searchsorted(same, "right"))


def _full_events(events: Any) -> list[EventView]:
    return [EventView(e.name, key_values(e.attributes)) for e in events]


# -- the wire format, as far as needed to find the runs -----------------------------------------
def varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _field_start(data: bytes, number: int, pos: int) -> int | None:
    """Offset of the first top-level field ``number`` at or after ``pos``, or None."""
    end = len(data)
    while pos < end:
        key, after = varint(data, pos)
        if key >> 3 == number:
            return pos
        pos = skip_field(data, key & 7, after)
    return None


def _next_field(data: bytes, pos: int, number: int | None) -> int | None:
    """Offset of the first field ``number`` at or after ``pos`` (the end when there is none), or
    None when an attribute or event field comes first (the runs come once each)."""
    end = len(data)
    while pos < end:
        key, after = varint(data, pos)
        field_number = key >> 3
        if field_number == number:
            return pos
        if field_number in (_ATTRIBUTES_FIELD, _EVENTS_FIELD):
            return None
        pos = skip_field(data, key & 7, after)
    if pos > end:
        raise IndexError("truncated field")
    return end


def skip_field(data: bytes, wire: int, pos: int) -> int:
    """Offset after a field value of wire type ``wire`` starting at ``pos``."""
    if wire == 0:
        return varint(data, pos)[1]
    if wire == 1:
        return pos + 8
    if wire == 2:
        length, pos = varint(data, pos)
        return pos + length
    if wire == 5:
        return pos + 4
    raise IndexError("unknown wire type")


def _run(data: bytes, pos: int, tag: int) -> tuple[list[int], int]:
    """(end offsets, offset after them) of the consecutive length-delimited fields with ``tag``."""
    ends = []
    end = len(data)
    while pos < end and data[pos] == tag:
        length, pos = varint(data, pos + 1)
        pos += length
        ends.append(pos)
    if pos > end:
        raise IndexError("truncated field")
    return ends, pos


def _common_prefix(data: bytes, start: int, region: bytes, offset: int) -> int:
    """How many leading bytes of ``data[start:]`` equal those of ``region[offset:]`` (compared in C)."""
    length = min(len(data) - start, len(region) - offset)
    if length <= 0:
        return 0
    differ = np.frombuffer(data, np.uint8, length, start) != np.frombuffer(region, np.uint8, length, offset)
    first = int(differ.argmax())
    return first if differ[first] else length


@dataclass(slots=True, frozen=True)
class _Match:
    """A new span's attributes against a kept span's: the first ``shared`` are the same but for
    the ``replaced`` positions (a value that changed, such as a request body with the history in
    it), and ``ends`` are where those ``shared`` end in the new span's run."""

    shared: int
    replaced: tuple[int, ...]
    ends: np.ndarray


_NO_MATCH = _Match(0, (), np.zeros(0, dtype=np.int64))
# Attributes of a resent history whose value changed, among the same ones (OpenInference writes the
# whole request body before the history's indexed attributes).
MAX_REPLACED = 4


def _match(data: bytes, start: int, base: DecodedAttributes) -> _Match:
    """How ``data``'s attribute run at ``start`` matches ``base``'s: runs of byte-identical attributes,
    separated by single attributes whose bytes changed (each followed by identical ones again)."""
    region, old_ends = base.region, base.ends
    count = len(old_ends)
    index = shift = 0  # attributes matched so far; how much longer the new run is up to there
    changes: list[tuple[int, int]] = []  # (replaced position, shift before it)
    while True:
        old_at = int(old_ends[index - 1]) if index else 0
        common = _common_prefix(data, start + old_at + shift, region, old_at)
        matched = int(old_ends.searchsorted(old_at + common, "right"))
        if matched == index and changes and changes[-1][0] == index - 1:
            # What follows the changed attribute differs too: the runs part there, it is no change.
            index, shift = changes.pop()
            break
        index = matched
        if index >= count or len(changes) == MAX_REPLACED:
            break
        at = start + (int(old_ends[index - 1]) if index else 0) + shift
        if at >= len(data) or data[at] != _ATTRIBUTE_TAG:
            break
        length, body = varint(data, at + 1)
        changes.append((index, shift))
        shift = body + length - start - int(old_ends[index])
        index += 1
    if not index:
        return _NO_MATCH
    ends = old_ends[:index].copy()
    shifts = [before for _, before in changes[1:]] + [shift] if changes else []
    for (position, before), after in zip(changes, shifts, strict=True):
        ends[position:] += after - before
    return _Match(index, tuple(position for position, _ in changes), ends)
