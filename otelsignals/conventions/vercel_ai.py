"""Vercel AI SDK telemetry (``experimental_telemetry``) spans → messages.

One ``generateText``/``streamText`` call records (vercel/ai ``packages/ai/src/generate-text/
generate-text.ts``, ``stream-text.ts``, ``execute-tool-call.ts``):

- an outer span ``ai.generateText`` / ``ai.streamText`` / ``ai.generateObject`` / ``ai.streamObject``
  with ``ai.prompt`` = JSON ``{system, prompt, messages}`` as the caller passed them (user-facing
  ModelMessages, before any tool step) and the *last* step's ``ai.response.*``;
- per step an inner model-call span ``….doGenerate`` / ``….doStream`` with ``ai.prompt.messages`` =
  JSON of the provider-level prompt actually sent (system first, the whole history including the
  previous steps' tool calls and results) and that step's ``ai.response.*`` and ``ai.usage.*``;
- per executed tool an ``ai.toolCall`` span with ``ai.toolCall.name/id/args/result``; a failure is
  the span's ERROR status and exception event.

Both levels are read as they are; only the inner spans get an ``llm_call``, which is how the
builder tells the model call (prefer its messages) from the wrapper that repeats them.

Shapes across SDK versions: v4 tool-call parts carry ``args`` and tool results ``result`` (+
``isError``); v5+ renamed them ``input`` and ``output``, with ``output`` a typed
``{type: text|json|error-text|error-json|content|execution-denied, value}``. ``ai.response.toolCalls``
holds ``args``/``input`` as a JSON *string*. Usage is ``ai.usage.promptTokens/completionTokens``
(v4) or ``ai.usage.inputTokens/outputTokens`` (v5+). With ``recordInputs``/``recordOutputs`` off
the prompt/response keys are simply absent. Newer SDKs also write ``gen_ai.input.messages`` on the
same spans; the OTel GenAI reader, which runs first, reads that form.
"""

from __future__ import annotations

from typing import Any

from otelsignals.conventions.base import (
    SpanReading,
    SpanView,
    ToolExecution,
    as_text,
    link_tool_names,
    llm_call_of,
    parse_json,
    text_value,
    tool_result_of,
)
from otelsignals.conventions.decoding import Utf8Text
from otelsignals.model import LlmCall, Message, Role, ToolCall, ToolResult

CONVENTION = "vercel_ai"

TOOL_CALL_OPERATION = "ai.toolCall"
MODEL_CALL_SUFFIXES = (".doGenerate", ".doStream")
# ai.embed / ai.embedMany (and their doEmbed spans) carry no conversation.
EMBED_MARKER = ".embed"

# Prompt JSON above this size (characters, or bytes of a decoding.Utf8Text) is not parsed: it would
# cost more latency than it is worth here.
MAX_JSON_CHARS = 8 * 1024 * 1024

_ROLES = {"system": Role.SYSTEM, "user": Role.USER, "assistant": Role.ASSISTANT, "tool": Role.TOOL}
# Typed tool outputs (v5+): which ones report a failure.
_ERROR_OUTPUT_TYPES = frozenset({"error-text", "error-json", "execution-denied"})


PROMPT = "ai.prompt"
PROMPT_MESSAGES = "ai.prompt.messages"


class VercelAiReader:
    name = CONVENTION
    key_prefixes: tuple[str, ...] = ("ai.",)

    def read(self, span: SpanView) -> SpanReading | None:
        operation = _operation(span)
        if operation is None or EMBED_MARKER in operation.lower():
            return None
        if operation == TOOL_CALL_OPERATION or "ai.toolCall.name" in span.attributes:
            return _read_tool(span)
        model_call = operation.endswith(MODEL_CALL_SUFFIXES)
        inputs = _prompt_history(span) if model_call else _outer_prompt(span)
        outputs = _response_messages(span)
        return SpanReading(
            convention=CONVENTION,
            input_messages=inputs,
            output_messages=outputs,
            llm_call=_llm_call(span) if model_call else None,
            content_captured=_any_content(inputs) or _any_content(outputs),
        )


VERCEL_AI_READER = VercelAiReader()


def _operation(span: SpanView) -> str | None:
    """The AI SDK operation (``ai.generateText.doGenerate`` …), or None if the span is not one."""
    operation = span.attribute_str("ai.operationId")
    if operation is not None:
        return operation
    # Older SDKs (before ai.operationId) still name the span after the operation.
    if span.name.startswith("ai.") and any(key.startswith("ai.") for key in span.attributes):
        return span.name
    return None


# -- model calls ----------------------------------------------------------------------------------
def _llm_call(span: SpanView) -> LlmCall:
    model = (
        span.attribute_str("ai.response.model")
        or span.attribute_str("gen_ai.response.model")
        or span.attribute_str("ai.model.id")
    )
    call = llm_call_of(span, model=model)
    if call.input_tokens is None:
        call.input_tokens = _first_int(span, "ai.usage.inputTokens", "ai.usage.promptTokens")
    if call.output_tokens is None:
        call.output_tokens = _first_int(span, "ai.usage.outputTokens", "ai.usage.completionTokens")
    return call


def _first_int(span: SpanView, *keys: str) -> int | None:
    for key in keys:
        value = span.attribute_int(key)
        if value is not None:
            return value
    return None


def _response_messages(span: SpanView) -> list[Message]:
    """The step's answer: ``ai.response.text`` (or ``.object``) and ``ai.response.toolCalls``."""
    attributes = span.attributes
    text = attributes.get("ai.response.text")
    if not isinstance(text, str):
        text = attributes.get("ai.response.object")  # generateObject: the JSON object as text
    tool_calls = _response_tool_calls(_json(attributes.get("ai.response.toolCalls")))
    if not isinstance(text, str) and not tool_calls:
        return []
    message = Message(
        role=Role.ASSISTANT,
        content=text if isinstance(text, str) else None,
        tool_calls=tool_calls,
        span_id=span.span_id,
        finish_reason=span.attribute_str("ai.response.finishReason"),
    )
    return [message]


def _response_tool_calls(value: Any) -> list[ToolCall]:
    if not isinstance(value, list):
        return []
    return [_tool_call(item) for item in value if isinstance(item, dict)]


# -- tool executions ------------------------------------------------------------------------------
def _read_tool(span: SpanView) -> SpanReading:
    attributes = span.attributes
    name = span.attribute_str("ai.toolCall.name")
    call_id = text_value(attributes.get("ai.toolCall.id"))
    raw_arguments = _first_present(attributes, "ai.toolCall.args", "ai.toolCall.input")
    raw_result = _first_present(attributes, "ai.toolCall.result", "ai.toolCall.output")
    arguments = _json(raw_arguments) if raw_arguments is not None else None
    # The result is recorded as JSON.stringify(output): keep that text, except that a JSON string
    # ("\"sunny\"") is unwrapped to the text it encodes.
    content = raw_result
    if isinstance(raw_result, str) and raw_result.startswith('"'):
        decoded = parse_json(raw_result)
        content = decoded if isinstance(decoded, str) else raw_result
    result = tool_result_of(span, content, call_id, name)
    return SpanReading(
        convention=CONVENTION,
        tool_execution=ToolExecution(name=name, call_id=call_id, arguments=arguments, result=result),
        content_captured=raw_arguments is not None or raw_result is not None,
    )


def _first_present(attributes: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        value = attributes.get(key)
        if value is not None:
            return value
    return None


# -- prompts --------------------------------------------------------------------------------------
def _prompt_messages(prompt: Any, span_id: bytes) -> list[Message]:
    """The outer span's ``ai.prompt``: ``{system?, prompt?, messages?}`` as the caller passed them."""
    if not isinstance(prompt, dict):
        return []
    messages: list[Message] = []
    system = prompt.get("system")
    if isinstance(system, str) and system:
        messages.append(Message(role=Role.SYSTEM, content=system, span_id=span_id))
    elif isinstance(system, (list, dict)):  # v5+: system may be SystemModelMessage(s)
        messages.extend(_messages(system if isinstance(system, list) else [system], span_id))
    text_prompt = prompt.get("prompt")
    if isinstance(text_prompt, str):
        messages.append(Message(role=Role.USER, content=text_prompt, span_id=span_id))
    elif isinstance(text_prompt, list):  # v5+: prompt may be a list of messages
        messages.extend(_messages(text_prompt, span_id))
    messages.extend(_messages(prompt.get("messages"), span_id))
    link_tool_names(messages)
    return messages


def _prompt_history(span: SpanView) -> list[Message]:
    """``ai.prompt.messages``: the history, one JSON array."""
    value = span.attributes.get(PROMPT_MESSAGES)
    if isinstance(value, str | Utf8Text) and len(value) <= MAX_JSON_CHARS:
        return span.histories.messages(PROMPT_MESSAGES, value, lambda parsed: _messages(parsed, span.span_id))
    return _messages(_json(value), span.span_id)


def _outer_prompt(span: SpanView) -> list[Message]:
    """The outer span's ``ai.prompt``. The SDK writes it as ``{system, prompt, messages}``, each an
    array of messages read in that order (or text): reading it amounts to reading its arrays in
    order, which is what lets its history end in ``]}`` (base.Histories)."""
    value = span.attributes.get(PROMPT)
    if isinstance(value, str | Utf8Text) and len(value) <= MAX_JSON_CHARS:
        return span.histories.messages(
            PROMPT,
            value,
            lambda parsed: _prompt_messages(parsed, span.span_id),
            items=lambda further: _messages(further, span.span_id),
            closing="]}",
        )
    return _prompt_messages(_json(value), span.span_id)


def _messages(value: Any, span_id: bytes) -> list[Message]:
    """A list of AI SDK messages (ModelMessage or the provider-level prompt: same parts)."""
    if not isinstance(value, list):
        return []
    messages: list[Message] = []
    for item in value:
        if isinstance(item, dict):
            messages.extend(_message(item, span_id))
    link_tool_names(messages)
    return messages


def _message(item: dict[str, Any], span_id: bytes) -> list[Message]:
    role = _ROLES.get(raw_role) if isinstance(raw_role := item.get("role"), str) else None
    if role is None:
        return []
    content = item.get("content")
    if role is Role.TOOL:
        parts = content if isinstance(content, list) else []
        return [_tool_result_message(p, span_id) for p in parts if _part_type(p) == "tool-result"]
    tool_calls = []
    if role is Role.ASSISTANT and isinstance(content, list):
        tool_calls = [_tool_call(p) for p in content if _part_type(p) == "tool-call"]
    return [Message(role=role, content=_text(content), tool_calls=tool_calls, span_id=span_id)]


def _text(content: Any) -> str | None:
    """Message text: a string as is, the ``text`` parts of a part list joined with newlines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [p["text"] for p in content if _part_type(p) == "text" and isinstance(p.get("text"), str)]
    return "\n".join(texts) if texts else None


def _tool_call(part: dict[str, Any]) -> ToolCall:
    arguments = part["input"] if "input" in part else part.get("args")  # v5+ input, v4 args
    return ToolCall(
        name=text_value(part.get("toolName")) or "",
        arguments=_json(arguments),
        id=text_value(part.get("toolCallId")),
    )


def _tool_result_message(part: dict[str, Any], span_id: bytes) -> Message:
    if "output" in part:  # v5+
        content, failed, error_type = _typed_output(part["output"])
    else:  # v4
        content, failed, error_type = as_text(part.get("result")), part.get("isError") is True, None
    result = ToolResult(
        call_id=text_value(part.get("toolCallId")),
        name=text_value(part.get("toolName")),
        content=content,
        is_error=failed,
        error_type=error_type,
    )
    return Message(role=Role.TOOL, content=content, tool_result=result, span_id=span_id)


def _typed_output(output: Any) -> tuple[str | None, bool, str | None]:
    """(text, failed, error type) of a v5+ tool output ``{type, value}`` (older: the raw value)."""
    if not isinstance(output, dict) or not isinstance(output.get("type"), str):
        return as_text(output), False, None
    output_type = output["type"]
    failed = output_type in _ERROR_OUTPUT_TYPES
    if output_type == "execution-denied":  # the user refused the call: it never ran
        return text_value(output.get("reason")) or "execution denied", True, output_type
    value = output.get("value")
    if output_type == "content" and isinstance(value, list):
        return _text(value), failed, None
    if "value" not in output:
        return as_text(output), False, None
    return as_text(value), failed, None


def _part_type(part: Any) -> str | None:
    kind = part.get("type") if isinstance(part, dict) else None
    return kind if isinstance(kind, str) else None


# -- small helpers --------------------------------------------------------------------------------
def _json(value: Any) -> Any:
    """A JSON-string attribute parsed (structured values pass through); oversized text is skipped."""
    if isinstance(value, str | Utf8Text) and len(value) > MAX_JSON_CHARS:
        return None
    return parse_json(value)


def _any_content(messages: list[Message]) -> bool:
    return any(m.content is not None or m.tool_calls for m in messages)
