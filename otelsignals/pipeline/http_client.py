"""The one outgoing HTTP client: the OTLP/HTTP sender, the LLM judge's chat completions and the
embeddings endpoint all post through it (the core never does network I/O; it is handed callables
built on this, see pipeline/llm_endpoints.py).

What lives here, once:

- the backoff rule (`Backoff.wait`), also used by the exporter's queue-level retries: each wait is
  the larger of the jittered exponential step and the server's requested delay capped at
  ``max_interval``. A server asking for 0 s or a past date does not disable the backoff, and one
  asking for an hour does not make us give up;
- reading the server's delay: ``retry-after-ms`` (OpenAI's) or ``Retry-After`` (delay-seconds or an
  HTTP-date), `server_delay`;
- one attempt (`HttpClient.attempt`): timeout, classification (no answer, or a status in the
  client's retryable set, is retryable; any other non-2xx is not);
- the retry loop (`HttpClient.post`) for callers without a queue of their own.

Each user owns one `HttpClient`, hence one aiohttp session, created on first use in the running
loop and closed by `close()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import ssl
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime

import aiohttp

__all__ = [
    "OPENAI_RETRYABLE_STATUSES",
    "OTLP_RETRYABLE_STATUSES",
    "Attempt",
    "Backoff",
    "Exchange",
    "HttpClient",
    "RetryPolicy",
    "parse_retry_after",
    "server_delay",
]

# The OTLP specification's retryable HTTP answers; anything else is a permanent refusal.
OTLP_RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
# What OpenAI-compatible APIs answer when trying again may help: a request timeout, a conflict
# (a concurrent request holding a lock), rate limiting and every server error.
OPENAI_RETRYABLE_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))


# -- the server's requested delay ---------------------------------------------------------------
def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from an HTTP ``Retry-After`` value: delay-seconds (decimals accepted) or an
    HTTP-date. A negative number or a date in the past gives 0.0 (the caller's own backoff still
    applies); an absent, unreadable or non-finite value gives None. No upper cap: `Backoff` caps."""
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


def server_delay(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asks us to wait: ``retry-after-ms`` (OpenAI's, more precise) when it is
    readable, else ``Retry-After``. ``headers`` must look names up case-insensitively."""
    millis = headers.get("retry-after-ms")
    if millis:
        with contextlib.suppress(ValueError):
            seconds = float(millis) / 1000
            if math.isfinite(seconds):
                return max(0.0, seconds)
    return parse_retry_after(headers.get("retry-after"))


# -- the backoff rule ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: ``initial_interval`` times ``multiplier`` per failed attempt, capped at
    ``max_interval``, each wait jittered by ± ``randomization_factor`` of the step. The values are
    checked where they are configured (``exporter.retry``, pipeline/llm_endpoints.py)."""

    initial_interval: float
    multiplier: float
    max_interval: float
    randomization_factor: float

    def steps(self) -> Iterator[float]:
        """The un-jittered steps, one per failed attempt."""
        step = min(self.initial_interval, self.max_interval)
        while True:
            yield step
            step = min(step * self.multiplier, self.max_interval)

    def wait(self, step: float, server_delay: float | None) -> float:
        """Seconds to wait before the next attempt: the jittered ``step``, or the server's delay
        capped at ``max_interval`` when that is longer."""
        jitter = self.randomization_factor * step
        wait = step + random.uniform(-jitter, jitter)
        if server_delay is not None:
            wait = max(wait, min(server_delay, self.max_interval))
        return max(0.0, wait)


@dataclass(frozen=True)
class RetryPolicy:
    """Up to ``attempts`` attempts per request (so ``attempts - 1`` retries), waiting by ``backoff``."""

    attempts: int
    backoff: Backoff

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("a retry policy needs at least one attempt")


# -- the client ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Attempt:
    """One request and its answer. ``status`` is 0 when there was no answer (timeout, connection
    error); ``error`` says what went wrong ("" on a 2xx); ``retry_after`` is the server's delay."""

    status: int
    body: bytes
    error: str
    retryable: bool
    retry_after: float | None
    latency_s: float

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True)
class Exchange:
    """Every attempt one request took; the last one decides."""

    attempts: tuple[Attempt, ...]

    @property
    def last(self) -> Attempt:
        return self.attempts[-1]

    @property
    def gave_up(self) -> bool:
        """Whether the retries ran out (as opposed to a success or a permanent refusal)."""
        return not self.last.ok and self.last.retryable

    @property
    def failed_attempts(self) -> int:
        return sum(1 for attempt in self.attempts if not attempt.ok)

    @property
    def latency_s(self) -> float:
        return sum(attempt.latency_s for attempt in self.attempts)


class HttpClient:
    """POSTs to one service: ``headers`` go with every request, ``timeout`` bounds each attempt,
    ``retryable_statuses`` are the non-2xx answers worth another attempt."""

    def __init__(
        self,
        *,
        timeout: float,
        retryable_statuses: frozenset[int],
        headers: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be > 0")
        self.timeout = timeout
        self.retryable_statuses = retryable_statuses
        self._headers = dict(headers or {})
        # True: aiohttp's default certificate checks.
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._session: aiohttp.ClientSession | None = None

    async def attempt(self, url: str, data: bytes, headers: Mapping[str, str] | None = None) -> Attempt:
        """One POST, classified; never raises for what the network or the server did."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers=self._headers, timeout=aiohttp.ClientTimeout(total=self.timeout)
            )
        started = time.perf_counter()
        try:
            # Redirects are not followed: aiohttp follows a 301/302 with a GET without the body (the
            # request lost, yet answered 200 by the next address) and sends the configured headers
            # (API keys) to whatever host the Location names.
            async with self._session.post(
                url, data=data, headers=headers, ssl=self._ssl, allow_redirects=False
            ) as response:
                body = await response.read()
                status = response.status
                retry_after = server_delay(response.headers)
                location = response.headers.get("Location", "")
        except TimeoutError:
            error = f"timed out after {self.timeout:g}s"
            return Attempt(0, b"", error, True, None, time.perf_counter() - started)
        except (aiohttp.ClientError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            return Attempt(0, b"", error, True, None, time.perf_counter() - started)
        latency = time.perf_counter() - started
        if 200 <= status < 300:
            return Attempt(status, body, "", False, retry_after, latency)
        retryable = status in self.retryable_statuses
        if 300 <= status < 400:  # permanent: the endpoint is to be set to the new address
            error = f"HTTP {status}: redirected{f' to {location}' if location else ''}, not followed"
            return Attempt(status, body, error, False, None, latency)
        return Attempt(status, body, f"HTTP {status}", retryable, retry_after, latency)

    async def post(
        self, url: str, data: bytes, retry: RetryPolicy, headers: Mapping[str, str] | None = None
    ) -> Exchange:
        """POST with retries: a retryable failure is tried again, up to ``retry.attempts`` attempts,
        after the `Backoff.wait` of the failure. Never raises for what the network or the server did."""
        attempts: list[Attempt] = []
        steps = retry.backoff.steps()
        while True:
            attempt = await self.attempt(url, data, headers)
            attempts.append(attempt)
            if attempt.ok or not attempt.retryable or len(attempts) >= retry.attempts:
                return Exchange(tuple(attempts))
            await asyncio.sleep(retry.backoff.wait(next(steps), attempt.retry_after))

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
