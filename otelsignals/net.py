"""Network helpers: serving an aiohttp application on a configured host:port (optionally with TLS, a
connection limit and idle/header timeouts), server TLS material and tokens read from the config's
files."""

from __future__ import annotations

import asyncio
import errno
import logging
import re
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from otelsignals.config import (
    ENV_PREFIX,
    ConfigError,
    EncryptedKeyError,
    ReceiverAuthConfig,
    ReceiverTlsConfig,
    no_passphrase,
    split_host_port,
)

if TYPE_CHECKING:
    from prometheus_client import Gauge

    from otelsignals.telemetry import Telemetry

logger = logging.getLogger("otelsignals.receiver")


# -- serving -----------------------------------------------------------------------------------
class AddressInUse(OSError):
    """A listener's address is held by another process. Not a bug, and nothing a traceback would
    explain: the message says which listener, which address, and which setting moves it."""

    def __init__(self, listener: str, endpoint: str, config_key: str) -> None:
        environment_variable = ENV_PREFIX + config_key.upper().replace(".", "__")
        super().__init__(
            f"the {listener} cannot listen on {endpoint}: the address is already in use (another "
            f"process holds it); set {config_key} (or {environment_variable}) to a free address, "
            "or stop that process"
        )
        self.errno = errno.EADDRINUSE


def address_in_use(host: str, port: int) -> bool:
    """Whether ``host:port`` cannot be bound because something already listens there (gRPC only
    says that binding failed, not why). Bound as the servers bind, with SO_REUSEADDR, so a port
    merely in TIME_WAIT does not count."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return False
    for family, kind, protocol, _, address in addresses:
        with socket.socket(family, kind, protocol) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
    return False


class ConnectionGuard:
    """Counts a server's open connections and refuses new ones beyond ``limit`` (503, then closed);
    closes a connection whose request headers are not complete ``header_timeout`` after their first
    byte. Refusals are counted in ``rejected_requests{transport=label}`` and logged (rate-limited)."""

    def __init__(
        self,
        limit: int,
        header_timeout: float,
        telemetry: Telemetry,
        label: str,
        limit_key: str,
        gauge: Gauge | None = None,
    ) -> None:
        self.limit = limit
        self.header_timeout = header_timeout
        self.telemetry = telemetry
        self.label = label
        self.limit_key = limit_key
        self.gauge = gauge
        self.open = 0
        body = f"otelsignals: too many connections ({limit_key})\n".encode()
        self.busy_response = (
            b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n"
            b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )

    def count(self, change: int) -> None:
        self.open += change
        if self.gauge is not None:
            self.gauge.set(self.open)

    def refuse(self, reason: str, message: str) -> None:
        label = self.label
        self.telemetry.rejected_requests.labels(label, reason).inc()
        kind = f"rejected_{reason}" if label == "http" else f"{label}_rejected_{reason}"
        self.telemetry.problems.warning(
            kind, f"closed an {label} connection: {message}", transport=label, reason=reason
        )

    def count_failed_handshakes(self, context: ssl.SSLContext) -> None:
        """Has ``context``'s server connections count and log a failed TLS handshake (a plain-text
        client on the TLS port, a client certificate missing or not from the configured CA), which
        asyncio otherwise closes without a word. A client that leaves before its handshake is done
        (a TCP health check) is no failure; a handshake that takes longer than the header timeout is
        closed by asyncio and not seen here."""
        guard = self

        class HandshakeCounted(ssl.SSLObject):
            def do_handshake(self) -> None:
                try:
                    super().do_handshake()
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    raise  # the handshake goes on when the peer's bytes come
                except ssl.SSLError as exc:
                    guard.refuse("tls_handshake", f"TLS handshake failed: {handshake_failure(exc)}")
                    raise

        context.sslobject_class = HandshakeCounted


def handshake_failure(error: ssl.SSLError) -> str:
    """What a failed server-side TLS handshake means, from OpenSSL's reason code."""
    reason = error.reason or type(error).__name__
    if reason in ("HTTP_REQUEST", "WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL", "HTTPS_PROXY_REQUEST"):
        return f"{reason} (a client speaking plain text to the TLS port?)"
    if isinstance(error, ssl.SSLCertVerificationError) or "CERTIFICATE" in reason:
        return f"{reason} (the client's certificate is missing or not from receiver.tls.client_ca_file)"
    return reason


class GuardedConnection(web.RequestHandler):
    """aiohttp's connection protocol with a connection limit and a header timeout. (The idle timeout
    is aiohttp's keepalive_timeout, which also runs before a connection's first request.) Over TLS
    the connection is counted once its handshake is done; the handshake has its own timeout."""

    def __init__(self, guard: ConnectionGuard, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._refused = False
        self._awaiting_headers = True
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        guard = self._guard
        if guard.open >= guard.limit:
            self._refused = True
            guard.refuse(
                "too_many_connections",
                f"{guard.open} connections are open ({guard.limit_key} is {guard.limit}); "
                "new ones get 503 and are closed",
            )
            assert isinstance(transport, asyncio.WriteTransport)
            transport.write(guard.busy_response)
            transport.close()
            return
        guard.count(+1)
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._refused:
            return
        self._guard.count(-1)
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._awaiting_headers and self._header_timer is None:
            loop = asyncio.get_running_loop()
            self._header_timer = loop.call_later(self._guard.header_timeout, self._header_timeout)
        super().data_received(data)

    def request_started(self) -> None:
        self._awaiting_headers = False
        self._cancel_header_timer()

    def request_finished(self) -> None:
        self._awaiting_headers = True

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def log_exception(self, *args: Any, **kwargs: Any) -> None:
        """aiohttp logs a request it cannot parse (a bad header, a Content-Length that lies) with
        the parser's traceback, which quotes the raw line (a bearer token in it), on every such
        request, uncounted. Such a request is counted and logged as a repeated problem instead,
        naming the kind of error only (the traceback goes to the debug log); any other error (one of
        our handlers failing) is logged as aiohttp logs it."""
        error = kwargs.get("exc_info")
        if not isinstance(error, HttpProcessingError):
            super().log_exception(*args, **kwargs)
            return
        self._guard.refuse("bad_http", f"a request that could not be parsed ({type(error).__name__}) got 400")
        logger.debug(*args, **kwargs)

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self._awaiting_headers:
            self._guard.refuse(
                "header_timeout",
                "request headers not complete within receiver.header_timeout "
                f"({self._guard.header_timeout}s)",
            )
            self.force_close()


@web.middleware
async def mark_request(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Tells a guarded connection its request's headers are in (ends its header timeout)."""
    protocol = request.protocol
    if isinstance(protocol, GuardedConnection):
        protocol.request_started()
    try:
        return await handler(request)
    finally:
        if isinstance(protocol, GuardedConnection):
            protocol.request_finished()


# Connections waiting to be accepted (aiohttp's default is 128: a burst of new connections then
# waits a second each for a SYN retransmit); the kernel caps it at net.core.somaxconn.
_LISTEN_BACKLOG = 1024


class _Site(web.BaseSite):
    """A TCP site whose connections are made by ``factory`` (aiohttp's, or a guarded one)."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        factory: Callable[[], asyncio.BaseProtocol],
        ssl_context: ssl.SSLContext | None,
        ssl_handshake_timeout: float | None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host = host
        self._port = port
        self._factory = factory
        self._ssl_handshake_timeout = ssl_handshake_timeout if ssl_context is not None else None

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self._port}"

    @property
    def bound_port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._factory,
            self._host,
            self._port,
            ssl=self._ssl_context,
            ssl_handshake_timeout=self._ssl_handshake_timeout,
            backlog=_LISTEN_BACKLOG,
            reuse_address=True,
        )


async def serve_aiohttp(
    app: web.Application,
    endpoint: str,
    config_key: str,
    *,
    telemetry: Telemetry | None = None,
    max_connections: int = 0,
    idle_timeout: float | None = None,
    header_timeout: float = 10.0,
    ssl_context: ssl.SSLContext | None = None,
    label: str | None = None,
    connections_gauge: Gauge | None = None,
    listener: str = "",
    **handler_options: Any,
) -> tuple[web.AppRunner, int]:
    """Start ``app`` on ``endpoint``; returns the runner (whose cleanup also closes the listening
    socket) and the bound port.

    With ``max_connections`` (and ``telemetry`` to count refusals), connections beyond it get 503 and
    are closed, and a request's headers must be complete ``header_timeout`` after its first byte (the
    TLS handshake too). ``idle_timeout`` closes connections without a request in progress. Refusals are
    counted under ``label`` (default: the config section, e.g. ``admin``) and name
    ``<section>.max_connections``. An address already in use raises :class:`AddressInUse` naming
    ``listener`` (default: ``config_key``). ``handler_options`` go to aiohttp's request handler."""
    section = config_key.split(".", 1)[0]
    handler_options.setdefault("access_log", None)
    if idle_timeout is not None:
        handler_options["keepalive_timeout"] = idle_timeout
    guard = None
    if max_connections > 0:
        if telemetry is None:
            raise ValueError("serve_aiohttp: max_connections needs telemetry to count refusals")
        guard = ConnectionGuard(
            max_connections,
            header_timeout,
            telemetry,
            label or section,
            f"{section}.max_connections",
            connections_gauge,
        )
        if mark_request not in app.middlewares:
            app.middlewares.insert(0, mark_request)
    runner = web.AppRunner(app, handle_signals=False, **handler_options)
    await runner.setup()
    manager = runner.server
    assert manager is not None
    factory: Callable[[], asyncio.BaseProtocol] = manager
    if guard is not None:
        loop = asyncio.get_running_loop()
        guarded = guard

        def factory() -> asyncio.BaseProtocol:
            return GuardedConnection(guarded, manager, loop=loop, **handler_options)

    if guard is not None and ssl_context is not None:
        guard.count_failed_handshakes(ssl_context)
    host, port = split_host_port(endpoint, config_key)
    site = _Site(runner, host, port, factory, ssl_context, header_timeout if guard else None)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        if exc.errno == errno.EADDRINUSE:
            raise AddressInUse(listener or config_key, endpoint, config_key) from None
        raise OSError(f"cannot listen on {endpoint} ({config_key}): {exc.strerror}") from exc
    return runner, site.bound_port


# -- TLS and tokens from the config ------------------------------------------------------------
@dataclass(frozen=True)
class ServerTls:
    """A server certificate and key, and optionally the CA bundle client certificates must chain to
    (mutual TLS), read and checked once."""

    cert_file: str
    key_file: str
    client_ca_file: str
    certificate_chain: bytes
    private_key: bytes
    client_ca: bytes | None

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)  # TLS 1.2 at least
        context.load_cert_chain(self.cert_file, self.key_file, password=no_passphrase)
        if self.client_ca is not None:
            context.load_verify_locations(cadata=self.client_ca.decode("ascii"))
            context.verify_mode = ssl.CERT_REQUIRED
        return context


def _read(path: str, key: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(key, f"cannot read {path}: {exc.strerror}") from exc


def _pem_certificates(data: bytes, path: str, key: str) -> None:
    try:
        text = data.decode("ascii")
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_verify_locations(cadata=text)
    except (UnicodeDecodeError, ValueError, ssl.SSLError) as exc:
        raise ConfigError(key, f"{path} holds no PEM certificate") from exc


def load_server_tls(tls: ReceiverTlsConfig, section: str = "receiver.tls") -> ServerTls | None:
    """The TLS material ``tls`` names, read and checked (None when TLS is off); a missing, unreadable
    or invalid file raises :class:`ConfigError` naming its key."""
    cert_key, key_key, ca_key = f"{section}.cert_file", f"{section}.key_file", f"{section}.client_ca_file"
    if not tls.cert_file and not tls.key_file:
        if tls.client_ca_file:
            raise ConfigError(ca_key, f"client certificates need TLS: set {cert_key} and {key_key} too")
        return None
    if not tls.cert_file:
        raise ConfigError(cert_key, f"{key_key} is set but {cert_key} is not: set both or neither")
    if not tls.key_file:
        raise ConfigError(key_key, f"{cert_key} is set but {key_key} is not: set both or neither")
    chain = _read(tls.cert_file, cert_key)
    private_key = _read(tls.key_file, key_key)
    client_ca = _read(tls.client_ca_file, ca_key) if tls.client_ca_file else None
    _pem_certificates(chain, tls.cert_file, cert_key)
    if client_ca is not None:
        _pem_certificates(client_ca, tls.client_ca_file, ca_key)
    material = ServerTls(tls.cert_file, tls.key_file, tls.client_ca_file, chain, private_key, client_ca)
    try:
        material.ssl_context()
    except EncryptedKeyError:
        raise ConfigError(
            key_key, f"{tls.key_file} is encrypted: a key without a passphrase is needed"
        ) from None
    except (ValueError, OSError) as exc:  # ssl.SSLError is an OSError
        reason = getattr(exc, "reason", None) or str(exc)
        raise ConfigError(
            key_key, f"{tls.key_file} is not a PEM private key matching {tls.cert_file} ({reason})"
        ) from exc
    return material


def load_auth_token(auth: ReceiverAuthConfig, section: str = "receiver.auth") -> str:
    """The token clients must present: ``token``, or the content of ``token_file`` (surrounding
    whitespace removed); empty when authentication is off."""
    if auth.token and auth.token_file:
        raise ConfigError(f"{section}.token_file", f"set {section}.token or {section}.token_file, not both")
    if not auth.token_file:
        token = auth.token.strip()
        if token and not re.fullmatch(r"[!-~]+", token):
            raise ConfigError(f"{section}.token", "must be visible ASCII characters, without spaces")
        return token
    key = f"{section}.token_file"
    try:
        token = _read(auth.token_file, key).decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise ConfigError(key, f"{auth.token_file} is not UTF-8 text") from exc
    if not token:
        raise ConfigError(key, f"{auth.token_file} is empty")
    if not re.fullmatch(r"[!-~]+", token):
        raise ConfigError(key, "the token must be visible ASCII characters, without spaces")
    return token
