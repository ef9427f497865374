"""Pydantic AI's own instrumentation, where it differs from the OTel GenAI attributes (genai.py reads
the ``gen_ai.input.messages`` / ``gen_ai.output.messages`` its chat spans carry from version 2 on, and
tools.py its ``execute_tool`` spans from version 3 on).

Sources checked (pydantic/pydantic-ai ``pydantic_ai_slim/pydantic_ai/``): ``models/instrumented.py``
(``messages_to_otel_events``, ``messages_to_otel_messages``, ``event_to_dict``), ``messages.py``
(``otel_event``, ``otel_events``, ``otel_message_parts``), ``agent/__init__.py``
(``_run_span_end_attributes``), ``_instrumentation.py`` (``InstrumentationNames``),
``_tool_manager.py``.

- Version 1: chat spans carry ``events``, a JSON list of event dicts ``{"event.name":
  "gen_ai.user.message", **body, "gen_ai.system": ...}`` with the answer as a ``gen_ai.choice``
  ``{index, message}``; the agent run span carries ``all_messages_events`` (the same dicts for the
  whole run) and ``final_result``. Assistant content may be a list of ``{kind: text|thinking, text}``.
- Version 2+: the agent run span carries ``pydantic_ai.all_messages``, the run's history in the OTel
  shape (tool results are ``tool_call_response`` parts with ``id``, ``name``, ``result`` inside
  ``user`` messages; reasoning is a ``thinking`` part), plus ``gen_ai.system_instructions`` and
  ``final_result``. Histories serialised as native ``ModelMessage`` JSON (``{kind, parts: [{part_kind:
  user-prompt|system-prompt|text|tool-call|tool-return|retry-prompt|thinking}]}``) are read too.
- Tool spans up to version 2: named ``running tool``, with ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``, ``tool_arguments``, ``tool_response`` and ``logfire.msg`` = ``running tool:
  {name}``. When the tool asks the model to retry, the span records the exception and the retry prompt
  as the response.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otelsignals.conventions.base import (
    SpanReading,
    SpanView,
    ToolExecution,
    as_text,
    llm_call_of,
    parse_json,
    tool_result_of,
)
from otelsignals.conventions.genai import (
    CHOICE_EVENT,
    SYSTEM_INSTRUCTIONS,
    MessageBuilder,
    arguments_of,
    has_content,
    id_of,
    link_tool_names,
    messages_of_events,
    name_of,
    otel_message,
    role_of,
    system_message_of,
    text_of,
    tool_call_of,
    tool_message,
)
from otelsignals.model import Message, Role

ALL_MESSAGES = "pydantic_ai.all_messages"
ALL_MESSAGES_EVENTS = "all_messages_events"
CHAT_EVENTS = "events"
FINAL_RESULT = "final_result"
TOOL_SPAN_NAME = "running tool"
LOGFIRE_MSG = "logfire.msg"
# Version 2 names first, then the OTel names version 3+ uses on the same spans.
TOOL_ARGUMENTS = ("tool_arguments", "gen_ai.tool.call.arguments")
TOOL_RESPONSE = ("tool_response", "gen_ai.tool.call.result")
EVENT_FOR_ROLE: dict[Role, str] = {
    Role.SYSTEM: "gen_ai.system.message",
    Role.USER: "gen_ai.user.message",
    Role.ASSISTANT: "gen_ai.assistant.message",
    Role.TOOL: "gen_ai.tool.message",
}


# -- tool spans -------------------------------------------------------------------------------
def is_tool_span(span: SpanView) -> bool:
    attributes = span.attributes
    if "tool_arguments" in attributes or "tool_response" in attributes or span.name == TOOL_SPAN_NAME:
        return True
    message = span.attribute_str(LOGFIRE_MSG)
    return message is not None and message.startswith(TOOL_SPAN_NAME)


def _first_present(attributes: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    return next((attributes[key] for key in keys if key in attributes), None)


def tool_reading(span: SpanView, convention: str) -> SpanReading:
    attributes = span.attributes
    name = span.attribute_str("gen_ai.tool.name")
    if name is None:
        message = span.attribute_str(LOGFIRE_MSG) or ""
        name = message.partition(":")[2].strip() or None
    call_id = id_of(attributes.get("gen_ai.tool.call.id"))
    raw_arguments = _first_present(attributes, TOOL_ARGUMENTS)
    raw_response = _first_present(attributes, TOOL_RESPONSE)
    execution = ToolExecution(
        name=name,
        call_id=call_id,
        arguments=None if raw_arguments is None else arguments_of(raw_arguments),
        result=tool_result_of(span, raw_response, call_id, name),
    )
    return SpanReading(
        convention=convention,
        tool_execution=execution,
        content_captured=raw_arguments is not None or raw_response is not None,
    )


# -- message histories ------------------------------------------------------------------------
def _retry_message(part: Mapping[str, Any], span_id: bytes) -> Message:
    content = part.get("content")
    tool_name = name_of(part.get("tool_name"))
    if tool_name is None:
        # Output-validation feedback, sent to the model as a user message (the OTel form cannot tell
        # it from the user either). Not SYSTEM: the conversation keeps one system prompt, the first.
        text = content if content is None or isinstance(content, str) else as_text(content)
        return Message(Role.USER, content=text, span_id=span_id)
    # A list is pydantic's validation errors (bad arguments); a string is a ModelRetry from the tool.
    error_type = "ValidationError" if isinstance(content, list) else "ModelRetry"
    call_id = id_of(part.get("tool_call_id"))
    return tool_message(span_id, call_id, tool_name, content, is_error=True, error_type=error_type)


def native_messages(item: Mapping[str, Any], span_id: bytes) -> list[Message]:
    """One native ``ModelRequest`` / ``ModelResponse`` (parts with ``part_kind``)."""
    speaker = Role.ASSISTANT if item.get("kind") == "response" else Role.USER
    builder = MessageBuilder(span_id, name_of(item.get("finish_reason")))
    for part in item.get("parts") or []:
        if not isinstance(part, Mapping):
            continue
        kind = part.get("part_kind")
        if kind == "system-prompt":
            builder.text(Role.SYSTEM, text_of(part.get("content")))
        elif kind == "user-prompt":
            builder.text(Role.USER, text_of(part.get("content")))
        elif kind == "text":
            builder.text(speaker, text_of(part.get("content")))
        elif kind in ("tool-call", "builtin-tool-call"):
            builder.call(Role.ASSISTANT, tool_call_of(part))
        elif kind in ("tool-return", "builtin-tool-return"):
            call_id, name = id_of(part.get("tool_call_id")), name_of(part.get("tool_name"))
            builder.add(tool_message(span_id, call_id, name, part.get("content")))
        elif kind == "retry-prompt":
            builder.add(_retry_message(part, span_id))
        # thinking and file parts: not visible text.
    return builder.done()


def history_of(value: Any, span_id: bytes) -> list[Message]:
    """``pydantic_ai.all_messages``: OTel-shaped messages, or native ``ModelMessage`` JSON."""
    parsed = parse_json(value)
    if isinstance(parsed, str):
        return [Message(Role.USER, content=parsed, span_id=span_id)] if parsed.strip() else []
    if not isinstance(parsed, list):
        return []
    messages: list[Message] = []
    for item in parsed:
        if not isinstance(item, Mapping):
            continue
        parts = item.get("parts")
        if isinstance(parts, list) and any(isinstance(p, Mapping) and "part_kind" in p for p in parts):
            messages.extend(native_messages(item, span_id))
        else:
            messages.extend(otel_message(item, span_id, Role.USER, output=True))
    return messages


def event_pairs(value: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """Version 1 event dicts as (event name, body) pairs; the name falls back to the role's event."""
    parsed = parse_json(value)
    if not isinstance(parsed, list):
        return []
    pairs: list[tuple[str, Mapping[str, Any]]] = []
    for item in parsed:
        if not isinstance(item, Mapping):
            continue
        name = item.get("event.name")
        if not isinstance(name, str):
            # Versions that set the name as the LogRecord's event_name lose it in event_to_dict: every
            # message body has its role, and the choice is the one with a "message".
            role = role_of(item.get("role"))
            if role is not None:
                name = EVENT_FOR_ROLE[role]
            elif "message" in item:
                name = CHOICE_EVENT
            else:
                continue
        pairs.append((name, item))
    return pairs


def split_answer(messages: list[Message]) -> tuple[list[Message], list[Message]]:
    """(history, answer): the answer is the run of assistant messages the history ends with."""
    cut = len(messages)
    while cut > 0 and messages[cut - 1].role is Role.ASSISTANT:
        cut -= 1
    return messages[:cut], messages[cut:]


class PydanticAiReader:
    name = "pydantic_ai"
    key_prefixes: tuple[str, ...] = ("gen_ai.", "pydantic_ai.")

    def read(self, span: SpanView) -> SpanReading | None:
        attributes = span.attributes
        if is_tool_span(span):
            return tool_reading(span, self.name)
        if ALL_MESSAGES in attributes:
            return self._agent_run(span, history_of(attributes[ALL_MESSAGES], span.span_id))
        if ALL_MESSAGES_EVENTS in attributes:
            inputs, outputs = messages_of_events(event_pairs(attributes[ALL_MESSAGES_EVENTS]), span.span_id)
            return self._agent_run(span, inputs + outputs)
        pairs = event_pairs(attributes[CHAT_EVENTS]) if CHAT_EVENTS in attributes else []
        if pairs:
            inputs, outputs = messages_of_events(pairs, span.span_id)
            link_tool_names(inputs + outputs)
            return SpanReading(
                convention=self.name,
                input_messages=inputs,
                output_messages=outputs,
                llm_call=llm_call_of(span),
                content_captured=has_content(inputs) or has_content(outputs),
            )
        return None

    def _agent_run(self, span: SpanView, history: list[Message]) -> SpanReading:
        # The whole run, not one model call: no llm_call (the chat spans under it carry those).
        attributes = span.attributes
        if SYSTEM_INSTRUCTIONS in attributes and not (history and history[0].role is Role.SYSTEM):
            system = system_message_of(attributes[SYSTEM_INSTRUCTIONS], span.span_id)
            if system is not None:
                history.insert(0, system)
        inputs, outputs = split_answer(history)
        final = attributes.get(FINAL_RESULT)
        if final is not None and not any(m.content for m in outputs):
            # Output through an output tool: the answer is the final result, not a text part.
            text = final if isinstance(final, str) else as_text(final)
            if text:
                outputs.append(Message(Role.ASSISTANT, content=text, span_id=span.span_id))
        link_tool_names(inputs + outputs)
        return SpanReading(
            convention=self.name,
            input_messages=inputs,
            output_messages=outputs,
            content_captured=has_content(inputs) or has_content(outputs),
        )


PYDANTIC_AI_READER = PydanticAiReader()
