"""The evidence a failed call gives, gathered once before any rule looks at it.

The texts examined (the exception message, an error body's messages or the raw content, of a
Python traceback only its last line), the phrase hits found in them, the exact library entries
named by ``error.type`` and by the body's codes, and the HTTP status together with where it was
read: the span, the error body, the SDK exception class, or the error text — the first of these
that has one.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from otelsignals.signals.errors.library import (
    RANK,
    ErrorLibrary,
    LibraryEntry,
    Proximity,
    lookup_key,
    normalise,
)
from otelsignals.signals.errors.payload import ErrorPayload, error_payload_of

_HEAD_CHARS = 6000  # error text examined: the head (the message) and the tail (a traceback's last line)
_TAIL_CHARS = 2000
_TRACEBACK_TAIL_CHARS = 4000
_MAX_TOOL_NAME_WORDS = 16
_KEY_ERROR_MAX_CHARS = 80

# A Python KeyError printed bare ("Error: 'method_type'"): the tool looked up a key the call lacked.
KEY_ERROR_GROUP = "invalid_args"
KEY_ERROR_PATTERN = "KeyError"
KEY_ERROR_REASON = "missing_field"

# Where the status the rules see was read, in the order looked at.
STATUS_FROM_SPAN = "http"
STATUS_FROM_BODY = "body"
STATUS_FROM_EXCEPTION = "exception"
STATUS_FROM_TEXT = "text"


@dataclass(slots=True)
class TextHit:
    group: str
    pattern: str
    strong: bool
    source: str  # the original text it was found in
    weak: bool = False  # a builtin exception name seen in the text: any other phrase beats it
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ExactHit:
    """A library exception name or error code, and the name as the span or body spelt it."""

    entry: LibraryEntry
    name: str


@dataclass(frozen=True, slots=True)
class Evidence:
    """Everything the rules read about one failure."""

    llm: bool  # a model call: no execution layer
    error_type: str | None  # error.type, else the exception a traceback ends with
    sources: tuple[str, ...]  # the texts examined, the exception message first
    hits: tuple[TextHit, ...]
    exact_hits: tuple[ExactHit, ...]  # from error.type
    code_hits: tuple[ExactHit, ...]  # from the error body's codes
    ambiguous: tuple[str, ...] | None  # the groups an ambiguous error.type may mean, default first
    ambiguous_name: str | None
    cancelled: bool  # error.type is a cancellation or interruption: nobody's failure
    status: int | None
    status_from: str  # one of the STATUS_FROM_* names; meaningless without a status
    status_label: str  # how the pattern names where a status not from the span came from

    @property
    def text(self) -> str:
        """The text a classification without a deciding phrase quotes."""
        return self.sources[0] if self.sources else (self.error_type or "")


def bounded(text: str) -> str:
    if len(text) <= _HEAD_CHARS + _TAIL_CHARS:
        return text
    return text[:_HEAD_CHARS] + "\n…\n" + text[-_TAIL_CHARS:]


def status_in_text(tokens: list[str]) -> int | None:
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
    for number, chunk in enumerate(bounded(source).split()):
        tokens.extend((word, number) for word in normalise(chunk).split())
    return tokens


def _in_compound(words: list[str], j: int, compounds: tuple[tuple[str, ...], ...]) -> bool:
    """Whether ``words[j]`` ends one of the business nouns ``compounds`` ("payment method")."""
    for compound in compounds:
        size = len(compound)
        if j + 1 >= size and tuple(words[j + 1 - size : j + 1]) == compound:
            return True
    return False


def _subject_before(tokens: list[tuple[str, int]], words: list[str], i: int, near: Proximity) -> bool:
    """A subject word at most ``gap`` whitespace-separated words before ``tokens[i]``."""
    first_chunk = tokens[i][1]
    j = i - 1
    while j >= 0 and first_chunk - tokens[j][1] <= near.gap + 1:
        if tokens[j][0] in near.subjects and not _in_compound(words, j, near.compounds):
            return True
        j -= 1
    return False


def _tool_name_before(tokens: list[tuple[str, int]], i: int, tool: str) -> bool:
    """The whitespace-separated chunk right before ``tokens[i]`` is the called tool's name."""
    first_chunk = tokens[i][1]
    j = i - 1
    name: list[str] = []
    while j >= 0 and tokens[j][1] == first_chunk - 1 and len(name) < _MAX_TOOL_NAME_WORDS:
        name.append(tokens[j][0])
        j -= 1
    return " ".join(reversed(name)) == tool


def _near_ok(
    tokens: list[tuple[str, int]],
    phrase: tuple[str, ...],
    near: Proximity,
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
        if _subject_before(tokens, words, i, near):
            return True
        if tool and _tool_name_before(tokens, i, tool):
            return True
    return False


_RESPONSE_MODEL_SUFFIXES = ("response", "output", "result", "reply")
_VALIDATION_MARKERS = (" validation error for ", " validation errors for ")


def _phrase_hits(lib: ErrorLibrary, source: str, text: str, tool_name: str | None) -> list[TextHit]:
    """The library phrases in one source; a proximity phrase only where it follows its subject."""
    hits: list[TextHit] = []
    chunk_tokens: list[tuple[str, int]] | None = None
    near_checked: dict[tuple[str, str], bool] = {}
    for _start, entry in lib.matches(text):
        if entry.kind == "near":
            key = (entry.group, entry.pattern)
            if key in near_checked:
                continue  # one verdict (and one hit) per proximity phrase and source
            if chunk_tokens is None:
                chunk_tokens = _chunk_tokens(source)
            near = lib.proximity.get(entry.group, Proximity(frozenset(), 0))
            phrase = tuple(normalise(entry.pattern).split())
            near_checked[key] = _near_ok(chunk_tokens, phrase, near, tool_name)
            if not near_checked[key]:
                continue
        hits.append(TextHit(entry.group, entry.pattern, entry.strong, source, entry.weak, entry.reason))
    return hits


def _response_validation_hits(source: str, text: str) -> list[TextHit]:
    """pydantic: "1 validation error for WeatherResponse" is about the response, not the arguments."""
    hits: list[TextHit] = []
    for marker in _VALIDATION_MARKERS:
        found = text.find(marker)
        if found >= 0:
            model = text[found + len(marker) :].split(" ", 1)[0]
            if model.endswith(_RESPONSE_MODEL_SUFFIXES):
                hits.append(TextHit("malformed_response", "validation error for *Response", True, source))
    return hits


def text_hits(
    lib: ErrorLibrary, sources: Iterable[str], tool_name: str | None
) -> tuple[list[TextHit], list[str]]:
    """Every hit in ``sources``, and all their normalised words (where a status may be written)."""
    hits: list[TextHit] = []
    all_tokens: list[str] = []
    for source in sources:
        text = normalise(bounded(source))
        hits.extend(_phrase_hits(lib, source, text, tool_name))
        hits.extend(_field_name_hits(lib, source))
        if _bare_key_error(source):
            hits.append(
                TextHit(KEY_ERROR_GROUP, KEY_ERROR_PATTERN, False, source, weak=True, reason=KEY_ERROR_REASON)
            )
        hits.extend(_response_validation_hits(source, text))
        all_tokens.extend(text.split())
    return hits, all_tokens


def best_hit(hits: Iterable[TextHit], allowed: frozenset[str] | None = None) -> TextHit | None:
    """Strong before ordinary before weak, then the most specific group, then the longest phrase
    ("nonetype object has no attribute" over "object has no attribute")."""
    candidates = [hit for hit in hits if allowed is None or hit.group in allowed]
    if not candidates:
        return None
    return min(candidates, key=lambda hit: (not hit.strong, hit.weak, RANK[hit.group], -len(hit.pattern)))


def _field_name(word: str) -> bool:
    """``delivery_info``, ``customerId``: an identifier a program would use for a field."""
    if not 3 <= len(word) <= 64 or not word.isascii() or not word[0].isalpha():
        return False
    if not all(ch.isalnum() or ch == "_" for ch in word):
        return False
    camel = any(a.islower() and b.isupper() for a, b in itertools.pairwise(word))
    return "_" in word.strip("_") or camel


_CHUNK_PUNCTUATION = ".,;:!?()[]{}'\"`"


def _field_name_hits(lib: ErrorLibrary, source: str) -> list[TextHit]:
    """One hit per group whose ``field_name_after`` words stand right before a field name."""
    if not lib.field_name_after:
        return []
    chunks = [chunk.strip(_CHUNK_PUNCTUATION) for chunk in bounded(source).split()]
    hits: list[TextHit] = []
    for group, (words, reason) in lib.field_name_after.items():
        for word, following in itertools.pairwise(chunks):
            if word.lower() in words and _field_name(following):
                hits.append(TextHit(group, f"{word.lower()} <field>", False, source, reason=reason))
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
    lines = [line.strip() for line in content[-_TRACEBACK_TAIL_CHARS:].splitlines() if line.strip()]
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


def _sources(
    error_message: str | None, content: str | None, payload: ErrorPayload | None, error_type: str | None
) -> tuple[list[str], str | None]:
    """The texts to examine — the exception message, then the error body's messages (or its raw
    text) — and the error type, which a traceback supplies when the span gave none."""
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
    return sources, error_type


@dataclass
class _ExceptionFacts:
    """What the library knows about the names of an ``error.type``."""

    cancelled: bool = False
    implied_status: int | None = None
    ambiguous: tuple[str, ...] | None = None
    ambiguous_name: str | None = None
    exact_hits: tuple[ExactHit, ...] = ()


def _exception_facts(lib: ErrorLibrary, error_type: str | None) -> _ExceptionFacts:
    facts = _ExceptionFacts()
    exact_hits: list[ExactHit] = []
    for name in _exception_names(error_type):
        key = lookup_key(name)
        facts.cancelled = facts.cancelled or key in lib.ignored
        if facts.implied_status is None and key in lib.exception_statuses:
            facts.implied_status = lib.exception_statuses[key]
        if facts.ambiguous is None and key in lib.ambiguous:
            facts.ambiguous, facts.ambiguous_name = lib.ambiguous[key], name
        entry = lib.exact.get(key)
        if entry is not None:
            exact_hits.append(ExactHit(entry, name))
    facts.exact_hits = tuple(exact_hits)
    return facts


def _code_hits(lib: ErrorLibrary, payload: ErrorPayload | None) -> tuple[ExactHit, ...]:
    if payload is None:
        return ()
    hits: list[ExactHit] = []
    for code in payload.codes:
        entry = lib.exact.get(lookup_key(code))
        if entry is not None:
            hits.append(ExactHit(entry, code))
    return tuple(hits)


def _status(
    span_status: int | None,
    payload: ErrorPayload | None,
    facts: _ExceptionFacts,
    error_type: str | None,
    tokens: list[str],
) -> tuple[int | None, str, str]:
    """(status, where from, label): the first source that has a status. A span status of 100–399
    counts too, and then hides the others (the span said the request itself went through)."""
    if span_status is not None and 100 <= span_status <= 599:
        return span_status, STATUS_FROM_SPAN, STATUS_FROM_SPAN
    if payload is not None and payload.status_code is not None:
        return payload.status_code, STATUS_FROM_BODY, STATUS_FROM_BODY
    if facts.implied_status is not None:
        label = f"{STATUS_FROM_EXCEPTION}:{facts.ambiguous_name or error_type}"
        return facts.implied_status, STATUS_FROM_EXCEPTION, label
    return status_in_text(tokens), STATUS_FROM_TEXT, STATUS_FROM_TEXT


def gather(
    lib: ErrorLibrary,
    status_code: int | None,
    error_type: str | None,
    error_message: str | None,
    content: str | None,
    source: str,
    tool_name: str | None,
) -> Evidence:
    """The evidence of one failure, read from the span's fields and the result's content."""
    payload = error_payload_of(content) if content else None
    sources, error_type = _sources(error_message, content, payload, error_type)
    hits, tokens = text_hits(lib, sources, tool_name)
    facts = _exception_facts(lib, error_type)
    status, status_from, status_label = _status(status_code, payload, facts, error_type, tokens)
    return Evidence(
        llm=source == "llm_call",
        error_type=error_type,
        sources=tuple(sources),
        hits=tuple(hits),
        exact_hits=facts.exact_hits,
        code_hits=_code_hits(lib, payload),
        ambiguous=facts.ambiguous,
        ambiguous_name=facts.ambiguous_name,
        cancelled=facts.cancelled,
        status=status,
        status_from=status_from,
        status_label=status_label,
    )
