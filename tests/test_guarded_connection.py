"""The HTTP listeners' connection protocol (net.GuardedConnection): what it logs and counts when a
request goes wrong."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest
from aiohttp import web

from otelsignals.net import serve_aiohttp
from otelsignals.telemetry import Telemetry, metric_total


def test_a_failing_handler_is_logged_with_its_traceback_not_counted_as_bad_http(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only a request aiohttp cannot parse is counted as bad_http and logged without its text; an
    error of one of our handlers (a bug) keeps aiohttp's log line and traceback."""

    async def failing(_: web.Request) -> web.Response:
        raise KeyError("a bug in a handler")

    async def main() -> tuple[int, float]:
        telemetry = Telemetry()
        app = web.Application()
        app.router.add_get("/boom", failing)
        runner, port = await serve_aiohttp(
            app, "127.0.0.1:0", "admin.endpoint", telemetry=telemetry, max_connections=8, label="admin"
        )
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{port}/boom") as answer,
            ):
                status = answer.status
        finally:
            await runner.cleanup()
        return status, metric_total(
            telemetry.registry, "otelsignals_receiver_rejected_requests", reason="bad_http"
        )

    with caplog.at_level(logging.ERROR):
        status, bad_http = asyncio.run(main())
    assert status == 500 and bad_http == 0
    assert any(record.exc_info and isinstance(record.exc_info[1], KeyError) for record in caplog.records)
