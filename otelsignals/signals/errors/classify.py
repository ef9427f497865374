"""Classify a failed tool call or model call: gather its evidence, run the rules in order."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from cachetools import LRUCache

from otelsignals.model import ToolResult
from otelsignals.signals.errors.evidence import Evidence, TextHit, best_hit, gather
from otelsignals.signals.errors.library import LEAF_OF_GROUP, library
from otelsignals.signals.errors.payload import content_is_error, fingerprint
from otelsignals.signals.errors.rules import RULES, Rule, Verdict
from otelsignals.signals.taxonomy import API_ERROR

SNIPPET_CHARS = 200
# Every detector of a layer asks about the same failure; this many classifications are remembered.
CLASSIFIED_ENTRIES = 2048


@dataclass(frozen=True, slots=True)
class Classification:
    """What a failure is: the dotted leaf type, how sure, the evidence (``pattern``) and the
    evidence rule that decided (``rule``, a name of :data:`~otelsignals.signals.errors.rules.RULES`)."""

    leaf_type: str
    confidence: float
    pattern: str
    rule: str
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


_ClassifiedKey = tuple[
    int | None, str | None, tuple[int, int] | None, tuple[int, int] | None, str, str | None
]
# Keyed by fingerprints, not by the (possibly 100 KB) texts; the lock because the analysis thread
# and to_thread callers may share it.
_CLASSIFIED: LRUCache[_ClassifiedKey, Classification | None] = LRUCache(maxsize=CLASSIFIED_ENTRIES)
_CLASSIFIED_LOCK = threading.Lock()
_MISSING = object()


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


def _reason(hits: tuple[TextHit, ...], group: str, deciding: TextHit | None, fallback: str) -> str:
    """The named reason of the deciding phrase; else of the best other phrase of ``group`` that has
    one (a 409 saying "insufficient funds" is state_error for insufficient_funds); else ``fallback``."""
    if deciding is not None and deciding.group == group and deciding.reason:
        return deciding.reason
    best = best_hit(hit for hit in hits if hit.group == group and hit.reason)
    return best.reason if best is not None and best.reason else fallback


def _conclude(evidence: Evidence, verdict: Verdict, rule: Rule) -> Classification:
    leaf = LEAF_OF_GROUP[verdict.group]
    if evidence.llm and leaf.startswith("execution."):
        leaf = API_ERROR  # a model call has no execution layer
    hit = verdict.hit
    text = hit.source if hit is not None else evidence.text
    return Classification(
        leaf_type=leaf,
        confidence=round(verdict.confidence, 3),
        pattern=verdict.pattern,
        rule=rule.name,
        snippet=_snippet(text, hit.pattern if hit is not None else None) if text else None,
        status_code=verdict.status,
        error_type=evidence.error_type,
        reason=_reason(evidence.hits, verdict.group, hit, verdict.fallback_reason),
    )


def _classify(
    status_code: int | None,
    error_type: str | None,
    error_message: str | None,
    content: str | None,
    source: str,
    tool_name: str | None,
) -> Classification | None:
    evidence = gather(library(), status_code, error_type, error_message, content, source, tool_name)
    if evidence.cancelled:
        return None  # cancelled, interrupted: not a failure of anyone
    for rule in RULES:
        verdict = rule.decide(evidence)
        if verdict is not None:
            return _conclude(evidence, verdict, rule)
    raise AssertionError("the last rule, unclassified, always decides")


def classify_failure(
    status_code: object = None,  # int | None; anything else is taken for None (span attributes)
    error_type: object = None,  # str | None, likewise
    error_message: object = None,
    content: object = None,
    *,
    source: str = "tool",
    tool_name: object = None,
) -> Classification | None:
    """The leaf type of a failure (see the package docstring for the rules and the default).

    None only for a cancelled or interrupted call (or if classifying itself failed). Call it only
    for something that failed; for a tool result use :func:`tool_failure`, which checks that first.
    Never raises on odd input.
    """
    code = status_code if isinstance(status_code, int) and not isinstance(status_code, bool) else None
    kind = error_type if isinstance(error_type, str) else None
    message = error_message if isinstance(error_message, str) else None
    text = content if isinstance(content, str) else None
    tool = tool_name if isinstance(tool_name, str) else None
    key = (code, kind, fingerprint(message), fingerprint(text), source, tool)
    with _CLASSIFIED_LOCK:
        found = _CLASSIFIED.get(key, _MISSING)
    if not isinstance(found, Classification | None):
        try:
            found = _classify(code, kind, message, text, source, tool)
        except Exception:  # a detector must never take the pipeline down
            found = None
        with _CLASSIFIED_LOCK:
            _CLASSIFIED[key] = found
    return found


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
