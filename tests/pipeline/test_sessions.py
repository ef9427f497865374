"""Conversation state is bounded by age and count, and every eviction is reported."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import pytest

from otelsignals.conversation import ConversationState
from otelsignals.model import Message, Role
from otelsignals.pipeline.sessions import SessionStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from otelsignals.pipeline.analyzer import Analyzer
    from otelsignals.telemetry import Telemetry


def test_idle_sessions_expire_after_the_ttl():
    now = [0.0]
    evicted: list[tuple[str, str]] = []
    store = SessionStore(
        60, 100, lambda state, why: evicted.append((state.conversation.key, why)), lambda: now[0]
    )
    store.touch("a")
    now[0] = 30
    store.touch("b")
    now[0] = 61
    assert store.expire() == 1
    assert evicted == [("a", "ttl")]
    assert store.get("a") is None and store.get("b") is not None
    store.touch("b")  # activity postpones expiry
    now[0] = 120
    assert store.expire() == 0


def test_capacity_evicts_the_least_recently_active():
    evicted: list[tuple[str, str]] = []
    store = SessionStore(3600, 2, lambda state, why: evicted.append((state.conversation.key, why)))
    store.touch("a")
    store.touch("b")
    store.touch("a")
    store.touch("c")
    assert evicted == [("b", "capacity")]
    assert sorted(state.conversation.key for state in store) == ["a", "c"]


def test_touch_keeps_the_state():
    store = SessionStore(3600, 10)
    state = store.touch("a")
    state.conversation.agent_id = "bot"
    assert store.touch("a") is state and len(store) == 1


def _say(store: SessionStore, key: str, text: str, arguments: object = None) -> None:
    """``key``'s conversation gains a user message (and a tool call), as a trace would add."""
    from otelsignals.model import Message, Role, ToolCall

    state = store.touch(key)
    calls = [ToolCall("lookup", arguments)] if arguments is not None else []
    state.conversation.messages.append(Message(Role.USER, text, calls))
    store.resize(key)


def test_the_estimate_grows_with_text_storage_arguments_and_messages():
    import sys

    from otelsignals.model import Message, Role, ToolCall, ToolResult
    from otelsignals.pipeline.sessions import (
        BYTES_PER_ARGUMENT_CHARACTER,
        BYTES_PER_CONVERSATION,
        BYTES_PER_MESSAGE,
        BYTES_PER_TEXT_BYTE,
        estimated_bytes,
    )

    assert estimated_bytes([]) == BYTES_PER_CONVERSATION
    ascii_text, emoji_text = "x" * 100, "x" * 99 + "\N{ROCKET}"  # 1 and 4 bytes per character in CPython
    one = estimated_bytes([Message(Role.USER, ascii_text)])
    assert one == int(
        BYTES_PER_TEXT_BYTE * sys.getsizeof(ascii_text) + BYTES_PER_MESSAGE + BYTES_PER_CONVERSATION
    )
    assert estimated_bytes([Message(Role.USER, emoji_text)]) - one > 2 * BYTES_PER_TEXT_BYTE * 100
    # Arguments count as their JSON text, results as their text (once when the message holds the same
    # string), uncaptured content as nothing.
    result = "y" * 50
    with_tool = [
        Message(Role.ASSISTANT, None, [ToolCall("f", {"q": "abc"})]),
        Message(Role.TOOL, result, tool_result=ToolResult(content=result)),
    ]
    assert estimated_bytes(with_tool) == int(
        BYTES_PER_TEXT_BYTE * sys.getsizeof(result)
        + BYTES_PER_ARGUMENT_CHARACTER * len('{"q":"abc"}')
        + 2 * BYTES_PER_MESSAGE
        + BYTES_PER_CONVERSATION
    )


def _prompted(store: SessionStore, key: str, prompt: str, text: str = "hello") -> list[Message]:
    """``key``'s conversation: ``prompt`` as its system prompt (kept first), then a user message."""
    state = store.touch(key)
    state.conversation.messages[:] = [Message(Role.SYSTEM, prompt), Message(Role.USER, text)]
    store.resize(key)
    return state.conversation.messages


def test_a_system_prompt_that_conversations_share_is_counted_once():
    import sys

    from otelsignals.pipeline.sessions import estimated_bytes

    now = [0.0]
    store = SessionStore(60, 100, clock=lambda: now[0], max_bytes=0)
    prompt = "You are the support agent of an online shop. " * 1000  # ~46 KB, one string
    held = []
    for key in "abc":
        held.append(_prompted(store, key, prompt))
        now[0] += 10
    bodies = sum(estimated_bytes(messages) for messages in held)
    assert store.bytes == bodies + sys.getsizeof(prompt)
    # Equal text in a string of its own is memory of its own.
    apart = "".join(["You are the support agent of an online shop. "] * 1000)
    assert apart == prompt and apart is not prompt
    held.append(_prompted(store, "d", apart))
    assert store.bytes == bodies + estimated_bytes(held[-1]) + 2 * sys.getsizeof(prompt)
    # The prompt's bytes stay while a conversation holding it stays, and leave with the last one.
    now[0] = 65
    assert store.expire() == 1  # "a"
    left = bodies - estimated_bytes(held[0]) + estimated_bytes(held[-1])
    assert store.bytes == left + 2 * sys.getsizeof(prompt)
    now[0] = 100
    assert store.expire() == 3
    assert store.bytes == 0


def test_a_conversation_counts_the_system_prompt_it_holds_now():
    import sys

    from otelsignals.pipeline.sessions import estimated_bytes

    store = SessionStore(3600, 100, max_bytes=0)
    first, second = "p" * 30_000, "q" * 10_000
    messages = _prompted(store, "a", first)
    b = estimated_bytes(_prompted(store, "b", first))
    assert store.bytes == estimated_bytes(messages) + b + sys.getsizeof(first)
    messages[0] = Message(Role.SYSTEM, second)  # another prompt
    store.resize("a")
    assert store.bytes == estimated_bytes(messages) + b + sys.getsizeof(first) + sys.getsizeof(second)
    del messages[0]  # trimmed away
    store.resize("a")
    assert store.bytes == estimated_bytes(messages) + b + sys.getsizeof(first)
    messages.insert(0, Message(Role.SYSTEM, first))
    store.resize("a")
    assert store.bytes == estimated_bytes(messages) + b + sys.getsizeof(first)
    # An equal prompt in a string of its own is memory of its own; the other one leaves with "b".
    alike = "".join(["p" * 15_000, "p" * 15_000])
    messages[0] = Message(Role.SYSTEM, alike)
    store.resize("a")
    assert store.bytes == estimated_bytes(messages) + b + 2 * sys.getsizeof(first)
    store.max_sessions = 1
    store.touch("a")  # "b" is evicted
    assert store.bytes == estimated_bytes(messages) + sys.getsizeof(alike)


def test_a_prompt_leaves_the_count_with_the_bytes_it_came_with():
    """A string's getsizeof grows once its UTF-8 form is asked for (orjson, sqlite, protobuf do,
    e.g. for the conversation index): what a prompt added is what leaves, or the count drifts."""
    import orjson

    now = [0.0]
    store = SessionStore(60, 100, clock=lambda: now[0], max_bytes=0)
    prompt = "You’re the shop’s assistant — be brief. " * 500  # not ASCII
    _prompted(store, "a", prompt)
    _prompted(store, "b", prompt)
    orjson.dumps(prompt)
    now[0] = 61
    assert store.expire() == 2
    assert store.bytes == 0


def test_a_prompt_replaced_in_a_long_conversation_is_counted_at_once():
    import sys

    from otelsignals.pipeline.sessions import RECOUNTED_TAIL, estimated_bytes

    store = SessionStore(3600, 100, max_bytes=0)
    messages = _prompted(store, "a", "s" * 100)
    for n in range(2 * RECOUNTED_TAIL):  # the prompt is far behind the recounted tail
        _say(store, "a", f"message {n}")
    prompt = "t" * 1_000_000
    messages[0] = Message(Role.SYSTEM, prompt)
    store.resize("a")
    assert store.bytes == estimated_bytes(messages) + sys.getsizeof(prompt)


def test_the_byte_bound_holds_every_conversation_of_an_agent_whose_prompt_fits_once():
    evicted: list[str] = []
    store = SessionStore(3600, 1000, lambda state, why: evicted.append(why), max_bytes=1024**2)
    prompt = "Follow the refund policy below. " * 3000  # ~94 KB
    for key in range(20):
        _prompted(store, str(key), prompt)
    # 20 copies of the prompt would be ~2 MB, over the bound; the one string the 20 share is not.
    assert evicted == [] and len(store) == 20 and store.bytes <= 1024**2


def test_the_analyzer_counts_the_system_prompt_an_agents_conversations_share_once():
    """The demo's agents read the same system prompt in every conversation (one string for all of
    them, conversation.SHARED_SYSTEM_PROMPTS): the store counts it once."""
    import sys

    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otelsignals.demo.traffic import send_demo_traffic
    from otelsignals.offline import traces_in_time_order
    from otelsignals.pipeline.analyzer import Analyzer
    from otelsignals.pipeline.sessions import estimated_bytes, system_prompt
    from otelsignals.telemetry import Telemetry

    spans = InMemorySpanExporter()
    send_demo_traffic(None, None, _exporter_factory=lambda service, transport: spans)
    analyzer = Analyzer(Telemetry())
    for trace in traces_in_time_order([encode_spans(list(spans.get_finished_spans()))]):
        analyzer.process(trace)
    states = list(analyzer.sessions)
    prompts = [system_prompt(state.conversation.messages) for state in states]
    distinct = {id(prompt): prompt for prompt in prompts if prompt is not None}
    assert len(distinct) < sum(prompt is not None for prompt in prompts), "no prompt is shared"
    # Each conversation's own size leaves its prompt out; the store adds each distinct string once.
    sizes = analyzer.sessions._sizes
    assert all(
        sizes[state.conversation.key].bytes >= estimated_bytes(state.conversation.messages)
        for state in states
    )
    conversations = sum(sizes[state.conversation.key].bytes for state in states)
    assert analyzer.sessions.bytes == conversations + sum(map(sys.getsizeof, distinct.values()))


def _demo_analyzer(
    convention: str,
    repeats: int,
    max_messages: int = 2000,
    prepare: Callable[[Analyzer], None] | None = None,
    each: Callable[[Analyzer, str], None] | None = None,
    long_texts: bool = False,
    window: int = 0,
    tolerate: tuple[type[Exception], ...] = (),
) -> Analyzer:
    """An Analyzer that read the demo conversations of ``convention``, their turns said ``repeats``
    times over (``prepare`` may change it first; a trace whose analysis raises one of
    ``tolerate`` is passed over, as the analysis stage does; ``each`` is called with the
    conversation's key after each trace; ``long_texts``: each user message 20 times as long,
    with an emoji, kept at 4 bytes a character; ``window``: the client resends only its latest
    ``window`` messages)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import otelsignals.demo.traffic as traffic
    from bench.session_memory import repeated_demo
    from otelsignals.config import SessionsConfig
    from otelsignals.offline import traces_in_time_order
    from otelsignals.pipeline.analyzer import Analyzer
    from otelsignals.telemetry import Telemetry

    ours = [c for c in traffic.load_conversations() if c["convention"] == convention]
    conversations = repeated_demo(ours, repeats, long_texts)
    spans = InMemorySpanExporter()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(traffic, "load_conversations", lambda: conversations)
        if window:
            import otelsignals.demo.emitter as emitter

            emit_turn = emitter.ConversationEmitter._emit_turn

            def windowed(self: Any, *arguments: Any) -> Any:
                del self.history[:-window]
                return emit_turn(self, *arguments)

            patch.setattr(emitter.ConversationEmitter, "_emit_turn", windowed)
        traffic.send_demo_traffic(None, None, _exporter_factory=lambda service, transport: spans)
    analyzer = Analyzer(Telemetry(), SessionsConfig(max_messages=max_messages))
    if prepare is not None:
        prepare(analyzer)
    for trace in traces_in_time_order([encode_spans(list(spans.get_finished_spans()))]):
        try:
            analysis = analyzer.process(trace)
        except tolerate:
            continue
        if each is not None and analysis is not None:
            each(analyzer, analysis.conversation_id)
    assert len(analyzer.sessions) >= len(conversations) > 0  # (one without a session id: one per trace)
    return analyzer


@pytest.mark.parametrize("convention", ["openllmetry", "openinference", "genai_events", "genai", "vercel_ai"])
def test_the_estimate_covers_what_a_long_conversation_holds_in_each_convention(convention):
    """What the span decoder keeps is counted: a history resent one attribute or event per message,
    kept decoded (its values are the text again), and the messages its history cache holds that the
    conversation does not (the Vercel AI SDK's outer span resends the caller's messages in a form of
    its own). Each demo conversation of the convention, its turns said three times over."""
    from bench.session_memory import deep_size

    analyzer = _demo_analyzer(convention, 3)
    seen = {id(analyzer), id(analyzer.sessions)}
    measured = sum(deep_size(state, seen) for state in analyzer.sessions)
    assert measured <= analyzer.sessions.bytes <= 2 * measured


@pytest.mark.parametrize("convention", ["genai", "vercel_ai", "genai_events"])
def test_a_trimmed_conversation_counts_the_history_its_decoder_still_holds(convention):
    """Past sessions.max_messages a conversation drops its oldest messages, but the next model call
    resends them, and the history cache (and the latest history's split, and the analysis' record of
    what it measured of the latest histories) keep them: what those hold beyond the rest of the
    state is counted."""
    from bench.session_memory import deep_size, parts_of

    analyzer = _demo_analyzer(convention, 8, max_messages=20)
    held = counted = 0
    holders = ("decoder_memory.histories", "decoder_memory.measured", "last_inputs")
    for state in analyzer.sessions:
        seen = {id(analyzer), id(analyzer.sessions)}
        parts = dict(parts_of(state))
        for name, part in parts.items():
            if name not in holders:
                deep_size(part, seen)
        held += sum(deep_size(parts[name], seen) for name in holders)
        counted += analyzer.sessions._sizes[state.conversation.key].copies
    assert (
        held <= counted <= 4 * held
    )  # (the raw keys' texts the decoder's latest records hold too count twice)


@pytest.mark.parametrize(
    ("long_texts", "window"), [(False, 0), (True, 0), (True, 10)], ids=["short", "long", "long-window"]
)
@pytest.mark.parametrize("convention", ["openllmetry", "openinference", "genai_events", "genai", "vercel_ai"])
def test_the_estimate_covers_a_long_conversation_trimmed_to_few_messages(convention, long_texts, window):
    """A conversation kept to sessions.max_messages still keeps a record of each of its latest
    traces, signals, model calls and tool calls, and the span decoder the history the client
    resends (for the indexed conventions, a raw key per position): the estimate follows those, not
    the messages, and between two passes over the history cache it follows the cache's growth.
    Each demo conversation of the convention, its turns said 12 times over, kept to 10 messages,
    checked after each of its traces (a young conversation's fixed part may be above the
    estimate's, by up to a sixth), and all of them at the end. With a client that resends its
    latest 10 messages only, the history cache's contents change while its size stays level, and
    an indexed history is read anew each time: its raw keys hold texts of their own."""
    from bench.session_memory import deep_size
    from otelsignals.pipeline.sessions import system_prompt

    lowest = [2.0]

    def check(analyzer: Analyzer, key: str) -> None:
        state = analyzer.sessions.get(key)
        assert state is not None
        prompt = system_prompt(state.conversation.messages)
        estimate = analyzer.sessions._sizes[key].bytes + (sys.getsizeof(prompt) if prompt else 0)
        lowest[0] = min(lowest[0], estimate / deep_size(state, {id(analyzer), id(analyzer.sessions)}))

    analyzer = _demo_analyzer(
        convention, 12, max_messages=10, each=check, long_texts=long_texts, window=window
    )
    assert max(len(state.conversation.messages) for state in analyzer.sessions) <= 10
    seen = {id(analyzer), id(analyzer.sessions)}
    measured = sum(deep_size(state, seen) for state in analyzer.sessions)
    assert measured <= analyzer.sessions.bytes <= 2 * measured
    assert lowest[0] >= 0.85


def test_a_trimmed_conversation_counts_its_decoders_histories_as_they_grow_not_on_every_trace(monkeypatch):
    """A conversation trimmed to few messages is counted in full on every trace (its messages moved),
    but the pass over the history cache, which grows with everything the client resends, runs as
    the cache builds messages (a quarter more than it held) and every FULL_RECOUNT_EVERY traces: on
    every trace, a long conversation's passes would cost in proportion to its length each."""
    import otelsignals.pipeline.sessions as sessions

    passes = []
    count = sessions._copies_bytes
    monkeypatch.setattr(sessions, "_copies_bytes", lambda *arguments: passes.append(1) or count(*arguments))
    analyzer = _demo_analyzer("genai_events", 20, max_messages=10)
    traces = sum(len(state.trace_spans) for state in analyzer.sessions)
    assert traces > 200
    assert 0 < len(passes) < traces / 2  # (on every trace while the histories are short)


def test_a_trace_whose_analysis_fails_is_still_counted():
    """The size is counted after the analysis (its records are in): when the analysis raises (here
    the embeddings endpoint is down), what the trace merged is counted all the same."""
    from bench.session_memory import deep_size

    class EndpointDown:
        dimension = 8

        def embed(self, texts):
            raise ConnectionError("embeddings endpoint unreachable")

    def embeddings_down(analyzer: Analyzer) -> None:
        analyzer.embedder = EndpointDown()  # type: ignore[assignment]

    analyzer = _demo_analyzer("genai", 2, prepare=embeddings_down, tolerate=(ConnectionError,))
    seen = {id(analyzer), id(analyzer.sessions)}
    measured = sum(deep_size(state, seen) for state in analyzer.sessions)
    assert not any(state.trace_signals for state in analyzer.sessions)  # every analysis failed
    assert measured <= analyzer.sessions.bytes <= 2 * measured


def test_the_byte_bound_evicts_the_least_recently_active_and_counts_it():
    evicted: list[tuple[str, str]] = []
    store = SessionStore(
        3600, 100, lambda state, why: evicted.append((state.conversation.key, why)), max_bytes=75_000
    )
    for key in "abcd":
        _say(store, key, "w" * 2000)  # about 25 KB each
    assert evicted == [("a", "bytes")]
    assert store.bytes <= 75_000
    _say(store, "b", "more " * 2000)  # b is now the most recently active: c goes next
    assert evicted[-1] == ("c", "bytes")
    assert sorted(state.conversation.key for state in store) == ["b", "d"]
    total = store.bytes
    store.ttl = -1
    store.expire()
    assert store.bytes == 0 and total > 0


def test_one_conversation_over_the_bound_alone_is_kept_and_an_unbounded_store_evicts_nothing():
    evicted: list[str] = []
    store = SessionStore(3600, 100, lambda state, why: evicted.append(why), max_bytes=5_000)
    _say(store, "big", "z" * 10_000)
    assert store.get("big") is not None and evicted == []
    unbounded = SessionStore(3600, 100, lambda state, why: evicted.append(why), max_bytes=0)
    for key in range(50):
        _say(unbounded, str(key), "z" * 10_000)
    assert evicted == [] and unbounded.bytes > 50 * 30_000


def test_a_trimmed_conversation_is_counted_again():
    store = SessionStore(3600, 100, max_bytes=0)
    for _ in range(10):
        _say(store, "a", "t" * 1000)
    before = store.bytes
    state = store.get("a")
    assert state is not None
    assert state.trim(4) > 0
    store.resize("a")
    assert 0 < store.bytes < before


def test_the_analyzer_keeps_its_sessions_under_the_byte_bound_and_says_so():
    from pathlib import Path

    from otelsignals.config import SessionsConfig
    from otelsignals.offline import read_requests, traces_in_time_order
    from otelsignals.pipeline.analyzer import Analyzer
    from otelsignals.telemetry import Telemetry

    fixtures = Path(__file__).parents[1] / "fixtures"
    paths = [p for p in sorted(fixtures.rglob("*.binpb")) if not p.name.endswith(".logs.binpb")]
    traces = traces_in_time_order(request for path in paths for request in read_requests(path))
    telemetry = Telemetry()
    analyzer = Analyzer(telemetry, SessionsConfig(max_bytes=60_000))  # type: ignore[arg-type]
    conversations = set()
    for trace in traces:
        analysis = analyzer.process(trace)
        if analysis is not None:
            conversations.add(analysis.conversation_id)
            biggest = max(analyzer.sessions._sizes.values(), key=lambda size: size.bytes).bytes
            assert analyzer.sessions.bytes <= max(60_000, biggest)
    evicted = telemetry.registry.get_sample_value("otelsignals_sessions_evicted_total", {"reason": "bytes"})
    assert len(conversations) >= 5 and evicted is not None and evicted >= 1
    assert len(analyzer.sessions) + evicted >= len(conversations)
    gauge = telemetry.registry.get_sample_value("otelsignals_sessions_bytes")
    assert gauge == analyzer.sessions.bytes > 0


def _one_conversation(text: str) -> tuple[SessionStore, ConversationState]:
    """An unbounded store whose conversation "a" has said ``text``, counted."""
    store = SessionStore(3600, 100, max_bytes=0)
    _say(store, "a", text)
    state = store.get("a")
    assert state is not None
    return store, state


def test_text_filled_into_a_counted_message_is_counted():
    import sys

    from otelsignals.model import ToolResult
    from otelsignals.pipeline.sessions import BYTES_PER_TEXT_BYTE

    store, state = _one_conversation("")
    before = store.bytes
    # A tool output joins a message read earlier (as a tool span arriving after its chat span).
    output = "r" * 1000
    state.conversation.messages[0].tool_result = ToolResult(content=output)
    store.resize("a")
    assert store.bytes - before in range(
        int(BYTES_PER_TEXT_BYTE * sys.getsizeof(output)) - 1,
        int(BYTES_PER_TEXT_BYTE * sys.getsizeof(output)) + 2,
    )


def test_a_long_conversation_counts_its_latest_texts_at_once_and_the_older_ones_soon():
    import sys

    from otelsignals.model import ToolResult
    from otelsignals.pipeline.sessions import (
        BYTES_PER_TEXT_BYTE,
        FULL_RECOUNT_EVERY,
        RECOUNTED_TAIL,
        estimated_bytes,
    )

    store = SessionStore(3600, 100, max_bytes=0)
    for n in range(3 * RECOUNTED_TAIL):
        _say(store, "a", f"message {n} " * 20)
    state = store.get("a")
    assert state is not None
    messages = state.conversation.messages
    assert store.bytes == estimated_bytes(messages)  # counted as it grew: the same as counting all
    output = "r" * 1000
    added = sys.getsizeof(output) * BYTES_PER_TEXT_BYTE
    # Text filled into a recent message is counted at the next resize...
    before = store.bytes
    messages[-3].tool_result = ToolResult(content=output)
    store.resize("a")
    assert abs(store.bytes - before - added) <= 1
    # ... into an old one (counted already, out of the recounted tail) within FULL_RECOUNT_EVERY.
    before = store.bytes
    messages[5].tool_result = ToolResult(content=output)
    for _ in range(FULL_RECOUNT_EVERY):
        store.resize("a")
    assert abs(store.bytes - before - added) <= 1
    assert store.bytes == estimated_bytes(messages)
    # A system prompt put in front moves every message counted before: all are counted again.
    from otelsignals.model import Message, Role, ToolCall

    prompt = "s" * 50_000
    messages.insert(0, Message(Role.SYSTEM, prompt, [ToolCall("f", {"a": "b" * 100})]))
    store.resize("a")
    assert store.bytes == estimated_bytes(messages) + sys.getsizeof(prompt)  # the prompt once (below)


def test_the_answers_kept_for_loop_detection_are_counted():
    import numpy as np

    from otelsignals.evals.trace_metrics import ComparableOutput

    store, state = _one_conversation("hello")
    before = store.bytes
    # A remote embeddings model's row (1,536 numbers) is far larger than the shipped model's 50.
    kept = ComparableOutput.of("the parcel left the depot", np.ones(1536, dtype=np.float32))
    state.previous_outputs.append(kept)
    store.resize("a")
    assert store.bytes - before == kept.nbytes >= 1536 * 4


def _workload_analyses(
    plain_messages: int | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
    after_each: Callable[[Analyzer, int], None] | None = None,
    **sessions: Any,
) -> tuple[list[bytes], Analyzer, Telemetry]:
    """Every analysis (as JSON) of 4 conversations of bench/agent_workload.py (long, tool-heavy) and
    the analyzer after them, with ``plain_messages`` kept uncompacted before each trace's new ones
    (None: the default); ``after_each(analyzer, analyses so far)`` is called after each trace;
    ``sessions``: the sessions section's settings (no byte bound unless given)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from bench.agent_workload import build_workload
    from otelsignals.config_loading import load_config
    from otelsignals.otlp.wire import split_request
    from otelsignals.pipeline import analyzer as analyzer_module
    from otelsignals.pipeline.assembler import Assembler, ReleasedTrace
    from otelsignals.telemetry import Telemetry

    if plain_messages is not None:
        assert monkeypatch is not None
        monkeypatch.setattr(analyzer_module, "PLAIN_MESSAGES", plain_messages)
    config = load_config(None, environ={})
    config.sessions.max_bytes = 0
    for setting, value in sessions.items():
        setattr(config.sessions, setting, value)
    analyzer = analyzer_module.Analyzer(
        Telemetry(), config.sessions, config.signals, config.evals, config.analyzer
    )
    released: list[ReleasedTrace] = []
    assembler = Assembler(released.append, lambda record: None, decision_wait=2.0)
    analyses = []
    for turn in build_workload(4, 2, seed=3).turns:
        assembler.add(split_request(ExportTraceServiceRequest.FromString(turn.body)).records)
        for trace in released:
            analysis = analyzer.process(trace)
            if analysis is not None:
                analyses.append(analysis.to_json())
            if after_each is not None:
                after_each(analyzer, len(analyses))
        released.clear()
    return analyses, analyzer, analyzer.telemetry


def test_old_messages_are_compacted_without_changing_any_analysis_and_take_less_memory(monkeypatch):
    from otelsignals.compaction import is_compacted
    from otelsignals.pipeline.analyzer import PLAIN_MESSAGES

    compacted, analyzer, telemetry = _workload_analyses(None)
    plain, plain_analyzer, plain_telemetry = _workload_analyses(10**9, monkeypatch)
    assert compacted == plain and len(compacted) > 40
    counted = telemetry.registry.get_sample_value("otelsignals_sessions_compacted_messages_total")
    assert counted is not None and counted > 100
    assert plain_telemetry.registry.get_sample_value("otelsignals_sessions_compacted_messages_total") == 0
    states = {state.conversation.key: state for state in analyzer.sessions}
    for plain_state in plain_analyzer.sessions:
        messages = states[plain_state.conversation.key].conversation.messages
        assert messages == plain_state.conversation.messages
        assert [m.content for m in messages] == [m.content for m in plain_state.conversation.messages]
        # The detectors' window before the next trace stays plain.
        assert not any(is_compacted(m) for m in messages[-PLAIN_MESSAGES:])
    # The byte bound counts the compacted size.
    assert analyzer.sessions.bytes < 0.9 * plain_analyzer.sessions.bytes


def test_a_resent_history_keeps_no_copy_of_a_message_the_conversation_holds():
    """The previous answer and the tool results a history resends are read as copies; once merged,
    the history cache, the latest split and the later calls of the trace hand back the
    conversation's own messages, so that no copy keeps a text alive that compaction would free."""
    from otelsignals.compaction import stored_message_text

    _, analyzer, _ = _workload_analyses(None)
    adopted = 0
    for state in analyzer.sessions:
        held: dict[int, set[int]] = {}  # text object -> the conversation's messages holding it
        for kept in state.conversation.messages:
            held.setdefault(id(stored_message_text(kept)), set()).add(id(kept))
        memory = state.decoder_memory.histories
        remembered = [h.messages for histories in memory._last.values() for h in histories]
        assert remembered
        assert state.last_inputs is not None
        for messages in [*remembered, state.last_inputs.messages, state.last_inputs.body]:
            for message in messages:
                text = stored_message_text(message)
                own = held.get(id(text))
                if isinstance(text, str) and len(text) >= 64 and own is not None:
                    assert id(message) in own or message.role is Role.SYSTEM
                    adopted += message.role is not Role.USER  # user messages are placed as read
    assert adopted > 100


def _said(state: ConversationState, count: int, start: int = 0) -> None:
    for number in range(start, start + count):
        state.append(Message(Role.USER, content=f"message {number}: " + "the parcel left the depot. " * 8))


def test_compaction_goes_on_from_where_it_stopped_after_a_trim():
    from otelsignals.compaction import is_compacted

    state = ConversationState.new("c")
    _said(state, 100)
    assert state.compact(60) == 60
    assert state.trim(50) == 55  # to 45 messages: indices now start at 55
    _said(state, 30, start=100)
    assert state.compact(60) == 55  # the 5 kept from before were compacted already
    messages = state.conversation.messages
    assert all(is_compacted(m) for m in messages[:60]) and not any(is_compacted(m) for m in messages[60:])


def test_text_held_elsewhere_is_offered_again_until_it_is_let_go_however_far_back():
    """A cache of recent texts lets go of a text some turns after the message was first offered:
    it is offered again on every later call, however far the compaction point has moved."""
    from otelsignals.compaction import is_compacted

    state = ConversationState.new("c")
    _said(state, 400)
    messages = state.conversation.messages
    held = [messages[0].content, messages[30].content]  # as a cache of recent texts would
    assert state.compact(30) == 29
    assert not is_compacted(messages[0])
    held.pop(0)
    assert state.compact(31) == 1  # message 0 again (and 30, still held)
    assert is_compacted(messages[0]) and not is_compacted(messages[30])
    assert state.compact(331) == 300  # 31 to 330; 30 still held
    held.clear()
    assert state.compact(332) == 2  # 30, 300 compactions later, and 331
    assert is_compacted(messages[30])
    assert state.compact(333) == 1  # and is not offered again


def test_only_the_latest_held_messages_are_offered_again():
    from otelsignals.compaction import is_compacted
    from otelsignals.conversation import COMPACTION_RETRIES

    state = ConversationState.new("c")
    _said(state, COMPACTION_RETRIES + 10)
    messages = state.conversation.messages
    held = [m.content for m in messages[: COMPACTION_RETRIES + 1]]
    assert state.compact(COMPACTION_RETRIES + 1) == 0
    held.clear()
    assert state.compact(COMPACTION_RETRIES + 2) == COMPACTION_RETRIES + 1  # the latest held, and one new
    assert not is_compacted(messages[0])  # the oldest held was dropped from the retries
    assert state.compaction_held == []


def test_every_message_before_the_point_is_offered_even_when_it_moves_far_at_once():
    from otelsignals.compaction import is_compacted

    state = ConversationState.new("c")
    _said(state, 300)  # a long history first seen at once (a resumed conversation, a long agent run)
    assert state.compact(268) == 268
    assert all(is_compacted(m) for m in state.conversation.messages[:268])


@pytest.mark.parametrize("convention", ["genai", "openllmetry"])
def test_open_conversations_share_their_memory_keys_and_keep_no_empty_lists(convention):
    """What every open conversation holds beside its text stays small (issue 16): the detector
    memory's keys are one string object for all conversations, a detector that found nothing keeps
    no empty list, and the state object has no attribute table of its own."""
    analyzer = _demo_analyzer(convention, 1)
    states = list(analyzer.sessions)
    first_of: dict[str, str] = {}
    for state in states:
        assert not hasattr(state, "__dict__")
        for key, value in state.detector_memory.items():
            assert first_of.setdefault(key, key) is key, f"{key!r} built anew for a conversation"
            assert not (isinstance(value, list) and not value), f"{key!r} keeps an empty list"
    assert any(key.endswith(":next") for key in first_of)  # the per-leaf keys are among them
    # Where each trace's messages end is keyed by the trace id the trace's other records hold.
    for state in states:
        held = {id(trace_id) for trace_id, _ in state.trace_spans}
        assert state.trace_message_ends and all(id(trace) in held for trace in state.trace_message_ends)


@pytest.mark.parametrize("convention", ["genai", "vercel_ai", "openllmetry"])
def test_the_latest_split_keeps_no_fingerprint_of_a_copy_given_way(convention):
    """A resent history's copies give way to the conversation's own messages in the latest split
    (conversation._adopt); their fingerprints go with them, not only the messages: an equal integer
    of the copy's left in the split's list is 36 bytes a message kept for nothing."""
    analyzer = _demo_analyzer(convention, 2)
    pairs = [
        (message, fingerprint)
        for state in analyzer.sessions
        if state.last_inputs is not None
        for message, fingerprint in zip(state.last_inputs.body, state.last_inputs.fingerprints, strict=True)
    ]
    assert pairs
    assert all(message.fingerprint == fingerprint for message, fingerprint in pairs)
    assert all(message.fingerprint is fingerprint for message, fingerprint in pairs)


@pytest.mark.parametrize("shared", [True, False], ids=["one-tool-list", "a-tool-list-each"])
def test_the_estimate_covers_the_tool_definitions_a_conversation_keeps(shared: bool):
    """Tool definitions sent with every model call (gen_ai.tool.definitions) are kept parsed, the
    latest of each name, up to 256: 24 function schemas (28 KB of JSON) took 98 KB a conversation
    that the estimate did not count (it fell to 0.56 of the measured state). Each conversation's
    estimate covers its state with the definitions counted as its own, shared or not."""
    import dataclasses
    import json

    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    from bench.session_memory import deep_size, fresh_analyzer, workload_traces

    def definitions(conversation: int) -> str:
        prefix = "" if shared else f"c{conversation}_"
        return json.dumps(
            [
                {
                    "type": "function",
                    "name": f"{prefix}tool_{n}",
                    "description": f"Tool {n}: looks up records in the back office and returns them. " * 3,
                    "parameters": {
                        "type": "object",
                        "properties": {
                            f"field_{j}": {"type": "string", "description": f"filter {j}"} for j in range(8)
                        },
                        "required": ["field_0"],
                    },
                }
                for n in range(24)
            ]
        )

    analyzer = fresh_analyzer()
    keys: dict[bytes, int] = {}
    for trace in workload_traces(6, 3):
        spans = []
        for record in trace.spans:
            span = Span.FromString(record.data)
            if span.name.startswith("chat"):
                key = next(a.value.string_value for a in span.attributes if a.key == "gen_ai.conversation.id")
                number = keys.setdefault(key.encode(), len(keys))
                span.attributes.append(
                    KeyValue(key="gen_ai.tool.definitions", value=AnyValue(string_value=definitions(number)))
                )
                record = dataclasses.replace(record, data=span.SerializeToString(), may_carry_genai=None)
            spans.append(record)
        analyzer.process(dataclasses.replace(trace, spans=spans))
    assert len(keys) == 6
    for state in analyzer.sessions:
        assert len(state.conversation.available_tools) == 24
        measured = deep_size(state, {id(analyzer), id(analyzer.sessions)})
        assert analyzer.sessions._sizes[state.conversation.key].bytes >= measured
