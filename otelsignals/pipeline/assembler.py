"""Groups spans by trace and releases each trace when it is complete or its wait has expired.

A trace is complete when its root span has arrived and every span's parent is present. Otherwise it
is released ``decision_wait`` seconds after its last span. The buffer is bounded by traces and
bytes; when full, the oldest traces are released early, unanalysed, and counted: never dropped.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from otelsignals.config import AssemblerConfig
from otelsignals.otlp.wire import SpanRecord

ReleaseReason = Literal["complete", "timeout", "evicted_max_traces", "evicted_max_bytes", "shutdown"]


@dataclass(slots=True)
class TraceBuffer:
    trace_id: bytes
    spans: list[SpanRecord] = field(default_factory=list)
    span_ids: set[bytes] = field(default_factory=set)
    missing_parents: set[bytes] = field(default_factory=set)
    root_seen: bool = False
    size: int = 0
    last_seen: float = 0.0

    def add(self, record: SpanRecord) -> bool:
        """False when this span id is already held (a client retry): the first copy is kept."""
        if record.span_id in self.span_ids:
            return False
        self.spans.append(record)
        self.size += len(record.data)
        self.span_ids.add(record.span_id)
        self.missing_parents.discard(record.span_id)
        parent = record.parent_span_id
        if not parent:
            self.root_seen = True
        elif parent not in self.span_ids:
            self.missing_parents.add(parent)
        return True

    @property
    def complete(self) -> bool:
        return self.root_seen and not self.missing_parents


@dataclass(slots=True)
class ReleasedTrace:
    trace_id: bytes
    spans: list[SpanRecord]
    reason: ReleaseReason
    size: int  # bytes of span data

    @property
    def analyzable(self) -> bool:
        """Evicted traces skip analysis: the buffer was full, so the cheapest path wins."""
        return not self.reason.startswith("evicted")


# What a buffered span takes besides its bytes: its record, its three ids as bytes objects of their
# own, its places in the trace's span list and id sets (an independent review measured ~470 bytes a
# span: 300k spans of 41 bytes took 156 MiB of RSS while counted as 12 MB). Counted in
# buffered_bytes, so that assembler.max_bytes bounds the memory of many small spans too.
SPAN_RECORD_BYTES = 500


class Assembler:
    def __init__(
        self,
        on_release: Callable[[ReleasedTrace], None],
        on_duplicate: Callable[[SpanRecord], None],
        decision_wait: float = 2.0,
        max_traces: int = 50_000,
        max_bytes: int = 256 * 1024**2,
        clock: Callable[[], float] = time.monotonic,
        span_record_bytes: int = SPAN_RECORD_BYTES,
    ) -> None:
        self._on_release = on_release
        self._on_duplicate = on_duplicate
        self.decision_wait = decision_wait
        self.max_traces = max_traces
        self.max_bytes = max_bytes
        self.span_record_bytes = span_record_bytes
        self._clock = clock
        # Least recently touched first: expiry and eviction both pop from the front.
        self._traces: OrderedDict[bytes, TraceBuffer] = OrderedDict()
        self.buffered_bytes = 0  # the spans' bytes and span_record_bytes for each
        self.buffered_spans = 0

    def __len__(self) -> int:
        return len(self._traces)

    def add(self, records: Iterable[SpanRecord]) -> None:
        now = self._clock()
        touched: dict[bytes, TraceBuffer] = {}
        traces = self._traces
        for record in records:
            buffer = touched.get(record.trace_id)
            if buffer is None:
                buffer = traces.get(record.trace_id)
                if buffer is None:
                    buffer = traces[record.trace_id] = TraceBuffer(record.trace_id)
                touched[record.trace_id] = buffer
            if buffer.add(record):
                self.buffered_bytes += len(record.data) + self.span_record_bytes
                self.buffered_spans += 1
            else:
                self._on_duplicate(record)
        for trace_id, buffer in touched.items():
            buffer.last_seen = now
            traces.move_to_end(trace_id)
            if buffer.complete:
                self._release(trace_id, "complete")
        self._enforce_bounds()

    def expire(self) -> int:
        """Release traces whose wait is over; returns how many."""
        deadline = self._clock() - self.decision_wait
        released = 0
        traces = self._traces
        while traces:
            trace_id, buffer = next(iter(traces.items()))
            if buffer.last_seen > deadline:
                break
            self._release(trace_id, "timeout")
            released += 1
        return released

    def flush(self) -> None:
        """Release everything (shutdown)."""
        for trace_id in list(self._traces):
            self._release(trace_id, "shutdown")

    def _enforce_bounds(self) -> None:
        while len(self._traces) > self.max_traces:
            self._release(next(iter(self._traces)), "evicted_max_traces")
        while self.buffered_bytes > self.max_bytes and self._traces:
            self._release(next(iter(self._traces)), "evicted_max_bytes")

    def _release(self, trace_id: bytes, reason: ReleaseReason) -> None:
        buffer = self._traces.pop(trace_id)
        self.buffered_bytes -= buffer.size + self.span_record_bytes * len(buffer.spans)
        self.buffered_spans -= len(buffer.spans)
        self._on_release(ReleasedTrace(trace_id, buffer.spans, reason, buffer.size))


def create_assembler(
    config: AssemblerConfig,
    release: Callable[[ReleasedTrace], None],
    on_duplicate: Callable[[SpanRecord], None],
) -> Assembler:
    """The assembler of the ``assembler`` section; ``release`` is the next stage's intake."""
    return Assembler(
        release,
        on_duplicate,
        decision_wait=config.decision_wait,
        max_traces=config.max_traces,
        max_bytes=config.max_bytes,
    )
