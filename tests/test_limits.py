"""analyzer.* limits: how much of one span's text the analysis reads (otelsignals/limits.py)."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otelsignals.config import ConfigError, validate
from otelsignals.config_loading import load_config
from otelsignals.conventions.base import SpanReading, ToolExecution
from otelsignals.conventions.genai import otel_messages
from otelsignals.conventions.memory import ConversationMemory
from otelsignals.limits import TextLimits, cap_messages, cap_reading
from otelsignals.model import Message, Role, ToolResult
from tests.support.clients import export_grpc
from tests.support.otlp_sink import OtlpSink
from tests.support.sidecar import SidecarProcess

LIMITS = TextLimits(max_message_bytes=16, max_messages_per_span=3, max_span_text_bytes=40)


def user(text: str) -> Message:
    return Message(Role.USER, text)


def test_a_long_message_is_cut_at_a_character_boundary_and_counted() -> None:
    cut: Counter[str] = Counter()
    messages = cap_messages([user("é" * 20), user("short")], LIMITS, cut)
    assert messages[0].content == "é" * 8 and len(messages[0].content.encode()) <= 16
    assert messages[1].content == "short"
    assert cut == {"message_bytes": 1}


def test_the_same_message_is_always_cut_the_same_way() -> None:
    first, second = user("x" * 100), user("x" * 100)
    cap_messages([first], LIMITS, Counter())
    cap_messages([second, user("later")], LIMITS, Counter())
    assert first.content == second.content == "x" * 16


def test_a_long_history_keeps_its_latest_messages() -> None:
    cut: Counter[str] = Counter()
    history = [user(str(n)) for n in range(5)]
    assert [m.content for m in cap_messages(history, LIMITS, cut)] == ["2", "3", "4"]
    assert cut == {"messages_per_span": 2}


def test_too_much_text_in_one_span_drops_the_oldest_messages_whole() -> None:
    cut: Counter[str] = Counter()
    kept = cap_messages([user("a" * 16), user("b" * 16), user("c" * 16)], LIMITS, cut)
    assert [m.content for m in kept] == ["b" * 16, "c" * 16]
    assert cut == {"span_text_bytes": 1}


def test_a_tool_result_is_cut_like_a_message() -> None:
    reading = SpanReading("otel", tool_execution=ToolExecution("search", result=ToolResult(content="r" * 50)))
    cut: Counter[str] = Counter()
    cap_reading(reading, LIMITS, cut)
    assert reading.tool_execution is not None and reading.tool_execution.result.content == "r" * 16
    assert cut == {"tool_result_bytes": 1}


@pytest.mark.parametrize(
    ("key", "value"),
    [("MAX_MESSAGE_BYTES", "10"), ("MAX_MESSAGES_PER_SPAN", "0"), ("MAX_SPAN_TEXT_BYTES", "1")],
)
def test_limits_too_small_to_analyse_anything_are_refused(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        validate(load_config(None, environ={f"OTELSIGNALS_ANALYZER__{key}": value}))
    assert raised.value.key == f"analyzer.{key.lower()}"


def test_a_huge_message_is_cut_for_the_analysis_and_forwarded_whole(tmp_path, sink: OtlpSink) -> None:
    huge = "I was charged twice and nobody helps. " * 60_000  # 2.3 MB of user text
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "support"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("tests.limits").start_as_current_span("chat gpt-4o") as chat:
        chat.set_attribute("gen_ai.operation.name", "chat")
        chat.set_attribute("gen_ai.conversation.id", "huge-1")
        chat.set_attribute(
            "gen_ai.input.messages",
            orjson.dumps([{"role": "user", "parts": [{"type": "text", "content": huge}]}]).decode(),
        )
        chat.set_attribute(
            "gen_ai.output.messages",
            orjson.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Sorry!"}]}]).decode(),
        )
    provider.shutdown()
    with SidecarProcess(tmp_path, {"endpoint": sink.grpc_endpoint}) as sidecar:
        export_grpc(sidecar.grpc_endpoint, list(memory.get_finished_spans()))
        sink.wait_for_spans(1)
        assert sidecar.metric("otelsignals_analyzer_truncated_total", reason="message_bytes") == 1
        (span,) = sink.decoded_spans()
        sent = {kv.key: kv.value.string_value for kv in span.attributes}
        assert huge in sent["gen_ai.input.messages"], "the span leaves with its text whole"
        assert any(kv.key == "signals.quality" for kv in span.attributes), "and analysed"


# A history resent whole on every model call, read through the conversation's history cache the way
# the GenAI reader reads it: the cache hands back the messages it read before as the same objects.
MEMO_LIMITS = TextLimits(max_message_bytes=64, max_messages_per_span=24, max_span_text_bytes=900)


PROMPT = "Be kind. " * 20  # over max_message_bytes: each message of its own for it is cut


class ResentHistory:
    """One client's history and one conversation's memory reading it, call after call."""

    def __init__(self, prompt_apart: bool) -> None:
        self.items: list[dict[str, object]] = [] if prompt_apart else [{"role": "system", "content": PROMPT}]
        self.prompt_apart = prompt_apart  # as gen_ai.system_instructions: a message of its own per span
        self.memory = ConversationMemory()
        self.span = 0

    def read(self) -> list[Message]:
        self.span += 1
        span_id = self.span.to_bytes(8, "big")
        text = orjson.dumps(self.items).decode()
        read = lambda parsed: otel_messages(parsed, span_id, Role.USER)  # noqa: E731
        history = self.memory.histories.messages("gen_ai.input.messages", text, read)
        return (
            [Message(Role.SYSTEM, PROMPT, span_id=span_id), *history] if self.prompt_apart else list(history)
        )


def _text(length: int, seed: int) -> str:
    return ("é" if seed % 3 == 0 else "a") * length  # some texts over the byte limit only as UTF-8


_steps = st.lists(
    st.one_of(
        st.tuples(st.just("say"), st.sampled_from(["user", "assistant"]), st.integers(0, 120)),
        st.tuples(st.just("tool"), st.just(""), st.sampled_from([0, 0, 20, 90])),  # 0: a result without text
        st.tuples(st.just("call"), st.just(""), st.just(0)),
        st.tuples(st.just("result text"), st.just(""), st.integers(1, 120)),
    ),
    max_size=40,
)


@settings(max_examples=80, deadline=None)
@given(head=st.integers(0, 30), steps=_steps, prompt_apart=st.booleans())
def test_a_history_measured_with_the_memory_is_cut_as_without_it(head, steps, prompt_apart) -> None:
    """The same client read by two conversations, one capping with its memory and one without: call
    after call, both read the same messages, cut the same way, and count the same cuts; also past
    the limits of a span, and when a tool result that came without text is given its text later
    (by its tool span: the conversation then says so, conversation.py)."""
    remembering, forgetting = ResentHistory(prompt_apart), ResentHistory(prompt_apart)
    for client in (remembering, forgetting):  # a history long enough for the memory from the start
        client.items += [
            {"role": "tool", "content": None, "tool_call_id": f"h{n}"}
            if n % 5 == 4
            else {"role": "user", "content": _text(10 + n * 7 % 90, n)}
            for n in range(head)
        ]
    last: dict[int, list[Message]] = {}
    for number, (step, role, length) in enumerate([*steps, ("call", "", 0)]):
        if step in ("say", "tool"):
            for client in (remembering, forgetting):
                if step == "say":
                    client.items.append({"role": role, "content": _text(length, number)})
                else:
                    content = _text(length, number) if length else None
                    client.items.append({"role": "tool", "content": content, "tool_call_id": f"c{number}"})
        elif step == "result text":
            # What conversation._attach_tool_execution does: a result without text gets its span's.
            for world, client in enumerate((remembering, forgetting)):
                waiting = [m for m in last.get(world, []) if m.role is Role.TOOL and m.content is None]
                if waiting:
                    waiting[0].content = _text(length, number)
                    client.memory.text_given()
        else:
            cuts: list[Counter[str]] = [Counter(), Counter()]
            read = [
                cap_messages(remembering.read(), MEMO_LIMITS, cuts[0], remembering.memory),
                cap_messages(forgetting.read(), MEMO_LIMITS, cuts[1]),
            ]
            assert [(m.role, m.content) for m in read[0]] == [(m.role, m.content) for m in read[1]]
            assert cuts[0] == cuts[1]
            last = {0: read[0], 1: read[1]}


def _long_history(client: ResentHistory, count: int) -> None:
    client.items += [
        {"role": "user" if n % 2 else "assistant", "content": f"message {n}"} for n in range(count)
    ]


@pytest.mark.parametrize("prompt_apart", [False, True], ids=["prompt-in-history", "prompt-apart"])
def test_what_was_measured_of_a_resent_history_is_not_measured_again(prompt_apart) -> None:
    """Shown by a text changed behind the analysis' back (nothing in the pipeline does that): once
    measured, a message of a continued history is not looked at again, so its new text is not cut.
    Near misses: a history that does not continue the one measured (another head), and a short
    history, which is measured whole every time."""
    client = ResentHistory(prompt_apart)
    _long_history(client, 20)
    first = cap_messages(client.read(), MEMO_LIMITS, Counter(), client.memory)
    first[5].content = "x" * 100
    client.items.append({"role": "user", "content": "and one more"})
    cut: Counter[str] = Counter()
    again = cap_messages(client.read(), MEMO_LIMITS, cut, client.memory)
    assert again[5] is first[5] and again[5].content == "x" * 100
    assert cut == Counter(message_bytes=1 if prompt_apart else 0)  # (the prompt's new message is cut)

    other = ResentHistory(prompt_apart)
    _long_history(other, 20)
    history = other.read()
    history[5].content = "x" * 100  # a history read for the first time: measured whole
    cap_messages(history, MEMO_LIMITS, Counter(), other.memory)
    assert history[5].content == "x" * 64

    short = ResentHistory(prompt_apart)
    _long_history(short, 5)
    read = cap_messages(short.read(), MEMO_LIMITS, Counter(), short.memory)
    read[-1].content = "x" * 100
    short.items.append({"role": "user", "content": "and one more"})
    assert cap_messages(short.read(), MEMO_LIMITS, Counter(), short.memory)[-2].content == "x" * 64


def test_a_history_with_the_same_ends_but_another_middle_is_measured_whole() -> None:
    client = ResentHistory(prompt_apart=False)
    _long_history(client, 20)
    measured = cap_messages(client.read(), MEMO_LIMITS, Counter(), client.memory)
    edited = list(measured)
    edited[10] = Message(Role.USER, "y" * 100)
    cut: Counter[str] = Counter()
    cap_messages(edited, MEMO_LIMITS, cut, client.memory)
    assert edited[10].content == "y" * 64 and cut == {"message_bytes": 1}


def test_the_memory_keeps_only_histories_the_cache_holds() -> None:
    """What the analysis remembers of a history is the cache's own list of its messages: no list
    of its own, and none the cache has let go of (a client's long histories from many starts, each
    followed by short ones, which the cache keeps too and the analysis measures whole)."""
    client = ResentHistory(prompt_apart=True)
    for start in range(6):
        for count in (30, 3, 4, 5, 6):
            client.items = [{"role": "user", "content": f"start {start}: {n}"} for n in range(count)]
            cap_messages(client.read(), MEMO_LIMITS, Counter(), client.memory)
            if count == 30:  # (a short history is neither looked up nor remembered)
                held = client.memory.histories.message_lists()
                assert len(client.memory.measured) == 1, "the earlier long ones have left the cache"
                assert any(client.memory.measured[0].body is h for h in held)
