"""otelsignals in front of a real Arize Phoenix: agent traffic from the real OpenTelemetry SDK goes
through the real `otelsignals run` into `phoenix serve`, and Phoenix's own API finds the enrichment
(`signals.*` attributes, the layered counts, the `signal.*` events, the 🚩) and filters on it.
With `annotations.phoenix_url` set, each turn's verdict is readable back as a Phoenix span
annotation; with Phoenix down or stalled, spans still flow and the failures are counted."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry

from otelsignals.config import AnnotationsConfig
from otelsignals.pipeline.annotations import OUTAGE_PROBLEMS, PhoenixAnnotator, SpanVerdict
from otelsignals.telemetry import ProblemLog
from tests.support.clients import export_grpc
from tests.support.otlp_sink import OtlpSink
from tests.support.phoenix import PhoenixServer, wait_until
from tests.support.servers import ServerUnavailable, free_port
from tests.support.sidecar import SidecarProcess
from tests.test_enrichment_e2e import ASSISTANT_1, ASSISTANT_2, USER_1, USER_2, documented_example, text

pytestmark = pytest.mark.slow

FLAG = " \U0001f6a9"
# A short, happy conversation: excellent (81), nothing flagged.
CALM_USER_1 = "When will order 7730 arrive?"
CALM_ASSISTANT_1 = "Order 7730 shipped yesterday and arrives on Thursday."
CALM_USER_2 = "Perfect, thank you so much, that's exactly what I needed!"
CALM_ASSISTANT_2 = "You're welcome! Enjoy your order."
CONVERSATION_TEXTS = (
    *(USER_1, USER_2, ASSISTANT_1, ASSISTANT_2),
    *(CALM_USER_1, CALM_USER_2, CALM_ASSISTANT_1, CALM_ASSISTANT_2),
)


def calm_example() -> list[ReadableSpan]:
    """The documented example's shape (a request span around a model call) with a satisfied user."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "support-gateway"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests.phoenix")
    with tracer.start_as_current_span("POST /chat", kind=SpanKind.SERVER) as root:
        root.set_attribute("session.id", "sess-calm")
        with tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as chat:
            chat.set_attribute("gen_ai.operation.name", "chat")
            chat.set_attribute("gen_ai.request.model", "gpt-4o")
            chat.set_attribute("gen_ai.agent.name", "billing-helper")
            history = [
                text("user", CALM_USER_1),
                text("assistant", CALM_ASSISTANT_1),
                text("user", CALM_USER_2),
            ]
            chat.set_attribute("gen_ai.input.messages", orjson.dumps(history).decode())
            chat.set_attribute(
                "gen_ai.output.messages", orjson.dumps([text("assistant", CALM_ASSISTANT_2)]).decode()
            )
    provider.shutdown()
    return list(memory.get_finished_spans())


class SentTurn:
    """One conversation turn as sent: its hex ids, by span name."""

    def __init__(self, spans: Sequence[ReadableSpan]) -> None:
        self.spans = list(spans)
        self.trace_id = format(spans[0].context.trace_id, "032x")
        self.span_ids = {span.name: format(span.context.span_id, "016x") for span in spans}
        self.chat, self.root = self.span_ids["chat gpt-4o"], self.span_ids["POST /chat"]


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    server = PhoenixServer(tmp_path_factory.mktemp("phoenix"))
    try:
        server.start()
    except ServerUnavailable as exc:
        pytest.fail(str(exc))
    yield server
    server.stop()


def send(sidecar: SidecarProcess, *turns: SentTurn) -> None:
    export_grpc(sidecar.grpc_endpoint, [span for turn in turns for span in turn.spans])
    sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", sum(len(t.spans) for t in turns))


def stored_spans(phoenix: PhoenixServer, *turns: SentTurn) -> dict[str, dict[str, Any]]:
    """The turns' spans as Phoenix stored them, by span id (waiting until all are there)."""
    expected = sum(len(turn.spans) for turn in turns)
    spans = wait_until(lambda: phoenix.spans([t.trace_id for t in turns]), lambda s: len(s) >= expected)
    assert len(spans) == expected, phoenix.log_tail()
    return {span["context"]["span_id"]: span for span in spans}


def filtered(phoenix: PhoenixServer, turns: Sequence[SentTurn], *attributes: str) -> set[str]:
    return {span["context"]["span_id"] for span in phoenix.spans([t.trace_id for t in turns], attributes)}


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_enriched_spans_are_stored_in_phoenix_and_filterable(
    tmp_path: Path, phoenix: PhoenixServer, protocol: str
) -> None:
    endpoint = phoenix.grpc_endpoint if protocol == "grpc" else phoenix.base_url
    severe, calm = SentTurn(documented_example()), SentTurn(calm_example())
    with SidecarProcess(tmp_path, {"endpoint": endpoint, "protocol": protocol}) as sidecar:
        send(sidecar, severe, calm)
        assert sidecar.metric("otelsignals_dropped_spans_total") == 0
    stored = stored_spans(phoenix, severe, calm)

    # What the enricher wrote, as Phoenix shows it.
    chat, root = stored[severe.chat], stored[severe.root]
    assert chat["name"] == "chat gpt-4o" + FLAG and root["name"] == "POST /chat" + FLAG
    for span in (chat, root):
        attributes = span["attributes"]
        assert attributes["signals.quality"] == "severe"
        assert attributes["signals.quality_score"] == 0.0
        assert attributes["signals.triage.priority"] >= 50
        assert attributes["signals.interaction.disengagement.count"] == 2
        assert attributes["signals.interaction.handoff.count"] == 1
        assert "signals.execution.failure.count" not in attributes
    events = {event["name"]: event["attributes"] for event in chat["events"]}
    assert {
        "signal.interaction.disengagement.escalation",
        "signal.interaction.disengagement.negative_stance",
        "signal.interaction.handoff.transfer",
    } <= set(events)
    escalation = events["signal.interaction.disengagement.escalation"]
    assert escalation["signal.type"] == "interaction.disengagement.escalation"
    assert escalation["signal.message_index"] == 2
    assert not root["events"], "signal events go on the model-call span only"
    calm_chat = stored[calm.chat]
    assert calm_chat["name"] == "chat gpt-4o", "a calm conversation is not flagged"
    assert calm_chat["attributes"]["signals.quality"] == "excellent"
    assert "signals.interaction.disengagement.count" not in calm_chat["attributes"]
    assert {event["name"] for event in calm_chat["events"]} == {
        "signal.interaction.satisfaction.gratitude",
        "signal.interaction.satisfaction.confirmation",
    }

    # Phoenix's attribute filters find each conversation by its verdict and by a layered count.
    turns = (severe, calm)
    assert filtered(phoenix, turns, "signals.quality:severe") == {severe.chat, severe.root}
    assert filtered(phoenix, turns, "signals.quality:excellent") == {calm.chat, calm.root}
    assert filtered(phoenix, turns, "signals.interaction.disengagement.count:2") == {severe.chat, severe.root}
    assert filtered(phoenix, turns, "signals.quality:severe", "signals.interaction.handoff.count:1") == {
        severe.chat,
        severe.root,
    }
    assert filtered(phoenix, turns, "signals.quality:poor") == set()
    # And so does the query language of Phoenix's filter box (the README's example).
    matching = phoenix.span_ids_where(
        "signals.quality == 'severe' and signals.interaction.disengagement.count >= 2"
    )
    assert {severe.chat, severe.root} <= matching
    assert not {calm.chat, calm.root} & matching
    assert {calm.chat, calm.root} <= phoenix.span_ids_where("signals.quality == 'excellent'")


def test_conversation_verdicts_become_phoenix_span_annotations(
    tmp_path: Path, phoenix: PhoenixServer
) -> None:
    severe, calm = SentTurn(documented_example()), SentTurn(calm_example())
    annotations = {"phoenix_url": phoenix.base_url, "flush_interval": "100ms"}
    with SidecarProcess(tmp_path, {"endpoint": phoenix.grpc_endpoint}, annotations=annotations) as sidecar:
        send(sidecar, severe, calm)
        sidecar.wait_for_metric("otelsignals_annotations_sent_total", 2)
        assert sidecar.metric("otelsignals_annotations_failed_total") == 0
        assert sidecar.metric("otelsignals_annotations_dropped_total") == 0
    stored = wait_until(
        lambda: phoenix.span_annotations([severe.chat, calm.chat, severe.root, calm.root]),
        lambda found: len(found) >= 2,
    )
    by_span = {annotation["span_id"]: annotation for annotation in stored}
    assert set(by_span) == {severe.chat, calm.chat}, "one verdict per turn, on its model-call span"

    verdict = by_span[severe.chat]
    assert (verdict["name"], verdict["annotator_kind"]) == ("otelsignals", "CODE")
    assert verdict["result"]["label"] == "severe"
    assert verdict["result"]["score"] == 0.0
    explanation = verdict["result"]["explanation"]
    assert explanation.startswith("triage priority ")
    assert "asked for a person" in explanation and "handed the user to a person" in explanation
    assert verdict["metadata"]["conversation_id"] == "sess-doc-example"
    assert verdict["metadata"]["flagged"] is True
    assert verdict["metadata"]["signals"]["interaction.disengagement"] == 2
    happy = by_span[calm.chat]
    assert (happy["result"]["label"], happy["result"]["score"]) == ("excellent", 81.0)
    assert happy["metadata"]["flagged"] is False
    # Phoenix's filter box finds the turns by their verdict (the README's example).
    worst = phoenix.span_ids_where("annotations['otelsignals'].label == 'severe'")
    assert severe.chat in worst and calm.chat not in worst
    low = phoenix.span_ids_where("annotations['otelsignals'].score < 40")
    assert severe.chat in low and calm.chat not in low
    # Private by default: no word of the conversation, although the spans carry snippets.
    written = json.dumps(stored, ensure_ascii=False)
    sentences = [part for said in CONVERSATION_TEXTS for part in re.split(r"(?<=[.,!?]) ", said)]
    assert [sentence for sentence in sentences if sentence in written] == []


class StalledPhoenix:
    """A port that takes connections into its backlog and never answers."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(64)
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"


@pytest.mark.parametrize(("outage", "reason"), [("down", "connection"), ("stalled", "timeout")])
def test_an_unreachable_phoenix_costs_no_span_and_is_counted(
    tmp_path: Path, sink: OtlpSink, outage: str, reason: str
) -> None:
    stalled = StalledPhoenix() if outage == "stalled" else None
    url = stalled.url if stalled is not None else f"http://127.0.0.1:{free_port()}"
    annotations = {"phoenix_url": url, "flush_interval": "50ms", "timeout": "500ms", "max_attempts": 2}
    try:
        with SidecarProcess(tmp_path, {"endpoint": sink.grpc_endpoint}, annotations=annotations) as sidecar:
            severe, calm = SentTurn(documented_example()), SentTurn(calm_example())
            started = time.monotonic()
            export_grpc(sidecar.grpc_endpoint, severe.spans + calm.spans)
            sink.wait_for_spans(4, timeout=10)
            # The spans left at the pipeline's pace (a 300 ms decision wait), not at Phoenix's.
            assert time.monotonic() - started < 5
            sidecar.wait_for_metric("otelsignals_annotations_failed_total", 2, reason=reason, timeout=20)
            # Still failing: the next turn's spans flow too, and its verdict is counted as well.
            again = SentTurn(documented_example(preset={"gen_ai.conversation.id": "sess-again"}))
            export_grpc(sidecar.grpc_endpoint, again.spans)
            sink.wait_for_spans(6, timeout=10)
            sidecar.wait_for_metric("otelsignals_annotations_failed_total", 3, reason=reason, timeout=20)
            assert sidecar.metric("otelsignals_annotations_sent_total") == 0
            assert sidecar.metric("otelsignals_dropped_spans_total") == 0
            assert sidecar.stop() == 0
        enriched = {
            span.span_id.hex()
            for span in sink.decoded_spans()
            if any(kv.key == "signals.quality" for kv in span.attributes)
        }
        assert enriched == {*severe.span_ids.values(), *calm.span_ids.values(), *again.span_ids.values()}
        failures = [r for r in sidecar.log_records() if r.get("kind") == f"annotations_{reason}"]
        assert len(failures) == 1, "logged when it starts, then summed up"
        assert url in json.dumps(failures[0])
    finally:
        if stalled is not None:
            stalled.socket.close()


def verdict(number: int) -> SpanVerdict:
    return SpanVerdict(f"{number:016x}", "neutral", 50.0, "triage priority 0/100", {})


def test_a_full_queue_drops_new_verdicts_and_counts_them() -> None:
    registry = CollectorRegistry()
    annotator = PhoenixAnnotator(
        AnnotationsConfig(phoenix_url="http://127.0.0.1:9", max_pending=2), registry, ProblemLog()
    )
    for number in range(5):
        annotator.submit(verdict(number))
    assert registry.get_sample_value("otelsignals_annotations_dropped_total", {"reason": "queue_full"}) == 3
    assert registry.get_sample_value("otelsignals_annotations_pending") == 2


@pytest.mark.parametrize(
    ("outage", "metric", "reason"),
    [
        ("down", "otelsignals_annotations_failed_total", "connection"),  # tried, refused: failed
        ("stalled", "otelsignals_annotations_dropped_total", "shutdown"),  # still waiting at the deadline
    ],
)
def test_verdicts_left_at_shutdown_are_tried_then_counted(outage: str, metric: str, reason: str) -> None:
    stalled = StalledPhoenix() if outage == "stalled" else None
    url = stalled.url if stalled is not None else f"http://127.0.0.1:{free_port()}"

    async def scenario() -> CollectorRegistry:
        registry = CollectorRegistry()
        annotator = PhoenixAnnotator(
            AnnotationsConfig(phoenix_url=url, max_attempts=1), registry, ProblemLog()
        )
        annotator.start()
        for number in range(3):
            annotator.submit(verdict(number))
        # Before the flush interval is up: stop() itself sends what waits, within its deadline.
        started = time.monotonic()
        await annotator.stop(timeout=0.5)
        assert time.monotonic() - started < 2, "a stalled Phoenix does not hold shutdown up"
        return registry

    try:
        registry = asyncio.run(scenario())
    finally:
        if stalled is not None:
            stalled.socket.close()
    assert registry.get_sample_value(metric, {"reason": reason}) == 3
    assert registry.get_sample_value("otelsignals_annotations_sent_total") == 0
    assert registry.get_sample_value("otelsignals_annotations_pending") == 0


@pytest.mark.parametrize(
    ("kind", "outage"),
    [
        ("annotations_connection", True),
        ("annotations_timeout", True),
        ("annotations_http_503", True),
        ("annotations_http_429", True),
        ("annotations_queue_full", True),
        ("annotations_http_422", False),  # Phoenix refused that batch's content: a good batch says nothing
        ("annotations_http_401", False),  # a wrong key stays wrong until someone fixes it
        ("annotations_error", False),
    ],
)
def test_only_an_outage_ends_when_phoenix_takes_a_batch(kind: str, outage: bool) -> None:
    assert kind.startswith(OUTAGE_PROBLEMS) is outage


def test_one_shutdown_budget_covers_the_spans_and_the_verdicts(tmp_path: Path) -> None:
    """A downstream and a Phoenix that both never answer: SIGTERM ends the process within
    service.shutdown_timeout (plus the process's own exit), not the timeout once per phase."""
    downstream, phoenix = StalledPhoenix(), StalledPhoenix()
    budget = 4.0
    annotations = {"phoenix_url": phoenix.url, "flush_interval": "50ms", "timeout": "30s"}
    exporter = {"endpoint": downstream.url.removeprefix("http://"), "timeout": "30s"}
    try:
        with SidecarProcess(
            tmp_path, exporter, annotations=annotations, service={"shutdown_timeout": f"{budget:g}s"}
        ) as sidecar:
            export_grpc(sidecar.grpc_endpoint, documented_example())
            sidecar.wait_for_metric("otelsignals_analyzer_conversation_traces_total", 1, timeout=10)
            time.sleep(0.3)  # the verdict on its way to Phoenix, the spans to the downstream
            started = time.monotonic()
            assert sidecar.stop(timeout=30) == 0
            took = time.monotonic() - started
        # Before, each phase had the whole timeout: at least 2 × budget here.
        assert took < 1.6 * budget, f"shutdown took {took:.1f}s"
    finally:
        downstream.socket.close()
        phoenix.socket.close()
