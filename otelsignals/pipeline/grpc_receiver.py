"""The OTLP/gRPC receiver: the generic Export handler of the three services, its server options
(connection limits, keepalive, message sizes), token authentication before the body, TLS credentials."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from otelsignals.config import ReceiverConfig, split_host_port
from otelsignals.net import AddressInUse, ServerTls, address_in_use
from otelsignals.pipeline.intake import GRPC_TRANSPORT_LIMIT_FACTOR, Authenticator, Intake, RequestRejected
from otelsignals.pipeline.senders import (
    GRPC_METHODS,
)

logger = logging.getLogger("otelsignals.receiver")


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
            return (await intake.handle(signal, body, False, "grpc")).response.SerializeToString()
        except RequestRejected as rejected:
            code, message, metadata = (
                _GRPC_CODES[rejected.kind],
                rejected.message,
                _retry_info_metadata(rejected),
            )
        return _refused(context, code, message, metadata)

    return export


def _refused(
    context: grpc.aio.ServicerContext,
    code: grpc.StatusCode,
    message: str,
    metadata: tuple[tuple[str, bytes], ...] = (),
) -> bytes:
    """The answer of a refused call: a status set on it, not context.abort(). Abort raises an
    exception that grpc keeps with the call, whose traceback holds the handler's frame, so the
    context, the request body and the rejection's own traceback: a reference cycle that only the
    cyclic collector frees, when it next collects that generation. grpc sends no message with a
    status that is not OK."""
    context.set_code(code)
    context.set_details(message)
    context.set_trailing_metadata(metadata)
    return b""


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def grpc_server_options(receiver: ReceiverConfig, max_connections: int) -> list[tuple[str, int]]:
    limit = receiver.max_message_size * GRPC_TRANSPORT_LIMIT_FACTOR
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
                return _refused(context, grpc.StatusCode.UNAUTHENTICATED, message)

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
    config_key = "receiver.grpc.endpoint"
    host, port = split_host_port(endpoint, config_key)
    # Asked before a server exists: gRPC's C core would also print its own error line for it.
    if port and address_in_use(host, port):
        raise AddressInUse("OTLP/gRPC receiver", endpoint, config_key)
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
    try:
        if tls is None:
            bound = server.add_insecure_port(f"{host}:{port}")
        else:
            bound = server.add_secure_port(f"{host}:{port}", grpc_server_credentials(tls))
    except RuntimeError:  # grpcio raises this where older versions returned 0
        bound = 0
    if bound == 0:
        if address_in_use(host, port):
            raise AddressInUse("OTLP/gRPC receiver", endpoint, config_key)
        raise OSError(f"cannot listen on {endpoint} ({config_key})")
    await server.start()
    return server, bound


# -- HTTP --------------------------------------------------------------------------------------
