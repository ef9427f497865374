"""Spans as serialized protobuf, from one export request to the next.

Each span is kept as its own serialized ``Span`` bytes from receipt to export, next to the resource
and scope it was sent under. Only spans that need reading or enriching are ever parsed again, so a
non-GenAI span leaves byte-for-byte as it came, and outgoing requests are assembled by concatenating
length-delimited fields rather than by copying messages (about twice as fast in Python's upb).

Field numbers (opentelemetry/proto/collector/trace/v1 and trace/v1):
ExportTraceServiceRequest.resource_spans = 1; ResourceSpans.resource = 1, .scope_spans = 2,
.schema_url = 3; ScopeSpans.scope = 1, .spans = 2, .schema_url = 3.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otelsignals.conventions.decoding import KEY_TAG, VALUE_TAG, skip_field, varint

# Span.flags bits 8 and 9 (SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK):
# a span whose parent is known to be remote is the root of this service's part of the trace.
_REMOTE_PARENT = 0x100 | 0x200
_ZERO_TRACE_ID = bytes(16)
_ZERO_SPAN_ID = bytes(8)


@dataclass(slots=True, eq=False)
class ScopeContext:
    """The resource and instrumentation scope a group of spans was sent under (serialized)."""

    resource: bytes | None  # serialized Resource; None when the field was absent
    resource_schema_url: str
    scope: bytes | None  # serialized InstrumentationScope; None when absent
    scope_schema_url: str

    @property
    def resource_key(self) -> tuple[bytes | None, str]:
        return (self.resource, self.resource_schema_url)

    @property
    def scope_key(self) -> tuple[bytes | None, str]:
        return (self.scope, self.scope_schema_url)


@dataclass(slots=True, eq=False)
class SpanRecord:
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    data: bytes  # the serialized Span; replaced by the enricher when it adds attributes
    context: ScopeContext
    ingest_seq: int = 0  # the on-disk queue record this span came from (0 without one)
    # Whether the span's bytes hold a GenAI key prefix, searched where its request was taken in
    # (Analyzer.mark_spans); None when not searched (a record made elsewhere): the analysis then
    # searches it. A trace none of whose spans holds one skips the analysis thread.
    may_carry_genai: bool | None = None

    @property
    def is_local_root(self) -> bool:
        return not self.parent_span_id

    def __len__(self) -> int:
        return len(self.data)


@dataclass(slots=True)
class SplitRequest:
    records: list[SpanRecord]
    invalid_spans: int  # spans without a valid trace or span id: refused via partial_success
    # When every record's bytes are a slice of the request's, where each starts in them (what the
    # request's bytes lack, none of them holds); None when they were serialized again, which may
    # frame a span otherwise.
    starts: list[int] | None = None


def is_valid_id(value: bytes, size: int) -> bool:
    return len(value) == size and value != bytes(size)


def split_request(
    request: ExportTraceServiceRequest, ingest_seq: int = 0, raw: bytes | None = None
) -> SplitRequest:
    """Turn a parsed request into span records, refusing spans whose ids are invalid (OTLP says a
    trace id is 16 non-zero bytes and a span id 8 non-zero bytes). With ``raw``, the bytes the
    request was parsed from, each span's bytes are cut from them rather than serialized again."""
    parts = list(split_request_parts(request, ingest_seq, raw))
    if len(parts) == 1:
        return parts[0]
    return SplitRequest(
        [record for part in parts for record in part.records],
        sum(part.invalid_spans for part in parts),
        None if parts[0].starts is None else [start for part in parts for start in part.starts or ()],
    )


def split_request_parts(
    request: ExportTraceServiceRequest,
    ingest_seq: int = 0,
    raw: bytes | None = None,
    part_spans: int = 1 << 62,
) -> Iterator[SplitRequest]:
    """:func:`split_request` a part at a time, each of up to ``part_spans`` spans (valid or not), in
    order: so that a caller on an event loop can let others run between the parts of a request of
    hundreds of thousands of spans. At least one part, empty for a request without spans."""
    records: list[SpanRecord] = []
    invalid = 0
    seen = 0
    slices = _span_slices(raw) if raw is not None else None
    if slices is not None and len(slices) != sum(
        len(scope_spans.spans)
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
    ):
        slices = None  # not laid out as this walk reads it: serialized from the parse instead
    spans_in_order = iter(slices) if slices is not None else None
    source = raw or b""
    starts: list[int] = []
    for resource_spans in request.resource_spans:
        resource = (
            resource_spans.resource.SerializeToString() if resource_spans.HasField("resource") else None
        )
        for scope_spans in resource_spans.scope_spans:
            context = ScopeContext(
                resource,
                resource_spans.schema_url,
                scope_spans.scope.SerializeToString() if scope_spans.HasField("scope") else None,
                scope_spans.schema_url,
            )
            for span in scope_spans.spans:
                if seen == part_spans:
                    yield SplitRequest(records, invalid, starts if spans_in_order is not None else None)
                    records, invalid, seen, starts = [], 0, 0, []
                seen += 1
                offsets = next(spans_in_order) if spans_in_order is not None else None
                trace_id = span.trace_id
                span_id = span.span_id
                # is_valid_id, inlined: this loop runs for every span that passes through.
                if (
                    len(trace_id) != 16
                    or trace_id == _ZERO_TRACE_ID
                    or len(span_id) != 8
                    or span_id == _ZERO_SPAN_ID
                ):
                    invalid += 1
                    continue
                parent = span.parent_span_id
                if parent and (span.flags & _REMOTE_PARENT) == _REMOTE_PARENT:
                    parent = b""
                if offsets is None:
                    data = span.SerializeToString()
                else:
                    data = source[offsets[0] : offsets[1]]
                    starts.append(offsets[0])
                records.append(SpanRecord(trace_id, span_id, parent, data, context, ingest_seq))
    yield SplitRequest(records, invalid, starts if spans_in_order is not None else None)


# ExportTraceServiceRequest.resource_spans, ResourceSpans.scope_spans and ScopeSpans.spans, each with
# its wire type (2, length-delimited): the path from a request to its spans.
_RESOURCE_SPANS_TAG, _SCOPE_SPANS_TAG, _SPANS_TAG = 0x0A, 0x12, 0x12


def _span_slices(raw: bytes) -> list[tuple[int, int]] | None:
    """Where every span's bytes are in ``raw`` (a request that parsed), (start, end) in the order the
    parse lists them: a repeated field's occurrences are its elements in order, and a field with
    another wire type is not that field (a parse keeps it as unknown). None when a field runs past
    its message or has a wire type a parse does not take (the caller also checks the count against
    the parse's)."""
    spans: list[tuple[int, int]] = []
    try:
        for resource_start, resource_end in _fields(raw, 0, len(raw), _RESOURCE_SPANS_TAG):
            for scope_start, scope_end in _fields(raw, resource_start, resource_end, _SCOPE_SPANS_TAG):
                spans += _fields(raw, scope_start, scope_end, _SPANS_TAG)
    except IndexError:
        return None
    return spans


def _fields(data: bytes, pos: int, end: int, tag: int) -> list[tuple[int, int]]:
    """(start, end) of the payload of each field with one-byte ``tag`` (length-delimited) in the
    message at ``data[pos:end]``, in order; other fields skipped."""
    found = []
    while pos < end:
        if data[pos] == tag:
            length, start = varint(data, pos + 1)
            pos = start + length
            found.append((start, pos))
        else:
            field_tag, after = varint(data, pos)
            pos = skip_field(data, field_tag & 7, after)
    if pos != end:
        raise IndexError("a field runs past its message")
    return found


# Span.name = 5 (string), .start_time_unix_nano = 7, .end_time_unix_nano = 8 (fixed64), .attributes =
# 9 (KeyValue: key = 1).
_NAME_FIELD, _START_FIELD, _END_FIELD, _ATTRIBUTES_FIELD = 5, 7, 8, 9


@dataclass(slots=True, frozen=True)
class SpanHead:
    name: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    attribute_keys: list[bytes]  # UTF-8


def span_head(data: bytes, max_fields: int) -> SpanHead | None:
    """A serialized span's name, times and attribute keys, read without parsing it: its top-level
    fields are walked (values skipped, the last of a repeated singular field wins, as in a parse).
    None when it has more than ``max_fields`` top-level fields (each is a Python step here, while
    a parse takes them in C) or an attribute that is not its key then its value (a parse would
    read another key where a second one follows). Raises IndexError for
    bytes that end inside a field."""
    name, start, end = "", 0, 0
    keys: list[bytes] = []
    pos, size, fields = 0, len(data), 0
    while pos < size:
        fields += 1
        if fields > max_fields:
            return None
        tag, pos = varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 2 and number in (_NAME_FIELD, _ATTRIBUTES_FIELD):
            length, pos = varint(data, pos)
            if number == _NAME_FIELD:
                name = data[pos : pos + length].decode("utf-8", "replace")
            elif length and data[pos] == KEY_TAG:
                key_length, key_at = varint(data, pos + 1)
                value_at, field_end = key_at + key_length, pos + length
                if value_at < field_end:  # then only the value may follow (a parse takes the last key)
                    if data[value_at] != VALUE_TAG:
                        return None
                    value_length, value_body = varint(data, value_at + 1)
                    if value_body + value_length != field_end:
                        return None
                keys.append(data[key_at:value_at])
            elif length:
                return None
            pos += length
        elif wire == 1 and number in (_START_FIELD, _END_FIELD):
            if pos + 8 > size:
                raise IndexError("truncated span")
            value = int.from_bytes(data[pos : pos + 8], "little")
            start, end = (value, end) if number == _START_FIELD else (start, value)
            pos += 8
        else:
            pos = skip_field(data, wire, pos)
    if pos > size:
        raise IndexError("truncated span")
    return SpanHead(name, start, end, keys)


def _varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint_size(value: int) -> int:
    return (
        1
        if value < 0x80
        else 2
        if value < 0x4000
        else 3
        if value < 0x200000
        else (value.bit_length() + 6) // 7
    )


_TAG_1 = b"\x0a"  # field 1, length-delimited
_TAG_2 = b"\x12"  # field 2
_TAG_3 = b"\x1a"  # field 3


def _append_field(parts: list[bytes], tag: bytes, payload: bytes) -> int:
    """Append a length-delimited field to ``parts`` without copying the payload; returns its size."""
    length = _varint(len(payload))
    parts += (tag, length, payload)
    return 1 + len(length) + len(payload)


def encode_request(records: Iterable[SpanRecord]) -> bytes:
    """Serialize span records as one ExportTraceServiceRequest, grouped by resource then scope."""
    # Records of one incoming ScopeSpans share one ScopeContext object: group by identity first (cheap),
    # then merge contexts whose resource and scope are equal.
    by_context: dict[ScopeContext, list[bytes]] = {}
    for record in records:
        spans = by_context.get(record.context)
        if spans is None:
            spans = by_context[record.context] = []
        spans.append(record.data)
    by_resource: dict[tuple[bytes | None, str], dict[tuple[bytes | None, str], list[bytes]]] = {}
    for context, spans in by_context.items():
        scopes = by_resource.setdefault(context.resource_key, {})
        scopes.setdefault(context.scope_key, []).extend(spans)

    out: list[bytes] = []
    for (resource, resource_schema), scopes in by_resource.items():
        resource_parts: list[bytes] = []
        resource_size = 0
        if resource is not None:
            resource_size += _append_field(resource_parts, _TAG_1, resource)
        for (scope, scope_schema), spans in scopes.items():
            scope_parts: list[bytes] = []
            scope_size = 0
            if scope is not None:
                scope_size += _append_field(scope_parts, _TAG_1, scope)
            for data in spans:
                scope_size += _append_field(scope_parts, _TAG_2, data)
            if scope_schema:
                scope_size += _append_field(scope_parts, _TAG_3, scope_schema.encode())
            resource_parts += (_TAG_2, _varint(scope_size))
            resource_parts += scope_parts
            resource_size += 1 + _varint_size(scope_size) + scope_size
        if resource_schema:
            resource_size += _append_field(resource_parts, _TAG_3, resource_schema.encode())
        out += (_TAG_1, _varint(resource_size))
        out += resource_parts
    return b"".join(out)


def split_by_size(records: list[SpanRecord], max_bytes: int) -> Iterator[list[SpanRecord]]:
    """Chunks of records whose encoded request stays under ``max_bytes``.

    The estimate counts each span's field plus a generous allowance per distinct resource/scope;
    a single span larger than the limit travels alone rather than being dropped.
    """
    chunk: list[SpanRecord] = []
    size = 0
    contexts: set[ScopeContext] = set()
    for record in records:
        context = record.context
        data_size = len(record.data)
        extra = 1 + _varint_size(data_size) + data_size
        if context not in contexts:
            extra += _context_overhead(context)
        if chunk and size + extra > max_bytes:
            yield chunk
            chunk, size, contexts = [], 0, set()
            extra = 1 + _varint_size(data_size) + data_size + _context_overhead(context)
        chunk.append(record)
        contexts.add(context)
        size += extra
    if chunk:
        yield chunk


def _context_overhead(context: ScopeContext) -> int:
    # Resource and scope may both be repeated per context in the worst case. Their fields are
    # counted exactly (schema URLs in UTF-8 bytes, not characters; length prefixes grow to 4 bytes
    # for big resources), plus a tag and a length prefix of at most 5 bytes for each of the
    # enclosing ResourceSpans and ScopeSpans. A flat 24-byte allowance ran short with large contexts.
    return (
        _field_size(context.resource)
        + _field_size(context.resource_schema_url.encode() or None)
        + _field_size(context.scope)
        + _field_size(context.scope_schema_url.encode() or None)
        + 2 * (1 + 5)
    )


def _field_size(payload: bytes | None) -> int:
    """Bytes of an optional length-delimited field (none when absent)."""
    return 0 if payload is None else 1 + _varint_size(len(payload)) + len(payload)
