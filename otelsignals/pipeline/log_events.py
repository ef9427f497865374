"""GenAI events that arrive as OTLP log records, kept until their span is read.

Several instrumentations write message content to log records instead of span attributes or span
events (opentelemetry-instrumentation-openai-v2 in EVENT_ONLY mode and its pre-1.0 events,
OpenLLMetry's event mode): ``gen_ai.client.inference.operation.details``, ``gen_ai.user.message``,
``gen_ai.choice``… Each carries its span's trace and span id. The receiver hands log requests here;
when the span is read, its events are added to the span's view as if they were span events, which is
what the OTel GenAI reader understands. The logs themselves are forwarded untouched.

SDKs export logs sooner than spans by default (1 s against 5 s batches), so the events are usually
here first; events whose span never comes are forgotten after ``ttl`` seconds or beyond ``max_events``
(oldest first), and counted.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from otelsignals.conventions.decoding import EventView, any_value, key_values

GENAI_EVENT_PREFIX = "gen_ai."


class LogEventBuffer:
    def __init__(
        self,
        ttl: float = 60.0,
        max_events: int = 50_000,
        on_forget: Callable[[int], None] = lambda count: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_events = max_events
        self._on_forget = on_forget
        self._clock = clock
        # (trace id, span id) → (arrival time, events); oldest first.
        self._events: OrderedDict[tuple[bytes, bytes], tuple[float, list[tuple[int, EventView]]]] = (
            OrderedDict()
        )
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, request: ExportLogsServiceRequest) -> int:
        """Keep the request's GenAI event records; returns how many were kept."""
        kept = 0
        now = self._clock()
        for resource_logs in request.resource_logs:
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    name = record.event_name or _event_name_attribute(record)
                    if not name.startswith(GENAI_EVENT_PREFIX) or len(record.span_id) != 8:
                        continue
                    attributes = key_values(record.attributes)
                    if record.HasField("body"):
                        attributes["body"] = any_value(record.body)
                    key = (bytes(record.trace_id), bytes(record.span_id))
                    entry = self._events.get(key)
                    if entry is None:
                        entry = self._events[key] = (now, [])
                    entry[1].append((record.time_unix_nano, EventView(name, attributes)))
                    kept += 1
        self._count += kept
        self.expire()
        return kept

    def waiting_spans(self) -> list[tuple[bytes, bytes]]:
        """(trace id, span id) of the spans events are waiting for."""
        return list(self._events)

    def take(self, trace_id: bytes, span_id: bytes) -> list[EventView]:
        """The span's events, in time order, removed from the buffer."""
        entry = self._events.pop((trace_id, span_id), None)
        if entry is None:
            return []
        self._count -= len(entry[1])
        return [event for _, event in sorted(entry[1], key=lambda timed: timed[0])]

    def expire(self) -> None:
        deadline = self._clock() - self.ttl
        forgotten = 0
        while self._events:
            key, (arrived, events) = next(iter(self._events.items()))
            if arrived > deadline and self._count <= self.max_events:
                break
            del self._events[key]
            self._count -= len(events)
            forgotten += len(events)
        if forgotten:
            self._on_forget(forgotten)


def _event_name_attribute(record: LogRecord) -> str:
    """Older SDKs put the event name in an ``event.name`` attribute."""
    for attribute in record.attributes:
        if attribute.key == "event.name":
            return attribute.value.string_value
    return ""
