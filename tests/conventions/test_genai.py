"""OTel GenAI reader: current attributes, the details event, the deprecated message events."""

from __future__ import annotations

import dataclasses
import json

import pytest

from otelsignals.conventions.genai import GENAI_READER
from otelsignals.conversation import ConversationState, apply_trace
from otelsignals.model import NO_TOOL_CALLS, Role
from tests.conventions.spans import ERROR, SPAN_ID, TRACE_ID, make_span

# Shapes from open-telemetry/semantic-conventions docs/gen-ai/gen-ai-input-messages.json,
# gen-ai-output-messages.json, gen-ai-events.md; instrumentations following
# opentelemetry-python-contrib util/opentelemetry-util-genai (types.py, span_utils.py) write them on
# spans as JSON strings and on events as structured values.
SYSTEM = [{"type": "text", "content": "You are a travel assistant."}]
INPUT = [
    {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
    {
        "role": "assistant",
        "parts": [
            {
                "type": "tool_call",
                "id": "call_VSPy",
                "name": "get_weather",
                "arguments": {"location": "Paris"},
            }
        ],
    },
    {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_VSPy", "response": "rainy, 57°F"}]},
    {"role": "assistant", "parts": [{"type": "text", "content": "It is rainy, 57°F."}]},
    {"role": "user", "parts": [{"type": "text", "content": "And tomorrow?"}]},
]
OUTPUT = [
    {
        "role": "assistant",
        "parts": [
            {"type": "text", "content": "Let me check the forecast."},
            {"type": "tool_call", "id": "call_2", "name": "get_forecast", "arguments": '{"day": 1}'},
        ],
        "finish_reason": "tool_call",
    }
]
CHAT = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "openai",
    "gen_ai.request.model": "gpt-4o",
    "gen_ai.response.model": "gpt-4o-2024-08-06",
    "gen_ai.usage.input_tokens": 412,
    "gen_ai.usage.output_tokens": 31,
}


def _check_history(reading) -> None:
    roles = [m.role for m in reading.input_messages]
    assert roles == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT, Role.USER]
    system, user, call, result, answer, follow_up = reading.input_messages
    assert system.content == "You are a travel assistant."
    assert user.content == "Weather in Paris?"
    assert call.content is None
    assert [(c.name, c.id, c.arguments) for c in call.tool_calls] == [
        ("get_weather", "call_VSPy", {"location": "Paris"})
    ]
    assert result.content == "rainy, 57°F"
    assert result.tool_result is not None
    assert (result.tool_result.call_id, result.tool_result.name) == ("call_VSPy", "get_weather")
    assert result.tool_result.content == "rainy, 57°F"
    assert not result.tool_result.is_error
    assert answer.content == "It is rainy, 57°F."
    assert follow_up.content == "And tomorrow?"
    [out] = reading.output_messages
    assert out.role is Role.ASSISTANT
    assert out.content == "Let me check the forecast."
    assert out.finish_reason == "tool_call"
    assert [(c.name, c.id, c.arguments) for c in out.tool_calls] == [("get_forecast", "call_2", {"day": 1})]
    assert all(m.span_id == SPAN_ID for m in reading.input_messages + reading.output_messages)
    assert reading.content_captured


def test_multi_turn_history_from_json_string_attributes() -> None:
    span = make_span(
        {
            **CHAT,
            "gen_ai.system_instructions": json.dumps(SYSTEM),
            "gen_ai.input.messages": json.dumps(INPUT),
            "gen_ai.output.messages": json.dumps(OUTPUT),
        }
    )
    reading = GENAI_READER.read(span)
    assert reading is not None
    assert reading.convention == "genai"
    _check_history(reading)
    call = reading.llm_call
    assert call is not None and not call.failed
    assert (call.model, call.input_tokens, call.output_tokens) == ("gpt-4o-2024-08-06", 412, 31)
    assert call.span_id == SPAN_ID


def test_structured_anyvalue_attributes_read_like_json_strings() -> None:
    span = make_span(
        {
            **CHAT,
            "gen_ai.system_instructions": SYSTEM,
            "gen_ai.input.messages": INPUT,
            "gen_ai.output.messages": OUTPUT,
        }
    )
    assert isinstance(span.attributes["gen_ai.input.messages"], list)  # kvlists and arrays, not text
    reading = GENAI_READER.read(span)
    assert reading is not None
    _check_history(reading)


def test_pydantic_ai_otel_messages_with_result_and_thinking() -> None:
    # pydantic/pydantic-ai messages.py otel_message_parts + models/instrumented.py
    # messages_to_otel_messages: tool returns are tool_call_response parts with id, name and
    # "result", inside a "user" message next to the user's text; reasoning is a "thinking" part;
    # arguments are the JSON text the model produced.
    inputs = [
        {"role": "system", "parts": [{"type": "text", "content": "Be concise."}]},
        {"role": "user", "parts": [{"type": "text", "content": "Roll a die for me"}]},
        {
            "role": "assistant",
            "parts": [
                {"type": "thinking", "content": "I should call roll_die."},
                {"type": "tool_call", "id": "pyd_ai_1", "name": "roll_die", "arguments": '{"sides": 6}'},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"type": "tool_call_response", "id": "pyd_ai_1", "name": "roll_die", "result": 4},
                {"type": "text", "content": "Thanks, again please"},
            ],
        },
    ]
    outputs = [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "You rolled a 4."}],
            "finish_reason": "stop",
        }
    ]
    span = make_span(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.input.messages": json.dumps(inputs),
            "gen_ai.output.messages": json.dumps(outputs),
        }
    )
    reading = GENAI_READER.read(span)
    assert reading is not None
    roles = [m.role for m in reading.input_messages]
    assert roles == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL, Role.USER]
    thinking_turn = reading.input_messages[2]
    assert thinking_turn.content is None  # the reasoning is not visible text
    assert thinking_turn.tool_calls[0].arguments == {"sides": 6}
    tool = reading.input_messages[3]
    assert tool.content == "4"
    assert tool.tool_result is not None
    assert (tool.tool_result.call_id, tool.tool_result.name, tool.tool_result.content) == (
        "pyd_ai_1",
        "roll_die",
        "4",
    )
    assert reading.input_messages[4].content == "Thanks, again please"
    assert reading.output_messages[0].content == "You rolled a 4."
    assert reading.output_messages[0].finish_reason == "stop"


def test_response_takes_precedence_over_result_and_structured_results_become_json() -> None:
    span = make_span(
        {
            **CHAT,
            "gen_ai.input.messages": json.dumps(
                [
                    {
                        "role": "tool",
                        "parts": [
                            {
                                "type": "tool_call_response",
                                "id": "a",
                                "response": {"temp": 14},
                                "result": "ignored",
                            },
                            {"type": "tool_call_response", "id": " b", "result": ["x", "y"]},
                        ],
                    }
                ]
            ),
        }
    )
    reading = GENAI_READER.read(span)
    assert reading is not None
    first, second = reading.input_messages
    assert first.content == '{"temp":14}'
    assert second.content == '["x","y"]'
    assert second.tool_result is not None and second.tool_result.call_id == "b"  # stray space stripped


def test_reasoning_and_unknown_parts_skipped_and_text_parts_joined() -> None:
    span = make_span(
        {
            **CHAT,
            "gen_ai.output.messages": [
                {
                    "role": "assistant",
                    "parts": [
                        {"type": "reasoning", "content": "The user seems upset."},
                        {"type": "text", "content": "Sorry about that."},
                        {"type": "blob", "modality": "image", "content": "aGVsbG8="},
                        {"type": "server_tool_call", "name": "web_search"},
                        {"type": "text", "content": "Here is a fix."},
                    ],
                    "finish_reason": "stop",
                }
            ],
        }
    )
    reading = GENAI_READER.read(span)
    assert reading is not None
    [out] = reading.output_messages
    assert out.content == "Sorry about that.\nHere is a fix."
    assert "upset" not in out.text


def test_tool_call_arguments_parsed_only_when_json() -> None:
    span = make_span(
        {
            **CHAT,
            "gen_ai.output.messages": json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [
                            {"type": "tool_call", "id": "1", "name": "search", "arguments": '["a", "b"]'},
                            {"type": "tool_call", "id": "2", "name": "search", "arguments": "not json {"},
                            {"type": "tool_call", "id": "3", "name": "search"},
                        ],
                        "finish_reason": "tool_calls",
                    }
                ]
            ),
        }
    )
    reading = GENAI_READER.read(span)
    assert reading is not None
    args = [c.arguments for c in reading.output_messages[0].tool_calls]
    assert args == [["a", "b"], "not json {", None]


def test_system_instructions_forms() -> None:
    draft = make_span(
        {
            **CHAT,
            "gen_ai.system_instructions": {"role": "system", "message": {"type": "text", "content": "Old"}},
        }
    )
    plain = make_span({**CHAT, "gen_ai.system_instructions": "Answer in French."})
    two_parts = make_span(
        {
            **CHAT,
            "gen_ai.system_instructions": [
                {"type": "text", "content": "A"},
                {"type": "text", "content": "B"},
            ],
        }
    )
    for span, text in ((draft, "Old"), (plain, "Answer in French."), (two_parts, "A\nB")):
        reading = GENAI_READER.read(span)
        assert reading is not None
        assert [(m.role, m.content) for m in reading.input_messages] == [(Role.SYSTEM, text)]


def test_inference_operation_details_event_with_structured_messages() -> None:
    # gen-ai-events.md: event gen_ai.client.inference.operation.details, messages recorded in
    # structured form (util-genai _get_llm_messages_attributes_for_event).
    span = make_span(
        CHAT,
        [
            (
                "gen_ai.client.inference.operation.details",
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.system_instructions": SYSTEM,
                    "gen_ai.input.messages": INPUT,
                    "gen_ai.output.messages": OUTPUT,
                },
            )
        ],
    )
    reading = GENAI_READER.read(span)
    assert reading is not None
    _check_history(reading)


def test_deprecated_events_with_json_bodies_azure_sdk() -> None:
    # Azure AI Inference SDK tracing (azure/ai/inference/tracing.py): one span event per message
    # named gen_ai.{role}.message with the OpenAI message dict as JSON in gen_ai.event.content;
    # choices as gen_ai.choice {"message": {...}, "finish_reason", "index"}.
    def body(value: dict) -> dict:
        return {"gen_ai.system": "az.ai.inference", "gen_ai.event.content": json.dumps(value)}

    span = make_span(
        {**CHAT, "gen_ai.operation.name": "chat"},
        [
            ("gen_ai.system.message", body({"role": "system", "content": "You are helpful."})),
            ("gen_ai.user.message", body({"role": "user", "content": "What's the weather in Seattle?"})),
            (
                "gen_ai.assistant.message",
                body(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"city": "Seattle"}'},
                            }
                        ],
                    }
                ),
            ),
            (
                "gen_ai.tool.message",
                body({"role": "tool", "content": "Nice weather", "tool_call_id": "call_1"}),
            ),
            (
                "gen_ai.choice",
                body({"message": {"content": "It's nice in Seattle."}, "finish_reason": "stop", "index": 0}),
            ),
        ],
    )
    reading = GENAI_READER.read(span)
    assert reading is not None
    assert [(m.role, m.content) for m in reading.input_messages] == [
        (Role.SYSTEM, "You are helpful."),
        (Role.USER, "What's the weather in Seattle?"),
        (Role.ASSISTANT, None),
        (Role.TOOL, "Nice weather"),
    ]
    assert reading.input_messages[2].tool_calls[0].arguments == {"city": "Seattle"}
    tool = reading.input_messages[3].tool_result
    assert tool is not None and (tool.call_id, tool.name) == ("call_1", "get_weather")
    [out] = reading.output_messages
    assert (out.role, out.content, out.finish_reason) == (Role.ASSISTANT, "It's nice in Seattle.", "stop")


def test_deprecated_events_spread_over_attributes_with_json_choice_message() -> None:
    # Spec v1.36 event bodies spread over span-event attributes (as JS/OTel-SDK users add them with
    # span.addEvent): tool_calls as a JSON string, the tool result's "id", a choice whose "message"
    # is a JSON string; choices arrive out of index order.
    span = make_span(
        {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini"},
        [
            ("gen_ai.user.message", {"role": "user", "content": "Weather in SF?"}),
            (
                "gen_ai.assistant.message",
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": json.dumps(
                        [
                            {
                                "id": "call_abc123",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": "{}"},
                            }
                        ]
                    ),
                },
            ),
            ("gen_ai.tool.message", {"role": "tool", "content": '{"temperature": 72}', "id": "call_abc123"}),
            (
                "gen_ai.choice",
                {
                    "index": 1,
                    "finish_reason": "stop",
                    "message": json.dumps({"role": "assistant", "content": "Second"}),
                },
            ),
            (
                "gen_ai.choice",
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": json.dumps({"role": "assistant", "content": "First"}),
                },
            ),
        ],
    )
    reading = GENAI_READER.read(span)
    assert reading is not None
    assert [m.role for m in reading.input_messages] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert reading.input_messages[1].tool_calls[0].id == "call_abc123"
    tool = reading.input_messages[2]
    assert tool.content == '{"temperature": 72}'
    assert tool.tool_result is not None and tool.tool_result.name == "get_weather"
    assert [m.content for m in reading.output_messages] == ["First", "Second"]


def test_choice_event_without_message_key_and_non_json_message() -> None:
    span = make_span(
        {"gen_ai.operation.name": "chat"},
        [
            ("gen_ai.choice", {"index": 0, "content": "flat", "finish_reason": "length"}),
            ("gen_ai.choice", {"index": 1, "message": "plain text, not JSON"}),
        ],
    )
    reading = GENAI_READER.read(span)
    assert reading is not None
    assert [(m.content, m.finish_reason) for m in reading.output_messages] == [
        ("flat", "length"),
        ("plain text, not JSON", None),
    ]


def test_content_not_captured_still_gives_the_model_call() -> None:
    # OTel's default: no message content, only structure.
    span = make_span({**CHAT, "gen_ai.response.finish_reasons": ["stop"]})
    reading = GENAI_READER.read(span)
    assert reading is not None
    assert not reading.content_captured
    assert reading.input_messages == [] and reading.output_messages == []
    call = reading.llm_call
    assert call is not None
    assert (call.model, call.input_tokens, call.output_tokens, call.failed) == (
        "gpt-4o-2024-08-06",
        412,
        31,
        False,
    )


@pytest.mark.parametrize(
    ("parts", "content"),
    [
        ([], None),  # opentelemetry-instrumentation-openai-v2 2.4b0 for content given as a list
        ([{"type": "uri", "modality": "image", "uri": "https://example.com/bike.png"}], None),
        ([{"type": "reasoning", "content": "thinking"}], None),
        ([{"type": "refusal", "content": "I can't help with that."}], "I can't help with that."),
    ],
)
def test_a_message_without_readable_text_is_still_a_message(parts: list, content: str | None) -> None:
    # Dropped, every user turn of an openai-v2 agent sending content parts vanished.
    history = [
        {"role": "user", "parts": parts},
        {"role": "assistant", "parts": [{"type": "text", "content": "A red bicycle."}]},
        {"role": "user", "parts": parts},
    ]
    span = make_span({**CHAT, "gen_ai.input.messages": json.dumps(history)})
    reading = GENAI_READER.read(span)
    assert reading is not None
    assert [m.role for m in reading.input_messages] == [Role.USER, Role.ASSISTANT, Role.USER]
    assert reading.input_messages[0].content == content


def test_parts_without_content_are_structure_only() -> None:
    # Pydantic AI with include_content=False: parts keep their type and tool names, lose their text.
    span = make_span(
        {
            **CHAT,
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text"}]}]),
            "gen_ai.output.messages": json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [{"type": "tool_call", "id": "c1", "name": "lookup"}],
                        "finish_reason": "tool_call",
                    }
                ]
            ),
        }
    )
    reading = GENAI_READER.read(span)
    assert reading is not None
    assert not reading.content_captured
    assert [m.role for m in reading.input_messages] == [Role.USER]
    assert reading.output_messages[0].tool_calls[0].name == "lookup"


def test_failed_chat_span_rate_limited() -> None:
    span = make_span(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "error.type": "RateLimitError",
            "http.response.status_code": 429,
        },
        [
            (
                "exception",
                {
                    "exception.type": "openai.RateLimitError",
                    "exception.message": "Error code: 429 - Rate limit reached for gpt-4o",
                    "exception.stacktrace": "Traceback ...",
                },
            )
        ],
        status=ERROR,
        status_message="RateLimitError",
    )
    reading = GENAI_READER.read(span)
    assert reading is not None
    assert not reading.content_captured
    call = reading.llm_call
    assert call is not None
    assert call.failed
    assert call.error_type == "RateLimitError"
    assert call.status_code == 429
    assert call.error_message == "Error code: 429 - Rate limit reached for gpt-4o"
    assert call.model == "gpt-4o"


def test_spans_of_other_conventions_are_left_alone() -> None:
    assert GENAI_READER.read(make_span({"http.request.method": "GET"}, name="GET /")) is None
    assert (
        GENAI_READER.read(make_span({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "x"}))
        is None
    )
    assert (
        GENAI_READER.read(make_span({"gen_ai.operation.name": "embeddings", "gen_ai.input.messages": "x"}))
        is None
    )
    # A chat span whose content is in OpenLLMetry's indexed attributes: that reader's to read.
    openllmetry = {
        "gen_ai.operation.name": "chat",
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": "hi",
    }
    assert GENAI_READER.read(make_span(openllmetry)) is None
    # Pydantic AI's agent run span: system instructions beside pydantic_ai.all_messages.
    agent_run = {
        "gen_ai.system_instructions": json.dumps(SYSTEM),
        "pydantic_ai.all_messages": json.dumps(INPUT),
        "final_result": "done",
    }
    assert GENAI_READER.read(make_span(agent_run, name="agent run")) is None


def test_agent_span_with_messages_is_not_a_model_call() -> None:
    span = make_span(
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "travel",
            "gen_ai.input.messages": json.dumps(INPUT),
        },
        name="invoke_agent travel",
    )
    reading = GENAI_READER.read(span)
    assert reading is not None
    assert reading.llm_call is None
    assert len(reading.input_messages) == 5


def test_malformed_values_never_raise() -> None:
    big = "x" * 100_000
    cases = [
        {"gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "trunc'},
        {"gen_ai.input.messages": 42, "gen_ai.output.messages": True, "gen_ai.system_instructions": 3.5},
        {
            "gen_ai.input.messages": json.dumps(
                [1, "two", None, {"role": 7, "parts": "nope"}, {"parts": [None, 3]}]
            )
        },
        {
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": ["text"], "content": {"a": 1}}]}]
            )
        },
        {"gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": 12}]}])},
        {
            "gen_ai.output.messages": json.dumps(
                [
                    {
                        "role": "assistant",
                        "finish_reason": 3,
                        "parts": [
                            {"type": "tool_call", "id": {"x": 1}, "name": 5, "arguments": 7},
                            {"type": "tool_call_response", "id": 9, "response": None},
                        ],
                    }
                ]
            )
        },
        {
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": big}]}]
            )
        },
        {"gen_ai.input.messages": "[" * 5000 + "]" * 5000},
        {"gen_ai.input.messages": b"\xff\xfe not utf-8"},
        {"gen_ai.input.messages": ""},
        {"gen_ai.system_instructions": "[]", "gen_ai.input.messages": "{}"},
    ]
    for attributes in cases:
        reading = GENAI_READER.read(make_span({**CHAT, **attributes}))
        assert reading is not None
        assert reading.llm_call is not None
    truncated = GENAI_READER.read(make_span({**CHAT, **cases[0]}))
    assert truncated is not None and truncated.input_messages[0].role is Role.USER  # kept as plain text
    huge = GENAI_READER.read(make_span({**CHAT, **cases[6]}))
    assert huge is not None and huge.input_messages[0].content == big
    numeric = GENAI_READER.read(make_span({**CHAT, **cases[4]}))
    assert numeric is not None and numeric.input_messages[0].content == "12"


def test_malformed_events_never_raise() -> None:
    events = [
        ("gen_ai.user.message", {"gen_ai.event.content": "{not json"}),
        ("gen_ai.assistant.message", {"tool_calls": "[{broken", "content": 5}),
        ("gen_ai.tool.message", {"id": ["x"], "content": {"nested": True}}),
        ("gen_ai.choice", {"index": "first", "message": "[1, 2"}),
        ("gen_ai.choice", {"index": True, "message": 17}),
        ("gen_ai.client.inference.operation.details", {"gen_ai.input.messages": "garbage"}),
    ]
    for event in events:
        reading = GENAI_READER.read(make_span({"gen_ai.operation.name": "chat"}, [event]))
        assert reading is not None
    body_not_json = GENAI_READER.read(make_span({}, [events[0]]))
    assert body_not_json is not None
    assert body_not_json.input_messages[0].content == "{not json"


def test_lone_reasoning_content_is_not_visible_text() -> None:
    span = make_span(
        {"gen_ai.operation.name": "chat"},
        [
            (
                "gen_ai.choice",
                {"index": 0, "message": json.dumps({"content": {"type": "reasoning", "content": "hmm"}})},
            )
        ],
    )
    reading = GENAI_READER.read(span)
    assert reading is not None
    assert reading.output_messages[0].content is None
    assert not reading.content_captured


def test_the_tools_a_call_was_offered_are_read() -> None:
    offered = [
        {
            "type": "function",
            "name": "get_order",
            "description": "Look up an order",
            "parameters": {"type": "object"},
        },
        {
            "type": "function",
            "function": {"name": "refund", "description": "Refund an order"},
        },  # OpenAI shape
        {"type": "function"},  # no name: skipped
        "not a tool",
    ]
    span = make_span(
        {**CHAT, "gen_ai.input.messages": json.dumps(INPUT), "gen_ai.tool.definitions": json.dumps(offered)}
    )
    reading = GENAI_READER.read(span)
    assert reading is not None
    assert [(t["name"], t["description"]) for t in reading.tool_definitions] == [
        ("get_order", "Look up an order"),
        ("refund", "Refund an order"),
    ]
    assert reading.tool_definitions[0]["parameters"] == {"type": "object"}
    plain = GENAI_READER.read(make_span({**CHAT, "gen_ai.input.messages": json.dumps(INPUT)}))
    assert plain is not None and plain.tool_definitions == []


def test_the_same_tool_definitions_text_gives_the_same_objects() -> None:
    """An agent sends its tool list with every model call of every conversation: read once, kept as
    one set of objects however many conversations keep them."""
    from otelsignals.conventions import base

    offered = [{"type": "function", "name": f"tool_{n}", "parameters": {"type": "object"}} for n in range(3)]
    text = json.dumps(offered)

    def read(definitions: str) -> list[dict[str, object]]:
        reading = GENAI_READER.read(
            make_span(
                {**CHAT, "gen_ai.input.messages": json.dumps(INPUT), "gen_ai.tool.definitions": definitions}
            )
        )
        assert reading is not None
        return reading.tool_definitions

    first = read(text)
    assert read("".join(text)) is first  # equal text, another string: the same list
    other = read(json.dumps(offered[:2]))
    assert other is not first and other == first[:2]
    for n in range(base.SHARED_TOOL_DEFINITIONS):  # the oldest forgotten beyond the bound
        read(json.dumps([{"name": f"other_{n}"}]))
    assert len(base._TOOL_DEFINITIONS) == base.SHARED_TOOL_DEFINITIONS
    again = read(text)
    assert again == first and again is not first


def test_messages_without_tool_calls_share_the_empty_list() -> None:
    reading = GENAI_READER.read(make_span({**CHAT, "gen_ai.input.messages": json.dumps(INPUT)}))
    assert reading is not None
    user, call, result, answer, follow_up = reading.input_messages
    assert all(m.tool_calls is NO_TOOL_CALLS for m in (user, result, answer, follow_up))
    assert call.tool_calls is not NO_TOOL_CALLS and len(call.tool_calls) == 1


# OpenLLMetry (opentelemetry-instrumentation-anthropic 0.62.4, span_utils.py _content_to_parts)
# writes an Anthropic tool_result block as {"type": "tool_call_response", "id": tool_use_id,
# "response": block["content"]}, and that content is often a list of content blocks.
IMAGE_BLOCK = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
}


@pytest.mark.parametrize(
    ("response", "content"),
    [
        pytest.param(
            [{"type": "text", "text": "Error: weather service timed out"}],
            "Error: weather service timed out",
            id="one-text-block",
        ),
        pytest.param(
            [
                {"type": "text", "text": "Paris: sunny"},
                {"type": "text", "text": "Lyon: rainy", "citations": None},
            ],
            "Paris: sunny\nLyon: rainy",
            id="text-blocks-joined",
        ),
        pytest.param(
            [{"type": "text", "text": "Chart drawn."}, IMAGE_BLOCK],
            "Chart drawn.\n[image]",  # the image named, its data left out
            id="text-and-image-blocks",
        ),
        pytest.param([{"type": "text", "content": "OTel spelling"}], "OTel spelling", id="otel-text-part"),
        # Near-misses: the response as the tool gave it, text as it is and data as JSON.
        pytest.param("rainy, 57°F", "rainy, 57°F", id="plain-text"),
        pytest.param(
            '[{"type": "text", "text": "x"}]',
            '[{"type": "text", "text": "x"}]',
            id="text-that-looks-like-blocks",
        ),
        pytest.param(
            {"type": "forecast", "text": "sunny"}, '{"type":"forecast","text":"sunny"}', id="a-typed-object"
        ),
        pytest.param(
            [{"type": "user", "name": "x"}], '[{"type":"user","name":"x"}]', id="records-without-text"
        ),
        pytest.param(
            [{"type": "forecast", "text": "sunny"}],
            '[{"type":"forecast","text":"sunny"}]',
            id="records-of-own-type",
        ),
        pytest.param(
            [{"type": "text", "text": "a"}, {"type": "user", "name": "x"}],
            '[{"type":"text","text":"a"},{"type":"user","name":"x"}]',
            id="a-text-block-among-records",
        ),
        pytest.param(
            [{"type": "text", "title": "no text key"}],
            '[{"type":"text","title":"no text key"}]',
            id="text-without-text",
        ),
        pytest.param([IMAGE_BLOCK], json.dumps([IMAGE_BLOCK], separators=(",", ":")), id="no-text-block"),
        pytest.param(["x", "y"], '["x","y"]', id="strings"),
        pytest.param([], "[]", id="empty-list"),
    ],
)
def test_a_tool_result_of_content_blocks_reads_as_their_text(response, content) -> None:
    history = [
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "toolu_1", "name": "get_weather", "arguments": {"city": "Paris"}}
            ],
        },
        {"role": "user", "parts": [{"type": "tool_call_response", "id": "toolu_1", "response": response}]},
    ]
    reading = GENAI_READER.read(make_span({**CHAT, "gen_ai.input.messages": json.dumps(history)}))
    assert reading is not None
    result = reading.input_messages[-1]
    assert result.role is Role.TOOL and result.content == content
    assert result.tool_result is not None
    assert (result.tool_result.call_id, result.tool_result.name, result.tool_result.content) == (
        "toolu_1",
        "get_weather",
        content,
    )


# OpenLLMetry's LangChain instrumentation (opentelemetry-instrumentation-langchain 0.62.4,
# span_utils.py _content_to_parts) writes a content block it has no part type for as a text part
# holding json.dumps(block), and the message's tool calls as tool_call parts too. Anthropic's SDK
# gives a tool_use block's keys in its model's field order (id, input, name, type).
TOOL_USE = {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}
TOOL_USE_SDK_ORDER = {"id": "toolu_01", "input": {"city": "Paris"}, "name": "get_weather", "type": "tool_use"}
TOOL_CALL_PART = {
    "type": "tool_call",
    "id": "toolu_01",
    "name": "get_weather",
    "arguments": {"city": "Paris"},
}


def _text(content: str) -> dict:
    return {"type": "text", "content": content}


@pytest.mark.parametrize(
    ("role", "parts", "content", "calls"),
    [
        pytest.param(
            "assistant",
            [_text("Let me check the weather."), _text(json.dumps(TOOL_USE)), TOOL_CALL_PART],
            "Let me check the weather.",
            1,
            id="echo-dropped",
        ),
        pytest.param(
            "assistant",
            [_text(json.dumps(TOOL_USE_SDK_ORDER)), TOOL_CALL_PART],
            None,
            1,
            id="echo-in-sdk-key-order-alone",
        ),
        pytest.param(
            "assistant",
            [_text(json.dumps({**TOOL_USE, "id": " toolu_01"})), TOOL_CALL_PART],
            None,
            1,
            id="ids-compared-as-ids-are-read",
        ),
        # Near-misses: the assistant's own words stay.
        pytest.param(
            "assistant",
            [_text(json.dumps(TOOL_USE))],
            json.dumps(TOOL_USE),
            0,
            id="no-tool-call-part",  # the assistant wrote this JSON (an example, a quote)
        ),
        pytest.param(
            "assistant",
            [_text(json.dumps({**TOOL_USE, "id": "toolu_99"})), TOOL_CALL_PART],
            json.dumps({**TOOL_USE, "id": "toolu_99"}),
            1,
            id="another-id",
        ),
        pytest.param(
            "assistant",
            [_text(json.dumps({k: v for k, v in TOOL_USE.items() if k != "id"})), TOOL_CALL_PART],
            json.dumps({k: v for k, v in TOOL_USE.items() if k != "id"}),
            1,
            id="no-id",
        ),
        pytest.param(
            "assistant",
            [_text('A "tool_use" block looks like {"type": "tool_use", "id": "toolu_01"}.'), TOOL_CALL_PART],
            'A "tool_use" block looks like {"type": "tool_use", "id": "toolu_01"}.',
            1,
            id="text-mentioning-tool-use",
        ),
        pytest.param(
            "assistant",
            [_text('{"type": "tool_use", "id": "toolu_01", "input": {'), TOOL_CALL_PART],
            '{"type": "tool_use", "id": "toolu_01", "input": {',
            1,
            id="not-json",
        ),
        pytest.param(
            "assistant",
            [_text(json.dumps({**TOOL_USE, "type": "server_tool_use"})), TOOL_CALL_PART],
            json.dumps({**TOOL_USE, "type": "server_tool_use"}),
            1,
            id="another-block-type",
        ),
        pytest.param("user", [_text(json.dumps(TOOL_USE))], json.dumps(TOOL_USE), 0, id="user-text"),
        pytest.param(
            # Even beside a tool_call part: only an assistant's message echoes the calls it makes.
            "user",
            [_text(json.dumps(TOOL_USE)), TOOL_CALL_PART],
            json.dumps(TOOL_USE),
            1,
            id="user-text-beside-a-call",
        ),
    ],
)
def test_the_json_of_a_tool_use_block_beside_its_tool_call_is_not_text(role, parts, content, calls) -> None:
    history = [{"role": "user", "parts": [_text("Weather in Paris?")]}, {"role": role, "parts": parts}]
    reading = GENAI_READER.read(make_span({**CHAT, "gen_ai.input.messages": json.dumps(history)}))
    assert reading is not None
    message = reading.input_messages[-1]
    assert message.content == content
    assert len(message.tool_calls) == calls


def test_a_langchain_anthropic_turn_is_kept_once() -> None:
    # One agent turn, two model calls (as the reviewer's run of the real instrumentation wrote them):
    # the first call's answer is text + tool_call; the second call's history resends it with the
    # tool_use block's JSON as a text part between them. Read as text, the history did not match the
    # answer, and the whole history was appended again.
    first_answer = [
        {
            "role": "assistant",
            "parts": [_text("Let me check the weather."), TOOL_CALL_PART],
            "finish_reason": "tool_call",
        }
    ]
    question = {"role": "user", "parts": [_text("Weather in Paris?")]}
    resent = {
        "role": "assistant",
        "parts": [_text("Let me check the weather."), _text(json.dumps(TOOL_USE)), TOOL_CALL_PART],
    }
    tool_result = {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "toolu_01", "response": "sunny, 21C"}],
    }
    second_answer = [
        {"role": "assistant", "parts": [_text("It is sunny in Paris.")], "finish_reason": "stop"}
    ]
    calls = [
        {"gen_ai.input.messages": json.dumps([question]), "gen_ai.output.messages": json.dumps(first_answer)},
        {
            "gen_ai.input.messages": json.dumps([question, resent, tool_result]),
            "gen_ai.output.messages": json.dumps(second_answer),
        },
    ]
    readings = []
    for number, attributes in enumerate(calls, start=1):
        span = dataclasses.replace(
            make_span({**CHAT, **attributes}),
            span_id=number.to_bytes(8, "big"),
            start_time_unix_nano=1_700_000_000_000_000_000 + number * 1_000_000_000,
        )
        reading = GENAI_READER.read(span)
        assert reading is not None
        readings.append((span, reading))
    state = ConversationState.new("s-1")
    apply_trace(state, TRACE_ID, readings)
    assert [(m.role, m.content) for m in state.conversation.messages] == [
        (Role.USER, "Weather in Paris?"),
        (Role.ASSISTANT, "Let me check the weather."),
        (Role.TOOL, "sunny, 21C"),
        (Role.ASSISTANT, "It is sunny in Paris."),
    ]


_HELLO_EVENTS = [
    ("gen_ai.user.message", {"content": "hi"}),
    ("gen_ai.choice", {"message": json.dumps({"role": "assistant", "content": "hello"})}),
]


@pytest.mark.parametrize(
    ("attributes", "is_model_call"),
    [
        ({"gen_ai.operation.name": "chat"}, True),
        ({"gen_ai.operation.name": "text_completion", "gen_ai.request.model": "gpt-4o"}, True),
        # No operation named, but a model or its usage: an instrumentation that leaves the name out.
        ({"gen_ai.request.model": "claude-3-5-sonnet"}, True),
        ({"gen_ai.usage.input_tokens": 120}, True),
        # Agents' spans, and spans that name neither an operation nor a model (Strands Agents' event
        # loop cycles, which carry the conversation and enclose the model calls): no model call.
        ({"gen_ai.operation.name": "invoke_agent"}, False),
        ({"gen_ai.system": "strands-agents", "event_loop.cycle_id": "1"}, False),
        ({}, False),
    ],
)
def test_a_span_with_messages_is_a_model_call_when_it_names_an_operation_or_a_model(
    attributes, is_model_call
):
    reading = GENAI_READER.read(make_span(attributes, _HELLO_EVENTS, name="span"))
    assert reading is not None
    assert [m.content for m in reading.input_messages + reading.output_messages] == ["hi", "hello"]
    assert (reading.llm_call is not None) is is_model_call
