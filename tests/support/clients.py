"""Real OpenTelemetry SDK spans and real OTLP exporters, as the tests' clients."""

from __future__ import annotations

import socket
from collections.abc import Sequence

import orjson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

__all__ = [
    "assert_unchanged_but_for_enrichment",
    "encode_spans",
    "expected_span_bytes",
    "export_grpc",
    "export_http",
    "is_enriched",
    "make_spans",
    "strip_enrichment",
]

SpanKey = tuple[bytes, bytes]


def make_spans(
    traces: int, children: int = 3, *, genai_every: int = 0, service: str = "checkout", seed_text: str = ""
) -> list[ReadableSpan]:
    """``traces`` traces of a root SERVER span and ``children`` child spans each, ended children
    first as a real SDK does. With ``genai_every=k``, every k-th child is a GenAI chat span."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": service, "deployment.environment": "test"})
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests.clients", "1.0")
    child_number = 0
    for t in range(traces):
        with tracer.start_as_current_span("POST /orders", kind=SpanKind.SERVER) as root:
            root.set_attribute("http.request.method", "POST")
            root.set_attribute("http.response.status_code", 200)
            for c in range(children):
                child_number += 1
                with tracer.start_as_current_span(f"step {c}") as child:
                    child.set_attribute("db.system.name", "postgresql")
                    child.set_attribute("db.query.text", f"SELECT * FROM orders WHERE id = {t * 100 + c}")
                    child.add_event("cache.miss", {"key": f"order:{t}"})
                    if genai_every and child_number % genai_every == 0:
                        child.set_attribute("gen_ai.operation.name", "chat")
                        child.set_attribute("gen_ai.request.model", "gpt-4o-mini")
                        child.set_attribute(
                            "gen_ai.input.messages",
                            orjson.dumps(
                                [
                                    {
                                        "role": "user",
                                        "parts": [{"type": "text", "content": f"order {t} {seed_text}"}],
                                    }
                                ]
                            ).decode(),
                        )
                    if c == 1:
                        child.set_status(Status(StatusCode.ERROR, "lock timeout"))
    provider.shutdown()
    return list(memory.get_finished_spans())


def expected_span_bytes(spans: Sequence[ReadableSpan]) -> dict[SpanKey, bytes]:
    """What the OTLP exporter puts on the wire for each span."""
    request = encode_spans(spans)
    return {
        (span.trace_id, span.span_id): span.SerializeToString()
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    }


def export_grpc(endpoint: str, spans: Sequence[ReadableSpan], timeout: float = 10.0) -> SpanExportResult:
    exporter = GrpcSpanExporter(endpoint=endpoint, insecure=True, timeout=timeout)
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


def export_http(base_url: str, spans: Sequence[ReadableSpan], timeout: float = 10.0) -> SpanExportResult:
    exporter = HttpSpanExporter(endpoint=f"{base_url}/v1/traces", timeout=timeout)
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


ENRICHMENT_PREFIX = "signals."
FLAG = " \U0001f6a9"


def strip_enrichment(span_bytes: bytes) -> bytes:
    """The span as it was before otelsignals enriched it (its additions are appended, never mixed in)."""
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    span = Span.FromString(span_bytes)
    kept_attributes = [kv for kv in span.attributes if not kv.key.startswith(ENRICHMENT_PREFIX)]
    kept_events = [e for e in span.events if not e.name.startswith("signal.")]
    del span.attributes[:]
    span.attributes.extend(kept_attributes)
    del span.events[:]
    span.events.extend(kept_events)
    span.name = span.name.removesuffix(FLAG)
    return span.SerializeToString()


def is_enriched(span_bytes: bytes) -> bool:
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    return any(kv.key == "signals.quality" for kv in Span.FromString(span_bytes).attributes)


def assert_unchanged_but_for_enrichment(
    received: dict[SpanKey, bytes], expected: dict[SpanKey, bytes]
) -> int:
    """Every expected span arrived; each is byte-identical, or identical once otelsignals' additions
    are removed. Returns how many spans were enriched."""
    assert set(received) == set(expected), "every span, and only those"
    enriched = 0
    for key, original in expected.items():
        if is_enriched(received[key]):
            enriched += 1
            assert strip_enrichment(received[key]) == original
        else:
            assert received[key] == original
    return enriched


def assert_refused_beyond(port: int, limit: int, config_key: str) -> None:
    """Hold ``limit`` connections to ``port``; one more gets a 503 naming ``config_key`` and is closed."""
    import contextlib
    import time

    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(limit)]
    try:
        time.sleep(0.2)
        extra = socket.create_connection(("127.0.0.1", port), timeout=5)
        with contextlib.closing(extra):
            answer = extra.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503") and config_key.encode() in answer
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.2)


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (with nothing left to read)."""
    sock.settimeout(0)
    try:
        return sock.recv(4096) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
