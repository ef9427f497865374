"""analyzer.* limits: how much of one span's text the analysis reads (otelsignals/limits.py)."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otelsignals.config import ConfigError, validate
from otelsignals.config_loading import load_config
from otelsignals.conventions.base import SpanReading, ToolExecution
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
