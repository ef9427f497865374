"""The exporter's transport options reach the wire: TLS, headers and gzip, on gRPC and HTTP."""

from __future__ import annotations

import pytest
import trustme
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.support.clients import expected_span_bytes, export_grpc, make_spans
from tests.support.otlp_sink import OtlpSink
from tests.support.sidecar import SidecarProcess


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[str, str, str]:
    """(server certificate, its key, the private CA that signed it) for 127.0.0.1 (trustme)."""
    directory = tmp_path_factory.mktemp("tls")
    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1", "localhost")
    cert, key, ca = directory / "cert.pem", directory / "key.pem", directory / "ca.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    authority.cert_pem.write_to_path(str(ca))
    return str(cert), str(key), str(ca)


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_tls_with_a_private_ca_headers_and_gzip(tmp_path, certificate, protocol):
    cert, key, ca = certificate
    with OtlpSink(tls=(cert, key)).start() as sink:
        endpoint = sink.grpc_endpoint if protocol == "grpc" else sink.http_endpoint
        exporter = {
            "endpoint": endpoint,
            "protocol": protocol,
            "tls": {"insecure": False, "ca_file": ca},
            "headers": {"x-api-key": "s3cret", "x-tenant": "acme"},
            "compression": "gzip",
        }
        spans = make_spans(3, 2)
        with SidecarProcess(tmp_path, exporter) as sidecar:
            assert export_grpc(sidecar.grpc_endpoint, spans) is SpanExportResult.SUCCESS
            sink.wait_for_spans(len(spans))
        received = sink.received[0]
        assert received.headers["x-api-key"] == "s3cret" and received.headers["x-tenant"] == "acme"
        if protocol == "http/protobuf":
            # gRPC's message compression happens inside grpc-core and is invisible to a Python server.
            assert received.headers["content-encoding"] == "gzip"
        assert sink.span_bytes() == expected_span_bytes(spans)


def test_tls_refuses_an_unknown_certificate(tmp_path, certificate):
    cert, key, _ = certificate
    with OtlpSink(tls=(cert, key)).start() as sink:
        exporter = {"endpoint": sink.grpc_endpoint, "tls": {"insecure": False}}  # system CAs only
        with SidecarProcess(tmp_path, exporter) as sidecar:
            assert export_grpc(sidecar.grpc_endpoint, make_spans(1, 1)) is SpanExportResult.SUCCESS
            sidecar.wait_for_metric("otelsignals_exporter_retries_total", 1)
            assert sink.spans() == []
