"""The OTLP/gRPC sender against a real gRPC server (grpcio's): one connection per exporter consumer, a
send never queued behind another on a busy connection while one is idle, the sidecar's own gzip,
and every answer classified as the OTLP specification says."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
import trustme
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2

from otelsignals.config import Duration, ExporterConfig, TlsConfig
from otelsignals.pipeline import senders
from otelsignals.pipeline.senders import GrpcSender, SendResult
from tests.support.clients import encode_spans, make_spans
from tests.support.otlp_sink import OtlpSink, Response
from tests.support.sidecar import free_port

ROOT = Path(__file__).resolve().parents[2]
SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
BODY = encode_spans(make_spans(2, 2)).SerializeToString()


def recording_server(peers: list[str], answer: Callable[[int], None]) -> tuple[grpc.Server, int]:
    """A trace service that notes each call's peer (the client's address and port: one per
    connection) and calls ``answer(call number)`` before answering."""
    lock = threading.Lock()

    def export(body: bytes, context: grpc.ServicerContext) -> bytes:
        with lock:
            number = len(peers)
            peers.append(context.peer())
        answer(number)
        return b""

    server = grpc.server(futures.ThreadPoolExecutor(16))
    handler = grpc.unary_unary_rpc_method_handler(export, request_deserializer=None, response_serializer=None)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


async def wait_for(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.01)


async def test_each_consumer_sends_over_a_connection_of_its_own() -> None:
    """Over one connection, gzipped batches went out one after another (bench/grpc_connections.py)."""
    peers: list[str] = []
    release = threading.Event()
    server, port = recording_server(peers, lambda number: release.wait(10))
    config = ExporterConfig(endpoint=f"127.0.0.1:{port}", compression="gzip")
    consumers = config.queue.num_consumers
    assert consumers > 1
    sender = GrpcSender(config)
    try:
        # Twice as many sends as consumers at once: the first ones take a connection each, the
        # others (more than the exporter ever has in flight) share them in turn.
        sends = [asyncio.ensure_future(sender.send("traces", BODY)) for _ in range(2 * consumers)]
        await wait_for(lambda: len(peers) >= consumers)
        release.set()
        results = await asyncio.wait_for(asyncio.gather(*sends), 10)
    finally:
        release.set()
        await sender.close()
        server.stop(None)
    assert all(result.ok for result in results)
    assert sorted(Counter(peers).values()) == [2] * consumers


async def test_a_send_never_waits_behind_a_busy_connection_while_another_is_idle() -> None:
    """One call hangs at the downstream; the sends after it, one at a time, take the idle
    connections, never the busy one (handing connections out in turn would)."""
    peers: list[str] = []
    release = threading.Event()
    server, port = recording_server(peers, lambda number: release.wait(10) if number == 0 else None)
    config = ExporterConfig(endpoint=f"127.0.0.1:{port}", compression="gzip")
    sender = GrpcSender(config)
    try:
        hanging = asyncio.ensure_future(sender.send("traces", BODY))
        await wait_for(lambda: len(peers) == 1)
        later = [await asyncio.wait_for(sender.send("traces", BODY), 10) for _ in range(12)]
        release.set()
        first = await asyncio.wait_for(hanging, 10)
    finally:
        release.set()
        await sender.close()
        server.stop(None)
    assert first.ok and all(result.ok for result in later)
    busy = peers[0]
    assert busy not in peers[1:]
    assert len(set(peers[1:])) == config.queue.num_consumers - 1  # the idle ones, each in turn


def _send(config: ExporterConfig, signal: str = "traces", body: bytes = BODY) -> SendResult:
    async def once() -> SendResult:
        sender = GrpcSender(config)
        try:
            return await asyncio.wait_for(sender.send(signal, body), 20)
        finally:
            await sender.close()

    return asyncio.run(once())


@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_a_request_arrives_whole_gzipped_by_the_sidecar_on_a_thread_of_the_sender(
    compression: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sidecar's own gzip (ISA-L level 1), not grpc's level 6; the downstream reads it as gRPC's
    gzip (a message whose compressed flag were wrong would not decode)."""
    compressed_on: list[str] = []
    real_compress = senders.gzip_fast

    def compress(data: bytes) -> bytes:
        compressed_on.append(threading.current_thread().name)
        return real_compress(data)

    monkeypatch.setattr(senders, "gzip_fast", compress)
    body = encode_spans(make_spans(40, 5)).SerializeToString()
    with OtlpSink().start() as sink:
        result = _send(ExporterConfig(endpoint=sink.grpc_endpoint, compression=compression), body=body)  # type: ignore[arg-type]
        received = sink.received
    assert result.ok and [r.body for r in received] == [body]
    if compression == "gzip":
        assert len(compressed_on) == 1 and compressed_on[0].startswith("otlp-grpc")
    else:
        assert compressed_on == []


@pytest.mark.parametrize(
    ("answer", "retryable", "reason", "retry_after"),
    [
        (Response.unavailable(), True, "unavailable", None),
        (Response.unavailable(retry_after=2.5), True, "unavailable", 2.5),
        (Response.throttled(), False, "resource_exhausted", None),  # without RetryInfo: permanent
        (Response.throttled(retry_after=1.0), True, "resource_exhausted", 1.0),
        (Response.invalid("bad spans"), False, "invalid_argument", None),
        (Response(grpc.StatusCode.CANCELLED), True, "cancelled", None),  # gRPC's spelling, not Connect's
        (Response(grpc.StatusCode.DATA_LOSS), True, "data_loss", None),
        (Response(grpc.StatusCode.PERMISSION_DENIED), False, "permission_denied", None),
        (Response(grpc.StatusCode.UNIMPLEMENTED), False, "unimplemented", None),
    ],
)
def test_the_downstreams_status_is_classified_as_otlp_says(
    answer: Response, retryable: bool, reason: str, retry_after: float | None
) -> None:
    with OtlpSink().start() as sink:
        sink.script(answer)
        result = _send(ExporterConfig(endpoint=sink.grpc_endpoint))
    assert (result.ok, result.retryable, result.reason, result.retry_after) == (
        False,
        retryable,
        reason,
        retry_after,
    )
    if answer.message:
        assert result.detail == answer.message


@pytest.mark.parametrize("signal", ["traces", "metrics", "logs"])
def test_a_partial_success_is_counted_for_each_signal(signal: str) -> None:
    with OtlpSink().start() as sink:
        sink.script(Response.ok(partial_success_rejected=3))
        result = _send(ExporterConfig(endpoint=sink.grpc_endpoint), signal=signal, body=b"")
        assert [r.signal for r in sink.received] == [signal]
    assert result.ok and result.rejected_spans == 3


def test_a_downstream_that_is_not_there_or_too_slow_is_retried() -> None:
    refused = _send(ExporterConfig(endpoint=f"127.0.0.1:{free_port()}"))
    assert (refused.ok, refused.retryable, refused.reason) == (False, True, "unavailable")
    with OtlpSink().start() as sink:
        sink.set_delay(3)
        config = ExporterConfig(endpoint=sink.grpc_endpoint, timeout=Duration(0.5))
        started = time.monotonic()
        slow = _send(config)
        took = time.monotonic() - started
    assert (slow.ok, slow.retryable, slow.reason) == (False, True, "deadline_exceeded")
    assert took < 2.5


async def test_a_call_in_flight_at_close_ends_by_its_timeout() -> None:
    """At shutdown the exporter cancels its sends and closes the sender: close() does not wait for a
    call the downstream holds, and the call's thread is free again by ``exporter.timeout``."""
    with OtlpSink().start() as sink:
        sink.set_delay(30)
        sender = GrpcSender(ExporterConfig(endpoint=sink.grpc_endpoint, timeout=Duration(2)))
        sending = asyncio.ensure_future(sender.send("traces", BODY))
        await wait_for(lambda: sink.attempts >= 1)
        started = time.monotonic()
        await sender.close()
        closed_in = time.monotonic() - started
        result = await asyncio.wait_for(sending, 10)
        ended_in = time.monotonic() - started
    assert closed_in < 0.5
    assert not result.ok and result.retryable
    assert ended_in < 4


@pytest.mark.parametrize("presents_a_certificate", [True, False])
def test_mutual_tls_towards_the_downstream(tmp_path, presents_a_certificate: bool) -> None:
    """``exporter.tls``: the downstream's certificate checked against ``ca_file``, the sidecar's own
    (``cert_file``, ``key_file``) presented to a downstream that asks for one."""
    server_ca, client_ca = trustme.CA(), trustme.CA()
    server_identity = server_ca.issue_cert("127.0.0.1")
    client_identity = client_ca.issue_cert("otelsignals@example.com")
    paths = {name: tmp_path / f"{name}.pem" for name in ("ca", "cert", "key")}
    server_ca.cert_pem.write_to_path(str(paths["ca"]))
    client_identity.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    client_identity.private_key_pem.write_to_path(str(paths["key"]))
    peers: list[str] = []
    server = grpc.server(futures.ThreadPoolExecutor(4))

    def export(body: bytes, context: grpc.ServicerContext) -> bytes:
        peers.append(context.peer())
        return b""

    handler = grpc.unary_unary_rpc_method_handler(export, request_deserializer=None, response_serializer=None)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
    credentials = grpc.ssl_server_credentials(
        [(server_identity.private_key_pem.bytes(), server_identity.cert_chain_pems[0].bytes())],
        root_certificates=client_ca.cert_pem.bytes(),
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    tls = TlsConfig(insecure=False, ca_file=str(paths["ca"]))
    if presents_a_certificate:
        tls.cert_file, tls.key_file = str(paths["cert"]), str(paths["key"])
    try:
        result = _send(ExporterConfig(endpoint=f"127.0.0.1:{port}", tls=tls))
    finally:
        server.stop(None)
    if presents_a_certificate:
        assert result.ok and len(peers) == 1
    else:
        assert (result.ok, result.retryable, result.reason, peers) == (False, True, "unavailable", [])


def _answering_server(
    export: Callable[[bytes, grpc.ServicerContext], object], streaming: bool = False
) -> int:
    """A trace service answering with ``export`` (``streaming``: declared server-streaming, so that it
    may answer no message at all). Stopped when the test's process ends."""
    server = grpc.server(futures.ThreadPoolExecutor(4))
    make = grpc.unary_stream_rpc_method_handler if streaming else grpc.unary_unary_rpc_method_handler
    handler = make(export, request_deserializer=None, response_serializer=None)  # type: ignore[operator]
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    _SERVERS.append(server)
    return port


_SERVERS: list[grpc.Server] = []


def _retry_info(seconds: int) -> error_details_pb2.RetryInfo:
    return error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds))


def test_the_grpc_status_wins_over_a_rich_status_that_leaves_its_code_unset() -> None:
    def export(body: bytes, context: grpc.ServicerContext) -> bytes:
        status = status_pb2.Status(message="slow down")  # code left unset: 0
        status.details.add().Pack(_retry_info(2))
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "slow down")

    result = _send(ExporterConfig(endpoint=f"127.0.0.1:{_answering_server(export)}"))
    assert (result.ok, result.reason, result.retryable, result.retry_after) == (
        False,
        "resource_exhausted",
        True,
        2.0,
    )


def test_a_bare_retry_info_trailer_is_read() -> None:
    """``google.rpc.retryinfo-bin`` alone, as some servers (and opentelemetry-python) use it."""

    def export(body: bytes, context: grpc.ServicerContext) -> bytes:
        context.set_trailing_metadata((("google.rpc.retryinfo-bin", _retry_info(3).SerializeToString()),))
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "slow down")

    result = _send(ExporterConfig(endpoint=f"127.0.0.1:{_answering_server(export)}"))
    assert (result.reason, result.retryable, result.retry_after) == ("resource_exhausted", True, 3.0)


def test_an_ok_status_without_an_answer_is_delivered() -> None:
    """grpc-status 0 and no message: the downstream took the batch (connect-python calls it
    UNIMPLEMENTED, "unary response has zero messages"); counting it failed would drop it."""
    taken: list[bytes] = []

    def export(body: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        taken.append(body)
        return iter(())

    result = _send(ExporterConfig(endpoint=f"127.0.0.1:{_answering_server(export, streaming=True)}"))
    assert result.ok and taken == [BODY]


def test_a_call_the_downstream_holds_does_not_hold_up_the_process_exit(tmp_path) -> None:
    """Closing pyqwest's transport does not end a call in flight; the sender's threads are daemon
    threads, so the sidecar's exit does not wait ``exporter.timeout`` for it."""
    with OtlpSink().start() as sink:
        sink.set_delay(60)
        script = tmp_path / "exit.py"
        script.write_text(
            textwrap.dedent(f"""
                import asyncio
                from otelsignals.config import Duration, ExporterConfig
                from otelsignals.pipeline.senders import GrpcSender

                async def main():
                    config = ExporterConfig(endpoint={sink.grpc_endpoint!r}, timeout=Duration(60))
                    sender = GrpcSender(config)
                    sending = asyncio.ensure_future(sender.send("traces", b""))
                    await asyncio.sleep(1.0)
                    sending.cancel()
                    await sender.close()

                asyncio.run(main())
                print("closed", flush=True)
            """)
        )
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
        )
        took = time.monotonic() - started
        attempts = sink.attempts
    assert done.returncode == 0 and "closed" in done.stdout, done.stderr[-2000:]
    assert attempts == 1  # the call was in flight when the process ended
    assert took < 15


def test_a_binary_header_goes_as_grpc_binary_metadata() -> None:
    """A ``-bin`` key's value is sent in base64, as gRPC requires (grpcio answered every call
    INTERNAL "illegal base64 encoding" to the raw value)."""
    with OtlpSink().start() as sink:
        config = ExporterConfig(
            endpoint=sink.grpc_endpoint, headers={"X-Trace-Bin": "raw bytes", "x-plain": "p"}
        )
        result = _send(config)
        headers = sink.received[0].headers
    assert result.ok
    assert base64.b64decode(headers["x-trace-bin"]) == b"raw bytes" and headers["x-plain"] == "p"


async def test_a_bug_inside_a_call_is_raised_not_taken_for_the_sender_closing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a closed pool answers "closed" (retryable); anything else a call raises goes up to the
    exporter, which keeps the batch and says so (sender_error)."""

    def broken(data: bytes) -> bytes:
        raise RecursionError("a bug")

    monkeypatch.setattr(senders, "gzip_fast", broken)
    sender = GrpcSender(ExporterConfig(endpoint=f"127.0.0.1:{free_port()}"))
    try:
        with pytest.raises(RecursionError):
            await sender.send("traces", BODY)
    finally:
        await sender.close()
    closed = await sender.send("traces", BODY)
    assert (closed.ok, closed.retryable, closed.reason) == (False, True, "closed")


def test_an_idle_thread_keeps_nothing_of_a_cancelled_call() -> None:
    pool = senders._DaemonThreads(1, "test")
    started, release = threading.Event(), threading.Event()
    pool.submit(lambda: (started.set(), release.wait(10)))
    started.wait(10)

    class Big:
        pass

    big = Big()
    alive = weakref.ref(big)
    queued = pool.submit(lambda item: item, big)
    assert queued.cancel()
    del big, queued
    release.set()
    deadline = time.monotonic() + 5  # no call comes after it: the thread waits, holding nothing
    while alive() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert alive() is None
    pool.shutdown()
