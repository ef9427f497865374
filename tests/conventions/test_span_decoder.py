"""The span decoder offers spans to the registered readers: a reader of a new convention, with key
prefixes of its own, is read as soon as it is registered (the GenAI pre-filter derives its markers
from the readers), and reuses what was read of its conversation's history without knowing of it."""

from __future__ import annotations

from typing import Any

import orjson
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otelsignals.config import SessionsConfig
from otelsignals.conventions import READERS
from otelsignals.conventions.base import SpanReading, SpanView
from otelsignals.conventions.markers import genai_markers
from otelsignals.conventions.memory import ConversationMemory
from otelsignals.conventions.span_decoder import SerializedSpan, SpanDecoder
from otelsignals.model import Message, Role
from otelsignals.otlp.wire import ScopeContext, SpanRecord
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.telemetry import Telemetry

HISTORY = "acme.chat.history"
ANSWER = "acme.chat.answer"


class AcmeReader:
    """A made-up convention: the history as one JSON array of ``{"who", "said"}``, the answer as text."""

    name = "acme"
    key_prefixes: tuple[str, ...] = ("acme.chat.",)

    def __init__(self) -> None:
        self.parsed: list[int] = []  # how many history items each read parsed

    def read(self, span: SpanView) -> SpanReading | None:
        history = span.attribute_str(HISTORY)
        if history is None:
            return None
        inputs = span.histories.messages(HISTORY, history, lambda value: self._messages(value, span.span_id))
        answer = span.attribute_str(ANSWER)
        outputs = [Message(Role.ASSISTANT, content=answer, span_id=span.span_id)] if answer else []
        return SpanReading(convention=self.name, input_messages=inputs, output_messages=outputs)

    def _messages(self, value: Any, span_id: bytes) -> list[Message]:
        items = value if isinstance(value, list) else []
        self.parsed.append(len(items))
        roles = {"user": Role.USER, "agent": Role.ASSISTANT}
        return [Message(roles[item["who"]], content=item["said"], span_id=span_id) for item in items]


def acme_trace(turn: int) -> ReleasedTrace:
    trace_id, span_id = bytes([turn + 1]) * 16, bytes([turn + 1]) * 8
    history = []
    for n in range(turn + 1):
        history.append({"who": "user", "said": f"where is order {n}?"})
        if n < turn:
            history.append({"who": "agent", "said": f"order {n} ships tomorrow"})
    span = Span(trace_id=trace_id, span_id=span_id, name="acme chat")
    for key, value in (
        ("session.id", "acme-session"),
        (HISTORY, orjson.dumps(history).decode()),
        (ANSWER, f"order {turn} ships tomorrow"),
    ):
        span.attributes.append(KeyValue(key=key, value=AnyValue(string_value=value)))
    data = span.SerializeToString()
    record = SpanRecord(trace_id, span_id, b"", data, ScopeContext(None, "", None, ""))
    return ReleasedTrace(trace_id, [record], "complete", len(data))


def test_the_pre_filter_searches_for_the_registered_readers_prefixes():
    assert set(SpanDecoder().markers) == {b"ai.", b"llm.", b"openinference.", b"traceloop."}
    # A prefix holding another one is covered by it; each marker is searched for once.
    assert genai_markers(["gen_ai.", "llm.", "ai.", "gen_ai."]) == (b"ai.", b"llm.")


def test_a_registered_reader_with_a_new_prefix_is_read_without_touching_the_pre_filter():
    traces = [acme_trace(turn) for turn in range(3)]
    assert not SpanDecoder().might_carry_genai(traces[0].spans[0].data)
    assert Analyzer(Telemetry(), SessionsConfig()).assemble(traces[0]) is None

    acme = AcmeReader()
    analyzer = Analyzer(Telemetry(), SessionsConfig())
    analyzer.decoder = SpanDecoder((*READERS, acme))
    for trace in traces:
        assert analyzer.assemble(trace) is not None
    (state,) = list(analyzer.sessions)
    assert state.conversation.key == "acme-session"
    assert [(m.role, m.content) for m in state.conversation.messages] == [
        (Role.USER, "where is order 0?"),
        (Role.ASSISTANT, "order 0 ships tomorrow"),
        (Role.USER, "where is order 1?"),
        (Role.ASSISTANT, "order 1 ships tomorrow"),
        (Role.USER, "where is order 2?"),
        (Role.ASSISTANT, "order 2 ships tomorrow"),
    ]
    # The reader knows nothing of the conversation's history cache, yet each later call parsed
    # only what its history added.
    assert acme.parsed == [1, 2, 2]


def serialized(session: str | None) -> SerializedSpan:
    span = Span(trace_id=b"\x07" * 16, span_id=b"\x08" * 8, name="chat")
    span.attributes.append(KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="chat")))
    if session is not None:
        span.attributes.append(KeyValue(key="session.id", value=AnyValue(string_value=session)))
    return SerializedSpan(span.SerializeToString(), {"service.name": "agent"}, "scope")


def test_a_trace_is_decoded_with_the_memory_of_the_conversation_it_names():
    decoder = SpanDecoder()
    known = ConversationMemory()
    memories = {"known": known}
    decoded = decoder.decode_trace(b"\x07" * 16, [serialized("known")], [], memories.get)
    assert decoded.key == "known" and decoded.memory is known
    assert decoded.genai[0].resource == {"service.name": "agent"} and decoded.genai[0].scope_name == "scope"
    # A conversation not known yet gets a memory of its own; a trace naming none is its own.
    fresh = decoder.decode_trace(b"\x07" * 16, [serialized("other")], [], memories.get)
    assert fresh.key == "other" and fresh.memory is not known
    alone = decoder.decode_trace(b"\x07" * 16, [serialized(None)], [], memories.get)
    assert alone.key == (b"\x07" * 16).hex() and alone.memory is not known
    # The key may come from a span decoded only for it; bytes that are not a span are left out.
    broken = SerializedSpan(b"\xff\xff", {}, "")
    named = decoder.decode_trace(
        b"\x07" * 16, [serialized(None), broken], [serialized("known")], memories.get
    )
    assert named.key == "known" and named.memory is known
    assert (len(named.genai), len(named.others), named.undecodable) == (1, 1, 1)
