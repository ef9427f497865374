"""The GenAI pre-filter must let every convention's spans through and stop ordinary ones."""

from __future__ import annotations

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otelsignals.conventions.span_decoder import SpanDecoder

might_carry_genai = SpanDecoder().might_carry_genai


def span_bytes(**attributes: str) -> bytes:
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="operation")
    for key, value in attributes.items():
        attribute = span.attributes.add()
        attribute.key = key.replace("__", ".")
        attribute.value.string_value = value
    return span.SerializeToString()


@pytest.mark.parametrize(
    "key",
    [
        "gen_ai.input.messages",  # OTel GenAI
        "gen_ai.prompt.0.content",  # OpenLLMetry
        "gen_ai.operation.name",  # tool spans (execute_tool)
        "llm.input_messages.0.message.content",  # OpenInference
        "openinference.span.kind",  # OpenInference TOOL / AGENT spans
        "traceloop.span.kind",  # OpenLLMetry workflow and tool spans
        "ai.prompt.messages",  # Vercel AI SDK
        "ai.toolCall.name",
        "ai.response.text",
    ],
)
def test_every_convention_passes_the_filter(key):
    assert might_carry_genai(span_bytes(**{key: "x"}))


@pytest.mark.parametrize(
    "attributes",
    [
        {"http.request.method": "POST", "url.path": "/chat", "server.address": "api.example.com"},
        {"db.system.name": "postgresql", "db.query.text": "SELECT * FROM orders"},
        {"messaging.system": "kafka", "messaging.destination.name": "orders"},
        {"rpc.service": "Checkout", "user_agent.original": "curl/8.0"},
    ],
)
def test_ordinary_spans_are_stopped(attributes):
    assert not might_carry_genai(span_bytes(**attributes))
