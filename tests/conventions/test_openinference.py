"""OpenInference reader: spans shaped as the Arize OpenInference instrumentations write them.

Shapes checked against Arize-ai/openinference:
- python/openinference-semantic-conventions/src/openinference/semconv/trace/__init__.py (keys)
- python/instrumentation/openinference-instrumentation-openai/.../_request_attributes_extractor.py
  and _response_attributes_extractor.py (indexed messages, tool calls, token counts, JSON bodies)
- python/instrumentation/openinference-instrumentation-anthropic/.../_wrappers.py (role + text only,
  tool use only in input.value/output.value)
- python/openinference-instrumentation/src/openinference/instrumentation/config.py (__REDACTED__)
- spec/tool_calling.md (tool results as role "tool" input messages with message.tool_call_id)
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from otelsignals.conventions import READERS
from otelsignals.conventions.base import SpanView
from otelsignals.conventions.openinference import OPENINFERENCE_READER
from otelsignals.conventions.span_decoder import span_view
from otelsignals.model import Role
from tests.conventions.spans import any_value as _any

SPAN_ID = b"\x01\x02\x03\x04\x05\x06\x07\x08"


# -- span building (local helper: protobuf span → SpanView) ----------------------------------------


def make_span(
    attributes: dict[str, Any],
    *,
    name: str = "ChatCompletion",
    status: int = Status.STATUS_CODE_UNSET,
    status_message: str = "",
    events: list[tuple[str, dict[str, Any]]] | None = None,
) -> SpanView:
    span = Span(
        trace_id=b"\x11" * 16,
        span_id=SPAN_ID,
        name=name,
        start_time_unix_nano=1_000,
        end_time_unix_nano=2_000,
        status=Status(code=status, message=status_message),
    )
    span.attributes.extend(KeyValue(key=k, value=_any(v)) for k, v in attributes.items())
    for event_name, event_attributes in events or []:
        event = span.events.add(name=event_name, time_unix_nano=1_500)
        event.attributes.extend(KeyValue(key=k, value=_any(v)) for k, v in event_attributes.items())
    return span_view(span, {"service.name": "test-agent"})


def _messages(prefix: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Flatten messages the way the OpenInference Python SDK does (one attribute per leaf)."""
    out: dict[str, Any] = {}
    for i, message in enumerate(messages):
        for key, value in message.items():
            if key == "tool_calls":
                for j, call in enumerate(value):
                    for ck, cv in call.items():
                        out[f"{prefix}.{i}.message.tool_calls.{j}.tool_call.{ck}"] = cv
            elif key == "contents":
                for k, part in enumerate(value):
                    for pk, pv in part.items():
                        out[f"{prefix}.{i}.message.contents.{k}.message_content.{pk}"] = pv
            else:
                out[f"{prefix}.{i}.message.{key}"] = value
    return out


def _llm(**attributes: Any) -> dict[str, Any]:
    return {"openinference.span.kind": "LLM", "llm.system": "openai", "llm.provider": "openai", **attributes}


# -- LLM spans: indexed messages -------------------------------------------------------------------
def test_multi_turn_history_with_tool_calls_and_results_paired_by_id() -> None:
    weather_args = '{"city": "Paris"}'
    attributes = _llm(
        **{"llm.model_name": "gpt-4o-2024-08-06", "output.mime_type": "application/json"},
        **_messages(
            "llm.input_messages",
            [
                {"role": "system", "content": "You are a travel assistant."},
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "call_1", "function.name": "get_weather", "function.arguments": weather_args},
                        {"id": "call_2", "function.name": "get_weather", "function.arguments": "not json"},
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
                {
                    "role": "tool",
                    "tool_call_id": "call_2",
                    "content": "error: unknown city",
                    "name": "weather",
                },
            ],
        ),
        **_messages("llm.output_messages", [{"role": "assistant", "content": "Paris is 21°C."}]),
    )
    attributes["output.value"] = json.dumps(
        {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant"}}]}
    )
    reading = OPENINFERENCE_READER.read(make_span(attributes))

    assert reading is not None and reading.convention == "openinference"
    inputs = reading.input_messages
    assert [m.role for m in inputs] == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL, Role.TOOL]
    assert all(m.span_id == SPAN_ID for m in inputs + reading.output_messages)
    calls = inputs[2].tool_calls
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_1", "get_weather", {"city": "Paris"}),
        ("call_2", "get_weather", "not json"),
    ]
    first, second = inputs[3].tool_result, inputs[4].tool_result
    assert first is not None and (first.call_id, first.name, first.content) == (
        "call_1",
        "get_weather",
        '{"temp": 21}',
    )
    assert inputs[3].content == '{"temp": 21}'
    assert second is not None and (second.call_id, second.name) == ("call_2", "weather")  # message.name kept
    [answer] = reading.output_messages
    assert (answer.role, answer.content, answer.finish_reason) == (Role.ASSISTANT, "Paris is 21°C.", "stop")
    assert reading.content_captured is True
    assert reading.llm_call is not None and reading.llm_call.model == "gpt-4o-2024-08-06"


def test_output_tool_calls_and_content_parts() -> None:
    attributes = _llm(
        **_messages(
            "llm.input_messages",
            [
                {
                    "role": "user",
                    "contents": [
                        {"type": "text", "text": "What is in this picture?"},
                        {"type": "image", "image.image.url": "https://example.com/cat.png"},
                        {"type": "text", "text": "Be brief."},
                    ],
                }
            ],
        ),
        **_messages(
            "llm.output_messages",
            [{"role": "assistant", "tool_calls": [{"id": "c9", "function.name": "describe"}]}],
        ),
        **{"llm.finish_reason": "tool_calls"},
    )
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None
    assert reading.input_messages[0].content == "What is in this picture?\nBe brief."
    [answer] = reading.output_messages
    assert answer.content is None
    assert [(c.id, c.name, c.arguments) for c in answer.tool_calls] == [("c9", "describe", None)]
    assert answer.finish_reason == "tool_calls"


def test_legacy_function_call_and_function_role() -> None:
    attributes = _llm(
        **_messages(
            "llm.input_messages",
            [
                {"role": "user", "content": "2+2?"},
                {
                    "role": "assistant",
                    "function_call_name": "calc",
                    "function_call_arguments_json": '{"e": "2+2"}',
                },
                {"role": "function", "name": "calc", "content": "4"},
            ],
        )
    )
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None
    assistant, result = reading.input_messages[1:]
    assert [(c.name, c.arguments) for c in assistant.tool_calls] == [("calc", {"e": "2+2"})]
    assert result.role is Role.TOOL and result.tool_result is not None
    assert (result.tool_result.name, result.tool_result.content) == ("calc", "4")


def test_structured_anyvalue_message_list() -> None:
    attributes = _llm(
        **{
            "llm.input_messages": [
                {"message.role": "user", "message.content": "hi"},
                {"message": {"role": "assistant", "content": "hello"}},
            ]
        }
    )
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None
    assert [(m.role, m.content) for m in reading.input_messages] == [
        (Role.USER, "hi"),
        (Role.ASSISTANT, "hello"),
    ]


def test_indexes_are_ordered_numerically() -> None:
    messages = [{"role": "user", "content": f"m{i}"} for i in range(12)]
    reading = OPENINFERENCE_READER.read(make_span(_llm(**_messages("llm.input_messages", messages))))
    assert reading is not None
    assert [m.content for m in reading.input_messages] == [f"m{i}" for i in range(12)]


# -- LLM spans: input.value / output.value fallback ---------------------------------------------
def test_json_body_fallback_openai_chat() -> None:
    request = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "developer", "content": "Be terse."},
            {"role": "user", "content": [{"type": "text", "text": "Book a table"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "book", "arguments": '{"n": 2}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "booked"},
        ],
    }
    response = {
        "id": "chatcmpl-1",
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Checking availability",
                    "tool_calls": [
                        {
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "confirm", "arguments": "{}"},
                        }
                    ],
                },
            }
        ],
    }
    attributes = _llm(
        **{
            "input.value": json.dumps(request),
            "input.mime_type": "application/json",
            "output.value": json.dumps(response),
            "output.mime_type": "application/json",
            "llm.invocation_parameters": json.dumps({"model": "gpt-4o-mini"}),
        }
    )
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None
    roles = [m.role for m in reading.input_messages]
    assert roles == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL]
    assert reading.input_messages[1].content == "Book a table"
    assert reading.input_messages[2].tool_calls[0].arguments == {"n": 2}
    result = reading.input_messages[3].tool_result
    assert result is not None and (result.call_id, result.name, result.content) == (
        "call_a",
        "book",
        "booked",
    )
    [answer] = reading.output_messages
    assert answer.content == "Checking availability"
    assert answer.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in answer.tool_calls] == [("call_b", "confirm", {})]
    assert reading.llm_call is not None and reading.llm_call.model == "gpt-4o-mini"  # invocation params


def test_json_body_fallback_anthropic_tool_use_blocks() -> None:
    # The Anthropic instrumentation sets only role/content for text; tool use is in the bodies.
    request = {
        "model": "claude-3-5-sonnet",
        "system": "You are helpful.",
        "messages": [
            {"role": "user", "content": "Look up order 7"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"order": 7}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "not found",
                        "is_error": True,
                    },
                    {"type": "text", "text": "Hurry please"},
                ],
            },
        ],
    }
    response = {
        "role": "assistant",
        "content": [{"type": "text", "text": "Sorry, no such order."}],
        "stop_reason": "end_turn",
    }
    attributes = _llm(
        **{
            "input.value": json.dumps(request),
            "input.mime_type": "application/json",
            "output.value": json.dumps(response),
            "output.mime_type": "application/json",
        }
    )
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None
    got = [(m.role, m.content) for m in reading.input_messages]
    assert got == [
        (Role.SYSTEM, "You are helpful."),
        (Role.USER, "Look up order 7"),
        (Role.ASSISTANT, "Let me check."),
        (Role.TOOL, "not found"),
        (Role.USER, "Hurry please"),
    ]
    assert reading.input_messages[2].tool_calls[0].arguments == {"order": 7}
    result = reading.input_messages[3].tool_result
    assert result is not None and (result.call_id, result.name, result.is_error) == (
        "toolu_1",
        "lookup",
        True,
    )
    [answer] = reading.output_messages
    assert (answer.content, answer.finish_reason) == ("Sorry, no such order.", "end_turn")


def test_json_body_fallback_responses_api() -> None:
    request = {
        "instructions": "Be nice.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Convert 3 EUR"}]},
            {"type": "function_call", "call_id": "fc_1", "name": "fx", "arguments": '{"amount": 3}'},
            {"type": "function_call_output", "call_id": "fc_1", "output": "3.3 USD"},
        ],
    }
    response = {
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "3.3 USD"}]},
        ]
    }
    attributes = _llm(
        **{
            "input.value": json.dumps(request),
            "input.mime_type": "application/json",
            "output.value": json.dumps(response),
            "output.mime_type": "application/json",
        }
    )
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None
    assert [m.role for m in reading.input_messages] == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL]
    assert reading.input_messages[2].tool_calls[0].arguments == {"amount": 3}
    tool_result = reading.input_messages[3].tool_result
    assert tool_result is not None and tool_result.name == "fx"
    assert [m.content for m in reading.output_messages] == ["3.3 USD"]


def test_plain_text_bodies_on_llm_span() -> None:
    attributes = _llm(
        **{"input.value": "Tell me a joke", "output.value": "Why did the span cross the trace?"}
    )
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None
    assert [(m.role, m.content) for m in reading.input_messages] == [(Role.USER, "Tell me a joke")]
    assert [(m.role, m.content) for m in reading.output_messages] == [
        (Role.ASSISTANT, "Why did the span cross the trace?")
    ]


def test_json_looking_text_without_json_mime_stays_text() -> None:
    attributes = _llm(**{"input.value": '{"messages": [{"role": "user", "content": "x"}]}'})
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None
    assert [m.content for m in reading.input_messages] == ['{"messages": [{"role": "user", "content": "x"}]}']


def test_chain_and_agent_spans_without_messages_are_not_read() -> None:
    for kind in ("CHAIN", "AGENT", "RETRIEVER", "EMBEDDING"):
        attributes = {"openinference.span.kind": kind, "input.value": "hi", "output.value": "hello"}
        assert OPENINFERENCE_READER.read(make_span(attributes)) is None


def test_agent_span_with_indexed_messages_has_no_llm_call() -> None:
    attributes = {
        "openinference.span.kind": "AGENT",
        **_messages("llm.input_messages", [{"role": "user", "content": "plan my trip"}]),
    }
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None and reading.llm_call is None
    assert [m.content for m in reading.input_messages] == ["plan my trip"]


def test_other_conventions_are_not_read() -> None:
    assert OPENINFERENCE_READER.read(make_span({"gen_ai.operation.name": "chat"})) is None
    # OpenLLMetry also writes llm.* keys, but none of OpenInference's
    assert (
        OPENINFERENCE_READER.read(make_span({"llm.request.type": "chat", "llm.is_streaming": False})) is None
    )
    assert OPENINFERENCE_READER.read(make_span({})) is None


# -- model call and tokens ------------------------------------------------------------------------
def test_token_counts_mapped_into_llm_call() -> None:
    attributes = _llm(
        **{
            "llm.model_name": "gpt-4o",
            "llm.token_count.prompt": 120,
            "llm.token_count.completion": 30,
            "llm.token_count.total": 150,
        },
        **_messages("llm.input_messages", [{"role": "user", "content": "hi"}]),
    )
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None and reading.llm_call is not None
    call = reading.llm_call
    assert (call.model, call.input_tokens, call.output_tokens) == ("gpt-4o", 120, 30)
    assert (call.span_id, call.trace_id, call.start_time_unix_nano, call.end_time_unix_nano) == (
        SPAN_ID,
        b"\x11" * 16,
        1_000,
        2_000,
    )
    assert call.failed is False


def test_gen_ai_usage_wins_over_openinference_counts() -> None:
    attributes = _llm(
        **{
            "llm.token_count.prompt": 1,
            "llm.token_count.completion": 2,
            "gen_ai.usage.input_tokens": 10,
            "gen_ai.usage.output_tokens": 20,
        }
    )
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None and reading.llm_call is not None
    assert (reading.llm_call.input_tokens, reading.llm_call.output_tokens) == (10, 20)


def test_failed_llm_call() -> None:
    attributes = _llm(**_messages("llm.input_messages", [{"role": "user", "content": "hi"}]))
    span = make_span(
        attributes,
        status=Status.STATUS_CODE_ERROR,
        status_message="RateLimitError: 429",
        events=[("exception", {"exception.type": "openai.RateLimitError", "exception.message": "quota"})],
    )
    reading = OPENINFERENCE_READER.read(span)
    assert reading is not None and reading.llm_call is not None
    assert reading.llm_call.failed is True
    assert reading.llm_call.error_type == "openai.RateLimitError"
    assert reading.output_messages == []
    assert reading.content_captured is True  # the history was recorded


# -- content not captured ---------------------------------------------------------------------------
def test_hide_inputs_and_outputs_keep_structure() -> None:
    # TraceConfig(hide_inputs=True, hide_outputs=True): bodies redacted, message keys dropped.
    attributes = _llm(
        **{
            "input.value": "__REDACTED__",
            "output.value": "__REDACTED__",
            "llm.model_name": "gpt-4o",
            "llm.token_count.prompt": 5,
        }
    )
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None
    assert reading.content_captured is False
    assert reading.input_messages == [] and reading.output_messages == []
    assert reading.llm_call is not None and reading.llm_call.input_tokens == 5


def test_hide_input_text_redacts_message_content() -> None:
    attributes = _llm(
        **_messages("llm.input_messages", [{"role": "user", "content": "__REDACTED__"}]),
        **_messages("llm.output_messages", [{"role": "assistant", "content": "ok"}]),
    )
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None
    [user] = reading.input_messages
    assert (user.role, user.content) == (Role.USER, None)
    assert reading.content_captured is False


def test_model_call_without_any_content() -> None:
    reading = OPENINFERENCE_READER.read(make_span(_llm(**{"llm.model_name": "gpt-4o"})))
    assert reading is not None
    assert reading.content_captured is False and reading.llm_call is not None


# -- TOOL spans -------------------------------------------------------------------------------------
def test_tool_span_success() -> None:
    attributes = {
        "openinference.span.kind": "TOOL",
        "tool.name": "get_weather",
        "tool.description": "Weather by city",
        "tool_call.id": "call_1",
        "input.value": '{"city": "Paris"}',
        "input.mime_type": "application/json",
        "output.value": "21 degrees",
    }
    reading = OPENINFERENCE_READER.read(
        make_span(attributes, name="get_weather", status=Status.STATUS_CODE_OK)
    )
    assert reading is not None and reading.tool_execution is not None
    execution = reading.tool_execution
    assert (execution.name, execution.call_id, execution.arguments) == (
        "get_weather",
        "call_1",
        {"city": "Paris"},
    )
    result = execution.result
    assert (result.call_id, result.name, result.content, result.is_error) == (
        "call_1",
        "get_weather",
        "21 degrees",
        False,
    )
    assert reading.llm_call is None and reading.input_messages == [] and reading.content_captured is True


def test_tool_span_failure_from_status_and_exception() -> None:
    attributes = {
        "openinference.span.kind": "TOOL",
        "tool.name": "search",
        "tool.id": "t-7",
        "tool.parameters": '{"query": "x"}',
    }
    span = make_span(
        attributes,
        status=Status.STATUS_CODE_ERROR,
        status_message="TimeoutError: took too long",
        events=[("exception", {"exception.type": "TimeoutError", "exception.message": "took too long"})],
    )
    reading = OPENINFERENCE_READER.read(span)
    assert reading is not None and reading.tool_execution is not None
    execution = reading.tool_execution
    assert (execution.call_id, execution.arguments) == ("t-7", {"query": "x"})
    result = execution.result
    assert result.is_error is True
    assert (result.error_type, result.error_message, result.content) == (
        "TimeoutError",
        "took too long",
        None,
    )


def test_tool_parameters_schema_is_not_taken_for_arguments() -> None:
    schema = {"type": "object", "properties": {"query": {"type": "string"}}}
    attributes = {
        "openinference.span.kind": "TOOL",
        "tool.name": "search",
        "tool.parameters": json.dumps(schema),
        "input.value": "cheap flights",
    }
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None and reading.tool_execution is not None
    assert reading.tool_execution.arguments == "cheap flights"


def test_langchain_tool_message_output() -> None:
    # openinference-instrumentation-langchain records the ToolMessage the tool returned as JSON.
    tool_message = {
        "content": "Error: city not found",
        "type": "tool",
        "name": "get_weather",
        "tool_call_id": "call_x",
        "status": "error",
    }
    attributes = {
        "openinference.span.kind": "TOOL",
        "tool.name": "get_weather",
        "input.value": "{'city': 'Atlantis'}",
        "output.value": json.dumps(tool_message),
        "output.mime_type": "application/json",
    }
    reading = OPENINFERENCE_READER.read(make_span(attributes, status=Status.STATUS_CODE_OK))
    assert reading is not None and reading.tool_execution is not None
    execution = reading.tool_execution
    assert execution.arguments == "{'city': 'Atlantis'}"  # not JSON: the raw text
    assert execution.call_id == "call_x"
    assert (execution.result.content, execution.result.is_error) == ("Error: city not found", True)


def test_tool_span_redacted() -> None:
    attributes = {
        "openinference.span.kind": "TOOL",
        "tool.name": "lookup",
        "input.value": "__REDACTED__",
        "output.value": "__REDACTED__",
    }
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None and reading.tool_execution is not None
    assert reading.tool_execution.arguments is None and reading.tool_execution.result.content is None
    assert reading.content_captured is False


# -- malformed input never raises -------------------------------------------------------------------
def test_malformed_values_degrade_gracefully() -> None:
    attributes = _llm(
        **{
            "llm.input_messages.0.message.role": 42,
            "llm.input_messages.0.message.content": ["a", 1],
            "llm.input_messages.1.message.tool_calls.x.tool_call.id": "bad index",
            "llm.input_messages.99999999999.message.content": "huge index",
            "llm.input_messages.²3.message.content": "unicode digit",
            "llm.input_messages.2.message.tool_calls.0.tool_call.function.arguments": "{broken",
            "llm.input_messages.3": "no field",
            "llm.input_messages": "not a list",
            "llm.output_messages.0.message.role": None,
            "llm.token_count.prompt": "lots",
            "llm.invocation_parameters": "{not json",
            "input.value": "{bad json",
            "input.mime_type": "application/json",
            "output.value": json.dumps({"choices": "nope", "output": 3}),
            "output.mime_type": "application/json",
            "llm.finish_reason": 7,
        }
    )
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None
    assert reading.input_messages[0].role is Role.USER
    assert reading.input_messages[0].content == '["a",1]'
    assert reading.llm_call is not None and reading.llm_call.input_tokens is None


def test_huge_bodies_are_not_parsed() -> None:
    huge = json.dumps({"messages": [{"role": "user", "content": "x" * (5 * 1024 * 1024)}]})
    attributes = _llm(**{"input.value": huge, "input.mime_type": "application/json"})
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None and reading.input_messages == []


_KEYS = st.sampled_from(
    [
        "openinference.span.kind",
        "llm.input_messages.0.message.role",
        "llm.input_messages.0.message.content",
        "llm.input_messages.0.message.contents.0.message_content.text",
        "llm.input_messages.1.message.tool_calls.0.tool_call.function.arguments",
        "llm.input_messages.1.message.tool_call_id",
        "llm.output_messages.0.message.content",
        "llm.input_messages",
        "llm.prompts",
        "llm.model_name",
        "llm.token_count.prompt",
        "input.value",
        "input.mime_type",
        "output.value",
        "output.mime_type",
        "tool.name",
        "tool.parameters",
        "tool_call.id",
    ]
)
_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
_VALUES = (
    _JSONISH
    | _JSONISH.map(json.dumps)
    | st.sampled_from(["LLM", "TOOL", "CHAIN", "application/json", "__REDACTED__", "tool", "user"])
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES, max_size=10))
def test_fuzzed_attributes_never_raise(attributes: dict[str, Any]) -> None:
    span = SpanView(trace_id=b"\x11" * 16, span_id=SPAN_ID, attributes=attributes)
    OPENINFERENCE_READER.read(span)


def test_bare_role_indexed_messages_are_completed_from_the_json_body() -> None:
    # Older openinference-instrumentation-anthropic (_wrappers.py) records message.role and a string
    # message.content only: a tool-use turn or a tool_result turn is a bare role in the indexed keys.
    request = {
        "model": "claude-3-5-haiku",
        "messages": [
            {"role": "user", "content": "Order status for 42?"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "tu_1", "name": "status", "input": {"id": 42}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "shipped"}],
            },
        ],
    }
    attributes = _llm(
        **{
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Order status for 42?",
            "llm.input_messages.1.message.role": "assistant",
            "llm.input_messages.2.message.role": "user",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "It has shipped.",
            "input.value": json.dumps(request),
            "input.mime_type": "application/json",
        }
    )
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None
    assert [m.role for m in reading.input_messages] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert reading.input_messages[1].tool_calls[0].name == "status"
    result = reading.input_messages[2].tool_result
    assert result is not None and (result.call_id, result.name, result.content) == (
        "tu_1",
        "status",
        "shipped",
    )
    assert [m.content for m in reading.output_messages] == ["It has shipped."]


def test_the_tools_an_llm_span_was_offered_are_read_in_index_order() -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather by city"}}
    attributes = _llm(
        **_messages("llm.input_messages", [{"role": "user", "content": "Weather in Paris?"}]),
        **{
            "llm.tools.1.tool.json_schema": json.dumps(
                {"type": "function", "function": {"name": "get_time"}}
            ),
            "llm.tools.0.tool.json_schema": json.dumps(tool),
            "llm.tools.x.tool.json_schema": json.dumps(tool),  # not an index: ignored
        },
    )
    reading = OPENINFERENCE_READER.read(make_span(attributes))
    assert reading is not None
    assert [t["name"] for t in reading.tool_definitions] == ["get_weather", "get_time"]


def test_a_completions_span_is_read_by_openinference_not_openllmetry() -> None:
    # openinference-instrumentation-openai's completions API writes llm.prompts.N.prompt.text: the
    # prefix of OpenLLMetry's legacy prompts, whose reader, tried first, lost the text.
    span = make_span(
        {
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-3.5-turbo-instruct",
            "llm.prompts.0.prompt.text": "Say hello to Ada",
            "llm.choices.0.completion.text": "Hello, Ada!",
        },
        name="Completion",
    )
    reading = next(r for r in (reader.read(span) for reader in READERS) if r is not None)
    assert reading.convention == "openinference"
    assert [(m.role, m.content) for m in reading.input_messages + reading.output_messages] == [
        (Role.USER, "Say hello to Ada"),
        (Role.ASSISTANT, "Hello, Ada!"),
    ]
