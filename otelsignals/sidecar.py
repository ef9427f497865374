"""The running sidecar: pipeline, receivers and admin API in one asyncio process."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

from aiohttp import web

from otelsignals import native
from otelsignals.admin import admin_app
from otelsignals.config import Config
from otelsignals.net import serve_aiohttp
from otelsignals.pipeline.receiver import Receivers
from otelsignals.pipeline.service import Pipeline
from otelsignals.telemetry import Telemetry

logger = logging.getLogger("otelsignals")


@dataclass(frozen=True)
class Endpoints:
    grpc_port: int
    http_port: int
    admin_port: int


class Sidecar:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.telemetry = Telemetry(config.log.summary_interval)
        self.pipeline = Pipeline(config, self.telemetry)
        self.receivers = Receivers(config.receiver, self.pipeline)
        self._admin: web.AppRunner | None = None
        self.endpoints = Endpoints(0, 0, 0)

    async def start(self) -> Endpoints:
        await self.pipeline.start()
        try:
            return await self._listen()
        except BaseException:
            # E.g. a port already in use: what did start (the pipeline's threads, a receiver) is
            # stopped, so the process can exit with its one-line error instead of hanging.
            await self._shut_down()
            raise

    async def _listen(self) -> Endpoints:
        await self.receivers.start()
        admin_port = 0
        if self.config.admin.enabled:
            app = admin_app(
                self.telemetry,
                lambda: self.pipeline.ready,
                self.pipeline.analyzer.sessions,
                self.config.signals.snippets,
                self.pipeline.reputation,
                self.config.admin.auth_token,
                self.pipeline.eval_runs,
                self.pipeline.analysis.read,
                self.pipeline.index_reader,
                self.config.ui,
                self.config.signals,
                self.config.evals,
            )
            self._admin, admin_port = await serve_aiohttp(
                app,
                self.config.admin.endpoint,
                "admin.endpoint",
                telemetry=self.telemetry,
                max_connections=self.config.admin.max_connections,
                listener="admin API",
                idle_timeout=self.config.receiver.idle_timeout,
                header_timeout=self.config.receiver.header_timeout,
            )
        self.endpoints = Endpoints(self.receivers.grpc_port, self.receivers.http_port, admin_port)
        exporter = self.config.exporter
        logger.info(
            "otelsignals listening",
            extra={
                "fields": {
                    "otlp_grpc_port": self.endpoints.grpc_port,
                    "otlp_http_port": self.endpoints.http_port,
                    "admin_port": admin_port,
                    "downstream": exporter.endpoint or f"file:{exporter.file_path}",
                    "disk_queue": exporter.queue.directory or "off",
                    # "compiled", or why the core's source runs (native.py): ~1.25x the CPU
                    "analysis_core": "compiled" if native.compiled() else native.pure_python_reason,
                }
            },
        )
        return self.endpoints

    async def stop(self) -> None:
        await self._shut_down()
        logger.info("otelsignals stopped")

    async def _shut_down(self) -> None:
        # Stop taking data first, then drain what was taken.
        await self.receivers.stop()
        await self.pipeline.stop()
        if self._admin is not None:
            await self._admin.cleanup()


async def run_until_signalled(config: Config) -> None:
    sidecar = Sidecar(config)
    await sidecar.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logger.info("shutting down: draining buffered traces and the export queue")
    await sidecar.stop()
