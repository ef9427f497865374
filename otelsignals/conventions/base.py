"""What every convention reader works on and returns, and the helpers they share.

A reader gets a :class:`SpanView` (a span's attributes and events as plain Python values) and
returns a :class:`SpanReading` (messages in, messages out, the model call, the tool execution) or
None when the span is not written in its convention. Readers never see protobuf, and never see
what is remembered of a conversation: a history is turned into messages through the view's
:class:`Histories` and indexed attributes are grouped through :meth:`SpanView.indexed_groups`,
which read in full or reuse an earlier span's work as the span decoder arranged
(``span_decoder.py``), with the same result either way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from itertools import islice
from operator import attrgetter
from typing import Any, Protocol

import orjson
import xxhash

from otelsignals.conventions.decoding import AttributeOrigin, EventView, Utf8Text
from otelsignals.conventions.indexed import Fill, Locate, indexed_groups
from otelsignals.model import LlmCall, Message, Role, ToolCall, ToolResult

STATUS_UNSET, STATUS_ERROR = 0, 2  # OTLP Status.code values read here (1 is OK)
_TOOL_RESULT = attrgetter("tool_result")
EVENT_NAME = attrgetter("name")


# How a reader reads a text resent alike with every call (Histories.repeated): its message, and a
# message read from another span's copy of it as this span's own.
ReadText = Callable[[str | Utf8Text], Message | None]
ReadAgain = Callable[[Message], Message]


class Histories(Protocol):
    """How a reader turns the history a span was sent into messages."""

    def messages(
        self,
        key: str,
        text: str | Utf8Text,
        read: Callable[[Any], list[Message]],
        items: Callable[[list[Any]], list[Message]] | None = None,
        closing: str = "]",
    ) -> list[Message]:
        """The messages of a history written as one JSON text under attribute ``key``: ``read(value)``
        reads the text's parsed JSON (the text itself when it is not a JSON array or object);
        ``items`` reads values appended to the text's last array (``read`` by default), and
        ``closing`` is what ends that array (``]``, or ``]}`` for an object whose last key holds it)."""
        ...

    def indexed(
        self, namespace: str, raws: list[Any], build: Callable[[Any], list[Message]]
    ) -> list[Message]:
        """The messages of a history given as one raw key per position, in order: ``build(raw)`` gives
        a position's messages from everything they depend on. ``namespace`` names the history
        (a convention's inputs are not its outputs nor another convention's)."""
        ...

    def repeated(self, key: str, text: str | Utf8Text, read: ReadText, again: ReadAgain) -> Message | None:
        """The message of a text written again with every call under attribute ``key`` (a system
        prompt): ``read(text)``, or, when the text is the one read last time, ``again(message)`` of
        the message given then (this span's own message with the same text)."""
        ...


def json_or_text(text: str | Utf8Text) -> Any:
    """``text`` parsed when it is a JSON array or object, else the text itself (as a str)."""
    if isinstance(text, Utf8Text):
        data = text.utf8
        first = 0
        while first < len(data) and data[first] in JSON_WHITESPACE:
            first += 1
        if first < len(data) and data[first] in _JSON_OPENINGS:
            with suppress(orjson.JSONDecodeError):
                return orjson.loads(data)
        return str(text)
    if text.lstrip()[:1] in ("[", "{"):
        with suppress(orjson.JSONDecodeError):
            return orjson.loads(text)
    return text


JSON_WHITESPACE = b" \t\r\n"  # the only whitespace JSON allows between tokens
_JSON_OPENINGS = b"[{"


class ReadInFull:
    """Every history read whole: what a span is read with when no conversation is known, and the
    reference any reuse of earlier readings must equal."""

    def messages(
        self,
        key: str,
        text: str | Utf8Text,
        read: Callable[[Any], list[Message]],
        items: Callable[[list[Any]], list[Message]] | None = None,
        closing: str = "]",
    ) -> list[Message]:
        return read(json_or_text(text))

    def indexed(
        self, namespace: str, raws: list[Any], build: Callable[[Any], list[Message]]
    ) -> list[Message]:
        return [message for raw in raws for message in build(raw)]

    def repeated(self, key: str, text: str | Utf8Text, read: ReadText, again: ReadAgain) -> Message | None:
        return read(text)


READ_IN_FULL = ReadInFull()


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
    # What the span's histories are read with: the span decoder sets the conversation's history
    # cache once it knows the conversation.
    histories: Histories = READ_IN_FULL
    # Set when the attributes were decoded against an earlier span's (see indexed_groups).
    attribute_origin: AttributeOrigin | None = None

    def indexed_groups(
        self, name: str, groups: int, locate: Locate, fill: Fill
    ) -> list[list[dict[str, Any]]]:
        """Per group ``0 .. groups - 1``, the entries of its indexed attributes in index order:
        ``locate(key)`` says which (group, index) a key belongs to (None: not an indexed key) and
        ``fill(entry, key, value)`` puts it into that index's entry. The entries may be shared with
        an earlier span's: never changed. ``name`` keeps apart the groupings of different readers."""
        return indexed_groups(name, self.attributes, self.attribute_origin, groups, locate, fill)

    def attribute_str(self, key: str) -> str | None:
        value = self.attributes.get(key)
        return value if isinstance(value, str) and value else None

    def attribute_int(self, key: str) -> int | None:
        value = self.attributes.get(key)
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, str) and value.strip().isdecimal():  # isdigit() takes "²", int() does not
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
    # The tools the model call was offered, as tool_definition() normalises them.
    tool_definitions: list[dict[str, Any]] = field(default_factory=list)


class Reader(Protocol):
    name: str
    # The attribute key (or event name) prefixes that mark a span as written in this convention:
    # the GenAI pre-filter passes only spans holding one of the registered readers' prefixes.
    key_prefixes: tuple[str, ...]

    def read(self, span: SpanView) -> SpanReading | None:
        """The span's conversation data in this convention, or None if it is not written in it."""
        ...


# -- helpers shared by the readers ------------------------------------------------------------
MAX_TOOL_DEFINITIONS = 128  # per span: a request lists its tools, a few dozen at most


# The tool definitions read from the latest distinct JSON texts, by the texts' xxh3-128 hash: an
# agent sends the same list with every model call of every conversation, so it is parsed once and
# its definitions are one set of objects wherever they are kept (Conversation.available_tools).
SHARED_TOOL_DEFINITIONS = 64
_TOOL_DEFINITIONS: dict[int, list[dict[str, Any]]] = {}
_TOOL_DEFINITIONS_LOCK = threading.Lock()  # spans may be read on several threads


def tool_definitions(value: Any) -> list[dict[str, Any]]:
    """Tool definitions as the span lists them — a JSON list of OTel GenAI ``{"type": "function",
    "name", "description", "parameters"}`` or OpenAI ``{"type": "function", "function": {…}}`` —
    as ``{"name", "description", "parameters"}``; anything else is skipped. From JSON text, the
    list (not to be changed) is the one read from the same text before, when still kept."""
    if not isinstance(value, str):
        return _tool_definitions(value)
    key = xxhash.xxh3_128_intdigest(value.encode("utf-8", "surrogatepass"))
    with _TOOL_DEFINITIONS_LOCK:
        found = _TOOL_DEFINITIONS.pop(key, None)
        if found is not None:
            _TOOL_DEFINITIONS[key] = found  # now the latest used
            return found
    found = _tool_definitions(value)
    with _TOOL_DEFINITIONS_LOCK:
        if len(_TOOL_DEFINITIONS) >= SHARED_TOOL_DEFINITIONS:
            del _TOOL_DEFINITIONS[next(iter(_TOOL_DEFINITIONS))]
        _TOOL_DEFINITIONS[key] = found
    return found


def _tool_definitions(value: Any) -> list[dict[str, Any]]:
    items = parse_json(value)
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        return []
    found = []
    for item in items[:MAX_TOOL_DEFINITIONS]:
        definition = tool_definition(item)
        if definition is not None:
            found.append(definition)
    return found


def tool_definition(item: Any) -> dict[str, Any] | None:
    item = parse_json(item)
    if isinstance(item, dict) and isinstance(item.get("function"), dict):
        item = item["function"]
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        return None
    description = item.get("description")
    return {
        "name": item["name"],
        "description": description if isinstance(description, str) else "",
        "parameters": item.get("parameters") if isinstance(item.get("parameters"), dict) else None,
    }


def parse_json(value: Any) -> Any:
    """A JSON-string attribute parsed; structured values (already lists/dicts) pass through.
    Text that is not JSON comes back unchanged (callers decide whether that is content)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    elif isinstance(value, Utf8Text):
        value = str(value)
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("[", "{", '"'):
            try:
                return orjson.loads(text)
            except orjson.JSONDecodeError:
                return value
    return value


# Content part types that are the message's text (OpenAI chat, Responses API and Anthropic spellings).
# Only these parts become message text: reasoning ("reasoning", "thinking", "redacted_thinking") is
# not what the user saw.
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})


def is_text_part(kind: object) -> bool:
    """A content part's type that says the part is text (a dict or list is no type, nor hashable)."""
    return isinstance(kind, str) and kind in TEXT_PART_TYPES


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
    if error_type and error_type.isdecimal() and len(error_type) == 3:
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
    if len(names) < len(wanted):
        _name_by_order(messages, start)


def _name_by_order(messages: list[Message], start: int) -> None:
    """Results whose call ids match no call of the history, named after the calls just before them
    that no result's id names, in order, when there are as many of each: an instrumentation that
    writes the calls' item ids and the results' call ids (OpenLLMetry's Responses API wrapper: calls
    ``fc_…``, results ``call_…``). Anything else (a call cut off by a window, results and calls of
    different counts) stays unnamed."""
    answered = {
        m.tool_result.call_id for m in messages if m.tool_result is not None and m.tool_result.call_id
    }
    called = {call.id for m in messages for call in m.tool_calls if call.id}
    index = max(start, 0)
    while index < len(messages):
        if messages[index].role is not Role.TOOL:
            index += 1
            continue
        end = index
        while end < len(messages) and messages[end].role is Role.TOOL:
            end += 1
        orphans = [
            result
            for m in messages[index:end]
            if (result := m.tool_result) is not None
            and result.name is None
            and result.call_id
            and result.call_id not in called
        ]
        calls: list[ToolCall] = []
        before = index - 1
        while before >= 0 and messages[before].role is Role.ASSISTANT:
            calls[:0] = messages[before].tool_calls
            before -= 1
        unanswered = [call for call in calls if call.id not in answered]
        if orphans and len(orphans) == len(unanswered):
            for result, call in zip(orphans, unanswered, strict=True):
                result.name = call.name
        index = end
