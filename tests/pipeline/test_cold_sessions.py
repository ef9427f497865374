"""Idle conversations go cold (sessions.cold_after): they drop what their next trace rebuilds, take
less memory, and are analysed exactly as if they had kept it."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from otelsignals.model import Message, Role
from otelsignals.pipeline.sessions import SessionStore
from otelsignals.signals.detect import REBUILT_WHEN_MISSING


def _store(cold_after: float, now: list[float], **kwargs: Any) -> SessionStore:
    return SessionStore(3600, 100, clock=lambda: now[0], cold_after=cold_after, **kwargs)


def test_conversations_idle_for_cold_after_go_cold_once_the_least_recently_active_first():
    now = [0.0]
    store = _store(60, now)
    a = store.touch("a")
    now[0] = 30
    b = store.touch("b")
    now[0] = 59.9
    assert store.cool_idle() == 0
    now[0] = 61
    assert store.cool_idle() == 1 and a.cold and not b.cold and store.cold == 1
    assert store.cool_idle() == 0  # once
    now[0] = 70
    assert store.touch("a") is a and store.cold == 0  # active: warm again once merged (apply_trace)
    a.cold = False
    now[0] = 95
    assert store.cool_idle() == 1 and b.cold and not a.cold
    now[0] = 131
    assert store.cool_idle() == 1 and a.cold


def test_no_conversation_goes_cold_when_cold_after_is_0_nor_after_it_was_evicted():
    now = [0.0]
    never = _store(0, now)
    state = never.touch("a")
    assert never.cool_idle(now=math.inf) == 0 and not state.cold and never.cold == 0
    evicted: list[str] = []
    store = SessionStore(10, 2, lambda state, why: evicted.append(why), clock=lambda: now[0], cold_after=60)
    store.touch("a")
    store.touch("b")
    store.touch("c")  # over max_sessions: "a" goes
    now[0] = 20
    assert store.expire() == 2  # "b" and "c" go (ttl)
    assert evicted == ["capacity", "ttl", "ttl"]
    assert store.cool_idle(now=math.inf) == 0  # none left to cool, and no error


def _said(store: SessionStore, key: str) -> int:
    """``key``'s conversation gains a message (touched, then resized); returns how many went cold."""
    store.touch(key).conversation.messages.append(Message(Role.USER, "x" * 1000))
    return store.resize(key)


@pytest.mark.parametrize("cold_after", [60.0, 0.0])
def test_over_max_bytes_the_least_recently_active_goes_cold_and_only_a_cold_one_is_evicted(cold_after):
    now = [0.0]
    evicted: list[tuple[str, bool]] = []  # (key, cold when evicted)
    store = _store(
        cold_after, now, on_evict=lambda state, why: evicted.append((state.conversation.key, state.cold))
    )
    for key, at in (("idle", 0.0), ("b", 70.0), ("c", 80.0), ("d", 90.0)):
        now[0] = at
        _said(store, key)
    now[0] = 100.0
    store.cool_idle()  # "idle" is cold now (idle for 100 s), b, c and d are not
    b, c, d = (store.get(key) for key in "bcd")
    assert b is not None and c is not None and d is not None
    store.max_bytes = store.bytes  # the next message is over the bound
    assert _said(store, "d") == 0 and evicted == [("idle", bool(cold_after))]
    store.max_bytes = store.bytes
    if not cold_after:  # nothing goes cold: the least recently active goes at once
        assert _said(store, "d") == 0 and evicted[1:] == [("b", False)]
        return
    assert _said(store, "d") == 1 and len(evicted) == 1 and b.cold and not c.cold  # cold was enough
    store.max_bytes = store.bytes  # b, the least recently active, is cold: it goes, c stays warm
    assert _said(store, "d") == 0 and evicted[1:] == [("b", True)] and not c.cold
    store.max_bytes = store.bytes - 20_000  # more than c frees cold: cold, then evicted (not counted)
    assert _said(store, "d") == 0 and evicted[2:] == [("c", True)] and not d.cold
    assert store.bytes <= store.max_bytes and [state.conversation.key for state in store] == ["d"]


def test_over_max_bytes_the_analyzer_lets_conversations_go_cold_and_evicts_fewer_analysing_the_same():
    from tests.pipeline.test_sessions import _workload_analyses as analysed

    peak = [0]
    unbounded, _, _ = analysed(
        after_each=lambda analyzer, _: peak.append(max(peak.pop(), analyzer.sessions.bytes))
    )
    # 0.7: at 0.9 one conversation gone cold no longer made room enough to spare an eviction, once
    # the packages a fresh install resolves on 2026-12-02 changed the state's bytes (1 evicted either
    # way; the session's base fails so too): the bound must ask for more than one conversation's room.
    bound = int(0.7 * peak[0])
    counted = {}
    for cold_after in (300.0, 0.0):
        analyses, _, telemetry = analysed(max_bytes=bound, cold_after=cold_after)
        assert analyses == unbounded
        counted[cold_after] = [
            telemetry.registry.get_sample_value(name, {"reason": "bytes"}) or 0
            for name in ("otelsignals_sessions_cooled_total", "otelsignals_sessions_evicted_total")
        ]
    (cooled, evicted), (_, evicted_without) = counted[300.0], counted[0.0]
    assert cooled > 0 and evicted < evicted_without


def _workload_analyses(
    cool_each_trace: bool, cool_after: frozenset[int] = frozenset()
) -> tuple[list[bytes], Any]:
    """Every analysis (as JSON) of 4 long, tool-heavy conversations of bench/agent_workload.py, with
    every conversation gone cold after each trace, after the analyses numbered in ``cool_after``, or
    never, and the analyzer after them."""
    from tests.pipeline.test_sessions import _workload_analyses as analysed

    def cool(analyzer: Any, analyses: int) -> None:
        if cool_each_trace:
            assert analyzer.sessions.cool_idle(now=math.inf) == 1
        elif analyses in cool_after:
            assert analyzer.sessions.cool_idle(now=math.inf) > 0

    analyses, analyzer, _ = analysed(after_each=cool)
    return analyses, analyzer


def test_a_conversation_cold_before_each_of_its_traces_is_analysed_the_same():
    cold, cold_analyzer = _workload_analyses(cool_each_trace=True)
    warm, warm_analyzer = _workload_analyses(cool_each_trace=False)
    assert cold == warm and len(cold) > 40
    # Every signal found, every priority and every trace's metrics: the same.
    states = {state.conversation.key: state for state in cold_analyzer.sessions}
    for warm_state in warm_analyzer.sessions:
        state = states[warm_state.conversation.key]
        assert state.conversation.messages == warm_state.conversation.messages
        assert list(state.recent_signals) == list(warm_state.recent_signals)
        assert state.priority == warm_state.priority
        assert [m.as_dict() for m in state.trace_signals] == [m.as_dict() for m in warm_state.trace_signals]
        state.warm_up()  # (cold again after the last trace)
        assert state.body_positions == warm_state.body_positions


def _history_copies(state: Any) -> int:
    """Messages the history cache holds that are not the conversation's own."""
    held = {id(message) for message in state.conversation.messages}
    return sum(
        id(message) not in held
        for history in state.decoder_memory.histories.message_lists()
        for message in history
    )


def test_a_conversation_that_resumed_after_going_cold_holds_no_copies_of_what_it_said_before():
    """The first history read after going cold is read whole, its texts strings of their own: each
    earlier message's copy gives way to the conversation's own message (by value, compacted text
    expanded to compare), or the history cache would keep a copy of the whole earlier history until
    the conversation went cold again (up to 1.7 times a conversation's state)."""
    from bench.session_memory import deep_size

    warm, warm_analyzer = _workload_analyses(cool_each_trace=False)
    resumed, analyzer = _workload_analyses(cool_each_trace=False, cool_after=frozenset({31, 47}))
    assert resumed == warm
    warm_states = {state.conversation.key: state for state in warm_analyzer.sessions}
    compared = 0
    for state in analyzer.sessions:
        if state.cold:
            continue  # (no trace since)
        warm_state = warm_states[state.conversation.key]
        assert _history_copies(state) <= _history_copies(warm_state)
        size = deep_size(state, {id(analyzer), id(analyzer.sessions)})
        assert size <= 1.01 * deep_size(warm_state, {id(warm_analyzer), id(warm_analyzer.sessions)})
        compared += 1
    assert compared >= 2


def test_a_trace_without_history_after_going_cold_does_not_lose_the_pairing_of_the_next_one():
    """A conversation's first trace after going cold may merge no history (a tool span traced on
    its own, a call without content): the history read whole later must still give way to the
    conversation's own messages (was: 468 copies in the cache against 51 never cold, 1.7 times
    the state)."""
    import dataclasses

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    from bench.agent_workload import build_workload
    from otelsignals.config_loading import load_config
    from otelsignals.otlp.wire import split_request
    from otelsignals.pipeline.analyzer import Analyzer
    from otelsignals.pipeline.assembler import Assembler, ReleasedTrace
    from otelsignals.telemetry import Telemetry

    def tool_span_alone(trace: ReleasedTrace, number: int) -> ReleasedTrace:
        record = next(r for r in trace.spans if Span.FromString(r.data).name.startswith("execute_tool"))
        span = Span.FromString(record.data)
        span.trace_id, span.span_id, span.parent_span_id = (
            bytes([0xEE, number]) * 8,
            bytes([0xEF, number]) * 4,
            b"",
        )
        alone = dataclasses.replace(
            record,
            trace_id=span.trace_id,
            span_id=span.span_id,
            parent_span_id=b"",
            data=span.SerializeToString(),
            may_carry_genai=None,
        )
        return ReleasedTrace(span.trace_id, [alone], trace.reason, len(alone.data))

    def analysed(cool_at: int | None) -> tuple[list[bytes], Analyzer]:
        config = load_config(None, environ={})
        config.sessions.max_bytes = 0
        analyzer = Analyzer(Telemetry(), config.sessions, config.signals, config.evals, config.analyzer)
        released: list[ReleasedTrace] = []
        assembler = Assembler(released.append, lambda record: None, decision_wait=2.0)
        analyses: list[bytes] = []
        for turn in build_workload(4, 3, seed=16).turns:
            assembler.add(split_request(ExportTraceServiceRequest.FromString(turn.body)).records)
            for trace in released:
                analysis = analyzer.process(trace)
                assert analysis is not None
                analyses.append(analysis.to_json())
                if len(analyses) == cool_at:
                    assert analyzer.sessions.cool_idle(now=math.inf) > 0
                if len(analyses) in (cool_at, 30):  # the same tool-only trace, cold or not
                    analyzer.process(tool_span_alone(trace, len(analyses)))
            released.clear()
        return analyses, analyzer

    warm, warm_analyzer = analysed(cool_at=None)
    resumed, analyzer = analysed(cool_at=30)
    assert resumed == warm and len(warm) > 60
    warm_states = {state.conversation.key: state for state in warm_analyzer.sessions}
    for state in analyzer.sessions:
        assert _history_copies(state) <= _history_copies(warm_states[state.conversation.key])


def test_content_that_comes_late_to_a_cold_conversation_makes_it_active_again():
    """GenAI events sent as log records after their span was analysed are merged into the
    conversation (Analyzer.apply_late_log_events): that is activity, so the conversation is warm
    and goes cold again once idle."""
    from pathlib import Path

    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    from otelsignals.config import SessionsConfig
    from otelsignals.offline import read_requests, traces_in_time_order
    from otelsignals.pipeline.analyzer import Analyzer
    from otelsignals.telemetry import Telemetry

    fixtures = Path(__file__).parents[1] / "fixtures" / "openai_v2_events"

    def late_events(cool: bool) -> tuple[Analyzer, list[bytes]]:
        analyzer = Analyzer(Telemetry(), SessionsConfig(cold_after=60))
        for trace in traces_in_time_order(read_requests(fixtures / "tools.binpb")):
            analyzer.process(trace)
        if cool:
            assert analyzer.sessions.cool_idle(now=math.inf) == 1
        logs = ExportLogsServiceRequest.FromString((fixtures / "tools.logs.binpb").read_bytes())
        analyzer.log_events.add(logs)
        return analyzer, [analysis.to_json() for analysis in analyzer.apply_late_log_events()]

    _, warm_analyses = late_events(cool=False)
    cold, cold_analyses = late_events(cool=True)
    assert cold_analyses == warm_analyses and cold_analyses
    (state,) = list(cold.sessions)
    assert not state.cold and cold.sessions.cold == 0
    assert cold.sessions.cool_idle(now=math.inf) == 1 and state.cold


def _analysed(analyzer: Any) -> list[str]:
    """Each conversation's messages, signals and priority (not its key: a conversation without a
    session id is keyed by its trace's random id)."""
    return sorted(
        repr(
            (
                [(m.role, m.content, m.tool_calls) for m in state.conversation.messages],
                list(state.recent_signals),
                state.priority,
            )
        )
        for state in analyzer.sessions
    )


@pytest.mark.parametrize(
    ("convention", "window"),
    [
        ("openllmetry", 0),
        ("openinference", 0),
        ("genai_events", 0),
        ("genai", 0),
        ("vercel_ai", 0),
        ("genai", 6),
        ("openllmetry", 6),
        ("genai_events", 6),
    ],
)
def test_each_convention_s_conversations_cold_before_each_trace_read_and_analyse_the_same(convention, window):
    """Cold, the span decoder reads the next history whole and the conversation finds where it
    continues by its history index (rebuilt: ConversationState.warm_up), also when the client resends
    only its latest ``window`` messages (the history does not start where the conversation does)."""
    from tests.pipeline.test_sessions import _demo_analyzer

    def cool(analyzer: Any, key: str) -> None:
        analyzer.sessions.cool_idle(now=math.inf)

    cold = _demo_analyzer(convention, 3, each=cool, window=window)
    warm = _demo_analyzer(convention, 3, window=window)
    assert _analysed(cold) == _analysed(warm)
    assert any(state.recent_signals for state in warm.sessions)


def test_a_cold_conversation_drops_what_its_next_trace_rebuilds_and_is_counted_smaller():
    from bench.session_memory import deep_size

    _, analyzer = _workload_analyses(cool_each_trace=False)
    store = analyzer.sessions
    before = store.bytes
    held = {state.conversation.key: deep_size(state, {id(analyzer), id(store)}) for state in store}
    assert store.cool_idle(now=math.inf) == len(held) == 4
    for state in store:
        assert state.cold and state.last_inputs is None and not state.body_positions
        assert not state.decoder_memory.histories.message_lists()
        assert not state.shared.texts()
        assert not REBUILT_WHEN_MISSING & state.detector_memory.keys()
        assert "dragging.user_turns" in state.detector_memory  # what is not rebuilt stays
        assert state.body_fingerprints and state.conversation.messages
        cold_size = deep_size(state, {id(analyzer), id(store)})
        assert cold_size < 0.9 * held[state.conversation.key]
        # The estimate still covers what a cold conversation holds.
        assert store._sizes[state.conversation.key].bytes >= cold_size
    assert store.bytes < before


@pytest.mark.parametrize(
    ("convention", "max_messages"),
    [
        ("openllmetry", 2000),
        ("openinference", 2000),
        ("genai_events", 2000),
        ("genai", 2000),
        ("vercel_ai", 2000),
        ("genai_events", 20),
        ("vercel_ai", 20),
    ],
)
def test_the_estimate_covers_what_a_cold_conversation_holds_in_each_convention(convention, max_messages):
    """Cold, a conversation keeps its messages and records but no history cache: the estimate of a
    cold one (sessions.BYTES_PER_COLD_MESSAGE, _CONVERSATION) still covers it, trimmed or not."""
    from bench.session_memory import deep_size
    from tests.pipeline.test_sessions import _demo_analyzer

    analyzer = _demo_analyzer(convention, 3, max_messages=max_messages)
    store = analyzer.sessions
    warm = store.bytes
    assert store.cool_idle(now=math.inf) == len(store)
    seen = {id(analyzer), id(store)}
    measured = sum(deep_size(state, seen) for state in store)
    assert measured <= store.bytes <= 2 * measured and store.bytes < warm


def test_the_rebuilt_detector_memory_is_the_whole_of_what_the_detectors_prepare():
    # The keys the detectors declare are those their memory holds prepared texts under.
    assert {
        "repetition.prepared",
        "repetition.recent",
        "rephrase.recent",
        "rephrase.keys",
    } == REBUILT_WHEN_MISSING


def test_the_analyzer_cools_idle_conversations_on_expiry_and_counts_them():
    from otelsignals.pipeline.analyzer import Analyzer
    from otelsignals.telemetry import Telemetry
    from tests.pipeline.test_sessions import _demo_analyzer

    def quick_cold(analyzer: Analyzer) -> None:
        analyzer.sessions.cold_after = 0.001

    analyzer = _demo_analyzer("genai", 1, prepare=quick_cold)
    time.sleep(0.01)  # every conversation idle for 10 ms at least (a monotonic clock)
    analyzer.expire()
    telemetry: Telemetry = analyzer.telemetry
    cooled = telemetry.registry.get_sample_value("otelsignals_sessions_cooled_total", {"reason": "idle"})
    assert cooled == len(analyzer.sessions) > 0
    assert all(state.cold for state in analyzer.sessions)
    assert telemetry.registry.get_sample_value("otelsignals_sessions_cold") == len(analyzer.sessions)
    assert telemetry.registry.get_sample_value("otelsignals_sessions_bytes") == analyzer.sessions.bytes


def test_a_conversation_resumed_after_going_cold_reads_its_resent_history_whole_and_goes_on():
    from otelsignals.conversation import ConversationState

    state = ConversationState.new("c")
    for n in range(6):
        state.append(Message(Role.USER if n % 2 == 0 else Role.ASSISTANT, f"message {n}"))
    positions = dict(state.body_positions)
    state.go_cold(REBUILT_WHEN_MISSING)
    assert state.cold and not state.body_positions
    state.warm_up()
    assert not state.cold and state.body_positions == positions
