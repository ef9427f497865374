"""OTLP/JSON encoding of trace export requests (the OTLP JSON mapping: proto3 JSON with hex trace and span
ids and integer enums), omitting default-valued fields like ``json_format`` does. The decoder is
:mod:`otelsignals.otlp.json_decode`.

Not covered: ``Resource.entityRefs`` and the profiles-only dictionary references; dropped on encode.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status


def encode_trace_request(request: ExportTraceServiceRequest) -> bytes:
    """Encode a request as one compact OTLP/JSON document (no trailing newline)."""
    out: dict[str, Any] = {}
    if request.resource_spans:
        out["resourceSpans"] = [_resource_spans_to_json_dict(rs) for rs in request.resource_spans]
    return orjson.dumps(out)


def span_to_json_dict(span: Span) -> dict[str, Any]:
    """The OTLP/JSON object for one span, ready for ``orjson.dumps``."""
    out: dict[str, Any] = {}
    if trace_id := span.trace_id:
        out["traceId"] = trace_id.hex()
    if span_id := span.span_id:
        out["spanId"] = span_id.hex()
    if trace_state := span.trace_state:
        out["traceState"] = trace_state
    if parent_span_id := span.parent_span_id:
        out["parentSpanId"] = parent_span_id.hex()
    if flags := span.flags:
        out["flags"] = flags
    if name := span.name:
        out["name"] = name
    if kind := span.kind:
        out["kind"] = kind
    if start := span.start_time_unix_nano:
        out["startTimeUnixNano"] = str(start)
    if end := span.end_time_unix_nano:
        out["endTimeUnixNano"] = str(end)
    _put_attributes(out, span)
    if events := span.events:
        out["events"] = [_event_to_json_dict(event) for event in events]
    if dropped_events := span.dropped_events_count:
        out["droppedEventsCount"] = dropped_events
    if links := span.links:
        out["links"] = [_link_to_json_dict(link) for link in links]
    if dropped_links := span.dropped_links_count:
        out["droppedLinksCount"] = dropped_links
    if span.HasField("status"):
        out["status"] = _status_to_json_dict(span.status)
    return out


def _resource_spans_to_json_dict(resource_spans: ResourceSpans) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if resource_spans.HasField("resource"):
        resource: dict[str, Any] = {}
        _put_attributes(resource, resource_spans.resource)
        out["resource"] = resource
    if scope_spans := resource_spans.scope_spans:
        out["scopeSpans"] = [_scope_spans_to_json_dict(ss) for ss in scope_spans]
    if schema_url := resource_spans.schema_url:
        out["schemaUrl"] = schema_url
    return out


def _scope_spans_to_json_dict(scope_spans: ScopeSpans) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if scope_spans.HasField("scope"):
        out["scope"] = _scope_to_json_dict(scope_spans.scope)
    if spans := scope_spans.spans:
        out["spans"] = [span_to_json_dict(span) for span in spans]
    if schema_url := scope_spans.schema_url:
        out["schemaUrl"] = schema_url
    return out


def _scope_to_json_dict(scope: InstrumentationScope) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if name := scope.name:
        out["name"] = name
    if version := scope.version:
        out["version"] = version
    _put_attributes(out, scope)
    return out


def _event_to_json_dict(event: Span.Event) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if time := event.time_unix_nano:
        out["timeUnixNano"] = str(time)
    if name := event.name:
        out["name"] = name
    _put_attributes(out, event)
    return out


def _link_to_json_dict(link: Span.Link) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if trace_id := link.trace_id:
        out["traceId"] = trace_id.hex()
    if span_id := link.span_id:
        out["spanId"] = span_id.hex()
    if trace_state := link.trace_state:
        out["traceState"] = trace_state
    _put_attributes(out, link)
    if flags := link.flags:
        out["flags"] = flags
    return out


def _status_to_json_dict(status: Status) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if message := status.message:
        out["message"] = message
    if code := status.code:
        out["code"] = code
    return out


def _put_attributes(out: dict[str, Any], message: Any) -> None:
    """Add ``attributes`` and ``droppedAttributesCount``, which several messages share."""
    if attributes := message.attributes:
        out["attributes"] = _key_values_to_json(attributes)
    if dropped := message.dropped_attributes_count:
        out["droppedAttributesCount"] = dropped


def _key_values_to_json(key_values: Iterable[KeyValue]) -> list[dict[str, Any]]:
    # Attributes are most of the encoding work, so the usual shape (a key and a string value) gets a
    # single branch.
    out = []
    for kv in key_values:
        value = kv.value
        if value.WhichOneof("value") == "string_value" and (key := kv.key):
            out.append({"key": key, "value": {"stringValue": value.string_value}})
        else:
            out.append(_key_value_to_json_dict(kv))
    return out


def _key_value_to_json_dict(kv: KeyValue) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if key := kv.key:
        out["key"] = key
    if kv.HasField("value"):
        out["value"] = _any_value_to_json_dict(kv.value)
    return out


def _any_value_to_json_dict(value: AnyValue) -> dict[str, Any]:
    # A oneof member is present even when it holds its default (false, 0, ""), so it is always written.
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return {"stringValue": value.string_value}
    encode = _ANY_VALUE_ENCODERS.get(kind or "")  # none when unset, or set to a profiles-only member
    return encode(value) if encode is not None else {}


def _array_to_json_dict(array: ArrayValue) -> dict[str, Any]:
    if values := array.values:
        return {"values": [_any_value_to_json_dict(value) for value in values]}
    return {}


def _kvlist_to_json_dict(kvlist: KeyValueList) -> dict[str, Any]:
    if values := kvlist.values:
        return {"values": _key_values_to_json(values)}
    return {}


def _double_to_json(number: float) -> float | str:
    if math.isfinite(number):
        return number
    if math.isnan(number):
        return "NaN"
    return "Infinity" if number > 0 else "-Infinity"


_ANY_VALUE_ENCODERS: dict[str, Callable[[AnyValue], dict[str, Any]]] = {
    "bool_value": lambda value: {"boolValue": value.bool_value},
    "int_value": lambda value: {"intValue": str(value.int_value)},
    "double_value": lambda value: {"doubleValue": _double_to_json(value.double_value)},
    "array_value": lambda value: {"arrayValue": _array_to_json_dict(value.array_value)},
    "kvlist_value": lambda value: {"kvlistValue": _kvlist_to_json_dict(value.kvlist_value)},
    "bytes_value": lambda value: {"bytesValue": base64.b64encode(value.bytes_value).decode("ascii")},
}
