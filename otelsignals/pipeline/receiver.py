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
import contextlib
import errno
import logging
import resource
from collections.abc import Callable

import grpc
from aiohttp import web
from prometheus_client import Counter, Gauge

from otelsignals.config import ConfigError, ReceiverConfig
from otelsignals.net import load_auth_token, load_server_tls, serve_aiohttp
from otelsignals.pipeline.grpc_receiver import start_grpc_server
from otelsignals.pipeline.http_receiver import http_app
from otelsignals.pipeline.intake import Authenticator, Intake
from otelsignals.pipeline.service import Pipeline
from otelsignals.telemetry import ProblemLog

logger = logging.getLogger("otelsignals.receiver")


class _AcceptErrorLog:
    """A loop exception handler for accept() failures (EMFILE and the like): counted by errno and
    logged through the process's ProblemLog (the start, then summaries), instead of a traceback per
    attempt; anything else goes to the previous handler."""

    _RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

    def __init__(
        self, previous: Callable[..., object] | None, counter: Counter, problems: ProblemLog
    ) -> None:
        self.previous = previous
        self.counter = counter
        self.problems = problems

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        exc = context.get("exception")
        if not (isinstance(exc, OSError) and exc.errno in self._RESOURCE_ERRNOS):
            if self.previous is not None:
                self.previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        self.counter.labels(name).inc()
        self.problems.warning(
            f"accept_error_{name}",
            f"cannot accept connections: {exc.strerror} ({context.get('message', '')}); "
            "counted in otelsignals_receiver_accept_errors_total",
        )


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
        self._problems = pipeline.telemetry.problems
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
            loop.set_exception_handler(
                _AcceptErrorLog(loop.get_exception_handler(), self._accept_errors, self._problems)
            )
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
                listener="OTLP/HTTP receiver",
                # Bodies are decompressed by _read_body, against the size limit and with our errors.
                auto_decompress=False,
            )

    async def stop(self, grace: float = 2.0) -> None:
        if self._grpc is not None:
            await self._grpc.stop(grace)
        if self._http is not None:  # closes the listening socket first
            await self._http.cleanup()
        self.intake.close()
