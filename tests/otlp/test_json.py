import base64
import contextlib
import json
import math
from typing import Any

import orjson
import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status
from opentelemetry.sdk.resources import Resource as SdkResource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, StatusCode

from otelsignals.otlp.json_decode import OtlpJsonError, decode_trace_request
from otelsignals.otlp.json_encode import encode_trace_request, span_to_json_dict
from otelsignals.otlp.json_values import MAX_ANY_VALUE_DEPTH

TRACE_ID = bytes.fromhex("5b8efff798038103d269b633813fc60c")
SPAN_ID = bytes.fromhex("eee19b7ec3c1b174")
PARENT_ID = bytes.fromhex("eee19b7ec3c1b173")

# ---------------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------------


def kv(key: str, value: AnyValue | None = None) -> KeyValue:
    return KeyValue(key=key, value=value)


def rich_request() -> ExportTraceServiceRequest:
    """A request that sets every field the codec covers, including oneof members holding defaults."""
    nested = AnyValue(
        kvlist_value=KeyValueList(
            values=[
                kv(
                    "inner.list",
                    AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=-1), AnyValue()])),
                ),
                kv("inner.empty.kvlist", AnyValue(kvlist_value=KeyValueList())),
                kv("inner.no.value"),
            ]
        )
    )
    attributes = [
        kv("str", AnyValue(string_value='héllo "world" \n ✓')),
        kv("str.empty", AnyValue(string_value="")),
        kv("bool.true", AnyValue(bool_value=True)),
        kv("bool.false", AnyValue(bool_value=False)),
        kv("int", AnyValue(int_value=-(2**63))),
        kv("int.max", AnyValue(int_value=2**63 - 1)),
        kv("int.zero", AnyValue(int_value=0)),
        kv("double", AnyValue(double_value=3.25)),
        kv("double.zero", AnyValue(double_value=0.0)),
        kv("double.nan", AnyValue(double_value=math.nan)),
        kv("double.inf", AnyValue(double_value=math.inf)),
        kv("double.-inf", AnyValue(double_value=-math.inf)),
        kv("bytes", AnyValue(bytes_value=b"\x00\xff\xfe binary")),
        kv("bytes.empty", AnyValue(bytes_value=b"")),
        kv("array", AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="a"), nested]))),
        kv("array.empty", AnyValue(array_value=ArrayValue())),
        kv("kvlist", nested),
        kv("empty.any", AnyValue()),
        kv("unset.any"),
    ]
    span = Span(
        trace_id=TRACE_ID,
        span_id=SPAN_ID,
        trace_state="vendor=value,other=1",
        parent_span_id=PARENT_ID,
        flags=0x301,
        name="POST /v1/chat",
        kind=Span.SPAN_KIND_SERVER,
        start_time_unix_nano=1_700_000_000_123_456_789,
        end_time_unix_nano=2**64 - 1,
        attributes=attributes,
        dropped_attributes_count=3,
        events=[
            Span.Event(
                time_unix_nano=1_700_000_000_200_000_000,
                name="gen_ai.prompt",
                attributes=[kv("gen_ai.prompt", AnyValue(string_value="hi"))],
                dropped_attributes_count=1,
            ),
            Span.Event(),
        ],
        dropped_events_count=4,
        links=[
            Span.Link(
                trace_id=TRACE_ID,
                span_id=PARENT_ID,
                trace_state="k=v",
                attributes=[kv("link.kind", AnyValue(string_value="follows"))],
                dropped_attributes_count=2,
                flags=0x100,
            ),
            Span.Link(),
        ],
        dropped_links_count=5,
        status=Status(code=Status.STATUS_CODE_ERROR, message="upstream timeout"),
    )
    root_span = Span(trace_id=TRACE_ID, span_id=PARENT_ID, name="root", status=Status())
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(
                    attributes=[kv("service.name", AnyValue(string_value="agent"))],
                    dropped_attributes_count=7,
                ),
                scope_spans=[
                    ScopeSpans(
                        scope=InstrumentationScope(
                            name="otelsignals.tests",
                            version="1.2.3",
                            attributes=[kv("scope.attr", AnyValue(bool_value=True))],
                            dropped_attributes_count=8,
                        ),
                        spans=[span, root_span, Span()],
                        schema_url="https://opentelemetry.io/schemas/1.26.0",
                    ),
                    ScopeSpans(scope=InstrumentationScope()),
                    ScopeSpans(),
                ],
                schema_url="https://opentelemetry.io/schemas/1.25.0",
            ),
            ResourceSpans(resource=Resource()),
            ResourceSpans(),
        ]
    )


_ID_KEYS = {"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"}


def base64_ids_to_hex(document: Any) -> Any:
    """json_format writes bytes as base64; OTLP/JSON writes trace and span ids as hex."""
    if isinstance(document, dict):
        return {
            key: base64.b64decode(value).hex() if key in _ID_KEYS else base64_ids_to_hex(value)
            for key, value in document.items()
        }
    if isinstance(document, list):
        return [base64_ids_to_hex(item) for item in document]
    return document


def reference_dict(request: ExportTraceServiceRequest, **options: Any) -> dict[str, Any]:
    # OTLP/JSON writes enums as integers, so the reference is asked for integers too.
    options.setdefault("use_integers_for_enums", True)
    return base64_ids_to_hex(json_format.MessageToDict(request, **options))


def request_with_span(span_json: dict[str, Any]) -> dict[str, Any]:
    """A request document whose only span is ``span_json``, at resourceSpans[0].scopeSpans[0].spans[0]."""
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span_json]}]}]}


def first_span(request: ExportTraceServiceRequest) -> Span:
    return request.resource_spans[0].scope_spans[0].spans[0]


def decode_doc(document: Any) -> ExportTraceServiceRequest:
    """Decode a document given as Python data, or as raw JSON bytes."""
    return decode_trace_request(document if isinstance(document, bytes) else orjson.dumps(document))


# ---------------------------------------------------------------------------------------------------------
# round trip and agreement with json_format
# ---------------------------------------------------------------------------------------------------------


def test_rich_request_round_trips() -> None:
    request = rich_request()
    assert decode_trace_request(encode_trace_request(request)) == request


def test_rich_request_matches_json_format() -> None:
    request = rich_request()
    assert orjson.loads(encode_trace_request(request)) == reference_dict(request)


def test_decodes_json_format_output_with_hex_ids() -> None:
    # MessageToJson writes enum names, so this also covers decoding them.
    request = rich_request()
    reference = base64_ids_to_hex(json.loads(json_format.MessageToJson(request)))
    assert reference["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["kind"] == "SPAN_KIND_SERVER"
    assert decode_trace_request(json.dumps(reference)) == request


def test_decodes_snake_case_field_names() -> None:
    request = rich_request()
    reference = reference_dict(request, preserving_proto_field_name=True)
    assert "resource_spans" in reference
    assert decode_doc(reference) == request


def test_encoding_is_compact_and_keeps_oneof_defaults() -> None:
    body = encode_trace_request(rich_request())
    assert not body.endswith(b"\n")
    assert body == orjson.dumps(orjson.loads(body))
    attributes = {
        a["key"]: a.get("value")
        for a in orjson.loads(body)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]
    }
    assert attributes["str.empty"] == {"stringValue": ""}
    assert attributes["bool.false"] == {"boolValue": False}
    assert attributes["int.zero"] == {"intValue": "0"}
    assert attributes["double.zero"] == {"doubleValue": 0.0}
    assert attributes["double.nan"] == {"doubleValue": "NaN"}
    assert attributes["double.-inf"] == {"doubleValue": "-Infinity"}
    assert attributes["bytes"] == {"bytesValue": base64.b64encode(b"\x00\xff\xfe binary").decode()}
    assert attributes["array.empty"] == {"arrayValue": {}}
    assert attributes["empty.any"] == {}
    assert attributes["unset.any"] is None


def test_span_to_json_dict() -> None:
    span = rich_request().resource_spans[0].scope_spans[0].spans[0]
    out = span_to_json_dict(span)
    assert out["traceId"] == "5b8efff798038103d269b633813fc60c"
    assert out["spanId"] == "eee19b7ec3c1b174"
    assert out["parentSpanId"] == "eee19b7ec3c1b173"
    assert out["kind"] == 2
    assert out["startTimeUnixNano"] == "1700000000123456789"
    assert out["endTimeUnixNano"] == str(2**64 - 1)
    assert out["status"] == {"code": 2, "message": "upstream timeout"}
    assert out["links"][0]["flags"] == 0x100
    assert span_to_json_dict(Span()) == {}
    assert span_to_json_dict(Span(status=Status())) == {"status": {}}


def test_empty_request() -> None:
    assert encode_trace_request(ExportTraceServiceRequest()) == b"{}"
    assert decode_trace_request(b"{}") == ExportTraceServiceRequest()
    assert decode_trace_request("{}") == ExportTraceServiceRequest()


# ---------------------------------------------------------------------------------------------------------
# lenient decoding where OTLP/JSON and proto3 JSON allow it
# ---------------------------------------------------------------------------------------------------------


def test_decode_accepts_alternative_spellings() -> None:
    request = decode_doc(
        request_with_span(
            {
                "trace_id": TRACE_ID.hex().upper(),
                "spanId": "EeE19b7ec3c1b174",
                "parent_span_id": "",
                "kind": "SPAN_KIND_CLIENT",
                "start_time_unix_nano": 1_700_000_000_123_456_789,
                "endTimeUnixNano": "1700000000223456789",
                "flags": "257",
                "dropped_attributes_count": 2.0,
                "status": {"code": "STATUS_CODE_OK", "message": "fine"},
                "attributes": [
                    {"key": "i", "value": {"int_value": 42}},
                    {"key": "i.str", "value": {"intValue": "-42"}},
                    {"key": "d", "value": {"double_value": 7}},
                    {"key": "d.str", "value": {"doubleValue": "1.5e3"}},
                    {"key": "d.nan", "value": {"doubleValue": "NaN"}},
                    {"key": "d.inf", "value": {"doubleValue": "Infinity"}},
                    {"key": "b.urlsafe", "value": {"bytesValue": "-_8"}},
                    {"key": "b.std", "value": {"bytes_value": "+/8="}},
                    {"key": "kv", "value": {"kvlist_value": {"values": [{"key": "x"}]}}},
                    {"key": "arr", "value": {"array_value": {"values": [{"bool_value": True}]}}},
                ],
            }
        )
    )
    span = first_span(request)
    assert span.trace_id == TRACE_ID
    assert span.span_id == SPAN_ID
    assert span.parent_span_id == b""
    assert span.kind == Span.SPAN_KIND_CLIENT
    assert span.start_time_unix_nano == 1_700_000_000_123_456_789
    assert span.end_time_unix_nano == 1_700_000_000_223_456_789
    assert span.flags == 257
    assert span.dropped_attributes_count == 2
    assert span.status == Status(code=Status.STATUS_CODE_OK, message="fine")
    values = {a.key: a.value for a in span.attributes}
    assert values["i"] == AnyValue(int_value=42)
    assert values["i.str"] == AnyValue(int_value=-42)
    assert values["d"] == AnyValue(double_value=7.0)
    assert values["d.str"] == AnyValue(double_value=1500.0)
    assert math.isnan(values["d.nan"].double_value)
    assert values["d.inf"].double_value == math.inf
    assert values["b.urlsafe"] == values["b.std"] == AnyValue(bytes_value=b"\xfb\xff")
    assert values["kv"] == AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="x")]))
    assert values["arr"] == AnyValue(array_value=ArrayValue(values=[AnyValue(bool_value=True)]))
    # Re-encoding gives the canonical spelling: lowercase hex, integers for enums, strings for 64-bit ints.
    out = orjson.loads(encode_trace_request(request))["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert out["traceId"] == TRACE_ID.hex()
    assert out["spanId"] == SPAN_ID.hex()
    assert out["kind"] == 3
    assert out["startTimeUnixNano"] == "1700000000123456789"


def test_decode_ignores_unknown_keys_and_nulls() -> None:
    document = {
        "resourceSpans": [
            {
                "futureField": {"anything": [1, 2, 3]},
                "resource": {"attributes": [], "entityRefs": [{"type": "service"}], "extra": 1},
                "scopeSpans": [
                    {
                        "scope": None,
                        "spans": [
                            {
                                "name": "s",
                                "traceId": None,
                                "status": None,
                                "attributes": [
                                    {"key": "k", "value": {"stringValue": "v", "unknownValue": 1}},
                                    {"key": "n", "value": None, "extra": "x"},
                                    {"key": "o", "value": {"stringValue": None}},
                                ],
                                "newSpanField": "ignored",
                            }
                        ],
                        "schemaUrl": None,
                    }
                ],
            }
        ],
        "partialSuccess": {},
    }
    request = decode_doc(document)
    span = first_span(request)
    assert span.name == "s"
    assert not span.HasField("status")
    assert not request.resource_spans[0].scope_spans[0].HasField("scope")
    assert request.resource_spans[0].HasField("resource")
    assert list(span.attributes) == [
        kv("k", AnyValue(string_value="v")),
        kv("n"),
        kv("o", AnyValue()),
    ]


def test_empty_objects_mark_presence() -> None:
    request = decode_doc(
        {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": [{"status": {}}]}]}]}
    )
    assert request.resource_spans[0].HasField("resource")
    assert request.resource_spans[0].scope_spans[0].HasField("scope")
    assert first_span(request).HasField("status")
    assert orjson.loads(encode_trace_request(request)) == {
        "resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": [{"status": {}}]}]}]
    }


def _nested_kvlist(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"kvlistValue": {}}  # the deepest leaf: one more message than a string
    for _ in range(levels):
        value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}}
    return value


def test_deepest_allowed_nesting_survives_binary_protobuf() -> None:
    request = decode_doc(
        request_with_span(
            {"events": [{"attributes": [{"key": "deep", "value": _nested_kvlist(MAX_ANY_VALUE_DEPTH)}]}]}
        )
    )
    assert ExportTraceServiceRequest.FromString(request.SerializeToString()) == request
    assert decode_trace_request(encode_trace_request(request)) == request
    with pytest.raises(OtlpJsonError, match="nested more than"):
        decode_doc(
            request_with_span(
                {"attributes": [{"key": "deep", "value": _nested_kvlist(MAX_ANY_VALUE_DEPTH + 1)}]}
            )
        )


# ---------------------------------------------------------------------------------------------------------
# invalid input
# ---------------------------------------------------------------------------------------------------------

SPAN_PATH = "resourceSpans[0].scopeSpans[0].spans[0]"
ATTR_PATH = f"{SPAN_PATH}.attributes[0].value"


def attr(value: Any) -> dict[str, Any]:
    return request_with_span({"attributes": [{"key": "k", "value": value}]})


def raw_attr(any_value_json: str) -> bytes:
    """Like attr(), for AnyValue JSON that Python data cannot express (such as integers beyond 64 bits)."""
    return orjson.dumps(attr("PLACEHOLDER")).replace(b'"PLACEHOLDER"', any_value_json.encode())


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "$: expected an object, got array"),
        (None, "$: expected an object, got null"),
        ("resourceSpans", "$: expected an object, got string 'resourceSpans'"),
        ({"resourceSpans": {}}, "resourceSpans: expected an array, got object"),
        ({"resource_spans": [[]]}, "resource_spans[0]: expected an object, got array"),
        ({"resourceSpans": [{"resource": []}]}, "resourceSpans[0].resource: expected an object, got array"),
        (
            {"resourceSpans": [{"resource": {"attributes": {}}}]},
            "resourceSpans[0].resource.attributes: expected an array, got object",
        ),
        (
            {"resourceSpans": [{"resource": {"droppedAttributesCount": -1}}]},
            "resourceSpans[0].resource.droppedAttributesCount: -1 is out of range for uint32",
        ),
        (
            {"resourceSpans": [{"schemaUrl": 1}]},
            "resourceSpans[0].schemaUrl: expected a string, got number 1",
        ),
        (
            {"resourceSpans": [{"scopeSpans": [{"spans": {}}]}]},
            "resourceSpans[0].scopeSpans[0].spans: expected an array, got object",
        ),
        (
            {"resourceSpans": [{"scopeSpans": [{"scope": {"name": True}}]}]},
            "resourceSpans[0].scopeSpans[0].scope.name: expected a string, got boolean",
        ),
        (
            {"resourceSpans": [{"scopeSpans": [{}, {"spans": [{}, {}, {}, {"traceId": "a" * 31}]}]}]},
            "resourceSpans[0].scopeSpans[1].spans[3].traceId: expected 32 hex characters, got 31",
        ),
        (
            {"resourceSpans": [{"scopeSpans": [{"spans": [None]}]}]},
            f"{SPAN_PATH}: expected an object, got null",
        ),
        (request_with_span({"traceId": 5}), f"{SPAN_PATH}.traceId: expected a hex string, got number 5"),
        (
            request_with_span({"spanId": "zz" * 8}),
            f"{SPAN_PATH}.spanId: invalid hex string 'zzzzzzzzzzzzzzzz'",
        ),
        (request_with_span({"spanId": "abcdef 0123 4567"}), f"{SPAN_PATH}.spanId: invalid hex string"),
        (request_with_span({"spanId": "é" * 16}), f"{SPAN_PATH}.spanId: invalid hex string"),
        (
            request_with_span({"parentSpanId": "abc"}),
            f"{SPAN_PATH}.parentSpanId: expected 16 hex characters, got 3",
        ),
        (request_with_span({"name": ["x"]}), f"{SPAN_PATH}.name: expected a string, got array"),
        (
            request_with_span({"kind": "SPAN_KIND_BOGUS"}),
            f"{SPAN_PATH}.kind: unknown SpanKind 'SPAN_KIND_BOGUS'",
        ),
        (request_with_span({"kind": "2"}), f"{SPAN_PATH}.kind: unknown SpanKind '2'"),
        (request_with_span({"kind": 2**31}), f"{SPAN_PATH}.kind: 2147483648 is out of range for int32"),
        (request_with_span({"flags": 2**32}), f"{SPAN_PATH}.flags: 4294967296 is out of range for uint32"),
        (
            request_with_span({"startTimeUnixNano": "-1"}),
            f"{SPAN_PATH}.startTimeUnixNano: -1 is out of range for uint64",
        ),
        (
            request_with_span({"startTimeUnixNano": str(2**64)}),
            f"{SPAN_PATH}.startTimeUnixNano: 18446744073709551616 is out of range for uint64",
        ),
        (
            request_with_span({"endTimeUnixNano": " 12"}),
            f"{SPAN_PATH}.endTimeUnixNano: expected a decimal integer, got string ' 12'",
        ),
        (
            request_with_span({"endTimeUnixNano": "1_000"}),
            f"{SPAN_PATH}.endTimeUnixNano: expected a decimal integer",
        ),
        (
            request_with_span({"endTimeUnixNano": "١٢"}),
            f"{SPAN_PATH}.endTimeUnixNano: expected a decimal integer",
        ),
        (request_with_span({"endTimeUnixNano": 1.5}), f"{SPAN_PATH}.endTimeUnixNano: expected an integer"),
        (request_with_span({"endTimeUnixNano": True}), f"{SPAN_PATH}.endTimeUnixNano: expected an integer"),
        (
            request_with_span({"endTimeUnixNano": 1.7e18}),
            f"{SPAN_PATH}.endTimeUnixNano: number 1.7e+18 is not an exact integer",
        ),
        (request_with_span({"attributes": {}}), f"{SPAN_PATH}.attributes: expected an array, got object"),
        (
            request_with_span({"attributes": ["k"]}),
            f"{SPAN_PATH}.attributes[0]: expected an object, got string",
        ),
        (
            request_with_span({"attributes": [{"key": 1}]}),
            f"{SPAN_PATH}.attributes[0].key: expected a string, got number 1",
        ),
        (attr("v"), f"{ATTR_PATH}: expected an object, got string 'v'"),
        (attr({"stringValue": 1}), f"{ATTR_PATH}.stringValue: expected a string, got number 1"),
        (attr({"string_value": 1}), f"{ATTR_PATH}.string_value: expected a string, got number 1"),
        (attr({"boolValue": "true"}), f"{ATTR_PATH}.boolValue: expected true or false, got string 'true'"),
        (
            attr({"intValue": "9223372036854775808"}),
            f"{ATTR_PATH}.intValue: 9223372036854775808 is out of range for int64",
        ),
        (
            attr({"intValue": 9223372036854775808}),
            f"{ATTR_PATH}.intValue: 9223372036854775808 is out of range for int64",
        ),
        (
            raw_attr('{"intValue": -9223372036854775809}'),  # orjson reads this as a float
            f"{ATTR_PATH}.intValue: number -9.223372036854776e+18 is not an exact integer",
        ),
        (attr({"doubleValue": "nan"}), f"{ATTR_PATH}.doubleValue: expected a number, 'NaN'"),
        (
            attr({"doubleValue": "1e400"}),
            f"{ATTR_PATH}.doubleValue: number '1e400' is out of range for double",
        ),
        (attr({"doubleValue": []}), f"{ATTR_PATH}.doubleValue: expected a number"),
        (attr({"bytesValue": "not base64!"}), f"{ATTR_PATH}.bytesValue: invalid base64 'not base64!'"),
        (attr({"bytesValue": "abcde"}), f"{ATTR_PATH}.bytesValue: invalid base64 'abcde'"),
        (attr({"bytesValue": "ü"}), f"{ATTR_PATH}.bytesValue: invalid base64"),
        (attr({"bytesValue": 12}), f"{ATTR_PATH}.bytesValue: expected a string, got number 12"),
        (attr({"arrayValue": []}), f"{ATTR_PATH}.arrayValue: expected an object, got array"),
        (
            attr({"arrayValue": {"values": {}}}),
            f"{ATTR_PATH}.arrayValue.values: expected an array, got object",
        ),
        (
            attr(
                {
                    "arrayValue": {
                        "values": [
                            {"stringValue": "a"},
                            {"kvlistValue": {"values": [{"key": "x", "value": {"intValue": "1.0"}}]}},
                        ]
                    }
                }
            ),
            f"{ATTR_PATH}.arrayValue.values[1].kvlistValue.values[0].value.intValue: expected a decimal",
        ),
        (
            attr({"stringValue": "a", "intValue": "1"}),
            f"{ATTR_PATH}: an AnyValue holds one value, got both 'stringValue' and 'intValue'",
        ),
        (
            request_with_span({"events": [{"timeUnixNano": False}]}),
            f"{SPAN_PATH}.events[0].timeUnixNano: expected an integer, got boolean",
        ),
        (
            request_with_span({"events": [{"attributes": [{"key": "k", "value": {"intValue": []}}]}]}),
            f"{SPAN_PATH}.events[0].attributes[0].value.intValue: expected an integer, got array",
        ),
        (
            request_with_span({"links": [{}, {"spanId": "0" * 17}]}),
            f"{SPAN_PATH}.links[1].spanId: expected 16 hex characters, got 17",
        ),
        (request_with_span({"links": [{"flags": "x"}]}), f"{SPAN_PATH}.links[0].flags: expected a decimal"),
        (request_with_span({"status": []}), f"{SPAN_PATH}.status: expected an object, got array"),
        (
            request_with_span({"status": {"code": "STATUS_CODE_BROKEN"}}),
            f"{SPAN_PATH}.status.code: unknown StatusCode 'STATUS_CODE_BROKEN'",
        ),
    ],
)
def test_invalid_documents_name_the_path(document: Any, message: str) -> None:
    with pytest.raises(OtlpJsonError) as excinfo:
        decode_doc(document)
    assert str(excinfo.value).startswith(message)


@pytest.mark.parametrize(
    "data",
    [b"", b"not json", b"{", b'{"resourceSpans": [}', b"\xff\xfe", b'{"a": NaN}', "[" * 5000, b'"\\ud800"'],
)
def test_invalid_json(data: bytes | str) -> None:
    with pytest.raises(OtlpJsonError, match=r"^\$: invalid JSON"):
        decode_trace_request(data)


def test_error_is_a_value_error() -> None:
    assert issubclass(OtlpJsonError, ValueError)


def test_long_values_are_shortened_in_messages() -> None:
    with pytest.raises(OtlpJsonError) as excinfo:
        decode_doc(attr({"boolValue": "x" * 10_000}))
    assert len(str(excinfo.value)) < 200


# ---------------------------------------------------------------------------------------------------------
# property-based tests
# ---------------------------------------------------------------------------------------------------------

texts = st.text(max_size=12)
uint32s = st.integers(0, 2**32 - 1)
uint64s = st.integers(0, 2**64 - 1)
# NaN payloads do not survive any JSON encoding, so only the canonical NaN is generated.
doubles = st.floats(allow_nan=False) | st.just(math.nan)


def _any_value(**kwargs: Any) -> AnyValue:
    return AnyValue(**kwargs)


scalar_values = st.one_of(
    st.builds(_any_value, string_value=st.text(max_size=20)),
    st.builds(_any_value, bool_value=st.booleans()),
    st.builds(_any_value, int_value=st.integers(-(2**63), 2**63 - 1)),
    st.builds(_any_value, double_value=doubles),
    st.builds(_any_value, bytes_value=st.binary(max_size=12)),
    st.just(AnyValue()),
)
optional_values = st.none() | st.deferred(lambda: any_values)
key_values = st.builds(KeyValue, key=texts, value=optional_values)
any_values = st.recursive(
    scalar_values,
    lambda children: st.one_of(
        st.builds(ArrayValue, values=st.lists(children, max_size=3)).map(lambda a: AnyValue(array_value=a)),
        st.builds(
            KeyValueList,
            values=st.lists(st.builds(KeyValue, key=texts, value=st.none() | children), max_size=3),
        ).map(lambda kvl: AnyValue(kvlist_value=kvl)),
    ),
    max_leaves=8,
)
attribute_lists = st.lists(key_values, max_size=4)
trace_ids = st.just(b"") | st.binary(min_size=16, max_size=16)
span_ids = st.just(b"") | st.binary(min_size=8, max_size=8)
enum_numbers = st.integers(0, 5) | st.integers(-(2**31), 2**31 - 1)

events = st.builds(
    Span.Event,
    time_unix_nano=uint64s,
    name=texts,
    attributes=attribute_lists,
    dropped_attributes_count=uint32s,
)
links = st.builds(
    Span.Link,
    trace_id=trace_ids,
    span_id=span_ids,
    trace_state=texts,
    attributes=attribute_lists,
    dropped_attributes_count=uint32s,
    flags=uint32s,
)
statuses = st.none() | st.builds(Status, message=texts, code=enum_numbers)
spans = st.builds(
    Span,
    trace_id=trace_ids,
    span_id=span_ids,
    trace_state=texts,
    parent_span_id=span_ids,
    flags=uint32s,
    name=texts,
    kind=enum_numbers,
    start_time_unix_nano=uint64s,
    end_time_unix_nano=uint64s,
    attributes=attribute_lists,
    dropped_attributes_count=uint32s,
    events=st.lists(events, max_size=2),
    dropped_events_count=uint32s,
    links=st.lists(links, max_size=2),
    dropped_links_count=uint32s,
    status=statuses,
)
scopes = st.none() | st.builds(
    InstrumentationScope,
    name=texts,
    version=texts,
    attributes=attribute_lists,
    dropped_attributes_count=uint32s,
)
resources = st.none() | st.builds(Resource, attributes=attribute_lists, dropped_attributes_count=uint32s)
requests = st.builds(
    ExportTraceServiceRequest,
    resource_spans=st.lists(
        st.builds(
            ResourceSpans,
            resource=resources,
            scope_spans=st.lists(
                st.builds(ScopeSpans, scope=scopes, spans=st.lists(spans, max_size=3), schema_url=texts),
                max_size=2,
            ),
            schema_url=texts,
        ),
        max_size=2,
    ),
)

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(requests)
def test_generated_requests_round_trip(request: ExportTraceServiceRequest) -> None:
    assert decode_trace_request(encode_trace_request(request)) == request


@PROPERTY_SETTINGS
@given(requests)
def test_generated_requests_match_json_format(request: ExportTraceServiceRequest) -> None:
    assert orjson.loads(encode_trace_request(request)) == reference_dict(request)
    from_reference = base64_ids_to_hex(json.loads(json_format.MessageToJson(request)))
    assert decode_trace_request(json.dumps(from_reference)) == request


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | st.sampled_from(["NaN", "Infinity", "SPAN_KIND_SERVER", "0" * 32, "0" * 16, "AAEC", "-1", str(2**64)]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["key", "value", "values", "stringValue", "intValue", "arrayValue", "kvlistValue"]
            )
            | st.text(max_size=8),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


def _replace_somewhere(document: Any, data: st.DataObject, replacement: Any) -> Any:
    """``document`` with one randomly chosen node (possibly the root) replaced."""
    if not isinstance(document, dict | list) or not document or data.draw(st.integers(0, 3)) == 0:
        return replacement
    if isinstance(document, dict):
        key = data.draw(st.sampled_from(sorted(document)))
        return {**document, key: _replace_somewhere(document[key], data, replacement)}
    index = data.draw(st.integers(0, len(document) - 1))
    return [*document[:index], _replace_somewhere(document[index], data, replacement), *document[index + 1 :]]


def _decode_or_reject(data: bytes) -> None:
    """Decoding may succeed or raise OtlpJsonError; anything else fails the test."""
    with contextlib.suppress(OtlpJsonError):
        decode_trace_request(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_otlp_json_error(data: bytes) -> None:
    _decode_or_reject(data)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_random_json_only_raises_otlp_json_error(document: Any) -> None:
    _decode_or_reject(orjson.dumps(document))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests, json_values, st.data())
def test_corrupted_requests_only_raise_otlp_json_error(
    request: ExportTraceServiceRequest, replacement: Any, data: st.DataObject
) -> None:
    document = orjson.loads(encode_trace_request(request))
    _decode_or_reject(orjson.dumps(_replace_somewhere(document, data, replacement)))


# ---------------------------------------------------------------------------------------------------------
# real data from the OpenTelemetry SDK
# ---------------------------------------------------------------------------------------------------------


def sdk_request() -> ExportTraceServiceRequest:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=SdkResource.create({"service.name": "agent-gateway", "service.instance.id": "i-1"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer(
        "otelsignals.tests", "0.1.0", schema_url="https://opentelemetry.io/schemas/1.26.0"
    )
    other = provider.get_tracer("other.library")

    with tracer.start_as_current_span("conversation", kind=SpanKind.SERVER) as root:
        root.set_attribute("gen_ai.conversation.id", "c-42")
        root.set_attribute("retry.count", 3)
        root.set_attribute("temperature", 0.7)
        root.set_attribute("streaming", True)
        root.set_attribute("tags", ["a", "b"])
        root.set_attribute("token.counts", [1, 2, 3])
        root.add_event("user.message", {"content": "hello", "length": 5})
        linked = root.get_span_context()
        with tracer.start_as_current_span(
            "llm.call",
            kind=SpanKind.CLIENT,
            links=[Link(linked, {"link.reason": "retry-of", "attempt": 2})],
        ) as child:
            child.add_event("gen_ai.choice", {"finish_reason": "stop", "scores": [0.5, 0.25]})
            child.set_status(StatusCode.ERROR, "rate limited")
            child.record_exception(RuntimeError("boom"))
        with other.start_as_current_span("tool.call", kind=SpanKind.INTERNAL) as tool:
            tool.set_status(StatusCode.OK)
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans())


def test_sdk_spans_round_trip() -> None:
    request = sdk_request()
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert len(spans) == 3
    assert decode_trace_request(encode_trace_request(request)) == request
    assert orjson.loads(encode_trace_request(request)) == reference_dict(request)


def test_sdk_spans_json_shape() -> None:
    request = sdk_request()
    document = orjson.loads(encode_trace_request(request))
    by_name = {
        span["name"]: span
        for rs in document["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    }
    child = by_name["llm.call"]
    root = by_name["conversation"]
    assert child["traceId"] == root["traceId"]
    assert len(child["traceId"]) == 32 and child["traceId"] == child["traceId"].lower()
    assert child["parentSpanId"] == root["spanId"]
    assert child["kind"] == Span.SPAN_KIND_CLIENT
    assert child["status"] == {"code": 2, "message": "rate limited"}
    assert child["links"][0]["spanId"] == root["spanId"]
    assert isinstance(child["startTimeUnixNano"], str)
    assert {e["name"] for e in child["events"]} == {"gen_ai.choice", "exception"}
    root_attributes = {a["key"]: a["value"] for a in root["attributes"]}
    assert root_attributes["retry.count"] == {"intValue": "3"}
    assert root_attributes["temperature"] == {"doubleValue": 0.7}
    assert root_attributes["tags"] == {"arrayValue": {"values": [{"stringValue": "a"}, {"stringValue": "b"}]}}


def test_logs_and_metrics_decode_hex_ids_enum_names_and_name_the_bad_field():
    from otelsignals.otlp.json_decode import decode_logs_request, decode_metrics_request

    logs = decode_logs_request(
        b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"traceId":"0102030405060708090a0b0c0d0e0f10",'
        b'"spanId":"0102030405060708","severityNumber":"SEVERITY_NUMBER_WARN","timeUnixNano":"18446744073709551615",'
        b'"body":{"stringValue":"hi"},"eventName":"gen_ai.user.message"}]}]}]}'
    )
    record = logs.resource_logs[0].scope_logs[0].log_records[0]
    assert record.trace_id == bytes(range(1, 17)) and record.span_id == bytes(range(1, 9))
    assert record.severity_number == 13 and record.time_unix_nano == 2**64 - 1
    assert record.body.string_value == "hi" and record.event_name == "gen_ai.user.message"
    metrics = decode_metrics_request(
        b'{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","sum":{"aggregationTemporality":'
        b'"AGGREGATION_TEMPORALITY_CUMULATIVE","dataPoints":[{"asInt":"-5","exemplars":[{"spanId":'
        b'"0102030405060708","traceId":"0102030405060708090a0b0c0d0e0f10"}]}]}}]}]}]}'
    )
    point = metrics.resource_metrics[0].scope_metrics[0].metrics[0].sum.data_points[0]
    assert metrics.resource_metrics[0].scope_metrics[0].metrics[0].sum.aggregation_temporality == 2
    assert point.as_int == -5 and point.exemplars[0].span_id == bytes(range(1, 9))
    with pytest.raises(
        OtlpJsonError, match=r"resourceMetrics\[0\]\.scopeMetrics\[0\]\.metrics\[0\]\.histogram"
    ):
        decode_metrics_request(
            b'{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"histogram":{"dataPoints":'
            b'[{"bucketCounts":["x"]}]}}]}]}]}'
        )
