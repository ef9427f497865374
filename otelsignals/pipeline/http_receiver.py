"""The OTLP/HTTP receiver: ``/v1/traces``, ``/v1/metrics``, ``/v1/logs`` in protobuf or JSON, and its
answers (status codes, Retry-After, the OTLP Status body)."""

from __future__ import annotations

import asyncio
import logging

import orjson
from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import code_pb2, status_pb2

from otelsignals.net import GuardedConnection
from otelsignals.pipeline.intake import GRPC_TRANSPORT_LIMIT_FACTOR, Authenticator, Intake, RequestRejected
from otelsignals.pipeline.senders import (
    HTTP_PATHS,
)

logger = logging.getLogger("otelsignals.receiver")

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


class _ExportRoute:
    """The handlers of one signal's path: the export, and its ``Expect: 100-continue`` handler,
    both refusing a request on its headers alone before any of its body is read."""

    def __init__(
        self, intake: Intake, signal: str, read_timeout: float | None, authenticator: Authenticator | None
    ) -> None:
        self.intake, self.signal = intake, signal
        self.read_timeout, self.authenticator = read_timeout, authenticator

    def refused_before_the_body(self, request: web.Request) -> web.Response | None:
        """The answer to a request refused on its headers (token, media type, size, room)."""
        intake, authenticator = self.intake, self.authenticator
        media_type = request.content_type.lower()
        is_json = media_type == _JSON
        if authenticator is not None:
            try:
                authenticator.check(request.headers.get(authenticator.header))
            except RequestRejected as rejected:
                intake.count_rejection(rejected, "http", self.signal)
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
        except RequestRejected as rejected:
            intake.count_rejection(rejected, "http", self.signal)
            response = _http_error(rejected, is_json)
            if rejected.kind in ("too_large", "overloaded"):
                response.force_close()  # the body is not read
            return response
        return None

    async def expect(self, request: web.Request) -> web.Response | None:
        """``Expect: 100-continue``: the headers are checked before the client is asked for its body
        (aiohttp's own handler said 100 Continue at once: a client without a token, or with a body
        over the size limit, uploaded all of it to be refused)."""
        protocol = request.protocol
        if isinstance(protocol, GuardedConnection):
            protocol.request_started()  # its headers are in (the middleware that says so runs later)
        refused = self.refused_before_the_body(request)
        if refused is not None:
            refused.force_close()  # no body was asked for: the client may still send one
            return refused
        expected = request.headers.get("Expect", "")
        if request.version != (1, 1):
            return None
        if expected.lower() != "100-continue":
            raise web.HTTPExpectationFailed(text=f"Unknown Expect: {expected}")
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        # aiohttp's own handler does the same: the bytes written so far are no part of the answer
        # (a handler error after them would otherwise find "a response already sent").
        request.writer.output_size = 0
        return None

    async def export(self, request: web.Request) -> web.Response:
        refused = self.refused_before_the_body(request)
        if refused is not None:
            return refused
        intake = self.intake
        is_json = request.content_type.lower() == _JSON
        try:
            body = await _read_body(request, intake, self.read_timeout)
        except RequestRejected as rejected:
            intake.count_rejection(rejected, "http", self.signal)
            response = _http_error(rejected, is_json)
            if rejected.kind in ("too_large", "overloaded", "timeout"):
                # The rest of the body was not read, so the connection cannot be reused.
                response.force_close()
            return response
        try:
            answer = await intake.handle(self.signal, body, is_json, "http")
        except RequestRejected as rejected:
            return _http_error(rejected, is_json)
        return _http_reply(200, answer.response, is_json)


def http_app(
    intake: Intake, read_timeout: float | None = None, authenticator: Authenticator | None = None
) -> web.Application:
    # The body is read in chunks against our own limit, so aiohttp's limit only has to let it through.
    app = web.Application(client_max_size=intake.max_size * GRPC_TRANSPORT_LIMIT_FACTOR)
    for signal, path in HTTP_PATHS.items():
        route = _ExportRoute(intake, signal, read_timeout, authenticator)
        app.router.add_post(path, route.export, expect_handler=route.expect)
    return app
