"""Conversation verdicts as span annotations in Arize Phoenix (``annotations.phoenix_url``).

Each analysed turn's verdict goes to Phoenix's REST API (``POST /v1/span_annotations``) as an
annotation on the span that carries the analysed conversation: the turn's latest model call, the
span the enricher gives the ``signal.*`` events. Phoenix then shows the verdict beside the span, and
its annotation filters and evaluation views work on it, without a reader having to know the
``signals.*`` attribute names.

What is sent is private by default, whatever ``signals.snippets`` says: the label is the quality
bucket, the score the quality score (0–100, as ``signals.quality_score``), the explanation the
triage priority and its reasons (signal names and counts), the metadata identifiers and numbers.
No message text.

Never on the pipeline's path. A verdict is queued on the event loop when its trace is forwarded
(a trace the sampler drops gets none); the queue is bounded by ``max_pending`` and a verdict that
finds it full is dropped and counted. One background task sends batches (``batch_size``, waiting up
to ``flush_interval`` for one to fill) through the shared HTTP client, with its retry rule
(pipeline/http_client.py); a batch still refused after ``max_attempts`` is counted as failed. Each
kind of failure is logged when it starts, summed up every `log.summary_interval` while it goes on,
and its end is logged (the process's ProblemLog, as for the exporter).

Phoenix takes annotations asynchronously (the API's default, without ``sync=true``): it answers once
they are queued and stores each as soon as its span is there, so a verdict that overtakes its span
(the spans leave through the exporter's own queue) is kept, not refused. ``sent`` counts what
Phoenix accepted.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge

from otelsignals.analysis import Analysis
from otelsignals.config import AnnotationsConfig
from otelsignals.pipeline.http_client import Attempt, Backoff, HttpClient, RetryPolicy
from otelsignals.telemetry import ProblemLog

__all__ = ["PhoenixAnnotator", "SpanVerdict", "create_annotator", "span_verdict"]

logger = logging.getLogger("otelsignals.annotations")

# Phoenix sits behind uvicorn and often a proxy: besides rate limiting, its 5xx answers and a
# proxy's 502/503/504 are worth another attempt; a 4xx (bad key, unknown project) is not.
PHOENIX_RETRYABLE_STATUSES = frozenset({408, 429}) | frozenset(range(500, 600))
# Waits between attempts: 0.5 s doubling, at most 30 s (the last attempt of 5 comes ~7.5 s after the first).
PHOENIX_BACKOFF = Backoff(initial_interval=0.5, multiplier=2.0, max_interval=30.0, randomization_factor=0.5)
SPAN_ANNOTATIONS_PATH = "/v1/span_annotations"
# Problem kinds that say Phoenix is unreachable or overwhelmed: a batch it takes ends them. A refusal
# of one batch's content (another 4xx) is not an outage, and a later good batch does not end it.
OUTAGE_PROBLEMS = (
    "annotations_connection",
    "annotations_timeout",
    "annotations_http_5",
    "annotations_http_408",
    "annotations_http_429",
    "annotations_queue_full",
)


@dataclass(frozen=True)
class SpanVerdict:
    """One analysed turn's verdict, for the span that carries its conversation."""

    span_id: str  # hex
    quality: str
    score: float
    explanation: str
    metadata: dict[str, Any]

    def as_phoenix(self, name: str) -> dict[str, Any]:
        """The ``SpanAnnotationData`` of Phoenix's REST API."""
        return {
            "span_id": self.span_id,
            "name": name,
            "annotator_kind": "CODE",
            "result": {"label": self.quality, "score": self.score, "explanation": self.explanation},
            "metadata": self.metadata,
        }


def span_verdict(analysis: Analysis) -> SpanVerdict | None:
    """The verdict of an analysed turn; None when no span carries its conversation."""
    if analysis.span_id is None:
        return None
    score, priority = analysis.score, analysis.priority
    explanation = f"triage priority {priority.value:g}/100"
    if priority.reasons:
        explanation += ": " + "; ".join(priority.reasons)
    return SpanVerdict(
        span_id=analysis.span_id.hex(),
        quality=score.quality,
        score=float(score.quality_score),
        explanation=explanation,
        metadata={
            "conversation_id": analysis.conversation_id,
            "trace_id": analysis.trace_id.hex(),
            "agent_id": analysis.agent_id,
            "flagged": score.flagged,
            "priority": float(priority.value),
            "turn_count": score.turn_count,
            "efficiency_score": float(score.efficiency_score),
            "signals": {category: count for category, count in score.counts.items() if count > 0},
        },
    )


def failure_reason(attempt: Attempt) -> str:
    """A short label for the metrics: ``http_<status>``, ``timeout`` or ``connection``."""
    if attempt.status:
        return f"http_{attempt.status}"
    return "timeout" if attempt.error.startswith("timed out") else "connection"


class PhoenixAnnotator:
    """Queues verdicts (on the event loop) and posts them to Phoenix from one background task."""

    def __init__(self, config: AnnotationsConfig, registry: CollectorRegistry, problems: ProblemLog) -> None:
        self.url = config.phoenix_url.rstrip("/") + SPAN_ANNOTATIONS_PATH
        self.name = config.name
        self.max_pending = config.max_pending
        self.batch_size = config.batch_size
        self.flush_interval = float(config.flush_interval)
        self._retry = RetryPolicy(attempts=config.max_attempts, backoff=PHOENIX_BACKOFF)
        self._client = HttpClient(
            timeout=float(config.timeout),
            retryable_statuses=PHOENIX_RETRYABLE_STATUSES,
            headers={"Content-Type": "application/json", "Accept": "application/json", **config.headers},
        )
        self._pending: collections.deque[SpanVerdict] = collections.deque()
        self._in_flight: list[SpanVerdict] = []
        self._arrived = asyncio.Event()  # something is pending
        self._batch_full = asyncio.Event()  # a whole batch is pending: no reason to wait
        self._task: asyncio.Task[None] | None = None
        self._problems = problems
        self.sent = Counter(
            "otelsignals_annotations_sent",
            "Conversation verdicts Phoenix accepted as span annotations.",
            registry=registry,
        )
        self.failed = Counter(
            "otelsignals_annotations_failed",
            "Verdicts Phoenix did not take after every attempt, by the last answer (http_<status>, "
            "timeout, connection; error: a bug of ours).",
            ["reason"],
            registry=registry,
        )
        self.dropped = Counter(
            "otelsignals_annotations_dropped",
            "Verdicts never sent: the queue was full (annotations.max_pending) or the process was stopping.",
            ["reason"],
            registry=registry,
        )
        self._pending_gauge = Gauge(
            "otelsignals_annotations_pending", "Verdicts waiting to be sent to Phoenix.", registry=registry
        )

    # -- on the event loop, from the pipeline ---------------------------------------------------
    def submit(self, verdict: SpanVerdict) -> None:
        """Queue ``verdict``; never waits. A full queue drops it (counted)."""
        if len(self._pending) >= self.max_pending:
            self.dropped.labels("queue_full").inc()
            self._problems.warning(
                "annotations_queue_full", "Phoenix annotations are behind: new verdicts are being dropped"
            )
            return
        self._pending.append(verdict)
        self._pending_gauge.set(len(self._pending))
        self._arrived.set()
        if len(self._pending) >= self.batch_size:
            self._batch_full.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._send_forever(), name="phoenix-annotations")

    async def stop(self, timeout: float) -> None:
        """Send what is waiting, for up to ``timeout``; the rest is dropped (reason ``shutdown``).
        The pipeline calls this after the exporter has sent its spans."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        # A batch interrupted mid-request goes again (Phoenix upserts: a repeat is harmless).
        self._pending.extendleft(reversed(self._in_flight))
        self._in_flight = []
        try:
            await asyncio.wait_for(self._send_all_pending(), timeout)
        except TimeoutError:
            pass
        except Exception:  # a bug of ours: what is left is dropped below, and shutdown goes on
            logger.debug("sending annotations at shutdown failed", exc_info=True)
        left = len(self._pending) + len(self._in_flight)
        if left:
            self.dropped.labels("shutdown").inc(left)
            logger.warning(
                "shutdown: %d verdicts were not sent to Phoenix in time",
                left,
                extra={"fields": {"kind": "annotations_shutdown", "verdicts": left}},
            )
        self._pending.clear()
        self._in_flight = []
        self._pending_gauge.set(0)
        await self._client.close()

    # -- the background task --------------------------------------------------------------------
    async def _send_forever(self) -> None:
        while True:
            await self._arrived.wait()
            if len(self._pending) < self.batch_size:
                # Let the batch fill: one request for a burst of turns rather than one per turn.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._batch_full.wait(), self.flush_interval)
            try:
                await self._send_batch()
            except Exception as exc:  # a bug must not stop the sender: that batch is counted failed
                self.failed.labels("error").inc(len(self._in_flight))
                self._in_flight = []
                logger.debug("sending annotations to Phoenix failed", exc_info=True)
                self._problems.warning(
                    "annotations_error", f"sending annotations failed: {type(exc).__name__}"
                )

    async def _send_all_pending(self) -> None:
        while self._pending:
            await self._send_batch()

    def _take_batch(self) -> list[SpanVerdict]:
        count = min(self.batch_size, len(self._pending))
        batch = [self._pending.popleft() for _ in range(count)]
        if len(self._pending) < self.batch_size:
            self._batch_full.clear()
        if not self._pending:
            self._arrived.clear()
        self._pending_gauge.set(len(self._pending))
        return batch

    async def _send_batch(self) -> None:
        self._in_flight = batch = self._take_batch()
        if not batch:
            return
        body = orjson.dumps({"data": [verdict.as_phoenix(self.name) for verdict in batch]})
        exchange = await self._client.post(self.url, body, self._retry)
        self._in_flight = []
        last = exchange.last
        if last.ok:
            self.sent.inc(len(batch))
            self._problems.recovered(OUTAGE_PROBLEMS, "Phoenix takes annotations again", url=self.url)
            return
        reason = failure_reason(last)
        self.failed.labels(reason).inc(len(batch))
        # Phoenix's answer names what it refused (a span id, a field); it never echoes message text,
        # since none is sent.
        detail = last.body[:200].decode("utf-8", "replace").strip()
        self._problems.warning(
            f"annotations_{reason}",
            f"Phoenix did not take {len(batch)} annotation(s) after {len(exchange.attempts)} attempts: "
            f"{last.error}{': ' + detail if detail else ''}",
            url=self.url,
        )


def create_annotator(
    config: AnnotationsConfig, registry: CollectorRegistry, problems: ProblemLog
) -> PhoenixAnnotator | None:
    """The annotator of the ``annotations`` section; None when no Phoenix URL is set."""
    return PhoenixAnnotator(config, registry, problems) if config.phoenix_url else None
