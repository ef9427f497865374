"""What every convention reader works on and returns, and the helpers they share.

A reader gets a :class:`SpanView` (a span's attributes and events as plain Python values) and
returns a :class:`SpanReading` (messages in, messages out, the model call, the tool execution) or
None when the span is not written in its convention. Readers never see protobuf.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from itertools import islice
from operator import attrgetter
from typing import Any, Protocol

import orjson
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otelsignals.conventions.decoding import (
    AttributeOrigin,
    EventView,
    SpanDecodeMemo,
    decode_span,
    decode_whole,
)
from otelsignals.model import LlmCall, Message, ToolResult

STATUS_UNSET, STATUS_OK, STATUS_ERROR = 0, 1, 2
_TOOL_RESULT = attrgetter("tool_result")
EVENT_NAME = attrgetter("name")


class HistoryCache:
    """Per conversation, what was read of the history last time, to read only what is new.

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
        self.decoding = SpanDecodeMemo()  # what was decoded of the conversation's spans

    def messages(
        self,
        key: str,
        text: str,
        read: Callable[[Any], list[Message]],
        items: Callable[[list[Any]], list[Message]] | None = None,
        closing: str = "]",
    ) -> list[Message]:
        """The messages of a history written as one JSON text.

        ``read(value)`` reads the whole text: its parsed JSON, or the text itself when it is not
        JSON. A text that continues the previous one of ``key`` (the same up to the ``closing``
        that ends its last array, then ``,`` and further values of that array, then ``closing``)
        gives the previous messages plus ``items(further values)`` (``read`` by default).
        ``closing`` is ``]`` for a JSON array; ``]}`` for an object whose last key holds the
        array, when reading the object amounts to reading its arrays in order.
        """
        remembered = self._last.setdefault(key, [])
        longest: _JsonHistory | None = None
        further: list[Any] | None = None
        for history in remembered:
            if longest is None or history.head_length > longest.head_length:
                found = history.continued_by(text, closing)
                if found is not None:
                    longest, further = history, found
        if longest is not None and further is not None:
            messages = longest.messages + ((items or read)(further) if further else [])
            link_tool_names(messages, len(longest.messages))
            self._remember(remembered, text, closing, messages)
            return messages
        value: Any = text
        if text.lstrip()[:1] in ("[", "{"):
            with suppress(orjson.JSONDecodeError):
                value = orjson.loads(text)
        messages = read(value)
        if value is not text:  # only valid JSON is continued
            self._remember(remembered, text, closing, messages)
        return messages

    @staticmethod
    def _remember(remembered: list[_JsonHistory], text: str, closing: str, messages: list[Message]) -> None:
        history = _JsonHistory.of(text, closing, messages)
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
            branch.add(raw, build(raw))
        return list(branch.messages)


# JSON histories remembered per key of a conversation: an agent span's short input next to its model
# calls' whole histories must not make each call parse its history again.
_JSON_HISTORIES = 4


class _JsonHistory:
    """A history read before from one JSON text, remembered by the length and hash of the text up
    to its closing (not the text itself: a conversation's history can be megabytes)."""

    __slots__ = ("head_hash", "head_length", "messages")

    def __init__(self, head_length: int, head_hash: int, messages: list[Message]) -> None:
        self.head_length = head_length
        self.head_hash = head_hash
        self.messages = messages

    @classmethod
    def of(cls, text: str, closing: str, messages: list[Message]) -> _JsonHistory | None:
        trimmed = text.rstrip()
        if not trimmed.endswith(closing) or len(trimmed) == len(closing):
            return None
        head_length = len(trimmed) - len(closing)
        return cls(head_length, hash(trimmed[:head_length]), messages)

    def continued_by(self, text: str, closing: str) -> list[Any] | None:
        """The values ``text`` adds to the last array of this history ([] when it is this history
        again), or None when it does not merely continue it."""
        head_length = self.head_length
        if len(text) < head_length or hash(text[:head_length]) != self.head_hash:
            return None
        rest = text[head_length:].strip()
        if rest == closing:
            return []
        if not rest.startswith(",") or not rest.endswith(closing):
            return None
        try:
            further = orjson.loads("[" + rest[1 : len(rest) - len(closing) + 1])
        except orjson.JSONDecodeError:
            return None
        return further if isinstance(further, list) else None


# Indexed histories remembered per namespace of a conversation (each at most one history long).
_INDEXED_BRANCHES = 4


class _IndexedHistory:
    """The raw keys of an indexed history read before, the messages each position gave, and all
    of those messages in order."""

    __slots__ = ("ends", "messages", "raws")

    def __init__(self) -> None:
        self.raws: list[Any] = []
        self.ends: list[int] = []  # ends[i]: len(messages) once position i is read
        self.messages: list[Message] = []

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

    def fork(self, positions: int) -> _IndexedHistory:
        """A new history holding this one's first ``positions`` positions (the same messages)."""
        fork = _IndexedHistory()
        fork.raws = self.raws[:positions]
        fork.ends = self.ends[:positions]
        fork.messages = self.messages[: fork.ends[-1]] if positions else []
        return fork


@dataclass(slots=True)
class SpanView:
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes = b""
    name: str = ""
    kind: int = 0
    start_time_unix_nano: int = 0
    end_time_unix_nano: int = 0
    # Read-only, like the events: a resent history's are shared with the conversation's decode memo.
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[EventView] = field(default_factory=list)
    status_code: int = STATUS_UNSET
    status_message: str = ""
    resource: dict[str, Any] = field(default_factory=dict)
    scope_name: str = ""
    # The conversation's history cache, when the caller knows the conversation (readers may use it).
    history: HistoryCache | None = None
    # Set when the attributes were decoded against an earlier span's (see decoding.indexed_groups).
    attribute_origin: AttributeOrigin | None = None

    def attribute_str(self, key: str) -> str | None:
        value = self.attributes.get(key)
        return value if isinstance(value, str) and value else None

    def attribute_int(self, key: str) -> int | None:
        value = self.attributes.get(key)
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
        return None


@dataclass(slots=True)
class ToolExecution:
    """A span that ran a tool: what was asked and what came back (or how it failed)."""

    name: str | None
    call_id: str | None = None
    arguments: Any = None
    result: ToolResult = field(default_factory=ToolResult)


@dataclass(slots=True)
class SpanReading:
    convention: str
    input_messages: list[Message] = field(default_factory=list)  # the history the call was sent
    output_messages: list[Message] = field(default_factory=list)  # what the model answered
    llm_call: LlmCall | None = None  # set for model-call spans, with or without content
    tool_execution: ToolExecution | None = None  # set for tool spans
    # False when the span is a GenAI operation whose message content was not recorded
    # (instrumentations default to not capturing content).
    content_captured: bool = True


class Reader(Protocol):
    name: str

    def read(self, span: SpanView) -> SpanReading | None:
        """The span's conversation data in this convention, or None if it is not written in it."""
        ...


# -- protobuf → plain values (see decoding.py) ---------------------------------------------------
def span_view(span: Span, resource: Mapping[str, Any] | None = None, scope_name: str = "") -> SpanView:
    """A parsed span as plain values."""
    return _view(*decode_whole(span), resource, scope_name)


def decoded_span_view(
    data: bytes, memo: SpanDecodeMemo | None, resource: Mapping[str, Any] | None = None, scope_name: str = ""
) -> SpanView:
    """The serialized span ``data`` as plain values. With the conversation's ``memo``, what it shares
    with the conversation's previous spans is not parsed or decoded again (see decoding.py).
    Raises ``DecodeError`` for bytes that are not a span."""
    return _view(*decode_span(data, memo), resource, scope_name)


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


# -- helpers shared by the readers ------------------------------------------------------------
def parse_json(value: Any) -> Any:
    """A JSON-string attribute parsed; structured values (already lists/dicts) pass through.
    Text that is not JSON comes back unchanged (callers decide whether that is content)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("[", "{", '"'):
            try:
                return orjson.loads(text)
            except orjson.JSONDecodeError:
                return value
    return value


def as_text(value: Any) -> str | None:
    """Message content as text: strings as they are, anything else as compact JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)


def http_status_of(span: SpanView) -> int | None:
    for key in ("http.response.status_code", "http.status_code"):
        code = span.attribute_int(key)
        if code:
            return code
    error_type = span.attribute_str("error.type")
    if error_type and error_type.isdigit() and len(error_type) == 3:
        return int(error_type)
    return None


def exception_of(span: SpanView) -> tuple[str | None, str | None]:
    """(exception.type, exception.message) of the span's last exception event, if any."""
    event = last_event(span.events, "exception")
    if event is None:
        return None, None
    exc_type = event.attributes.get("exception.type")
    message = event.attributes.get("exception.message")
    return (
        exc_type if isinstance(exc_type, str) else None,
        message if isinstance(message, str) else None,
    )


def last_event(events: list[EventView], name: str) -> EventView | None:
    """The last of ``events`` called ``name``. A span resending its history as events has one per
    message: their names are compared at C level."""
    names = list(map(EVENT_NAME, events))
    if name not in names:
        return None
    return events[len(names) - 1 - names[::-1].index(name)]


def failure_of(span: SpanView) -> tuple[bool, str | None, str | None, int | None]:
    """(failed, error type, error message, HTTP status) from status, error.type, exceptions, HTTP code."""
    status_code = http_status_of(span)
    exc_type, exc_message = exception_of(span)
    error_type = span.attribute_str("error.type") or exc_type
    failed = (
        span.status_code == STATUS_ERROR
        or error_type is not None
        or (status_code is not None and status_code >= 400)
    )
    message = exc_message or (span.status_message or None)
    return failed, error_type, message, status_code


def llm_call_of(span: SpanView, model: str | None = None) -> LlmCall:
    failed, error_type, message, status_code = failure_of(span)
    return LlmCall(
        span_id=span.span_id,
        trace_id=span.trace_id,
        model=model
        or span.attribute_str("gen_ai.response.model")
        or span.attribute_str("gen_ai.request.model"),
        failed=failed,
        error_type=error_type,
        error_message=message,
        status_code=status_code,
        input_tokens=span.attribute_int("gen_ai.usage.input_tokens"),
        output_tokens=span.attribute_int("gen_ai.usage.output_tokens"),
        start_time_unix_nano=span.start_time_unix_nano,
        end_time_unix_nano=span.end_time_unix_nano,
    )


def tool_result_of(span: SpanView, content: Any, call_id: str | None, name: str | None) -> ToolResult:
    """A tool span's result: its text when recorded, and the failure from the span itself."""
    failed, error_type, message, status_code = failure_of(span)
    return ToolResult(
        call_id=call_id,
        name=name,
        content=as_text(content),
        is_error=failed,
        error_type=error_type,
        error_message=message,
        status_code=status_code,
    )


def text_value(value: Any) -> str | None:
    """An id, name or label as text: strings stripped (the GenAI spec's own example has a stray
    leading space in an id), integers written out, anything else None."""
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def link_tool_names(messages: list[Message], start: int = 0) -> None:
    """Name each tool result from ``start`` on after the call it answers, when the result itself did
    not say (OpenAI-style histories give a result only the call id)."""
    # Tool results are a few of a long history's messages: they are picked out at C level.
    results = filter(None, map(_TOOL_RESULT, islice(messages, start, None)))
    unnamed = [result for result in results if result.name is None and result.call_id]
    if not unnamed:
        return
    # A call comes shortly before its result: look back only as far as the calls still wanted.
    wanted = {result.call_id for result in unnamed}
    names: dict[str, str] = {}
    for message in reversed(messages):
        for call in message.tool_calls:
            if call.id is not None and call.id in wanted and call.name and call.id not in names:
                names[call.id] = call.name
        if len(names) == len(wanted):
            break
    for result in unnamed:
        result.name = names.get(result.call_id)
