"""Network helpers: serving an aiohttp application on a configured host:port, reading Retry-After."""

from __future__ import annotations

import math
import time
from datetime import UTC
from email.utils import parsedate_to_datetime

from aiohttp import web

from otelsignals.config import split_host_port


async def serve_aiohttp(
    app: web.Application, endpoint: str, config_key: str, **server_options: object
) -> tuple[web.AppRunner, int]:
    """Start ``app`` on ``endpoint``; returns the runner (for cleanup) and the bound port."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False, **server_options)
    await runner.setup()
    host, port = split_host_port(endpoint, config_key)
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise OSError(f"cannot listen on {endpoint} ({config_key}): {exc.strerror}") from exc
    server = site._server  # aiohttp exposes the bound port only through the asyncio server
    return runner, server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from an HTTP ``Retry-After`` value: delay-seconds (decimals accepted) or an
    HTTP-date. A negative number or a date in the past gives 0.0 (the caller's own backoff still
    applies); an absent, unreadable or non-finite value gives None. No upper cap: callers cap."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # RFC 9110 dates are GMT; a zone-less one is read as UTC
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)
