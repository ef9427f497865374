"""Build protobuf spans the way an OTLP exporter sends them, and view them as readers do.

Structured attribute values (lists, dicts) become AnyValue arrays and kvlists, exactly as the
Python SDK's OTLP encoder writes sequences and as event attributes carry structured messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from otelsignals.conventions.base import STATUS_ERROR, SpanView
from otelsignals.conventions.span_decoder import span_view

SPAN_ID = bytes.fromhex("00f067aa0ba902b7")
TRACE_ID = bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736")
ERROR = STATUS_ERROR


def any_value(value: Any) -> AnyValue:
    out = AnyValue()
    if value is None:
        return out
    if isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, bytes):
        out.bytes_value = value
    elif isinstance(value, Mapping):
        out.kvlist_value.values.extend(key_values(value))
    elif isinstance(value, list | tuple):
        out.array_value.values.extend(any_value(item) for item in value)
    else:
        raise TypeError(f"no AnyValue for {type(value).__name__}")
    return out


def key_values(attributes: Mapping[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=key, value=any_value(value)) for key, value in attributes.items()]


def make_span(
    attributes: Mapping[str, Any] | None = None,
    events: Iterable[tuple[str, Mapping[str, Any]]] = (),
    *,
    name: str = "chat gpt-4o",
    status: int = 0,
    status_message: str = "",
    resource: Mapping[str, Any] | None = None,
) -> SpanView:
    """A span with these attributes and (name, attributes) events, as a reader sees it."""
    span = Span(
        trace_id=TRACE_ID,
        span_id=SPAN_ID,
        name=name,
        kind=Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=1_700_000_000_000_000_000,
        end_time_unix_nano=1_700_000_001_500_000_000,
        status=Status(code=status, message=status_message),
    )
    span.attributes.extend(key_values(attributes or {}))
    for offset, (event_name, event_attributes) in enumerate(events):
        event = span.events.add(name=event_name, time_unix_nano=1_700_000_000_000_000_000 + offset)
        event.attributes.extend(key_values(event_attributes))
    # Round-trip through bytes so the test sees what arrives over the wire.
    return span_view(Span.FromString(span.SerializeToString()), resource or {"service.name": "agent"})
