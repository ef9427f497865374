"""A real OTLP downstream for tests: OTLP/gRPC + OTLP/HTTP servers on localhost.

The sink records exactly what it receives and can be scripted to fail, to be slow,
or to be "down" (listening sockets really closed, so clients get connection refused).

It runs entirely in background threads: the gRPC side is grpc's synchronous server
(its own thread pool, independent of any asyncio loop in the test process), the HTTP
side is an aiohttp server on a private asyncio loop in a dedicated thread. Synchronous
tests, async tests and a subprocess under test can all talk to it.

    with OtlpSink() as sink:
        exporter = OTLPSpanExporter(endpoint=sink.grpc_endpoint, insecure=True)
        ...
        sink.script(Response.unavailable(retry_after=0.05))   # next request fails, then success
        spans = sink.wait_for_spans(3)

Scripted answers are consumed by arriving requests in arrival order, whatever the
signal or transport. A `Response` only needs to name the failure for one transport:
`Response(grpc_code=UNAVAILABLE)` is answered with 503 over HTTP, and
`Response(http_status=400)` with INVALID_ARGUMENT over gRPC (see `Response.grpc_status`
and `Response.status_code`).
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import gzip
import json
import ssl
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web
from google.protobuf import json_format
from google.protobuf.any_pb2 import Any as AnyPb
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from tests.support.loop_thread import start_loop_thread

__all__ = ["OtlpSink", "Received", "Response"]

MAX_MESSAGE_BYTES = 128 * 1024 * 1024

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

# signal -> (gRPC service name, request class, response class, partial-success field)
_SIGNALS: dict[str, tuple[str, type[Message], type[Message], str]] = {
    "traces": (
        "opentelemetry.proto.collector.trace.v1.TraceService",
        trace_service_pb2.ExportTraceServiceRequest,
        trace_service_pb2.ExportTraceServiceResponse,
        "rejected_spans",
    ),
    "metrics": (
        "opentelemetry.proto.collector.metrics.v1.MetricsService",
        metrics_service_pb2.ExportMetricsServiceRequest,
        metrics_service_pb2.ExportMetricsServiceResponse,
        "rejected_data_points",
    ),
    "logs": (
        "opentelemetry.proto.collector.logs.v1.LogsService",
        logs_service_pb2.ExportLogsServiceRequest,
        logs_service_pb2.ExportLogsServiceResponse,
        "rejected_log_records",
    ),
}

# gRPC code -> HTTP status, used when a Response only names the gRPC side.
_GRPC_TO_HTTP: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNKNOWN: 500,
}

# HTTP status -> gRPC code, used when a Response only names the HTTP side.
_HTTP_TO_GRPC: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ABORTED,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    415: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED,
    500: grpc.StatusCode.INTERNAL,
    501: grpc.StatusCode.UNIMPLEMENTED,
    502: grpc.StatusCode.UNAVAILABLE,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


@dataclass
class Received:
    """One request the sink accepted (or, in `OtlpSink.malformed`, refused as undecodable)."""

    signal: str  # "traces" | "metrics" | "logs"
    transport: str  # "grpc" | "http"
    body: bytes  # raw Export*ServiceRequest bytes (HTTP: after gunzip/inflate; JSON: as sent)
    content_type: str  # "application/x-protobuf" for gRPC
    headers: dict[str, str]  # lower-cased names; gRPC metadata too ("-bin" values base64-encoded)
    received_at: float  # time.time() when the request arrived
    is_json: bool = False  # HTTP body was OTLP/JSON (body is the JSON text, not protobuf)
    seq: int = 0  # arrival number (1 = first request since start/clear); lists are ordered by it

    def decode(self) -> Message:
        """The Export*ServiceRequest message (OTLP/JSON is converted, hex ids included)."""
        return _decode_request(self.signal, self.body, self.is_json)


@dataclass(frozen=True)
class Response:
    """A scripted answer. Defaults are success; naming one transport's failure is enough."""

    grpc_code: grpc.StatusCode = grpc.StatusCode.OK
    http_status: int = 200
    # HTTP: Retry-After header; gRPC: google.rpc.RetryInfo detail in grpc-status-details-bin
    # (plus the "google.rpc.retryinfo-bin" trailer, which is what opentelemetry-python reads).
    retry_after_seconds: float | None = None
    message: str = ""
    partial_success_rejected: int = 0  # success, but partial_success.rejected_<items> = N
    # HTTP only: the Retry-After header verbatim (e.g. an HTTP-date), instead of retry_after_seconds.
    retry_after_header: str | None = None

    @classmethod
    def ok(cls, partial_success_rejected: int = 0, message: str = "") -> Response:
        return cls(partial_success_rejected=partial_success_rejected, message=message)

    @classmethod
    def unavailable(cls, retry_after: float | None = None, message: str = "") -> Response:
        return cls(grpc.StatusCode.UNAVAILABLE, 503, retry_after, message)

    @classmethod
    def throttled(cls, retry_after: float | None = None, message: str = "") -> Response:
        return cls(grpc.StatusCode.RESOURCE_EXHAUSTED, 429, retry_after, message)

    @classmethod
    def invalid(cls, message: str = "") -> Response:
        return cls(grpc.StatusCode.INVALID_ARGUMENT, 400, None, message)

    @property
    def grpc_status(self) -> grpc.StatusCode:
        """The gRPC code this response answers with (derived from http_status if only that is set)."""
        if self.grpc_code != grpc.StatusCode.OK:
            return self.grpc_code
        if 200 <= self.http_status < 300:
            return grpc.StatusCode.OK
        return _HTTP_TO_GRPC.get(
            self.http_status,
            grpc.StatusCode.UNAVAILABLE if self.http_status >= 500 else grpc.StatusCode.INVALID_ARGUMENT,
        )

    @property
    def status_code(self) -> int:
        """The HTTP status this response answers with (derived from grpc_code if only that is set)."""
        if self.http_status != 200 or self.grpc_code == grpc.StatusCode.OK:
            return self.http_status
        return _GRPC_TO_HTTP.get(self.grpc_code, 500)

    def rpc_status(self) -> status_pb2.Status:
        """The google.rpc.Status sent with a failure (gRPC trailer / HTTP body)."""
        code = self.grpc_status
        status = status_pb2.Status(code=code.value[0], message=self.message or _default_message(code))
        if self.retry_after_seconds is not None:
            detail = AnyPb()
            detail.Pack(error_details_pb2.RetryInfo(retry_delay=_duration(self.retry_after_seconds)))
            status.details.append(detail)
        return status


def _by_seq(item: Received) -> int:
    return item.seq


def _default_message(code: grpc.StatusCode) -> str:
    return f"otlp_sink: scripted {code.name}"


def _duration(seconds: float) -> Duration:
    whole = int(seconds)
    return Duration(seconds=whole, nanos=round((seconds - whole) * 1e9))


def _format_retry_after(seconds: float) -> str:
    # RFC 9110 wants whole seconds; fractional values are kept (the Python SDK parses
    # floats) so tests can script sub-second back-offs.
    if float(seconds).is_integer():
        return str(int(seconds))
    return f"{seconds:.3f}".rstrip("0")


# --------------------------------------------------------------------------------------
# decoding helpers


_HEX_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"})


def _hex_ids_to_base64(node: Any) -> Any:
    """OTLP/JSON carries trace/span ids as hex; protobuf JSON mapping expects base64."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key in _HEX_ID_KEYS and isinstance(value, str):
                out[key] = base64.b64encode(bytes.fromhex(value)).decode() if value else ""
            else:
                out[key] = _hex_ids_to_base64(value)
        return out
    if isinstance(node, list):
        return [_hex_ids_to_base64(item) for item in node]
    return node


def _decode_request(signal: str, body: bytes, is_json: bool) -> Message:
    request_cls = _SIGNALS[signal][1]
    message = request_cls()
    if is_json:
        json_format.ParseDict(_hex_ids_to_base64(json.loads(body)), message, ignore_unknown_fields=True)
    else:
        message.ParseFromString(body)
    return message


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """Walk protobuf wire format: (field number, wire type, int value or raw bytes)."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _read_varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = _read_varint(buf, pos)
        elif wire_type == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire_type == 2:
            length, pos = _read_varint(buf, pos)
            value, pos = buf[pos : pos + length], pos + length
        elif wire_type == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:  # groups do not occur in OTLP
            raise DecodeError(f"unsupported wire type {wire_type}")
        yield number, wire_type, value


def _raw_spans(request_body: bytes) -> Iterator[tuple[bytes, bytes, bytes]]:
    """(trace_id, span_id, exact Span bytes) from a serialized ExportTraceServiceRequest."""
    for num, wt, resource_spans in _fields(request_body):
        if num != 1 or wt != 2:  # ExportTraceServiceRequest.resource_spans
            continue
        for num2, wt2, scope_spans in _fields(resource_spans):
            if num2 != 2 or wt2 != 2:  # ResourceSpans.scope_spans
                continue
            for num3, wt3, span in _fields(scope_spans):
                if num3 != 2 or wt3 != 2:  # ScopeSpans.spans
                    continue
                trace_id = span_id = b""
                for num4, wt4, value in _fields(span):
                    if num4 == 1 and wt4 == 2:
                        trace_id = bytes(value)
                    elif num4 == 2 and wt4 == 2:
                        span_id = bytes(value)
                yield trace_id, span_id, bytes(span)


def _spans_of(item: Received) -> Iterator[tuple[bytes, bytes, bytes]]:
    if not item.is_json:
        yield from _raw_spans(item.body)
        return
    request = item.decode()
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield span.trace_id, span.span_id, span.SerializeToString()


# --------------------------------------------------------------------------------------
# the sink


class OtlpSink:
    """OTLP/gRPC + OTLP/HTTP downstream on `host`, recording what it accepts."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        grpc_port: int = 0,
        http_port: int = 0,
        tls: tuple[str, str] | None = None,
    ):
        """``tls`` = (certificate PEM path, key PEM path) serves gRPC and HTTPS with that identity."""
        self.host = host
        self.tls = tls
        self.grpc_port = grpc_port
        self.http_port = http_port
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._malformed: list[Received] = []
        self._attempts = 0
        self._script: deque[Response] = deque()
        self._delay = 0.0
        self._fallback: Response | None = None
        self._down = False
        self._started = False
        self._state_lock = threading.Lock()  # serialises start/stop/set_down
        self._grpc_server: grpc.Server | None = None
        self._http_loop: asyncio.AbstractEventLoop | None = None
        self._http_thread: threading.Thread | None = None
        self._http_runner: web.AppRunner | None = None

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> OtlpSink:
        with self._state_lock:
            if self._started:
                return self
            self._http_loop, self._http_thread = start_loop_thread("otlp-sink-http")
            self._started = True
            self._down = False
            try:
                self._start_grpc()
                self._start_http()
            except BaseException:
                self._stop_locked()
                raise
            return self

    def stop(self) -> None:
        with self._state_lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        if not self._started:
            return
        self._stop_grpc()
        self._stop_http()
        loop, thread = self._http_loop, self._http_thread
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=10)
        if loop is not None and not loop.is_running():
            loop.close()
        self._http_loop = self._http_thread = None
        self._started = False

    def __enter__(self) -> OtlpSink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def set_down(self, down: bool) -> None:
        """down=True closes both listening sockets (and live connections); False re-opens the same ports."""
        with self._state_lock:
            if not self._started:
                raise RuntimeError("OtlpSink is not started")
            if down == self._down:
                return
            if down:
                self._stop_grpc()
                self._stop_http()
            else:
                self._start_grpc()
                self._start_http()
            self._down = down

    @property
    def is_down(self) -> bool:
        return self._down

    # ---- scripting -------------------------------------------------------------------

    def script(self, *responses: Response) -> None:
        """The next len(responses) requests (any signal/transport) get these answers, then success."""
        with self._lock:
            self._script.extend(responses)

    def set_delay(self, seconds: float) -> None:
        """Sleep this long after a request arrives before answering it."""
        with self._lock:
            self._delay = max(0.0, float(seconds))

    def set_fallback(self, response: Response | None) -> None:
        """Answer every request with ``response`` once the script is used up (None: success again).
        Unlike `script`, this lasts for a time, not for a number of requests."""
        with self._lock:
            self._fallback = response

    @property
    def pending_script(self) -> int:
        with self._lock:
            return len(self._script)

    # ---- observations ----------------------------------------------------------------

    @property
    def grpc_endpoint(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.http_port}"

    def http_url(self, signal: str = "traces") -> str:
        return f"{self.http_endpoint}/v1/{signal}"

    @property
    def received(self) -> list[Received]:
        """Snapshot of the accepted requests, in arrival order."""
        with self._lock:
            return list(self._received)

    @property
    def malformed(self) -> list[Received]:
        """Requests refused because the body did not decode (answered 400 / INVALID_ARGUMENT)."""
        with self._lock:
            return list(self._malformed)

    @property
    def attempts(self) -> int:
        """Every request that arrived, accepted or not."""
        with self._lock:
            return self._attempts

    def clear(self) -> None:
        """Forget recorded requests and attempts (script, delay and up/down state are kept)."""
        with self._lock:
            self._received.clear()
            self._malformed.clear()
            self._attempts = 0

    def spans(self) -> list[tuple[bytes, bytes]]:
        return [(trace_id, span_id) for trace_id, span_id, _ in self._iter_spans()]

    def span_bytes(self) -> dict[tuple[bytes, bytes], bytes]:
        """(trace_id, span_id) -> the Span's bytes exactly as they were on the wire (last one wins)."""
        return {(trace_id, span_id): raw for trace_id, span_id, raw in self._iter_spans()}

    def resource_spans(self) -> list[trace_service_pb2.ExportTraceServiceRequest]:
        """Decoded ExportTraceServiceRequest of every accepted traces request, in order."""
        return [item.decode() for item in self.received if item.signal == "traces"]  # type: ignore[misc]

    def decoded_spans(self) -> list[trace_pb2.Span]:
        """Every span of every accepted traces request, decoded, in arrival order."""
        return [
            span
            for request in self.resource_spans()
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]

    def requests(self, signal: str) -> list[Message]:
        """Decoded Export*ServiceRequest of every accepted request of `signal`, in order."""
        return [item.decode() for item in self.received if item.signal == signal]

    def wait_for_spans(self, n: int, timeout: float = 10.0) -> list[tuple[bytes, bytes]]:
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans()
            if len(spans) >= n:
                return spans
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"expected at least {n} spans within {timeout}s, {len(spans)} arrived "
                    f"({len(self.received)} requests accepted, {self.attempts} attempts)"
                )
            time.sleep(0.01)

    def _iter_spans(self) -> Iterator[tuple[bytes, bytes, bytes]]:
        for item in self.received:
            if item.signal == "traces":
                yield from _spans_of(item)

    # ---- shared request handling -------------------------------------------------------

    def _arrive(self) -> tuple[int, Response, float]:
        with self._lock:
            self._attempts += 1
            if self._script:
                response = self._script.popleft()
            else:
                response = self._fallback if self._fallback is not None else Response()
            return self._attempts, response, self._delay

    def _record(self, item: Received, accepted: bool) -> None:
        # Recorded when answered; kept in arrival order even if a delayed request finishes late.
        with self._lock:
            bisect.insort(self._received if accepted else self._malformed, item, key=_by_seq)

    # ---- gRPC ------------------------------------------------------------------------

    def _start_grpc(self) -> None:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="otlp-sink-grpc"),
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                # a second server on the same port must fail, not silently share it
                ("grpc.so_reuseport", 0),
            ],
        )
        handlers = [
            grpc.method_handlers_generic_handler(
                service,
                {
                    "Export": grpc.unary_unary_rpc_method_handler(
                        self._grpc_handler(signal),
                        request_deserializer=None,
                        response_serializer=None,
                    )
                },
            )
            for signal, (service, *_rest) in _SIGNALS.items()
        ]
        server.add_generic_rpc_handlers(handlers)
        address = f"{self.host}:{self.grpc_port}"
        try:
            if self.tls is None:
                port = server.add_insecure_port(address)
            else:
                cert, key = (Path(p).read_bytes() for p in self.tls)
                port = server.add_secure_port(address, grpc.ssl_server_credentials([(key, cert)]))
        except RuntimeError as exc:  # newer grpcio raises instead of returning 0
            raise OSError(f"otlp_sink: cannot bind gRPC on {self.host}:{self.grpc_port}: {exc}") from exc
        if not port:
            raise OSError(f"otlp_sink: cannot bind gRPC on {self.host}:{self.grpc_port}")
        self.grpc_port = port
        server.start()
        self._grpc_server = server

    def _stop_grpc(self) -> None:
        server, self._grpc_server = self._grpc_server, None
        if server is not None:
            server.stop(grace=None).wait(timeout=10)

    def _grpc_handler(self, signal: str):
        _service, request_cls, response_cls, rejected_field = _SIGNALS[signal]

        def export(request: bytes, context: grpc.ServicerContext) -> bytes | None:
            arrived = time.time()
            seq, response, delay = self._arrive()
            if delay:
                finished = threading.Event()
                context.add_callback(finished.set)  # fires if the client gives up / server stops
                finished.wait(delay)
            headers: dict[str, str] = {}
            for key, value in context.invocation_metadata():
                name = key.lower()
                headers[name] = base64.b64encode(value).decode() if isinstance(value, bytes) else value
            item = Received(signal, "grpc", bytes(request), PROTOBUF, headers, arrived, seq=seq)
            if not context.is_active():
                return None  # nobody is waiting for the answer: not accepted
            code = response.grpc_status
            if code != grpc.StatusCode.OK:
                status = response.rpc_status()
                trailers: list[tuple[str, bytes]] = [("grpc-status-details-bin", status.SerializeToString())]
                if response.retry_after_seconds is not None:
                    retry_info = error_details_pb2.RetryInfo(
                        retry_delay=_duration(response.retry_after_seconds)
                    )
                    trailers.append(("google.rpc.retryinfo-bin", retry_info.SerializeToString()))
                context.set_trailing_metadata(trailers)
                context.abort(code, status.message)
            try:
                request_cls().ParseFromString(item.body)
            except DecodeError as exc:
                self._record(item, accepted=False)
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"otlp_sink: undecodable request: {exc}")
            self._record(item, accepted=True)
            answer = response_cls()
            if response.partial_success_rejected or response.message:
                setattr(answer.partial_success, rejected_field, response.partial_success_rejected)
                answer.partial_success.error_message = response.message
            return answer.SerializeToString()

        return export

    # ---- HTTP ------------------------------------------------------------------------

    def _run_on_http_loop(self, coro: Any) -> Any:
        assert self._http_loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._http_loop).result(timeout=15)

    def _start_http(self) -> None:
        self._run_on_http_loop(self._start_http_async())

    def _stop_http(self) -> None:
        if self._http_runner is not None:
            self._run_on_http_loop(self._stop_http_async())

    async def _start_http_async(self) -> None:
        app = web.Application(client_max_size=MAX_MESSAGE_BYTES)
        for signal in _SIGNALS:
            app.router.add_post(f"/v1/{signal}", self._http_handler(signal))
        runner = web.AppRunner(
            app,
            access_log=None,
            shutdown_timeout=0.2,
            handler_cancellation=True,  # a client that hangs up during set_delay is not "accepted"
            auto_decompress=False,  # Content-Encoding is handled (and checked) by the handler
        )
        await runner.setup()
        ssl_context = None
        if self.tls is not None:
            ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ssl_context.load_cert_chain(*self.tls)
        site = web.TCPSite(runner, self.host, self.http_port, reuse_address=True, ssl_context=ssl_context)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self.http_port = runner.addresses[0][1]
        self._http_runner = runner

    async def _stop_http_async(self) -> None:
        runner, self._http_runner = self._http_runner, None
        if runner is not None:
            await runner.cleanup()

    def _http_handler(self, signal: str):
        _service, _request_cls, response_cls, rejected_field = _SIGNALS[signal]

        async def export(request: web.Request) -> web.StreamResponse:
            arrived = time.time()
            seq, response, delay = self._arrive()
            raw = await request.read()
            if delay:
                await asyncio.sleep(delay)
            headers = {key.lower(): value for key, value in request.headers.items()}
            content_type = request.content_type  # lower-cased, parameters stripped
            is_json = content_type == JSON
            reply_type = JSON if is_json else PROTOBUF

            def refuse(http_status: int, message: str, body: bytes) -> web.Response:
                item = Received(signal, "http", body, content_type, headers, arrived, is_json, seq)
                self._record(item, accepted=False)
                return _http_error(Response(http_status=http_status, message=message), reply_type)

            encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
            try:
                if encoding == "gzip":
                    body = gzip.decompress(raw)
                elif encoding == "deflate":
                    body = zlib.decompress(raw)
                elif encoding in ("identity", ""):
                    body = raw
                else:
                    return refuse(415, f"otlp_sink: unsupported Content-Encoding {encoding!r}", raw)
            except (OSError, EOFError, zlib.error) as exc:
                return refuse(400, f"otlp_sink: bad {encoding} body: {exc}", raw)

            if response.status_code < 200 or response.status_code >= 300:
                return _http_error(response, reply_type)
            if content_type not in (PROTOBUF, JSON):
                return refuse(415, f"otlp_sink: unsupported Content-Type {content_type!r}", body)
            try:
                _decode_request(signal, body, is_json)
            except (DecodeError, json_format.ParseError, ValueError) as exc:
                return refuse(400, f"otlp_sink: undecodable request: {exc}", body)

            self._record(Received(signal, "http", body, content_type, headers, arrived, is_json, seq), True)
            answer = response_cls()
            if response.partial_success_rejected or response.message:
                setattr(answer.partial_success, rejected_field, response.partial_success_rejected)
                answer.partial_success.error_message = response.message
            if is_json:
                payload = json_format.MessageToJson(answer, indent=None).encode()
            else:
                payload = answer.SerializeToString()
            return web.Response(status=response.status_code, body=payload, content_type=reply_type)

        return export


def _http_error(response: Response, content_type: str) -> web.Response:
    status = response.rpc_status()
    if content_type == JSON:
        body = json_format.MessageToJson(status, indent=None).encode()
    else:
        body = status.SerializeToString()
    headers = {}
    if response.retry_after_header is not None:
        headers["Retry-After"] = response.retry_after_header
    elif response.retry_after_seconds is not None:
        headers["Retry-After"] = _format_retry_after(response.retry_after_seconds)
    return web.Response(status=response.status_code, body=body, content_type=content_type, headers=headers)
