"""The span decoder: a trace's serialized spans in, the views the convention readers read and their
readings out.

A conversation's spans resend its history on every call. What a span shares with the
conversation's earlier spans is neither decoded again (decoding.py) nor read again (the history
cache, memory.py): the decoder keeps both in the conversation's :class:`ConversationMemory`, and
the readers, which know nothing of it, get the same messages either way. Which conversation a
trace belongs to is known only once its spans are decoded, so the memory to decode them with is
guessed from their bytes first (a wrong guess only costs that saving), and the memory kept is the
one of the conversation the decoded spans name.

Pure: no I/O, no clock, no telemetry. The decoder itself holds only its readers; each
conversation's memory lives with the conversation's state and is handed in, so it is dropped with
the conversation and, like it, changed on the analysis thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otelsignals.conventions import READERS
from otelsignals.conventions.base import Reader, SpanReading, SpanView
from otelsignals.conventions.decoding import (
    AttributeOrigin,
    EventView,
    any_value,
    decode_span,
    decode_whole,
    varint,
)
from otelsignals.conventions.markers import carries_any, genai_markers, slices_carrying_any
from otelsignals.conventions.memory import ConversationMemory
from otelsignals.conversation import CONVERSATION_KEY_ATTRIBUTES, conversation_key

# Spans the GenAI pre-filter stops are still decoded when they may name the conversation (an app
# often sets session.id on its own request span rather than on the model-call spans).
KEY_MARKERS = (b"session", b"conversation.id")
# How far into a span (from its start, and from its end) a conversation key is looked for by bytes.
HINT_SEARCH_BYTES = 4096


class SerializedSpan(NamedTuple):
    """A span's protobuf bytes, with the resource attributes and scope name it was sent under."""

    data: bytes
    resource: Mapping[str, Any]
    scope_name: str


@dataclass(slots=True)
class DecodedTrace:
    key: str  # the conversation the spans name (conversation.conversation_key)
    memory: ConversationMemory  # that conversation's memory: to read the spans with, and keep
    genai: list[SpanView]  # the spans that passed the pre-filter, in order
    others: list[SpanView]  # the spans decoded only because they may name the conversation
    undecodable: int  # spans whose bytes are not a span (left out of both lists)


class SpanDecoder:
    """Decodes and reads spans with ``readers`` (the registry by default), offered each span in
    order, the first that recognises it winning."""

    def __init__(
        self,
        readers: tuple[Reader, ...] = READERS,
        key_attributes: Sequence[str] = CONVERSATION_KEY_ATTRIBUTES,
    ) -> None:
        self.readers = readers
        self.markers = genai_markers(prefix for reader in readers for prefix in reader.key_prefixes)
        self.key_attributes = tuple(key_attributes)
        self._key_attribute_markers = tuple(_key_marker(name) for name in self.key_attributes)
        # The spans that may name the conversation: by the usual words, and by any name configured.
        self._naming_markers = KEY_MARKERS + tuple(
            name.encode() for name in self.key_attributes if not carries_any(name.encode(), KEY_MARKERS)
        )

    def might_carry_genai(self, span_bytes: bytes) -> bool:
        """The pre-filter: False when the span holds none of the readers' key prefixes."""
        return carries_any(span_bytes, self.markers)

    def slices_might_carry_genai(self, data: bytes, starts: Sequence[int], ends: Sequence[int]) -> list[bool]:
        """:meth:`might_carry_genai` of each span ``data[starts[i]:ends[i]]``, searched in ``data``."""
        return slices_carrying_any(data, starts, ends, self.markers)

    def might_name_conversation(self, span_bytes: bytes) -> bool:
        return carries_any(span_bytes, self._naming_markers)

    def decode_trace(
        self,
        trace_id: bytes,
        genai: Sequence[SerializedSpan],
        others: Sequence[SerializedSpan],
        memory_of: Callable[[str], ConversationMemory | None],
    ) -> DecodedTrace:
        """A trace's ``genai`` spans decoded against the memory of the conversation they seem to
        belong to, and its ``others`` in full; ``memory_of(key)`` is the memory of a known
        conversation (None: not known)."""
        hint = _guess_key([span.data for span in (*genai, *others)], trace_id, self._key_attribute_markers)
        guessed = memory_of(hint)
        if guessed is None:
            guessed = ConversationMemory()
        genai_views = self._views(genai, guessed)
        other_views = self._views(others, None)
        key = conversation_key(genai_views + other_views, trace_id, self.key_attributes)
        memory = memory_of(key)
        if memory is None:
            memory = guessed if key == hint else ConversationMemory()
        undecodable = len(genai) + len(others) - len(genai_views) - len(other_views)
        return DecodedTrace(key, memory, genai_views, other_views, undecodable)

    def view(
        self,
        data: bytes,
        memory: ConversationMemory | None,
        resource: Mapping[str, Any] | None = None,
        scope_name: str = "",
    ) -> SpanView:
        """The serialized span ``data`` as plain values. With a conversation's ``memory``, what it
        shares with the conversation's earlier spans is not parsed or decoded again. Raises
        ``DecodeError`` for bytes that are not a span."""
        return _view(*decode_span(data, memory.spans if memory is not None else None), resource, scope_name)

    def read(self, view: SpanView, memory: ConversationMemory | None = None) -> SpanReading | None:
        """The span's conversation data, read by the first reader that recognises its convention;
        with its conversation's ``memory``, the part of a history read before is not read again."""
        if memory is not None:
            view.histories = memory.histories
        for reader in self.readers:
            reading = reader.read(view)
            if reading is not None:
                return reading
        return None

    def _views(self, spans: Sequence[SerializedSpan], memory: ConversationMemory | None) -> list[SpanView]:
        views = []
        for span in spans:
            try:
                views.append(self.view(span.data, memory, span.resource, span.scope_name))
            except DecodeError:  # cannot happen for spans the receiver parsed; kept for replayed data
                continue
        return views


def span_view(span: Span, resource: Mapping[str, Any] | None = None, scope_name: str = "") -> SpanView:
    """A parsed span as plain values, decoded in full: the reference :meth:`SpanDecoder.view` equals."""
    return _view(*decode_whole(span), resource, scope_name)


def _view(
    span: Span,
    attributes: dict[str, Any],
    events: list[EventView],
    origin: AttributeOrigin | None,
    resource: Mapping[str, Any] | None,
    scope_name: str,
) -> SpanView:
    return SpanView(
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_span_id=span.parent_span_id,
        name=span.name,
        kind=span.kind,
        start_time_unix_nano=span.start_time_unix_nano,
        end_time_unix_nano=span.end_time_unix_nano,
        attributes=attributes,
        events=events,
        status_code=span.status.code,
        status_message=span.status.message,
        resource=dict(resource or {}),
        scope_name=scope_name,
        attribute_origin=origin,
    )


def _guess_key(spans: list[bytes], trace_id: bytes, markers: tuple[bytes, ...]) -> str:
    """:func:`conversation.conversation_key` guessed from serialized spans without decoding them:
    the first key attribute found by its bytes. Only a guess (the bytes could sit inside another
    value)."""
    for marker in markers:
        for data in spans:
            # Ids are set when a span starts or ends, so they sit before or after a resent history.
            at = data.find(marker, 0, HINT_SEARCH_BYTES)
            if at < 0 and len(data) > HINT_SEARCH_BYTES:
                at = data.find(marker, max(HINT_SEARCH_BYTES, len(data) - HINT_SEARCH_BYTES))
            if at < 0:
                continue
            try:
                length, start = varint(data, at + len(marker))
                value = any_value(AnyValue.FromString(data[start : start + length]))
            except (IndexError, DecodeError):
                continue
            if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
                return str(value).strip()
    return trace_id.hex()


def _key_marker(name: str) -> bytes:
    # A top-level KeyValue with this key, up to its value: field 1 (key), then field 2's tag. (The
    # key's length is one varint byte: names are at most 127 bytes, SessionsConfig.validate.)
    return b"\n" + bytes([len(name.encode())]) + name.encode() + b"\x12"
