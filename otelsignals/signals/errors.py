"""Classify a failed tool call or model call into a leaf type of SPEC §3, model-free.

The error texts, exception type names and error codes are data (``phrases/errors.yaml``), loaded
once. :func:`classify_failure` decides from the evidence a span gives, in this order:

1. **HTTP status** (the span's ``http.response.status_code``; else a status in a JSON error body,
   ``{"error": {"code": 403}}``; else the status an SDK exception class stands for,
   ``openai.RateLimitError`` → 429; else one written in the error text, "Error code: 429 - …").

   - 429 and 402 → ``rate_limit`` (a 429 is never an execution failure);
   - 401 / 403 → ``auth_misuse`` for a tool, except when the body names a rate limit or quota
     (GitHub's secondary rate limit and Google's ``rateLimitExceeded`` come back as 403) →
     ``rate_limit``;
   - 408 and 504 → ``timeout``; every other 5xx → ``api_error``;
   - 409 / 412 / 423 / 428 → ``state_error``;
   - 400, 404, 405, 410, 413, 414, 415, 422 and the other 4xx say only "the request was wrong": the
     error codes and text below may name the agent-side leaf (``context_overflow``, ``rate_limit``,
     ``tool_not_found``, ``auth_misuse``, ``state_error``, ``invalid_args``, ``bad_query``); without
     one, 400/405/413/414/415/422 → ``invalid_args``, other 4xx → ``invalid_args`` at low confidence,
     and 404/410 → ``bad_query`` (the agent asked for a record, file or page that is not there)
     unless the text names the *tool, function, endpoint, route or method* as missing, which is
     ``tool_not_found``. A 404/410 only refines to ``tool_not_found`` or ``bad_query``.
2. **Exception type names and error codes** (``error.type`` / ``exception.type``, the ``code``,
   ``type``, ``status`` and ``reason`` fields of a JSON error body): exact lookup, last dotted part
   of the name (``httpx.ReadTimeout`` → ``ReadTimeout``). Builtins that say little
   (``KeyError``, ``TypeError``, ``ValueError``) are *weak*: a text match overrides them. Ambiguous
   names (``ValidationError``, ``JSONDecodeError``) take the text's side between their alternatives
   (a pydantic ``ValidationError`` for ``WeatherResponse`` is a malformed response; for the tool's
   arguments it is ``invalid_args``).
3. **Message text** (the exception message, the messages of a JSON error body, or the raw
   content; of a Python traceback only its last line): one pyahocorasick automaton over the
   normalised text (lower case, every run of non-word characters one space, so matches fall on word
   boundaries; linear time, no regex backtracking). A few phrases count only right after a subject
   ("Tool get_wether not found", "Route POST:/v1/x not found", "Timeout 30000ms exceeded": at most
   one whitespace-separated word between; "call get_order_details first": at most three) or right
   after the called tool's own name; a subject word ending a business noun of the YAML's
   ``compounds`` is none ("Payment method 'pm_1' not found" is a missing record: bad_query). Two
   shapes are read without phrases: a field name after "require(s)" / "missing" / "provide"
   ("Delivery orders require delivery_info") and a bare Python KeyError ("Error: 'method_type'"),
   both ``invalid_args`` for a missing field. Phrases marked *strong* (they name the arguments or
   the response) beat ordinary ones, ordinary ones beat a builtin exception name seen in the text;
   among equals the group earliest in ``PRIORITY`` wins (most specific first: context_overflow,
   rate_limit, timeout, network, tool_not_found, auth_misuse, state_error, malformed_response,
   invalid_args, bad_query, api_error), then the longest phrase.
4. **Default.** A failed tool call none of the above explains is ``invalid_args`` at confidence
   0.5, pattern and reason ``unclassified``: a tool that ran and answered with an error refused the
   call as it was made; with no evidence about the outside world (no status, no exception, no known
   wording) the call's inputs are the first suspect, and the failure stays in the agent-caused
   layer rather than blaming the environment. So every failed tool result yields a signal. The one
   exception: a cancelled or interrupted call (``CancelledError``, ``KeyboardInterrupt``…, the
   YAML's ``ignored_exception_types``) is nobody's failure and classifies to nothing at all.

**Reasons.** Every classification carries ``reason``, why the call was refused. Business-rule
rejections and the other common refusals are named in the YAML's ``reasons`` (state_error:
``insufficient_funds``, ``capacity``, ``wrong_state``, ``not_eligible``, ``precondition``;
invalid_args: ``missing_field``, ``unexpected_field``, ``wrong_type``, ``invalid_value``,
``amount_mismatch``; bad_query: ``not_found``, ``query_syntax``, ``no_results``). The reason is
that of the deciding phrase, else of the best other reason phrase of the same group in the text (a
409 saying "insufficient funds" is state_error for ``insufficient_funds``), else what decided:
the group's own name (an ordinary phrase), ``http_status``, ``exception``, ``error_code``, or
``unclassified`` (the default above, and an unexplained failed model call).

A model call (``source="llm_call"``) has no execution layer: a leaf of the execution layer becomes
``api_error``, 413 is ``context_overflow``, and a failed call with no usable evidence is
``api_error`` at low confidence (its existing default; the tool default above does not apply).

Confidence: HTTP status or exception type / error code → 0.95 (a generic 4xx refined by text →
0.9; 400/405/413/414/415/422 → invalid_args by default → 0.9; 404 → bad_query by default → 0.75;
any other 4xx by default → 0.6; a status read from the error text → 0.9); a message-text match →
0.8; a weak builtin exception alone (or a bare KeyError) → 0.75; an unexplained failed tool or
model call → 0.5.

A successful tool result is never classified: :func:`tool_failure` only looks at results whose span
failed (``ToolResult.is_error``, or the HTTP status ≥ 400 / error type it derives from) or whose
content is unmistakably an error payload (:func:`content_is_error`: a JSON object with a truthy
top-level ``"error"``/``"errors"`` or ``"status": "error"``, or text starting with ``Error:``,
``Exception:`` or ``Traceback``, but not a report's "error: 0" / "Error: none"), so a log search that
returns lines saying "timeout" fires nothing.
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ahocorasick
import orjson
import yaml

from otelsignals.model import ToolResult
from otelsignals.signals.taxonomy import (
    API_ERROR,
    AUTH_MISUSE,
    BAD_QUERY,
    CONTEXT_OVERFLOW,
    INVALID_ARGS,
    MALFORMED_RESPONSE,
    NETWORK,
    RATE_LIMIT,
    STATE_ERROR,
    TIMEOUT,
    TOOL_NOT_FOUND,
)

PHRASES_FILE = Path(__file__).with_name("phrases") / "errors.yaml"

LEAF_OF_GROUP: dict[str, str] = {
    "invalid_args": INVALID_ARGS,
    "bad_query": BAD_QUERY,
    "tool_not_found": TOOL_NOT_FOUND,
    "auth_misuse": AUTH_MISUSE,
    "state_error": STATE_ERROR,
    "api_error": API_ERROR,
    "timeout": TIMEOUT,
    "rate_limit": RATE_LIMIT,
    "network": NETWORK,
    "malformed_response": MALFORMED_RESPONSE,
    "context_overflow": CONTEXT_OVERFLOW,
}
GROUP_OF_LEAF = {leaf: group for group, leaf in LEAF_OF_GROUP.items()}

# Text and code matches: the most specific group first.
PRIORITY: tuple[str, ...] = (
    "context_overflow",
    "rate_limit",
    "timeout",
    "network",
    "tool_not_found",
    "auth_misuse",
    "state_error",
    "malformed_response",
    "invalid_args",
    "bad_query",
    "api_error",
)
_RANK = {group: rank for rank, group in enumerate(PRIORITY)}

# Confidence rule (module docstring).
CONF_STATUS = 0.95
CONF_EXACT = 0.95
CONF_STATUS_REFINED_BY_TEXT = 0.9
CONF_TEXT_STATUS = 0.9
CONF_STATUS_404_DEFAULT = 0.75
CONF_OTHER_4XX_DEFAULT = 0.6
CONF_TEXT = 0.8
CONF_WEAK_EXCEPTION = 0.75
CONF_UNEXPLAINED_LLM = 0.5
CONF_UNCLASSIFIED_TOOL = 0.5

# The reason of a classification no named reason phrase decided: what decided it instead.
REASON_HTTP_STATUS = "http_status"
REASON_EXCEPTION = "exception"
REASON_ERROR_CODE = "error_code"
REASON_UNCLASSIFIED = "unclassified"  # a failure no evidence explains (the default leaf)
# The default leaf of a failed tool call nothing explains (module docstring: why invalid_args).
DEFAULT_TOOL_GROUP = "invalid_args"
# A Python KeyError printed bare ("Error: 'method_type'"): the tool looked up a key the call lacked.
KEY_ERROR_GROUP = "invalid_args"
KEY_ERROR_PATTERN = "KeyError"
KEY_ERROR_REASON = "missing_field"
_KEY_ERROR_MAX_CHARS = 80

SNIPPET_CHARS = 200
_HEAD_CHARS = 6000  # error text examined: the head (the message) and the tail (a traceback's last line)
_TAIL_CHARS = 2000
_PAYLOAD_PARSE_LIMIT = 1_000_000  # JSON bodies parsed up to this size; Python reprs up to _REPR_LIMIT
_REPR_LIMIT = 20_000

# A generic 4xx may be refined into these; a 404/410 only into the first two.
_REFINABLE_4XX = frozenset(
    {
        "tool_not_found",
        "bad_query",
        "context_overflow",
        "rate_limit",
        "auth_misuse",
        "state_error",
        "invalid_args",
    }
)
_REFINABLE_404 = frozenset({"tool_not_found", "bad_query"})

_NON_WORD = re.compile(r"[\W_]+")  # one character class: linear, no backtracking


def normalise(text: str) -> str:
    """Lower case, every run of non-word characters one space, padded: ``" rate limit exceeded "``."""
    return " " + _NON_WORD.sub(" ", text.lower()).strip() + " "


def _key(name: str) -> str:
    """Exact-lookup key of an exception name or error code: lower case, letters, digits and '-' only."""
    return "".join(ch for ch in name.lower() if ch.isalnum() or ch == "-")


@dataclass(frozen=True, slots=True)
class Classification:
    """What a failure is: the dotted leaf type, how sure, and the evidence (``pattern``)."""

    leaf_type: str
    confidence: float
    pattern: str
    snippet: str | None = None  # the error text that decided (≤ 200 characters)
    status_code: int | None = None  # the HTTP status used, when any
    error_type: str | None = None
    # Why the call was refused: a named reason of errors.yaml ("insufficient_funds", "not_found"…),
    # else the group's name (an ordinary phrase), "http_status", "exception", "error_code", or
    # "unclassified" (no evidence at all).
    reason: str | None = None

    @property
    def layer(self) -> str:
        return self.leaf_type.split(".", 1)[0]

    @property
    def group(self) -> str:
        return self.leaf_type.rsplit(".", 1)[1]


# ---------------------------------------------------------------------------------------------
# The library (errors.yaml)


@dataclass(frozen=True, slots=True)
class _Entry:
    group: str
    pattern: str  # as written in the YAML
    kind: str  # "phrase", "exception", "code", "near" (proximity phrase)
    strong: bool = False
    weak: bool = False
    reason: str | None = None  # the named reason of errors.yaml this phrase stands for


@dataclass(frozen=True, slots=True)
class _Proximity:
    """Subject words a proximity phrase must follow, and the business nouns that hide a subject."""

    subjects: frozenset[str]
    gap: int  # whitespace-separated words allowed between subject and phrase
    compounds: tuple[tuple[str, ...], ...] = ()  # "payment method": no subject
    reason: str | None = None


@dataclass
class ErrorLibrary:
    groups: dict[str, dict[str, Any]]
    exact: dict[str, _Entry]  # exception names and error codes
    exception_statuses: dict[str, int]
    ambiguous: dict[str, tuple[str, ...]]  # exception key → groups, default first
    ignored: frozenset[str]  # exception keys that are no failure (cancellation)
    proximity: dict[str, _Proximity]
    field_name_after: dict[str, tuple[frozenset[str], str | None]] = field(default_factory=dict)
    empty_starts: tuple[str, ...] = ()
    empty_contains: tuple[str, ...] = ()
    empty_examples: dict[str, Any] = field(default_factory=dict)
    automaton: Any = field(repr=False, default=None)

    def matches(self, normalised_text: str) -> Iterator[tuple[int, _Entry]]:
        """(start offset, entry) of every phrase found, in one pass."""
        if self.automaton is None:
            return
        for end, (length, entries) in self.automaton.iter(normalised_text):
            start = end - length + 1
            for entry in entries:
                yield start, entry


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str | int) for item in value):
        raise ValueError(f"errors.yaml: {where} must be a list of strings")
    return [str(item) for item in value]


def _camel_compound(name: str) -> bool:
    """``ReadTimeout``, ``JSONDecodeError``: specific enough to look for in free text."""
    return len(name) >= 8 and sum(1 for ch in name if ch.isupper()) >= 2 and name.isalnum()


def load_library(path: Path | str = PHRASES_FILE) -> ErrorLibrary:
    data = yaml.load(
        Path(path).read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )
    if not isinstance(data, Mapping) or not isinstance(data.get("groups"), Mapping):
        raise ValueError("errors.yaml: a mapping with 'groups' expected")
    groups: dict[str, dict[str, Any]] = dict(data["groups"])
    unknown = set(groups) - set(LEAF_OF_GROUP)
    missing = set(LEAF_OF_GROUP) - set(groups)
    if unknown or missing:
        raise ValueError(f"errors.yaml: unknown groups {sorted(unknown)}, missing {sorted(missing)}")

    exact: dict[str, _Entry] = {}
    text: dict[str, list[_Entry]] = {}
    proximity: dict[str, _Proximity] = {}
    field_name_after: dict[str, tuple[frozenset[str], str | None]] = {}

    def add_exact(key_source: str, entry: _Entry) -> None:
        key = _key(key_source)
        if not key:
            raise ValueError(f"errors.yaml: empty exception name or code in {entry.group}")
        previous = exact.get(key)
        if previous is not None and previous.group != entry.group:
            raise ValueError(f"errors.yaml: {key_source!r} is in both {previous.group} and {entry.group}")
        exact.setdefault(key, entry)

    def add_text(phrase: str, entry: _Entry) -> None:
        key = normalise(phrase)
        if not key.strip():
            raise ValueError(f"errors.yaml: empty phrase in {entry.group}")
        entries = text.setdefault(key, [])
        for other in entries:
            if other.group != entry.group and "near" not in (other.kind, entry.kind):
                raise ValueError(f"errors.yaml: phrase {phrase!r} is in both {other.group} and {entry.group}")
        if all((other.group, other.kind) != (entry.group, entry.kind) for other in entries):
            entries.append(entry)

    for group, spec in groups.items():
        if not isinstance(spec, Mapping):
            raise ValueError(f"errors.yaml: group {group} must be a mapping")
        reason_of = _reason_phrases(group, spec)
        listed: set[str] = set()
        for phrase in _strings(spec.get("phrases"), f"{group}.phrases"):
            reason = reason_of.get(normalise(phrase), (phrase, None))[1]
            add_text(phrase, _Entry(group, phrase, "phrase", reason=reason))
            listed.add(normalise(phrase))
        for phrase in _strings(spec.get("strong_phrases"), f"{group}.strong_phrases"):
            reason = reason_of.get(normalise(phrase), (phrase, None))[1]
            add_text(phrase, _Entry(group, phrase, "phrase", strong=True, reason=reason))
            listed.add(normalise(phrase))
        for key, (phrase, reason) in reason_of.items():  # a reason's phrases are ordinary phrases
            if key not in listed:
                add_text(phrase, _Entry(group, phrase, "phrase", reason=reason))
        for weak, list_name in ((False, "exception_types"), (True, "weak_exception_types")):
            for name in _strings(spec.get(list_name), f"{group}.{list_name}"):
                entry = _Entry(group, name, "exception", weak=weak)
                add_exact(name, entry)
                if _camel_compound(name):
                    add_text(name, entry)
        for code in _strings(spec.get("error_codes"), f"{group}.error_codes"):
            add_exact(code, _Entry(group, code, "code"))
        near = spec.get("proximity")
        if near is not None:
            subjects = frozenset(normalise(s).strip() for s in _strings(near.get("subjects"), group))
            compounds = tuple(
                tuple(normalise(c).split()) for c in _strings(near.get("compounds"), f"{group}.compounds")
            )
            reason = near.get("reason")
            proximity[group] = _Proximity(
                subjects, int(near.get("gap", 1)), compounds, str(reason) if reason else None
            )
            for phrase in _strings(near.get("phrases"), f"{group}.proximity.phrases"):
                add_text(phrase, _Entry(group, phrase, "near", reason=proximity[group].reason))
        before_field = spec.get("field_name_after")
        if before_field is not None:
            words = frozenset(
                w.lower() for w in _strings(before_field.get("words"), f"{group}.field_name_after")
            )
            reason = before_field.get("reason")
            field_name_after[group] = (words, str(reason) if reason else None)

    exception_statuses = {
        _key(name): int(status) for name, status in (data.get("exception_statuses") or {}).items()
    }
    ambiguous: dict[str, tuple[str, ...]] = {}
    for name, alternatives in (data.get("ambiguous_exception_types") or {}).items():
        options = tuple(_strings(alternatives, f"ambiguous_exception_types.{name}"))
        if not options or set(options) - set(LEAF_OF_GROUP):
            raise ValueError(f"errors.yaml: bad alternatives for {name}")
        ambiguous[_key(name)] = options
    ignored = frozenset(_key(name) for name in _strings(data.get("ignored_exception_types"), "ignored"))

    empty = data.get("empty_results") or {}
    empty_starts = tuple(
        normalise(p) for p in _strings(empty.get("starts_with"), "empty_results.starts_with")
    )
    empty_contains = tuple(normalise(p) for p in _strings(empty.get("contains"), "empty_results.contains"))

    automaton = ahocorasick.Automaton()
    for key, entries in text.items():
        automaton.add_word(key, (len(key), tuple(entries)))
    automaton.make_automaton()
    return ErrorLibrary(
        groups,
        exact,
        exception_statuses,
        ambiguous,
        ignored,
        proximity,
        field_name_after,
        empty_starts,
        empty_contains,
        dict(empty),
        automaton,
    )


def _reason_phrases(group: str, spec: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Normalised phrase → (phrase as written, reason name), from a group's ``reasons`` mapping."""
    reasons = spec.get("reasons") or {}
    if not isinstance(reasons, Mapping):
        raise ValueError(f"errors.yaml: {group}.reasons must be a mapping")
    reason_of: dict[str, tuple[str, str]] = {}
    for reason, reason_spec in reasons.items():
        if not isinstance(reason_spec, Mapping):
            raise ValueError(f"errors.yaml: {group}.reasons.{reason} must be a mapping")
        for phrase in _strings(reason_spec.get("phrases"), f"{group}.reasons.{reason}.phrases"):
            key = normalise(phrase)
            if not key.strip():
                raise ValueError(f"errors.yaml: empty phrase in {group}.reasons.{reason}")
            other = reason_of.setdefault(key, (phrase, str(reason)))[1]
            if other != reason:
                raise ValueError(f"errors.yaml: phrase {phrase!r} is in reasons {other} and {reason}")
    return reason_of


@functools.cache
def library() -> ErrorLibrary:
    """The packaged errors.yaml, loaded once."""
    return load_library()


# ---------------------------------------------------------------------------------------------
# Error payloads


@dataclass(frozen=True, slots=True)
class ErrorPayload:
    """What a JSON (or Python-repr) error body says: status, codes and human-readable messages."""

    status_code: int | None
    codes: tuple[str, ...]
    messages: tuple[str, ...]
    is_error: bool  # its top level says so: a truthy "error"/"errors", or "status": "error"


_MESSAGE_KEYS = ("message", "detail", "details", "error_description", "title", "description", "reason", "msg")
_CODE_KEYS = ("code", "type", "status", "reason", "error_code", "errorCode", "error_type", "name")
_STATUS_KEYS = (
    "status",
    "statusCode",
    "status_code",
    "code",
    "http_status",
    "httpStatus",
    "status_code_http",
)


def _truthy(value: Any) -> bool:
    if value is None or value is False:
        return False
    if isinstance(value, str | list | dict | tuple):
        return len(value) > 0
    return bool(value)


def _http_status(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 400 <= value <= 599:
        return value
    if isinstance(value, str) and len(value) == 3 and value.isdigit() and 400 <= int(value) <= 599:
        return int(value)
    return None


def _parse_object(content: str) -> dict[str, Any] | None:
    stripped = content.strip()
    if not stripped.startswith("{") or len(stripped) > _PAYLOAD_PARSE_LIMIT:
        return None
    try:
        parsed = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        parsed = None
        if len(stripped) <= _REPR_LIMIT and "'" in stripped:
            try:  # a Python dict printed with str(): {'error': 'Rate limit exceeded'}
                parsed = ast.literal_eval(stripped)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                parsed = None
    return parsed if isinstance(parsed, dict) else None


def _walk_error(node: Any, depth: int, codes: list[str], messages: list[str], statuses: list[int]) -> None:
    """Collect codes, messages and statuses from an error object (bounded depth and breadth)."""
    if depth > 3 or len(messages) > 16:
        return
    if isinstance(node, str):
        if node.strip():
            messages.append(node)
            if " " not in node.strip() and len(node) <= 64:
                codes.append(node)  # Slack: {"ok": false, "error": "channel_not_found"}
        return
    if isinstance(node, list):
        for item in node[:8]:
            _walk_error(item, depth + 1, codes, messages, statuses)
        return
    if not isinstance(node, dict):
        return
    for key in _STATUS_KEYS:
        status = _http_status(node.get(key))
        if status is not None:
            statuses.append(status)
    for key in _CODE_KEYS:
        value = node.get(key)
        if isinstance(value, str) and value and " " not in value.strip() and len(value) <= 64:
            codes.append(value)
        elif isinstance(value, int) and not isinstance(value, bool) and _http_status(value) is None:
            codes.append(str(value))  # JSON-RPC: -32601
    for key in _MESSAGE_KEYS:
        value = node.get(key)
        if isinstance(value, str) and value.strip():
            messages.append(value)
    for key in ("error", "errors", "cause", "details", "root_cause"):
        value = node.get(key)
        if (
            value is not None
            and value is not node
            and (key in ("error", "errors") or not isinstance(value, str))
        ):
            _walk_error(value, depth + 1, codes, messages, statuses)


def error_payload_of(content: str | None) -> ErrorPayload | None:
    """The error body in ``content`` when it is a JSON (or Python-repr) object, else None.

    ``is_error`` is True only for an unmistakable error payload: a top-level ``"error"`` or
    ``"errors"`` that is not null / false / empty, or ``"status": "error"``.
    """
    if not content:
        return None
    parsed = _parse_object(content)
    if parsed is None:
        return None
    error_value = parsed.get("error")
    errors_value = parsed.get("errors")
    status_value = parsed.get("status")
    is_error = (
        _truthy(error_value)
        or _truthy(errors_value)
        or (isinstance(status_value, str) and status_value.strip().lower() == "error")
    )
    codes: list[str] = []
    messages: list[str] = []
    statuses: list[int] = []
    for key in _STATUS_KEYS:
        status = _http_status(parsed.get(key))
        if status is not None:
            statuses.append(status)
    for key in _MESSAGE_KEYS:
        value = parsed.get(key)
        if isinstance(value, str) and value.strip():
            messages.append(value)
    if _truthy(error_value):
        _walk_error(error_value, 0, codes, messages, statuses)
    if _truthy(errors_value):
        _walk_error(errors_value, 0, codes, messages, statuses)
    for key in ("code", "error_code", "errorCode", "reason"):
        value = parsed.get(key)
        if isinstance(value, str) and value and " " not in value.strip() and len(value) <= 64:
            codes.append(value)
    if is_error and isinstance(parsed.get("type"), str) and parsed["type"] != "error":
        codes.append(parsed["type"])
    return ErrorPayload(statuses[0] if statuses else None, tuple(codes), tuple(messages), is_error)


_TEXT_ERROR_PREFIXES = ("error:", "exception:", "traceback")
_PAYLOAD_MARKERS = ('"error', "'error", '"status"', "'status'")


def content_is_error(content: str | None) -> bool:
    """Whether a result's content is unmistakably an error: an error payload or error text."""
    if not content:
        return False
    if looks_like_error_text(content):
        return True
    if not content.lstrip().startswith("{"):
        return False
    if not any(marker in content for marker in _PAYLOAD_MARKERS):
        return False  # no "error"/"errors"/"status" key anywhere: no need to parse
    key = _fingerprint(content)
    known = _FAILED_CONTENT.get(key)
    if known is None:
        payload = error_payload_of(content)
        known = payload is not None and payload.is_error
        _FAILED_CONTENT.put(key, known)
    return bool(known)


# "error: 0, warnings: 2", "Error: none": a count or a "no error" field of a report, not an error.
_NO_ERROR_VALUES = frozenset({"0", "none", "null", "false", "no", "nil", "n/a", "-"})


def looks_like_error_text(content: str | None) -> bool:
    """Text that starts with ``Error:``, ``Exception:`` or ``Traceback`` (case-insensitive), unless
    the value after ``Error:`` says there is none (``error: 0, warnings: 2``, ``Error: none``)."""
    if not content:
        return False
    head = content[:64].lstrip().lower()
    if not head.startswith(_TEXT_ERROR_PREFIXES):
        return False
    if head.startswith("error:"):
        words = head[len("error:") :].split()
        first = words[0].rstrip(".,;|)") if words else ""
        if first in _NO_ERROR_VALUES:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Classification

_MISSING = object()


class _BoundedCache:
    """A small LRU keyed by fingerprints, not by the (possibly 100 KB) texts themselves.

    Every detector of a layer asks about the same tool result; this answers all but the first."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            value = self._items[key]
            self._items.move_to_end(key)
        except KeyError:
            return default
        return value

    def put(self, key: Any, value: Any) -> None:
        try:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        except KeyError:  # another thread evicted it meanwhile: a cache, nothing lost
            pass


def _fingerprint(text: str | None) -> tuple[int, int] | None:
    return None if text is None else (len(text), hash(text))


_CLASSIFIED = _BoundedCache(2048)
_FAILED_CONTENT = _BoundedCache(2048)


def _bounded(text: str) -> str:
    if len(text) <= _HEAD_CHARS + _TAIL_CHARS:
        return text
    return text[:_HEAD_CHARS] + "\n…\n" + text[-_TAIL_CHARS:]


def _snippet(text: str, needle: str | None) -> str:
    text = text.strip()
    if len(text) <= SNIPPET_CHARS:
        return text
    start = 0
    if needle:
        first_word = needle.strip().split(" ", 1)[0]
        found = text.lower().find(first_word) if first_word else -1
        if found > SNIPPET_CHARS // 2:
            start = found - 40
    return text[start : start + SNIPPET_CHARS].strip()


@dataclass(slots=True)
class _TextHit:
    group: str
    pattern: str
    strong: bool
    source: str  # the original text it was found in
    weak: bool = False  # a builtin exception name seen in the text: any other phrase beats it
    reason: str | None = None


def _status_in_text(tokens: list[str]) -> int | None:
    """An HTTP status the error text states: "Error code: 429", "HTTP 503", "404 Client Error"…"""
    for i, token in enumerate(tokens):
        if len(token) != 3 or not token.isdigit() or not 400 <= int(token) <= 599:
            continue
        prev = tokens[i - 1] if i >= 1 else ""
        prev2 = tokens[i - 2] if i >= 2 else ""
        nxt = tokens[i + 1 : i + 3]
        if (
            (prev == "code" and prev2 in ("error", "status", "response"))
            or prev in ("http", "status", "statuscode", "status_code")
            or (prev == "error" and prev2 in ("client", "server"))
            or nxt in (["client", "error"], ["server", "error"])
        ):
            return int(token)
    return None


def _chunk_tokens(source: str) -> list[tuple[str, int]]:
    """Normalised words, each with the number of the whitespace-separated chunk it came from:
    ``"Route POST:/v1/x not found"`` → route/0, post/1, v1/1, x/1, not/2, found/3."""
    tokens: list[tuple[str, int]] = []
    for number, chunk in enumerate(_bounded(source).split()):
        tokens.extend((word, number) for word in normalise(chunk).split())
    return tokens


def _in_compound(words: list[str], j: int, compounds: tuple[tuple[str, ...], ...]) -> bool:
    """Whether ``words[j]`` ends one of the business nouns ``compounds`` ("payment method")."""
    for compound in compounds:
        size = len(compound)
        if j + 1 >= size and tuple(words[j + 1 - size : j + 1]) == compound:
            return True
    return False


def _near_ok(
    tokens: list[tuple[str, int]],
    phrase: tuple[str, ...],
    near: _Proximity,
    tool_name: str | None,
) -> bool:
    """A proximity phrase right after a subject word, with at most ``gap`` whitespace-separated words
    (a name, a path) between, or right after the called tool's own name. A subject word that ends a
    business noun of ``compounds`` ("Payment method 'pm_1' not found") is no subject."""
    tool = normalise(tool_name).strip() if tool_name else ""
    words = [word for word, _ in tokens]
    size = len(phrase)
    for i in range(len(tokens) - size + 1):
        if tuple(words[i : i + size]) != phrase:
            continue
        first_chunk = tokens[i][1]
        j = i - 1
        while j >= 0 and first_chunk - tokens[j][1] <= near.gap + 1:
            if tokens[j][0] in near.subjects and not _in_compound(words, j, near.compounds):
                return True
            j -= 1
        if tool:
            j = i - 1
            name: list[str] = []
            while j >= 0 and tokens[j][1] == first_chunk - 1 and len(name) < 16:
                name.append(tokens[j][0])
                j -= 1
            if " ".join(reversed(name)) == tool:
                return True
    return False


_RESPONSE_MODEL_SUFFIXES = ("response", "output", "result", "reply")


def _text_hits(
    lib: ErrorLibrary, sources: list[str], tool_name: str | None
) -> tuple[list[_TextHit], list[str]]:
    hits: list[_TextHit] = []
    all_tokens: list[str] = []
    for source in sources:
        text = normalise(_bounded(source))
        chunk_tokens: list[tuple[str, int]] | None = None
        near_checked: dict[tuple[str, str], bool] = {}
        for _start, entry in lib.matches(text):
            if entry.kind == "near":
                key = (entry.group, entry.pattern)
                if key in near_checked:
                    continue  # one verdict (and one hit) per proximity phrase and source
                if chunk_tokens is None:
                    chunk_tokens = _chunk_tokens(source)
                near = lib.proximity.get(entry.group, _Proximity(frozenset(), 0))
                phrase = tuple(normalise(entry.pattern).split())
                near_checked[key] = _near_ok(chunk_tokens, phrase, near, tool_name)
                if not near_checked[key]:
                    continue
            hits.append(_TextHit(entry.group, entry.pattern, entry.strong, source, entry.weak, entry.reason))
        hits.extend(_field_name_hits(lib, source))
        if _bare_key_error(source):
            hits.append(
                _TextHit(
                    KEY_ERROR_GROUP, KEY_ERROR_PATTERN, False, source, weak=True, reason=KEY_ERROR_REASON
                )
            )
        # pydantic: "1 validation error for WeatherResponse" is about the response, not the arguments.
        for marker in (" validation error for ", " validation errors for "):
            found = text.find(marker)
            if found >= 0:
                model = text[found + len(marker) :].split(" ", 1)[0]
                if model.endswith(_RESPONSE_MODEL_SUFFIXES):
                    hits.append(
                        _TextHit("malformed_response", "validation error for *Response", True, source)
                    )
        all_tokens.extend(text.split())
    return hits, all_tokens


def _best(hits: Iterable[_TextHit], allowed: frozenset[str] | None = None) -> _TextHit | None:
    """Strong before ordinary before weak, then the most specific group, then the longest phrase
    ("nonetype object has no attribute" over "object has no attribute")."""
    candidates = [hit for hit in hits if allowed is None or hit.group in allowed]
    if not candidates:
        return None
    return min(candidates, key=lambda hit: (not hit.strong, hit.weak, _RANK[hit.group], -len(hit.pattern)))


def _reason(hits: list[_TextHit], group: str, deciding: _TextHit | None, fallback: str) -> str:
    """The named reason of the deciding phrase; else of the best other phrase of ``group`` that has
    one (a 409 saying "insufficient funds" is state_error for insufficient_funds); else ``fallback``."""
    if deciding is not None and deciding.group == group and deciding.reason:
        return deciding.reason
    named = [hit for hit in hits if hit.group == group and hit.reason]
    best = _best(named)
    return best.reason if best is not None and best.reason else fallback


def _field_name(word: str) -> bool:
    """``delivery_info``, ``customerId``: an identifier a program would use for a field."""
    if not 3 <= len(word) <= 64 or not word.isascii() or not word[0].isalpha():
        return False
    if not all(ch.isalnum() or ch == "_" for ch in word):
        return False
    camel = any(a.islower() and b.isupper() for a, b in itertools.pairwise(word))
    return "_" in word.strip("_") or camel


_CHUNK_PUNCTUATION = ".,;:!?()[]{}'\"`"


def _field_name_hits(lib: ErrorLibrary, source: str) -> list[_TextHit]:
    """One hit per group whose ``field_name_after`` words stand right before a field name."""
    if not lib.field_name_after:
        return []
    chunks = [chunk.strip(_CHUNK_PUNCTUATION) for chunk in _bounded(source).split()]
    hits: list[_TextHit] = []
    for group, (words, reason) in lib.field_name_after.items():
        for word, following in itertools.pairwise(chunks):
            if word.lower() in words and _field_name(following):
                hits.append(_TextHit(group, f"{word.lower()} <field>", False, source, reason=reason))
                break
    return hits


_ERROR_PREFIXES = ("error:", "keyerror:", "exception:")


def _bare_key_error(source: str) -> bool:
    """A message that is only a quoted key (``'method_type'``, ``Error: 'city'``): how Python prints
    a KeyError, i.e. the tool looked up a field the call did not pass."""
    text = source.strip()
    if len(text) > _KEY_ERROR_MAX_CHARS:
        return False
    lowered = text.lower()
    for prefix in _ERROR_PREFIXES:
        if lowered.startswith(prefix):
            text = text[len(prefix) :].strip()
            break
    if len(text) < 3 or text[0] not in "'\"" or text[-1] != text[0]:
        return False
    inner = text[1:-1]
    return inner[:1].isalpha() and all(ch.isalnum() or ch in "_.-" for ch in inner)


def _traceback_exception(content: str) -> tuple[str | None, str] | None:
    """(exception name, last line) of a Python traceback, e.g. ("KeyError", "KeyError: 'city'")."""
    if not content.lstrip()[:9].lower().startswith("traceback"):
        return None
    lines = [line.strip() for line in content[-4000:].splitlines() if line.strip()]
    if not lines:
        return None
    last = lines[-1]
    name, colon, _ = last.partition(":")
    if colon and name and all(ch.isalnum() or ch in "._" for ch in name):
        return name, last
    return (name if name and all(ch.isalnum() or ch in "._" for ch in name) else None), last


def _exception_names(error_type: str | None) -> list[str]:
    """Lookup keys of an ``error.type``: the whole value and its last dotted part."""
    if not error_type:
        return []
    value = error_type.strip().removeprefix("<class '").removesuffix("'>").strip()
    names = [value]
    last = value.rsplit(".", 1)[-1]
    if last != value:
        names.append(last)
    return names


def classify_failure(
    status_code: int | None = None,
    error_type: str | None = None,
    error_message: str | None = None,
    content: str | None = None,
    *,
    source: str = "tool",
    tool_name: str | None = None,
) -> Classification | None:
    """The leaf type of a failure (see the module docstring for the precedence and the default).

    None only for a cancelled or interrupted call (or if classifying itself failed). Call it only
    for something that failed; for a tool result use :func:`tool_failure`, which checks that first.
    Never raises on odd input.
    """
    status_code = status_code if isinstance(status_code, int) and not isinstance(status_code, bool) else None
    error_type = error_type if isinstance(error_type, str) else None
    error_message = error_message if isinstance(error_message, str) else None
    content = content if isinstance(content, str) else None
    tool_name = tool_name if isinstance(tool_name, str) else None
    key = (status_code, error_type, _fingerprint(error_message), _fingerprint(content), source, tool_name)
    found = _CLASSIFIED.get(key, _MISSING)
    if found is not _MISSING:
        return found
    try:
        classification = _classify(status_code, error_type, error_message, content, source, tool_name)
    except Exception:  # a detector must never take the pipeline down
        classification = None
    _CLASSIFIED.put(key, classification)
    return classification


def _classify(
    status_code: int | None,
    error_type: str | None,
    error_message: str | None,
    content: str | None,
    source: str,
    tool_name: str | None,
) -> Classification | None:
    lib = library()
    llm = source == "llm_call"

    # Evidence: the exception message, then the error body's messages (or its raw text).
    payload = error_payload_of(content) if content else None
    sources: list[str] = []
    if error_message and error_message.strip():
        sources.append(error_message)
    if payload is not None:
        sources.extend(message for message in payload.messages if message not in sources)
    elif content and content.strip() and content not in sources:
        traceback = _traceback_exception(content)
        if traceback is not None:
            # A Python traceback: only its last line says what failed (file names and code lines
            # above it — "conflict_resolver.py", "timeout=5" — are no evidence).
            exc_name, line = traceback
            error_type = error_type or exc_name
            if line not in sources:
                sources.append(line)
        else:
            sources.append(content)
    hits, tokens = _text_hits(lib, sources, tool_name)
    evidence = sources[0] if sources else (error_type or "")

    # Exact names: error.type first, then the body's codes.
    exact_hits: list[tuple[_Entry, str]] = []
    code_hits: list[tuple[_Entry, str]] = []
    implied_status: int | None = None
    ambiguous: tuple[str, ...] | None = None
    ambiguous_name: str | None = None
    for name in _exception_names(error_type):
        key = _key(name)
        if key in lib.ignored:
            return None  # cancelled, interrupted: not a failure of anyone
        if implied_status is None and key in lib.exception_statuses:
            implied_status = lib.exception_statuses[key]
        if ambiguous is None and key in lib.ambiguous:
            ambiguous, ambiguous_name = lib.ambiguous[key], name
        entry = lib.exact.get(key)
        if entry is not None:
            exact_hits.append((entry, name))  # found in error.type: "exception:<name>"
    if payload is not None:
        for code in payload.codes:
            entry = lib.exact.get(_key(code))
            if entry is not None:
                code_hits.append((entry, code))

    def result(
        group: str,
        confidence: float,
        pattern: str,
        hit: _TextHit | None = None,
        status: int | None = None,
        *,
        fallback_reason: str,
    ) -> Classification:
        leaf = LEAF_OF_GROUP[group]
        if llm and leaf.startswith("execution."):
            leaf = API_ERROR
        text = hit.source if hit is not None else evidence
        return Classification(
            leaf,
            round(confidence, 3),
            pattern,
            _snippet(text, hit.pattern if hit is not None else None) if text else None,
            status,
            error_type,
            _reason(hits, group, hit, fallback_reason),
        )

    def refine(allowed: frozenset[str]) -> tuple[str, float, str, _TextHit | None, str] | None:
        """The agent-side leaf a generic 4xx's codes or text name (and the reason if none is named)."""
        strong_exact = [(e, n) for e, n in exact_hits + code_hits if not e.weak and e.group in allowed]
        if strong_exact:
            entry, name = min(strong_exact, key=lambda pair: _RANK[pair[0].group])
            if (entry, name) in exact_hits:
                return entry.group, CONF_EXACT, f"exception:{name}", None, REASON_EXCEPTION
            return entry.group, CONF_EXACT, f"code:{name}", None, REASON_ERROR_CODE
        hit = _best(hits, allowed)
        if hit is not None:
            return hit.group, CONF_STATUS_REFINED_BY_TEXT, f"phrase:{hit.pattern}", hit, hit.group
        return None

    # 1. HTTP status.
    status = status_code if status_code is not None and 100 <= status_code <= 599 else None
    status_origin = "http"
    if status is None and payload is not None and payload.status_code is not None:
        status, status_origin = payload.status_code, "body"
    if status is None and implied_status is not None:
        status, status_origin = implied_status, f"exception:{ambiguous_name or error_type}"
    text_status = False
    if status is None:
        status = _status_in_text(tokens)
        status_origin, text_status = "text", status is not None
    if status is not None and status >= 400:
        base = CONF_TEXT_STATUS if text_status else CONF_STATUS
        tag = f"http:{status}" if status_origin == "http" else f"http:{status}({status_origin})"
        definitive: str | None = None
        if status in (429, 402):
            definitive = "rate_limit"
        elif status in (401, 403):
            rate = refine(frozenset({"rate_limit"}))
            if rate is not None:
                group, _conf, pattern, hit, _ = rate
                return result(
                    group, base, f"{tag}+{pattern}", hit, status, fallback_reason=REASON_HTTP_STATUS
                )
            definitive = "auth_misuse"
        elif status in (408, 504):
            definitive = "timeout"
        elif status in (409, 412, 423, 428):
            definitive = "state_error"
        elif status >= 500:
            definitive = "api_error"
        elif status == 413 and llm:
            definitive = "context_overflow"
        if definitive is not None:
            return result(definitive, base, tag, status=status, fallback_reason=REASON_HTTP_STATUS)
        # A generic 4xx: the codes or text may say more.
        allowed = _REFINABLE_404 if status in (404, 410) else _REFINABLE_4XX
        refined = refine(allowed)
        if refined is not None:
            group, conf, pattern, hit, fallback = refined
            return result(group, min(conf, base), f"{tag}+{pattern}", hit, status, fallback_reason=fallback)
        if status in (404, 410):
            default_group, default_conf = "bad_query", CONF_STATUS_404_DEFAULT
        elif status in (400, 405, 413, 414, 415, 422):
            default_group, default_conf = "invalid_args", min(0.9, base)
        else:
            default_group, default_conf = "invalid_args", CONF_OTHER_4XX_DEFAULT
        return result(default_group, default_conf, tag, status=status, fallback_reason=REASON_HTTP_STATUS)

    # 2. Exception names and error codes.
    if ambiguous is not None:
        hit = _best(hits, frozenset(ambiguous))
        group = hit.group if hit is not None else ambiguous[0]
        pattern = f"exception:{ambiguous_name}" + (f"+phrase:{hit.pattern}" if hit else "")
        return result(group, CONF_EXACT, pattern, hit, fallback_reason=REASON_EXCEPTION)
    strong_exact = [(e, n) for e, n in exact_hits if not e.weak]
    if strong_exact:  # error.type itself
        entry, name = strong_exact[0]
        return result(entry.group, CONF_EXACT, f"exception:{name}", fallback_reason=REASON_EXCEPTION)
    strong_codes = [(e, n) for e, n in code_hits if not e.weak]
    if strong_codes:  # the error body's codes, the most specific first
        entry, name = min(strong_codes, key=lambda pair: _RANK[pair[0].group])
        return result(entry.group, CONF_EXACT, f"code:{name}", fallback_reason=REASON_ERROR_CODE)
    best = _best(hits)
    if best is not None and not best.weak:
        return result(best.group, CONF_TEXT, f"phrase:{best.pattern}", best, fallback_reason=best.group)
    if exact_hits:  # weak builtins only
        entry, name = exact_hits[0]
        return result(entry.group, CONF_WEAK_EXCEPTION, f"exception:{name}", fallback_reason=REASON_EXCEPTION)
    if best is not None:  # a weak builtin named in the text only: "Error: KeyError('city')", "Error: 'city'"
        return result(
            best.group,
            CONF_WEAK_EXCEPTION,
            f"exception:{best.pattern}",
            best,
            fallback_reason=REASON_EXCEPTION,
        )
    # 4. Nothing explains the failure.
    if llm:
        return result("api_error", CONF_UNEXPLAINED_LLM, "failed_call", fallback_reason=REASON_UNCLASSIFIED)
    return result(
        DEFAULT_TOOL_GROUP, CONF_UNCLASSIFIED_TOOL, REASON_UNCLASSIFIED, fallback_reason=REASON_UNCLASSIFIED
    )


def result_failed(result: ToolResult | None) -> bool:
    """Whether the tool span said the call failed (``is_error``, an HTTP status ≥ 400, an error type)."""
    return result is not None and (
        bool(result.is_error)
        or (isinstance(result.status_code, int) and result.status_code >= 400)
        or bool(result.error_type)
    )


def tool_failure(
    result: ToolResult | None, content: str | None = None, tool_name: str | None = None
) -> Classification | None:
    """Classify a tool result, but only one that failed.

    It failed when its span said so (``is_error``, or the HTTP status ≥ 400 or error type it is
    derived from) or its content is unmistakably an error payload: a JSON object with a truthy
    top-level ``"error"``/``"errors"`` or ``"status": "error"``, or text starting with ``Error:``,
    ``Exception:`` or ``Traceback``. A failed result always classifies (to the default leaf when
    nothing explains it), except a cancelled or interrupted call. Anything else — a successful
    result that merely mentions errors — classifies to nothing.
    """
    try:
        if result is not None and isinstance(result.content, str) and result.content:
            content = result.content
        if not isinstance(content, str):
            content = None
        failed = result_failed(result)
        if not failed and content:
            failed = content_is_error(content)
        if not failed:
            return None
        name = tool_name or (result.name if result is not None else None)
        return classify_failure(
            result.status_code if result is not None else None,
            result.error_type if result is not None else None,
            result.error_message if result is not None else None,
            content,
            source="tool",
            tool_name=name,
        )
    except Exception:
        return None


# ---------------------------------------------------------------------------------------------
# Empty results

# Keys under which APIs return their result lists (one level deep: {"hits": {"hits": []}}).
RESULT_KEYS = frozenset(
    {
        "results", "result", "items", "data", "hits", "matches", "records", "rows", "documents", "docs",
        "entries", "values", "objects", "files", "nodes", "edges", "organic_results", "products", "orders",
        "flights", "hotels", "users", "customers", "messages", "events", "issues", "tickets", "articles",
        "answers", "list", "content", "response",
    }
)  # fmt: skip
EMPTY_TEXT_MAX_CHARS = 300
EMPTY_JSON_MAX_CHARS = 20_000
_EMPTY_LITERALS = frozenset({"", "[]", "{}", "null", "None", '""', "''", "[ ]", "{ }"})


def _result_lists(node: dict[str, Any], depth: int = 0) -> tuple[int, int] | None:
    """(result lists, non-empty ones) under RESULT_KEYS; None when some other list holds records.

    A list of plain values elsewhere is metadata (``{"columns": ["region", "count"], "rows": []}``);
    a list of objects or lists elsewhere means something was returned
    (``{"items": [], "recommended": [{...}]}``)."""
    lists = nonempty = 0
    for key, value in list(node.items())[:64]:
        if isinstance(value, list):
            if str(key).lower() in RESULT_KEYS:
                lists += 1
                nonempty += 1 if value else 0
            elif any(isinstance(item, dict | list) for item in value[:64]):
                return None
        elif isinstance(value, dict) and depth == 0 and str(key).lower() in RESULT_KEYS:
            inner = _result_lists(value, 1)
            if inner is None:
                return None
            lists += inner[0]
            nonempty += inner[1]
            if not value:
                lists += 1
    return lists, nonempty


def empty_result_of(content: str | None) -> str | None:
    """How a successful result says it found nothing ("empty", "empty_results", "text"), else None.

    None for content that was not captured (None). Never raises.
    """
    if not isinstance(content, str):
        return None
    try:
        stripped = content.strip()
        if stripped in _EMPTY_LITERALS:
            return "empty"
        if stripped[0] in "[{":
            if len(stripped) > EMPTY_JSON_MAX_CHARS:
                return None  # a body this large returned something
            try:
                parsed = orjson.loads(stripped)
            except orjson.JSONDecodeError:
                return None
            if isinstance(parsed, list):
                return "empty" if not parsed else None
            if isinstance(parsed, dict):
                counted = _result_lists(parsed)
                if counted is not None and counted[0] > 0 and counted[1] == 0:
                    return "empty_results"
            return None
        if len(stripped) > EMPTY_TEXT_MAX_CHARS:
            return None
        lib = library()
        text = normalise(stripped)
        if any(text.startswith(phrase) for phrase in lib.empty_starts):
            return "text"
        if any(phrase in text for phrase in lib.empty_contains):
            return "text"
        return None
    except Exception:
        return None


# ---------------------------------------------------------------------------------------------
# Self-test of the data


def _example_result(example: Any, *, failed_by_default: bool) -> tuple[ToolResult, str]:
    if isinstance(example, str):
        if failed_by_default:
            return ToolResult(is_error=True, error_message=example), "tool"
        return ToolResult(is_error=False, content=example), "tool"
    if not isinstance(example, Mapping):
        raise ValueError(f"errors.yaml: an example must be a string or a mapping, not {example!r}")
    result = ToolResult(
        name=example.get("tool"),
        content=example.get("content"),
        is_error=bool(example.get("is_error", failed_by_default)),
        error_type=example.get("error_type"),
        error_message=example.get("error_message"),
        status_code=example.get("status_code"),
    )
    return result, str(example.get("source", "tool"))


def classify_example(example: Any, *, failed_by_default: bool) -> Classification | None:
    """How an errors.yaml example classifies (strings: a failure's message, or a successful result)."""
    result, source = _example_result(example, failed_by_default=failed_by_default)
    if source == "llm_call":
        return classify_failure(
            result.status_code, result.error_type, result.error_message, result.content, source="llm_call"
        )
    return tool_failure(result, tool_name=result.name)


def self_test(lib: ErrorLibrary | None = None) -> list[str]:
    """Problems with errors.yaml: positives that do not classify to their group, near-misses that do.

    A string positive is the message of a failed tool call; a string near-miss is the content of a
    *successful* result and must classify to nothing at all. Mapping examples give the fields
    (``status_code``, ``error_type``, ``error_message``, ``content``, ``is_error``, ``tool``,
    ``source``); a mapping near-miss must not land in its group.
    """
    lib = lib or library()
    problems: list[str] = []
    for group, spec in lib.groups.items():
        leaf = LEAF_OF_GROUP[group]
        positives = spec.get("positives") or []
        near_misses = spec.get("near_misses") or []
        if len(positives) < 8 or len(near_misses) < 8:
            problems.append(f"{group}: needs ≥ 8 positives and ≥ 8 near-misses")
        for example in positives:
            found = classify_example(example, failed_by_default=True)
            expected = leaf
            if (
                isinstance(example, Mapping)
                and example.get("source") == "llm_call"
                and leaf.startswith("execution.")
            ):
                expected = API_ERROR
            if found is None or found.leaf_type != expected:
                problems.append(f"{group}: positive {example!r} → {found.leaf_type if found else None}")
        problems.extend(_near_miss_problems(group, near_misses, "leaf_type", leaf, f"classified as {group}"))
        problems.extend(_reason_problems(group, spec))
    empty = lib.empty_examples
    for example in empty.get("positives") or []:
        if empty_result_of(example) is None:
            problems.append(f"empty_results: positive {example!r} not recognised")
    for example in empty.get("near_misses") or []:
        if empty_result_of(example) is not None:
            problems.append(f"empty_results: near-miss {example!r} taken for an empty result")
    return problems


def _reason_problems(group: str, spec: Mapping[str, Any]) -> list[str]:
    """A reason's positives must classify to ``group`` with that reason; its string near-misses
    (successful results) must fire nothing, its mapping near-misses (failed calls) not get it."""
    problems: list[str] = []
    leaf = LEAF_OF_GROUP[group]
    for reason, reason_spec in (spec.get("reasons") or {}).items():
        positives = reason_spec.get("positives") or []
        near_misses = reason_spec.get("near_misses") or []
        if len(positives) < 3 or len(near_misses) < 3:
            problems.append(f"{group}.{reason}: needs ≥ 3 positives and ≥ 3 near-misses")
        for example in positives:
            found = classify_example(example, failed_by_default=True)
            if found is None or found.leaf_type != leaf or found.reason != reason:
                got = (found.leaf_type, found.reason) if found else None
                problems.append(f"{group}.{reason}: positive {example!r} → {got}")
        problems.extend(
            _near_miss_problems(f"{group}.{reason}", near_misses, "reason", reason, f"got reason {reason}")
        )
    return problems


def _near_miss_problems(
    label: str, near_misses: list[Any], field_name: str, forbidden: str, landed: str
) -> list[str]:
    """A string near-miss (a successful result) must fire nothing; a mapping near-miss (a failed
    call) must not classify with ``field_name`` equal to ``forbidden``."""
    problems = []
    for example in near_misses:
        found = classify_example(example, failed_by_default=False)
        if isinstance(example, str) and found is not None:
            problems.append(f"{label}: near-miss {example!r} fired {found.leaf_type}")
        elif found is not None and getattr(found, field_name) == forbidden:
            problems.append(f"{label}: near-miss {example!r} {landed}")
    return problems
