"""How the OTLP/JSON decoder walks a document into protobuf messages: field tables, the AnyValue
setters, and the scalar parsers (JSON value → protobuf field value), each raising `Invalid` with the
JSON path of the problem. The entry points and the request tables are :mod:`otelsignals.otlp.json_decode`.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
)
from opentelemetry.proto.logs.v1.logs_pb2 import SeverityNumber
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

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


class Invalid(Exception):
    """Raised where a problem is found; each enclosing level adds its path segment on the way out, so the
    happy path spends no time on paths."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self._segments: list[str] = []  # innermost first

    def under(self, segment: str) -> Invalid:
        self._segments.append(segment)
        return self

    def message(self, quote_values: bool = True) -> str:
        """Where and what; ``quote_values=False`` leaves out the values the request held (quoted in
        the reason for its client, not for a log that may not carry message text)."""
        path = "".join(reversed(self._segments)).removeprefix(".")
        return f"{path or '$'}: {_without_values(self.reason) if not quote_values else _values(self.reason)}"


# A value of the request quoted in a reason is marked so (repr() escapes control characters, so no
# quoted text holds them): shown to the client, left out of logs.
_VALUE_START, _VALUE_END = "\x01", "\x02"
_MARKED_VALUE = re.compile(f"{_VALUE_START}[^{_VALUE_END}]*{_VALUE_END}")


def _values(reason: str) -> str:
    return reason.replace(_VALUE_START, "").replace(_VALUE_END, "")


def _without_values(reason: str) -> str:
    return _MARKED_VALUE.sub("(value left out)", reason)


def _quoted(value: object) -> str:
    return f"{_VALUE_START}{value}{_VALUE_END}"


# How one JSON key is decoded: ("attr", parse) for a scalar field sets message.attr = parse(json_value);
# (None, decode) for a message or repeated field calls decode(message, json_value), which fills it in place.
Field = tuple[str | None, Callable[..., Any]]
_FieldKind = Callable[[str], Field]  # makes the Field of the named proto field
_T = TypeVar("_T")


def decode_object(message: Any, value: Any, fields: Mapping[str, Field]) -> None:
    if type(value) is not dict:
        raise Invalid(f"expected an object, got {_describe(value)}")
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
        except Invalid as err:
            err.under(f".{key}")
            raise


def fields_of(message_type: Any, kinds: Mapping[str, _FieldKind]) -> dict[str, Field]:
    """The decoding table of a message type, keyed by both proto field names and lowerCamelCase JSON names."""
    return with_json_names(message_type, {name: kind(name) for name, kind in kinds.items()})


def with_json_names(message_type: Any, by_field_name: Mapping[str, _T]) -> dict[str, _T]:
    fields = message_type.DESCRIPTOR.fields_by_name
    return {alias: item for name, item in by_field_name.items() for alias in (name, fields[name].json_name)}


def scalar(parse: Callable[[Any], Any]) -> _FieldKind:
    return lambda name: (name, parse)


def message_of(fields: Mapping[str, Field]) -> _FieldKind:
    def kind(name: str) -> Field:
        def decode(message: Any, value: Any) -> None:
            field = getattr(message, name)
            field.SetInParent()  # "{}" still marks the field as present
            decode_object(field, value, fields)

        return None, decode

    return kind


def repeated(fields: Mapping[str, Field]) -> _FieldKind:
    def kind(name: str) -> Field:
        def decode(message: Any, value: Any) -> None:
            container = getattr(message, name)
            for index, item in enumerate(_array(value)):
                try:
                    decode_object(container.add(), item, fields)
                except Invalid as err:
                    err.under(f"[{index}]")
                    raise

        return None, decode

    return kind


def repeated_scalar(parse: Callable[[Any], Any]) -> _FieldKind:
    """A repeated number field (``bucketCounts``, ``explicitBounds``): a JSON array of values."""

    def kind(name: str) -> Field:
        def decode(message: Any, value: Any) -> None:
            container = getattr(message, name)
            for index, item in enumerate(_array(value)):
                try:
                    container.append(parse(item))
                except Invalid as err:
                    err.under(f"[{index}]")
                    raise

        return None, decode

    return kind


def any_value(name: str) -> Field:
    """The kind of a single AnyValue field (a log record's ``body``)."""
    return None, lambda message, value: _decode_any_value(getattr(message, name), value, 0)


def key_values(name: str) -> Field:
    """The kind of ``attributes`` fields."""
    return None, lambda message, value: _decode_key_values(getattr(message, name), value, 0)


def _decode_key_values(container: Any, value: Any, depth: int) -> None:
    # Attributes are most of the decoding work, so this loop is hand-written, with a fast path for string
    # values. "key" and "value" are spelled the same in both naming styles.
    for index, item in enumerate(_array(value)):
        kv = container.add()
        try:
            if type(item) is not dict:
                raise Invalid(f"expected an object, got {_describe(item)}")
            key = item.get("key")
            if type(key) is str:
                kv.key = key
            elif key is not None:
                raise Invalid(f"expected a string, got {_describe(key)}").under(".key")
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
            except Invalid as err:
                err.under(".value")
                raise
        except Invalid as err:
            err.under(f"[{index}]")
            raise


def _decode_any_value(target: AnyValue, value: Any, depth: int) -> None:
    if type(value) is not dict:
        raise Invalid(f"expected an object, got {_describe(value)}")
    chosen = None
    for key, item in value.items():
        setter = _ANY_VALUE_SETTERS.get(key)
        if setter is None or item is None:
            continue
        if chosen is not None:
            raise Invalid(f"an AnyValue holds one value, got both {chosen!r} and {key!r}")
        chosen = key
        try:
            setter(target, item, depth)
        except Invalid as err:
            err.under(f".{key}")
            raise
    if chosen is None:
        target.SetInParent()  # "{}" is a present but empty AnyValue


def _set_string_value(target: AnyValue, value: Any, depth: int) -> None:
    target.string_value = parse_string(value)


def _set_bool_value(target: AnyValue, value: Any, depth: int) -> None:
    target.bool_value = parse_bool(value)


def _set_int_value(target: AnyValue, value: Any, depth: int) -> None:
    target.int_value = parse_int64(value)


def _set_double_value(target: AnyValue, value: Any, depth: int) -> None:
    target.double_value = parse_double(value)


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
        except Invalid as err:
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
    except Invalid as err:
        err.under(".values")
        raise


def _nested_values(value: Any, depth: int) -> list[Any] | None:
    """The ``values`` array of an arrayValue/kvlistValue object (None when absent)."""
    if type(value) is not dict:
        raise Invalid(f"expected an object, got {_describe(value)}")
    values = value.get("values")
    if values is None:
        return None
    if depth >= MAX_ANY_VALUE_DEPTH:
        raise Invalid(f"attribute values nested more than {MAX_ANY_VALUE_DEPTH} levels deep")
    try:
        return _array(values)
    except Invalid as err:
        raise err.under(".values") from None


# ---- scalar parsers: JSON value -> protobuf field value --------------------------------------------------


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return f"number {_quoted(repr(value))}"
    if isinstance(value, str):
        return f"string {_preview(value)}"
    return "array" if isinstance(value, list) else "object"


def _preview(text: str, limit: int = 40) -> str:
    return _quoted(repr(text) if len(text) <= limit else repr(text[:limit]) + "...")


def _array(value: Any) -> list[Any]:
    if type(value) is not list:
        raise Invalid(f"expected an array, got {_describe(value)}")
    return value


def parse_string(value: Any) -> str:
    if type(value) is not str:
        raise Invalid(f"expected a string, got {_describe(value)}")
    return value


def parse_bool(value: Any) -> bool:
    if type(value) is not bool:
        raise Invalid(f"expected true or false, got {_describe(value)}")
    return value


def _integer_parser(low: int, high: int, type_name: str) -> Callable[[Any], int]:
    """proto3 JSON integers: a JSON number or a decimal string (64-bit values are usually strings)."""

    def parse(value: Any) -> int:
        if type(value) is int:
            number = value
        elif type(value) is str:
            # isascii() too: isdigit() also accepts other scripts' digits and superscripts.
            if not (value.isascii() and (value.isdigit() or (value[:1] == "-" and value[1:].isdigit()))):
                raise Invalid(f"expected a decimal integer, got string {_preview(value)}")
            number = int(value)
        elif type(value) is float:
            if not value.is_integer():
                raise Invalid(f"expected an integer, got number {_quoted(repr(value))}")
            if abs(value) > _MAX_EXACT_FLOAT_INT:
                raise Invalid(
                    f"number {_quoted(repr(value))} is not an exact integer; send large integers as strings"
                )
            number = int(value)
        else:
            raise Invalid(f"expected an integer, got {_describe(value)}")
        if not low <= number <= high:
            raise Invalid(f"{_quoted(str(number))} is out of range for {type_name}")
        return number

    return parse


parse_int32 = _integer_parser(_INT32_MIN, _INT32_MAX, "int32")
parse_uint32 = _integer_parser(0, _UINT32_MAX, "uint32")
parse_int64 = _integer_parser(_INT64_MIN, _INT64_MAX, "int64")
parse_uint64 = _integer_parser(0, _UINT64_MAX, "uint64")

_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_SPECIAL_DOUBLES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def parse_double(value: Any) -> float:
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
            raise Invalid(f"number {_preview(value)} is out of range for double")
    raise Invalid(f"expected a number, 'NaN', 'Infinity' or '-Infinity', got {_describe(value)}")


def _hex_id_parser(size: int) -> Callable[[Any], bytes]:
    length = 2 * size

    def parse(value: Any) -> bytes:
        if type(value) is not str:
            raise Invalid(f"expected a hex string, got {_describe(value)}")
        if len(value) == length:
            try:
                raw = bytes.fromhex(value)
            except ValueError:
                raw = b""
            # fromhex() skips whitespace between bytes, so such a string yields fewer bytes.
            if len(raw) == size:
                return raw
            raise Invalid(f"invalid hex string {_preview(value)}")
        if not value:
            return b""
        raise Invalid(f"expected {length} hex characters, got {len(value)}")

    return parse


parse_trace_id = _hex_id_parser(_TRACE_ID_BYTES)
parse_span_id = _hex_id_parser(_SPAN_ID_BYTES)

_URLSAFE_TO_STANDARD = str.maketrans("-_", "+/")


def _base64(value: Any) -> bytes:
    # proto3 JSON parsers accept standard or URL-safe base64, with or without padding.
    text = parse_string(value).translate(_URLSAFE_TO_STANDARD)
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except ValueError:  # binascii.Error, or a non-ASCII character
        raise Invalid(f"invalid base64 {_preview(value)}") from None


def _enum_parser(enum_type: Any, type_name: str) -> Callable[[Any], int]:
    """Enums may be given as their integer value or their name."""
    numbers = dict(enum_type.items())

    def parse(value: Any) -> int:
        if type(value) is str:
            number = numbers.get(value)
            if number is None:
                raise Invalid(f"unknown {type_name} {_preview(value)}")
            return number
        return parse_int32(value)

    return parse


parse_span_kind = _enum_parser(Span.SpanKind, "SpanKind")
parse_status_code = _enum_parser(Status.StatusCode, "StatusCode")
parse_severity_number = _enum_parser(SeverityNumber, "SeverityNumber")
parse_aggregation_temporality = _enum_parser(AggregationTemporality, "AggregationTemporality")


_ANY_VALUE_SETTERS: dict[str, Callable[[AnyValue, Any, int], None]] = with_json_names(
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
