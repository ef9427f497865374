"""Re-batches spans, queues the batches, and delivers them with retry and backoff.

Spans arrive trace by trace from the analyzer. The batcher packs them into requests grouped by
resource and scope and split by byte size; the queue holds the requests (bounded in bytes: the
receiver refuses new data with UNAVAILABLE when it is full, so nothing already taken is dropped);
``num_consumers`` workers send them, retrying retryable failures.

Retry rule (`Backoff` in pipeline/http_client.py, shared with the LLM endpoints). Each wait is the
larger of the exponential backoff step (``initial_interval`` times ``multiplier`` per failed
attempt, capped at ``max_interval``, with ``randomization_factor`` jitter) and the server's
Retry-After / RetryInfo capped at ``max_interval``: a server asking for 0 s or a past date does not
disable the backoff, and one asking for an hour does not make us give up. A batch is then dropped
only:

- with the disk queue on (``queue.directory``): never because of a clock. It is retried until the
  downstream takes it, or until the queue is over its hard limit (``HARD_LIMIT_FACTOR`` times
  ``queue.max_bytes``), when the oldest batch is dropped (reason ``queue_full``);
- without it: also when an attempt fails after ``max_elapsed_time`` has passed since the batch's
  first attempt (reason ``retry_expired``; ``max_elapsed_time: 0`` retries without a time limit),
  and on the same hard limit;
- on a permanent refusal (not retried; reason = the answer, e.g. ``http_400``) or a retryable one
  with ``retry.enabled: false``.

Every drop is counted in ``otelsignals_dropped_spans_total{stage="exporter",reason}`` and
``otelsignals_exporter_failed_requests_total{reason}``. The receivers refuse new requests at
``queue.max_bytes``; the room between that and the hard limit takes what arrives with no client to
refuse (traces leaving the trace buffer, the disk queue's replay at start-up, session spans).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from otelsignals.config import ExporterConfig
from otelsignals.otlp.wire import SpanRecord, encode_request, split_by_size
from otelsignals.pipeline.http_client import Backoff
from otelsignals.pipeline.senders import Sender, SendResult
from otelsignals.telemetry import Telemetry

logger = logging.getLogger("otelsignals.exporter")

# The export queue's hard limit, in multiples of queue.max_bytes (see the module docstring).
HARD_LIMIT_FACTOR = 2
# Problem kinds (telemetry.problems) that say the downstream is unreachable or overwhelmed, which
# a delivered batch ends. A batch refused for its content (export_failed_http_400, ...) is no outage:
# later batches getting through do not make it "over".
OUTAGE_PROBLEMS = ("export_retry_", "export_failed_retry_expired", "export_failed_queue_full")


@dataclass(slots=True, eq=False)
class Batch:
    signal: str
    body: bytes
    span_count: int
    # On-disk queue records this batch carries units of: record seq -> units to release once done.
    ingest_units: Counter[int] = field(default_factory=Counter)
    queued_at: float = 0.0  # time.monotonic() when it entered the export queue


class Exporter:
    def __init__(
        self,
        config: ExporterConfig,
        sender: Sender,
        telemetry: Telemetry,
        on_done: Callable[[Batch], None] = lambda batch: None,
    ) -> None:
        self.config = config
        self.sender = sender
        self.telemetry = telemetry
        self._on_done = on_done
        self._pending: list[SpanRecord] = []
        self._pending_bytes = 0
        self._batch_timer: asyncio.TimerHandle | None = None
        self._last_flush = -float("inf")  # time.monotonic() of the latest batch made
        self._queue: deque[Batch] = deque()
        self._queue_event = asyncio.Event()
        self.queued_bytes = 0
        self._in_flight: set[Batch] = set()
        self._workers: list[asyncio.Task[None]] = []
        self._stopping = False

    # -- intake ---------------------------------------------------------------------------------
    def add_spans(self, records: list[SpanRecord], size: int) -> None:
        """Queue ``records`` (``size`` bytes of span data) for the next batch."""
        if not records:
            return  # a timer for nothing pending would be replaced, not cancelled, by the next one
        if not self._pending:
            self._flush_in_time()
        self._pending.extend(records)
        self._pending_bytes += size
        batch = self.config.batch
        if len(self._pending) >= batch.max_spans or self._pending_bytes >= batch.max_bytes:
            self.flush_pending()

    def add_raw(self, signal: str, body: bytes, ingest_seq: int = 0) -> None:
        """A request passed through untouched (metrics, logs)."""
        units: Counter[int] = Counter({ingest_seq: 1}) if ingest_seq else Counter()
        self._enqueue(Batch(signal, body, 0, units))

    def flush_pending(self) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        if not self._pending:
            return
        self._last_flush = time.monotonic()
        records, self._pending, self._pending_bytes = self._pending, [], 0
        for chunk in split_by_size(records, self.config.batch.max_bytes):
            units = Counter(r.ingest_seq for r in chunk if r.ingest_seq)
            self._enqueue(Batch("traces", encode_request(chunk), len(chunk), units))

    def _flush_in_time(self) -> None:
        """Make the batch just begun one ``batch.timeout`` after the previous batch was made: at
        once after a pause, and at most one partial batch per timeout while spans keep coming. A
        timer, not a periodic tick, which would add up to its interval to every partial batch."""
        wait = self._last_flush + self.config.batch.timeout - time.monotonic()
        self._batch_timer = asyncio.get_running_loop().call_later(max(0.0, wait), self.flush_pending)

    def has_room(self, incoming_bytes: int) -> bool:
        """Whether a new request of this size may be accepted (else the client is asked to retry)."""
        waiting = self.queued_bytes + self._pending_bytes
        # A single request larger than the whole bound is still taken when nothing waits.
        return waiting == 0 or waiting + incoming_bytes <= self.config.queue.max_bytes

    @property
    def backlog(self) -> int:
        """Batches queued or being sent."""
        return len(self._queue) + len(self._in_flight)

    def _enqueue(self, batch: Batch) -> None:
        batch.queued_at = time.monotonic()
        self._queue.append(batch)
        self.queued_bytes += len(batch.body)
        self._update_gauges()
        self._queue_event.set()

    # -- delivery -------------------------------------------------------------------------------
    def start(self) -> None:
        self._workers = [
            asyncio.create_task(self._worker(), name=f"exporter-{i}")
            for i in range(self.config.queue.num_consumers)
        ]

    async def stop(self, timeout: float) -> None:
        """Send what is queued for up to ``timeout`` seconds, then give up on the rest."""
        self.flush_pending()
        deadline = time.monotonic() + timeout
        while self.backlog and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self._stopping = True
        self._queue_event.set()
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        undelivered = list(self._queue) + list(self._in_flight)
        if undelivered:
            left = sum(b.span_count for b in undelivered)
            by_signal = Counter(batch.signal for batch in undelivered)
            logger.warning(
                "shutting down with %d batches (%s; %d spans) not delivered%s",
                len(undelivered),
                ", ".join(f"{signal} {count}" for signal, count in sorted(by_signal.items())),
                left,
                "; they stay in the disk queue for the next start" if self.config.queue.directory else "",
            )
            if not self.config.queue.directory:
                self.telemetry.dropped_spans.labels("exporter", "shutdown").inc(left)
                self.telemetry.export_failures.labels("shutdown").inc(len(undelivered))
                for signal, count in by_signal.items():
                    self.telemetry.dropped_requests.labels(signal, "shutdown").inc(count)
        await self.sender.close()

    async def _worker(self) -> None:
        while not self._stopping:
            if not self._queue:
                self._queue_event.clear()
                await self._queue_event.wait()
                continue
            batch = self._queue.popleft()
            self._in_flight.add(batch)
            await self._deliver(batch)
            # Not in a finally: a batch cancelled mid-delivery at shutdown stays in _in_flight,
            # so stop() counts it as undelivered.
            self._in_flight.discard(batch)
            self.queued_bytes -= len(batch.body)
            self._update_gauges()
            del batch  # not held while this worker waits for the next one (up to batch.max_bytes each)

    async def _deliver(self, batch: Batch) -> None:
        retry = self.config.retry
        durable = bool(self.config.queue.directory)
        started = time.monotonic()
        backoff = Backoff(
            retry.initial_interval, retry.multiplier, retry.max_interval, retry.randomization_factor
        )
        steps = backoff.steps()
        while True:
            try:
                result = await self.sender.send(batch.signal, batch.body)
            except Exception as error:
                # A sender's bug (or a fault of this process) must not end this worker, and is no
                # refusal by the downstream: the batch is kept and retried like an outage (the
                # disk queue keeps it until delivered), loudly.
                logger.debug("sending a batch raised", exc_info=True)
                result = SendResult(False, True, "sender_error", f"{type(error).__name__}: {error}")
            if result.ok:
                self._record_success(batch, result)
                return
            if not (result.retryable and retry.enabled):
                self._record_failure(batch, result.reason, result)
                return
            if self.over_hard_limit:
                self._record_failure(batch, "queue_full", result)
                return
            if retry.max_elapsed_time and time.monotonic() - started >= retry.max_elapsed_time:
                if not durable:
                    self._record_failure(batch, "retry_expired", result)
                    return
                self.telemetry.problems.warning(
                    "export_retry_beyond_max_elapsed_time",
                    f"a batch is still refused after retry.max_elapsed_time ({result.detail}); "
                    "it stays in the disk queue and is retried until delivered",
                    reason=result.reason,
                )
            delay = backoff.wait(next(steps), result.retry_after)
            self.telemetry.export_retries.labels(result.reason).inc()
            self.telemetry.problems.warning(
                f"export_retry_{result.reason}",
                f"sending a batch failed ({result.detail}); retrying with backoff",
                reason=result.reason,
            )
            await asyncio.sleep(delay)

    @property
    def over_hard_limit(self) -> bool:
        """Whether the queue holds more than its hard limit: the oldest retrying batch makes room."""
        return self.queued_bytes + self._pending_bytes > HARD_LIMIT_FACTOR * self.config.queue.max_bytes

    def _record_success(self, batch: Batch, result: SendResult) -> None:
        telemetry = self.telemetry
        telemetry.export_delivery.labels(batch.signal).observe(time.monotonic() - batch.queued_at)
        telemetry.forwarded_requests.labels(batch.signal).inc()
        telemetry.forwarded_spans.inc(batch.span_count)
        telemetry.problems.recovered(OUTAGE_PROBLEMS, "downstream takes batches again")
        if result.rejected_spans:
            telemetry.downstream_rejected_spans.inc(result.rejected_spans)
            telemetry.problems.warning(
                "downstream_partial_success",
                f"downstream accepted a batch but rejected {result.rejected_spans} of its items",
            )
        else:
            telemetry.problems.recovered("downstream_partial_success", "downstream takes whole batches again")
        self._on_done(batch)

    def _record_failure(self, batch: Batch, reason: str, result: SendResult) -> None:
        self.telemetry.export_delivery.labels(batch.signal).observe(time.monotonic() - batch.queued_at)
        self.telemetry.export_failures.labels(reason).inc()
        self.telemetry.dropped_requests.labels(batch.signal, reason).inc()
        self.telemetry.dropped_spans.labels("exporter", reason).inc(batch.span_count)
        what = f"{batch.span_count} spans" if batch.signal == "traces" else f"{batch.signal} request"
        self.telemetry.problems.warning(
            f"export_failed_{reason}",
            f"downstream did not take a batch ({what}; {result.detail}); dropped",
            reason=reason,
        )
        # A permanent refusal will not change on replay, so the disk queue forgets it too.
        self._on_done(batch)

    def _update_gauges(self) -> None:
        self.telemetry.queue_bytes.set(self.queued_bytes)
        self.telemetry.queue_batches.set(self.backlog)
