"""Transports that deliver one export request downstream: OTLP/gRPC, OTLP/HTTP, or a local file.

A sender makes one attempt and classifies the answer; retrying is the exporter's job. The
classification follows the OTLP specification: gRPC CANCELLED, DEADLINE_EXCEEDED, ABORTED,
OUT_OF_RANGE, UNAVAILABLE and DATA_LOSS are retryable, RESOURCE_EXHAUSTED only with RetryInfo;
HTTP 429, 502, 503 and 504 are retryable; everything else is permanent. OTLP/HTTP goes through the
shared client (pipeline/http_client.py).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import queue
import ssl
import threading
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from io import BufferedWriter
from pathlib import Path
from typing import Any, Protocol, TypeAlias, TypeVar

import grpc
import orjson
import pyqwest
from connectrpc.client import ConnectClientSync, ResponseMetadata
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.method import IdempotencyLevel, MethodInfo
from connectrpc.protocol import ProtocolType
from connectrpc.request import Headers
from google.protobuf import any_pb2, json_format
from google.rpc import error_details_pb2, status_pb2
from isal import igzip
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from otelsignals.config import ExporterConfig, TlsConfig, client_ssl_context, grpc_address
from otelsignals.otlp.json_encode import encode_trace_request
from otelsignals.pipeline.http_client import OTLP_RETRYABLE_STATUSES, HttpClient

GRPC_METHODS = {
    "traces": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "metrics": "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
    "logs": "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
}
HTTP_PATHS = {"traces": "/v1/traces", "metrics": "/v1/metrics", "logs": "/v1/logs"}
ExportRequest: TypeAlias = ExportTraceServiceRequest | ExportMetricsServiceRequest | ExportLogsServiceRequest
ExportResponse: TypeAlias = (
    ExportTraceServiceResponse | ExportMetricsServiceResponse | ExportLogsServiceResponse
)
RESPONSE_TYPES: dict[str, type[ExportResponse]] = {
    "traces": ExportTraceServiceResponse,
    "metrics": ExportMetricsServiceResponse,
    "logs": ExportLogsServiceResponse,
}
REQUEST_TYPES: dict[str, type[ExportRequest]] = {
    "traces": ExportTraceServiceRequest,
    "metrics": ExportMetricsServiceRequest,
    "logs": ExportLogsServiceRequest,
}


def gzip_fast(body: bytes) -> bytes:
    """``body`` in gzip, as fast as gzip gets: ISA-L's level 1 (python-isal; it lets go of the GIL).
    On the agent workload's requests it took 0.96 ms a turn against zlib's 4.42 at level 1 and 11.00
    at level 6, the level grpc's own gzip uses, for 31.8 % of the size against 31.9 and 25.5 %
    (bench/export_loop_stall.py). Any gzip reader reads it."""
    return igzip.compress(body, 1)


T = TypeVar("T")
_RETRYABLE_GRPC = {"CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "OUT_OF_RANGE", "UNAVAILABLE", "DATA_LOSS"}


@dataclass(frozen=True)
class SendResult:
    ok: bool
    retryable: bool = False
    reason: str = ""  # short label for metrics: "unavailable", "http_400", "connection", ...
    detail: str = ""  # human-readable, for the log
    # Server-requested delay (Retry-After / RetryInfo), >= 0, uncapped: the exporter caps it.
    retry_after: float | None = None
    rejected_spans: int = 0  # partial_success.rejected_* reported by the downstream


class Sender(Protocol):
    async def send(self, signal: str, body: bytes) -> SendResult: ...
    async def close(self) -> None: ...


def _rejected_count(signal: str, payload: bytes) -> int:
    if not payload:
        return 0
    try:
        response = RESPONSE_TYPES[signal].FromString(payload)
    except Exception:  # a downstream that answers garbage on success still took the data
        return 0
    partial = response.partial_success
    return int(
        getattr(partial, "rejected_spans", 0)
        or getattr(partial, "rejected_data_points", 0)
        or getattr(partial, "rejected_log_records", 0)
    )


class GrpcSender:
    """OTLP/gRPC through connect-python's gRPC protocol on pyqwest's HTTP/2 connections, so that the
    sidecar does the gzip itself: :func:`gzip_fast`, where grpc's own client compresses at a fixed zlib
    level 6 that Python's grpc cannot change (grpc/grpc#41603). That was two thirds of the default
    configuration's CPU on the agent workload (bench/RESULTS.md).

    Each call, its gzip included, blocks a thread of the sender's own pool (one per exporter
    consumer), never the event loop, where a 4 MiB batch's compression once stalled every other
    thread, the analysis included (bench/grpc_compression_stall.py). One connection per consumer,
    each send on one no other send is using: over one connection, gzipped batches went out one after
    another, and a batch waited for the ones before it (bench/grpc_connections.py)."""

    def __init__(self, config: ExporterConfig) -> None:
        secure = config.endpoint.startswith("https://") or not config.tls.insecure
        address = ("https://" if secure else "http://") + grpc_address(config.endpoint)
        consumers = config.queue.num_consumers
        self._transports = [_grpc_transport(config.tls, secure) for _ in range(consumers)]
        self._gzipped = config.compression == "gzip"
        self._clients = [
            ConnectClientSync(
                address,
                protocol=ProtocolType.GRPC,
                send_compression=_GZIPPED if self._gzipped else None,
                read_max_bytes=64 * 1024**2,
                http_client=pyqwest.SyncClient(transport),
            )
            for transport in self._transports
        ]
        self._metadata = grpc_metadata(config.headers)
        self._timeout_ms = max(1, round(config.timeout * 1000))
        # The connections no send is using, the least recently used first (sends start and end on the
        # event loop). The exporter has at most one send per consumer in flight; more at once (another
        # caller) share the connections in turn.
        self._idle = deque(self._clients)
        self._shared = itertools.cycle(self._clients)
        self._threads = _DaemonThreads(consumers, "otlp-grpc")

    async def send(self, signal: str, body: bytes) -> SendResult:
        client = self._idle.popleft() if self._idle else None
        try:
            return await self._send(client if client is not None else next(self._shared), signal, body)
        finally:
            if client is not None:
                self._idle.append(client)

    async def _send(self, client: ConnectClientSync, signal: str, body: bytes) -> SendResult:
        try:
            call = asyncio.get_running_loop().run_in_executor(self._threads, self._call, client, signal, body)
        except RuntimeError as error:  # the pool is shut down: the sender is closing
            return SendResult(False, True, "closed", str(error))
        # A send the exporter cancels (its shutdown deadline) leaves its call running on its thread
        # until the call's timeout ends it; the threads do not hold up the process's exit.
        return await call

    def _call(self, client: ConnectClientSync, signal: str, body: bytes) -> SendResult:
        with ResponseMetadata() as metadata:
            try:
                answer = client.execute_unary(
                    request=_Encoded(gzip_fast(body) if self._gzipped else body),
                    method=_GRPC_METHOD_INFO[signal],
                    headers=self._metadata,
                    timeout_ms=self._timeout_ms,
                )
            except ConnectError as error:
                return _grpc_failure(error, metadata.trailers())
        return SendResult(True, rejected_spans=_rejected_count(signal, answer.payload))

    async def close(self) -> None:
        for transport in self._transports:
            transport.close()
        self._threads.shutdown(wait=False, cancel_futures=True)


def grpc_metadata(headers: dict[str, str]) -> dict[str, str]:
    """``exporter.headers`` as gRPC metadata: lower-case keys, and the value of a ``-bin`` key (binary
    metadata) in base64, as gRPC sends it (the Collector does the same)."""
    return {
        key: base64.b64encode(value.encode()).decode() if key.endswith("-bin") else value
        for key, value in ((name.lower(), value) for name, value in headers.items())
    }


def _grpc_failure(error: ConnectError, trailers: Headers) -> SendResult:
    """What a failed call says, by the OTLP specification's rules. The code is the ``grpc-status``
    the downstream sent, where it sent one: connect-python takes the code in
    ``grpc-status-details-bin`` first, and that one may be left unset (UNKNOWN). A ``grpc-status`` of
    0 with no answer ("unary response has zero messages") means the downstream took the batch."""
    status = trailers.get("grpc-status", "")
    if status == "0" and error.code is Code.UNIMPLEMENTED:
        return SendResult(True)
    code = (status != "0" and _GRPC_CODE_NUMBERS.get(status)) or _GRPC_CODE_NAMES.get(
        error.code, error.code.name
    )
    retry_after = _retry_delay(error.details, trailers.get("google.rpc.retryinfo-bin"))
    retryable = code in _RETRYABLE_GRPC or (code == "RESOURCE_EXHAUSTED" and retry_after is not None)
    return SendResult(False, retryable, code.lower(), error.message or code, retry_after)


class _Encoded:
    """An export request already encoded, as connect-python's codec takes a message to encode."""

    __slots__ = ("body",)

    def __init__(self, body: bytes) -> None:
        self.body = body

    def SerializeToString(self) -> bytes:  # the protobuf method's name
        return self.body


class _Answer:
    """The downstream's answer as its bytes: connect-python's codec parses into a new instance."""

    __slots__ = ("payload",)

    def __init__(self) -> None:
        self.payload = b""

    def ParseFromString(self, data: bytes) -> None:  # the protobuf method's name
        self.payload = bytes(data)


class _Gzipped:
    """connect-python's compression for a request the sender gzipped already, on its own thread
    (``GrpcSender._call``): connect-python would compress where pyqwest reads the body, on the
    threads that run the connections. (Answers are read with connect-python's own gzip.)"""

    def name(self) -> str:
        return "gzip"

    def compress(self, data: bytes | bytearray | memoryview) -> bytes:
        return bytes(data)

    def decompress(self, data: bytes | bytearray | memoryview) -> bytes:
        return zlib.decompress(data, wbits=31)


_GZIPPED = _Gzipped()


def _grpc_method_info(path: str) -> MethodInfo[_Encoded, _Answer]:
    service, method = path.strip("/").split("/")
    return MethodInfo(
        name=method,
        service_name=service,
        input=_Encoded,
        output=_Answer,
        idempotency_level=IdempotencyLevel.UNKNOWN,
    )


_GRPC_METHOD_INFO = {signal: _grpc_method_info(path) for signal, path in GRPC_METHODS.items()}
# The labels and retry rules use gRPC's names: from the grpc-status number, or from connect-python's
# code (its own name, but for Connect's spelling of CANCELLED) where no status came.
_GRPC_CODE_NUMBERS = {str(code.value[0]): code.name for code in grpc.StatusCode}
_GRPC_CODE_NAMES = {Code.CANCELED: "CANCELLED"}


def _grpc_transport(tls: TlsConfig, secure: bool) -> pyqwest.SyncHTTPTransport:
    """One HTTP/2 connection's transport (gRPC needs HTTP/2: prior knowledge without TLS)."""
    ca = _read_optional(tls.ca_file) if secure else None
    return pyqwest.SyncHTTPTransport(
        tls_ca_cert=ca,
        tls_include_system_certs=secure and ca is None,
        tls_key=_read_optional(tls.key_file) if secure else None,
        tls_cert=_read_optional(tls.cert_file) if secure else None,
        http_version=pyqwest.HTTPVersion.HTTP2,
        pool_max_idle_per_host=1,
        max_connections_per_address=1,
        follow_redirects=False,
        enable_gzip=False,
        enable_brotli=False,
        enable_zstd=False,
        enable_otel=False,  # the sidecar's own exports are not traced
    )


def _retry_delay(details: Sequence[any_pb2.Any], bare: str | None) -> float | None:
    """The RetryInfo delay the server sent in its rich status (grpc-status-details-bin), or as a bare
    ``google.rpc.retryinfo-bin`` trailer (``bare``: base64, as gRPC sends binary trailers)."""
    for detail in details:
        try:
            # types-protobuf: Any.Is() takes the pure-Python Descriptor only, while
            # Message.DESCRIPTOR is typed as it or the upb one (what it is at run time).
            if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):  # type: ignore[arg-type]
                info = error_details_pb2.RetryInfo()
                detail.Unpack(info)
                return _seconds(info)
        except Exception:  # a malformed detail is no reason to fail the export path
            continue
    if bare:
        try:
            return _seconds(
                error_details_pb2.RetryInfo.FromString(base64.b64decode(bare + "=" * (-len(bare) % 4)))
            )
        except Exception:
            return None
    return None


def _seconds(info: error_details_pb2.RetryInfo) -> float:
    return max(0.0, info.retry_delay.ToNanoseconds() / 1e9)


class _DaemonThreads(Executor):
    """A fixed pool of daemon threads. ThreadPoolExecutor's threads are joined when the interpreter
    exits, and a call the downstream holds cannot be interrupted (closing pyqwest's transport leaves
    the calls in flight running): the sidecar's exit then waited for ``exporter.timeout``. A call
    abandoned so is counted as undelivered by the exporter (at least once, as over any network)."""

    def __init__(self, count: int, name: str) -> None:
        self._work: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None]
        self._work = queue.SimpleQueue()
        self._closed = False
        self._lock = threading.Lock()  # a submit never slips between shutdown's drain and its ends
        for number in range(count):
            threading.Thread(target=self._run, name=f"{name}_{number}", daemon=True).start()
        self._count = count

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future: Future[T] = Future()
            self._work.put((future, partial(fn, **kwargs) if kwargs else fn, args))
            return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Takes no more calls; ``wait`` is not honoured, a thread may be in a call nothing ends."""
        with self._lock:
            self._closed = True
            while cancel_futures:
                try:
                    item = self._work.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
            for _ in range(self._count):
                self._work.put(None)

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            future, fn, args = item
            try:
                if future.set_running_or_notify_cancel():
                    future.set_result(fn(*args))
            except BaseException as error:
                future.set_exception(error)
            finally:
                del future, fn, args, item  # not held while waiting for the next call


class HttpSender:
    def __init__(self, config: ExporterConfig) -> None:
        base = config.endpoint.rstrip("/")
        # The endpoint is the OTLP/HTTP base URL; one that already ends in /v1/traces (as
        # OTEL_EXPORTER_OTLP_TRACES_ENDPOINT does) is accepted too.
        root = base.removesuffix("/v1/traces")
        self._urls = {signal: root + path for signal, path in HTTP_PATHS.items()}
        headers = {**config.headers, "Content-Type": "application/x-protobuf"}
        # gzip runs on threads of the sender's own (zlib lets go of the GIL): on the event loop, a
        # 4 MiB batch kept the receivers from answering for 60-145 ms (bench/export_loop_stall.py).
        self._gzip: ThreadPoolExecutor | None = None
        if config.compression == "gzip":
            headers["Content-Encoding"] = "gzip"
            self._gzip = ThreadPoolExecutor(config.queue.num_consumers, thread_name_prefix="otlp-http-gzip")
        context: ssl.SSLContext | None = None
        tls = config.tls
        if base.startswith("https://"):
            context, problems = client_ssl_context(tls)
            if problems:  # validate() refuses such a config; a sender built without it says why
                raise ValueError(f"exporter.tls: {'; '.join(problems)}")
        # One attempt per send: the exporter's queue-level loop does the retrying.
        self._client = HttpClient(
            timeout=config.timeout,
            retryable_statuses=OTLP_RETRYABLE_STATUSES,
            headers=headers,
            ssl_context=context,
        )

    async def send(self, signal: str, body: bytes) -> SendResult:
        if self._gzip is not None:
            body = await asyncio.get_running_loop().run_in_executor(self._gzip, gzip_fast, body)
        attempt = await self._client.attempt(self._urls[signal], body)
        if attempt.ok:
            return SendResult(True, rejected_spans=_rejected_count(signal, attempt.body))
        if attempt.status == 0:
            return SendResult(False, True, "connection", attempt.error)
        redirected = 300 <= attempt.status < 400  # (its body is a page for browsers; the error says where)
        detail = attempt.error if redirected else _http_error_message(attempt.body) or attempt.error
        return SendResult(False, attempt.retryable, f"http_{attempt.status}", detail, attempt.retry_after)

    async def close(self) -> None:
        await self._client.close()
        if self._gzip is not None:
            self._gzip.shutdown(wait=False, cancel_futures=True)


def _http_error_message(payload: bytes) -> str:
    try:
        return status_pb2.Status.FromString(payload).message
    except Exception:
        return payload[:200].decode("utf-8", "replace")


def file_output_paths(config: ExporterConfig) -> dict[str, Path]:
    """Where the file exporter writes each signal: traces to ``file_path``, metrics and logs beside it."""
    traces_path = Path(config.file_path)
    stem = traces_path.with_suffix("")
    return {
        "traces": traces_path,
        "metrics": Path(f"{stem}.metrics.jsonl"),
        "logs": Path(f"{stem}.logs.jsonl"),
    }


class FileSender:
    """Writes OTLP JSON lines to :func:`file_output_paths`, appending: a restarted sidecar adds to
    what it wrote before (``otelsignals demo`` removes the files first, so they hold one run)."""

    def __init__(self, config: ExporterConfig) -> None:
        self.paths = file_output_paths(config)
        self.paths["traces"].parent.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, BufferedWriter] = {}
        # Encoding and writing on a thread of its own (one: lines stay in the order sent), not on the
        # event loop: a 4 MiB batch took ~70 ms there, during which no receiver answered; now the loop
        # waits only while the encoder holds the GIL (bench/export_loop_stall.py).
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="otlp-file")
        self._closed = False

    async def send(self, signal: str, body: bytes) -> SendResult:
        # A send the exporter cancels at shutdown finishes its write on the thread: the batch, counted
        # as not delivered, may still be in the file (at least once, as over the network).
        return await asyncio.get_running_loop().run_in_executor(self._writer, self._write, signal, body)

    def _write(self, signal: str, body: bytes) -> SendResult:
        try:
            request = REQUEST_TYPES[signal].FromString(body)
            if isinstance(request, ExportTraceServiceRequest):  # signal == "traces"
                line = encode_trace_request(request)
            else:
                line = orjson.dumps(_hex_ids(json_format.MessageToDict(request)))
            handle = self._files.get(signal)
            if handle is None:
                handle = self._files[signal] = self.paths[signal].open("ab")
            handle.write(line + b"\n")
            handle.flush()
        except OSError as exc:
            return SendResult(False, True, "file_error", str(exc))
        return SendResult(True)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(self._writer, self._close_files)
        self._writer.shutdown(wait=False)

    def _close_files(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()


_ID_KEYS = {"traceId", "spanId", "parentSpanId"}


def _hex_ids(node: object) -> object:
    """OTLP JSON encodes ids as hex where protobuf's JSON mapping uses base64."""
    if isinstance(node, dict):
        return {
            k: base64.b64decode(v).hex() if k in _ID_KEYS and isinstance(v, str) else _hex_ids(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


def _read_optional(path: str) -> bytes | None:
    return Path(path).read_bytes() if path else None


def make_sender(config: ExporterConfig) -> Sender:
    if not config.endpoint:
        return FileSender(config)
    if config.protocol == "grpc":
        return GrpcSender(config)
    return HttpSender(config)
