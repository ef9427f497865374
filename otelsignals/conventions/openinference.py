"""OpenInference (Arize Phoenix) spans → messages.

OpenInference flattens messages into indexed attributes
(``llm.input_messages.{i}.message.role`` …, see openinference-semantic-conventions
``semconv/trace/__init__.py``) and also records the raw request/response bodies in
``input.value`` / ``output.value``. Instrumentations differ in what they fill in (the Anthropic one
only records role and text; tool use lives in the bodies), so the indexed keys are read first and
the bodies are the fallback (their shapes are read in openinference_messages.py).

Span kinds read here: ``LLM`` (a model call: history in, answer out), ``TOOL`` (a tool execution) and
any other kind that carries indexed messages (no model call then). ``CHAIN``/``AGENT``/``RETRIEVER``…
spans without messages are not conversation data and return None.

The TraceConfig ``hide_*`` settings replace ``input.value``/``output.value`` and message text with
``__REDACTED__`` or drop the message keys altogether (``openinference/instrumentation/config.py``);
either way the reading keeps its structure and says ``content_captured=False``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import lru_cache
from itertools import chain
from typing import Any

from otelsignals.compaction import stored_message_text, stored_result_text
from otelsignals.conventions.base import (
    READ_IN_FULL,
    Histories,
    SpanReading,
    SpanView,
    ToolExecution,
    as_text,
    is_text_part,
    link_tool_names,
    llm_call_of,
    parse_json,
    text_value,
    tool_definitions,
    tool_result_of,
)
from otelsignals.conventions.openinference_messages import (
    REDACTED,
    arguments_of,
    request_messages,
    response_messages,
    role_of,
    text_message,
)
from otelsignals.model import LlmCall, Message, Role, ToolCall, ToolResult

CONVENTION = "openinference"
JSON_MIME = "application/json"

SPAN_KIND = "openinference.span.kind"
INPUT_MESSAGES = "llm.input_messages"
OUTPUT_MESSAGES = "llm.output_messages"

# Bodies bigger than this are not parsed for the fallback: the indexed messages are the primary
# source, and a multi-megabyte body is not worth the latency on the hot path.
MAX_BODY_CHARS = 4 * 1024 * 1024
# The finish reason is the only thing taken from output.value when the indexed messages exist, so
# only small bodies are parsed for it.
MAX_FINISH_REASON_BODY_CHARS = 256 * 1024
# Indexes are small integers; anything longer is garbage (and int() of a huge digit string raises).
MAX_INDEX_DIGITS = 6
MAX_NESTING = 8
# Longest attribute key whose parse is memoised (indexed keys are short; the memo keeps its keys).
MAX_MEMO_KEY = 256


class OpenInferenceReader:
    name = CONVENTION
    key_prefixes: tuple[str, ...] = ("llm.", "openinference.")

    def read(self, span: SpanView) -> SpanReading | None:
        attributes = span.attributes
        kind = _span_kind(span)
        if kind == "TOOL":
            return _read_tool(span)
        has_messages = _has_llm_messages(attributes)
        if kind == "LLM" or (kind is None and (has_messages or "llm.model_name" in attributes)):
            return _read_llm(span)
        if has_messages:
            # CHAIN/AGENT spans that record messages: conversation data, but not a model call, and
            # their input.value/output.value are an application's own values, not chat bodies.
            return _read_llm(span, model_call=False)
        return None


OPENINFERENCE_READER = OpenInferenceReader()


# -- span kinds ---------------------------------------------------------------------------------
def _span_kind(span: SpanView) -> str | None:
    kind = span.attribute_str(SPAN_KIND)
    return kind.strip().upper() if kind else None


def _has_llm_messages(attributes: Mapping[str, Any]) -> bool:
    return any(key.startswith(INPUT_MESSAGES) or key.startswith(OUTPUT_MESSAGES) for key in attributes)


# -- LLM spans ------------------------------------------------------------------------------------
def _read_llm(span: SpanView, model_call: bool = True) -> SpanReading:
    attributes = span.attributes
    span_id = span.span_id

    input_fields, output_fields = _message_fields(span)
    inputs = _indexed_messages(input_fields, INPUT_MESSAGES, Role.USER, span_id, span.histories) or _prompts(
        span
    )
    # The answer is this call's own, never part of a history: read in full.
    outputs = _indexed_messages(
        output_fields, OUTPUT_MESSAGES, Role.ASSISTANT, span_id, READ_IN_FULL
    ) or _choices(span)
    redacted = _redacted(attributes)
    output_body = None
    if model_call:
        # The bodies stand in for missing indexed messages, and for indexed messages that lost their
        # content: older Anthropic instrumentations record only role + text, so a tool-use turn is a
        # bare role there while the request body has it whole. Redacted text is not recovered.
        if not inputs or (not redacted and _has_empty(inputs)):
            inputs = _better(inputs, request_messages, _body(span, "input"), span_id)
        if not outputs or (not redacted and _has_empty(outputs)):
            output_body = _body(span, "output")
            outputs = _better(outputs, response_messages, output_body, span_id)
        elif "llm.finish_reason" not in attributes:
            # Indexed output messages carry no finish reason; the response body's choices do.
            output_body = _body(span, "output", MAX_FINISH_REASON_BODY_CHARS)

    outputs = [m for m in outputs if m.role is Role.ASSISTANT]
    _set_finish_reasons(outputs, span, output_body)
    link_tool_names(inputs)

    return SpanReading(
        convention=CONVENTION,
        input_messages=inputs,
        output_messages=outputs,
        llm_call=_llm_call(span) if model_call else None,
        content_captured=not redacted and _any_content(chain(inputs, outputs)),
        tool_definitions=_offered_tools(span.attributes),
    )


_OFFERED_TOOL = re.compile(r"llm\.tools\.(\d{1,4})\.tool\.json_schema")


def _offered_tools(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    """``llm.tools.{i}.tool.json_schema`` (each an OpenAI tool as JSON), in index order."""
    offered = sorted(
        (int(match.group(1)), value)
        for key, value in attributes.items()
        if key.startswith("llm.tools.") and (match := _OFFERED_TOOL.fullmatch(key))
    )
    return tool_definitions([value for _, value in offered])


def _has_empty(messages: list[Message]) -> bool:
    """Is any message a bare role, without text, tool calls or a tool result?"""
    return any(
        stored_message_text(m) is None
        and not m.tool_calls
        and (m.tool_result is None or stored_result_text(m.tool_result) is None)
        for m in messages
    )


def _better(
    indexed: list[Message], parse: Callable[[Any, bytes], list[Message]], body: Any, span_id: bytes
) -> list[Message]:
    """The messages of a body when there are no indexed ones, or when the body is a JSON request or
    response (not mere text) that yields messages."""
    if not indexed:
        return parse(body, span_id)
    if isinstance(body, (dict, list)):
        return parse(body, span_id) or indexed
    return indexed


def _llm_call(span: SpanView) -> LlmCall:
    call = llm_call_of(span, model=_model_name(span))
    # OpenInference counts tokens under its own keys; the gen_ai.usage.* ones win when both exist.
    if call.input_tokens is None:
        call.input_tokens = span.attribute_int("llm.token_count.prompt")
    if call.output_tokens is None:
        call.output_tokens = span.attribute_int("llm.token_count.completion")
    return call


def _model_name(span: SpanView) -> str | None:
    for key in ("llm.model_name", "llm.response.model_name", "llm.request.model_name"):
        model = span.attribute_str(key)
        if model:
            return model
    params = span.attributes.get("llm.invocation_parameters")
    if isinstance(params, str) and len(params) <= MAX_FINISH_REASON_BODY_CHARS:
        params = parse_json(params)
    if isinstance(params, dict):
        return text_value(params.get("model")) or text_value(params.get("model_name"))
    return None


def _set_finish_reasons(outputs: list[Message], span: SpanView, output_body: Any) -> None:
    """``llm.finish_reason`` when recorded, else the per-choice reasons of the response body."""
    reasons = _body_finish_reasons(output_body)
    fallback = span.attribute_str("llm.finish_reason")
    for position, message in enumerate(outputs):
        if message.finish_reason is None:
            message.finish_reason = reasons.get(position) or fallback


def _body_finish_reasons(body: Any) -> dict[int, str]:
    if not isinstance(body, dict):
        return {}
    choices = body.get("choices")
    if isinstance(choices, list):
        reasons = {}
        for position, choice in enumerate(choices):
            if isinstance(choice, dict) and (reason := text_value(choice.get("finish_reason"))):
                reasons[position] = reason
        return reasons
    reason = text_value(body.get("stop_reason"))  # Anthropic Messages API
    return {0: reason} if reason else {}


def _redacted(attributes: Mapping[str, Any]) -> bool:
    """Did a TraceConfig hide_* setting replace any input/output text with the redaction marker?"""
    if REDACTED not in attributes.values():  # one C-level pass: the common case
        return False
    return any(
        value == REDACTED
        for key, value in attributes.items()
        if key.startswith(("llm.input_messages", "llm.output_messages", "input.", "output."))
    )


def _any_content(messages: Iterable[Message]) -> bool:
    return any(m.content is not None or m.tool_calls for m in messages)


# -- TOOL spans -----------------------------------------------------------------------------------
def _read_tool(span: SpanView) -> SpanReading:
    attributes = span.attributes
    name = span.attribute_str("tool.name")
    call_id = text_value(attributes.get("tool_call.id")) or text_value(attributes.get("tool.id"))
    arguments = _toolarguments_of(span)
    content, output_call_id, output_failed = _tool_output(span)
    call_id = call_id or output_call_id

    result = tool_result_of(span, content, call_id, name)
    if output_failed:
        result.is_error = True
    captured = not _redacted(attributes) and (arguments is not None or content is not None)
    return SpanReading(
        convention=CONVENTION,
        tool_execution=ToolExecution(name=name, call_id=call_id, arguments=arguments, result=result),
        content_captured=captured,
    )


def _toolarguments_of(span: SpanView) -> Any:
    """The call's arguments: ``tool.parameters`` when it holds them, else ``input.value``.

    Some instrumentations put the arguments in ``tool.parameters``; the semantic conventions
    describe it as the tool's parameter schema, so a JSON schema there is skipped.
    """
    parameters = _parsed(span.attributes.get("tool.parameters"))
    if parameters is not None and not _is_json_schema(parameters):
        return parameters
    return _parsed(span.attributes.get("input.value"))


def _parsed(value: Any) -> Any:
    if value is None or value == REDACTED or value == "":
        return None
    if isinstance(value, str) and len(value) > MAX_BODY_CHARS:
        return value
    return parse_json(value)


def _is_json_schema(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == "object" and "properties" in value


def _tool_output(span: SpanView) -> tuple[str | None, str | None, bool]:
    """(result text, tool call id, failed) from ``output.value``.

    LangChain tool spans record the whole ToolMessage as JSON (``content``, ``tool_call_id``,
    ``status``); its content is the result and ``status: error`` marks a failure the span's own
    status does not show (the tool caught the exception and returned it).
    """
    value = span.attributes.get("output.value")
    if value is None or value == REDACTED:
        return None, None, False
    text = as_text(value)
    if not isinstance(value, str) or value.lstrip()[:1] != "{" or len(value) > MAX_BODY_CHARS:
        return text, None, False
    message = parse_json(value)
    if isinstance(message, dict) and message.get("type") == "tool" and "content" in message:
        failed = message.get("status") == "error"
        return as_text(message.get("content")), text_value(message.get("tool_call_id")), failed
    return text, None, False


# -- indexed attributes ---------------------------------------------------------------------------
_MESSAGE_PREFIXES = (INPUT_MESSAGES + ".", OUTPUT_MESSAGES + ".")


def _message_fields(span: SpanView) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The fields of each ``llm.input_messages.{i}`` and ``llm.output_messages.{i}``, in index order.
    The entries of attributes an earlier span of the conversation had too are that span's
    (SpanView.indexed_groups)."""
    attributes = span.attributes
    structured = [attributes.get(prefix) for prefix in (INPUT_MESSAGES, OUTPUT_MESSAGES)]
    if any(isinstance(value, list) for value in structured):
        # Some SDKs send the list as one structured AnyValue rather than flattened keys.
        inputs, outputs = (
            _positions(
                chain(attributes.items(), _flatten(value, prefix) if isinstance(value, list) else ()), prefix
            )
            for value, prefix in zip(structured, (INPUT_MESSAGES, OUTPUT_MESSAGES), strict=True)
        )
        return inputs, outputs

    def locate(key: str) -> tuple[int, int] | None:
        if not key.startswith(_MESSAGE_PREFIXES):
            return None
        group = 0 if key.startswith(_MESSAGE_PREFIXES[0]) else 1
        slot = _slot_of(key, len(_MESSAGE_PREFIXES[group]))
        return None if slot is None else (group, slot[0])

    def fill(entry: dict[str, Any], key: str, value: Any) -> None:
        group = 0 if key.startswith(_MESSAGE_PREFIXES[0]) else 1
        entry[_slot_of(key, len(_MESSAGE_PREFIXES[group]))[1]] = value  # type: ignore[index]  # located

    inputs, outputs = span.indexed_groups(CONVENTION, 2, locate, fill)
    return inputs, outputs


def _positions(items: Iterable[tuple[str, Any]], prefix: str) -> list[dict[str, Any]]:
    groups = _group_indexed(items, prefix)
    return [groups[index] for index in sorted(groups)]


def _indexed_messages(
    positions: list[dict[str, Any]],
    prefix: str,
    default_role: Role,
    span_id: bytes,
    histories: Histories,
) -> list[Message]:
    """The messages of ``{prefix}.{i}.*`` (``positions``: the fields of each index, in order), one
    position of the history per index."""

    def build(fields: dict[str, Any]) -> list[Message]:
        message = _indexed_message(fields, default_role, span_id)
        return [] if message is None else [message]

    return histories.indexed(f"{CONVENTION}:{prefix}", positions, build)


def _group_indexed(items: Iterable[tuple[str, Any]], prefix: str) -> dict[int, dict[str, Any]]:
    """``{"<prefix>.3.message.role": "user"}`` → ``{3: {"message.role": "user"}}``."""
    groups: dict[int, dict[str, Any]] = {}
    dotted = prefix + "."
    start = len(dotted)
    for key, value in items:
        if not key.startswith(dotted):
            continue
        slot = _slot_of(key, start)
        if slot is not None:
            index, rest = slot
            group = groups.get(index)
            if group is None:
                group = groups[index] = {}
            group[rest] = value
    return groups


def _slot_of(key: str, start: int) -> tuple[int, str] | None:
    # Only keys of a sensible length are memoised: the memo must not keep huge strings alive.
    return (
        _index_and_rest(key, start) if len(key) <= MAX_MEMO_KEY else _index_and_rest.__wrapped__(key, start)
    )


@lru_cache(maxsize=1 << 14)
def _index_and_rest(key: str, start: int) -> tuple[int, str] | None:
    """(index, rest) of ``key[start:]`` = ``"{index}.{rest}"``. Memoised: a span resending a long
    history has hundreds of indexed keys, the same ones every call."""
    index, dot, rest = key[start:].partition(".")
    if dot and rest and _is_index(index):
        return int(index), rest
    return None


def _is_index(text: str) -> bool:
    return 0 < len(text) <= MAX_INDEX_DIGITS and text.isascii() and text.isdigit()


def _flatten(value: Any, prefix: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Structured values as the flattened keys the Python SDK would have written."""
    if depth > MAX_NESTING:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(item, f"{prefix}.{key}", depth + 1)
    elif isinstance(value, list) and any(isinstance(item, dict) for item in value):
        for index, item in enumerate(value):
            yield from _flatten(item, f"{prefix}.{index}", depth + 1)
    else:
        yield prefix, value


def _indexed_message(fields: dict[str, Any], default_role: Role, span_id: bytes) -> Message | None:
    role = role_of(fields.get("message.role"), default_role)
    text = _indexed_text(fields)
    tool_calls = _indexed_tool_calls(fields)
    if "message.role" not in fields and text is None and not tool_calls:
        return None
    message = Message(role=role, content=text, tool_calls=tool_calls, span_id=span_id)
    if role is Role.TOOL:
        message.tool_calls = []
        message.tool_result = ToolResult(
            call_id=text_value(fields.get("message.tool_call_id")),
            name=text_value(fields.get("message.name"))
            or text_value(fields.get("message.function_call_name")),
            content=text,
        )
    return message


def _indexed_text(fields: dict[str, Any]) -> str | None:
    content = fields.get("message.content")
    if isinstance(content, str):
        if content and content != REDACTED:
            return content
    elif content is not None:
        return as_text(content)
    parts = []
    for _, part in sorted(_group_indexed(fields.items(), "message.contents").items()):
        part_type = part.get("message_content.type")
        text = part.get("message_content.text")
        if (part_type is None or is_text_part(part_type)) and isinstance(text, str) and text != REDACTED:
            parts.append(text)
    return "\n".join(parts) if parts else None


def _indexed_tool_calls(fields: dict[str, Any]) -> list[ToolCall]:
    calls = []
    for _, call in sorted(_group_indexed(fields.items(), "message.tool_calls").items()):
        name = call.get("tool_call.function.name")
        call_id = call.get("tool_call.id")
        arguments = call.get("tool_call.function.arguments")
        if name is None and call_id is None and arguments is None:
            continue
        calls.append(
            ToolCall(name=text_value(name) or "", arguments=arguments_of(arguments), id=text_value(call_id))
        )
    # The deprecated single function call (OpenAI functions API, LangChain additional_kwargs).
    legacy_name = text_value(fields.get("message.function_call_name"))
    if legacy_name and not calls and fields.get("message.role") not in ("tool", "function"):
        arguments = arguments_of(fields.get("message.function_call_arguments_json"))
        calls.append(ToolCall(name=legacy_name, arguments=arguments))
    return calls


def _prompts(span: SpanView) -> list[Message]:
    """Completions API prompts: ``llm.prompts.{i}.prompt.text`` or a plain list of strings."""
    prompts = span.attributes.get("llm.prompts")
    if isinstance(prompts, list):
        texts = [p for p in prompts if isinstance(p, str)]
    else:
        grouped = _group_indexed(span.attributes.items(), "llm.prompts")
        texts = [t for _, f in sorted(grouped.items()) if isinstance(t := f.get("prompt.text"), str)]
    return [text_message(Role.USER, t, span.span_id) for t in texts]


def _choices(span: SpanView) -> list[Message]:
    """Completions API choices: ``llm.choices.{i}.completion.text``."""
    grouped = _group_indexed(span.attributes.items(), "llm.choices")
    texts = [t for _, f in sorted(grouped.items()) if isinstance(t := f.get("completion.text"), str)]
    return [text_message(Role.ASSISTANT, t, span.span_id) for t in texts]


# -- input.value / output.value -------------------------------------------------------------------
def _body(span: SpanView, which: str, max_chars: int = MAX_BODY_CHARS) -> Any:
    """``input.value``/``output.value``: parsed when its mime type says JSON, else the text.

    OpenInference's default mime type is text/plain, so text that merely looks like JSON stays text.
    """
    value = span.attributes.get(f"{which}.value")
    if value is None or value == REDACTED or value == "":
        return None
    if not isinstance(value, str):
        return value  # a structured AnyValue: already parsed
    if span.attribute_str(f"{which}.mime_type") == JSON_MIME:
        if len(value) > max_chars:
            return None
        parsed = parse_json(value)
        return parsed if isinstance(parsed, (dict, list)) else None
    return value
