"""Strands Agents' default span events: messages as the JSON of Bedrock Converse content blocks.

Shapes from strands-agents/sdk-python ``src/strands/telemetry/tracer.py`` without the
``gen_ai_latest_experimental`` opt-in: each message a ``gen_ai.{role}.message`` event (or
``gen_ai.tool.message`` when it holds a toolResult) with ``content`` = ``json.dumps`` of its content
blocks; the answer a ``gen_ai.choice`` event with ``message`` = the same (plain text on the agent
span) and ``finish_reason``; a tool span's call in a ``gen_ai.tool.message`` event (the input) and a
``gen_ai.choice`` event (the result's content blocks). Spans: ``invoke_agent`` >
``execute_event_loop_cycle`` > ``chat`` / ``execute_tool``.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otelsignals.conventions.genai import GENAI_READER
from otelsignals.conventions.tools import TOOLS_READER
from otelsignals.model import Role
from otelsignals.offline import traces_in_time_order
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.telemetry import Telemetry
from tests.conventions.spans import key_values, make_span


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)  # as Strands' serialize() writes


QUESTION = [{"text": "What's the weather in Paris?"}]
TOOL_USE = {"toolUse": {"toolUseId": "tooluse_abc", "name": "get_weather", "input": {"city": "Paris"}}}
CALLING = [{"text": "Let me check."}, TOOL_USE]
SUNNY = {"toolResult": {"toolUseId": "tooluse_abc", "status": "success", "content": [{"text": "sunny, 21C"}]}}
ANSWER = [{"text": "It is sunny in Paris, 21C."}]
IMAGE = {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}}
REASONING = {"reasoningContent": {"reasoningText": {"text": "The user wants weather.", "signature": "sig"}}}
CHAT = {"gen_ai.operation.name": "chat", "gen_ai.system": "strands-agents", "gen_ai.request.model": "claude"}
PARIS_CALL = [("get_weather", "tooluse_abc", {"city": "Paris"})]


def _result(status: str = "success", content: Any = None) -> dict:
    blocks = [{"text": "sunny, 21C"}] if content is None else content
    return {"toolResult": {"toolUseId": "tooluse_abc", "status": status, "content": blocks}}


def _read(event: str, attributes: dict) -> list[tuple]:
    """The messages one event gives on a chat span: (role, content, calls, (call id, name, error))."""
    reading = GENAI_READER.read(make_span(CHAT, [(event, attributes)], name="chat"))
    assert reading is not None
    return [
        (
            m.role,
            m.content,
            [(c.name, c.id, c.arguments) for c in m.tool_calls],
            None
            if m.tool_result is None
            else (m.tool_result.call_id, m.tool_result.content, m.tool_result.is_error),
        )
        for m in reading.input_messages + reading.output_messages
    ]


@pytest.mark.parametrize(
    ("event", "content", "messages"),
    [
        pytest.param(
            "gen_ai.user.message",
            dumps(QUESTION),
            [(Role.USER, "What's the weather in Paris?", [], None)],
            id="user-text-block",
        ),
        pytest.param(
            "gen_ai.user.message",
            dumps([{"text": "Paris"}, {"text": "and Lyon"}]),
            [(Role.USER, "Paris\nand Lyon", [], None)],
            id="text-blocks-joined",
        ),
        pytest.param(
            "gen_ai.assistant.message",
            dumps(CALLING),
            [(Role.ASSISTANT, "Let me check.", PARIS_CALL, None)],
            id="text-and-tool-use",
        ),
        pytest.param(
            "gen_ai.assistant.message",
            dumps([REASONING, TOOL_USE]),
            [(Role.ASSISTANT, None, PARIS_CALL, None)],
            id="reasoning-left-out",
        ),
        pytest.param(
            "gen_ai.tool.message",
            dumps([SUNNY]),
            [(Role.TOOL, "sunny, 21C", [], ("tooluse_abc", "sunny, 21C", False))],
            id="tool-result",
        ),
        pytest.param(
            "gen_ai.user.message",  # Bedrock sends tool results in user messages
            dumps([SUNNY]),
            [(Role.TOOL, "sunny, 21C", [], ("tooluse_abc", "sunny, 21C", False))],
            id="tool-result-in-a-user-message",
        ),
        pytest.param(
            "gen_ai.tool.message",
            dumps([_result("error", [{"text": "Error: city not found"}])]),
            [(Role.TOOL, "Error: city not found", [], ("tooluse_abc", "Error: city not found", True))],
            id="failed-tool-result",
        ),
        pytest.param(
            "gen_ai.tool.message",
            dumps([_result(content=[{"text": "sunny"}, {"json": {"temp": 21, "unit": "C"}}])]),
            [
                (
                    Role.TOOL,
                    'sunny\n{"temp":21,"unit":"C"}',
                    [],
                    ("tooluse_abc", 'sunny\n{"temp":21,"unit":"C"}', False),
                )
            ],
            id="json-block-as-compact-json",
        ),
        pytest.param(
            "gen_ai.tool.message",
            dumps([_result(content=[{"text": "Chart drawn."}, IMAGE])]),
            [(Role.TOOL, "Chart drawn.\n[image]", [], ("tooluse_abc", "Chart drawn.\n[image]", False))],
            id="image-in-a-result-named",
        ),
        pytest.param(
            "gen_ai.tool.message",
            dumps([SUNNY, {"toolResult": {**SUNNY["toolResult"], "toolUseId": "tooluse_def"}}]),
            [
                (Role.TOOL, "sunny, 21C", [], ("tooluse_abc", "sunny, 21C", False)),
                (Role.TOOL, "sunny, 21C", [], ("tooluse_def", "sunny, 21C", False)),
            ],
            id="parallel-results",
        ),
        pytest.param(
            "gen_ai.user.message",
            dumps([{"text": "Describe this."}, IMAGE]),
            [(Role.USER, "Describe this.", [], None)],
            id="image-left-out-of-a-message",
        ),
        pytest.param(
            "gen_ai.user.message",
            dumps([IMAGE]),
            [(Role.USER, None, [], None)],  # still a turn, without text
            id="image-alone",
        ),
        pytest.param(
            "gen_ai.assistant.message",
            dumps(
                [
                    {
                        "citationsContent": {
                            "citations": [{"title": "doc"}],
                            "content": [{"text": "Per the doc, yes."}],
                        }
                    }
                ]
            ),
            [(Role.ASSISTANT, "Per the doc, yes.", [], None)],
            id="citations-text",
        ),
        # Near-misses: text a user typed that looks like JSON stays the text it is.
        pytest.param(
            "gen_ai.user.message",
            '[{"text": "a"}, 3]',
            [(Role.USER, '[{"text": "a"}, 3]', [], None)],
            id="not-all-blocks",
        ),
        pytest.param(
            "gen_ai.user.message", '[{"name": "x"}]', [(Role.USER, '[{"name": "x"}]', [], None)], id="records"
        ),
        pytest.param(
            "gen_ai.user.message",
            '[{"text": "a", "id": 1}]',
            [(Role.USER, '[{"text": "a", "id": 1}]', [], None)],
            id="block-key-among-others",
        ),
        pytest.param(
            "gen_ai.user.message",
            '[{"text": 5}]',
            [(Role.USER, '[{"text": 5}]', [], None)],
            id="text-not-a-string",
        ),
        pytest.param(
            "gen_ai.user.message",
            '[{"toolUse": "get_weather"}]',
            [(Role.USER, '[{"toolUse": "get_weather"}]', [], None)],
            id="tool-use-not-an-object",
        ),
        pytest.param(
            "gen_ai.user.message",
            "[draft] what's the weather?",
            [(Role.USER, "[draft] what's the weather?", [], None)],
            id="plain-text-starting-with-a-bracket",
        ),
        pytest.param(
            "gen_ai.user.message", '[{"text": "a"', [(Role.USER, '[{"text": "a"', [], None)], id="cut-json"
        ),
        pytest.param("gen_ai.user.message", "[]", [(Role.USER, "[]", [], None)], id="empty-list"),
        pytest.param(
            "gen_ai.user.message",  # OpenAI-style typed parts: read as before
            '[{"type": "text", "text": "typed"}]',
            [(Role.USER, "typed", [], None)],
            id="typed-parts",
        ),
    ],
)
def test_a_message_event_of_bedrock_blocks_reads_as_the_message(event, content, messages) -> None:
    assert _read(event, {"content": content}) == messages


def test_a_tool_message_of_text_blocks_is_one_result_of_its_call_id() -> None:
    # The event form of the deprecated GenAI convention ({content, id}) with Bedrock blocks as content.
    messages = _read("gen_ai.tool.message", {"content": dumps([{"text": "sunny, 21C"}]), "id": "tooluse_abc"})
    assert messages == [(Role.TOOL, "sunny, 21C", [], ("tooluse_abc", "sunny, 21C", False))]


def test_bedrock_messages_in_the_input_messages_attribute() -> None:
    # The same blocks as a {role, content} message of gen_ai.input.messages (no "parts").
    history = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": CALLING}]
    reading = GENAI_READER.read(make_span({**CHAT, "gen_ai.input.messages": dumps(history)}))
    assert reading is not None
    user, assistant = reading.input_messages
    assert (user.role, user.content) == (Role.USER, "What's the weather in Paris?")
    assert (assistant.content, [(c.name, c.id, c.arguments) for c in assistant.tool_calls]) == (
        "Let me check.",
        PARIS_CALL,
    )


@pytest.mark.parametrize(
    ("choice", "answer"),
    [
        pytest.param(
            {"finish_reason": "tool_use", "message": dumps(CALLING)},
            [(Role.ASSISTANT, "Let me check.", PARIS_CALL, "tool_use")],
            id="text-and-tool-use",
        ),
        pytest.param(
            {"finish_reason": "end_turn", "message": dumps([REASONING, *ANSWER])},
            [(Role.ASSISTANT, "It is sunny in Paris, 21C.", [], "end_turn")],
            id="reasoning-left-out",
        ),
        pytest.param(
            # The event loop cycle's choice: the answer, then the tool results sent back.
            {"message": dumps(CALLING), "tool.result": dumps([SUNNY])},
            [(Role.ASSISTANT, "Let me check.", PARIS_CALL, None), (Role.TOOL, "sunny, 21C", [], None)],
            id="cycle-with-tool-result",
        ),
        pytest.param(
            # The agent span's choice: str(AgentResult), plain text.
            {"finish_reason": "end_turn", "message": "It is sunny in Paris, 21C.\n"},
            [(Role.ASSISTANT, "It is sunny in Paris, 21C.\n", [], "end_turn")],
            id="agent-plain-text",
        ),
        # Near-misses: an answer that is a JSON array of no blocks stays its text (it was lost).
        pytest.param(
            {"finish_reason": "end_turn", "message": '[{"name": "Paris"}, {"name": "Lyon"}]'},
            [(Role.ASSISTANT, '[{"name": "Paris"}, {"name": "Lyon"}]', [], "end_turn")],
            id="records",
        ),
        pytest.param(
            {"message": '[{"text": "a"}, 3]'},
            [(Role.ASSISTANT, '[{"text": "a"}, 3]', [], None)],
            id="not-all-blocks",
        ),
        pytest.param({"message": "[1, 2, 3]"}, [(Role.ASSISTANT, "[1, 2, 3]", [], None)], id="numbers"),
    ],
)
def test_a_choice_of_bedrock_blocks_is_the_answer(choice, answer) -> None:
    reading = GENAI_READER.read(
        make_span(CHAT, [("gen_ai.user.message", {"content": dumps(QUESTION)}), ("gen_ai.choice", choice)])
    )
    assert reading is not None
    assert [
        (m.role, m.content, [(c.name, c.id, c.arguments) for c in m.tool_calls], m.finish_reason)
        for m in reading.output_messages
    ] == answer


TOOL_SPAN = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.system": "strands-agents",
    "gen_ai.tool.name": "get_weather",
    "gen_ai.tool.call.id": "tooluse_abc",
}


def _tool_events(result: str, *, event_id: str = "tooluse_abc") -> list[tuple[str, dict]]:
    return [
        ("gen_ai.tool.message", {"role": "tool", "content": dumps({"city": "Paris"}), "id": event_id}),
        ("gen_ai.choice", {"message": result, "id": event_id}),
    ]


@pytest.mark.parametrize(
    ("result", "content"),
    [
        pytest.param(dumps([{"text": "sunny, 21C"}]), "sunny, 21C", id="text-block"),
        pytest.param(dumps([{"json": {"temp": 21}}]), '{"temp":21}', id="json-block"),
        pytest.param(dumps([{"json": 3}]), "3", id="json-number"),
        pytest.param(dumps([{"text": "Chart drawn."}, IMAGE]), "Chart drawn.\n[image]", id="image-named"),
        # Near-misses: results that are no result blocks, as the tool gave them.
        pytest.param("sunny, 21C", "sunny, 21C", id="plain-text"),
        pytest.param('[{"name": "Paris"}]', '[{"name": "Paris"}]', id="records"),
        pytest.param(
            '[{"text": "a", "score": 1}]', '[{"text": "a", "score": 1}]', id="block-key-among-others"
        ),
        pytest.param(dumps([TOOL_USE]), dumps([TOOL_USE]), id="message-blocks-are-no-result-blocks"),
    ],
)
def test_a_strands_tool_span_carries_the_call_of_its_events(result, content) -> None:
    reading = TOOLS_READER.read(
        make_span({**TOOL_SPAN, "gen_ai.tool.status": "success"}, _tool_events(result))
    )
    assert reading is not None and reading.content_captured
    execution = reading.tool_execution
    assert execution is not None
    assert (execution.call_id, execution.arguments) == ("tooluse_abc", {"city": "Paris"})
    assert (execution.result.call_id, execution.result.content, execution.result.is_error) == (
        "tooluse_abc",
        content,
        False,
    )


def test_a_tool_span_event_of_another_call_is_not_read() -> None:
    reading = TOOLS_READER.read(
        make_span(TOOL_SPAN, _tool_events(dumps([{"text": "x"}]), event_id="tooluse_other"))
    )
    assert reading is not None and reading.tool_execution is not None
    assert reading.tool_execution.arguments is None and reading.tool_execution.result.content is None
    assert not reading.content_captured


def test_tool_span_attributes_win_over_its_events() -> None:
    attributes = {
        **TOOL_SPAN,
        "gen_ai.tool.call.arguments": '{"city": "Lyon"}',
        "gen_ai.tool.call.result": "rainy",
    }
    reading = TOOLS_READER.read(make_span(attributes, _tool_events(dumps([{"text": "sunny"}]))))
    assert reading is not None and reading.tool_execution is not None
    assert reading.tool_execution.arguments == {"city": "Lyon"}
    assert reading.tool_execution.result.content == "rainy"


@pytest.mark.parametrize(("status", "failed"), [("error", True), ("success", False), (None, False)])
def test_a_failed_result_status_marks_the_tool_span_failed(status, failed) -> None:
    # Strands gives a tool that returned a failed result status "error" without failing the span.
    attributes = TOOL_SPAN if status is None else {**TOOL_SPAN, "gen_ai.tool.status": status}
    reading = TOOLS_READER.read(make_span(attributes, _tool_events(dumps([{"text": "Error: no such city"}]))))
    assert reading is not None and reading.tool_execution is not None
    result = reading.tool_execution.result
    assert (result.is_error, result.error_message) == (failed, "Error: no such city" if failed else None)


# -- one Strands turn through the analyzer -----------------------------------------------------
_span_ids = itertools.count(1)
T0 = 1_700_000_000_000_000_000
TRACE = (11).to_bytes(16, "big")


def _span(name: str, attributes: dict, events: list, start: int, end: int, parent: bytes = b"") -> Span:
    span = Span(
        trace_id=TRACE,
        span_id=next(_span_ids).to_bytes(8, "big"),
        parent_span_id=parent,
        name=name,
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=T0 + start * 1_000_000,
        end_time_unix_nano=T0 + end * 1_000_000,
    )
    span.attributes.extend(
        key_values({"gen_ai.system": "strands-agents", "session.id": "strands-1", **attributes})
    )
    for offset, (event_name, event_attributes) in enumerate(events):
        event = span.events.add(name=event_name, time_unix_nano=T0 + start * 1_000_000 + offset)
        event.attributes.extend(key_values(event_attributes))
    return span


def _strands_turn() -> list[Span]:
    """One question, one tool call, one answer, as Strands' tracer writes them."""
    question = ("gen_ai.user.message", {"content": dumps(QUESTION)})
    calling = ("gen_ai.assistant.message", {"content": dumps(CALLING)})
    result = ("gen_ai.tool.message", {"content": dumps([SUNNY])})
    agent = _span(
        "invoke_agent Strands Agents",
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Strands Agents"},
        [
            question,
            ("gen_ai.choice", {"message": "It is sunny in Paris, 21C.\n", "finish_reason": "end_turn"}),
        ],
        0,
        20,
    )
    cycle = _span(
        "execute_event_loop_cycle",
        {"event_loop.cycle_id": "c1"},
        [question, ("gen_ai.choice", {"message": dumps(CALLING), "tool.result": dumps([SUNNY])})],
        1,
        9,
        agent.span_id,
    )
    first_call = _span(
        "chat",
        {**CHAT, "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 20},
        [question, ("gen_ai.choice", {"finish_reason": "tool_use", "message": dumps(CALLING)})],
        2,
        4,
        cycle.span_id,
    )
    tool = _span(
        "execute_tool get_weather",
        {**TOOL_SPAN, "gen_ai.tool.status": "success"},
        _tool_events(dumps([{"text": "sunny, 21C"}])),
        5,
        6,
        cycle.span_id,
    )
    next_cycle = _span(
        "execute_event_loop_cycle",
        {"event_loop.cycle_id": "c2", "event_loop.parent_cycle_id": "c1"},
        [question, calling, result, ("gen_ai.choice", {"message": dumps(ANSWER)})],
        10,
        19,
        cycle.span_id,
    )
    second_call = _span(
        "chat",
        CHAT,
        [
            question,
            calling,
            result,
            ("gen_ai.choice", {"finish_reason": "end_turn", "message": dumps(ANSWER)}),
        ],
        11,
        13,
        next_cycle.span_id,
    )
    return [agent, cycle, first_call, tool, next_cycle, second_call]


def test_a_strands_turn_reads_as_the_conversation_once() -> None:
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    resource.resource.attributes.extend(key_values({"service.name": "agent"}))
    resource.scope_spans.add().spans.extend(_strands_turn())
    analyzer = Analyzer(Telemetry(60))
    for trace in traces_in_time_order([request]):
        analyzer.process(trace)
    [state] = analyzer.sessions
    messages = state.conversation.messages
    assert [(m.role, m.content, [(c.name, c.id, c.arguments) for c in m.tool_calls]) for m in messages] == [
        (Role.USER, "What's the weather in Paris?", []),
        (Role.ASSISTANT, "Let me check.", PARIS_CALL),
        (Role.TOOL, "sunny, 21C", []),
        (Role.ASSISTANT, "It is sunny in Paris, 21C.", []),
    ]
    result = messages[2].tool_result
    assert result is not None
    assert (result.call_id, result.name, result.content, result.arguments, result.is_error) == (
        "tooluse_abc",
        "get_weather",
        "sunny, 21C",
        {"city": "Paris"},
        False,
    )
