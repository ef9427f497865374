"""OTLP receivers: gRPC (TraceService, MetricsService, LogsService) and HTTP (/v1/traces, ...).

Both parse the request themselves so that every kind of bad input gets its own clear answer and
counter: INVALID_ARGUMENT / 400 for bytes that are not OTLP, RESOURCE_EXHAUSTED / 413 for bodies over
``receiver.max_message_size``, UNAVAILABLE / 503 with a retry delay when the pipeline is full, and
``partial_success`` for spans refused one by one. A bad request never affects any other.

Compressed bodies are inflated here too, for both transports, in bounded steps that stop at
``receiver.max_message_size``: gRPC's own decompression is turned off because it inflates a message
(up to its transport limit) before any handler sees it. Connections are bounded as well: idle and
slow ones are closed (``idle_timeout``, ``header_timeout``, ``read_timeout``, the gRPC idle/age
limits), each receiver takes at most ``max_connections`` at once, and accept errors such as EMFILE
are logged once with a periodic count instead of one traceback each.

Optionally both receivers serve TLS only (``receiver.tls``, with client certificates required when
``client_ca_file`` is set), and require a token (``receiver.auth``): a request without it is refused
(401 / UNAUTHENTICATED) from its headers alone, before any of its body is read or inflated.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import hmac
import logging
import resource
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar, cast

import grpc
import orjson
from aiohttp import web
from google.protobuf import duration_pb2, json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from prometheus_client import Counter, Gauge

from otelsignals.config import ConfigError, ReceiverConfig, split_host_port
from otelsignals.net import ServerTls, load_auth_token, load_server_tls, serve_aiohttp
from otelsignals.otlp.json_decode import (
    OtlpJsonError,
    decode_logs_request,
    decode_metrics_request,
    decode_trace_request,
)
from otelsignals.pipeline.senders import (
    GRPC_METHODS,
    HTTP_PATHS,
    REQUEST_TYPES,
    RESPONSE_TYPES,
    ExportRequest,
)
from otelsignals.pipeline.service import Pipeline

logger = logging.getLogger("otelsignals.receiver")

# gRPC's own limit sits well above ours so that oversized requests reach our handler and are
# counted, while truly absurd ones are still cut off by the transport.
_GRPC_TRANSPORT_LIMIT_FACTOR = 4
# Compressed bodies are inflated this much at a time, so a bomb is stopped within one step of the limit.
_INFLATE_STEP = 1 << 20
# Above this compressed size (at most ~16 MiB inflated, a few ms), inflating runs in a worker thread
# (zlib releases the GIL) so the event loop keeps answering other clients.
_INFLATE_INLINE_MAX = 16 * 1024
_JSON_DECODERS: dict[str, Callable[[bytes], ExportRequest]] = {
    "traces": decode_trace_request,
    "metrics": decode_metrics_request,
    "logs": decode_logs_request,
}


class RequestRejected(Exception):
    """A request refused as a whole. ``reason`` labels the counter, ``message`` goes to the client."""

    def __init__(self, kind: str, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind  # "invalid", "unsupported_media", "too_large", "overloaded", "unauthenticated"
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


class Authenticator:
    """Checks the token of ``receiver.auth`` in a request's headers (or gRPC metadata), in constant
    time: ``authorization`` carries "Bearer <token>", any other header the bare token."""

    def __init__(self, token: str, header: str = "authorization") -> None:
        self.header = header.lower()
        self.bearer = self.header == "authorization"
        self._token = token.encode()

    def check(self, value: str | None) -> None:
        if value is None:
            raise RequestRejected("unauthenticated", "unauthenticated", f"missing {self.header} header")
        given = value.strip()
        if self.bearer:
            scheme, _, given = given.partition(" ")
            if scheme.lower() != "bearer":
                raise RequestRejected(
                    "unauthenticated", "unauthenticated", "the authorization header must be 'Bearer <token>'"
                )
        if not hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"), self._token):
            raise RequestRejected("unauthenticated", "unauthenticated", f"wrong token in {self.header}")


@dataclass(frozen=True)
class Answer:
    response: Message  # Export*ServiceResponse
    accepted: int


class Intake:
    """The transport-independent half of the receivers: size, parse, admit, hand over."""

    def __init__(self, config: ReceiverConfig, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.telemetry = pipeline.telemetry
        self.max_size = config.max_message_size
        self.retry_after = config.retry_after
        # One thread: bombs sent at once are inflated one after the other, and in the same malloc
        # arena, so they cost one max_message_size of memory rather than one each.
        self._inflater = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="inflate")

    def check_size(self, size: int) -> None:
        if size > self.max_size:
            raise RequestRejected(
                "too_large",
                "too_large",
                f"request of {size} bytes exceeds receiver.max_message_size ({self.max_size} bytes)",
            )

    def admit(self, size: int) -> None:
        if not self.pipeline.ready or not self.pipeline.has_room(size):
            raise RequestRejected(
                "overloaded", "overloaded", "otelsignals is at capacity; retry later", self.retry_after
            )

    def handle(self, signal: str, body: bytes, is_json: bool, transport: str) -> Answer:
        try:
            return self._handle(signal, body, is_json, transport)
        except RequestRejected as rejected:
            self.count_rejection(rejected, transport, signal)
            raise

    def _handle(self, signal: str, body: bytes, is_json: bool, transport: str) -> Answer:
        self.check_size(len(body))
        self.admit(len(body))
        request = self.parse(signal, body, is_json)
        telemetry = self.telemetry
        if signal != "traces":
            self.pipeline.ingest_passthrough(
                signal, request.SerializeToString() if is_json else body, request
            )
            telemetry.received_requests.labels(transport, signal, "accepted").inc()
            return Answer(RESPONSE_TYPES[signal](), 0)
        # parse() decodes a "traces" body with ExportTraceServiceRequest (REQUEST_TYPES, _JSON_DECODERS).
        traces = cast(ExportTraceServiceRequest, request)
        outcome = self.pipeline.ingest_traces(traces, None if is_json else body)
        telemetry.received_spans.labels(transport).inc(outcome.accepted_spans)
        response = ExportTraceServiceResponse()  # RESPONSE_TYPES["traces"]
        if outcome.rejected_spans:
            response.partial_success.rejected_spans = outcome.rejected_spans
            response.partial_success.error_message = outcome.message
            telemetry.refused_spans.labels(transport, "invalid_id").inc(outcome.rejected_spans)
            telemetry.logged_once.warning("invalid_span_ids", outcome.message, transport=transport)
            telemetry.received_requests.labels(transport, signal, "partial").inc()
        else:
            telemetry.received_requests.labels(transport, signal, "accepted").inc()
        return Answer(response, outcome.accepted_spans)

    def parse(self, signal: str, body: bytes, is_json: bool) -> ExportRequest:
        request_type = REQUEST_TYPES[signal]
        if is_json:
            # The OTLP codec, not protobuf's json_format: OTLP/JSON ids are hex, not base64.
            try:
                return _JSON_DECODERS[signal](body)
            except (OtlpJsonError, ValueError) as exc:
                raise RequestRejected("invalid", "bad_json", f"body is not OTLP/JSON: {exc}") from exc
        try:
            return request_type.FromString(body)
        except DecodeError as exc:
            raise RequestRejected(
                "invalid",
                "not_protobuf",
                f"body is not a protobuf {request_type.DESCRIPTOR.name}: {exc or 'undecodable bytes'}",
            ) from exc

    def count_rejection(self, rejected: RequestRejected, transport: str, signal: str) -> None:
        telemetry = self.telemetry
        telemetry.received_requests.labels(transport, signal, rejected.kind).inc()
        if rejected.kind == "overloaded":
            return  # the client retries; received_requests{outcome="overloaded"} counts it
        telemetry.rejected_requests.labels(transport, rejected.reason).inc()
        telemetry.logged_once.warning(
            f"rejected_{rejected.reason}",
            f"refused a {transport} {signal} request: {rejected.message}",
            transport=transport,
            reason=rejected.reason,
        )

    def close(self) -> None:
        self._inflater.shutdown(wait=False, cancel_futures=True)

    async def inflate(self, body: bytes, encoding: str) -> bytes:
        """``body`` decompressed, refused as ``too_large`` as soon as it grows past the size limit."""
        if len(body) <= _INFLATE_INLINE_MAX:
            return inflate(body, encoding, self.max_size)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._inflater, inflate, body, encoding, self.max_size)


def inflate(body: bytes, encoding: str, limit: int) -> bytes:
    """Decompress a gzip or deflate (zlib) body step by step, never holding more than ``limit`` bytes
    (plus one step) of output: a small bomb is refused without being inflated."""
    decompressor = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    chunks: list[bytes] = []
    size = 0
    pending = body
    try:
        while True:
            chunk = decompressor.decompress(pending, _INFLATE_STEP)
            size += len(chunk)
            if size > limit:
                # Freed now: the exception's traceback keeps this frame (and so the list) alive
                # until the cyclic garbage collector runs.
                chunks.clear()
                raise RequestRejected(
                    "too_large",
                    "too_large",
                    f"{encoding} request of {len(body)} bytes inflates to more than {limit} bytes: "
                    f"exceeds receiver.max_message_size ({limit} bytes)",
                )
            chunks.append(chunk)
            pending = decompressor.unconsumed_tail
            if decompressor.eof or (not pending and len(chunk) < _INFLATE_STEP):
                break
    except zlib.error as exc:
        raise RequestRejected("invalid", "bad_encoding", f"body is not valid {encoding}: {exc}") from exc
    if not decompressor.eof:
        raise RequestRejected("invalid", "bad_encoding", f"{encoding} body is truncated")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _grpc_compression(body: bytes) -> str | None:
    """The compression of a gRPC message, which grpcio does not tell handlers: gzip starts with
    1f 8b (never the start of a protobuf message: wire type 7 does not exist); deflate is a zlib
    stream (CMF 0x78 and a header checksum), which an OTLP request, whose only field is 1, never
    starts with either."""
    if body[:2] == b"\x1f\x8b":
        return "gzip"
    if len(body) >= 2 and body[0] == 0x78 and (body[0] << 8 | body[1]) % 31 == 0:
        return "deflate"
    return None


# -- gRPC --------------------------------------------------------------------------------------
_GRPC_CODES = {
    "invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "too_large": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "overloaded": grpc.StatusCode.UNAVAILABLE,
    "unauthenticated": grpc.StatusCode.UNAUTHENTICATED,
}


def _retry_info_metadata(rejected: RequestRejected) -> tuple[tuple[str, bytes], ...]:
    if rejected.retry_after is None:
        return ()
    delay = duration_pb2.Duration()
    delay.FromNanoseconds(int(rejected.retry_after * 1e9))
    retry_info = error_details_pb2.RetryInfo(retry_delay=delay)
    status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message=rejected.message)
    status.details.add().Pack(retry_info)
    # The rich status is the standard carrier; the OpenTelemetry Python exporter reads only the
    # bare RetryInfo trailer, so both are sent.
    return (
        ("grpc-status-details-bin", status.SerializeToString()),
        ("google.rpc.retryinfo-bin", retry_info.SerializeToString()),
    )


def _grpc_handler(
    intake: Intake, signal: str
) -> Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]:
    async def export(body: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            encoding = _grpc_compression(body)
            if encoding is not None:
                try:
                    intake.admit(len(body))
                    body = await intake.inflate(body, encoding)
                except RequestRejected as rejected:
                    if encoding == "deflate" and rejected.reason == "bad_encoding":
                        pass  # not a zlib stream after all: parsed (and judged) as protobuf below
                    else:
                        intake.count_rejection(rejected, "grpc", signal)
                        raise
            return intake.handle(signal, body, False, "grpc").response.SerializeToString()
        except RequestRejected as rejected:
            await context.abort(
                _GRPC_CODES[rejected.kind], rejected.message, trailing_metadata=_retry_info_metadata(rejected)
            )
            raise  # abort() raises; this line only satisfies the type checker

    return export


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def grpc_server_options(receiver: ReceiverConfig, max_connections: int) -> list[tuple[str, int]]:
    limit = receiver.max_message_size * _GRPC_TRANSPORT_LIMIT_FACTOR
    options = [
        # The limit applies to the message as received; our handler inflates it (see inflate()).
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", 16 * 1024**2),
        ("grpc.so_reuseport", 0),
        # grpcio would inflate a compressed message completely (up to the limit above, 256 MiB by
        # default) before calling the handler; the handler inflates it against max_message_size.
        ("grpc.per_message_decompression", 0),
        ("grpc.max_allowed_incoming_connections", max_connections),
        # A connection that never completes the HTTP/2 handshake is closed.
        ("grpc.server_handshake_timeout_ms", _ms(receiver.header_timeout)),
        # Dead peers are found by pings; idle and old connections are closed with GOAWAY.
        ("grpc.keepalive_time_ms", 120_000),
        ("grpc.keepalive_timeout_ms", 20_000),
    ]
    if receiver.grpc_max_connection_idle > 0:
        options.append(("grpc.max_connection_idle_ms", _ms(receiver.grpc_max_connection_idle)))
    if receiver.grpc_max_connection_age > 0:
        options.append(("grpc.max_connection_age_ms", _ms(receiver.grpc_max_connection_age)))
        options.append(("grpc.max_connection_age_grace_ms", 30_000))
    return options


# The request and response types of the intercepted methods' handlers (generic in grpc's stubs).
_Request = TypeVar("_Request")
_Response = TypeVar("_Response")


class _GrpcAuthentication(grpc.aio.ServerInterceptor):
    """Refuses export calls without the token from their metadata alone: the refusal handler is a
    client-streaming one that never asks for the request message, so it is neither handed to Python
    nor inflated (grpc only buffers what its flow-control window lets in before the call ends)."""

    def __init__(self, intake: Intake, authenticator: Authenticator) -> None:
        self.intake = intake
        self.authenticator = authenticator
        self.signals = {method: signal for signal, method in GRPC_METHODS.items()}

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[_Request, _Response] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[_Request, _Response] | None:
        signal = self.signals.get(handler_call_details.method)
        if signal is None:
            return await continuation(handler_call_details)
        header = self.authenticator.header
        metadata = handler_call_details.invocation_metadata or ()
        value = next((str(v) for k, v in metadata if k.lower() == header), None)
        try:
            self.authenticator.check(value)
        except RequestRejected as rejected:
            self.intake.count_rejection(rejected, "grpc", signal)
            message = rejected.message

            async def refuse(requests: object, context: grpc.aio.ServicerContext) -> bytes:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
                raise AssertionError("abort() raises")

            return grpc.stream_unary_rpc_method_handler(refuse)
        return await continuation(handler_call_details)


def grpc_server_credentials(tls: ServerTls) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(tls.private_key, tls.certificate_chain)],
        root_certificates=tls.client_ca,
        require_client_auth=tls.client_ca is not None,
    )


async def start_grpc_server(
    intake: Intake,
    endpoint: str,
    receiver: ReceiverConfig | None = None,
    max_connections: int = 1000,
    tls: ServerTls | None = None,
    authenticator: Authenticator | None = None,
) -> tuple[grpc.aio.Server, int]:
    receiver = receiver or ReceiverConfig(max_message_size=intake.max_size)
    interceptors = [_GrpcAuthentication(intake, authenticator)] if authenticator is not None else []
    server = grpc.aio.server(
        options=grpc_server_options(receiver, max_connections), interceptors=interceptors
    )
    for signal, method in GRPC_METHODS.items():
        service, name = method.strip("/").split("/")
        # No (de)serializers: the handler takes and returns the encoded bytes.
        handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(
            _grpc_handler(intake, signal), request_deserializer=None, response_serializer=None
        )
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, {name: handler}),))
    host, port = split_host_port(endpoint, "receiver.grpc.endpoint")
    if tls is None:
        bound = server.add_insecure_port(f"{host}:{port}")
    else:
        bound = server.add_secure_port(f"{host}:{port}", grpc_server_credentials(tls))
    if bound == 0:
        raise OSError(f"cannot listen on {endpoint} (receiver.grpc.endpoint)")
    await server.start()
    return server, bound


# -- HTTP --------------------------------------------------------------------------------------
_HTTP_STATUS = {
    "invalid": 400,
    "unauthenticated": 401,
    "unsupported_media": 415,
    "too_large": 413,
    "overloaded": 503,
    "timeout": 408,
}
_GRPC_CODE_OF_KIND = {
    "unauthenticated": code_pb2.UNAUTHENTICATED,
    "invalid": code_pb2.INVALID_ARGUMENT,
    "timeout": code_pb2.DEADLINE_EXCEEDED,
    "unsupported_media": code_pb2.INVALID_ARGUMENT,
    "too_large": code_pb2.RESOURCE_EXHAUSTED,
    "overloaded": code_pb2.UNAVAILABLE,
}
_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"


def _http_reply(
    status: int, message: Message, is_json: bool, headers: dict[str, str] | None = None
) -> web.Response:
    body = orjson.dumps(json_format.MessageToDict(message)) if is_json else message.SerializeToString()
    content_type = _JSON if is_json else _PROTOBUF
    return web.Response(status=status, body=body, content_type=content_type, headers=headers)


def _http_error(
    rejected: RequestRejected, is_json: bool, headers: dict[str, str] | None = None
) -> web.Response:
    status = status_pb2.Status(code=_GRPC_CODE_OF_KIND[rejected.kind], message=rejected.message)
    if rejected.retry_after is not None:
        headers = {**(headers or {}), "Retry-After": str(max(1, round(rejected.retry_after)))}
    return _http_reply(_HTTP_STATUS[rejected.kind], status, is_json, headers)


async def _read_body(request: web.Request, intake: Intake, timeout: float | None = None) -> bytes:
    """The request body, decompressed, never holding more than the size limit in memory."""
    try:
        async with asyncio.timeout(timeout):
            body = await _read_raw_body(request, intake)
    except TimeoutError:
        raise RequestRejected(
            "timeout", "read_timeout", f"the body did not arrive within receiver.read_timeout ({timeout}s)"
        ) from None
    encoding = request.headers.get("Content-Encoding", "identity").lower().strip()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise RequestRejected("invalid", "bad_encoding", f"unsupported Content-Encoding {encoding!r}")
    return await intake.inflate(body, encoding)


async def _read_raw_body(request: web.Request, intake: Intake) -> bytes:
    if request.content_length is not None:
        intake.check_size(request.content_length)
    chunks = []
    size = 0
    async for chunk in request.content.iter_chunked(1 << 20):
        size += len(chunk)
        intake.check_size(size)
        chunks.append(chunk)
    return b"".join(chunks)


_BEARER_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="otelsignals"'}


def _http_handler(
    intake: Intake,
    signal: str,
    read_timeout: float | None = None,
    authenticator: Authenticator | None = None,
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def export(request: web.Request) -> web.Response:
        media_type = request.content_type.lower()
        is_json = media_type == _JSON
        if authenticator is not None:
            try:
                authenticator.check(request.headers.get(authenticator.header))
            except RequestRejected as rejected:
                intake.count_rejection(rejected, "http", signal)
                response = _http_error(rejected, is_json, _BEARER_CHALLENGE if authenticator.bearer else None)
                response.force_close()  # the body is not read
                return response
        try:
            if media_type not in (_PROTOBUF, _JSON):
                raise RequestRejected(
                    "unsupported_media",
                    "bad_content_type",
                    f"Content-Type must be {_PROTOBUF} or {_JSON}, got {media_type or 'none'!r}",
                )
            intake.admit(request.content_length or 0)
            body = await _read_body(request, intake, read_timeout)
        except RequestRejected as rejected:
            intake.count_rejection(rejected, "http", signal)
            response = _http_error(rejected, is_json)
            if rejected.kind in ("too_large", "overloaded", "timeout"):
                # The rest of the body was not read, so the connection cannot be reused.
                response.force_close()
            return response
        try:
            answer = intake.handle(signal, body, is_json, "http")
        except RequestRejected as rejected:
            return _http_error(rejected, is_json)
        return _http_reply(200, answer.response, is_json)

    return export


def http_app(
    intake: Intake, read_timeout: float | None = None, authenticator: Authenticator | None = None
) -> web.Application:
    # The body is read in chunks against our own limit, so aiohttp's limit only has to let it through.
    app = web.Application(client_max_size=intake.max_size * _GRPC_TRANSPORT_LIMIT_FACTOR)
    for signal, path in HTTP_PATHS.items():
        app.router.add_post(path, _http_handler(intake, signal, read_timeout, authenticator))
    return app


class _AcceptErrorLog:
    """A loop exception handler that reports accept() failures (EMFILE and the like) once, then a
    count every minute, instead of a traceback per attempt; anything else goes to the previous handler."""

    _RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
    _SUMMARY_INTERVAL = 60.0

    def __init__(self, previous: Callable[..., object] | None, counter: Counter) -> None:
        self.previous = previous
        self.counter = counter
        self.suppressed = 0
        self.last_report = 0.0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        exc = context.get("exception")
        if not (isinstance(exc, OSError) and exc.errno in self._RESOURCE_ERRNOS):
            if self.previous is not None:
                self.previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        self.counter.labels(errno.errorcode.get(exc.errno or 0, str(exc.errno))).inc()
        now = time.monotonic()
        if self.last_report and now - self.last_report < self._SUMMARY_INTERVAL:
            self.suppressed += 1
            return
        first = not self.last_report
        self.last_report = now
        message = f"cannot accept connections: {exc.strerror} ({context.get('message', '')})"
        if first:
            message += "; later ones are counted in otelsignals_receiver_accept_errors_total, once a minute"
        else:
            message += f"; {self.suppressed} more in the last minute"
        self.suppressed = 0
        logger.error(message, extra={"fields": {"kind": "accept_error", "errno": exc.errno}})


def connection_limit(configured: int) -> int:
    """``receiver.max_connections``, lowered if the open-files limit could not hold that many
    connections on both receivers with room left for everything else."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(16, min(configured, (soft - 128) // 2))


def _raise_open_files_limit() -> None:
    """Best effort, as Go programs do: the soft open-files limit up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


class Receivers:
    """Both receivers, started and stopped together."""

    def __init__(self, config: ReceiverConfig, pipeline: Pipeline) -> None:
        """The receivers of the ``receiver`` section, handing what they accept to ``pipeline``."""
        self.config = config
        self.intake = Intake(config, pipeline)
        self._grpc: grpc.aio.Server | None = None
        self._http: web.AppRunner | None = None
        self.grpc_port = 0
        self.http_port = 0
        registry = pipeline.telemetry.registry
        self._connections_gauge = Gauge(
            "otelsignals_receiver_http_connections",
            "Open connections to the OTLP/HTTP receiver.",
            registry=registry,
        )
        self._accept_errors = Counter(
            "otelsignals_receiver_accept_errors",
            "Connections the process could not accept, by errno (EMFILE: out of file descriptors).",
            ["errno"],
            registry=registry,
        )

    async def start(self) -> None:
        receiver = self.config
        loop = asyncio.get_running_loop()
        if not isinstance(loop.get_exception_handler(), _AcceptErrorLog):
            loop.set_exception_handler(_AcceptErrorLog(loop.get_exception_handler(), self._accept_errors))
        _raise_open_files_limit()
        max_connections = connection_limit(receiver.max_connections)
        if max_connections < receiver.max_connections:
            logger.warning(
                "receiver.max_connections lowered to fit the open-files limit",
                extra={"fields": {"configured": receiver.max_connections, "effective": max_connections}},
            )
        try:  # checked by config.validate already; read again now, as they are used
            tls = load_server_tls(receiver.tls)
            token = load_auth_token(receiver.auth)
        except ConfigError as exc:
            raise OSError(str(exc)) from exc
        authenticator = Authenticator(token, receiver.auth.header) if token else None
        if receiver.grpc.enabled:
            self._grpc, self.grpc_port = await start_grpc_server(
                self.intake, receiver.grpc.endpoint, receiver, max_connections, tls, authenticator
            )
        if receiver.http.enabled:
            self._http, self.http_port = await serve_aiohttp(
                http_app(self.intake, receiver.read_timeout, authenticator),
                receiver.http.endpoint,
                "receiver.http.endpoint",
                telemetry=self.intake.telemetry,
                max_connections=max_connections,
                idle_timeout=receiver.idle_timeout,
                header_timeout=receiver.header_timeout,
                ssl_context=tls.ssl_context() if tls is not None else None,
                label="http",
                connections_gauge=self._connections_gauge,
                # Bodies are decompressed by _read_body, against the size limit and with our errors.
                auto_decompress=False,
            )

    async def stop(self, grace: float = 2.0) -> None:
        if self._grpc is not None:
            await self._grpc.stop(grace)
        if self._http is not None:  # closes the listening socket first
            await self._http.cleanup()
        self.intake.close()
