"""What a tool result's content says about failure: an error body's fields, whether the content is
unmistakably an error, and whether a successful result found nothing."""

from __future__ import annotations

import ast
import re
import threading
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import orjson
from cachetools import LRUCache

from otelsignals.signals.errors.library import library, normalise

_PAYLOAD_PARSE_LIMIT = 1_000_000  # JSON bodies parsed up to this size; Python reprs up to _REPR_LIMIT
_REPR_LIMIT = 20_000
# Every detector of a layer asks about the same tool result; this many verdicts are remembered.
FAILED_CONTENT_ENTRIES = 2048


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
_NESTED_ERROR_KEYS = ("error", "errors", "cause", "details", "root_cause")
_MAX_DEPTH = 3
_MAX_MESSAGES = 16
_MAX_LIST_ITEMS = 8
_MAX_CODE_CHARS = 64


def _truthy(value: Any) -> bool:
    if value is None or value is False:
        return False
    if isinstance(value, str | list | dict | tuple):
        return len(value) > 0
    return bool(value)


def http_status(value: Any) -> int | None:
    """``value`` as an HTTP error status (400–599, an int or three digits), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 400 <= value <= 599:
        return value
    if isinstance(value, str) and len(value) == 3 and value.isdigit() and 400 <= int(value) <= 599:
        return int(value)
    return None


def _code_word(value: object) -> TypeGuard[str]:
    """A one-word string short enough to be a code (``channel_not_found``, ``RESOURCE_EXHAUSTED``)."""
    if not isinstance(value, str) or not value:
        return False
    return " " not in value.strip() and len(value) <= _MAX_CODE_CHARS


# The latest texts parsed and their values: every tool result is asked whether it is an error and
# whether it found nothing, by detectors that go through a trace's results one after another, and
# each question parsed it (all 3,055 parsed results of the agent workload, twice, the second parse
# at most 3 parses after the first). Only texts the second question parses are kept
# (EMPTY_JSON_MAX_CHARS), not a megabyte and its objects. A value is only read, never changed. One
# tuple, replaced whole: threads sharing it never see it change under them.
_RECENT_PARSES = 4
_recent_parses: tuple[tuple[str, Any], ...] = ()


def _json_value(text: str) -> Any:
    """``orjson.loads(text)``, None for text that is not JSON (as for ``null``: neither caller tells
    them apart, both want an object or a list); a text parsed again soon after is parsed once."""
    global _recent_parses
    recent = _recent_parses
    for parsed_text, value in recent:
        if parsed_text == text:
            return value
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = None
    if len(text) <= EMPTY_JSON_MAX_CHARS:
        _recent_parses = ((text, value), *recent[: _RECENT_PARSES - 1])
    return value


def _parse_object(content: str) -> dict[str, Any] | None:
    stripped = content.strip()
    if not stripped.startswith("{") or len(stripped) > _PAYLOAD_PARSE_LIMIT:
        return None
    parsed = _json_value(stripped)  # starts with "{": None only when it is not JSON
    if parsed is None and len(stripped) <= _REPR_LIMIT and "'" in stripped:
        try:  # a Python dict printed with str(): {'error': 'Rate limit exceeded'}
            parsed = ast.literal_eval(stripped)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            parsed = None
    return parsed if isinstance(parsed, dict) else None


@dataclass
class _Collected:
    """Codes, messages and statuses found so far in an error body, in the order found."""

    codes: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)

    def add_statuses_and_messages(self, node: dict[str, Any]) -> None:
        for key in _STATUS_KEYS:
            status = http_status(node.get(key))
            if status is not None:
                self.statuses.append(status)
        for key in _MESSAGE_KEYS:
            value = node.get(key)
            if isinstance(value, str) and value.strip():
                self.messages.append(value)


def _walk_error(node: Any, depth: int, found: _Collected) -> None:
    """Collect codes, messages and statuses from an error object (bounded depth and breadth)."""
    if depth > _MAX_DEPTH or len(found.messages) > _MAX_MESSAGES:
        return
    if isinstance(node, str):
        if node.strip():
            found.messages.append(node)
            if " " not in node.strip() and len(node) <= _MAX_CODE_CHARS:
                found.codes.append(node)  # Slack: {"ok": false, "error": "channel_not_found"}
        return
    if isinstance(node, list):
        for item in node[:_MAX_LIST_ITEMS]:
            _walk_error(item, depth + 1, found)
        return
    if isinstance(node, dict):
        _walk_error_object(node, depth, found)


def _walk_error_object(node: dict[str, Any], depth: int, found: _Collected) -> None:
    for key in _STATUS_KEYS:
        status = http_status(node.get(key))
        if status is not None:
            found.statuses.append(status)
    for key in _CODE_KEYS:
        value = node.get(key)
        if _code_word(value):
            found.codes.append(value)
        elif isinstance(value, int) and not isinstance(value, bool) and http_status(value) is None:
            found.codes.append(str(value))  # JSON-RPC: -32601
    for key in _MESSAGE_KEYS:
        value = node.get(key)
        if isinstance(value, str) and value.strip():
            found.messages.append(value)
    for key in _NESTED_ERROR_KEYS:
        value = node.get(key)
        if (
            value is not None
            and value is not node
            and (key in ("error", "errors") or not isinstance(value, str))
        ):
            _walk_error(value, depth + 1, found)


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
    found = _Collected()
    found.add_statuses_and_messages(parsed)
    if _truthy(error_value):
        _walk_error(error_value, 0, found)
    if _truthy(errors_value):
        _walk_error(errors_value, 0, found)
    for key in ("code", "error_code", "errorCode", "reason"):
        value = parsed.get(key)
        if _code_word(value):
            found.codes.append(value)
    if is_error and isinstance(parsed.get("type"), str) and parsed["type"] != "error":
        found.codes.append(parsed["type"])
    status = found.statuses[0] if found.statuses else None
    return ErrorPayload(status, tuple(found.codes), tuple(found.messages), is_error)


def fingerprint(text: str | None) -> tuple[int, int] | None:
    """A cache key for a (possibly 100 KB) text that does not keep the text alive."""
    return None if text is None else (len(text), hash(text))


_TEXT_ERROR_PREFIXES = ("error:", "exception:", "traceback")
_PAYLOAD_MARKERS = ('"error', "'error", '"status"', "'status'")
# Keyed by fingerprint; the lock because the analysis thread and to_thread callers may share it.
_FAILED_CONTENT: LRUCache[tuple[int, int] | None, bool] = LRUCache(maxsize=FAILED_CONTENT_ENTRIES)
_FAILED_CONTENT_LOCK = threading.Lock()


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
    key = fingerprint(content)
    with _FAILED_CONTENT_LOCK:
        known = _FAILED_CONTENT.get(key)
    if known is None:
        payload = error_payload_of(content)
        known = payload is not None and payload.is_error
        with _FAILED_CONTENT_LOCK:
            _FAILED_CONTENT[key] = known
    return known


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


# Keys under which APIs return their result lists (one level deep: {"hits": {"hits": []}}).
RESULT_KEYS = frozenset(
    {
        "results", "result", "items", "data", "hits", "matches", "records", "rows", "documents", "docs",
        "entries", "values", "objects", "files", "nodes", "edges", "organic_results", "products", "orders",
        "flights", "hotels", "users", "customers", "messages", "events", "issues", "tickets", "articles",
        "answers", "list", "content", "response",
    }
)  # fmt: skip
# Keys that count what a result holds: {"slots": [], "count": 0} found nothing, whatever its list is called.
COUNT_KEYS = frozenset(
    {
        "count", "total", "total_count", "totalcount", "total_results", "totalresults", "num_results",
        "result_count", "resultcount",
    }
)  # fmt: skip
# Words of a list's name that make its emptiness good news, not a search that found nothing
# ({"conflicts": [], "count": 0}, {"fraud_alerts": []}, {"failed_jobs": []}): any word of the name.
PROBLEM_LIST_WORDS = frozenset(
    {
        "error", "errors", "conflict", "conflicts", "violation", "violations", "vulnerabilities",
        "warning", "warnings", "failure", "failures", "failing", "failed", "alert", "alerts", "incident",
        "incidents", "problem", "problems", "finding", "findings", "defect", "defects", "outage",
        "outages", "hold", "holds", "delay", "delays", "bug", "bugs", "issue", "issues", "overdue",
        "pending", "blocked", "blockers", "dispute", "disputes", "chargebacks", "exceptions", "flags",
        "flagged", "unpaid", "missing", "risks", "complaints", "cancellations",
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


def _empty_json(stripped: str, tool: str | None) -> str | None:
    """How a JSON body says it found nothing ("empty", "empty_results"), else None."""
    if len(stripped) > EMPTY_JSON_MAX_CHARS:
        return None  # a body this large returned something
    parsed = _json_value(stripped)
    if isinstance(parsed, list):
        return "empty" if not parsed else None
    if isinstance(parsed, dict):
        counted = _result_lists(parsed)
        if counted is not None and counted[0] > 0 and counted[1] == 0:
            return "empty_results"
        if counted is not None and counted[0] == 0 and _counted_nothing(parsed):
            return "empty_results"
        if tool and _sought_list_empty(parsed, tool):
            return "empty_results"
    return None


def word_forms(words: list[str]) -> set[str]:
    """Each word and its singular as a plural's ending would give it: slots → slot, matches → match,
    policies → policy."""
    forms = set(words)
    for word in words:
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            forms.add(word[:-1])
            if word.endswith("ies"):
                forms.add(word[:-3] + "y")
            elif word.endswith("es"):
                forms.add(word[:-2])
    return forms


def _count_value(value: Any) -> float | None:
    """A count as a number: 3, 3.0 or "3"; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value.strip().isdigit():
        return float(value.strip())
    return None


def _counts_something(node: dict[str, Any]) -> bool:
    """A count other than 0 beside the lists, at the top or one object down ({"meta": {"total": 5}})."""
    for key, value in list(node.items())[:64]:
        if isinstance(value, dict):
            if any(
                _count_value(inner) not in (None, 0.0)
                for name, inner in list(value.items())[:64]
                if str(name).lower() in COUNT_KEYS
            ):
                return True
        elif str(key).lower() in COUNT_KEYS and _count_value(value) not in (None, 0.0):
            return True
    return False


def _sought_list_empty(node: dict[str, Any], tool: str) -> bool:
    """The list named for what the tool looks for is empty: ``{"slots": []}`` from
    ``find_equine_slots``, ``{"offers": [], "region": "US"}`` from ``search_offers`` (a word of the
    list's name, or its singular, is one of the tool's). Whatever else the body holds only describes
    the request: plain values, lists of plain values, objects of plain values; a list or object
    holding records elsewhere means something was returned, a count other than 0 says so too. An
    empty list of problems is good news, not a search that found nothing, whether the list or the
    tool names them (``get_fraud_alerts`` → ``{"alerts": []}``, ``list_failed_jobs`` →
    ``{"jobs": []}``)."""
    tool_words = _key_words(tool[:200])
    if PROBLEM_LIST_WORDS.intersection(tool_words) or _counts_something(node):
        return False
    sought = word_forms(tool_words)
    named = 0
    for key, value in list(node.items())[:64]:
        words = _key_words(str(key))
        if isinstance(value, list):
            if sought & word_forms(words):
                if value or PROBLEM_LIST_WORDS.intersection(words):
                    return False
                named += 1
            elif any(isinstance(item, dict | list) for item in value[:64]):
                return False
        elif isinstance(value, dict) and any(
            isinstance(inner, dict | list) for inner in list(value.values())[:64]
        ):
            return False
    return named > 0


def _key_words(key: str) -> list[str]:
    """The words of a JSON key or a tool's name: snake_case, kebab-case, camelCase and dotted names
    split (fraudAlerts → fraud, alerts; slack.conversations_list → slack, conversations, list)."""
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key).lower().replace("-", "_").replace(".", "_").split("_")


def _counted_nothing(node: dict[str, Any]) -> bool:
    """A list under a name of its own, empty, and a count of 0 beside it ({"slots": [], "count": 0}).
    Every list must be empty and the count a number (0, 0.0 or "0": :func:`_count_value`): {"count": 0}
    alone is an answer (no unread messages), not a search that found nothing; and so is an empty list
    of problems ({"conflicts": [], "count": 0}: none found is good news). A page size is no count."""
    lists = [value for value in node.values() if isinstance(value, list)]
    counts = [value for key, value in node.items() if str(key).lower() in COUNT_KEYS]
    listed = [str(key) for key, value in node.items() if isinstance(value, list)]
    return (
        bool(lists)
        and not any(PROBLEM_LIST_WORDS.intersection(_key_words(key)) for key in listed)
        and not any(lists)
        and any(_count_value(count) == 0.0 for count in counts)
        and not any(_count_value(count) not in (None, 0.0) for count in counts)
    )


def _empty_text(stripped: str) -> str | None:
    """ "text" when a short text says it found nothing (the library's empty-result wordings)."""
    if len(stripped) > EMPTY_TEXT_MAX_CHARS:
        return None
    lib = library()
    text = normalise(stripped)
    if any(text.startswith(phrase) for phrase in lib.empty_starts):
        return "text"
    if any(phrase in text for phrase in lib.empty_contains):
        return "text"
    return None


def empty_result_of(content: str | None, tool: str | None = None) -> str | None:
    """How a successful result says it found nothing ("empty", "empty_results", "text"), else None.

    ``tool``, the name of the tool that answered, lets an object whose list is named for what the
    tool looks for say so (:func:`_sought_list_empty`). None for content that was not captured
    (None). Never raises.
    """
    if not isinstance(content, str):
        return None
    try:
        stripped = content.strip()
        if stripped in _EMPTY_LITERALS:
            return "empty"
        if stripped[0] in "[{":
            return _empty_json(stripped, tool)
        return _empty_text(stripped)
    except Exception:
        return None
