"""The evidence rules of failure classification, in the order they are tried (:data:`RULES`).

Each rule reads the :class:`~otelsignals.signals.errors.evidence.Evidence` of one failure and either
decides its group (a :class:`Verdict`) or passes. The first rule that decides wins, and its name
goes into the signal instance's metadata as ``rule``. A rule may rely on the earlier rules having
passed: the order is the precedence.

1. ``http_status``, ``body_status``, ``exception_status``, ``text_status``: an HTTP status ≥ 400,
   read from the first source that has one — the span's ``http.response.status_code``, a status in
   the JSON error body (``{"error": {"code": 403}}``), the status an SDK exception class stands for
   (``openai.RateLimitError`` → 429), or one written in the error text ("Error code: 429 - …").
   A span status below 400 hides the later sources (the request itself went through), and then no
   status rule fires. All four read a status the same way (:func:`_decide_by_status`).
2. ``ambiguous_exception``: an ``error.type`` that means different things (``ValidationError``,
   ``JSONDecodeError``); the text picks among its alternatives, else the first.
3. ``exception_type``: an ``error.type`` (or a traceback's exception) the library names, not a
   weak builtin.
4. ``error_code``: a code of the error body the library names (``RESOURCE_EXHAUSTED``,
   ``channel_not_found``, ``-32601``), the most specific group first.
5. ``text_phrase``: the best library phrase in the message text (strong before ordinary, then the
   most specific group, then the longest phrase).
6. ``weak_exception_type``: a builtin ``error.type`` that says little (``KeyError``, ``ValueError``)
   — a text phrase above beats it.
7. ``exception_in_text``: only a builtin exception name in the text, or a bare KeyError repr
   (``Error: 'city'``).
8. ``unclassified``: nothing explains the failure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from otelsignals.signals.errors.evidence import (
    STATUS_FROM_BODY,
    STATUS_FROM_EXCEPTION,
    STATUS_FROM_SPAN,
    STATUS_FROM_TEXT,
    Evidence,
    ExactHit,
    TextHit,
    best_hit,
)
from otelsignals.signals.errors.library import RANK

# Confidence by what decided (the package docstring).
CONF_STATUS = 0.95
CONF_EXACT = 0.95
CONF_STATUS_REFINED_BY_TEXT = 0.9
CONF_TEXT_STATUS = 0.9
CONF_STATUS_WRONG_REQUEST_DEFAULT = 0.9
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
# The default leaf of a failed tool call nothing explains (package docstring: why invalid_args).
DEFAULT_TOOL_GROUP = "invalid_args"

# Statuses that decide on their own, whatever the text says (401/403 are read below).
_GROUP_OF_STATUS = {
    429: "rate_limit",
    402: "rate_limit",
    408: "timeout",
    504: "timeout",
    409: "state_error",
    412: "state_error",
    423: "state_error",
    428: "state_error",
}
_NOT_FOUND_STATUSES = frozenset({404, 410})
_WRONG_REQUEST_STATUSES = frozenset({400, 405, 413, 414, 415, 422})
_RATE_LIMIT_ONLY = frozenset({"rate_limit"})
# A generic 4xx may be refined into these; a 404/410 only into tool_not_found or bad_query.
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


@dataclass(frozen=True, slots=True)
class Verdict:
    """A rule's decision: the group, how sure, the evidence as a pattern, and the reason to give
    when no named reason phrase of the group is in the text."""

    group: str
    confidence: float
    pattern: str
    fallback_reason: str
    hit: TextHit | None = None  # the phrase that decided, whose text the snippet quotes
    status: int | None = None  # the HTTP status used


@dataclass(frozen=True, slots=True)
class Rule:
    name: str  # what the signal instance's metadata calls it ("rule")
    decide: Callable[[Evidence], Verdict | None]


def _strong(hits: tuple[ExactHit, ...]) -> list[ExactHit]:
    return [hit for hit in hits if not hit.entry.weak]


def _named_by_codes_or_text(evidence: Evidence, allowed: frozenset[str]) -> Verdict | None:
    """The agent-side group a generic 4xx's exception name, codes or text name (at the confidence
    such a refinement has; the caller caps it by the status's)."""
    named = _strong(evidence.exact_hits + evidence.code_hits)
    candidates = [hit for hit in named if hit.entry.group in allowed]
    if candidates:
        chosen = min(candidates, key=lambda hit: RANK[hit.entry.group])
        if chosen in evidence.exact_hits:
            return Verdict(chosen.entry.group, CONF_EXACT, f"exception:{chosen.name}", REASON_EXCEPTION)
        return Verdict(chosen.entry.group, CONF_EXACT, f"code:{chosen.name}", REASON_ERROR_CODE)
    hit = best_hit(evidence.hits, allowed)
    if hit is not None:
        return Verdict(hit.group, CONF_STATUS_REFINED_BY_TEXT, f"phrase:{hit.pattern}", hit.group, hit)
    return None


def _definitive_group(status: int, llm: bool) -> str | None:
    """The group a status decides on its own (401/403 aside)."""
    group = _GROUP_OF_STATUS.get(status)
    if group is not None:
        return group
    if status >= 500:
        return "api_error"
    if status == 413 and llm:
        return "context_overflow"
    return None


def _generic_4xx_default(status: int, base: float) -> tuple[str, float]:
    """A 4xx nothing refines: 404/410 a missing record, 400/405/413/414/415/422 a wrong request,
    any other 4xx a wrong request at low confidence."""
    if status in _NOT_FOUND_STATUSES:
        return "bad_query", CONF_STATUS_404_DEFAULT
    if status in _WRONG_REQUEST_STATUSES:
        return "invalid_args", min(CONF_STATUS_WRONG_REQUEST_DEFAULT, base)
    return "invalid_args", CONF_OTHER_4XX_DEFAULT


def _decide_by_status(evidence: Evidence, status: int) -> Verdict:
    base = CONF_TEXT_STATUS if evidence.status_from == STATUS_FROM_TEXT else CONF_STATUS
    tag = f"http:{status}"
    if evidence.status_from != STATUS_FROM_SPAN:
        tag += f"({evidence.status_label})"  # "http:429(body)", "http:429(exception:openai.RateLimitError)"
    if status in (401, 403):
        # GitHub's secondary rate limit and Google's rateLimitExceeded come back as 403.
        rate = _named_by_codes_or_text(evidence, _RATE_LIMIT_ONLY)
        if rate is not None:
            return Verdict(rate.group, base, f"{tag}+{rate.pattern}", REASON_HTTP_STATUS, rate.hit, status)
        return Verdict("auth_misuse", base, tag, REASON_HTTP_STATUS, status=status)
    definitive = _definitive_group(status, evidence.llm)
    if definitive is not None:
        return Verdict(definitive, base, tag, REASON_HTTP_STATUS, status=status)
    # A generic 4xx says only "the request was wrong": the codes or text may say more.
    allowed = _REFINABLE_404 if status in _NOT_FOUND_STATUSES else _REFINABLE_4XX
    refined = _named_by_codes_or_text(evidence, allowed)
    if refined is not None:
        confidence = min(refined.confidence, base)
        pattern = f"{tag}+{refined.pattern}"
        return Verdict(refined.group, confidence, pattern, refined.fallback_reason, refined.hit, status)
    group, confidence = _generic_4xx_default(status, base)
    return Verdict(group, confidence, tag, REASON_HTTP_STATUS, status=status)


def _status_rule(status_from: str) -> Callable[[Evidence], Verdict | None]:
    """The rule of an error status read from ``status_from``."""

    def decide(evidence: Evidence) -> Verdict | None:
        status = evidence.status
        if evidence.status_from != status_from or status is None or status < 400:
            return None
        return _decide_by_status(evidence, status)

    return decide


def _ambiguous_exception(evidence: Evidence) -> Verdict | None:
    """A pydantic ``ValidationError`` for ``WeatherResponse`` is a malformed response; for the
    tool's arguments it is invalid_args: the text takes a side, else the first alternative."""
    if evidence.ambiguous is None:
        return None
    hit = best_hit(evidence.hits, frozenset(evidence.ambiguous))
    group = hit.group if hit is not None else evidence.ambiguous[0]
    pattern = f"exception:{evidence.ambiguous_name}" + (f"+phrase:{hit.pattern}" if hit else "")
    return Verdict(group, CONF_EXACT, pattern, REASON_EXCEPTION, hit)


def _exception_type(evidence: Evidence) -> Verdict | None:
    strong = _strong(evidence.exact_hits)
    if not strong:
        return None
    entry, name = strong[0].entry, strong[0].name
    return Verdict(entry.group, CONF_EXACT, f"exception:{name}", REASON_EXCEPTION)


def _error_code(evidence: Evidence) -> Verdict | None:
    strong = _strong(evidence.code_hits)
    if not strong:
        return None
    chosen = min(strong, key=lambda hit: RANK[hit.entry.group])
    return Verdict(chosen.entry.group, CONF_EXACT, f"code:{chosen.name}", REASON_ERROR_CODE)


def _text_phrase(evidence: Evidence) -> Verdict | None:
    hit = best_hit(hit for hit in evidence.hits if not hit.weak)
    if hit is None:
        return None
    return Verdict(hit.group, CONF_TEXT, f"phrase:{hit.pattern}", hit.group, hit)


def _weak_exception_type(evidence: Evidence) -> Verdict | None:
    weak = [hit for hit in evidence.exact_hits if hit.entry.weak]
    if not weak:
        return None
    entry, name = weak[0].entry, weak[0].name
    return Verdict(entry.group, CONF_WEAK_EXCEPTION, f"exception:{name}", REASON_EXCEPTION)


def _exception_in_text(evidence: Evidence) -> Verdict | None:
    """ "Error: KeyError('city')", "Error: 'city'": a builtin's name or a bare KeyError repr only."""
    hit = best_hit(hit for hit in evidence.hits if hit.weak)
    if hit is None:
        return None
    return Verdict(hit.group, CONF_WEAK_EXCEPTION, f"exception:{hit.pattern}", REASON_EXCEPTION, hit)


def _unclassified(evidence: Evidence) -> Verdict:
    """A failed tool call nothing explains refused the call as it was made: with no evidence about
    the outside world its inputs are the first suspect (invalid_args); a model call has no
    execution layer, so an unexplained failed one is an api_error."""
    if evidence.llm:
        return Verdict("api_error", CONF_UNEXPLAINED_LLM, "failed_call", REASON_UNCLASSIFIED)
    return Verdict(DEFAULT_TOOL_GROUP, CONF_UNCLASSIFIED_TOOL, REASON_UNCLASSIFIED, REASON_UNCLASSIFIED)


RULES: tuple[Rule, ...] = (
    Rule("http_status", _status_rule(STATUS_FROM_SPAN)),
    Rule("body_status", _status_rule(STATUS_FROM_BODY)),
    Rule("exception_status", _status_rule(STATUS_FROM_EXCEPTION)),
    Rule("text_status", _status_rule(STATUS_FROM_TEXT)),
    Rule("ambiguous_exception", _ambiguous_exception),
    Rule("exception_type", _exception_type),
    Rule("error_code", _error_code),
    Rule("text_phrase", _text_phrase),
    Rule("weak_exception_type", _weak_exception_type),
    Rule("exception_in_text", _exception_in_text),
    Rule("unclassified", _unclassified),
)
