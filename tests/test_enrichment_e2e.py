"""What reaches the downstream: the exact signals.* attributes, signal.* events and 🚩 of SPEC §5,
through the live sidecar with the real SDK, and the same analysis offline with `otelsignals analyze`."""

from __future__ import annotations

import base64
import subprocess
import sys
import urllib.request
from pathlib import Path

import orjson
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from otelsignals.conventions.decoding import any_value
from tests.support.clients import export_grpc
from tests.support.otlp_sink import OtlpSink
from tests.support.sidecar import SidecarProcess

# The documentation's example: a 4-turn support conversation (2 user, 2 assistant turns) in which the
# user gets frustrated and asks for a human.
USER_1 = "I was charged twice for order 5521, can you refund one of the charges?"
ASSISTANT_1 = "I can see one charge for order 5521. Could you check your bank statement again?"
USER_2 = "I already checked, it's there twice. This is ridiculous. Let me speak to a human agent."
ASSISTANT_2 = "I understand. I'm transferring you to a member of our billing team now."


def text(role: str, content: str) -> dict:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def documented_example(
    preset: dict | None = None,
    agent_name: str | None = "billing-helper",
    session_id: str = "sess-doc-example",
    service: str | None = "support-gateway",
    turns: tuple[str, str, str, str] = (USER_1, ASSISTANT_1, USER_2, ASSISTANT_2),
) -> list:
    memory = InMemorySpanExporter()
    # service=None: a resource with nothing in it, not even the SDK's default service.name.
    resource = Resource.create({"service.name": service}) if service is not None else Resource({})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests.enrichment")
    with tracer.start_as_current_span("POST /chat", kind=SpanKind.SERVER) as root:
        root.set_attribute("session.id", session_id)
        with tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as chat:
            chat.set_attribute("gen_ai.operation.name", "chat")
            chat.set_attribute("gen_ai.request.model", "gpt-4o")
            if agent_name is not None:
                chat.set_attribute("gen_ai.agent.name", agent_name)
            user_1, assistant_1, user_2, assistant_2 = turns
            history = [text("user", user_1), text("assistant", assistant_1), text("user", user_2)]
            chat.set_attribute("gen_ai.input.messages", orjson.dumps(history).decode())
            chat.set_attribute(
                "gen_ai.output.messages", orjson.dumps([text("assistant", assistant_2)]).decode()
            )
            for key, value in (preset or {}).items():
                chat.set_attribute(key, value)
    provider.shutdown()
    return list(memory.get_finished_spans())


def attributes(span: Span) -> dict:
    return {kv.key: any_value(kv.value) for kv in span.attributes}


def received_spans(sink: OtlpSink) -> dict[str, Span]:
    return {span.name.removesuffix(" \U0001f6a9"): span for span in sink.decoded_spans()}


@pytest.fixture
def sidecar_and_sink(tmp_path, sink):
    """Starts the sidecar (with these `signals:` settings) in front of the sink."""
    started: list[SidecarProcess] = []

    def start(**signals) -> tuple[SidecarProcess, OtlpSink]:
        started.append(SidecarProcess(tmp_path, {"endpoint": sink.grpc_endpoint}, signals=signals).start())
        return started[-1], sink

    yield start
    for sidecar in started:
        sidecar.__exit__()


def test_documented_example_span(sidecar_and_sink):
    sidecar, sink = sidecar_and_sink()
    spans = documented_example()
    export_grpc(sidecar.grpc_endpoint, spans)
    sink.wait_for_spans(len(spans))
    received = received_spans(sink)
    chat, root = received["chat gpt-4o"], received["POST /chat"]
    assert chat.name == "chat gpt-4o \U0001f6a9" and root.name == "POST /chat \U0001f6a9"
    for span in (chat, root):
        attrs = attributes(span)
        assert attrs["signals.quality"] == "severe"
        assert attrs["signals.quality_score"] == 0.0
        assert attrs["signals.turn_count"] == 4
        assert attrs["signals.efficiency_score"] == 1.0
        assert attrs["signals.triage.priority"] >= 50.0
        assert attrs["signals.interaction.handoff.count"] == 1
        assert attrs["signals.interaction.disengagement.count"] == 2
        assert attrs["signals.interaction.disengagement.severity"] == 1
        assert attrs["signals.escalation.requested"] is True
        assert attrs["signals.frustration.count"] == 1
        assert attrs["signals.frustration.severity"] == 1
        assert "signals.interaction.misalignment.count" not in attrs
        assert "signals.follow_up.repair.count" not in attrs  # legacy keys too only when not zero
        assert "signals.execution.failure.count" not in attrs  # per category only when count > 0
    events = {event.name: {kv.key: any_value(kv.value) for kv in event.attributes} for event in chat.events}
    escalation = events["signal.interaction.disengagement.escalation"]
    assert escalation["signal.type"] == "interaction.disengagement.escalation"
    assert escalation["signal.message_index"] == 2
    assert "speak to a human" in escalation["signal.snippet"] and escalation["signal.snippet"] in USER_2
    assert 0 < escalation["signal.confidence"] <= 1
    assert isinstance(orjson.loads(escalation["signal.metadata"]), dict)
    assert "signal.interaction.disengagement.negative_stance" in events
    handoff = orjson.loads(events["signal.interaction.handoff.transfer"]["signal.metadata"])
    assert handoff == {
        "asked_by": "user",
        "via": "message",
        "after": ["interaction.disengagement"],
        "request_index": 2,
    }
    assert not root.events, "events go on the model-call span only"


# The reference documentation's example span (Plano Signals, "Example Span"): a 4-turn session whose
# user shouts, complains and asks for a human; disengagement count 6 / severity 3, frustration count 4 /
# severity 2, the escalation event on message 6 with the snippet "get me a human". The conversation is
# ours (the documentation shows only the span); messages 0–6 are the system prompt, the user, the
# agent's two tool look-ups and the user again.
def tool_calling_turn(role: str, content: str | None = None, call: tuple | None = None, result=None) -> dict:
    parts: list[dict] = [{"type": "text", "content": content}] if content else []
    if call is not None:
        parts.append({"type": "tool_call", "id": call[0], "name": call[1], "arguments": call[2]})
    if result is not None:
        parts.append({"type": "tool_call_response", "id": result[0], "response": result[1]})
    return {"role": role, "parts": parts}


REFERENCE_HISTORY = [
    tool_calling_turn("system", "You are Acme's order support assistant."),
    tool_calling_turn("user", "THIS IS RIDICULOUS!!! WHERE IS MY ORDER"),
    tool_calling_turn(
        "assistant", "Let me check that order for you.", call=("c1", "get_order", {"id": "A-1043"})
    ),
    tool_calling_turn("tool", result=("c1", {"status": "in_transit"})),
    tool_calling_turn("assistant", call=("c2", "get_shipment", {"order_id": "A-1043"})),
    tool_calling_turn("tool", result=("c2", {"carrier": "DHL", "eta": "2026-11-28"})),
    tool_calling_turn("user", "Forget it, get me a human!!"),
]
REFERENCE_ANSWER = "I'm sorry for the wait. I can't connect you to a person, but I've opened ticket 8812."


def reference_example() -> list:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "acme-gateway"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("tests.reference").start_as_current_span(
        "POST /v1/chat/completions gpt-5.2", kind=SpanKind.CLIENT
    ) as chat:
        chat.set_attribute("gen_ai.operation.name", "chat")
        chat.set_attribute("gen_ai.request.model", "gpt-5.2")
        chat.set_attribute("gen_ai.conversation.id", "conv-reference")
        chat.set_attribute("gen_ai.input.messages", orjson.dumps(REFERENCE_HISTORY).decode())
        answer = [tool_calling_turn("assistant", REFERENCE_ANSWER)]
        chat.set_attribute("gen_ai.output.messages", orjson.dumps(answer).decode())
    provider.shutdown()
    return list(memory.get_finished_spans())


def test_the_reference_documentations_example_span_attribute_for_attribute(sidecar_and_sink):
    sidecar, sink = sidecar_and_sink()
    export_grpc(sidecar.grpc_endpoint, reference_example())
    sink.wait_for_spans(1)
    (span,) = sink.decoded_spans()
    assert span.name == "POST /v1/chat/completions gpt-5.2 \U0001f6a9"  # the reference marks it " [!]"
    signals = {key: value for key, value in attributes(span).items() if key.startswith("signals.")}
    ours = {  # what otelsignals adds beside the reference's keys (README, "On the spans")
        key: signals.pop(key)
        for key in (
            "signals.conversation.id",
            "signals.agent.id",
            "signals.flagged",
            "signals.triage.priority",
        )
    }
    assert signals == {
        "signals.quality": "severe",
        "signals.quality_score": 0.0,
        "signals.turn_count": 4,
        "signals.efficiency_score": 1.0,
        # layered: only the non-zero categories
        "signals.interaction.disengagement.count": 6,
        "signals.interaction.disengagement.severity": 3,
        # legacy: only the keys with something to say
        "signals.frustration.count": 4,
        "signals.frustration.severity": 2,
        "signals.escalation.requested": True,
    }
    assert ours["signals.conversation.id"] == "conv-reference" and ours["signals.flagged"] is True
    events = [{kv.key: any_value(kv.value) for kv in event.attributes} for event in span.events]
    (escalation,) = [e for e in events if e["signal.type"] == "interaction.disengagement.escalation"]
    assert escalation["signal.message_index"] == 6
    assert escalation["signal.snippet"] == "get me a human"
    assert orjson.loads(escalation["signal.metadata"])["pattern_type"] == "escalation"
    assert 0 < escalation["signal.confidence"] <= 1
    kinds = sorted(
        (e["signal.message_index"], orjson.loads(e["signal.metadata"])["pattern_type"])
        for e in events
        if e["signal.type"] == "interaction.disengagement.negative_stance"
    )
    assert kinds == [
        (1, "all_caps"),
        (1, "complaint"),
        (1, "excessive_punctuation"),
        (6, "excessive_punctuation"),
    ]
    assert len(events) == 6


def test_enriched_spans_name_the_conversation_and_the_agent_they_were_analysed_under(sidecar_and_sink):
    sidecar, sink = sidecar_and_sink()
    named = documented_example()
    # No gen_ai.agent.name on any span: the agent is the resource's service.name, and the
    # conversation key (session.id) is only on the request span, not on the chat span.
    by_service = documented_example(agent_name=None, session_id="sess-by-service", service="helpdesk-api")
    # Nothing names the agent at all: it goes by the name its reputation is kept under.
    nameless = documented_example(agent_name=None, session_id="sess-nameless", service=None)
    export_grpc(sidecar.grpc_endpoint, named + by_service + nameless)
    sink.wait_for_spans(len(named) + len(by_service) + len(nameless))
    by_conversation: dict[str, list[dict]] = {}
    for span in sink.decoded_spans():
        attrs = attributes(span)
        assert "signals.conversation.id" in attrs and "signals.agent.id" in attrs, span.name
        by_conversation.setdefault(attrs["signals.conversation.id"], []).append(attrs)
    assert sorted(by_conversation) == ["sess-by-service", "sess-doc-example", "sess-nameless"]
    assert all(len(spans) == 2 for spans in by_conversation.values()), "the chat span and the root span"
    agents = {key: {a["signals.agent.id"] for a in spans} for key, spans in by_conversation.items()}
    assert agents == {
        "sess-doc-example": {"billing-helper"},
        "sess-by-service": {"helpdesk-api"},
        "sess-nameless": {"unknown"},
    }
    assert not any("gen_ai.agent.name" in a for a in by_conversation["sess-by-service"])
    sidecar.wait_for_metric("otelsignals_reputation_evaluations_total", 3)
    with urllib.request.urlopen(f"{sidecar.admin_url}/v1/reputation", timeout=5) as answer:
        reputations = {agent["agent_id"] for agent in orjson.loads(answer.read())["agents"]}
    assert reputations == {"billing-helper", "helpdesk-api", "unknown"}


CALM = (
    "What time do you open on Saturdays?",
    "We open at 9 am on Saturdays.",
    "And on Sundays?",
    "On Sundays we open at 10 am.",
)


def names_and_flags(sink: OtlpSink) -> dict[str, list[tuple[str, bool]]]:
    """Per conversation, each enriched span's name and its signals.flagged."""
    found: dict[str, list[tuple[str, bool]]] = {}
    for span in sink.decoded_spans():
        attrs = attributes(span)
        found.setdefault(attrs["signals.conversation.id"], []).append((span.name, attrs["signals.flagged"]))
    return {key: sorted(spans) for key, spans in found.items()}


def test_the_flag_renames_spans_unless_switched_off_and_stays_an_attribute(sidecar_and_sink):
    spans = documented_example() + documented_example(session_id="sess-calm", turns=CALM)
    renaming, sink = sidecar_and_sink()
    export_grpc(renaming.grpc_endpoint, spans)
    sink.wait_for_spans(len(spans))
    assert names_and_flags(sink) == {
        "sess-doc-example": [("POST /chat \U0001f6a9", True), ("chat gpt-4o \U0001f6a9", True)],
        "sess-calm": [("POST /chat", False), ("chat gpt-4o", False)],
    }
    renaming.stop()
    sink.clear()
    keeping, sink = sidecar_and_sink(flag_span_name=False)
    export_grpc(keeping.grpc_endpoint, spans)
    sink.wait_for_spans(len(spans))
    assert names_and_flags(sink) == {
        "sess-doc-example": [("POST /chat", True), ("chat gpt-4o", True)],
        "sess-calm": [("POST /chat", False), ("chat gpt-4o", False)],
    }


def test_resent_span_is_not_enriched_twice_and_existing_attributes_win(sidecar_and_sink):
    sidecar, sink = sidecar_and_sink()
    spans = documented_example(preset={"signals.turn_count": 99})
    export_grpc(sidecar.grpc_endpoint, spans)
    sink.wait_for_spans(len(spans))
    first = received_spans(sink)["chat gpt-4o"]
    assert attributes(first)["signals.turn_count"] == 99, "an attribute the app set is never overwritten"
    # The enriched span comes back (e.g. through a second otelsignals): it keeps one set.
    sink.clear()
    export_grpc_raw(sidecar, first, spans)
    sink.wait_for_spans(1)
    again = received_spans(sink)["chat gpt-4o"]
    assert [kv.key for kv in again.attributes].count("signals.quality") == 1
    assert again.name.count("\U0001f6a9") == 1
    assert len(again.events) == len(first.events)


def export_grpc_raw(sidecar: SidecarProcess, span: Span, originals: list) -> None:
    import grpc

    request = encode_spans([s for s in originals if s.name == "chat gpt-4o"])
    request.resource_spans[0].scope_spans[0].spans[0].CopyFrom(span)
    with grpc.insecure_channel(sidecar.grpc_endpoint) as channel:
        channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,
            response_deserializer=None,
        )(request.SerializeToString(), timeout=10)


def test_snippets_and_legacy_keys_can_be_switched_off(sidecar_and_sink):
    sidecar, sink = sidecar_and_sink(snippets=False, legacy_attributes=False)
    spans = documented_example()
    export_grpc(sidecar.grpc_endpoint, spans)
    sink.wait_for_spans(len(spans))
    chat = received_spans(sink)["chat gpt-4o"]
    attrs = attributes(chat)
    assert attrs["signals.quality"] == "severe"
    assert not [key for key in attrs if key.startswith(("signals.frustration", "signals.follow_up"))]
    assert all(kv.key != "signal.snippet" for event in chat.events for kv in event.attributes)
    # The user's words appear once: in the input messages the app recorded, nowhere otelsignals wrote.
    assert chat.SerializeToString().count(b"speak to a human agent") == 1


def test_analyze_cli_prints_the_spec_json_lines(tmp_path):
    request = encode_spans(documented_example())
    path = tmp_path / "example.binpb"
    path.write_bytes(request.SerializeToString())
    out = tmp_path / "enriched.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "otelsignals.cli", "analyze", str(path), "--json", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    (line,) = [orjson.loads(x) for x in result.stdout.splitlines()]
    assert set(line) >= {
        "conversation_id",
        "trace_id",
        "span_id",
        "agent_id",
        "turn_count",
        "quality",
        "quality_score",
        "efficiency_score",
        "flagged",
        "signals",
    }
    assert line["conversation_id"] == "sess-doc-example"
    assert line["agent_id"] == "billing-helper"
    assert (line["turn_count"], line["quality"], line["flagged"]) == (4, "severe", True)
    types = {signal["type"] for signal in line["signals"]}
    assert {"interaction.disengagement.escalation", "interaction.disengagement.negative_stance"} <= types
    assert all(
        set(signal) == {"type", "message_index", "confidence", "snippet"} for signal in line["signals"]
    )
    assert b"signals.quality" in out.read_bytes() and b"signals.triage.priority" in out.read_bytes()
    # Frustration, a demand for a person and a hand-off: near the top of the priority scale.
    assert line["priority"] >= 50 and line["priority_reasons"]
    assert "interaction.handoff.transfer" in types


def test_analyze_rank_prints_the_conversations_most_worth_a_look(tmp_path):
    calm = documented_example()
    path = tmp_path / "example.binpb"
    path.write_bytes(encode_spans(calm).SerializeToString())
    result = subprocess.run(
        [sys.executable, "-m", "otelsignals.cli", "analyze", str(path), "--rank", "3", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    (line,) = [orjson.loads(x) for x in result.stdout.splitlines()]
    assert (line["rank"], line["conversation_id"]) == (1, "sess-doc-example")
    assert line["priority"] >= 50
    assert any("asked for a person" in reason for reason in line["reasons"])
    assert any("handed the user to a person" in reason for reason in line["reasons"])
    text = subprocess.run(
        [sys.executable, "-m", "otelsignals.cli", "analyze", str(path), "--rank", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert text.stdout.startswith("  1. ") and "sess-doc-example" in text.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "otelsignals.cli", "analyze", str(path), "--rank", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--rank" in bad.stderr


def test_analyze_cli_reports_unreadable_input(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"resourceSpans": 3}')
    result = subprocess.run(
        [sys.executable, "-m", "otelsignals.cli", "analyze", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "broken.json" in result.stderr
    # An earlier output stays as it was (it was emptied before the input was read).
    out = tmp_path / "enriched.jsonl"
    out.write_text("an earlier run's spans\n")
    again = subprocess.run(
        [sys.executable, "-m", "otelsignals.cli", "analyze", str(path), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 1 and out.read_text() == "an earlier run's spans\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.json", "enriched.jsonl"]


@pytest.mark.parametrize("logs_as", ["binpb", "json"])
def test_analyze_reads_genai_events_sent_as_log_records_as_the_sidecar_does(tmp_path, logs_as: str) -> None:
    """Instrumentations that send message content as log records (OpenAI v2 with events): analyze
    refused the logs file ("not a protobuf ExportTraceServiceRequest"), or took a JSON one as an
    empty trace request, so it saw no text (0 turns, every content category skipped) where the
    sidecar, joining the events to their spans, found 6 turns and the user's thanks."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    from otelsignals.offline import read_requests, traces_in_time_order
    from otelsignals.pipeline.analyzer import Analyzer
    from otelsignals.telemetry import Telemetry

    fixtures = Path(__file__).parent / "fixtures" / "openai_v2_events"
    logs = ExportLogsServiceRequest.FromString((fixtures / "chat.logs.binpb").read_bytes())
    analyzer = Analyzer(Telemetry())  # the sidecar's analysis, the events there before their spans
    analyzer.log_events.add(logs)
    live = [analyzer.process(trace) for trace in traces_in_time_order(read_requests(fixtures / "chat.binpb"))]
    expected = [(a.score.turn_count, a.score.quality) for a in live if a is not None]
    assert expected[-1][0] == 6
    logs_path = tmp_path / ("chat.logs.binpb" if logs_as == "binpb" else "events.json")
    if logs_as == "binpb":
        logs_path.write_bytes(logs.SerializeToString())
    else:  # OTLP/JSON: ids in hex (json_format writes base64)
        document = MessageToDict(logs)
        for resource in document["resourceLogs"]:
            for scope in resource["scopeLogs"]:
                for record in scope["logRecords"]:
                    for key in ("traceId", "spanId"):
                        record[key] = base64.b64decode(record[key]).hex()
        logs_path.write_bytes(orjson.dumps(document))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "otelsignals.cli",
            "analyze",
            str(fixtures / "chat.binpb"),
            str(logs_path),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = [orjson.loads(x) for x in result.stdout.splitlines()]
    assert [(line["turn_count"], line["quality"]) for line in lines] == expected
