"""Downstream outages, refusals, overload and SIGKILL: what was acknowledged to a client arrives."""

from __future__ import annotations

import threading
import time

import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.support.clients import expected_span_bytes, export_grpc, export_http, make_spans
from tests.support.otlp_sink import OtlpSink, Response
from tests.support.sidecar import SidecarProcess


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_downstream_down_for_a_while_then_back_loses_nothing(tmp_path, sink: OtlpSink, protocol):
    endpoint = sink.grpc_endpoint if protocol == "grpc" else sink.http_endpoint
    spans = make_spans(30, 3)
    with SidecarProcess(tmp_path, {"endpoint": endpoint, "protocol": protocol}) as sidecar:
        sink.set_down(True)
        assert export_grpc(sidecar.grpc_endpoint, spans[:60]) is SpanExportResult.SUCCESS
        assert export_http(sidecar.http_url, spans[60:]) is SpanExportResult.SUCCESS
        sidecar.wait_for_metric("otelsignals_exporter_retries_total", 2)
        assert sink.spans() == []
        sink.set_down(False)
        sink.wait_for_spans(len(spans), timeout=20)
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", len(spans))
        assert sidecar.metric("otelsignals_dropped_spans_total") == 0
    assert sink.span_bytes() == expected_span_bytes(spans)
    assert len(sink.spans()) == len(spans)


@pytest.mark.parametrize(("protocol", "reason"), [("grpc", "unavailable"), ("http/protobuf", "http_503")])
def test_unavailable_then_ok_is_retried(tmp_path, sink: OtlpSink, protocol, reason):
    endpoint = sink.grpc_endpoint if protocol == "grpc" else sink.http_endpoint
    sink.script(Response.unavailable(retry_after=0.2), Response.unavailable())
    spans = make_spans(4, 2)
    with SidecarProcess(tmp_path, {"endpoint": endpoint, "protocol": protocol}) as sidecar:
        assert export_grpc(sidecar.grpc_endpoint, spans) is SpanExportResult.SUCCESS
        sink.wait_for_spans(len(spans))
        assert sidecar.metric("otelsignals_exporter_retries_total", reason=reason) == 2
        assert sidecar.metric("otelsignals_exporter_failed_requests_total") == 0
    assert sink.attempts == 3
    assert sink.span_bytes() == expected_span_bytes(spans)


def test_throttled_with_retry_info_is_retried_after_the_asked_delay(tmp_path, sink: OtlpSink):
    sink.script(Response.throttled(retry_after=0.8))
    spans = make_spans(2, 1)
    # A server delay is honoured up to retry.max_interval (test_retry_semantics covers the cap).
    exporter = {"endpoint": sink.grpc_endpoint, "retry": {"initial_interval": "100ms", "max_interval": "2s"}}
    with SidecarProcess(tmp_path, exporter) as sidecar:
        started = time.monotonic()
        assert export_grpc(sidecar.grpc_endpoint, spans) is SpanExportResult.SUCCESS
        sink.wait_for_spans(len(spans))
        waited = time.monotonic() - started
        assert sidecar.metric("otelsignals_exporter_retries_total", reason="resource_exhausted") == 1
    # The configured backoff starts at 100 ms; only honouring RetryInfo makes it wait this long.
    assert waited >= 0.8


@pytest.mark.parametrize(
    ("protocol", "reason"), [("grpc", "invalid_argument"), ("http/protobuf", "http_400")]
)
def test_permanent_refusal_is_not_retried_and_is_counted(tmp_path, sink: OtlpSink, protocol, reason):
    endpoint = sink.grpc_endpoint if protocol == "grpc" else sink.http_endpoint
    sink.script(Response.invalid("schema says no"))
    refused, accepted = make_spans(3, 1), make_spans(2, 1)
    with SidecarProcess(tmp_path, {"endpoint": endpoint, "protocol": protocol}) as sidecar:
        assert export_grpc(sidecar.grpc_endpoint, refused) is SpanExportResult.SUCCESS
        sidecar.wait_for_metric("otelsignals_exporter_failed_requests_total", 1, reason=reason)
        assert export_grpc(sidecar.grpc_endpoint, accepted) is SpanExportResult.SUCCESS
        sink.wait_for_spans(len(accepted))
        assert sidecar.metric("otelsignals_dropped_spans_total", stage="exporter", reason=reason) == len(
            refused
        )
        assert sidecar.metric("otelsignals_exporter_retries_total") == 0
        logged = [r for r in sidecar.log_records() if r.get("kind") == f"export_failed_{reason}"]
        assert len(logged) == 1 and "schema says no" in logged[0]["message"]
    assert sink.attempts == 2, "the refused batch was sent once, never again"
    assert set(sink.span_bytes()) == set(expected_span_bytes(accepted))


def test_sigkill_with_disk_queue_loses_nothing_acknowledged(tmp_path, sink: OtlpSink):
    queue_dir = tmp_path / "queue"
    exporter = {"endpoint": sink.grpc_endpoint, "queue": {"directory": str(queue_dir)}}
    complete = make_spans(20, 3, service="complete-traces")
    # Children without their root wait in the assembler for decision_wait: the log must cover
    # spans that never reached the exporter, not just the export queue.
    rootless = [s for s in make_spans(10, 3, service="waiting-traces") if s.parent is not None]
    sink.set_down(True)
    sidecar = SidecarProcess(tmp_path, exporter, assembler={"decision_wait": "60s"}).start()
    try:
        assert export_grpc(sidecar.grpc_endpoint, complete) is SpanExportResult.SUCCESS
        assert export_http(sidecar.http_url, rootless) is SpanExportResult.SUCCESS
        sidecar.wait_for_metric("otelsignals_exporter_retries_total", 1)
        # The gauge is refreshed by the assembler's tick (every 100 ms), so wait for it rather than
        # read it once: the retry above can come before the tick after the HTTP request.
        assert sidecar.wait_for_metric("otelsignals_assembler_buffered_spans", len(rootless)) == len(rootless)
        sidecar.kill()
    finally:
        sidecar.__exit__()
    assert any(queue_dir.glob("*.log"))

    sink.set_down(False)
    sidecar.config["assembler"]["decision_wait"] = "200ms"
    with sidecar:
        expected = expected_span_bytes(complete) | expected_span_bytes(rootless)
        sink.wait_for_spans(len(expected), timeout=20)
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", len(expected))
        assert sidecar.stop() == 0
    assert sink.span_bytes() == expected
    assert len(sink.spans()) == len(expected), "nothing had been sent before the kill, so nothing twice"
    assert sorted(p.name for p in queue_dir.iterdir()) in (["00000002.ack", "00000002.log"], [])


def test_disk_queue_is_emptied_once_everything_is_delivered(tmp_path, sink: OtlpSink):
    queue_dir = tmp_path / "queue"
    spans = make_spans(5, 2)
    exporter = {"endpoint": sink.grpc_endpoint, "queue": {"directory": str(queue_dir)}}
    with SidecarProcess(tmp_path, exporter) as sidecar:
        assert export_grpc(sidecar.grpc_endpoint, spans) is SpanExportResult.SUCCESS
        sink.wait_for_spans(len(spans))
        # The sink records a batch before answering; the sidecar finishes the record in its disk
        # queue when the answer comes back, in the same step that counts the spans as sent.
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", len(spans))
        sidecar.kill()
    # Restarting replays nothing: every record had been finished before the kill.
    with SidecarProcess(tmp_path, exporter) as again:
        time.sleep(0.5)
        assert again.metric("otelsignals_exporter_sent_spans_total") == 0
    assert len(sink.spans()) == len(spans)


def test_overload_answers_unavailable_and_client_retries_succeed(tmp_path, sink: OtlpSink):
    exporter = {"endpoint": sink.grpc_endpoint, "queue": {"max_bytes": "48KiB", "num_consumers": 1}}
    batches = [make_spans(10, 3, service=f"client-{i}") for i in range(8)]
    results: list[SpanExportResult] = []
    with SidecarProcess(tmp_path, exporter, receiver={"retry_after": "500ms"}) as sidecar:
        sink.set_down(True)

        def send(spans):
            results.append(export_grpc(sidecar.grpc_endpoint, spans, timeout=30))

        threads = [threading.Thread(target=send, args=(b,)) for b in batches]
        for thread in threads:
            thread.start()
        sidecar.wait_for_metric("otelsignals_receiver_requests_total", 1, outcome="overloaded")
        sink.set_down(False)
        for thread in threads:
            thread.join(60)
        expected: dict = {}
        for spans in batches:
            expected |= expected_span_bytes(spans)
        sink.wait_for_spans(len(expected), timeout=30)
        assert sidecar.metric("otelsignals_dropped_spans_total") == 0
    assert results == [SpanExportResult.SUCCESS] * len(batches)
    assert sink.span_bytes() == expected
    assert len(sink.spans()) == len(expected)


def test_shutdown_with_downstream_down_says_what_was_not_delivered(tmp_path, sink: OtlpSink):
    spans = make_spans(4, 2)
    sink.set_down(True)
    with SidecarProcess(
        tmp_path, {"endpoint": sink.grpc_endpoint}, service={"shutdown_timeout": "500ms"}
    ) as sidecar:
        assert export_grpc(sidecar.grpc_endpoint, spans) is SpanExportResult.SUCCESS
        sidecar.wait_for_metric("otelsignals_exporter_retries_total", 1)
        assert sidecar.stop() == 0
    warnings = [r["message"] for r in sidecar.log_records() if "not delivered" in r.get("message", "")]
    assert warnings == [f"shutting down with 1 batches (traces 1; {len(spans)} spans) not delivered"]


def _pass_through_requests() -> list[tuple[str, bytes]]:
    """(gRPC method, body) of a logs request and a metrics request: passed through untouched."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    logs = ExportLogsServiceRequest()
    logs.resource_logs.add().scope_logs.add().log_records.add().body.string_value = "hello"
    metrics = ExportMetricsServiceRequest()
    metric = metrics.resource_metrics.add().scope_metrics.add().metrics.add()
    metric.name = "queue_depth"
    metric.gauge.data_points.add().as_int = 1
    return [
        ("/opentelemetry.proto.collector.logs.v1.LogsService/Export", logs.SerializeToString()),
        ("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export", metrics.SerializeToString()),
    ]


def _send_grpc(endpoint: str, requests: list[tuple[str, bytes]]) -> None:
    import grpc

    with grpc.insecure_channel(endpoint) as channel:
        for method, body in requests:
            channel.unary_unary(method)(body, timeout=10)  # raises unless OK


def test_metrics_and_logs_requests_lost_are_counted_by_signal(tmp_path, sink: OtlpSink):
    """Metrics and logs pass through as whole requests (no spans): a request the downstream
    refuses for good is counted by signal, not only as a failed request (was: 0 dropped spans and
    nothing else)."""
    sink.script(Response.invalid("no"), Response.invalid("no"))
    with SidecarProcess(tmp_path, {"endpoint": sink.grpc_endpoint}) as sidecar:
        _send_grpc(sidecar.grpc_endpoint, _pass_through_requests())
        for signal in ("logs", "metrics"):
            sidecar.wait_for_metric(
                "otelsignals_exporter_dropped_requests_total", 1, signal=signal, reason="invalid_argument"
            )
        assert sidecar.metric("otelsignals_exporter_failed_requests_total", reason="invalid_argument") == 2


def test_shutdown_with_downstream_down_says_which_requests_were_not_delivered(tmp_path, sink: OtlpSink):
    sink.set_down(True)
    with SidecarProcess(
        tmp_path, {"endpoint": sink.grpc_endpoint}, service={"shutdown_timeout": "500ms"}
    ) as sidecar:
        _send_grpc(sidecar.grpc_endpoint, _pass_through_requests() * 2)
        sidecar.wait_for_metric("otelsignals_exporter_retries_total", 1)
        assert sidecar.stop() == 0
    warnings = [r["message"] for r in sidecar.log_records() if "not delivered" in r.get("message", "")]
    assert warnings == ["shutting down with 4 batches (logs 2, metrics 2; 0 spans) not delivered"]


def test_a_restart_that_replays_the_disk_queue_does_not_evaluate_its_turns_again(tmp_path, sink: OtlpSink):
    """With the downstream down and the disk queue on, a restart sends every queued trace through
    the analysis again: each agent's reputation count doubled (16 → 32), once per such restart."""
    import urllib.request

    import orjson

    from otelsignals.demo.traffic import send_demo_traffic

    def counts(sidecar: SidecarProcess) -> dict[str, int]:
        with urllib.request.urlopen(f"{sidecar.admin_url}/v1/reputation", timeout=5) as answer:
            return {agent["agent_id"]: agent["eval_count"] for agent in orjson.loads(answer.read())["agents"]}

    sink.set_down(True)
    exporter = {"endpoint": sink.grpc_endpoint, "queue": {"directory": str(tmp_path / "queue")}}
    sidecar = SidecarProcess(tmp_path, exporter, sessions={"ttl": "1h"}, service={"shutdown_timeout": "1s"})
    with sidecar:
        stats = send_demo_traffic(sidecar.grpc_endpoint, None)
        sidecar.wait_for_metric("otelsignals_receiver_accepted_spans_total", stats.spans)
        # Every turn evaluated and recorded: the count steady and the store agreeing with it (the
        # analysis and the reputation writer run behind the receivers).
        deadline, previous = time.monotonic() + 30, -1.0
        while True:
            evaluated = sidecar.metric("otelsignals_reputation_evaluations_total")
            before = counts(sidecar)
            if evaluated >= 30 and evaluated == previous and sum(before.values()) == evaluated:
                break
            assert time.monotonic() < deadline, (evaluated, before)
            previous = evaluated
            time.sleep(0.5)
    with sidecar:  # same store and disk queue; no new traffic
        sidecar.wait_for_metric("otelsignals_assembler_released_traces_total", 30)
        time.sleep(1.0)
        assert sidecar.metric("otelsignals_reputation_evaluations_total") == 0
        assert counts(sidecar) == before


def test_a_request_the_http_receiver_cannot_parse_is_counted_and_not_quoted_in_the_log(tmp_path):
    """aiohttp logged such a request with the parser's traceback, which quotes the raw header line
    (a bearer token in it), on every request, uncounted: 50 bad requests, 550 lines of stderr."""
    import socket

    secret = "Bearer S3CRET-tok-XYZ"
    bad = [
        f"Authorization: {secret}\x01\r\nContent-Length: 2\r\n",  # a control character in a header
        f"Authorization: {secret}\r\nContent-Length: 1 1\r\n",  # a Content-Length that is no number
    ]
    with SidecarProcess(tmp_path, {"endpoint": ""}) as sidecar:
        for _ in range(10):
            for headers in bad:
                with socket.create_connection(("127.0.0.1", sidecar.http_port), timeout=5) as connection:
                    start = "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                    connection.sendall(f"{start}{headers}\r\nab".encode())
                    assert connection.recv(65536).split(b"\r\n", 1)[0].endswith(b" 400 Bad Request")
        sidecar.wait_for_metric(
            "otelsignals_receiver_rejected_requests_total", 20, transport="http", reason="bad_http"
        )
        log = sidecar.stderr()
    assert "S3CRET" not in log and "Traceback" not in log
    assert (
        len([line for line in log.splitlines() if "bad_http" in line or "could not be handled" in line]) <= 2
    )


def test_expect_100_continue_is_answered_after_the_token_and_size_are_checked(tmp_path):
    """aiohttp said 100 Continue at once, so a client without the token, or with a body over the
    size limit, uploaded all of it to be refused (curl asks this way for bodies over 1 MiB)."""
    import socket

    from tests.support.clients import encode_spans

    body = encode_spans(make_spans(1, 1)).SerializeToString()
    receiver = {"auth": {"token": "t0ken"}, "max_message_size": "1MiB", "header_timeout": "1s"}
    with SidecarProcess(tmp_path, {"endpoint": ""}, receiver=receiver) as sidecar:

        def first_answer(
            token: str, length: int, media: str = "application/x-protobuf"
        ) -> tuple[socket.socket, bytes]:
            connection = socket.create_connection(("127.0.0.1", sidecar.http_port), timeout=5)
            headers = f"Authorization: Bearer {token}\r\n" if token else ""
            connection.sendall(
                (
                    f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: {media}\r\n"
                    f"{headers}Content-Length: {length}\r\nExpect: 100-continue\r\n\r\n"
                ).encode()
            )
            return connection, connection.recv(65536)

        refusals = (
            ("", len(body), "application/x-protobuf", b"401"),
            ("t0ken", 50_000_000, "application/x-protobuf", b"413"),
            ("t0ken", 10, "text/plain", b"415"),
        )
        opened = []
        for token, length, media, status in refusals:
            connection, answer = first_answer(token, length, media)
            opened.append(connection)  # kept open past the header timeout
            assert answer.split(b"\r\n", 1)[0].split()[1] == status  # refused, not asked for the body
        # Each refusal counted once, not as a header timeout too (the expect handler runs before the
        # middleware that ends the header timer).
        time.sleep(1.5)
        assert sidecar.metric("otelsignals_receiver_rejected_requests_total", reason="bad_content_type") == 1
        assert sidecar.metric("otelsignals_receiver_rejected_requests_total", reason="header_timeout") == 0
        for connection in opened:
            connection.close()
        connection, answer = first_answer("t0ken", len(body))
        with connection:
            assert answer.startswith(b"HTTP/1.1 100 Continue")
            connection.sendall(body)
            rest = connection.recv(65536)
        assert (rest or answer).split(b"HTTP/1.1 100 Continue\r\n\r\n")[-1].startswith(b"HTTP/1.1 200")
