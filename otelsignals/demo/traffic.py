"""Turn the bundled demo conversations into real OpenTelemetry spans and send them over OTLP.

The traffic is produced with the real OpenTelemetry SDK (one `TracerProvider` per service, never
the global one) and the real OTLP exporters; when both endpoints are given, services alternate
between OTLP/gRPC and OTLP/HTTP so both receivers are exercised.

Every conversation turn is one trace shaped like a production agent request::

    POST /chat (SERVER, http.*)
    ├── SELECT chat_history (CLIENT, db.*)                      not GenAI
    └── invoke_agent {agent} (INTERNAL, gen_ai.operation.name=invoke_agent)
        ├── GET (CLIENT, http.*, user profile service)          not GenAI
        ├── chat {model} (CLIENT)  one per assistant step; whole history so far
        ├── execute_tool {tool} (INTERNAL)  one per tool call
        └── ...

Vercel AI SDK conversations put the SDK's own `ai.generateText` span between the agent span and
its steps (`ai.generateText.doGenerate` LLM spans and `ai.toolCall` tool spans), as the AI SDK does.

The LLM spans carry the messages in the conversation's convention (see `encode_llm`):

- ``genai``: ``gen_ai.input.messages`` / ``gen_ai.output.messages`` / ``gen_ai.system_instructions``
  as JSON strings in the current OTel GenAI format (parts ``text``, ``tool_call``,
  ``tool_call_response``);
- ``genai_events``: the deprecated GenAI span events ``gen_ai.system.message``,
  ``gen_ai.user.message``, ``gen_ai.assistant.message``, ``gen_ai.tool.message`` and
  ``gen_ai.choice``; the event body fields are event attributes (``content``, ``role``, ``id``,
  ``index``, ``finish_reason``; ``tool_calls`` and ``message`` as JSON strings, since span-event
  attributes cannot hold maps);
- ``openllmetry``: indexed ``gen_ai.prompt.{i}.*`` / ``gen_ai.completion.{i}.*``;
- ``openinference``: indexed ``llm.input_messages.{i}.message.*`` / ``llm.output_messages.*``;
- ``vercel_ai``: ``ai.prompt.messages`` (AI SDK message list), ``ai.response.text`` /
  ``ai.response.toolCalls``; tool spans only carry ``ai.toolCall.*`` (as the AI SDK emits them).

The conversation key is written where each convention puts it: ``gen_ai.conversation.id``
(genai, genai_events), ``traceloop.association.properties.session_id`` (openllmetry),
``session.id`` (openinference), ``ai.telemetry.metadata.sessionId`` (vercel_ai).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Tracer

from otelsignals.demo.emitter import NS_PER_MIN, NS_PER_S, ConversationEmitter

__all__ = ["CONVENTIONS", "DemoStats", "ExporterFactory", "load_conversations", "send_demo_traffic"]

log = logging.getLogger(__name__)

CONVENTIONS: tuple[str, ...] = ("genai", "genai_events", "openllmetry", "openinference", "vercel_ai")

# (service_name, transport) -> exporter; transport is "grpc", "http" or "memory" (no endpoint given).
ExporterFactory = Callable[[str, str], SpanExporter]


_SERVICE_VERSION = "1.4.0"
_ENVIRONMENT = "demo"


# Attribute-key prefixes (and event-name prefix) that make a span "carry GenAI data".
_GENAI_ATTR_PREFIXES = ("gen_ai.", "llm.", "openinference.", "traceloop.", "ai.", "session.id")
_GENAI_EVENT_PREFIX = "gen_ai."

# Generous limits: indexed conventions of a long history exceed the SDK's default 128 attributes.
SPAN_LIMITS = SpanLimits(max_span_attributes=1024, max_events=512, max_event_attributes=64)


@dataclass(frozen=True)
class DemoStats:
    conversations: int
    traces: int
    spans: int  # every span sent, GenAI or not
    genai_spans: int  # spans carrying GenAI data


# --------------------------------------------------------------------------------------------
# Data


def load_conversations() -> list[dict]:
    """The bundled demo conversations (``conversations.json``), validated."""
    text = resources.files("otelsignals.demo").joinpath("conversations.json").read_text(encoding="utf-8")
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("conversations.json: expected a list of conversations")
    seen: set[str] = set()
    for conv in data:
        _validate(conv)
        if conv["id"] in seen:
            raise ValueError(f"conversations.json: duplicate conversation id {conv['id']!r}")
        seen.add(conv["id"])
    return data


def _validate(conv: Any) -> None:
    cid = conv.get("id") if isinstance(conv, dict) else None

    def bad(why: str) -> ValueError:
        return ValueError(f"conversations.json: conversation {cid!r}: {why}")

    if not isinstance(conv, dict):
        raise bad("not an object")
    for key in ("id", "agent_name", "service_name", "convention", "model", "story"):
        if not isinstance(conv.get(key), str) or not conv[key]:
            raise bad(f"missing or empty {key!r}")
    if conv["convention"] not in CONVENTIONS:
        raise bad(f"unknown convention {conv['convention']!r}")
    if "session_id" not in conv or not (conv["session_id"] is None or isinstance(conv["session_id"], str)):
        raise bad("'session_id' must be a string or null")
    turns = conv.get("turns")
    if not isinstance(turns, list) or not turns:
        raise bad("'turns' must be a non-empty list")
    for t, turn in enumerate(turns):
        _validate_turn(t, turn, bad)


def _validate_turn(t: int, turn: Any, bad: Callable[[str], ValueError]) -> None:
    if not isinstance(turn.get("user"), str) or not turn["user"]:
        raise bad(f"turn {t}: missing user message")
    steps = turn.get("steps")
    if not isinstance(steps, list) or not steps:
        raise bad(f"turn {t}: 'steps' must be a non-empty list")
    for s, step in enumerate(steps):
        _validate_step(f"turn {t} step {s}", step, bad)


def _validate_step(where: str, step: Any, bad: Callable[[str], ValueError]) -> None:
    if "llm_error" in step:
        _validate_error(step["llm_error"], bad, where)
        return
    calls = step.get("tool_calls")
    if calls is None:
        if not isinstance(step.get("text"), str) or not step["text"]:
            raise bad(f"{where}: needs 'text', 'tool_calls' or 'llm_error'")
        return
    if not isinstance(calls, list) or not calls:
        raise bad(f"{where}: 'tool_calls' must be a non-empty list")
    for call in calls:
        if not isinstance(call.get("name"), str) or not isinstance(call.get("arguments"), dict):
            raise bad(f"{where}: a tool call needs 'name' and an 'arguments' object")
        if ("result" in call) == ("error" in call):
            raise bad(f"{where}: tool call {call['name']!r} needs exactly one of result/error")
        if "error" in call:
            _validate_error(call["error"], bad, where)


def _validate_error(err: Any, bad: Callable[[str], ValueError], where: str) -> None:
    if (
        not isinstance(err, dict)
        or not isinstance(err.get("type"), str)
        or not isinstance(err.get("message"), str)
    ):
        raise bad(f"{where}: an error needs 'type' and 'message'")
    status = err.get("http_status")
    if status is not None and not isinstance(status, int):
        raise bad(f"{where}: 'http_status' must be an integer")


# --------------------------------------------------------------------------------------------
# Sending


class _SpanCounter(SpanProcessor):
    """Counts every span that ends, and those that carry GenAI data."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.spans = 0
        self.genai_spans = 0

    def on_end(self, span: ReadableSpan) -> None:
        genai = _carries_genai(span)
        with self._lock:
            self.spans += 1
            self.genai_spans += genai


def _carries_genai(span: ReadableSpan) -> bool:
    if any(key.startswith(_GENAI_ATTR_PREFIXES) for key in span.attributes or {}):
        return True
    return any(event.name.startswith(_GENAI_EVENT_PREFIX) for event in span.events)


class _TallyExporter(SpanExporter):
    """Delegating exporter that counts the spans its delegate accepted (for a warning only)."""

    def __init__(self, delegate: SpanExporter, label: str) -> None:
        self._delegate = delegate
        self.label = label
        self.accepted = 0
        self.rejected = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._delegate.export(spans)
        if result is SpanExportResult.SUCCESS:
            self.accepted += len(spans)
        else:
            self.rejected += len(spans)
        return result

    def shutdown(self) -> None:
        self._delegate.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._delegate.force_flush(timeout_millis)


def _grpc_exporter(endpoint: str) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=endpoint.strip(), insecure=True)


def _http_exporter(endpoint: str) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    url = endpoint.strip()
    if "://" not in url:
        url = "http://" + url
    if not url.rstrip("/").endswith("/v1/traces"):
        url = url.rstrip("/") + "/v1/traces"
    return OTLPSpanExporter(endpoint=url)


def send_demo_traffic(
    grpc_endpoint: str | None,
    http_endpoint: str | None,
    *,
    repeat: int = 1,
    _exporter_factory: ExporterFactory | None = None,
) -> DemoStats:
    """Send the demo conversations `repeat` times; returns exact counts of what was sent.

    `grpc_endpoint` is ``host:port`` (e.g. ``127.0.0.1:4317``); `http_endpoint` is a URL, with or
    without the ``/v1/traces`` path. With both, services alternate between the two transports.
    Round ``k >= 1`` of `repeat` suffixes session ids with ``-r{k}``; trace and span ids are always
    fresh. `_exporter_factory` (private, for tests) replaces the OTLP exporters.
    """
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    transports = [name for name, ep in (("grpc", grpc_endpoint), ("http", http_endpoint)) if ep]
    if not transports:
        if _exporter_factory is None:
            raise ValueError("send_demo_traffic needs a gRPC or an HTTP endpoint")
        transports = ["memory"]

    conversations = load_conversations()
    counter = _SpanCounter()
    providers: dict[str, TracerProvider] = {}
    tallies: list[_TallyExporter] = []
    for index, service in enumerate(sorted({conv["service_name"] for conv in conversations})):
        transport = transports[index % len(transports)]
        if _exporter_factory is not None:
            exporter = _exporter_factory(service, transport)
        elif transport == "grpc":
            exporter = _grpc_exporter(grpc_endpoint or "")
        else:
            exporter = _http_exporter(http_endpoint or "")
        tally = _TallyExporter(exporter, f"{service} via {transport}")
        tallies.append(tally)
        provider = TracerProvider(
            resource=Resource.create(
                {
                    "service.name": service,
                    "service.version": _SERVICE_VERSION,
                    "deployment.environment.name": _ENVIRONMENT,
                }
            ),
            span_limits=SPAN_LIMITS,
        )
        provider.add_span_processor(counter)
        provider.add_span_processor(
            BatchSpanProcessor(
                tally, max_queue_size=16384, schedule_delay_millis=200, max_export_batch_size=256
            )
        )
        providers[service] = provider

    tracers: dict[str, dict[tuple[str, str | None], Tracer]] = {service: {} for service in providers}
    traces = 0
    now = time.time_ns()
    try:
        for round_no in range(repeat):
            for index, conv in enumerate(conversations):
                # Conversations start 9 minutes apart within the last 3 hours; rounds 11 s apart.
                start = now - 180 * NS_PER_MIN + index * 9 * NS_PER_MIN - round_no * 11 * NS_PER_S
                provider = providers[conv["service_name"]]
                emitter = ConversationEmitter(conv, provider, tracers[conv["service_name"]], round_no, start)
                traces += emitter.emit()
            # Flush every round so a large `repeat` never overflows a queue (which would drop spans).
            for provider in providers.values():
                provider.force_flush(timeout_millis=30_000)
    finally:
        for provider in providers.values():
            if not provider.force_flush(timeout_millis=30_000):
                log.warning("demo traffic: a span flush timed out")
        for provider in providers.values():
            provider.shutdown()
    for tally in tallies:
        if tally.rejected:
            log.warning("demo traffic: %d spans were not accepted (%s)", tally.rejected, tally.label)
    return DemoStats(
        conversations=len(conversations) * repeat,
        traces=traces,
        spans=counter.spans,
        genai_spans=counter.genai_spans,
    )
