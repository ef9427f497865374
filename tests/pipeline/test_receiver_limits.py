"""Receiver limits against a real sidecar process: gzip bombs over gRPC are refused while inflating,
idle, slow and surplus connections are closed, descriptor exhaustion is survived quietly, and logs and
metrics sent as OTLP/JSON reach the downstream exactly as their protobuf twins."""

from __future__ import annotations

import base64
import contextlib
import http.client
import resource
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import orjson
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.sdk.trace.export import SpanExportResult

from otelsignals.allocator import malloc_bytes
from tests.support.clients import (
    assert_refused_beyond,
    closed_by_peer,
    encode_spans,
    expected_span_bytes,
    export_http,
    make_spans,
)
from tests.support.otlp_sink import OtlpSink
from tests.support.sidecar import SidecarProcess

TRACES_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
FIXTURE = Path(__file__).parents[1] / "fixtures" / "openai_v2_events"
MIB = 1024 * 1024
# The good client's bound in these tests (the 1 s target is measured by bench/chaos.py).
GENEROUS_LATENCY_S = 5.0


@pytest.fixture(scope="module")
def running(tmp_path_factory) -> Iterator[tuple[SidecarProcess, OtlpSink]]:
    with OtlpSink().start() as sink:
        workdir = tmp_path_factory.mktemp("receiver-limits")
        # The header timeout shorter than the idle one: aiohttp's idle timer also runs until a
        # request's headers are complete, and with equal timeouts it could close a slow-header
        # connection first (uncounted as header_timeout; seen once in CI).
        receiver = {"idle_timeout": "1s", "header_timeout": "500ms", "max_connections": 60}
        sidecar = SidecarProcess(workdir, {"endpoint": sink.grpc_endpoint})
        sidecar.config["receiver"].update(receiver)
        with sidecar:
            yield sidecar, sink


def proc_status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


def good_request() -> bytes:
    return encode_spans(make_spans(1, 1)).SerializeToString()


class GoodClient:
    """Sends a small export every 20 ms on its own channel and records each latency."""

    def __init__(self, endpoint: str) -> None:
        self.channel = grpc.insecure_channel(endpoint)
        self.call = self.channel.unary_unary(TRACES_METHOD)
        self.body = good_request()
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self.call(self.body, timeout=10)  # connected before the trouble starts
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.call(self.body, timeout=10)
            except grpc.RpcError as err:
                self.errors.append(str(err.code()))
            self.latencies.append(time.monotonic() - started)
            time.sleep(0.02)

    def __enter__(self) -> GoodClient:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)
        self.channel.close()


# -- 1. gzip over gRPC ---------------------------------------------------------------------------------


def test_grpc_gzip_bomb_is_refused_while_inflating(running):
    sidecar, _ = running
    assert sidecar.process is not None
    pid = sidecar.process.pid
    before = sidecar.metric(
        "otelsignals_receiver_rejected_requests_total", transport="grpc", reason="too_large"
    )
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    rss_before = proc_status_kib(pid, "VmRSS") * 1024
    bomb = b"\x00" * (250 * MIB)  # grpc gzips it on the way: about 250 KiB on the wire
    compressed_size = 260 * 1024
    with (
        GoodClient(sidecar.grpc_endpoint) as good,
        grpc.insecure_channel(
            sidecar.grpc_endpoint, options=[("grpc.max_send_message_length", -1)]
        ) as channel,
    ):
        call = channel.unary_unary(TRACES_METHOD)
        with pytest.raises(grpc.RpcError) as refused:
            call(bomb, timeout=30, compression=grpc.Compression.Gzip)
        time.sleep(0.3)
    peak_growth = proc_status_kib(pid, "VmHWM") * 1024 - rss_before
    worst = max(good.latencies)
    print(
        f"\ngzip bomb: peak RSS growth {peak_growth / MIB:.1f} MiB; good client worst {worst * 1000:.0f} ms"
    )
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "exceeds receiver.max_message_size" in refused.value.details()
    assert peak_growth < 2 * compressed_size + 200 * MIB
    # Generous: this process also gzips the 250 MiB bomb while the good client runs in it, on a
    # shared 2-core machine; bench/chaos.py sends bombs from a separate process and judges the 1 s target.
    assert not good.errors and worst <= GENEROUS_LATENCY_S
    after = sidecar.metric(
        "otelsignals_receiver_rejected_requests_total", transport="grpc", reason="too_large"
    )
    assert after == before + 1


def test_gzip_and_deflate_grpc_requests_arrive_intact(running):
    sidecar, sink = running
    spans = make_spans(20, 3)
    body = encode_spans(spans).SerializeToString()
    with grpc.insecure_channel(sidecar.grpc_endpoint) as channel:
        call = channel.unary_unary(TRACES_METHOD)
        call(body, timeout=10, compression=grpc.Compression.Gzip)
        call(body, timeout=10, compression=grpc.Compression.Deflate)
    expected = expected_span_bytes(spans)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not expected.keys() <= sink.span_bytes().keys():
        time.sleep(0.05)
    assert expected.items() <= sink.span_bytes().items()


@pytest.mark.skipif(malloc_bytes() is None, reason="glibc's mallinfo2 is not available")
def test_refused_requests_are_not_kept(tmp_path):
    """A refused gRPC request's body is freed as soon as its answer is sent. It was kept by a
    reference cycle through the abort exception grpc holds with the call; with Python's default
    collector (the GC policy off, as here) nothing frees such a cycle until a rare full collection,
    and the policy's freezes once kept it for good."""
    with OtlpSink().start() as sink:
        sidecar = SidecarProcess(
            tmp_path, {"endpoint": sink.grpc_endpoint}, service={"gc_freeze_interval": "0s"}
        )
        with sidecar:

            def held_mib() -> float:
                states = ("in_use", "mmapped")
                return sum(sidecar.metric("otelsignals_malloc_bytes", state=state) for state in states) / MIB

            before = held_mib()
            with grpc.insecure_channel(sidecar.grpc_endpoint) as channel:
                call = channel.unary_unary(TRACES_METHOD)
                for i in range(25):
                    with pytest.raises(grpc.RpcError) as refused:
                        call(b"\xff" * (4 * MIB) + bytes([i]), timeout=10)  # not protobuf
                    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                    assert "not a protobuf" in (refused.value.details() or "")
            time.sleep(0.5)
            assert held_mib() - before < 4  # less than one of the 25 refused 4 MiB requests


# -- 2. connections ------------------------------------------------------------------------------------


def test_idle_connections_are_closed_and_good_clients_served(running):
    sidecar, _ = running
    idle = [socket.create_connection(("127.0.0.1", sidecar.http_port)) for _ in range(40)]
    try:
        assert export_http(sidecar.http_url, make_spans(1, 1)) is SpanExportResult.SUCCESS
        time.sleep(2.0)
        assert all(closed_by_peer(sock) for sock in idle)
    finally:
        for sock in idle:
            sock.close()


def test_slow_headers_are_cut_off(running):
    sidecar, _ = running
    sock = socket.create_connection(("127.0.0.1", sidecar.http_port))
    started = time.monotonic()
    with contextlib.closing(sock):
        sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
        with contextlib.suppress(OSError):
            for _ in range(20):  # a byte every 200 ms keeps the connection "active", never complete
                time.sleep(0.2)
                sock.sendall(b"X")
        elapsed = time.monotonic() - started
        assert elapsed < 3.0
    sidecar.wait_for_metric(
        "otelsignals_receiver_rejected_requests_total", 1, transport="http", reason="header_timeout"
    )


def test_connections_beyond_the_limit_get_503(running):
    sidecar, _ = running
    assert_refused_beyond(sidecar.http_port, 60, "receiver.max_connections")
    assert sidecar.metric("otelsignals_receiver_rejected_requests_total", reason="too_many_connections") >= 1
    assert export_http(sidecar.http_url, make_spans(1, 1)) is SpanExportResult.SUCCESS


def test_descriptor_exhaustion_is_survived_quietly(tmp_path):
    receiver = {"idle_timeout": "1s", "header_timeout": "1s", "max_connections": 5000}
    sidecar = SidecarProcess(tmp_path)
    sidecar.config["receiver"].update(receiver)
    with sidecar:
        assert sidecar.process is not None
        with GoodClient(sidecar.grpc_endpoint) as good:
            # The sidecar now has far fewer descriptors than the connections coming its way.
            resource.prlimit(sidecar.process.pid, resource.RLIMIT_NOFILE, (256, 256))
            idle = []
            for _ in range(500):
                with contextlib.suppress(OSError):
                    idle.append(socket.create_connection(("127.0.0.1", sidecar.http_port), timeout=0.05))
            time.sleep(3.0)
        try:
            # Idle connections were closed, so the admin API and the HTTP receiver answer again.
            with urllib.request.urlopen(f"{sidecar.admin_url}/healthz", timeout=5) as response:
                assert response.status == 200
            assert export_http(sidecar.http_url, make_spans(1, 1)) is SpanExportResult.SUCCESS
        finally:
            for sock in idle:
                sock.close()
        stderr = sidecar.stderr()
        print(f"\n{len(idle)} idle connections; stderr {len(stderr)} bytes; worst {max(good.latencies):.3f}s")
        assert not good.errors and max(good.latencies) <= GENEROUS_LATENCY_S
        assert len(stderr) < 20_000, stderr[-2000:]
        assert "Traceback" not in stderr
        assert sidecar.metric("otelsignals_receiver_accept_errors_total") >= 1


# -- 3. logs and metrics as OTLP/JSON -----------------------------------------------------------------


def otlp_json(message) -> bytes:
    """OTLP/JSON as an SDK writes it: json_format's names with hex trace/span ids."""

    def hexify(node):
        if isinstance(node, dict):
            return {
                key: base64.b64decode(value).hex() if key in ("traceId", "spanId") else hexify(value)
                for key, value in node.items()
            }
        if isinstance(node, list):
            return [hexify(item) for item in node]
        return node

    return orjson.dumps(hexify(json_format.MessageToDict(message)))


def post_json(sidecar: SidecarProcess, path: str, body: bytes) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", sidecar.http_port, timeout=10)
    connection.request("POST", path, body, {"Content-Type": "application/json"})
    status = connection.getresponse().status
    connection.close()
    return status


def metrics_request() -> ExportMetricsServiceRequest:
    trace_id, span_id = bytes(range(1, 17)), bytes(range(1, 9))
    request = ExportMetricsServiceRequest()
    scope_metrics = request.resource_metrics.add().scope_metrics.add()
    scope_metrics.scope.name = "tests"
    counter = scope_metrics.metrics.add(name="gen_ai.client.token.usage", unit="{token}")
    counter.sum.aggregation_temporality = 2
    counter.sum.is_monotonic = True
    point = counter.sum.data_points.add(start_time_unix_nano=1, time_unix_nano=2**62 + 1, as_int=-(2**40))
    point.attributes.add(key="gen_ai.token.type").value.string_value = "input"
    exemplar = point.exemplars.add(time_unix_nano=5, as_double=1.5, trace_id=trace_id, span_id=span_id)
    exemplar.filtered_attributes.add(key="k").value.int_value = 7
    histogram = scope_metrics.metrics.add(name="gen_ai.client.operation.duration", unit="s")
    histogram.histogram.aggregation_temporality = 1
    hp = histogram.histogram.data_points.add(count=3, sum=0.5, min=0.1, max=0.3)
    hp.bucket_counts.extend([1, 2, 0])
    hp.explicit_bounds.extend([0.1, 0.25])
    hp.exemplars.add(as_int=3, trace_id=trace_id, span_id=span_id)
    expo = scope_metrics.metrics.add(name="expo").exponential_histogram
    ep = expo.data_points.add(count=4, scale=-2, zero_count=1, zero_threshold=1e-9)
    ep.positive.offset = -3
    ep.positive.bucket_counts.extend([1, 2])
    summary = scope_metrics.metrics.add(name="summary").summary
    sp = summary.data_points.add(count=2, sum=3.0)
    sp.quantile_values.add(quantile=0.5, value=1.0)
    gauge = scope_metrics.metrics.add(name="gauge").gauge
    gauge.data_points.add(as_double=float("inf"))
    return request


def test_json_logs_and_metrics_arrive_byte_identical_to_protobuf(running):
    sidecar, sink = running
    logs = ExportLogsServiceRequest.FromString((FIXTURE / "chat.logs.binpb").read_bytes())
    metrics = metrics_request()
    sink.clear()
    assert post_json(sidecar, "/v1/logs", otlp_json(logs)) == 200
    assert post_json(sidecar, "/v1/metrics", otlp_json(metrics)) == 200
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (sink.requests("logs") and sink.requests("metrics")):
        time.sleep(0.05)
    (got_logs,) = sink.requests("logs")
    (got_metrics,) = sink.requests("metrics")
    assert got_logs.SerializeToString() == logs.SerializeToString()
    assert got_metrics.SerializeToString() == metrics.SerializeToString()


def test_json_log_events_join_their_spans(running):
    sidecar, _ = running
    logs = ExportLogsServiceRequest.FromString((FIXTURE / "tools.logs.binpb").read_bytes())
    genai = [
        record
        for rl in logs.resource_logs
        for sl in rl.scope_logs
        for record in sl.log_records
        if (record.event_name or "").startswith("gen_ai.") and len(record.span_id) == 8
    ]
    assert genai
    kept_before = sidecar.metric("otelsignals_analyzer_log_events_total", outcome="kept")
    assert post_json(sidecar, "/v1/logs", otlp_json(logs)) == 200
    sidecar.wait_for_metric("otelsignals_analyzer_log_events_total", kept_before + len(genai), outcome="kept")
    # Their spans then take them: none is left waiting to be forgotten.
    from otelsignals.offline import read_requests

    with grpc.insecure_channel(sidecar.grpc_endpoint) as channel:
        call = channel.unary_unary(TRACES_METHOD)
        for request in read_requests(FIXTURE / "tools.binpb"):
            call(request.SerializeToString(), timeout=10)
    sidecar.wait_for_metric("otelsignals_analyzer_conversation_traces_total", 1)
    assert sidecar.metric("otelsignals_analyzer_log_events_total", outcome="forgotten") == 0
