"""The conversation filters of ``GET /v1/sessions``, ``GET /v1/timeline`` and eval runs, read from a
query string (or a JSON object of the same names), each problem raised as a ValueError naming the
parameter."""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping

from otelsignals.scoring import BUCKETS as QUALITY_BUCKETS
from otelsignals.signals.taxonomy import CATEGORIES, LEAF_TYPES
from otelsignals.stores.conversation_index import MAX_PAGE, ConversationFilter

MAX_UNIX_SECONDS = 1e11  # the year 5138: past it a "time" is a mistake


def listing_request(query: Mapping[str, str]) -> tuple[ConversationFilter, str, int, str | None]:
    """(filter, sort, limit, cursor) of ``GET /v1/sessions?quality=severe,poor&flagged=true&
    signal=execution.failure&agent=…&since=…&until=…&min_priority=…&closed=…&sort=-priority&
    limit=…&cursor=…``; raises ValueError naming the parameter."""
    unknown = sorted(set(query) - _LISTING_PARAMETERS)
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(_LISTING_PARAMETERS))}"
        )
    conditions = ConversationFilter(
        qualities=_known(query, "quality", _QUALITIES),
        flagged=_flag(query, "flagged"),
        signals=_known(query, "signal", _SIGNALS),
        agents=_names(query, "agent"),
        since=query_time(query, "since"),
        until=query_time(query, "until"),
        min_priority=query_number(query, "min_priority"),
        closed=_flag(query, "closed"),
    )
    limit = query_int(query, "limit", 1, MAX_PAGE, default=50)
    return conditions, query.get("sort", "-priority"), limit, query.get("cursor")


_LISTING_PARAMETERS = frozenset(
    [
        "quality",
        "flagged",
        "signal",
        "agent",
        "since",
        "until",
        "min_priority",
        "closed",
        "sort",
        "limit",
        "cursor",
    ]
)


def _names(query: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in query.get(name, "").split(",") if part.strip())


# What a quality or signal filter can name: a typo matched nothing, silently (an eval run over a
# filter with one evaluated no conversation and ended "done").
_QUALITIES = frozenset(name for name, _ in QUALITY_BUCKETS)
_SIGNALS = frozenset((*CATEGORIES, *LEAF_TYPES))  # what the index finds (searchable_types)


def _known(query: Mapping[str, str], name: str, known: frozenset[str]) -> tuple[str, ...]:
    names = _names(query, name)
    unknown = sorted(set(names) - known)
    if unknown:
        shown = ", ".join(sorted(known)) if len(known) <= 10 else "a leaf type or a category"
        raise ValueError(f"{name}: unknown {', '.join(map(repr, unknown))} (known: {shown})")
    return names


def _flag(query: Mapping[str, str], name: str) -> bool | None:
    value = query.get(name)
    if value is None:
        return None
    if value.lower() not in ("true", "false"):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value.lower() == "true"


def query_number(query: Mapping[str, str], name: str) -> float | None:
    value = query.get(name)
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return number


def query_int(query: Mapping[str, str], name: str, low: int, high: int, *, default: int) -> int:
    """A whole number from ``low`` to ``high`` (``default`` when absent)."""
    value = query.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {value!r}") from None
    if not low <= number <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {value!r}")
    return number


def query_time(query: Mapping[str, str], name: str) -> float | None:
    return parse_time(name, query.get(name))


def parse_time(name: str, value: str | None) -> float | None:
    """Unix seconds, or an ISO 8601 time (UTC when it names no zone); None stays None."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or abs(seconds) > MAX_UNIX_SECONDS:
            raise ValueError(f"{name} must be Unix seconds or an ISO 8601 time, got {value!r}")
        return seconds
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{name} must be Unix seconds or an ISO 8601 time, got {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()
