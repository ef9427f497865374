"""Fast, strict OTLP/JSON decoding of trace, logs and metrics export requests.

Follows the OTLP JSON mapping (https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding), which is
proto3 JSON with two deviations: trace and span ids are hex strings instead of base64, and enums are
integers. Decoding also accepts the proto field names, enum names and the other spellings proto3 JSON
allows, ignores unknown keys and rejects wrong JSON types with an `OtlpJsonError` that names the JSON
path. This module holds the entry points and the field tables of the three requests; the walking and
the scalar parsers are :mod:`otelsignals.otlp.json_values`.

Not covered: ``Resource.entityRefs`` and the profiles-only ``keyStrindex`` / ``stringValueStrindex``
dictionary references, ignored (as unknown keys).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import orjson
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    InstrumentationScope,
)
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
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

from otelsignals.otlp.json_values import (
    Field,
    Invalid,
    any_value,
    decode_object,
    fields_of,
    key_values,
    message_of,
    parse_aggregation_temporality,
    parse_bool,
    parse_double,
    parse_int32,
    parse_int64,
    parse_severity_number,
    parse_span_id,
    parse_span_kind,
    parse_status_code,
    parse_string,
    parse_trace_id,
    parse_uint32,
    parse_uint64,
    repeated,
    repeated_scalar,
    scalar,
)


class OtlpJsonError(ValueError):
    """Raised for input that is not valid OTLP/JSON; the message names the JSON path, e.g.
    'resourceSpans[0].scopeSpans[1].spans[3].traceId: expected 32 hex characters, got 31'.
    ``without_values``: the same without the request's values it quotes, for logs."""

    def __init__(self, message: str, without_values: str | None = None) -> None:
        super().__init__(message)
        self.without_values = message if without_values is None else without_values


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


def _decode_request(data: bytes | str, request: _Request, fields: Mapping[str, Field]) -> _Request:
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        raise OtlpJsonError(f"$: invalid JSON: {err}") from None
    try:
        decode_object(request, document, fields)
    except Invalid as err:
        raise OtlpJsonError(err.message(), err.message(quote_values=False)) from None
    return request


# ---- decoding tables -------------------------------------------------------------------------------------


_STRING = scalar(parse_string)
_UINT32 = scalar(parse_uint32)
_UINT64 = scalar(parse_uint64)
_TRACE_ID = scalar(parse_trace_id)
_SPAN_ID = scalar(parse_span_id)

_STATUS_FIELDS = fields_of(Status, {"message": _STRING, "code": scalar(parse_status_code)})

_EVENT_FIELDS = fields_of(
    Span.Event,
    {
        "time_unix_nano": _UINT64,
        "name": _STRING,
        "attributes": key_values,
        "dropped_attributes_count": _UINT32,
    },
)

_LINK_FIELDS = fields_of(
    Span.Link,
    {
        "trace_id": _TRACE_ID,
        "span_id": _SPAN_ID,
        "trace_state": _STRING,
        "attributes": key_values,
        "dropped_attributes_count": _UINT32,
        "flags": _UINT32,
    },
)

_SPAN_FIELDS = fields_of(
    Span,
    {
        "trace_id": _TRACE_ID,
        "span_id": _SPAN_ID,
        "trace_state": _STRING,
        "parent_span_id": _SPAN_ID,
        "flags": _UINT32,
        "name": _STRING,
        "kind": scalar(parse_span_kind),
        "start_time_unix_nano": _UINT64,
        "end_time_unix_nano": _UINT64,
        "attributes": key_values,
        "dropped_attributes_count": _UINT32,
        "events": repeated(_EVENT_FIELDS),
        "dropped_events_count": _UINT32,
        "links": repeated(_LINK_FIELDS),
        "dropped_links_count": _UINT32,
        "status": message_of(_STATUS_FIELDS),
    },
)

_SCOPE_FIELDS = fields_of(
    InstrumentationScope,
    {
        "name": _STRING,
        "version": _STRING,
        "attributes": key_values,
        "dropped_attributes_count": _UINT32,
    },
)

_RESOURCE_FIELDS = fields_of(Resource, {"attributes": key_values, "dropped_attributes_count": _UINT32})

_SCOPE_SPANS_FIELDS = fields_of(
    ScopeSpans,
    {"scope": message_of(_SCOPE_FIELDS), "spans": repeated(_SPAN_FIELDS), "schema_url": _STRING},
)

_RESOURCE_SPANS_FIELDS = fields_of(
    ResourceSpans,
    {
        "resource": message_of(_RESOURCE_FIELDS),
        "scope_spans": repeated(_SCOPE_SPANS_FIELDS),
        "schema_url": _STRING,
    },
)

_REQUEST_FIELDS = fields_of(ExportTraceServiceRequest, {"resource_spans": repeated(_RESOURCE_SPANS_FIELDS)})

# ---- logs ------------------------------------------------------------------------------------------------

_LOG_RECORD_FIELDS = fields_of(
    LogRecord,
    {
        "time_unix_nano": _UINT64,
        "observed_time_unix_nano": _UINT64,
        "severity_number": scalar(parse_severity_number),
        "severity_text": _STRING,
        "body": any_value,
        "attributes": key_values,
        "dropped_attributes_count": _UINT32,
        "flags": _UINT32,
        "trace_id": _TRACE_ID,
        "span_id": _SPAN_ID,
        "event_name": _STRING,
    },
)

_SCOPE_LOGS_FIELDS = fields_of(
    ScopeLogs,
    {"scope": message_of(_SCOPE_FIELDS), "log_records": repeated(_LOG_RECORD_FIELDS), "schema_url": _STRING},
)

_RESOURCE_LOGS_FIELDS = fields_of(
    ResourceLogs,
    {
        "resource": message_of(_RESOURCE_FIELDS),
        "scope_logs": repeated(_SCOPE_LOGS_FIELDS),
        "schema_url": _STRING,
    },
)

_LOGS_REQUEST_FIELDS = fields_of(ExportLogsServiceRequest, {"resource_logs": repeated(_RESOURCE_LOGS_FIELDS)})


# ---- metrics ---------------------------------------------------------------------------------------------

_DOUBLE = scalar(parse_double)
_INT32 = scalar(parse_int32)
_INT64 = scalar(parse_int64)
_TEMPORALITY = scalar(parse_aggregation_temporality)

_EXEMPLAR_FIELDS = fields_of(
    Exemplar,
    {
        "filtered_attributes": key_values,
        "time_unix_nano": _UINT64,
        "as_double": _DOUBLE,
        "as_int": _INT64,
        "span_id": _SPAN_ID,
        "trace_id": _TRACE_ID,
    },
)

_NUMBER_POINT_FIELDS = fields_of(
    NumberDataPoint,
    {
        "attributes": key_values,
        "start_time_unix_nano": _UINT64,
        "time_unix_nano": _UINT64,
        "as_double": _DOUBLE,
        "as_int": _INT64,
        "exemplars": repeated(_EXEMPLAR_FIELDS),
        "flags": _UINT32,
    },
)

_HISTOGRAM_POINT_FIELDS = fields_of(
    HistogramDataPoint,
    {
        "attributes": key_values,
        "start_time_unix_nano": _UINT64,
        "time_unix_nano": _UINT64,
        "count": _UINT64,
        "sum": _DOUBLE,
        "bucket_counts": repeated_scalar(parse_uint64),
        "explicit_bounds": repeated_scalar(parse_double),
        "exemplars": repeated(_EXEMPLAR_FIELDS),
        "flags": _UINT32,
        "min": _DOUBLE,
        "max": _DOUBLE,
    },
)

_BUCKETS_FIELDS = fields_of(
    ExponentialHistogramDataPoint.Buckets,
    {"offset": _INT32, "bucket_counts": repeated_scalar(parse_uint64)},
)

_EXPONENTIAL_POINT_FIELDS = fields_of(
    ExponentialHistogramDataPoint,
    {
        "attributes": key_values,
        "start_time_unix_nano": _UINT64,
        "time_unix_nano": _UINT64,
        "count": _UINT64,
        "sum": _DOUBLE,
        "scale": _INT32,
        "zero_count": _UINT64,
        "positive": message_of(_BUCKETS_FIELDS),
        "negative": message_of(_BUCKETS_FIELDS),
        "flags": _UINT32,
        "exemplars": repeated(_EXEMPLAR_FIELDS),
        "min": _DOUBLE,
        "max": _DOUBLE,
        "zero_threshold": _DOUBLE,
    },
)

_QUANTILE_FIELDS = fields_of(SummaryDataPoint.ValueAtQuantile, {"quantile": _DOUBLE, "value": _DOUBLE})

_SUMMARY_POINT_FIELDS = fields_of(
    SummaryDataPoint,
    {
        "attributes": key_values,
        "start_time_unix_nano": _UINT64,
        "time_unix_nano": _UINT64,
        "count": _UINT64,
        "sum": _DOUBLE,
        "quantile_values": repeated(_QUANTILE_FIELDS),
        "flags": _UINT32,
    },
)

_METRIC_FIELDS = fields_of(
    Metric,
    {
        "name": _STRING,
        "description": _STRING,
        "unit": _STRING,
        "gauge": message_of(fields_of(Gauge, {"data_points": repeated(_NUMBER_POINT_FIELDS)})),
        "sum": message_of(
            fields_of(
                Sum,
                {
                    "data_points": repeated(_NUMBER_POINT_FIELDS),
                    "aggregation_temporality": _TEMPORALITY,
                    "is_monotonic": scalar(parse_bool),
                },
            )
        ),
        "histogram": message_of(
            fields_of(
                Histogram,
                {"data_points": repeated(_HISTOGRAM_POINT_FIELDS), "aggregation_temporality": _TEMPORALITY},
            )
        ),
        "exponential_histogram": message_of(
            fields_of(
                ExponentialHistogram,
                {
                    "data_points": repeated(_EXPONENTIAL_POINT_FIELDS),
                    "aggregation_temporality": _TEMPORALITY,
                },
            )
        ),
        "summary": message_of(fields_of(Summary, {"data_points": repeated(_SUMMARY_POINT_FIELDS)})),
        "metadata": key_values,
    },
)

_SCOPE_METRICS_FIELDS = fields_of(
    ScopeMetrics,
    {"scope": message_of(_SCOPE_FIELDS), "metrics": repeated(_METRIC_FIELDS), "schema_url": _STRING},
)

_RESOURCE_METRICS_FIELDS = fields_of(
    ResourceMetrics,
    {
        "resource": message_of(_RESOURCE_FIELDS),
        "scope_metrics": repeated(_SCOPE_METRICS_FIELDS),
        "schema_url": _STRING,
    },
)

_METRICS_REQUEST_FIELDS = fields_of(
    ExportMetricsServiceRequest, {"resource_metrics": repeated(_RESOURCE_METRICS_FIELDS)}
)
