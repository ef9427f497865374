"""The shared outgoing HTTP client (pipeline/http_client.py) against a real aiohttp server on
127.0.0.1 that answers from a script: retries on 429 / 503 honouring Retry-After (seconds and
HTTP-date), no retry on a permanent refusal, timeouts, giving up after the configured attempts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from email.utils import formatdate
from itertools import islice

import pytest
from aiohttp import web

from otelsignals.pipeline.http_client import (
    OPENAI_RETRYABLE_STATUSES,
    OTLP_RETRYABLE_STATUSES,
    Backoff,
    HttpClient,
    RetryPolicy,
    server_delay,
)

# Steps of 10 ms without jitter, so any longer gap between attempts is the server's delay.
QUICK = Backoff(initial_interval=0.01, multiplier=2.0, max_interval=5.0, randomization_factor=0.0)


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hold: float = 0.0  # seconds before answering
    body: bytes = b"ok"


class ScriptedServer:
    """Answers POST /echo from ``script`` in order (then 200 "ok"); records when each arrived."""

    def __init__(self, *script: Answer) -> None:
        self.script = list(script)
        self.arrivals: list[float] = []
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.arrivals.append(time.monotonic())
        self.bodies.append(await request.read())
        self.headers.append(dict(request.headers))
        answer = self.script.pop(0) if self.script else Answer()
        if answer.hold:
            await asyncio.sleep(answer.hold)
        return web.Response(status=answer.status, body=answer.body, headers=answer.headers)

    @property
    def gaps(self) -> list[float]:
        return [later - earlier for earlier, later in zip(self.arrivals, self.arrivals[1:], strict=False)]


@pytest.fixture
async def served() -> AsyncIterator[ScriptedServer]:
    server = ScriptedServer()
    app = web.Application()
    app.router.add_post("/echo", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}/echo"
    yield server
    await runner.cleanup()


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    made = HttpClient(timeout=5.0, retryable_statuses=OPENAI_RETRYABLE_STATUSES, headers={"X-Test": "1"})
    yield made
    await made.close()


async def test_success_sends_the_body_and_headers(served: ScriptedServer, client: HttpClient) -> None:
    exchange = await client.post(served.url, b"payload", RetryPolicy(3, QUICK), {"X-Call": "2"})
    assert exchange.last.ok and exchange.last.body == b"ok" and exchange.last.error == ""
    assert len(exchange.attempts) == 1 and exchange.failed_attempts == 0 and not exchange.gave_up
    assert served.bodies == [b"payload"]
    assert served.headers[0]["X-Test"] == "1" and served.headers[0]["X-Call"] == "2"


@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_seconds_is_honoured(
    served: ScriptedServer, client: HttpClient, status: int
) -> None:
    served.script = [Answer(status, {"Retry-After": "0.3"})]
    exchange = await client.post(served.url, b"x", RetryPolicy(3, QUICK))
    assert [a.status for a in exchange.attempts] == [status, 200]
    assert exchange.attempts[0].retry_after == pytest.approx(0.3)
    assert exchange.failed_attempts == 1 and exchange.last.ok
    assert 0.28 <= served.gaps[0] < 2.0


async def test_retry_after_http_date_is_honoured(served: ScriptedServer, client: HttpClient) -> None:
    # HTTP-dates have whole seconds: two seconds ahead is between one and two seconds away.
    served.script = [Answer(503, {"Retry-After": formatdate(time.time() + 2, usegmt=True)})]
    exchange = await client.post(served.url, b"x", RetryPolicy(2, QUICK))
    assert exchange.last.ok and len(exchange.attempts) == 2
    assert 0.9 <= served.gaps[0] < 3.0


async def test_retry_after_ms_wins_over_retry_after(served: ScriptedServer, client: HttpClient) -> None:
    served.script = [Answer(429, {"retry-after-ms": "300", "Retry-After": "30"})]
    exchange = await client.post(served.url, b"x", RetryPolicy(2, QUICK))
    assert exchange.last.ok and exchange.attempts[0].retry_after == pytest.approx(0.3)
    assert 0.28 <= served.gaps[0] < 2.0


async def test_server_delay_is_capped_at_max_interval(served: ScriptedServer, client: HttpClient) -> None:
    capped = Backoff(initial_interval=0.01, multiplier=2.0, max_interval=0.2, randomization_factor=0.0)
    served.script = [Answer(503, {"Retry-After": "3600"})]
    exchange = await client.post(served.url, b"x", RetryPolicy(2, capped))
    assert exchange.last.ok
    assert 0.18 <= served.gaps[0] < 1.5  # waited max_interval, did not give up


async def test_a_permanent_refusal_is_not_retried(served: ScriptedServer, client: HttpClient) -> None:
    served.script = [Answer(400, body=b'{"error": "bad"}')]
    exchange = await client.post(served.url, b"x", RetryPolicy(3, QUICK))
    assert len(served.arrivals) == 1 and len(exchange.attempts) == 1
    last = exchange.last
    assert not last.ok and not last.retryable and not exchange.gave_up
    assert last.status == 400 and last.error == "HTTP 400" and last.body == b'{"error": "bad"}'


async def test_gives_up_after_the_configured_attempts(served: ScriptedServer, client: HttpClient) -> None:
    served.script = [Answer(503), Answer(500), Answer(502), Answer(200)]
    # Steps far enough apart (50 then 200 ms) that a loaded machine's delays cannot reorder them:
    # QUICK's 10 and 20 ms did under CI's two test processes.
    growing = Backoff(initial_interval=0.05, multiplier=4.0, max_interval=5.0, randomization_factor=0.0)
    exchange = await client.post(served.url, b"x", RetryPolicy(3, growing))
    assert [a.status for a in exchange.attempts] == [503, 500, 502]
    assert exchange.gave_up and exchange.failed_attempts == 3 and len(served.arrivals) == 3
    assert exchange.latency_s == pytest.approx(sum(a.latency_s for a in exchange.attempts))
    assert served.gaps[1] >= 0.2 and served.gaps[1] > served.gaps[0] >= 0.05  # the backoff steps grow


async def test_a_slow_answer_times_out_and_is_retried(served: ScriptedServer) -> None:
    hasty = HttpClient(timeout=0.2, retryable_statuses=OPENAI_RETRYABLE_STATUSES)
    served.script = [Answer(hold=2.0), Answer(hold=2.0)]
    started = time.monotonic()
    try:
        exchange = await hasty.post(served.url, b"x", RetryPolicy(2, QUICK))
    finally:
        await hasty.close()
    assert time.monotonic() - started < 1.5
    assert [a.status for a in exchange.attempts] == [0, 0] and exchange.gave_up
    assert exchange.last.error == "timed out after 0.2s" and exchange.last.retryable


async def test_no_answer_at_all_is_retryable(client: HttpClient) -> None:
    exchange = await client.post("http://127.0.0.1:9/echo", b"x", RetryPolicy(2, QUICK))
    assert len(exchange.attempts) == 2 and exchange.gave_up
    assert exchange.last.status == 0 and exchange.last.error  # the connection error, named


async def test_the_client_classifies_by_its_own_statuses(served: ScriptedServer) -> None:
    otlp = HttpClient(timeout=5.0, retryable_statuses=OTLP_RETRYABLE_STATUSES)
    served.script = [Answer(500), Answer(502)]
    try:
        server_error, bad_gateway = [await otlp.attempt(served.url, b"x") for _ in range(2)]
    finally:
        await otlp.close()
    assert not server_error.retryable and bad_gateway.retryable
    assert 500 in OPENAI_RETRYABLE_STATUSES and 408 in OPENAI_RETRYABLE_STATUSES


def test_server_delay_forms() -> None:
    assert server_delay({"retry-after": "2"}) == 2.0
    assert server_delay({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert server_delay({"retry-after-ms": "soon", "retry-after": "9"}) == 9.0
    assert 3 <= (server_delay({"retry-after": formatdate(time.time() + 5, usegmt=True)}) or 0) <= 5
    assert server_delay({}) is None and server_delay({"retry-after": "soon"}) is None


def test_backoff_steps_grow_to_the_cap() -> None:
    backoff = Backoff(initial_interval=1.0, multiplier=2.0, max_interval=5.0, randomization_factor=0.5)
    assert list(islice(backoff.steps(), 5)) == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert list(islice(Backoff(9.0, 2.0, 5.0, 0.0).steps(), 2)) == [5.0, 5.0]
    with pytest.raises(ValueError, match="at least one attempt"):
        RetryPolicy(0, backoff)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_a_redirect_is_a_permanent_refusal_not_followed(
    served: ScriptedServer, client: HttpClient, status: int
) -> None:
    """aiohttp follows redirects by default: a 301/302 came back as a GET without the body, answered
    200 by the next address (the spans lost, counted as sent), and the configured headers (an API
    key) went to whatever host the Location named."""
    elsewhere = ScriptedServer()
    app = web.Application()
    app.router.add_route("*", "/moved", elsewhere.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        location = f"http://127.0.0.1:{runner.addresses[0][1]}/moved"
        served.script = [Answer(status, {"Location": location})]
        exchange = await client.post(served.url, b"spans", RetryPolicy(3, QUICK))
        assert [a.status for a in exchange.attempts] == [status]
        assert not exchange.last.ok and not exchange.last.retryable and not exchange.gave_up
        assert location in exchange.last.error
        assert elsewhere.arrivals == []  # nothing (no header, no body) went to the other host
    finally:
        await runner.cleanup()
