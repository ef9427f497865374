"""Tool execution spans in the OTel GenAI form.

Source checked: open-telemetry/semantic-conventions ``docs/gen-ai/gen-ai-spans.md`` (execute tool
span: ``gen_ai.operation.name = execute_tool``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``, ``error.type``); pydantic/pydantic-ai
``pydantic_ai/_tool_manager.py`` and ``_instrumentation.py``, whose ``execute_tool {name}`` spans
(instrumentation version 3+) carry the same attributes but no ``gen_ai.operation.name``;
open-telemetry/opentelemetry-python-contrib ``opentelemetry-instrumentation-google-genai``
``tool_call_wrapper.py``, whose ``execute_tool {name}`` spans (a wrapped Python tool) carry the
operation and tool name but the call in code attributes: each argument as
``code.function.parameters.<param>.value`` with its Python type name in ``….type``, the return value
as ``code.function.return.value`` with ``code.function.return.type``; no call id. A value is a
primitive or a list of primitives of one type as given, anything else as JSON text (``null`` for
None), or as its ``repr`` when it is no dict, list or object with fields; the values are recorded
only with content capture on, the types always. strands-agents/sdk-python ``telemetry/tracer.py``
(without the ``gen_ai_latest_experimental`` opt-in): the call in span events, a
``gen_ai.tool.message`` event whose ``content`` is the JSON of the tool's input and a closing
``gen_ai.choice`` event whose ``message`` is the JSON of the result's Bedrock content blocks, each
with the call id as ``id``; the result's status as ``gen_ai.tool.status`` (``success``/``error``),
the span itself failing only when the tool raised.

How the tool failed comes from the span itself (status, ``error.type``, exception events, HTTP
status) via :func:`base.tool_result_of`.
"""

from __future__ import annotations

from typing import Any

from otelsignals.conventions.base import (
    EventView,
    SpanReading,
    SpanView,
    ToolExecution,
    parse_json,
    tool_result_of,
)
from otelsignals.conventions.genai import arguments_of, bedrock_result_content, id_of

OPERATION = "gen_ai.operation.name"
TOOL_NAME = "gen_ai.tool.name"
CALL_ID = "gen_ai.tool.call.id"
CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
CALL_RESULT = "gen_ai.tool.call.result"
SPAN_NAME_PREFIX = "execute_tool"
# The call as code attributes (google-genai's tool wrapper), read when the GenAI ones are absent.
CODE_PARAMETER_PREFIX = "code.function.parameters."
CODE_VALUE_SUFFIX = ".value"
CODE_TYPE_SUFFIX = ".type"
CODE_RETURN_VALUE = "code.function.return.value"
CODE_RETURN_TYPE = "code.function.return.type"
# The shortest parameter value key: the prefix, a one-character name, the suffix.
_SHORTEST_PARAMETER_KEY = len(CODE_PARAMETER_PREFIX) + 1 + len(CODE_VALUE_SUFFIX)
# The call as span events (Strands Agents), read when neither the GenAI nor the code attributes hold it.
ARGUMENTS_EVENT = "gen_ai.tool.message"
ARGUMENTS_EVENT_KEY = "content"
RESULT_EVENT = "gen_ai.choice"
RESULT_EVENT_KEY = "message"
# The result's status as Strands writes it: "error" when the tool returned a failed result.
TOOL_STATUS = "gen_ai.tool.status"


def is_tool_span(span: SpanView) -> bool:
    operation = span.attribute_str(OPERATION)
    if operation is not None:
        return operation == "execute_tool"
    # No operation name (Pydantic AI): a named tool with the execute_tool span name or call payloads.
    return TOOL_NAME in span.attributes and (
        span.name.startswith(SPAN_NAME_PREFIX)
        or CALL_ARGUMENTS in span.attributes
        or CALL_RESULT in span.attributes
    )


def tool_name_of(span: SpanView) -> str | None:
    name = span.attribute_str(TOOL_NAME)
    if name is None and span.name.startswith(SPAN_NAME_PREFIX + " "):
        name = span.name[len(SPAN_NAME_PREFIX) + 1 :].strip() or None
    return name


def code_argument_of(value: Any, type_name: Any) -> Any:
    """An argument google-genai's tool wrapper recorded, as the tool got it where the recorded type
    says so. A text whose type is not ``str`` is the JSON the wrapper wrote for a dict, list or
    object (read back, so that the arguments compare with the model's call, whose JSON arguments
    are read as objects too) or for None; a text of type ``str`` (or of no recorded type) stays
    text even when it looks like JSON, since the tool was given text. A ``repr`` or a JSON text cut
    by an attribute length limit stays text."""
    if not isinstance(value, str) or type_name is None or type_name == "str":
        return value
    if type_name == "NoneType" and value == "null":
        return None
    return parse_json(value) if value[:1] in ("{", "[") else value


def code_arguments_of(attributes: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments recorded as ``code.function.parameters.<param>.value``, by parameter name;
    None when no value was recorded (content capture off, or a tool without parameters)."""
    arguments: dict[str, Any] = {}
    for key, value in attributes.items():
        # The name is what lies between the prefix and the last suffix: a parameter called "value"
        # or "type" is read from "….value.value" right, and its "….value.type" is not a value.
        if (
            len(key) >= _SHORTEST_PARAMETER_KEY
            and key.startswith(CODE_PARAMETER_PREFIX)
            and key.endswith(CODE_VALUE_SUFFIX)
        ):
            name = key[len(CODE_PARAMETER_PREFIX) : -len(CODE_VALUE_SUFFIX)]
            type_name = attributes.get(CODE_PARAMETER_PREFIX + name + CODE_TYPE_SUFFIX)
            arguments[name] = code_argument_of(value, type_name)
    return arguments or None


def code_result_of(attributes: dict[str, Any]) -> Any:
    """The return value recorded as ``code.function.return.value``, as recorded (a result is read as
    text, so JSON text stays the text the wrapper wrote); None when it was not recorded or the tool
    returned None (no result text, rather than "null")."""
    value = attributes.get(CODE_RETURN_VALUE)
    if value == "null" and attributes.get(CODE_RETURN_TYPE) == "NoneType":
        return None
    return value


def call_event_value(events: list[EventView], name: str, key: str, call_id: str | None) -> Any:
    """``key`` of the latest event ``name`` that holds it and is of this call (its ``id`` absent or
    the span's call id); None when there is none."""
    for event in reversed(events):
        if event.name == name and key in event.attributes:
            event_id = id_of(event.attributes.get("id"))
            if event_id is None or call_id is None or event_id == call_id:
                return event.attributes[key]
    return None


class ToolsReader:
    name = "tools"
    key_prefixes: tuple[str, ...] = ("gen_ai.",)

    def read(self, span: SpanView) -> SpanReading | None:
        if not is_tool_span(span):
            return None
        attributes = span.attributes
        name = tool_name_of(span)
        call_id = id_of(attributes.get(CALL_ID))
        raw_arguments = attributes.get(CALL_ARGUMENTS)
        raw_result = attributes.get(CALL_RESULT)
        # The GenAI attributes win; the code attributes, then the events, stand in for each one that
        # is absent.
        if raw_arguments is not None:
            arguments = arguments_of(raw_arguments)
        else:
            arguments = code_arguments_of(attributes)
            if arguments is None and span.events:
                event_arguments = call_event_value(span.events, ARGUMENTS_EVENT, ARGUMENTS_EVENT_KEY, call_id)
                arguments = None if event_arguments is None else arguments_of(event_arguments)
        if raw_result is not None:
            result = raw_result
            result_recorded = True
        elif CODE_RETURN_VALUE in attributes or not span.events:
            result = code_result_of(attributes)
            result_recorded = CODE_RETURN_VALUE in attributes
        else:
            result = call_event_value(span.events, RESULT_EVENT, RESULT_EVENT_KEY, call_id)
            result_recorded = result is not None
            result = bedrock_result_content(result)
        tool_result = tool_result_of(span, result, call_id, name)
        if not tool_result.is_error and attributes.get(TOOL_STATUS) == "error":
            # The tool gave back a failed result without raising: the span's status says nothing.
            tool_result.is_error = True
            tool_result.error_message = tool_result.content
        execution = ToolExecution(name=name, call_id=call_id, arguments=arguments, result=tool_result)
        return SpanReading(
            convention=self.name,
            tool_execution=execution,
            content_captured=arguments is not None or result_recorded,
        )


TOOLS_READER = ToolsReader()
