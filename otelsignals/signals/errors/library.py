"""The error library: ``phrases/errors.yaml`` loaded, validated and compiled once.

Per leaf group it holds exception type names and error codes (exact lookup), phrases (one
Aho-Corasick automaton over normalised text), proximity phrases with their subject words, the
words that announce a field name, and the named reasons; plus the SDK exception classes that stand
for an HTTP status, the ambiguous and the ignored exception names, and the empty-result wordings.
The file's own header documents each key.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ahocorasick
import yaml

from otelsignals.signals import word_lists
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

PHRASES_FILE = Path(__file__).parent.parent / "phrases" / "errors.yaml"

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
RANK = {group: rank for rank, group in enumerate(PRIORITY)}

_NON_WORD = re.compile(r"[\W_]+")  # one character class: linear, no backtracking


def normalise(text: str) -> str:
    """Lower case, every run of non-word characters one space, padded: ``" rate limit exceeded "``."""
    return " " + _NON_WORD.sub(" ", text.lower()).strip() + " "


def lookup_key(name: str) -> str:
    """Exact-lookup key of an exception name or error code: lower case, letters, digits and '-' only."""
    return "".join(ch for ch in name.lower() if ch.isalnum() or ch == "-")


@dataclass(frozen=True, slots=True)
class LibraryEntry:
    """One phrase, exception name or error code of a group."""

    group: str
    pattern: str  # as written in the YAML
    kind: str  # "phrase", "exception", "code", "near" (proximity phrase)
    strong: bool = False
    weak: bool = False
    reason: str | None = None  # the named reason of errors.yaml this phrase stands for


@dataclass(frozen=True, slots=True)
class Proximity:
    """Subject words a proximity phrase must follow, and the business nouns that hide a subject."""

    subjects: frozenset[str]
    gap: int  # whitespace-separated words allowed between subject and phrase
    compounds: tuple[tuple[str, ...], ...] = ()  # "payment method": no subject
    reason: str | None = None


@dataclass
class ErrorLibrary:
    groups: dict[str, dict[str, Any]]
    exact: dict[str, LibraryEntry]  # exception names and error codes
    exception_statuses: dict[str, int]
    ambiguous: dict[str, tuple[str, ...]]  # exception key → groups, default first
    ignored: frozenset[str]  # exception keys that are no failure (cancellation)
    proximity: dict[str, Proximity]
    field_name_after: dict[str, tuple[frozenset[str], str | None]] = field(default_factory=dict)
    empty_starts: tuple[str, ...] = ()
    empty_contains: tuple[str, ...] = ()
    empty_examples: dict[str, Any] = field(default_factory=dict)
    automaton: Any = field(repr=False, default=None)

    def matches(self, normalised_text: str) -> Iterator[tuple[int, LibraryEntry]]:
        """(start offset, entry) of every phrase found, in one pass."""
        if self.automaton is None:
            return
        for end, (length, entries) in self.automaton.iter(normalised_text):
            start = end - length + 1
            for entry in entries:
                yield start, entry


def strings(value: Any, where: str) -> tuple[str, ...]:
    """A list of errors.yaml: strings, or numbers read as their text."""
    return word_lists.strings(value, f"errors.yaml: {where}", numbers=True)


def _camel_compound(name: str) -> bool:
    """``ReadTimeout``, ``JSONDecodeError``: specific enough to look for in free text."""
    return len(name) >= 8 and sum(1 for ch in name if ch.isupper()) >= 2 and name.isalnum()


class _LibraryBuilder:
    """Collects the groups' entries, refusing a name or phrase claimed by two groups."""

    def __init__(self) -> None:
        self.exact: dict[str, LibraryEntry] = {}
        self.text: dict[str, list[LibraryEntry]] = {}
        self.proximity: dict[str, Proximity] = {}
        self.field_name_after: dict[str, tuple[frozenset[str], str | None]] = {}

    def add_exact(self, key_source: str, entry: LibraryEntry) -> None:
        key = lookup_key(key_source)
        if not key:
            raise ValueError(f"errors.yaml: empty exception name or code in {entry.group}")
        previous = self.exact.get(key)
        if previous is not None and previous.group != entry.group:
            raise ValueError(f"errors.yaml: {key_source!r} is in both {previous.group} and {entry.group}")
        self.exact.setdefault(key, entry)

    def add_text(self, phrase: str, entry: LibraryEntry) -> None:
        key = normalise(phrase)
        if not key.strip():
            raise ValueError(f"errors.yaml: empty phrase in {entry.group}")
        entries = self.text.setdefault(key, [])
        for other in entries:
            if other.group != entry.group and "near" not in (other.kind, entry.kind):
                raise ValueError(f"errors.yaml: phrase {phrase!r} is in both {other.group} and {entry.group}")
        if all((other.group, other.kind) != (entry.group, entry.kind) for other in entries):
            entries.append(entry)

    def add_group(self, group: str, spec: Any) -> None:
        if not isinstance(spec, Mapping):
            raise ValueError(f"errors.yaml: group {group} must be a mapping")
        self._add_phrases(group, spec)
        self._add_exact_names(group, spec)
        self._add_proximity(group, spec.get("proximity"))
        before_field = spec.get("field_name_after")
        if before_field is not None:
            words = frozenset(
                w.lower() for w in strings(before_field.get("words"), f"{group}.field_name_after")
            )
            reason = before_field.get("reason")
            self.field_name_after[group] = (words, str(reason) if reason else None)

    def _add_phrases(self, group: str, spec: Mapping[str, Any]) -> None:
        reason_of = _reason_phrases(group, spec)
        listed: set[str] = set()
        for strong, list_name in ((False, "phrases"), (True, "strong_phrases")):
            for phrase in strings(spec.get(list_name), f"{group}.{list_name}"):
                reason = reason_of.get(normalise(phrase), (phrase, None))[1]
                self.add_text(phrase, LibraryEntry(group, phrase, "phrase", strong=strong, reason=reason))
                listed.add(normalise(phrase))
        for key, (phrase, reason) in reason_of.items():  # a reason's phrases are ordinary phrases
            if key not in listed:
                self.add_text(phrase, LibraryEntry(group, phrase, "phrase", reason=reason))

    def _add_exact_names(self, group: str, spec: Mapping[str, Any]) -> None:
        for weak, list_name in ((False, "exception_types"), (True, "weak_exception_types")):
            for name in strings(spec.get(list_name), f"{group}.{list_name}"):
                entry = LibraryEntry(group, name, "exception", weak=weak)
                self.add_exact(name, entry)
                if _camel_compound(name):
                    self.add_text(name, entry)
        for code in strings(spec.get("error_codes"), f"{group}.error_codes"):
            self.add_exact(code, LibraryEntry(group, code, "code"))

    def _add_proximity(self, group: str, near: Any) -> None:
        if near is None:
            return
        subjects = frozenset(normalise(s).strip() for s in strings(near.get("subjects"), group))
        compounds = tuple(
            tuple(normalise(c).split()) for c in strings(near.get("compounds"), f"{group}.compounds")
        )
        reason = near.get("reason")
        self.proximity[group] = Proximity(
            subjects, int(near.get("gap", 1)), compounds, str(reason) if reason else None
        )
        for phrase in strings(near.get("phrases"), f"{group}.proximity.phrases"):
            self.add_text(phrase, LibraryEntry(group, phrase, "near", reason=self.proximity[group].reason))

    def automaton(self) -> Any:
        automaton = ahocorasick.Automaton()
        for key, entries in self.text.items():
            automaton.add_word(key, (len(key), tuple(entries)))
        automaton.make_automaton()
        return automaton


def _read_groups(data: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(data, Mapping) or not isinstance(data.get("groups"), Mapping):
        raise ValueError("errors.yaml: a mapping with 'groups' expected")
    groups: dict[str, dict[str, Any]] = dict(data["groups"])
    unknown = set(groups) - set(LEAF_OF_GROUP)
    missing = set(LEAF_OF_GROUP) - set(groups)
    if unknown or missing:
        raise ValueError(f"errors.yaml: unknown groups {sorted(unknown)}, missing {sorted(missing)}")
    return groups


def _ambiguous_exceptions(data: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    ambiguous: dict[str, tuple[str, ...]] = {}
    for name, alternatives in (data.get("ambiguous_exception_types") or {}).items():
        options = strings(alternatives, f"ambiguous_exception_types.{name}")
        if not options or set(options) - set(LEAF_OF_GROUP):
            raise ValueError(f"errors.yaml: bad alternatives for {name}")
        ambiguous[lookup_key(name)] = options
    return ambiguous


def load_library(path: Path | str = PHRASES_FILE) -> ErrorLibrary:
    data = yaml.load(
        Path(path).read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )
    groups = _read_groups(data)
    builder = _LibraryBuilder()
    for group, spec in groups.items():
        builder.add_group(group, spec)

    exception_statuses = {
        lookup_key(name): int(status) for name, status in (data.get("exception_statuses") or {}).items()
    }
    ambiguous = _ambiguous_exceptions(data)
    ignored = frozenset(lookup_key(name) for name in strings(data.get("ignored_exception_types"), "ignored"))

    empty = data.get("empty_results") or {}
    empty_starts = tuple(normalise(p) for p in strings(empty.get("starts_with"), "empty_results.starts_with"))
    empty_contains = tuple(normalise(p) for p in strings(empty.get("contains"), "empty_results.contains"))
    return ErrorLibrary(
        groups,
        builder.exact,
        exception_statuses,
        ambiguous,
        ignored,
        builder.proximity,
        builder.field_name_after,
        empty_starts,
        empty_contains,
        dict(empty),
        builder.automaton(),
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
        for phrase in strings(reason_spec.get("phrases"), f"{group}.reasons.{reason}.phrases"):
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
