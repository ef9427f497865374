"""Span records as serialized protobuf: split a request, re-encode it, split it by size."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import (
    SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK,
    SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK,
    ResourceSpans,
    ScopeSpans,
    Span,
)

from otelsignals.otlp.wire import (
    ScopeContext,
    SpanRecord,
    encode_request,
    is_valid_id,
    split_by_size,
    split_request,
)

REMOTE_PARENT = SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK | SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK  # 0x300
TRACE_A = bytes(range(1, 17))
TRACE_B = bytes(range(17, 33))


def attrs(**values: str) -> list[KeyValue]:
    return [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in values.items()]


def span(
    span_id: int,
    parent_id: int = 0,
    trace_id: bytes = TRACE_A,
    name: str = "op",
    flags: int = 0,
    padding: int = 0,
) -> Span:
    return Span(
        trace_id=trace_id,
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent_id.to_bytes(8, "big") if parent_id else b"",
        name=name,
        flags=flags,
        start_time_unix_nano=1_700_000_000_000_000_000 + span_id,
        end_time_unix_nano=1_700_000_000_000_000_000 + span_id + 1000,
        attributes=attrs(payload="x" * padding) if padding else [],
    )


def scope_key(scope_spans: ScopeSpans) -> tuple[bytes | None, str]:
    scope = scope_spans.scope.SerializeToString() if scope_spans.HasField("scope") else None
    return scope, scope_spans.schema_url


def resource_key(resource_spans: ResourceSpans) -> tuple[bytes | None, str]:
    resource = resource_spans.resource.SerializeToString() if resource_spans.HasField("resource") else None
    return resource, resource_spans.schema_url


def valid(s: Span) -> bool:
    return is_valid_id(s.trace_id, 16) and is_valid_id(s.span_id, 8)


def normalise(request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """The same spans grouped once per distinct resource, then once per distinct scope, in order of
    first appearance, without invalid spans or empty groups."""
    groups: dict[
        tuple[bytes | None, str], tuple[ResourceSpans, dict[tuple[bytes | None, str], ScopeSpans]]
    ] = {}
    out = ExportTraceServiceRequest()
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            spans = [s for s in scope_spans.spans if valid(s)]
            if not spans:
                continue
            rkey = resource_key(resource_spans)
            if rkey not in groups:
                target = out.resource_spans.add(schema_url=resource_spans.schema_url)
                if resource_spans.HasField("resource"):
                    target.resource.CopyFrom(resource_spans.resource)
                groups[rkey] = (target, {})
            target, scopes = groups[rkey]
            skey = scope_key(scope_spans)
            if skey not in scopes:
                scope_target = target.scope_spans.add(schema_url=scope_spans.schema_url)
                if scope_spans.HasField("scope"):
                    scope_target.scope.CopyFrom(scope_spans.scope)
                scopes[skey] = scope_target
            scopes[skey].spans.extend(spans)
    return out


def decode(records: Iterable[SpanRecord]) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(encode_request(records))


def mixed_request() -> ExportTraceServiceRequest:
    service_a = Resource(attributes=attrs(**{"service.name": "a"}))
    service_b = Resource(attributes=attrs(**{"service.name": "b"}))
    lib = InstrumentationScope(name="lib", version="1.0")
    other = InstrumentationScope(name="other")
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=service_a,
                schema_url="https://opentelemetry.io/schemas/1.26.0",
                scope_spans=[
                    ScopeSpans(scope=lib, spans=[span(1), span(2, 1)], schema_url="https://s/1"),
                    ScopeSpans(scope=other, spans=[span(3, 1, name="é 🚩")]),
                    ScopeSpans(spans=[span(4, 1)]),  # scope absent
                    ScopeSpans(scope=InstrumentationScope(), spans=[span(5, 1)]),  # scope present, empty
                    ScopeSpans(scope=lib, spans=[]),  # nothing to carry
                ],
            ),
            ResourceSpans(scope_spans=[ScopeSpans(scope=lib, spans=[span(6, trace_id=TRACE_B)])]),  # absent
            ResourceSpans(resource=Resource(), scope_spans=[ScopeSpans(spans=[span(7, trace_id=TRACE_B)])]),
            ResourceSpans(
                resource=service_b,
                scope_spans=[ScopeSpans(scope=lib, spans=[span(8, trace_id=TRACE_B, flags=REMOTE_PARENT)])],
            ),
            # The same resource as the first, sent again further down the request.
            ResourceSpans(
                resource=service_a,
                schema_url="https://opentelemetry.io/schemas/1.26.0",
                scope_spans=[ScopeSpans(scope=lib, spans=[span(9, 2)], schema_url="https://s/1")],
            ),
            # Same resource, other schema URL: a different group.
            ResourceSpans(resource=service_a, scope_spans=[ScopeSpans(scope=lib, spans=[span(10, 2)])]),
            ResourceSpans(),
        ]
    )


# -- split_request / encode_request ---------------------------------------------------------------
def test_round_trip_equals_the_original_after_grouping() -> None:
    request = mixed_request()
    split = split_request(request)
    assert split.invalid_spans == 0
    assert len(split.records) == 10
    decoded = decode(split.records)
    assert decoded == normalise(request)
    # Absent stays absent, empty stays present-but-empty.
    assert [rs.HasField("resource") for rs in decoded.resource_spans] == [True, False, True, True, True]
    assert [ss.HasField("scope") for ss in decoded.resource_spans[0].scope_spans] == [True, True, False, True]


def test_round_trip_of_a_request_that_is_already_grouped_is_byte_identical() -> None:
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=attrs(**{"service.name": "a"})),
                schema_url="https://opentelemetry.io/schemas/1.26.0",
                scope_spans=[
                    ScopeSpans(
                        scope=InstrumentationScope(name="x"), spans=[span(1), span(2, 1)], schema_url="u"
                    ),
                    ScopeSpans(spans=[span(3, 1)]),
                ],
            ),
            ResourceSpans(scope_spans=[ScopeSpans(spans=[span(4, trace_id=TRACE_B)])]),
        ]
    )
    assert encode_request(split_request(request).records) == request.SerializeToString()


def test_span_bytes_are_the_original_serialization() -> None:
    request = mixed_request()
    originals = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    records = split_request(request).records
    assert [r.data for r in records] == [s.SerializeToString() for s in originals]
    for record, original in zip(records, originals, strict=True):
        assert record.trace_id == original.trace_id
        assert record.span_id == original.span_id
        assert len(record) == len(original.SerializeToString())


def test_records_carry_their_context_and_ingest_seq() -> None:
    request = mixed_request()
    records = split_request(request, ingest_seq=42).records
    assert {r.ingest_seq for r in records} == {42}
    first = records[0].context
    assert first.resource == request.resource_spans[0].resource.SerializeToString()
    assert first.resource_schema_url == "https://opentelemetry.io/schemas/1.26.0"
    assert first.scope == InstrumentationScope(name="lib", version="1.0").SerializeToString()
    assert first.scope_schema_url == "https://s/1"
    assert records[1].context is first  # spans of one ScopeSpans share one context
    assert records[3].context.scope is None
    assert records[4].context.scope == b""
    assert records[5].context.resource is None
    assert records[6].context.resource == b""


@pytest.mark.parametrize(
    ("trace_id", "span_id"),
    [
        (b"", b"\x01" * 8),
        (b"\x01" * 15, b"\x01" * 8),
        (b"\x01" * 17, b"\x01" * 8),
        (bytes(16), b"\x01" * 8),
        (b"\x01" * 16, b""),
        (b"\x01" * 16, b"\x01" * 7),
        (b"\x01" * 16, b"\x01" * 9),
        (b"\x01" * 16, bytes(8)),
    ],
)
def test_invalid_ids_are_counted_and_excluded(trace_id: bytes, span_id: bytes) -> None:
    bad = Span(trace_id=trace_id, span_id=span_id, name="bad")
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span(1), bad, span(2, 1)])])]
    )
    split = split_request(request)
    assert split.invalid_spans == 1
    assert [r.span_id for r in split.records] == [(1).to_bytes(8, "big"), (2).to_bytes(8, "big")]
    assert decode(split.records) == normalise(request)


def test_a_request_of_only_invalid_spans_yields_nothing() -> None:
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[Span(), Span(trace_id=bytes(16))])])]
    )
    split = split_request(request)
    assert (split.records, split.invalid_spans) == ([], 2)
    assert encode_request(split.records) == b""


@pytest.mark.parametrize(
    ("flags", "local_root"),
    [
        (REMOTE_PARENT, True),  # parent known to be remote: root of this service's part
        (REMOTE_PARENT | 0x01, True),  # with the sampled trace flag
        (SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, False),  # parent known to be local
        (SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK, False),  # "is remote" without "has is remote": unknown
        (0, False),
    ],
)
def test_remote_parent_makes_a_local_root(flags: int, local_root: bool) -> None:
    child = span(2, parent_id=1, flags=flags)
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[child])])]
    )
    (record,) = split_request(request).records
    assert record.is_local_root is local_root
    assert record.parent_span_id == (b"" if local_root else (1).to_bytes(8, "big"))
    # The span itself still says who its parent is.
    assert Span.FromString(record.data).parent_span_id == (1).to_bytes(8, "big")


def test_a_span_without_parent_is_a_root() -> None:
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span(1)])])]
    )
    assert split_request(request).records[0].is_local_root


def test_encode_groups_records_from_several_requests() -> None:
    """Records of two requests that share a resource travel under one ResourceSpans."""
    first, second = mixed_request(), mixed_request()
    records = split_request(first).records + split_request(second).records
    decoded = decode(records)
    assert len(decoded.resource_spans) == len(normalise(first).resource_spans)
    assert sum(len(ss.spans) for rs in decoded.resource_spans for ss in rs.scope_spans) == 20


def test_encode_of_nothing_is_an_empty_request() -> None:
    assert encode_request([]) == b""


def test_large_spans_round_trip() -> None:
    """Length prefixes of several bytes (spans > 16 KiB, groups > 2 MiB)."""
    spans = [span(i, padding=300_000) for i in range(1, 9)]
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=attrs(k="v" * 200)), scope_spans=[ScopeSpans(spans=spans)]
            )
        ]
    )
    assert encode_request(split_request(request).records) == request.SerializeToString()


# -- split_by_size ----------------------------------------------------------------------------------
def check_chunks(records: list[SpanRecord], max_bytes: int) -> list[list[SpanRecord]]:
    chunks = list(split_by_size(records, max_bytes))
    # Every record exactly once, in order.
    assert [r for chunk in chunks for r in chunk] == records
    assert all(chunks)
    for chunk in chunks:
        size = len(encode_request(chunk))
        assert size <= max_bytes or len(chunk) == 1, (size, max_bytes, len(chunk))
    return chunks


def test_split_by_size_keeps_each_chunk_under_the_limit() -> None:
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=attrs(**{"service.name": f"svc-{r}", "host": "h" * 50 * r})),
                schema_url=f"https://schema/{r}",
                scope_spans=[
                    ScopeSpans(
                        scope=InstrumentationScope(name=f"scope-{s}"),
                        schema_url="https://scope/" + "é" * s,
                        spans=[span(r * 100 + s * 10 + i, padding=37 * i) for i in range(1, 8)],
                    )
                    for s in range(3)
                ],
            )
            for r in range(1, 4)
        ]
    )
    records = split_request(request).records
    total = len(encode_request(records))
    for max_bytes in (300, 600, 1000, 2500, 4096, total, total + 1000):
        assert len(check_chunks(records, max_bytes)) > 1 or max_bytes >= total
    # The estimate is conservative (a shared resource is counted per scope), but not wildly so.
    assert len(check_chunks(records, 2 * total)) == 1


def test_split_by_size_fills_chunks() -> None:
    """Not one span per request: many small spans pack into few chunks."""
    records = split_request(
        ExportTraceServiceRequest(
            resource_spans=[
                ResourceSpans(scope_spans=[ScopeSpans(spans=[span(i, padding=60) for i in range(1, 201)])])
            ]
        )
    ).records
    per_span = len(records[0].data)
    max_bytes = 4096
    chunks = check_chunks(records, max_bytes)
    assert len(chunks) <= -(-200 * (per_span + 2) // (max_bytes - 64)) + 1


def test_oversized_span_travels_alone() -> None:
    small = [span(i) for i in (1, 2, 3)]
    big = span(4, padding=5000)
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[*small[:2], big, small[2]])])]
    )
    records = split_request(request).records
    chunks = check_chunks(records, 1024)
    assert [len(c) for c in chunks] == [2, 1, 1]
    assert chunks[1][0].data == big.SerializeToString()


def test_split_by_size_of_nothing() -> None:
    assert list(split_by_size([], 1024)) == []


def test_non_ascii_schema_urls_are_counted_in_bytes() -> None:
    """A schema URL's UTF-8 bytes, not its characters, go on the wire."""
    context = ScopeContext(None, "🚩" * 100, None, "é" * 100)
    spans = [span(i) for i in range(1, 30)]
    records = [
        SpanRecord(s.trace_id, s.span_id, s.parent_span_id, s.SerializeToString(), context) for s in spans
    ]
    for max_bytes in range(700, 1500, 50):
        check_chunks(records, max_bytes)


# -- properties -------------------------------------------------------------------------------------
_text = st.text(max_size=12)
_key_values = st.lists(st.tuples(_text, _text), max_size=3).map(
    lambda kvs: [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in kvs]
)
_resources = st.none() | _key_values.map(lambda kvs: Resource(attributes=kvs))
_scopes = st.none() | st.builds(InstrumentationScope, name=_text, version=_text)
_trace_ids = st.sampled_from([TRACE_A, TRACE_B, bytes(16), b"\x07" * 15])
_span_ids = st.integers(min_value=0, max_value=2**64 - 1).map(
    lambda n: n.to_bytes(8, "big")
) | st.sampled_from([b"", b"\x01" * 7])


@st.composite
def _spans(draw: st.DrawFn) -> Span:
    return Span(
        trace_id=draw(_trace_ids),
        span_id=draw(_span_ids),
        parent_span_id=draw(st.sampled_from([b"", b"\x05" * 8])),
        name=draw(st.text(max_size=40)),
        flags=draw(st.sampled_from([0, 1, 0x100, 0x200, 0x301])),
        kind=draw(st.integers(0, 5)),
        attributes=draw(_key_values),
        start_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
    )


@st.composite
def _scope_spans(draw: st.DrawFn) -> ScopeSpans:
    scope_spans = ScopeSpans(spans=draw(st.lists(_spans(), max_size=5)), schema_url=draw(_text))
    scope = draw(_scopes)
    if scope is not None:
        scope_spans.scope.CopyFrom(scope)
    return scope_spans


@st.composite
def _requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(0, 4))):
        resource_spans = request.resource_spans.add(schema_url=draw(_text))
        resource = draw(_resources)
        if resource is not None:
            resource_spans.resource.CopyFrom(resource)
        resource_spans.scope_spans.extend(draw(st.lists(_scope_spans(), max_size=3)))
    return request


_settings = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(_requests())
def test_property_round_trip(request: ExportTraceServiceRequest) -> None:
    split = split_request(request)
    all_spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert split.invalid_spans == sum(not valid(s) for s in all_spans)
    assert [r.data for r in split.records] == [s.SerializeToString() for s in all_spans if valid(s)]
    assert decode(split.records) == normalise(request)


@_settings
@given(_requests(), st.data())
def test_property_split_by_size(request: ExportTraceServiceRequest, data: st.DataObject) -> None:
    records = split_request(request).records
    limits = tight_limits(records)
    max_bytes = data.draw(
        st.integers(min_value=1, max_value=2000) | (st.sampled_from(limits) if limits else st.nothing())
    )
    chunks = check_chunks(records, max_bytes)
    # Re-assembled, the chunks still carry exactly the original request.
    merged = [r for chunk in chunks for r in chunk]
    assert decode(merged) == normalise(request)


def tight_limits(records: list[SpanRecord]) -> list[int]:
    """Limits one byte below the encoded size of each prefix: the tightest cases for the estimate."""
    return [len(encode_request(records[:k])) - 1 for k in range(2, len(records) + 1)]


def test_split_by_size_at_tight_limits() -> None:
    request = mixed_request()
    records = split_request(request).records
    for max_bytes in tight_limits(records):
        check_chunks(records, max_bytes)


def test_split_by_size_with_huge_resource_and_scope() -> None:
    """Multi-byte length prefixes everywhere (resource > 2 MiB, scope > 16 KiB, group > 2 MiB)."""
    resource = Resource(attributes=attrs(blob="r" * (2**21 + 100)))
    scope = InstrumentationScope(name="s" * 20_000)
    spans = [span(i, padding=2**20) for i in range(1, 4)] + [span(i) for i in range(4, 8)]
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=resource,
                schema_url="https://r/" + "x" * 200,
                scope_spans=[ScopeSpans(scope=scope, schema_url="https://s/" + "y" * 200, spans=spans)],
            )
        ]
    )
    records = split_request(request).records
    for max_bytes in tight_limits(records):
        check_chunks(records, max_bytes)


# -- split_request with the request's bytes: spans cut from them ---------------------------------
def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out) + bytes((value,))


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


UNKNOWN_VARINT = b"\x98\x01\x07"  # field 19, varint 7: a field a newer schema may add
FIELD_2_AS_VARINT = b"\x10\x05"  # field 2 with the wrong wire type: a parse keeps it as unknown


def _with_extras(raw_span: bytes) -> bytes:
    """A request holding ``raw_span`` twice, with unknown fields and wrong wire types at every level."""
    scope = _field(1, InstrumentationScope(name="lib").SerializeToString())
    scope_spans = scope + FIELD_2_AS_VARINT + _field(2, raw_span) + UNKNOWN_VARINT + _field(2, raw_span)
    resource_spans = UNKNOWN_VARINT + FIELD_2_AS_VARINT + _field(2, scope_spans) + _field(3, b"u")
    return UNKNOWN_VARINT + _field(1, resource_spans)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(mixed_request().SerializeToString(), id="as the SDK writes it"),
        pytest.param(_with_extras(span(1).SerializeToString()), id="unknown fields, wrong wire types"),
        pytest.param(  # a span whose fields are not in the order a serializer writes them
            _with_extras(
                span(1, name="second").SerializeToString()
                + _field(5, b"late name")  # Span.name again: the last one wins in a parse
            ),
            id="span fields out of order",
        ),
    ],
)
def test_spans_cut_from_the_request_bytes_parse_as_the_serialized_ones(raw: bytes) -> None:
    request = ExportTraceServiceRequest.FromString(raw)
    serialized = split_request(request).records
    cut = split_request(request, raw=raw).records
    assert len(cut) == len(serialized) > 0
    for from_bytes, reserialized in zip(cut, serialized, strict=True):
        assert from_bytes.data in raw  # byte for byte as the client sent it
        assert Span.FromString(from_bytes.data) == Span.FromString(reserialized.data)
        assert (from_bytes.trace_id, from_bytes.span_id, from_bytes.parent_span_id) == (
            reserialized.trace_id,
            reserialized.span_id,
            reserialized.parent_span_id,
        )
        assert from_bytes.context.resource_key == reserialized.context.resource_key
        assert from_bytes.context.scope_key == reserialized.context.scope_key


def test_a_request_the_walk_cannot_follow_is_split_from_its_parse() -> None:
    one = span(1).SerializeToString()
    # Field 1 with its tag written in two bytes (0x8A 0x00): a parse accepts it, the walk does not
    # know it as resource_spans, and the counts disagree.
    resource_spans = _field(2, _field(2, one))
    raw = b"\x8a\x00" + _varint(len(resource_spans)) + resource_spans
    request = ExportTraceServiceRequest.FromString(raw)
    split = split_request(request, raw=raw)
    assert [r.data for r in split.records] == [
        s.SerializeToString() for s in request.resource_spans[0].scope_spans[0].spans
    ]
    assert split.starts is None  # what the request's bytes lack, these might hold
