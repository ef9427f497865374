"""Vercel AI SDK reader: spans shaped as ``experimental_telemetry`` writes them.

Shapes checked against vercel/ai:
- packages/ai/src/generate-text/generate-text.ts (outer ``ai.generateText`` with ``ai.prompt`` =
  JSON {system, prompt, messages}; inner ``ai.generateText.doGenerate`` with ``ai.prompt.messages``,
  ``ai.response.text/toolCalls/finishReason``, ``ai.usage.*``, gen_ai.*; ``asToolCalls`` gives
  {toolCallId, toolName, input} with input a JSON string, v4 had ``args``)
- packages/ai/core/generate-text/generate-text.ts and stream-text.ts of SDK 4.x
  (``ai.usage.promptTokens/completionTokens``, ``ai.toolCall.args/result``)
- packages/ai/src/generate-text/execute-tool-call.ts and the telemetry integrations
  (``ai.toolCall`` spans: name, id, args = JSON.stringify(input), result = JSON.stringify(output);
  failures via recordErrorOnSpan: ERROR status + exception event)
- @ai-sdk/provider LanguageModelV1/V2 prompt parts: tool-call ``args``→``input``, tool-result
  ``result``(+isError)→``output`` = {type: text|json|error-text|error-json|content, value}
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from otelsignals.conventions.base import SpanView
from otelsignals.conventions.decoding import Utf8Text
from otelsignals.conventions.memory import HistoryCache
from otelsignals.conventions.span_decoder import span_view
from otelsignals.conventions.vercel_ai import VERCEL_AI_READER
from otelsignals.model import Role
from tests.conventions.spans import any_value as _any

SPAN_ID = b"\xaa\xbb\xcc\xdd\x00\x11\x22\x33"


# -- span building (local helper: protobuf span → SpanView) ----------------------------------------


def make_span(
    name: str,
    attributes: dict[str, Any],
    *,
    status: int = Status.STATUS_CODE_UNSET,
    status_message: str = "",
    events: list[tuple[str, dict[str, Any]]] | None = None,
    operation_id: bool = True,
) -> SpanView:
    base = {"ai.operationId": name, "operation.name": f"{name} chat-agent"} if operation_id else {}
    span = Span(
        trace_id=b"\x22" * 16,
        span_id=SPAN_ID,
        name=name,
        start_time_unix_nano=10,
        end_time_unix_nano=20,
        status=Status(code=status, message=status_message),
    )
    span.attributes.extend(KeyValue(key=k, value=_any(v)) for k, v in {**base, **attributes}.items())
    for event_name, event_attributes in events or []:
        event = span.events.add(name=event_name, time_unix_nano=15)
        event.attributes.extend(KeyValue(key=k, value=_any(v)) for k, v in event_attributes.items())
    return span_view(span, {"service.name": "next-app"})


def _model(provider: str = "openai.chat", model: str = "gpt-4o") -> dict[str, Any]:
    return {
        "ai.model.provider": provider,
        "ai.model.id": model,
        "ai.telemetry.functionId": "chat-agent",
        "ai.telemetry.metadata.sessionId": "sess-1",
        "gen_ai.system": provider,
        "gen_ai.request.model": model,
    }


# -- provider-level prompts (ai.prompt.messages on do* spans) --------------------------------------
V4_PROMPT = [
    {"role": "system", "content": "You are a weather bot."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool-call", "toolCallId": "call_1", "toolName": "weather", "args": {"city": "Paris"}},
        ],
    },
    {
        "role": "tool",
        "content": [
            {"type": "tool-result", "toolCallId": "call_1", "toolName": "weather", "result": {"temp": 21}},
            {
                "type": "tool-result",
                "toolCallId": "call_2",
                "toolName": "weather",
                "result": "down",
                "isError": True,
            },
        ],
    },
    {
        "role": "user",
        "content": [{"type": "text", "text": "And tomorrow?"}, {"type": "text", "text": "Thanks"}],
    },
]

V5_PROMPT = [
    {"role": "system", "content": "You are a weather bot."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Oslo?"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "reasoning", "text": "need tools"},
            {"type": "tool-call", "toolCallId": "c1", "toolName": "weather", "input": {"city": "Paris"}},
            {"type": "tool-call", "toolCallId": "c2", "toolName": "weather", "input": {"city": "Oslo"}},
            {"type": "tool-call", "toolCallId": "c3", "toolName": "forecast", "input": {"days": 3}},
        ],
    },
    {
        "role": "tool",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": "c1",
                "toolName": "weather",
                "output": {"type": "json", "value": {"t": 21}},
            },
            {
                "type": "tool-result",
                "toolCallId": "c2",
                "toolName": "weather",
                "output": {"type": "error-text", "value": "timeout"},
            },
            {
                "type": "tool-result",
                "toolCallId": "c3",
                "toolName": "forecast",
                "output": {
                    "type": "content",
                    "value": [{"type": "text", "text": "sunny"}, {"type": "media", "data": "AA=="}],
                },
            },
        ],
    },
]


def test_v4_do_generate_history_tool_results_and_answer() -> None:
    tool_calls = [
        {"toolCallType": "function", "toolCallId": "call_3", "toolName": "forecast", "args": '{"days": 2}'}
    ]
    attributes = {
        **_model(),
        "ai.prompt.format": "messages",
        "ai.prompt.messages": json.dumps(V4_PROMPT),
        "ai.response.text": "",
        "ai.response.toolCalls": json.dumps(tool_calls),
        "ai.response.finishReason": "tool-calls",
        "ai.response.model": "gpt-4o-2024-08-06",
        "ai.usage.promptTokens": 50,
        "ai.usage.completionTokens": 12,
    }
    reading = VERCEL_AI_READER.read(make_span("ai.generateText.doGenerate", attributes))

    assert reading is not None and reading.convention == "vercel_ai"
    inputs = reading.input_messages
    assert [m.role for m in inputs] == [
        Role.SYSTEM,
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.TOOL,
        Role.USER,
    ]
    assert all(m.span_id == SPAN_ID for m in inputs + reading.output_messages)
    assert inputs[2].content == "Let me check."
    assert [(c.id, c.name, c.arguments) for c in inputs[2].tool_calls] == [
        ("call_1", "weather", {"city": "Paris"})
    ]
    ok, failed = inputs[3].tool_result, inputs[4].tool_result
    assert ok is not None and (ok.call_id, ok.name, ok.content, ok.is_error) == (
        "call_1",
        "weather",
        '{"temp":21}',
        False,
    )
    assert inputs[3].content == '{"temp":21}'
    assert failed is not None and (failed.content, failed.is_error) == ("down", True)
    assert inputs[5].content == "And tomorrow?\nThanks"

    [answer] = reading.output_messages
    assert (answer.role, answer.content, answer.finish_reason) == (Role.ASSISTANT, "", "tool-calls")
    assert [(c.id, c.name, c.arguments) for c in answer.tool_calls] == [("call_3", "forecast", {"days": 2})]

    call = reading.llm_call
    assert call is not None
    assert (call.model, call.input_tokens, call.output_tokens, call.failed) == (
        "gpt-4o-2024-08-06",
        50,
        12,
        False,
    )
    assert reading.content_captured is True


def test_v5_do_stream_typed_tool_outputs_and_input_tokens() -> None:
    attributes = {
        **_model("anthropic.messages", "claude-sonnet-4"),
        "ai.prompt.messages": json.dumps(V5_PROMPT),
        "ai.response.text": "Paris is 21°C; Oslo timed out.",
        "ai.response.finishReason": "stop",
        "ai.usage.inputTokens": 80,
        "ai.usage.outputTokens": 9,
    }
    reading = VERCEL_AI_READER.read(make_span("ai.streamText.doStream", attributes))
    assert reading is not None
    inputs = reading.input_messages
    assert [m.role for m in inputs] == [
        Role.SYSTEM,
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.TOOL,
        Role.TOOL,
    ]
    assistant = inputs[2]
    assert assistant.content is None  # reasoning is not the answer text
    assert [(c.id, c.arguments) for c in assistant.tool_calls] == [
        ("c1", {"city": "Paris"}),
        ("c2", {"city": "Oslo"}),
        ("c3", {"days": 3}),
    ]
    results = [m.tool_result for m in inputs[3:]]
    assert [(r.call_id, r.content, r.is_error) for r in results if r] == [
        ("c1", '{"t":21}', False),
        ("c2", "timeout", True),
        ("c3", "sunny", False),
    ]
    [answer] = reading.output_messages
    assert (answer.content, answer.finish_reason, answer.tool_calls) == (
        "Paris is 21°C; Oslo timed out.",
        "stop",
        [],
    )
    call = reading.llm_call
    assert call is not None and (call.model, call.input_tokens, call.output_tokens) == (
        "claude-sonnet-4",
        80,
        9,
    )


def test_v5_response_tool_calls_with_input_string() -> None:
    tool_calls = [{"toolCallId": "c9", "toolName": "search", "input": '{"q": "flights"}'}]
    attributes = {
        **_model(),
        "ai.response.toolCalls": json.dumps(tool_calls),
        "ai.response.finishReason": "tool-calls",
    }
    reading = VERCEL_AI_READER.read(make_span("ai.generateText.doGenerate", attributes))
    assert reading is not None
    [answer] = reading.output_messages
    assert answer.content is None
    assert [(c.id, c.name, c.arguments) for c in answer.tool_calls] == [("c9", "search", {"q": "flights"})]


def test_gen_ai_usage_wins_over_ai_usage() -> None:
    attributes = {
        **_model(),
        "ai.usage.promptTokens": 1,
        "ai.usage.completionTokens": 2,
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.output_tokens": 200,
        "gen_ai.response.model": "gpt-4o-mini",
    }
    reading = VERCEL_AI_READER.read(make_span("ai.generateText.doGenerate", attributes))
    assert reading is not None and reading.llm_call is not None
    assert (reading.llm_call.input_tokens, reading.llm_call.output_tokens) == (100, 200)
    assert reading.llm_call.model == "gpt-4o-mini"


def test_execution_denied_output_is_a_failed_result() -> None:
    prompt = [
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "c1",
                    "toolName": "delete_repo",
                    "output": {"type": "execution-denied", "reason": "user said no"},
                }
            ],
        }
    ]
    reading = VERCEL_AI_READER.read(
        make_span("ai.generateText.doGenerate", {**_model(), "ai.prompt.messages": json.dumps(prompt)})
    )
    assert reading is not None
    result = reading.input_messages[0].tool_result
    assert result is not None
    assert (result.content, result.is_error, result.error_type) == ("user said no", True, "execution-denied")


# -- outer spans ------------------------------------------------------------------------------------
def test_outer_generate_text_gives_messages_but_no_llm_call() -> None:
    attributes = {
        **_model(),
        "ai.prompt": json.dumps({"system": "Be brief.", "prompt": "What is OTLP?"}),
        "ai.response.text": "A protocol.",
        "ai.response.finishReason": "stop",
        "ai.usage.promptTokens": 10,
        "ai.usage.completionTokens": 3,
    }
    reading = VERCEL_AI_READER.read(make_span("ai.generateText", attributes))
    assert reading is not None
    assert reading.llm_call is None  # the builder prefers the inner doGenerate span
    assert [(m.role, m.content) for m in reading.input_messages] == [
        (Role.SYSTEM, "Be brief."),
        (Role.USER, "What is OTLP?"),
    ]
    assert [(m.content, m.finish_reason) for m in reading.output_messages] == [("A protocol.", "stop")]


def test_outer_stream_text_with_model_messages_v4_and_v5() -> None:
    messages = [
        {"role": "user", "content": "Find my order"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool-call", "toolCallId": "a", "toolName": "lookup", "args": {"id": 1}},
                {"type": "tool-call", "toolCallId": "b", "toolName": "lookup", "input": {"id": 2}},
            ],
        },
        {
            "role": "tool",
            "content": [
                {"type": "tool-result", "toolCallId": "a", "toolName": "lookup", "result": "shipped"},
                {"type": "tool-result", "toolCallId": "b", "output": {"type": "text", "value": "lost"}},
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "where is it??"}]},
    ]
    attributes = {**_model(), "ai.prompt": json.dumps({"messages": messages})}
    reading = VERCEL_AI_READER.read(make_span("ai.streamText", attributes))
    assert reading is not None and reading.llm_call is None
    inputs = reading.input_messages
    assert [m.role for m in inputs] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.TOOL, Role.USER]
    assert [c.arguments for c in inputs[1].tool_calls] == [{"id": 1}, {"id": 2}]
    results = [m.tool_result for m in inputs[2:4]]
    assert [(r.call_id, r.name, r.content) for r in results if r] == [
        ("a", "lookup", "shipped"),
        ("b", "lookup", "lost"),
    ]
    assert reading.output_messages == []


def test_generate_object_response_object_is_the_answer() -> None:
    attributes = {**_model(), "ai.response.object": '{"name":"Ada"}', "ai.response.finishReason": "stop"}
    reading = VERCEL_AI_READER.read(make_span("ai.generateObject.doGenerate", attributes))
    assert reading is not None and reading.llm_call is not None
    assert [m.content for m in reading.output_messages] == ['{"name":"Ada"}']


# -- tool spans -------------------------------------------------------------------------------------
def test_tool_call_span_v4_success() -> None:
    attributes = {
        "ai.toolCall.name": "weather",
        "ai.toolCall.id": "call_1",
        "ai.toolCall.args": '{"city":"Paris"}',
        "ai.toolCall.result": '{"temp":21}',
    }
    reading = VERCEL_AI_READER.read(make_span("ai.toolCall", attributes, status=Status.STATUS_CODE_UNSET))
    assert reading is not None and reading.tool_execution is not None
    execution = reading.tool_execution
    assert (execution.name, execution.call_id, execution.arguments) == (
        "weather",
        "call_1",
        {"city": "Paris"},
    )
    result = execution.result
    assert (result.call_id, result.name, result.content, result.is_error) == (
        "call_1",
        "weather",
        '{"temp":21}',
        False,
    )
    assert reading.llm_call is None and reading.content_captured is True


def test_tool_call_span_input_output_names_and_string_result() -> None:
    attributes = {
        "ai.toolCall.name": "greet",
        "ai.toolCall.id": "c2",
        "ai.toolCall.input": '{"who":"Bo"}',
        "ai.toolCall.output": '"hello Bo"',
    }
    reading = VERCEL_AI_READER.read(make_span("ai.toolCall", attributes))
    assert reading is not None and reading.tool_execution is not None
    assert reading.tool_execution.arguments == {"who": "Bo"}
    assert reading.tool_execution.result.content == "hello Bo"


def test_tool_call_span_failure() -> None:
    attributes = {"ai.toolCall.name": "db", "ai.toolCall.id": "c3", "ai.toolCall.args": '{"sql":"select"}'}
    span = make_span(
        "ai.toolCall",
        attributes,
        status=Status.STATUS_CODE_ERROR,
        status_message="connect ECONNREFUSED 127.0.0.1:5432",
        events=[
            (
                "exception",
                {"exception.type": "Error", "exception.message": "connect ECONNREFUSED 127.0.0.1:5432"},
            )
        ],
    )
    reading = VERCEL_AI_READER.read(span)
    assert reading is not None and reading.tool_execution is not None
    result = reading.tool_execution.result
    assert result.is_error is True
    assert (result.error_type, result.error_message, result.content) == (
        "Error",
        "connect ECONNREFUSED 127.0.0.1:5432",
        None,
    )


# -- content not recorded, foreign spans ------------------------------------------------------------
def test_record_inputs_and_outputs_off() -> None:
    inner = VERCEL_AI_READER.read(
        make_span("ai.generateText.doGenerate", {**_model(), "ai.usage.promptTokens": 7})
    )
    assert inner is not None
    assert inner.content_captured is False and inner.input_messages == [] and inner.output_messages == []
    assert inner.llm_call is not None and inner.llm_call.input_tokens == 7

    outer = VERCEL_AI_READER.read(make_span("ai.generateText", _model()))
    assert outer is not None and outer.content_captured is False and outer.llm_call is None

    tool = VERCEL_AI_READER.read(make_span("ai.toolCall", {"ai.toolCall.name": "x", "ai.toolCall.id": "1"}))
    assert tool is not None and tool.content_captured is False and tool.tool_execution is not None


def test_span_without_operation_id_is_read_by_name() -> None:
    attributes = {**_model(), "ai.prompt": json.dumps({"prompt": "hi"})}
    reading = VERCEL_AI_READER.read(make_span("ai.generateText", attributes, operation_id=False))
    assert reading is not None and [m.content for m in reading.input_messages] == ["hi"]


def test_foreign_and_embedding_spans_are_not_read() -> None:
    assert VERCEL_AI_READER.read(make_span("ai.embed", {"ai.value": '"x"'})) is None
    assert VERCEL_AI_READER.read(make_span("ai.embedMany.doEmbed", {"ai.values": ['"x"']})) is None
    no_ai = Span(span_id=SPAN_ID, name="HTTP GET")
    assert VERCEL_AI_READER.read(span_view(no_ai)) is None
    assert VERCEL_AI_READER.read(SpanView(trace_id=b"", span_id=SPAN_ID, name="ai.thing")) is None
    genai_only = SpanView(trace_id=b"", span_id=SPAN_ID, name="chat", attributes={"gen_ai.system": "openai"})
    assert VERCEL_AI_READER.read(genai_only) is None


# -- malformed input never raises -------------------------------------------------------------------
def test_malformed_values_degrade_gracefully() -> None:
    attributes = {
        **_model(),
        "ai.prompt.messages": json.dumps(
            [
                "just a string",
                {"role": "robot", "content": "?"},
                {"role": "user", "content": 12},
                {"role": "assistant", "content": [{"type": "tool-call"}, 5, {"type": "text", "text": None}]},
                {"role": "tool", "content": "not parts"},
                {"role": "tool", "content": [{"type": "tool-result", "output": {"type": 3}}]},
                {"role": None},
            ]
        ),
        "ai.response.toolCalls": "[{broken",
        "ai.response.text": 42,
        "ai.usage.promptTokens": "many",
    }
    reading = VERCEL_AI_READER.read(make_span("ai.generateText.doGenerate", attributes))
    assert reading is not None
    assert [m.role for m in reading.input_messages] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert reading.input_messages[1].tool_calls[0].name == ""
    assert reading.output_messages == []
    assert reading.llm_call is not None and reading.llm_call.input_tokens is None


def test_huge_prompt_is_not_parsed() -> None:
    huge = json.dumps([{"role": "user", "content": "x" * (9 * 1024 * 1024)}])
    reading = VERCEL_AI_READER.read(make_span("ai.generateText.doGenerate", {"ai.prompt.messages": huge}))
    assert reading is not None and reading.input_messages == []


def _long_history(turns: int) -> list[dict[str, Any]]:
    said = "Réponse “longue” ≠ courte 🙂 " * 4
    return [{"role": role, "content": f"{said} {n}"} for n in range(turns) for role in ("user", "assistant")]


def test_long_prompts_come_as_utf8_bytes_and_read_as_their_text_does() -> None:
    """ai.prompt and ai.prompt.messages of 1 KiB or more reach the reader undecoded
    (decoding.Utf8Text); read in full and through a conversation's history cache, turn after turn,
    they give what the same text gives as a str."""
    cache = HistoryCache()
    for turns in (10, 11, 12):
        history = _long_history(turns)
        outer = make_span(
            "ai.generateText", {"ai.prompt": json.dumps({"system": "Be brief.", "messages": history})}
        )
        inner = make_span("ai.generateText.doGenerate", {"ai.prompt.messages": json.dumps(history)})
        for view, key in ((outer, "ai.prompt"), (inner, "ai.prompt.messages")):
            assert isinstance(view.attributes[key], Utf8Text)
            as_text = SpanView(view.trace_id, view.span_id, name=view.name)
            as_text.attributes = {**view.attributes, key: str(view.attributes[key])}
            expected = VERCEL_AI_READER.read(as_text)
            view.histories = cache
            for reading in (VERCEL_AI_READER.read(view), VERCEL_AI_READER.read(as_text)):
                assert reading is not None and expected is not None
                assert [(m.role, m.content) for m in reading.input_messages] == [
                    (m.role, m.content) for m in expected.input_messages
                ]
            assert len(expected.input_messages) >= 2 * turns


_KEYS = st.sampled_from(
    [
        "ai.operationId",
        "ai.prompt",
        "ai.prompt.messages",
        "ai.response.text",
        "ai.response.toolCalls",
        "ai.response.object",
        "ai.response.finishReason",
        "ai.usage.inputTokens",
        "ai.toolCall.name",
        "ai.toolCall.id",
        "ai.toolCall.args",
        "ai.toolCall.result",
        "ai.toolCall.output",
    ]
)
_PART = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["text", "tool-call", "tool-result", "reasoning", 3]),
        "text": st.none() | st.text(max_size=5) | st.integers(),
        "toolCallId": st.none() | st.text(max_size=3) | st.integers(),
        "toolName": st.none() | st.text(max_size=3) | st.lists(st.integers()),
        "args": st.none() | st.text(max_size=5) | st.dictionaries(st.text(max_size=3), st.integers()),
        "input": st.none() | st.text(max_size=5),
        "result": st.none() | st.integers() | st.text(max_size=5),
        "output": st.none()
        | st.text(max_size=5)
        | st.fixed_dictionaries(
            {"type": st.sampled_from(["text", "json", "error-text", "content", "execution-denied", 1])},
            optional={
                "value": st.none() | st.text(max_size=5) | st.lists(st.integers()),
                "reason": st.integers(),
            },
        ),
    },
)
_MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["system", "user", "assistant", "tool", "x", 1]),
        "content": st.none() | st.text(max_size=5) | st.lists(_PART | st.integers(), max_size=3),
    },
)
_VALUES = (
    st.none()
    | st.integers()
    | st.text(max_size=20)
    | st.sampled_from(["ai.generateText.doGenerate", "ai.toolCall", "ai.streamText"])
    | st.lists(_MESSAGE, max_size=4).map(json.dumps)
    | st.lists(_MESSAGE, max_size=4)
    | st.fixed_dictionaries({}, optional={"system": st.text(), "prompt": st.text() | st.integers()}).map(
        json.dumps
    )
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(_KEYS, _VALUES, max_size=8), st.sampled_from(["ai.generateText", "ai.toolCall", "other"])
)
def test_fuzzed_attributes_never_raise(attributes: dict[str, Any], name: str) -> None:
    span = SpanView(trace_id=b"\x22" * 16, span_id=SPAN_ID, name=name, attributes=attributes)
    VERCEL_AI_READER.read(span)
