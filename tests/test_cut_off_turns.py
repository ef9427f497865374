"""Turns cut off (analysis.py, triage.py): an agent turn that ended on a tool step, with no answer
after it, raises the conversation's priority, in every convention; its near misses do not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from bench.reassembly import traces_of_conversation
from otelsignals.analysis import CUT_OFF_TURNS_KEPT, analyze_update
from otelsignals.conventions.base import SpanReading, ToolExecution
from otelsignals.conversation import ConversationState, apply_trace
from otelsignals.demo.traffic import CONVENTIONS
from otelsignals.model import Role, ToolCall, ToolResult
from otelsignals.otlp.wire import SpanRecord
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.telemetry import Telemetry
from tests.test_conversation import agent_turn, assistant, chat, tool, user, view
from tests.test_reassembly_fixtures import recorded

LOOKUP = {"name": "get_order", "arguments": {"order_id": "A-7"}, "result": {"status": "packed"}}
TRANSFER = {"name": "transfer_to_human_agents", "arguments": {"summary": "refund dispute"}, "result": "ok"}
ANSWERED = {"user": "Where is order A-7?", "steps": [{"tool_calls": [LOOKUP]}, {"text": "It is packed."}]}
CUT_OFF = {"user": "And order A-8?", "steps": [{"tool_calls": [LOOKUP]}, {"tool_calls": [LOOKUP]}]}
HANDED_OFF = {"user": "I want my money back.", "steps": [{"tool_calls": [TRANSFER]}]}


FIXTURES = Path(__file__).parent / "fixtures"
RECORDINGS = sorted(p for p in FIXTURES.glob("*/*.binpb") if not p.name.endswith(".logs.binpb"))
MODEL_CALL_NAMES = ("chat", "openai.chat", "ChatCompletion")


def traces_of(convention: str, turns: list[dict], key: str = "") -> list[ReleasedTrace]:
    """A scripted conversation in ``convention`` as the real SDK emits it, a released trace a turn."""
    return traces_of_conversation(
        {
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
    )


def model_calls(trace: ReleasedTrace) -> list[SpanRecord]:
    """The trace's model-call spans, in the order they started."""
    spans = sorted(
        ((Span.FromString(r.data), r) for r in trace.spans), key=lambda s: s[0].start_time_unix_nano
    )
    return [record for span, record in spans if span.name.startswith(MODEL_CALL_NAMES)]


def part(trace: ReleasedTrace, records: list[SpanRecord]) -> ReleasedTrace:
    """Some of ``trace``'s spans, released as the assembler releases a part of a trace."""
    return ReleasedTrace(trace.trace_id, records, "complete", sum(len(r.data) for r in records))


def analysed(convention: str, turns: list[dict]) -> Analyzer:
    analyzer = Analyzer(Telemetry())
    for trace in traces_of(convention, turns):
        analyzer.process(trace)
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
    (trace,) = traces_of("genai", [answered_late])
    last_call = model_calls(trace)[-1]
    analyzer = Analyzer(Telemetry())
    analyzer.process(part(trace, [r for r in trace.spans if r is not last_call]))
    assert "cut_off_turns" in terms(analyzer, "genai")
    analyzer.process(part(trace, [last_call]))
    assert "cut_off_turns" not in terms(analyzer, "genai")


def test_a_late_part_that_says_nothing_of_the_end_leaves_the_turn_cut_off() -> None:
    """The cut-off turn's first model call arriving after the rest: the turn is still cut off."""
    answered, cut_off = traces_of("genai", [ANSWERED, CUT_OFF])
    first_call = model_calls(cut_off)[0]
    analyzer = Analyzer(Telemetry())
    analyzer.process(answered)
    analyzer.process(part(cut_off, [r for r in cut_off.spans if r is not first_call]))
    assert "cut_off_turns" in terms(analyzer, "genai")
    analyzer.process(part(cut_off, [first_call]))
    assert "cut_off_turns" in terms(analyzer, "genai")


def test_a_model_call_whose_content_comes_late_as_log_records_is_not_taken_for_a_cut() -> None:
    """OpenAI v2 with content as log records (a real recording): the last model call's records
    held back until after its trace was analysed, as a slow log pipeline delivers them. Until they
    come the call's answer is unknown, not missing; when they come, it is the answer."""
    logs = ExportLogsServiceRequest.FromString((FIXTURES / "openai_v2_events/tools.logs.binpb").read_bytes())
    _, traces = recorded("openai_v2_events", "tools")
    last_call = model_calls(traces[-1])[-1]

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
    assert state.conversation.messages[-1].role is Role.TOOL  # what was read so far ends on a tool
    assert not state.cut_off_turns
    analyzer.log_events.add(records(late=True))
    assert analyzer.apply_late_log_events()
    assert state.conversation.messages[-1].role is Role.ASSISTANT
    assert not state.cut_off_turns and "cut_off_turns" not in state.priority.terms


@pytest.mark.parametrize("recording", RECORDINGS, ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_no_conversation_recorded_from_a_real_library_is_cut_off(recording: Path) -> None:
    """Every recording (tests/fixtures: thirteen instrumentation variants, their answers, errors and
    tool calls, among them a Vercel AI SDK v4 app that answers a failed tool in a new trace)."""
    analyzer, traces = recorded(recording.parent.name, recording.stem)
    for trace in traces:
        analyzer.process(trace)
    assert [state.cut_off_turns for state in analyzer.sessions] == [() for _ in analyzer.sessions]


STOPPED_AFTER_A_TOOL = [
    "openai_v2",
    "openai_v2_events",
    "openai_v2_legacy",
    "openinference",
    "openllmetry",
    "openllmetry_events",
    "openllmetry_legacy",
    "pydantic_ai",
    "pydantic_ai_v2",
    "pydantic_ai_v6",
    "vercel_ai",
]


@pytest.mark.parametrize("variant", STOPPED_AFTER_A_TOOL)
def test_a_real_librarys_turn_that_stopped_after_its_tool_ran_is_cut_off(variant: str) -> None:
    """A recording's tool turn with its last model call taken out, as when the agent's loop stops
    right after the tool ran. Some libraries' tool spans write no call id (OpenLLMetry's,
    OpenInference's): their result is the call's by the tool's name."""
    analyzer, (*earlier, last) = recorded(variant, "tools")
    for trace in earlier:
        analyzer.process(trace)
    final_call = model_calls(last)[-1]
    analyzer.process(part(last, [record for record in last.spans if record is not final_call]))
    (state,) = analyzer.sessions
    assert state.cut_off_turns and "cut_off_turns" in state.priority.terms


FINAL = {"name": "final_answer", "arguments": {"answer": "It is packed."}, "result": "It is packed."}


@pytest.mark.parametrize(
    ("cut_off_every", "counted_after_the_baseline"),
    [
        (1, False),  # every turn ends on a final-answer tool: the agent's design
        (3, True),  # a third of its conversations cut off: a struggling agent, not its design
    ],
)
def test_an_agent_whose_turns_end_on_tools_by_design_stops_being_ranked_for_it(
    cut_off_every: int, counted_after_the_baseline: bool
) -> None:
    analyzer = Analyzer(Telemetry())
    counted = []
    for number in range(15):
        key = f"agent-{number}"
        cut_off = number % cut_off_every == 0
        steps = [{"tool_calls": [LOOKUP]}, {"tool_calls": [FINAL]} if cut_off else {"text": "Packed."}]
        for trace in traces_of("genai", [{"user": f"Where is order A-{number}?", "steps": steps}], key):
            analyzer.process(trace)
        if cut_off:
            counted.append("cut_off_turns" in terms(analyzer, "genai", key))
    baseline = analyzer.agent_baselines.min_conversations
    before = sum(1 for n in range(baseline) if n % cut_off_every == 0)
    assert counted == [True] * before + [counted_after_the_baseline] * (len(counted) - before)


def test_a_turn_cut_off_is_provisional_until_the_user_speaks_again() -> None:
    """A trace whose first words are the agent's takes back the latest turn cut off, even with a
    trace in between that said nothing of a turn (a tool run alone); once the user spoke after a
    turn cut off, it stays."""
    for user_spoke_between in (False, True):
        state = ConversationState.new("c1")
        readings, parents = agent_turn(["call"])
        note(state, b"t1", readings, parents)
        assert state.cut_off_turns == ((b"t1", False),)
        call = ToolCall("order_status", {"order": 12}, id="c0")
        history = [user("Is my order 12 shipped?"), assistant(None, call), tool("c0", '{"status": "packed"}')]
        if user_spoke_between:
            history += [user("And order 13?")]
            asked = chat(
                50, list(history), [assistant("Order 13 is packed too.")], parent=parents_root(parents)
            )
            note(state, b"t2", [asked], {asked[0].span_id: parents_root(parents), parents_root(parents): b""})
            history += [assistant("Order 13 is packed too.")]
        else:
            result = ToolResult(call_id="r1", name="audit_log", content="ok")
            lone_tool = (
                view(50),
                SpanReading("tools", tool_execution=ToolExecution("audit_log", "r1", None, result)),
            )
            note(state, b"t2", [lone_tool], {lone_tool[0].span_id: b""})
        # The client posts the history so far again: the model's answer is the only new message.
        answer = chat(100, history, [assistant("Here is where things stand.")])
        update = apply_trace(state, b"t3", [answer], {answer[0].span_id: b""})
        assert update.turn_end is not None and update.turn_end.goes_on
        analyze_update(state, update)
        assert bool(state.cut_off_turns) is user_spoke_between


def test_a_trace_with_the_users_words_begins_a_turn_even_after_a_greeting_said_again() -> None:
    """A stateless client that sends its fixed greeting before each new question: the trace's
    first new words are the agent's, but the user spoke in it, so the turn cut off before stays."""
    state = ConversationState.new("c1")
    readings, parents = agent_turn(["call"])
    note(state, b"t1", readings, parents)
    agent = parents_root(parents)
    greeting = assistant("Hi! I am the order assistant.")
    asked = chat(
        50, [greeting, user("Hello? Any news on order 12?")], [assistant("Still packed.")], parent=agent
    )
    update = apply_trace(state, b"t2", [asked], {asked[0].span_id: agent, agent: b""})
    assert update.turn_end is not None and update.turn_end.user_spoke
    analyze_update(state, update)
    assert state.cut_off_turns == ((b"t1", True),)


def test_a_late_part_of_an_older_trace_that_shows_a_cut_is_final_at_once() -> None:
    """Its first part was released early; the user spoke in a newer trace since: a later trace
    that begins with the agent's words does not take it back."""
    state = ConversationState.new("c1")
    answered, parents = agent_turn(["answer"])
    note(state, b"t0", answered, parents)
    more, more_parents = agent_turn(["answer"], user_text="And order 13?")
    note(state, b"t1", more, more_parents)
    late, late_parents = agent_turn(["call"], user_text="Is my order 12 shipped?")
    note(state, b"t0", late, late_parents)  # t0's last step, arriving after t1
    assert state.cut_off_turns == ((b"t0", True),)


def parents_root(parents: dict[bytes, bytes]) -> bytes:
    return next(span_id for span_id, parent in parents.items() if not parent)


def note(state: ConversationState, trace_id: bytes, readings: list, parents: dict[bytes, bytes]) -> None:
    analyze_update(state, apply_trace(state, trace_id, readings, parents))


def test_only_the_latest_turns_cut_off_are_kept() -> None:
    analyzer = analysed("genai", [CUT_OFF] * (CUT_OFF_TURNS_KEPT + 2))
    state = analyzer.sessions.get("cut-genai")
    assert state is not None and len(state.cut_off_turns) == CUT_OFF_TURNS_KEPT
    assert f"({CUT_OFF_TURNS_KEPT}×)" in state.priority.reasons[0]


def test_a_turn_whose_trace_comes_in_two_parts_is_evaluated_once(tmp_path: Path) -> None:
    """The late part was analysed and submitted for reputation as a turn of its own: two
    evaluations for one turn, each with part of its latency (a part without a model call would
    count as the fastest turn). Session metrics already counted the turn once."""
    import time
    import urllib.request

    import orjson

    from otelsignals.otlp.wire import encode_request
    from tests.support.sidecar import SidecarProcess

    turn = {"user": "Where is order A-7?", "steps": [{"tool_calls": [LOOKUP]}, {"text": "Packed."}]}
    (trace,) = traces_of("genai", [turn], key="late-1")
    last_call = model_calls(trace)[-1]
    analyzer = Analyzer(Telemetry())
    first = analyzer.process(part(trace, [r for r in trace.spans if r is not last_call]))
    late = analyzer.process(part(trace, [last_call]))
    assert first is not None and late is not None and (first.late_part, late.late_part) == (False, True)

    def send(sidecar: SidecarProcess, records: list[SpanRecord]) -> None:
        request = urllib.request.Request(
            f"{sidecar.http_url}/v1/traces",
            data=encode_request(records),
            headers={"Content-Type": "application/x-protobuf"},
        )
        urllib.request.urlopen(request, timeout=10).read()

    with SidecarProcess(tmp_path) as sidecar:
        send(sidecar, [r for r in trace.spans if r is not last_call])
        sidecar.wait_for_metric("otelsignals_analysed_turns_total", 1)
        send(sidecar, [last_call])  # after the trace was released: a late part
        sidecar.wait_for_metric("otelsignals_analysed_turns_total", 2)
        sidecar.wait_for_metric("otelsignals_reputation_evaluations_total", 1)
        time.sleep(1.0)  # (a second evaluation, had one been submitted, is recorded by now)
        assert sidecar.metric("otelsignals_reputation_evaluations_total") == 1
        with urllib.request.urlopen(f"{sidecar.admin_url}/v1/reputation", timeout=5) as answer:
            (agent,) = orjson.loads(answer.read())["agents"]
        assert agent["eval_count"] == 1


def test_the_api_scores_and_judges_an_open_session_by_the_settings_its_spans_were(tmp_path: Path) -> None:
    """GET /v1/sessions/{id} scored an open session with the default signals.baseline_user_turns
    and judged its session metrics with the default thresholds: the spans said good 73.89, the API
    excellent 81.0; the session span failed agent_reliability at 0.99, the API passed it at 0.5."""
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from otelsignals.admin import admin_app
    from otelsignals.config import EvalsConfig, SignalsConfig
    from otelsignals.pipeline.enricher import span_attributes

    signals = SignalsConfig(baseline_user_turns=1)
    evals = EvalsConfig(threshold=0.9, thresholds={"agent_reliability": 0.99})
    analyzer = Analyzer(Telemetry(), signals=signals, evals=evals)
    turns = [
        {"user": "Where is order A-7?", "steps": [{"text": "It is packed and ships tomorrow."}]},
        {"user": "And when does it arrive at my house?", "steps": [{"text": "It arrives on Friday."}]},
        {"user": "Can I change the delivery address?", "steps": [{"text": "Yes, I updated it."}]},
        {"user": "Perfect, thank you so much!", "steps": [{"text": "You're welcome."}]},
    ]
    for trace in traces_of("genai", turns, key="k2"):
        latest = analyzer.process(trace)
    assert latest is not None
    on_spans = span_attributes(latest)

    async def shown() -> dict[str, Any]:
        app = admin_app(Telemetry(), lambda: True, sessions=analyzer.sessions, signals=signals, evals=evals)
        async with TestClient(TestServer(app)) as client:
            answer = await client.get("/v1/sessions/k2")
            assert answer.status == 200
            return await answer.json()

    session = asyncio.run(shown())
    assert (session["quality"], session["quality_score"], session["efficiency_score"]) == (
        on_spans["signals.quality"],
        on_spans["signals.quality_score"],
        on_spans["signals.efficiency_score"],
    )
    thresholds = {metric["name"]: metric["metadata"]["threshold"] for metric in session["session_metrics"]}
    assert thresholds == {"agent_reliability": 0.99, "agent_consistency": 0.9}
