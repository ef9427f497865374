"""Bad input gets a clear OTLP error for that request only; it is counted, logged once per kind,
and the process keeps serving everyone else. Includes property-based fuzzing of both receivers."""

from __future__ import annotations

import contextlib
import http.client
import json
from collections.abc import Iterator

import grpc
import orjson
import pytest
from google.rpc import status_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import SpanExportResult

from otelsignals.otlp.json_encode import encode_trace_request
from tests.support.clients import encode_spans, expected_span_bytes, export_grpc, make_spans
from tests.support.otlp_sink import OtlpSink
from tests.support.sidecar import SidecarProcess

TRACES_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SEVENTY_MIB = 70 * 1024 * 1024


@pytest.fixture(scope="module")
def running(tmp_path_factory) -> Iterator[tuple[SidecarProcess, OtlpSink]]:
    with OtlpSink().start() as sink:
        workdir = tmp_path_factory.mktemp("bad-input")
        with SidecarProcess(workdir, {"endpoint": sink.grpc_endpoint}) as sidecar:
            yield sidecar, sink


def valid_request_bytes(traces: int = 2) -> bytes:
    return encode_spans(make_spans(traces, 2)).SerializeToString()


def post(sidecar: SidecarProcess, body: bytes, content_type: str = "application/x-protobuf", **headers: str):
    connection = http.client.HTTPConnection("127.0.0.1", sidecar.http_port, timeout=30)
    # The server may answer before taking the whole body; the answer is still readable.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        connection.request("POST", "/v1/traces", body, {"Content-Type": content_type, **headers})
    response = connection.getresponse()
    payload = response.read()
    connection.close()
    return response.status, payload


def grpc_export(sidecar: SidecarProcess, body: bytes) -> tuple[grpc.StatusCode, str, bytes]:
    with grpc.insecure_channel(
        sidecar.grpc_endpoint, options=[("grpc.max_send_message_length", -1)]
    ) as channel:
        call = channel.unary_unary(TRACES_METHOD, request_serializer=None, response_deserializer=None)
        try:
            return grpc.StatusCode.OK, "", call(body, timeout=30)
        except grpc.RpcError as err:
            return err.code(), err.details(), b""


def invalid_utf8_request() -> bytes:
    request = encode_spans(make_spans(1, 1))
    request.resource_spans[0].scope_spans[0].spans[0].name = "PLACEHOLDER"
    return request.SerializeToString().replace(b"PLACEHOLDER", b"bad\xff\xfeutf8")


def span_with_attributes(count: int) -> ExportTraceServiceRequest:
    request = encode_spans(make_spans(1, 0))
    span = request.resource_spans[0].scope_spans[0].spans[0]
    for i in range(count):
        attribute = span.attributes.add()
        attribute.key = f"custom.attribute.{i}"
        attribute.value.int_value = i
    return request


BAD_PROTOBUF = {
    "garbage": b"\xde\xad\xbe\xef" * 64,
    "truncated": valid_request_bytes()[:-7],
    "invalid_utf8": invalid_utf8_request(),
}


@pytest.mark.parametrize("case", sorted(BAD_PROTOBUF))
def test_http_bad_protobuf_is_400_with_a_clear_status(running, case):
    sidecar, _ = running
    status, payload = post(sidecar, BAD_PROTOBUF[case])
    assert status == 400
    message = status_pb2.Status.FromString(payload).message
    assert message.startswith("body is not a protobuf ExportTraceServiceRequest")


@pytest.mark.parametrize("case", sorted(BAD_PROTOBUF))
def test_grpc_bad_protobuf_is_invalid_argument(running, case):
    sidecar, _ = running
    code, details, _ = grpc_export(sidecar, BAD_PROTOBUF[case])
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "not a protobuf ExportTraceServiceRequest" in details


@pytest.mark.parametrize(
    ("body", "expected_in_message"),
    [
        (b"{not json", "not OTLP/JSON"),
        (b'{"resourceSpans": {"oops": 1}}', "resourceSpans"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 12}]}]}]}', "traceId"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": ["x"]}]}]}]}', "name"),
        (b"[1, 2, 3]", "not OTLP/JSON"),
    ],
)
def test_http_wrong_json_is_400_naming_the_field(running, body, expected_in_message):
    sidecar, _ = running
    status, payload = post(sidecar, body, "application/json")
    assert status == 400
    answer = orjson.loads(payload)
    assert answer["code"] == 3 and expected_in_message in answer["message"]


def test_too_large_bodies_are_refused_on_both_transports(running):
    sidecar, _ = running
    body = b"\x0a" + b"\x00" * (SEVENTY_MIB - 1)
    status, payload = post(sidecar, body)
    assert status == 413
    assert "exceeds receiver.max_message_size" in status_pb2.Status.FromString(payload).message
    code, details, _ = grpc_export(sidecar, body)
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "exceeds receiver.max_message_size" in details


def test_gzip_bomb_is_refused_without_inflating_it(running):
    import gzip

    sidecar, _ = running
    bomb = gzip.compress(b"\x00" * SEVENTY_MIB, 9)
    assert len(bomb) < 1024 * 1024
    status, _ = post(sidecar, bomb, **{"Content-Encoding": "gzip"})
    assert status == 413
    status, payload = post(sidecar, b"definitely not gzip", **{"Content-Encoding": "gzip"})
    assert status == 400 and b"not valid gzip" in payload


def test_unsupported_content_type_is_415(running):
    sidecar, _ = running
    status, _ = post(sidecar, valid_request_bytes(), "text/plain")
    assert status == 415


def test_span_with_ten_thousand_attributes_flows_through_untouched(running):
    sidecar, sink = running
    request = span_with_attributes(10_000)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    code, _, answer = grpc_export(sidecar, request.SerializeToString())
    assert (
        code is grpc.StatusCode.OK
        and ExportTraceServiceResponse.FromString(answer) == ExportTraceServiceResponse()
    )
    sink.wait_for_spans(1)
    key = (span.trace_id, span.span_id)
    deadline_spans = sink.span_bytes()
    assert deadline_spans.get(key) == span.SerializeToString()


def test_invalid_ids_are_refused_in_partial_success_and_the_rest_forwarded(running):
    sidecar, sink = running
    request = encode_spans(make_spans(2, 1))
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].trace_id = bytes(16)  # all-zero trace id
    spans[1].span_id = b"\x01\x02"  # wrong length
    good = {(s.trace_id, s.span_id): s.SerializeToString() for s in spans[2:]}
    status, payload = post(sidecar, request.SerializeToString())
    assert status == 200
    partial = ExportTraceServiceResponse.FromString(payload).partial_success
    assert partial.rejected_spans == 2
    assert "trace id must be 16" in partial.error_message
    sink.wait_for_spans(len(good))
    deadline_bytes = sink.span_bytes()
    assert all(deadline_bytes.get(key) == data for key, data in good.items())


def test_each_kind_is_counted_and_logged_once_and_service_continues(running):
    sidecar, sink = running
    for _ in range(3):
        post(sidecar, BAD_PROTOBUF["garbage"])
        grpc_export(sidecar, BAD_PROTOBUF["garbage"])
        post(sidecar, b"{", "application/json")
    metrics = sidecar.metrics()
    assert (
        metrics['otelsignals_receiver_rejected_requests_total{reason="not_protobuf",transport="http"}'] >= 3
    )
    assert (
        metrics['otelsignals_receiver_rejected_requests_total{reason="not_protobuf",transport="grpc"}'] >= 3
    )
    assert metrics['otelsignals_receiver_rejected_requests_total{reason="bad_json",transport="http"}'] >= 3
    kinds = [r.get("kind") for r in sidecar.log_records() if r.get("level") == "warning"]
    for kind in ("rejected_not_protobuf", "rejected_bad_json"):
        assert kinds.count(kind) == 1, f"{kind} logged {kinds.count(kind)} times"
    # Still serving well-formed clients.
    spans = make_spans(3, 1)
    assert export_grpc(sidecar.grpc_endpoint, spans) is SpanExportResult.SUCCESS
    sink.wait_for_spans(len(spans))
    assert expected_span_bytes(spans).items() <= sink.span_bytes().items()


# -- property-based fuzzing ----------------------------------------------------------------------
_VALID = valid_request_bytes(3)
_VALID_JSON = encode_trace_request(ExportTraceServiceRequest.FromString(_VALID))


def _mutate(data: bytes, position: int, replacement: bytes, cut: int) -> bytes:
    position %= len(data)
    return (data[:position] + replacement + data[position + len(replacement) :])[: max(1, len(data) - cut)]


mutated_protobuf = st.builds(
    _mutate, st.just(_VALID), st.integers(0, 10_000), st.binary(min_size=1, max_size=8), st.integers(0, 40)
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
otlp_shaped_json = st.fixed_dictionaries(
    {
        "resourceSpans": st.lists(
            st.fixed_dictionaries(
                {
                    "scopeSpans": st.lists(
                        st.fixed_dictionaries(
                            {
                                "spans": st.lists(
                                    st.dictionaries(
                                        st.sampled_from(
                                            [
                                                "traceId",
                                                "spanId",
                                                "name",
                                                "kind",
                                                "attributes",
                                                "startTimeUnixNano",
                                                "status",
                                            ]
                                        ),
                                        json_values,
                                        max_size=5,
                                    ),
                                    max_size=3,
                                )
                            }
                        ),
                        max_size=2,
                    )
                }
            ),
            max_size=2,
        )
    }
)
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(body=st.binary(max_size=2048) | mutated_protobuf)
def test_fuzz_http_protobuf_never_breaks_the_receiver(running, body):
    sidecar, _ = running
    status, _ = post(sidecar, body)
    assert status in (200, 400)


@FUZZ
@given(body=st.binary(max_size=2048) | mutated_protobuf)
def test_fuzz_grpc_never_breaks_the_receiver(running, body):
    sidecar, _ = running
    code, _, _ = grpc_export(sidecar, body)
    assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT)


@FUZZ
@given(document=json_values | otlp_shaped_json)
def test_fuzz_http_json_never_breaks_the_receiver(running, document):
    sidecar, _ = running
    # The standard library writes any JSON value, including integers beyond 64 bits.
    status, payload = post(sidecar, json.dumps(document).encode(), "application/json")
    assert status in (200, 400)
    assert "code" in orjson.loads(payload) or status == 200


def test_after_fuzzing_every_accepted_span_was_forwarded(running):
    """Runs last in this module: whatever the receivers accepted, the sink got, once."""
    sidecar, sink = running
    accepted = sidecar.metric("otelsignals_receiver_accepted_spans_total")
    # Mutations often leave the same spans intact, so some arrive while their twin is buffered.
    duplicates = sidecar.metric("otelsignals_assembler_duplicate_spans_total")
    sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", accepted - duplicates, timeout=20)
    assert sidecar.metric("otelsignals_dropped_spans_total") == 0
    assert sidecar.metric("otelsignals_exporter_sent_spans_total") == accepted - duplicates
    assert len(sink.spans()) == accepted - duplicates
    assert sidecar.process is not None and sidecar.process.poll() is None
