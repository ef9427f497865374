"""Tool execution spans in the OTel GenAI form.

Source checked: open-telemetry/semantic-conventions ``docs/gen-ai/gen-ai-spans.md`` (execute tool
span: ``gen_ai.operation.name = execute_tool``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``, ``error.type``); pydantic/pydantic-ai
``pydantic_ai/_tool_manager.py`` and ``_instrumentation.py``, whose ``execute_tool {name}`` spans
(instrumentation version 3+) carry the same attributes but no ``gen_ai.operation.name``.

How the tool failed comes from the span itself (status, ``error.type``, exception events, HTTP
status) via :func:`base.tool_result_of`.
"""

from __future__ import annotations

from otelsignals.conventions.base import SpanReading, SpanView, ToolExecution, tool_result_of
from otelsignals.conventions.genai import arguments_of, id_of

OPERATION = "gen_ai.operation.name"
TOOL_NAME = "gen_ai.tool.name"
CALL_ID = "gen_ai.tool.call.id"
CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
CALL_RESULT = "gen_ai.tool.call.result"
SPAN_NAME_PREFIX = "execute_tool"


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
        execution = ToolExecution(
            name=name,
            call_id=call_id,
            arguments=None if raw_arguments is None else arguments_of(raw_arguments),
            result=tool_result_of(span, raw_result, call_id, name),
        )
        return SpanReading(
            convention=self.name,
            tool_execution=execution,
            content_captured=raw_arguments is not None or raw_result is not None,
        )


TOOLS_READER = ToolsReader()
