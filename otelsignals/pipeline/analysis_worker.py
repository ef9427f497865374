"""The analysis runs on one worker thread, so that the event loop keeps answering every client
whatever one trace carries.

Jobs (a released trace, late log records, session expiry) run one at a time in the order they came,
each under ``lock``: the lock that guards the conversation state for the few readers on other
threads (admin API, eval runs). A job may return a callback; callbacks go back to the event loop in
arrival order, in batches, where the exporter and the disk queue live.

The backlog is bounded in bytes: past ``max_bytes`` the receivers answer UNAVAILABLE / 503 with
Retry-After (``Pipeline.has_room``) and the clients retry. Data already acknowledged is always taken.
While the thread is behind it shortens Python's GIL switch interval (``backlog_switch_interval``), so
that the event loop, which lets go of the GIL at every socket call, keeps answering meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from prometheus_client import CollectorRegistry, Gauge, Histogram

from otelsignals.config import AnalyzerConfig
from otelsignals.telemetry import LATENCY_BUCKETS

logger = logging.getLogger("otelsignals.analysis_worker")

T = TypeVar("T")
# What runs on the worker; it may return what then runs on the event loop.
Job = Callable[[], Callable[[], None] | None]
# What the event loop does instead when a job cannot run (it raised, or shutdown came first).
Fallback = Callable[[], None]

# Results reach the event loop at least this often while a long backlog is being worked through.
_DELIVERY_INTERVAL = 0.02
# A job that waited longer than this for the thread means it is behind: see backlog_switch_interval.
BEHIND_AFTER = 0.02


class AnalysisWorker:
    def __init__(
        self, max_bytes: int, registry: CollectorRegistry, backlog_switch_interval: float = 0.001
    ) -> None:
        self.max_bytes = max_bytes
        # While behind, the GIL switch interval (AnalyzerConfig.backlog_switch_interval); the one
        # in effect when it fell behind, otherwise. Changed on the worker thread only.
        self.backlog_switch_interval = backlog_switch_interval
        self._switched: tuple[float, float] | None = None  # while behind: (the usual one, ours)
        self.lock = threading.Lock()
        # (job, its size, its fallback, when it was submitted)
        self._jobs: collections.deque[tuple[Job, int, Fallback | None, float]] = collections.deque()
        self._wakeup = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Both changed on the event loop only: submit() adds, _deliver() takes away.
        self.backlog_bytes = 0
        self._backlog_jobs = 0
        self._backlog_gauge = Gauge(
            "otelsignals_analyzer_backlog_bytes",
            "Bytes of traces accepted and waiting for (or in) analysis.",
            registry=registry,
        )
        seconds = Histogram(
            "otelsignals_analysis_seconds",
            "Time a job (a released trace, late log records, session expiry) spends in the analysis "
            "stage: queued (waiting for the thread), running, and in all (submitted on the event "
            "loop until its result is back there).",
            ["phase"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._queued_seconds = seconds.labels("queued")
        self._running_seconds = seconds.labels("running")
        self._total_seconds = seconds.labels("total")

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._work_forever, name="analysis", daemon=True)
        self._thread.start()

    def has_room(self, incoming_bytes: int) -> bool:
        # A single request larger than the whole bound is still taken when nothing waits.
        return self.backlog_bytes == 0 or self.backlog_bytes + incoming_bytes <= self.max_bytes

    def submit(self, job: Job, size: int = 0, fallback: Fallback | None = None) -> None:
        """Queue ``job`` (from the event loop); ``size`` is what it holds in memory until delivered;
        ``fallback`` runs on the event loop instead if the job raises or never runs."""
        self.backlog_bytes += size
        self._backlog_jobs += 1
        self._backlog_gauge.set(self.backlog_bytes)
        with self._wakeup:
            self._jobs.append((job, size, fallback, time.monotonic()))
            self._wakeup.notify()

    def abandon(self) -> list[Fallback]:
        """At shutdown, once waiting is over: the jobs not started are taken back; their fallbacks
        (forwarding the traces unanalysed) are for the caller to run, on the event loop."""
        with self._wakeup:
            left = list(self._jobs)
            self._jobs.clear()
        self._deliver([], sum(size for _, size, _, _ in left), [])
        self._backlog_jobs -= len(left)
        return [fallback for _, _, fallback, _ in left if fallback is not None]

    @property
    def idle(self) -> bool:
        return self._backlog_jobs == 0

    async def drain(self, timeout: float) -> bool:
        """Wait until every submitted job has run and been delivered; False on timeout."""
        deadline = time.monotonic() + timeout
        while not self.idle and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return self.idle

    def stop(self, timeout: float = 5.0) -> None:
        with self._wakeup:
            self._stopping = True
            self._wakeup.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    async def read(self, reader: Callable[[], T]) -> T:
        """``reader`` run under the state lock, off the event loop (it may wait for one job)."""

        def locked() -> T:
            with self.lock:
                return reader()

        return await asyncio.to_thread(locked)

    # -- the worker thread --------------------------------------------------------------------------
    def _work_forever(self) -> None:
        while True:
            with self._wakeup:
                if not self._jobs:
                    self._catch_up()
                while not self._jobs and not self._stopping:
                    self._wakeup.wait()
                if not self._jobs:
                    return
            # A call of its own, so that its locals (the last job and callbacks, which hold the
            # trace they analysed) are gone while this thread waits for the next jobs.
            self._work_for_a_while()

    def _work_for_a_while(self) -> None:
        """Jobs for up to _DELIVERY_INTERVAL, then their callbacks handed back together."""
        callbacks: list[Callable[[], None]] = []
        submitted: list[float] = []  # of the jobs done
        done_bytes = 0
        started = time.monotonic()
        while time.monotonic() - started < _DELIVERY_INTERVAL:
            with self._wakeup:
                if not self._jobs:
                    break
                job, size, fallback, submitted_at = self._jobs.popleft()
            job_started = time.monotonic()
            self._queued_seconds.observe(job_started - submitted_at)
            if job_started - submitted_at > BEHIND_AFTER and self._switched is None:
                usual = sys.getswitchinterval()
                sys.setswitchinterval(self.backlog_switch_interval)
                self._switched = (usual, sys.getswitchinterval())  # as Python rounded it
            with self.lock:
                try:
                    callback = job()
                except Exception:  # a job's own errors are counted by the job; this is a bug
                    logger.exception("an analysis job failed")
                    callback = fallback
            self._running_seconds.observe(time.monotonic() - job_started)
            if callback is not None:
                callbacks.append(callback)
            done_bytes += size
            submitted.append(submitted_at)
        self._hand_back(callbacks, done_bytes, submitted)

    def _catch_up(self) -> None:
        """The queue is empty: the switch interval back, unless something else has changed it since."""
        switched, self._switched = self._switched, None
        if switched is not None and sys.getswitchinterval() == switched[1]:
            sys.setswitchinterval(switched[0])

    def _hand_back(
        self, callbacks: list[Callable[[], None]], done_bytes: int, submitted: list[float]
    ) -> None:
        assert self._loop is not None
        # A closed loop means the process is exiting: the disk queue replays what was not sent.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._deliver, callbacks, done_bytes, submitted)

    def _deliver(self, callbacks: list[Callable[[], None]], done_bytes: int, submitted: list[float]) -> None:
        for callback in callbacks:
            try:
                callback()
            except Exception:
                logger.exception("delivering an analysed trace failed")
        delivered = time.monotonic()
        for submitted_at in submitted:
            self._total_seconds.observe(delivered - submitted_at)
        self.backlog_bytes -= done_bytes
        self._backlog_jobs -= len(submitted)
        self._backlog_gauge.set(self.backlog_bytes)


def create_analysis_worker(config: AnalyzerConfig, registry: CollectorRegistry) -> AnalysisWorker:
    """The analysis thread, its backlog bounded by ``analyzer.queue_max_bytes``."""
    return AnalysisWorker(int(config.queue_max_bytes), registry, config.backlog_switch_interval)
