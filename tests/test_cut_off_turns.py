"""Turns cut off (analysis.py, triage.py): an agent turn that ended on a tool step, with no answer
after it, raises the conversation's priority, in every convention; its near misses do not."""

from __future__ import annotations

import time

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otelsignals.demo.emitter import ConversationEmitter
from otelsignals.demo.traffic import CONVENTIONS, SPAN_LIMITS
from otelsignals.otlp.wire import split_request
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.telemetry import Telemetry

LOOKUP = {"name": "get_order", "arguments": {"order_id": "A-7"}, "result": {"status": "packed"}}
TRANSFER = {"name": "transfer_to_human_agents", "arguments": {"summary": "refund dispute"}, "result": "ok"}
ANSWERED = {"user": "Where is order A-7?", "steps": [{"tool_calls": [LOOKUP]}, {"text": "It is packed."}]}
CUT_OFF = {"user": "And order A-8?", "steps": [{"tool_calls": [LOOKUP]}, {"tool_calls": [LOOKUP]}]}
HANDED_OFF = {"user": "I want my money back.", "steps": [{"tool_calls": [TRANSFER]}]}


def spans_of(convention: str, turns: list[dict]) -> list[list[ReadableSpan]]:
    """The spans of a scripted conversation in ``convention``, by trace, as the real SDK made them."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}), span_limits=SPAN_LIMITS)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    conversation = {
        "id": f"cut-{convention}",
        "agent_name": "shop-agent",
        "service_name": "shop",
        "convention": convention,
        "session_id": f"cut-{convention}",
        "model": "gpt-4o-mini",
        "system_prompt": "You are the order-status assistant.",
        "turns": turns,
        "story": "",
    }
    ConversationEmitter(conversation, provider, {}, 0, time.time_ns() - 10**12).emit()
    provider.shutdown()
    by_trace: dict[int, list[ReadableSpan]] = {}
    for span in memory.get_finished_spans():
        by_trace.setdefault(span.context.trace_id, []).append(span)
    return sorted(by_trace.values(), key=lambda spans: min(s.start_time or 0 for s in spans))


def released(spans: list[ReadableSpan]) -> ReleasedTrace:
    records = split_request(encode_spans(spans)).records
    return ReleasedTrace(records[0].trace_id, records, "complete", sum(len(r.data) for r in records))


def analysed(convention: str, turns: list[dict]) -> Analyzer:
    analyzer = Analyzer(Telemetry())
    for spans in spans_of(convention, turns):
        analyzer.process(released(spans))
    return analyzer


def terms(analyzer: Analyzer, convention: str) -> dict[str, float]:
    state = analyzer.sessions.get(f"cut-{convention}")
    assert state is not None
    return state.priority.terms


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_a_turn_that_ended_on_a_tool_step_is_ranked_up_in_every_convention(convention: str) -> None:
    analyzer = analysed(convention, [ANSWERED, CUT_OFF])
    assert "cut_off_turns" in terms(analyzer, convention)


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize(
    "turns",
    [
        [ANSWERED],  # tools, then the answer
        [ANSWERED, {"user": "Thanks!", "steps": [{"text": "You're welcome."}]}],
        [HANDED_OFF],  # a hand-off ends the turn on a tool on purpose: its own term ranks it
    ],
    ids=["answered", "answered-twice", "handed-off"],
)
def test_turns_that_got_an_answer_or_a_hand_off_are_not_cut_off(convention: str, turns: list[dict]) -> None:
    assert "cut_off_turns" not in terms(analysed(convention, turns), convention)


def test_an_answer_that_came_late_takes_the_turn_back_off_the_list() -> None:
    """A trace released before its last model call arrived (the assembler's wait ran out) looks cut
    off; the late model call with the answer, analysed as a late part of the same trace, says not."""
    answered_late = {"user": "Where is order A-7?", "steps": [{"tool_calls": [LOOKUP]}, {"text": "Packed."}]}
    (spans,) = spans_of("genai", [answered_late])
    model_calls = [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]
    last_call = max(model_calls, key=lambda s: s.start_time or 0)
    analyzer = Analyzer(Telemetry())
    analyzer.process(released([s for s in spans if s is not last_call]))
    assert "cut_off_turns" in terms(analyzer, "genai")
    analyzer.process(released([last_call]))
    assert "cut_off_turns" not in terms(analyzer, "genai")
