"""Fast, strict OTLP/JSON codec for trace export requests (encode and decode) and for logs and metrics
export requests (decode).

Follows the OTLP JSON mapping (https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding), which is
proto3 JSON with two deviations: trace and span ids are hex strings instead of base64, and enums are
integers. Encoding omits default-valued fields like ``json_format`` does; decoding also accepts the proto
field names, enum names and the other spellings proto3 JSON allows, ignores unknown keys and rejects wrong
JSON types with an `OtlpJsonError` that names the JSON path.

Not covered: ``Resource.entityRefs`` and the profiles-only ``keyStrindex`` / ``stringValueStrindex``
dictionary references. They are dropped on encode and ignored (as unknown keys) on decode.
"""

import base64
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import orjson
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs, SeverityNumber
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    Exemplar,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
    Summary,
    SummaryDataPoint,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

__all__ = [
    "OtlpJsonError",
    "decode_logs_request",
    "decode_metrics_request",
    "decode_trace_request",
    "encode_trace_request",
    "span_to_json_dict",
]

# How deeply arrayValue/kvlistValue may nest. Protobuf parsers (upb, C++) refuse messages nested more than
# 100 deep; an event attribute sits 7 messages down and each kvlist level adds 3, so deeper values could
# not be forwarded as protobuf anyway. The limit also bounds the decoder's recursion.
MAX_ANY_VALUE_DEPTH = 30

_TRACE_ID_BYTES = 16
_SPAN_ID_BYTES = 8
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_UINT32_MAX = 2**32 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_MAX = 2**64 - 1
# Larger JSON numbers may already have lost precision (orjson turns integers beyond 64 bits into floats).
_MAX_EXACT_FLOAT_INT = 2**53


class OtlpJsonError(ValueError):
    """Raised for input that is not valid OTLP/JSON; the message names the JSON path, e.g.
    'resourceSpans[0].scopeSpans[1].spans[3].traceId: expected 32 hex characters, got 31'."""


# --------------------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------------------


def decode_trace_request(data: bytes | str) -> ExportTraceServiceRequest:
    """Parse one OTLP/JSON ExportTraceServiceRequest; raises `OtlpJsonError` for anything invalid."""
    return _decode_request(data, ExportTraceServiceRequest(), _REQUEST_FIELDS)


def decode_logs_request(data: bytes | str) -> ExportLogsServiceRequest:
    """Parse one OTLP/JSON ExportLogsServiceRequest (hex ``traceId``/``spanId`` on log records)."""
    return _decode_request(data, ExportLogsServiceRequest(), _LOGS_REQUEST_FIELDS)


def decode_metrics_request(data: bytes | str) -> ExportMetricsServiceRequest:
    """Parse one OTLP/JSON ExportMetricsServiceRequest (hex ``traceId``/``spanId`` on exemplars)."""
    return _decode_request(data, ExportMetricsServiceRequest(), _METRICS_REQUEST_FIELDS)


_Request = TypeVar("_Request")


def _decode_request(data: bytes | str, request: _Request, fields: Mapping[str, "_Field"]) -> _Request:
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        raise OtlpJsonError(f"$: invalid JSON: {err}") from None
    try:
        _decode_object(request, document, fields)
    except _Invalid as err:
        raise OtlpJsonError(err.message()) from None
    return request


class _Invalid(Exception):
    """Raised where a problem is found; each enclosing level adds its path segment on the way out, so the
    happy path spends no time on paths."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self._segments: list[str] = []  # innermost first

    def under(self, segment: str) -> "_Invalid":
        self._segments.append(segment)
        return self

    def message(self) -> str:
        path = "".join(reversed(self._segments)).removeprefix(".")
        return f"{path or '$'}: {self.reason}"


# How one JSON key is decoded: ("attr", parse) for a scalar field sets message.attr = parse(json_value);
# (None, decode) for a message or repeated field calls decode(message, json_value), which fills it in place.
_Field = tuple[str | None, Callable[..., Any]]
_FieldKind = Callable[[str], _Field]  # makes the _Field of the named proto field
_T = TypeVar("_T")


def _decode_object(message: Any, value: Any, fields: Mapping[str, _Field]) -> None:
    if type(value) is not dict:
        raise _Invalid(f"expected an object, got {_describe(value)}")
    for key, item in value.items():
        field = fields.get(key)
        # Unknown keys are skipped for forward compatibility; null means "default value" in proto3 JSON.
        if field is None or item is None:
            continue
        attribute, convert = field
        try:
            if attribute is None:
                convert(message, item)
            else:
                setattr(message, attribute, convert(item))
        except _Invalid as err:
            err.under(f".{key}")
            raise


def _fields(message_type: Any, kinds: Mapping[str, _FieldKind]) -> dict[str, _Field]:
    """The decoding table of a message type, keyed by both proto field names and lowerCamelCase JSON names."""
    return _with_json_names(message_type, {name: kind(name) for name, kind in kinds.items()})


def _with_json_names(message_type: Any, by_field_name: Mapping[str, _T]) -> dict[str, _T]:
    fields = message_type.DESCRIPTOR.fields_by_name
    return {alias: item for name, item in by_field_name.items() for alias in (name, fields[name].json_name)}


def _scalar(parse: Callable[[Any], Any]) -> _FieldKind:
    return lambda name: (name, parse)


def _message(fields: Mapping[str, _Field]) -> _FieldKind:
    def kind(name: str) -> _Field:
        def decode(message: Any, value: Any) -> None:
            field = getattr(message, name)
            field.SetInParent()  # "{}" still marks the field as present
            _decode_object(field, value, fields)

        return None, decode

    return kind


def _repeated(fields: Mapping[str, _Field]) -> _FieldKind:
    def kind(name: str) -> _Field:
        def decode(message: Any, value: Any) -> None:
            container = getattr(message, name)
            for index, item in enumerate(_array(value)):
                try:
                    _decode_object(container.add(), item, fields)
                except _Invalid as err:
                    err.under(f"[{index}]")
                    raise

        return None, decode

    return kind


def _repeated_scalar(parse: Callable[[Any], Any]) -> _FieldKind:
    """A repeated number field (``bucketCounts``, ``explicitBounds``): a JSON array of values."""

    def kind(name: str) -> _Field:
        def decode(message: Any, value: Any) -> None:
            container = getattr(message, name)
            for index, item in enumerate(_array(value)):
                try:
                    container.append(parse(item))
                except _Invalid as err:
                    err.under(f"[{index}]")
                    raise

        return None, decode

    return kind


def _any_value(name: str) -> _Field:
    """The kind of a single AnyValue field (a log record's ``body``)."""
    return None, lambda message, value: _decode_any_value(getattr(message, name), value, 0)


def _key_values(name: str) -> _Field:
    """The kind of ``attributes`` fields."""
    return None, lambda message, value: _decode_key_values(getattr(message, name), value, 0)


def _decode_key_values(container: Any, value: Any, depth: int) -> None:
    # Attributes are most of the decoding work, so this loop is hand-written, with a fast path for string
    # values. "key" and "value" are spelled the same in both naming styles.
    for index, item in enumerate(_array(value)):
        kv = container.add()
        try:
            if type(item) is not dict:
                raise _Invalid(f"expected an object, got {_describe(item)}")
            key = item.get("key")
            if type(key) is str:
                kv.key = key
            elif key is not None:
                raise _Invalid(f"expected a string, got {_describe(key)}").under(".key")
            any_value = item.get("value")
            if any_value is None:
                continue
            if type(any_value) is dict and len(any_value) == 1:
                string = any_value.get("stringValue")
                if type(string) is str:
                    kv.value.string_value = string
                    continue
            try:
                _decode_any_value(kv.value, any_value, depth)
            except _Invalid as err:
                err.under(".value")
                raise
        except _Invalid as err:
            err.under(f"[{index}]")
            raise


def _decode_any_value(target: AnyValue, value: Any, depth: int) -> None:
    if type(value) is not dict:
        raise _Invalid(f"expected an object, got {_describe(value)}")
    chosen = None
    for key, item in value.items():
        setter = _ANY_VALUE_SETTERS.get(key)
        if setter is None or item is None:
            continue
        if chosen is not None:
            raise _Invalid(f"an AnyValue holds one value, got both {chosen!r} and {key!r}")
        chosen = key
        try:
            setter(target, item, depth)
        except _Invalid as err:
            err.under(f".{key}")
            raise
    if chosen is None:
        target.SetInParent()  # "{}" is a present but empty AnyValue


def _set_string_value(target: AnyValue, value: Any, depth: int) -> None:
    target.string_value = _string(value)


def _set_bool_value(target: AnyValue, value: Any, depth: int) -> None:
    target.bool_value = _bool(value)


def _set_int_value(target: AnyValue, value: Any, depth: int) -> None:
    target.int_value = _int64(value)


def _set_double_value(target: AnyValue, value: Any, depth: int) -> None:
    target.double_value = _double(value)


def _set_bytes_value(target: AnyValue, value: Any, depth: int) -> None:
    target.bytes_value = _base64(value)


def _set_array_value(target: AnyValue, value: Any, depth: int) -> None:
    array = target.array_value
    array.SetInParent()
    values = _nested_values(value, depth)
    if values is None:
        return
    container = array.values
    for index, item in enumerate(values):
        try:
            _decode_any_value(container.add(), item, depth + 1)
        except _Invalid as err:
            err.under(f".values[{index}]")
            raise


def _set_kvlist_value(target: AnyValue, value: Any, depth: int) -> None:
    kvlist = target.kvlist_value
    kvlist.SetInParent()
    values = _nested_values(value, depth)
    if values is None:
        return
    try:
        _decode_key_values(kvlist.values, values, depth + 1)
    except _Invalid as err:
        err.under(".values")
        raise


def _nested_values(value: Any, depth: int) -> list[Any] | None:
    """The ``values`` array of an arrayValue/kvlistValue object (None when absent)."""
    if type(value) is not dict:
        raise _Invalid(f"expected an object, got {_describe(value)}")
    values = value.get("values")
    if values is None:
        return None
    if depth >= MAX_ANY_VALUE_DEPTH:
        raise _Invalid(f"attribute values nested more than {MAX_ANY_VALUE_DEPTH} levels deep")
    try:
        return _array(values)
    except _Invalid as err:
        raise err.under(".values") from None


# ---- scalar parsers: JSON value -> protobuf field value --------------------------------------------------


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {_preview(value)}"
    return "array" if isinstance(value, list) else "object"


def _preview(text: str, limit: int = 40) -> str:
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def _array(value: Any) -> list[Any]:
    if type(value) is not list:
        raise _Invalid(f"expected an array, got {_describe(value)}")
    return value


def _string(value: Any) -> str:
    if type(value) is not str:
        raise _Invalid(f"expected a string, got {_describe(value)}")
    return value


def _bool(value: Any) -> bool:
    if type(value) is not bool:
        raise _Invalid(f"expected true or false, got {_describe(value)}")
    return value


def _integer_parser(low: int, high: int, type_name: str) -> Callable[[Any], int]:
    """proto3 JSON integers: a JSON number or a decimal string (64-bit values are usually strings)."""

    def parse(value: Any) -> int:
        if type(value) is int:
            number = value
        elif type(value) is str:
            # isascii() too: isdigit() also accepts other scripts' digits and superscripts.
            if not (value.isascii() and (value.isdigit() or (value[:1] == "-" and value[1:].isdigit()))):
                raise _Invalid(f"expected a decimal integer, got string {_preview(value)}")
            number = int(value)
        elif type(value) is float:
            if not value.is_integer():
                raise _Invalid(f"expected an integer, got number {value!r}")
            if abs(value) > _MAX_EXACT_FLOAT_INT:
                raise _Invalid(f"number {value!r} is not an exact integer; send large integers as strings")
            number = int(value)
        else:
            raise _Invalid(f"expected an integer, got {_describe(value)}")
        if not low <= number <= high:
            raise _Invalid(f"{number} is out of range for {type_name}")
        return number

    return parse


_int32 = _integer_parser(_INT32_MIN, _INT32_MAX, "int32")
_uint32 = _integer_parser(0, _UINT32_MAX, "uint32")
_int64 = _integer_parser(_INT64_MIN, _INT64_MAX, "int64")
_uint64 = _integer_parser(0, _UINT64_MAX, "uint64")

_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_SPECIAL_DOUBLES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _double(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    if type(value) is str:
        special = _SPECIAL_DOUBLES.get(value)
        if special is not None:
            return special
        if _JSON_NUMBER.fullmatch(value):
            number = float(value)
            if math.isfinite(number):
                return number
            raise _Invalid(f"number {_preview(value)} is out of range for double")
    raise _Invalid(f"expected a number, 'NaN', 'Infinity' or '-Infinity', got {_describe(value)}")


def _hex_id_parser(size: int) -> Callable[[Any], bytes]:
    length = 2 * size

    def parse(value: Any) -> bytes:
        if type(value) is not str:
            raise _Invalid(f"expected a hex string, got {_describe(value)}")
        if len(value) == length:
            try:
                raw = bytes.fromhex(value)
            except ValueError:
                raw = b""
            # fromhex() skips whitespace between bytes, so such a string yields fewer bytes.
            if len(raw) == size:
                return raw
            raise _Invalid(f"invalid hex string {_preview(value)}")
        if not value:
            return b""
        raise _Invalid(f"expected {length} hex characters, got {len(value)}")

    return parse


_trace_id = _hex_id_parser(_TRACE_ID_BYTES)
_span_id = _hex_id_parser(_SPAN_ID_BYTES)

_URLSAFE_TO_STANDARD = str.maketrans("-_", "+/")


def _base64(value: Any) -> bytes:
    # proto3 JSON parsers accept standard or URL-safe base64, with or without padding.
    text = _string(value).translate(_URLSAFE_TO_STANDARD)
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except ValueError:  # binascii.Error, or a non-ASCII character
        raise _Invalid(f"invalid base64 {_preview(value)}") from None


def _enum_parser(enum_type: Any, type_name: str) -> Callable[[Any], int]:
    """Enums may be given as their integer value or their name."""
    numbers = dict(enum_type.items())

    def parse(value: Any) -> int:
        if type(value) is str:
            number = numbers.get(value)
            if number is None:
                raise _Invalid(f"unknown {type_name} {_preview(value)}")
            return number
        return _int32(value)

    return parse


_span_kind = _enum_parser(Span.SpanKind, "SpanKind")
_status_code = _enum_parser(Status.StatusCode, "StatusCode")
_severity_number = _enum_parser(SeverityNumber, "SeverityNumber")
_aggregation_temporality = _enum_parser(AggregationTemporality, "AggregationTemporality")


# ---- decoding tables -------------------------------------------------------------------------------------

_ANY_VALUE_SETTERS: dict[str, Callable[[AnyValue, Any, int], None]] = _with_json_names(
    AnyValue,
    {
        "string_value": _set_string_value,
        "bool_value": _set_bool_value,
        "int_value": _set_int_value,
        "double_value": _set_double_value,
        "array_value": _set_array_value,
        "kvlist_value": _set_kvlist_value,
        "bytes_value": _set_bytes_value,
    },
)

_STRING = _scalar(_string)
_UINT32 = _scalar(_uint32)
_UINT64 = _scalar(_uint64)
_TRACE_ID = _scalar(_trace_id)
_SPAN_ID = _scalar(_span_id)

_STATUS_FIELDS = _fields(Status, {"message": _STRING, "code": _scalar(_status_code)})

_EVENT_FIELDS = _fields(
    Span.Event,
    {
        "time_unix_nano": _UINT64,
        "name": _STRING,
        "attributes": _key_values,
        "dropped_attributes_count": _UINT32,
    },
)

_LINK_FIELDS = _fields(
    Span.Link,
    {
        "trace_id": _TRACE_ID,
        "span_id": _SPAN_ID,
        "trace_state": _STRING,
        "attributes": _key_values,
        "dropped_attributes_count": _UINT32,
        "flags": _UINT32,
    },
)

_SPAN_FIELDS = _fields(
    Span,
    {
        "trace_id": _TRACE_ID,
        "span_id": _SPAN_ID,
        "trace_state": _STRING,
        "parent_span_id": _SPAN_ID,
        "flags": _UINT32,
        "name": _STRING,
        "kind": _scalar(_span_kind),
        "start_time_unix_nano": _UINT64,
        "end_time_unix_nano": _UINT64,
        "attributes": _key_values,
        "dropped_attributes_count": _UINT32,
        "events": _repeated(_EVENT_FIELDS),
        "dropped_events_count": _UINT32,
        "links": _repeated(_LINK_FIELDS),
        "dropped_links_count": _UINT32,
        "status": _message(_STATUS_FIELDS),
    },
)

_SCOPE_FIELDS = _fields(
    InstrumentationScope,
    {
        "name": _STRING,
        "version": _STRING,
        "attributes": _key_values,
        "dropped_attributes_count": _UINT32,
    },
)

_RESOURCE_FIELDS = _fields(Resource, {"attributes": _key_values, "dropped_attributes_count": _UINT32})

_SCOPE_SPANS_FIELDS = _fields(
    ScopeSpans,
    {"scope": _message(_SCOPE_FIELDS), "spans": _repeated(_SPAN_FIELDS), "schema_url": _STRING},
)

_RESOURCE_SPANS_FIELDS = _fields(
    ResourceSpans,
    {
        "resource": _message(_RESOURCE_FIELDS),
        "scope_spans": _repeated(_SCOPE_SPANS_FIELDS),
        "schema_url": _STRING,
    },
)

_REQUEST_FIELDS = _fields(ExportTraceServiceRequest, {"resource_spans": _repeated(_RESOURCE_SPANS_FIELDS)})

# ---- logs ------------------------------------------------------------------------------------------------

_LOG_RECORD_FIELDS = _fields(
    LogRecord,
    {
        "time_unix_nano": _UINT64,
        "observed_time_unix_nano": _UINT64,
        "severity_number": _scalar(_severity_number),
        "severity_text": _STRING,
        "body": _any_value,
        "attributes": _key_values,
        "dropped_attributes_count": _UINT32,
        "flags": _UINT32,
        "trace_id": _TRACE_ID,
        "span_id": _SPAN_ID,
        "event_name": _STRING,
    },
)

_SCOPE_LOGS_FIELDS = _fields(
    ScopeLogs,
    {"scope": _message(_SCOPE_FIELDS), "log_records": _repeated(_LOG_RECORD_FIELDS), "schema_url": _STRING},
)

_RESOURCE_LOGS_FIELDS = _fields(
    ResourceLogs,
    {
        "resource": _message(_RESOURCE_FIELDS),
        "scope_logs": _repeated(_SCOPE_LOGS_FIELDS),
        "schema_url": _STRING,
    },
)

_LOGS_REQUEST_FIELDS = _fields(ExportLogsServiceRequest, {"resource_logs": _repeated(_RESOURCE_LOGS_FIELDS)})


# ---- metrics ---------------------------------------------------------------------------------------------

_DOUBLE = _scalar(_double)
_INT32 = _scalar(_int32)
_INT64 = _scalar(_int64)
_TEMPORALITY = _scalar(_aggregation_temporality)

_EXEMPLAR_FIELDS = _fields(
    Exemplar,
    {
        "filtered_attributes": _key_values,
        "time_unix_nano": _UINT64,
        "as_double": _DOUBLE,
        "as_int": _INT64,
        "span_id": _SPAN_ID,
        "trace_id": _TRACE_ID,
    },
)

_NUMBER_POINT_FIELDS = _fields(
    NumberDataPoint,
    {
        "attributes": _key_values,
        "start_time_unix_nano": _UINT64,
        "time_unix_nano": _UINT64,
        "as_double": _DOUBLE,
        "as_int": _INT64,
        "exemplars": _repeated(_EXEMPLAR_FIELDS),
        "flags": _UINT32,
    },
)

_HISTOGRAM_POINT_FIELDS = _fields(
    HistogramDataPoint,
    {
        "attributes": _key_values,
        "start_time_unix_nano": _UINT64,
        "time_unix_nano": _UINT64,
        "count": _UINT64,
        "sum": _DOUBLE,
        "bucket_counts": _repeated_scalar(_uint64),
        "explicit_bounds": _repeated_scalar(_double),
        "exemplars": _repeated(_EXEMPLAR_FIELDS),
        "flags": _UINT32,
        "min": _DOUBLE,
        "max": _DOUBLE,
    },
)

_BUCKETS_FIELDS = _fields(
    ExponentialHistogramDataPoint.Buckets,
    {"offset": _INT32, "bucket_counts": _repeated_scalar(_uint64)},
)

_EXPONENTIAL_POINT_FIELDS = _fields(
    ExponentialHistogramDataPoint,
    {
        "attributes": _key_values,
        "start_time_unix_nano": _UINT64,
        "time_unix_nano": _UINT64,
        "count": _UINT64,
        "sum": _DOUBLE,
        "scale": _INT32,
        "zero_count": _UINT64,
        "positive": _message(_BUCKETS_FIELDS),
        "negative": _message(_BUCKETS_FIELDS),
        "flags": _UINT32,
        "exemplars": _repeated(_EXEMPLAR_FIELDS),
        "min": _DOUBLE,
        "max": _DOUBLE,
        "zero_threshold": _DOUBLE,
    },
)

_QUANTILE_FIELDS = _fields(SummaryDataPoint.ValueAtQuantile, {"quantile": _DOUBLE, "value": _DOUBLE})

_SUMMARY_POINT_FIELDS = _fields(
    SummaryDataPoint,
    {
        "attributes": _key_values,
        "start_time_unix_nano": _UINT64,
        "time_unix_nano": _UINT64,
        "count": _UINT64,
        "sum": _DOUBLE,
        "quantile_values": _repeated(_QUANTILE_FIELDS),
        "flags": _UINT32,
    },
)

_METRIC_FIELDS = _fields(
    Metric,
    {
        "name": _STRING,
        "description": _STRING,
        "unit": _STRING,
        "gauge": _message(_fields(Gauge, {"data_points": _repeated(_NUMBER_POINT_FIELDS)})),
        "sum": _message(
            _fields(
                Sum,
                {
                    "data_points": _repeated(_NUMBER_POINT_FIELDS),
                    "aggregation_temporality": _TEMPORALITY,
                    "is_monotonic": _scalar(_bool),
                },
            )
        ),
        "histogram": _message(
            _fields(
                Histogram,
                {"data_points": _repeated(_HISTOGRAM_POINT_FIELDS), "aggregation_temporality": _TEMPORALITY},
            )
        ),
        "exponential_histogram": _message(
            _fields(
                ExponentialHistogram,
                {
                    "data_points": _repeated(_EXPONENTIAL_POINT_FIELDS),
                    "aggregation_temporality": _TEMPORALITY,
                },
            )
        ),
        "summary": _message(_fields(Summary, {"data_points": _repeated(_SUMMARY_POINT_FIELDS)})),
        "metadata": _key_values,
    },
)

_SCOPE_METRICS_FIELDS = _fields(
    ScopeMetrics,
    {"scope": _message(_SCOPE_FIELDS), "metrics": _repeated(_METRIC_FIELDS), "schema_url": _STRING},
)

_RESOURCE_METRICS_FIELDS = _fields(
    ResourceMetrics,
    {
        "resource": _message(_RESOURCE_FIELDS),
        "scope_metrics": _repeated(_SCOPE_METRICS_FIELDS),
        "schema_url": _STRING,
    },
)

_METRICS_REQUEST_FIELDS = _fields(
    ExportMetricsServiceRequest, {"resource_metrics": _repeated(_RESOURCE_METRICS_FIELDS)}
)
