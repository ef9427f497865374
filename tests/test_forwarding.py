"""End to end: real SDK exporters → `otelsignals run` → a real OTLP server. Nothing lost, nothing
changed, over every transport pairing."""

from __future__ import annotations

import gzip
import urllib.request

import orjson
import pytest
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult

from otelsignals.otlp.json_decode import decode_trace_request
from otelsignals.otlp.json_encode import encode_trace_request
from tests.support.clients import (
    assert_unchanged_but_for_enrichment,
    encode_spans,
    expected_span_bytes,
    export_grpc,
    export_http,
    is_enriched,
    make_spans,
)
from tests.support.otlp_sink import OtlpSink
from tests.support.sidecar import SidecarProcess


@pytest.mark.parametrize("downstream_protocol", ["grpc", "http/protobuf"])
def test_every_span_arrives_once_with_identical_bytes(tmp_path, sink: OtlpSink, downstream_protocol):
    endpoint = sink.grpc_endpoint if downstream_protocol == "grpc" else sink.http_endpoint
    over_grpc = make_spans(20, 4, genai_every=5, service="svc-grpc")
    over_http = make_spans(20, 4, genai_every=5, service="svc-http")
    with SidecarProcess(tmp_path, {"endpoint": endpoint, "protocol": downstream_protocol}) as sidecar:
        assert export_grpc(sidecar.grpc_endpoint, over_grpc) is SpanExportResult.SUCCESS
        assert export_http(sidecar.http_url, over_http) is SpanExportResult.SUCCESS
        expected = expected_span_bytes(over_grpc) | expected_span_bytes(over_http)
        arrived = sink.wait_for_spans(len(expected))
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", len(expected))
        assert sidecar.metric("otelsignals_receiver_accepted_spans_total") == len(expected)
        assert sidecar.metric("otelsignals_analyzer_genai_spans_total") == 32
        assert sidecar.metric("otelsignals_assembler_released_traces_total", reason="complete") == 40
        # Only the traces with a GenAI span went through the analysis thread: the plain ones among
        # them in the same requests were forwarded from the event loop.
        genai_traces = {key[0] for key, data in expected.items() if b"gen_ai." in data}
        assert 0 < len(genai_traces) < 40
        assert sidecar.metric("otelsignals_analyzer_plain_traces_total") == 40 - len(genai_traces)
        assert sidecar.stop() == 0
    assert sorted(arrived) == sorted(expected), "each span exactly once"
    assert len(sink.spans()) == len(expected), "no duplicates after shutdown either"
    # Spans of traces without a conversation leave byte-for-byte as they came; in traces with one,
    # the chat span and the root gain signals.* attributes and nothing else changes.
    received = sink.span_bytes()
    assert_unchanged_but_for_enrichment(received, expected)
    assert {key[0] for key in expected if is_enriched(received[key])} == genai_traces
    # Each span is still under the resource it was sent with.
    services = {
        span.span_id: {kv.value.string_value for kv in rs.resource.attributes if kv.key == "service.name"}
        for request in sink.resource_spans()
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    }
    assert all(services[s.context.span_id.to_bytes(8, "big")] == {"svc-grpc"} for s in over_grpc)
    assert all(services[s.context.span_id.to_bytes(8, "big")] == {"svc-http"} for s in over_http)


def test_http_json_and_gzip_bodies_are_accepted(tmp_path, sink: OtlpSink):
    spans = make_spans(4, 2, genai_every=3)  # two traces with a chat span, two without
    other_spans = make_spans(3, 2, service="gzipped")
    request = encode_spans(spans)
    with SidecarProcess(tmp_path, {"endpoint": sink.grpc_endpoint}) as sidecar:
        json_body = encode_trace_request(request)
        answer = _post(f"{sidecar.http_url}/v1/traces", json_body, "application/json")
        assert answer.status == 200 and orjson.loads(answer.read()) == {}
        protobuf_body = gzip.compress(encode_spans(other_spans).SerializeToString())
        answer = _post(f"{sidecar.http_url}/v1/traces", protobuf_body, "application/x-protobuf", gzip_=True)
        assert answer.status == 200
        assert ExportTraceServiceResponse.FromString(answer.read()) == ExportTraceServiceResponse()
        sink.wait_for_spans(21)
        # The plain traces of both requests, the OTLP/JSON one included, skipped the analysis.
        assert sidecar.metric("otelsignals_analyzer_plain_traces_total") == 2 + 3
    expected = expected_span_bytes(spans) | expected_span_bytes(other_spans)
    assert assert_unchanged_but_for_enrichment(sink.span_bytes(), expected) == 2 * 2  # chat span, root


def test_default_file_output_is_otlp_json_lines(tmp_path):
    spans = make_spans(5, 2, genai_every=2)
    with SidecarProcess(tmp_path) as sidecar:  # no endpoint: the embedded default writes a file
        assert export_grpc(sidecar.grpc_endpoint, spans) is SpanExportResult.SUCCESS
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", len(spans))
        assert sidecar.stop() == 0
    lines = (tmp_path / "enriched.jsonl").read_bytes().splitlines()
    written = {}
    for line in lines:
        for rs in decode_trace_request(line).resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    written[(span.trace_id, span.span_id)] = span.SerializeToString()
    assert assert_unchanged_but_for_enrichment(written, expected_span_bytes(spans)) > 0
    # OTLP JSON, not protobuf's JSON mapping: ids are hex.
    first_span = orjson.loads(lines[0])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(first_span["traceId"]) == 32 and int(first_span["traceId"], 16)


def test_metrics_and_logs_pass_through_untouched(tmp_path, sink: OtlpSink):
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    with SidecarProcess(tmp_path, {"endpoint": sink.grpc_endpoint}) as sidecar:
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=f"{sidecar.http_url}/v1/metrics"), export_interval_millis=60_000
        )
        meters = MeterProvider(metric_readers=[reader])
        meters.get_meter("tests").create_counter("orders").add(3, {"region": "eu"})
        meters.shutdown()  # collects and exports once
        loggers = LoggerProvider()
        loggers.add_log_record_processor(
            SimpleLogRecordProcessor(OTLPLogExporter(endpoint=sidecar.grpc_endpoint, insecure=True))
        )
        loggers.get_logger("tests").emit(body="order placed", attributes={"order.id": "o-1"})
        loggers.shutdown()
        assert sidecar.wait_for_metric("otelsignals_exporter_sent_requests_total", 2) == 2
        # Each batch's time from the export queue to the downstream's answer is measured.
        for signal in ("metrics", "logs"):
            assert sidecar.metric("otelsignals_exporter_delivery_seconds_count", signal=signal) == 1
            assert (
                sidecar.metric("otelsignals_exporter_delivery_seconds_bucket", signal=signal, le="10.0") == 1
            )
    metrics = sink.requests("metrics")
    logs = sink.requests("logs")
    assert len(metrics) == 1 and len(logs) == 1
    assert metrics[0].resource_metrics[0].scope_metrics[0].metrics[0].name == "orders"
    assert logs[0].resource_logs[0].scope_logs[0].log_records[0].body.string_value == "order placed"


def test_health_and_readiness(tmp_path):
    with SidecarProcess(tmp_path) as sidecar:
        for path, expected in (("/healthz", {"status": "ok"}), ("/readyz", {"status": "ready"})):
            with urllib.request.urlopen(f"{sidecar.admin_url}{path}", timeout=5) as answer:
                assert answer.status == 200 and orjson.loads(answer.read()) == expected
        with urllib.request.urlopen(f"{sidecar.admin_url}/metrics", timeout=5) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain")
            assert b"otelsignals_exporter_queue_bytes 0.0" in answer.read()


def _post(url: str, body: bytes, content_type: str, gzip_: bool = False):
    headers = {"Content-Type": content_type}
    if gzip_:
        headers["Content-Encoding"] = "gzip"
    return urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=10)


def test_a_partial_batch_leaves_when_its_timeout_ends_not_at_the_next_tick(tmp_path, sink: OtlpSink):
    """``exporter.batch.timeout`` is kept to the millisecond: with the periodic tick 20 s apart, a
    trace that follows another leaves once one timeout (1 s) has passed since the first left,
    and not before; the first, after a pause, leaves at once (the traces are released complete)."""
    import time

    first, second = make_spans(1, 3), make_spans(1, 3, service="billing")
    sections = {"assembler": {"decision_wait": "50ms", "tick_interval": "20s"}}
    exporter = {"endpoint": sink.grpc_endpoint, "batch": {"timeout": "1s"}}
    with SidecarProcess(tmp_path, exporter, **sections) as sidecar:
        sent = time.monotonic()
        assert export_grpc(sidecar.grpc_endpoint, first) is SpanExportResult.SUCCESS
        sink.wait_for_spans(len(first), timeout=10.0)
        first_left = time.monotonic()
        assert export_grpc(sidecar.grpc_endpoint, second) is SpanExportResult.SUCCESS
        sink.wait_for_spans(len(first) + len(second), timeout=10.0)
        second_left = time.monotonic()
    assert first_left - sent < 0.9  # the first did not wait out the 1 s timeout
    # The second waited for the first's timeout (less what the first's delivery took, the sidecar's
    # first connection to the sink included), and no longer: well before the next tick.
    assert 0.5 <= second_left - first_left < 10.0
