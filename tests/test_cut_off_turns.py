"""Turns cut off (analysis.py, triage.py): an agent turn that ended on a tool step, with no answer
after it, raises the conversation's priority, in every convention; its near misses do not."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otelsignals.analysis import CUT_OFF_TURNS_KEPT
from otelsignals.demo.emitter import ConversationEmitter
from otelsignals.demo.traffic import CONVENTIONS, SPAN_LIMITS
from otelsignals.offline import read_requests, traces_in_time_order
from otelsignals.otlp.wire import split_request
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.telemetry import Telemetry

LOOKUP = {"name": "get_order", "arguments": {"order_id": "A-7"}, "result": {"status": "packed"}}
TRANSFER = {"name": "transfer_to_human_agents", "arguments": {"summary": "refund dispute"}, "result": "ok"}
ANSWERED = {"user": "Where is order A-7?", "steps": [{"tool_calls": [LOOKUP]}, {"text": "It is packed."}]}
CUT_OFF = {"user": "And order A-8?", "steps": [{"tool_calls": [LOOKUP]}, {"tool_calls": [LOOKUP]}]}
HANDED_OFF = {"user": "I want my money back.", "steps": [{"tool_calls": [TRANSFER]}]}


FIXTURES = Path(__file__).parent / "fixtures"
RECORDINGS = sorted(p for p in FIXTURES.glob("*/*.binpb") if not p.name.endswith(".logs.binpb"))


def spans_of(convention: str, turns: list[dict], key: str = "") -> list[list[ReadableSpan]]:
    """The spans of a scripted conversation in ``convention``, by trace, as the real SDK made them."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}), span_limits=SPAN_LIMITS)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    conversation = {
        "id": key or f"cut-{convention}",
        "agent_name": "shop-agent",
        "service_name": "shop",
        "convention": convention,
        "session_id": key or f"cut-{convention}",
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


def terms(analyzer: Analyzer, convention: str, key: str = "") -> dict[str, float]:
    state = analyzer.sessions.get(key or f"cut-{convention}")
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


def test_a_late_part_that_says_nothing_of_the_end_leaves_the_turn_cut_off() -> None:
    """The cut-off turn's first model call arriving after the rest: the turn is still cut off."""
    answered, cut_off = spans_of("genai", [ANSWERED, CUT_OFF])
    model_calls = [s for s in cut_off if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]
    first_call = min(model_calls, key=lambda s: s.start_time or 0)
    analyzer = Analyzer(Telemetry())
    analyzer.process(released(answered))
    analyzer.process(released([s for s in cut_off if s is not first_call]))
    assert "cut_off_turns" in terms(analyzer, "genai")
    analyzer.process(released([first_call]))
    assert "cut_off_turns" in terms(analyzer, "genai")


def test_an_answer_in_late_log_records_takes_the_turn_back_off() -> None:
    """OpenAI v2 with content as log records (a real recording): the last model call's records
    held back until after its trace was analysed, as a slow log pipeline delivers them."""
    folder = FIXTURES / "openai_v2_events"
    logs = ExportLogsServiceRequest.FromString((folder / "tools.logs.binpb").read_bytes())
    requests = read_requests(folder / "tools.binpb")
    traces = list(traces_in_time_order(requests))
    spans = [Span.FromString(record.data) for trace in traces for record in trace.spans]
    last_call = max(
        (s for s in spans if s.name.startswith("chat")), key=lambda span: span.start_time_unix_nano
    )

    def records(late: bool) -> ExportLogsServiceRequest:
        request = ExportLogsServiceRequest()
        request.CopyFrom(logs)
        for scope in (scope for resource in request.resource_logs for scope in resource.scope_logs):
            kept = [r for r in scope.log_records if (r.span_id == last_call.span_id) is late]
            del scope.log_records[:]
            scope.log_records.extend(kept)
        return request

    analyzer = Analyzer(Telemetry())
    analyzer.log_events.add(records(late=False))
    for trace in traces:
        analyzer.process(trace)
    (state,) = analyzer.sessions
    assert state.cut_off_turns  # the answer is not there yet: the turn looks cut off
    analyzer.log_events.add(records(late=True))
    assert analyzer.apply_late_log_events()
    assert not state.cut_off_turns and "cut_off_turns" not in state.priority.terms


@pytest.mark.parametrize("recording", RECORDINGS, ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_no_conversation_recorded_from_a_real_library_is_cut_off(recording: Path) -> None:
    """Every recording (tests/fixtures: eleven instrumentation variants, their answers, errors and
    tool calls, among them a Vercel AI SDK v4 app that answers a failed tool in a new trace)."""
    analyzer = Analyzer(Telemetry())
    logs = recording.with_suffix(".logs.binpb")
    if logs.exists():
        analyzer.log_events.add(ExportLogsServiceRequest.FromString(logs.read_bytes()))
    for trace in traces_in_time_order(read_requests(recording)):
        analyzer.process(trace)
    assert [state.cut_off_turns for state in analyzer.sessions] == [() for _ in analyzer.sessions]


FINAL = {"name": "final_answer", "arguments": {"answer": "It is packed."}, "result": "It is packed."}


@pytest.mark.parametrize(
    ("steps", "counted_after_the_baseline"),
    [
        ([{"tool_calls": [LOOKUP]}, {"tool_calls": [FINAL]}], False),  # a final-answer tool: design
        ([{"tool_calls": [LOOKUP]}] * 3, True),  # stuck on one tool every time: still cut off
    ],
    ids=["final-answer-tool", "stuck-on-a-tool"],
)
def test_an_agent_whose_turns_end_on_a_final_tool_by_design_stops_being_ranked_for_it(
    steps: list[dict], counted_after_the_baseline: bool
) -> None:
    analyzer = Analyzer(Telemetry())
    counted = []
    for number in range(14):
        key = f"agent-{number}"
        for spans in spans_of("genai", [{"user": f"Where is order A-{number}?", "steps": steps}], key):
            analyzer.process(released(spans))
        counted.append("cut_off_turns" in terms(analyzer, "genai", key))
    baseline = analyzer.agent_baselines.min_conversations
    assert counted == [True] * baseline + [counted_after_the_baseline] * (14 - baseline)


def test_only_the_latest_turns_cut_off_are_kept() -> None:
    analyzer = analysed("genai", [CUT_OFF] * (CUT_OFF_TURNS_KEPT + 2))
    state = analyzer.sessions.get("cut-genai")
    assert state is not None and len(state.cut_off_turns) == CUT_OFF_TURNS_KEPT
    assert f"({CUT_OFF_TURNS_KEPT}×)" in state.priority.reasons[0]
