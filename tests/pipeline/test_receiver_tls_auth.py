"""Receiver TLS, mutual TLS and token authentication, and the admin API's connection limits, against a
real sidecar process, with the real OpenTelemetry SDK exporters as clients and certificates from a
throwaway CA (trustme)."""

from __future__ import annotations

import contextlib
import gzip
import http.client
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import grpc
import orjson
import pytest
import trustme
from google.rpc import code_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from otelsignals.config import ConfigError, validate
from otelsignals.config_loading import load_config
from tests.support.clients import (
    assert_refused_beyond,
    closed_by_peer,
    encode_spans,
    expected_span_bytes,
    make_spans,
)
from tests.support.otlp_sink import OtlpSink
from tests.support.sidecar import SidecarProcess

TRACES_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
REJECTED = "otelsignals_receiver_rejected_requests_total"
TOKEN = "s3cret-token.42"
MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def _exporter_trusts_its_certificate_file(monkeypatch: pytest.MonkeyPatch) -> None:
    # requests lets these variables override a session's own CA bundle (psf/requests#3829), which is
    # where the SDK's HTTP exporter puts certificate_file.
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA that signed the server certificate (what clients trust)
    server_cert: Path
    server_key: Path
    client_ca: Path  # the CA client certificates must chain to
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # a client certificate from another CA
    stranger_key: Path

    def read(self, name: str) -> bytes:
        path: Path = getattr(self, name)
        return path.read_bytes()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    directory = tmp_path_factory.mktemp("certs")
    server_ca, client_ca, stranger_ca = trustme.CA(), trustme.CA(), trustme.CA()
    server = server_ca.issue_cert("127.0.0.1", "localhost")
    client = client_ca.issue_cert("client@example.com")
    stranger = stranger_ca.issue_cert("stranger@example.com")
    paths = {name: directory / f"{name}.pem" for name in Certs.__dataclass_fields__}
    server_ca.cert_pem.write_to_path(str(paths["ca"]))
    client_ca.cert_pem.write_to_path(str(paths["client_ca"]))
    for issued, cert, key in (
        (server, "server_cert", "server_key"),
        (client, "client_cert", "client_key"),
        (stranger, "stranger_cert", "stranger_key"),
    ):
        for pem in issued.cert_chain_pems:
            pem.write_to_path(str(paths[cert]), append=True)
        issued.private_key_pem.write_to_path(str(paths[key]))
    return Certs(**paths)


def tls_section(certs: Certs, mutual: bool = False) -> dict[str, str]:
    section = {"cert_file": str(certs.server_cert), "key_file": str(certs.server_key)}
    if mutual:
        section["client_ca_file"] = str(certs.client_ca)
    return section


def sidecar_with(tmp_path: Path, sink: OtlpSink, **receiver: object) -> SidecarProcess:
    """A sidecar (started by ``with``) forwarding to ``sink``, with these ``receiver`` keys."""
    return SidecarProcess(tmp_path, {"endpoint": sink.grpc_endpoint}, receiver=receiver)


# -- clients -----------------------------------------------------------------------------------------
def grpc_credentials(certs: Certs, client: str | None = None) -> grpc.ChannelCredentials:
    if client is None:
        return grpc.ssl_channel_credentials(root_certificates=certs.read("ca"))
    return grpc.ssl_channel_credentials(
        root_certificates=certs.read("ca"),
        private_key=certs.read(f"{client}_key"),
        certificate_chain=certs.read(f"{client}_cert"),
    )


def export(
    sidecar: SidecarProcess,
    transport: str,
    spans: list,
    *,
    certs: Certs | None = None,
    client: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 5.0,
) -> SpanExportResult:
    """One export with the SDK's own exporter: over TLS when ``certs`` is given (trusting its CA,
    presenting the ``client``/``stranger`` certificate if named), plain text otherwise."""
    exporter: GrpcSpanExporter | HttpSpanExporter
    if transport == "grpc":
        if certs is None:
            exporter = GrpcSpanExporter(
                endpoint=sidecar.grpc_endpoint, insecure=True, headers=headers, timeout=timeout
            )
        else:
            exporter = GrpcSpanExporter(
                endpoint=f"https://{sidecar.grpc_endpoint}",
                credentials=grpc_credentials(certs, client),
                headers=headers,
                timeout=timeout,
            )
    else:
        scheme = "http" if certs is None else "https"
        exporter = HttpSpanExporter(
            endpoint=f"{scheme}://127.0.0.1:{sidecar.http_port}/v1/traces",
            certificate_file=str(certs.ca) if certs else None,
            client_certificate_file=str(getattr(certs, f"{client}_cert")) if certs and client else None,
            client_key_file=str(getattr(certs, f"{client}_key")) if certs and client else None,
            headers=headers,
            timeout=timeout,
        )
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


def wait_for(sink: OtlpSink, spans: list, timeout: float = 10.0) -> None:
    expected = expected_span_bytes(spans).keys()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not expected <= sink.span_bytes().keys():
        time.sleep(0.05)
    assert expected <= sink.span_bytes().keys()


def post(
    sidecar: SidecarProcess,
    body: bytes,
    headers: dict[str, str],
    content_type: str = "application/x-protobuf",
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", sidecar.http_port, timeout=10)
    try:
        connection.request("POST", "/v1/traces", body, {"Content-Type": content_type, **headers})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def grpc_call(sidecar: SidecarProcess, body: bytes, metadata: tuple[tuple[str, str], ...], **kw: object):
    with grpc.insecure_channel(
        sidecar.grpc_endpoint, options=[("grpc.max_send_message_length", -1)]
    ) as channel:
        return channel.unary_unary(TRACES_METHOD)(body, metadata=metadata, timeout=30, **kw)


# -- TLS ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_tls_receivers_deliver_and_refuse_plain_text(tmp_path, sink, certs, transport):
    with sidecar_with(tmp_path, sink, tls=tls_section(certs)) as sidecar:
        plain = make_spans(1, 1, service="plain")
        assert export(sidecar, transport, plain, timeout=2) is SpanExportResult.FAILURE
        spans = make_spans(3, 2)
        assert export(sidecar, transport, spans, certs=certs) is SpanExportResult.SUCCESS
        wait_for(sink, spans)
        assert not expected_span_bytes(plain).keys() & sink.span_bytes().keys()


def test_plain_text_clients_get_no_answer_from_tls_ports(tmp_path, sink, certs):
    with sidecar_with(tmp_path, sink, tls=tls_section(certs)) as sidecar:
        with pytest.raises(grpc.RpcError) as refused:
            grpc_call(sidecar, encode_spans(make_spans(1, 1)).SerializeToString(), ())
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            post(sidecar, encode_spans(make_spans(1, 1)).SerializeToString(), {})


def test_failed_http_handshakes_are_counted_and_logged_but_not_a_client_that_leaves(tmp_path, sink, certs):
    # asyncio closes a connection whose TLS handshake fails without a word: a client sending plain
    # text to the port, or one without the client certificate mutual TLS asks for, went unseen.
    with sidecar_with(tmp_path, sink, tls=tls_section(certs, mutual=True)) as sidecar:
        with socket.create_connection(("127.0.0.1", sidecar.http_port), timeout=5):
            pass  # a TCP health check: connects and leaves before any handshake
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            post(sidecar, encode_spans(make_spans(1, 1)).SerializeToString(), {})
        assert sidecar.metric(REJECTED, transport="http", reason="tls_handshake") == 1
        anonymous = make_spans(1, 1, service="anonymous")
        assert export(sidecar, "http", anonymous, certs=certs, timeout=2) is SpanExportResult.FAILURE
        spans = make_spans(1, 1)
        assert export(sidecar, "http", spans, certs=certs, client="client") is SpanExportResult.SUCCESS
        wait_for(sink, spans)
        # The SDK's exporter may retry a failed connection: at least one attempt more.
        assert sidecar.metric(REJECTED, transport="http", reason="tls_handshake") >= 2
        messages = [r["message"] for r in sidecar.log_records() if r.get("reason") == "tls_handshake"]
        assert messages and "plain text" in messages[0]


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_mutual_tls_requires_a_client_certificate_from_the_configured_ca(tmp_path, sink, certs, transport):
    with sidecar_with(tmp_path, sink, tls=tls_section(certs, mutual=True)) as sidecar:
        anonymous, stranger = make_spans(1, 1, service="anonymous"), make_spans(1, 1, service="stranger")
        assert export(sidecar, transport, anonymous, certs=certs, timeout=2) is SpanExportResult.FAILURE
        assert (
            export(sidecar, transport, stranger, certs=certs, client="stranger", timeout=2)
            is SpanExportResult.FAILURE
        )
        spans = make_spans(2, 2)
        assert export(sidecar, transport, spans, certs=certs, client="client") is SpanExportResult.SUCCESS
        wait_for(sink, spans)
        refused = expected_span_bytes(anonymous).keys() | expected_span_bytes(stranger).keys()
        assert not refused & sink.span_bytes().keys()


# -- token -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_bearer_token_is_required_on_every_export(tmp_path, sink, certs, transport):
    # Over TLS, as a token should travel; the refusals are counted and nothing refused is forwarded.
    with sidecar_with(tmp_path, sink, tls=tls_section(certs), auth={"token": TOKEN}) as sidecar:
        missing, wrong = make_spans(1, 1, service="missing"), make_spans(1, 1, service="wrong")
        assert export(sidecar, transport, missing, certs=certs) is SpanExportResult.FAILURE
        wrong_headers = {"authorization": f"Bearer {TOKEN}x"}
        assert (
            export(sidecar, transport, wrong, certs=certs, headers=wrong_headers) is SpanExportResult.FAILURE
        )
        assert sidecar.metric(REJECTED, transport=transport, reason="unauthenticated") == 2
        spans = make_spans(2, 2)
        good = {"authorization": f"Bearer {TOKEN}"}
        assert export(sidecar, transport, spans, certs=certs, headers=good) is SpanExportResult.SUCCESS
        wait_for(sink, spans)
        # The good export was sent last: had anything refused been forwarded, it would be there too.
        assert sink.span_bytes().keys() == expected_span_bytes(spans).keys()


def test_http_refusal_is_401_with_an_otlp_status_in_the_request_format(tmp_path, sink):
    with sidecar_with(tmp_path, sink, auth={"token": TOKEN}) as sidecar:
        body = encode_spans(make_spans(1, 1)).SerializeToString()
        status, headers, answer = post(sidecar, body, {})
        assert status == 401
        assert headers["Content-Type"] == "application/x-protobuf"
        assert headers["WWW-Authenticate"].startswith("Bearer")
        refusal = status_pb2.Status.FromString(answer)
        assert refusal.code == code_pb2.UNAUTHENTICATED and "authorization" in refusal.message
        status, headers, answer = post(
            sidecar, b"{}", {"Authorization": "Bearer nope"}, content_type="application/json"
        )
        assert status == 401
        assert headers["Content-Type"].startswith("application/json")
        assert orjson.loads(answer)["code"] == code_pb2.UNAUTHENTICATED
        assert post(sidecar, body, {"Authorization": f"bearer {TOKEN}"})[0] == 200  # the scheme is case-blind
        assert sidecar.metric(REJECTED, transport="http", reason="unauthenticated") == 2
        messages = [r["message"] for r in sidecar.log_records() if r.get("reason") == "unauthenticated"]
        assert len(messages) == 1  # logged once; the rest are counted


def test_grpc_refusal_is_unauthenticated(tmp_path, sink):
    with sidecar_with(tmp_path, sink, auth={"token": TOKEN}) as sidecar:
        body = encode_spans(make_spans(1, 1)).SerializeToString()
        for metadata in ((), (("authorization", TOKEN),), (("authorization", "Bearer x"),)):
            with pytest.raises(grpc.RpcError) as refused:
                grpc_call(sidecar, body, metadata)
            assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        grpc_call(sidecar, body, (("authorization", f"Bearer {TOKEN}"),))
        assert sidecar.metric(REJECTED, transport="grpc", reason="unauthenticated") == 3
        assert (
            sidecar.metric("otelsignals_receiver_requests_total", transport="grpc", outcome="unauthenticated")
            == 3
        )


def test_compressed_bodies_without_the_token_are_not_inflated(tmp_path, sink):
    # A gzip bomb: refused as unauthenticated, never as too_large, which inflating would have found.
    bomb = gzip.compress(b"\x00" * (64 * MIB), compresslevel=9)
    assert len(bomb) < MIB
    with sidecar_with(tmp_path, sink, auth={"token": TOKEN}, max_message_size="1MiB") as sidecar:
        status, _, _ = post(sidecar, bomb, {"Content-Encoding": "gzip", "Authorization": "Bearer wrong"})
        assert status == 401
        with pytest.raises(grpc.RpcError) as refused:
            grpc_call(
                sidecar,
                b"\x00" * (64 * MIB),
                (("authorization", "Bearer wrong"),),
                compression=grpc.Compression.Gzip,
            )
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        for transport in ("http", "grpc"):
            assert sidecar.metric(REJECTED, transport=transport, reason="unauthenticated") == 1
        assert sidecar.metric(REJECTED, reason="too_large") == 0
        # With the token, the same bomb is inflated and stopped at the limit.
        good = f"Bearer {TOKEN}"
        status, _, _ = post(sidecar, bomb, {"Content-Encoding": "gzip", "Authorization": good})
        assert status == 413
        assert sidecar.metric(REJECTED, transport="http", reason="too_large") == 1


def test_custom_header_carries_the_bare_token_read_from_a_file(tmp_path, sink):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    auth = {"token_file": str(token_file), "header": "X-Api-Key"}
    with sidecar_with(tmp_path, sink, auth=auth) as sidecar:
        spans = make_spans(1, 2)
        for transport in ("grpc", "http"):
            bearer = {"authorization": f"Bearer {TOKEN}"}
            assert export(sidecar, transport, make_spans(1, 1), headers=bearer) is SpanExportResult.FAILURE
        assert export(sidecar, "http", spans, headers={"x-api-key": TOKEN}) is SpanExportResult.SUCCESS
        more = make_spans(1, 2, service="grpc")
        assert export(sidecar, "grpc", more, headers={"x-api-key": TOKEN}) is SpanExportResult.SUCCESS
        wait_for(sink, spans + more)
        assert sink.span_bytes().keys() == expected_span_bytes(spans + more).keys()


# -- configuration errors ----------------------------------------------------------------------------
def config_error(tmp_path: Path, receiver: dict) -> ConfigError:
    path = tmp_path / "bad.yaml"
    path.write_bytes(orjson.dumps({"receiver": receiver}))  # JSON is YAML
    with pytest.raises(ConfigError) as info:
        validate(load_config(path, environ={}))
    return info.value


def test_tls_and_token_config_errors_name_the_key(tmp_path, certs):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    missing = str(tmp_path / "nowhere.pem")
    server = {"cert_file": str(certs.server_cert), "key_file": str(certs.server_key)}
    cases = [
        (
            {"tls": {"cert_file": missing, "key_file": str(certs.server_key)}},
            "receiver.tls.cert_file",
            "cannot read",
        ),
        ({"tls": {"key_file": str(certs.server_key)}}, "receiver.tls.cert_file", "set both or neither"),
        ({"tls": {"cert_file": str(certs.server_cert)}}, "receiver.tls.key_file", "set both or neither"),
        ({"tls": {"client_ca_file": str(certs.client_ca)}}, "receiver.tls.client_ca_file", "need TLS"),
        (
            {"tls": {"cert_file": str(junk), "key_file": str(certs.server_key)}},
            "receiver.tls.cert_file",
            "no PEM",
        ),
        (
            {"tls": {**server, "key_file": str(certs.client_key)}},
            "receiver.tls.key_file",
            "not a PEM private key",
        ),
        ({"tls": {**server, "client_ca_file": missing}}, "receiver.tls.client_ca_file", "cannot read"),
        ({"tls": {**server, "client_ca_file": str(junk)}}, "receiver.tls.client_ca_file", "no PEM"),
        ({"auth": {"token": "a", "token_file": str(junk)}}, "receiver.auth.token_file", "not both"),
        ({"auth": {"token_file": missing}}, "receiver.auth.token_file", "cannot read"),
        ({"auth": {"token": "two words"}}, "receiver.auth.token", "without spaces"),
        ({"auth": {"header": "x api key"}}, "receiver.auth.header", "header name"),
    ]
    for receiver, key, problem in cases:
        error = config_error(tmp_path, receiver)
        assert error.key == key, (receiver, error)
        assert problem in str(error), (receiver, error)
    # And the good ones pass.
    validate(
        load_config(
            None,
            environ={
                "OTELSIGNALS_RECEIVER__TLS__CERT_FILE": str(certs.server_cert),
                "OTELSIGNALS_RECEIVER__TLS__KEY_FILE": str(certs.server_key),
                "OTELSIGNALS_RECEIVER__TLS__CLIENT_CA_FILE": str(certs.client_ca),
                "OTELSIGNALS_RECEIVER__AUTH__TOKEN": TOKEN,
            },
        )
    )


def test_cli_run_with_a_missing_certificate_exits_2_naming_the_key(tmp_path, certs):
    missing = tmp_path / "missing.pem"
    path = tmp_path / "otelsignals.yaml"
    path.write_text(
        f"receiver:\n  tls:\n    cert_file: {missing}\n    key_file: {certs.server_key}\n", encoding="utf-8"
    )
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTELSIGNALS_")}
    result = subprocess.run(
        [sys.executable, "-m", "otelsignals.cli", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert "'receiver.tls.cert_file'" in line and "cannot read" in line and str(missing) in line


# -- admin API limits --------------------------------------------------------------------------------
def healthz(sidecar: SidecarProcess) -> int:
    with urllib.request.urlopen(f"{sidecar.admin_url}/healthz", timeout=5) as response:
        return response.status


@pytest.fixture
def admin_limited(tmp_path, sink):
    sidecar = SidecarProcess(
        tmp_path,
        {"endpoint": sink.grpc_endpoint},
        # The header timeout is shorter than the idle one, so that a slow request is cut by the
        # former, never first by the latter (both would close it; only one counts as header_timeout).
        receiver={"idle_timeout": "1s", "header_timeout": "500ms"},
    )
    sidecar.config["admin"]["max_connections"] = 20
    with sidecar:
        yield sidecar


def test_admin_api_closes_idle_keep_alive_connections(admin_limited):
    sidecar = admin_limited
    idle = [socket.create_connection(("127.0.0.1", sidecar.admin_port)) for _ in range(5)]
    kept_alive = socket.create_connection(("127.0.0.1", sidecar.admin_port), timeout=5)
    try:
        kept_alive.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert kept_alive.recv(4096).startswith(b"HTTP/1.1 200")
        assert not closed_by_peer(kept_alive)  # keep-alive: still open right after the answer
        time.sleep(2.0)
        assert closed_by_peer(kept_alive)
        assert all(closed_by_peer(sock) for sock in idle)
    finally:
        for sock in [*idle, kept_alive]:
            sock.close()
    assert healthz(sidecar) == 200


def test_admin_api_cuts_off_slow_headers(admin_limited):
    sidecar = admin_limited
    sock = socket.create_connection(("127.0.0.1", sidecar.admin_port))
    started = time.monotonic()
    with contextlib.closing(sock):
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        with contextlib.suppress(OSError):
            for _ in range(20):
                time.sleep(0.2)
                sock.sendall(b"X")
        assert time.monotonic() - started < 3.0
    sidecar.wait_for_metric(REJECTED, 1, transport="admin", reason="header_timeout")


def test_admin_api_refuses_connections_beyond_its_limit(admin_limited):
    sidecar = admin_limited
    assert_refused_beyond(sidecar.admin_port, 20, "admin.max_connections")
    assert healthz(sidecar) == 200
    assert sidecar.metric(REJECTED, transport="admin", reason="too_many_connections") >= 1
    # The receivers have limits of their own: the admin API's did not touch them.
    assert sidecar.metric(REJECTED, transport="http") == 0
