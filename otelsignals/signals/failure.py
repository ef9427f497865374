"""Execution failures (SPEC §3, ``execution.failure.*``): the agent's own tool failures. Model-free.

**Failures** (``execution.failure.*``) come from TOOL messages that failed — the span said so
(``ToolResult.is_error``) or the content is unmistakably an error payload (see
:func:`otelsignals.signals.errors.tool_failure`); :func:`~otelsignals.signals.errors.classify_failure`
decides the leaf, and a leaf of the environment layer (429, 5xx, timeouts…) is left to
:mod:`otelsignals.signals.exhaustion`. No failed result goes silent: one nothing explains gets the
documented default, ``invalid_args`` at 0.5 with ``reason: "unclassified"``; only a cancelled or
interrupted call fires nothing. Every execution failure's metadata has ``reason`` (why the call was
refused: ``insufficient_funds``, ``wrong_state``, ``not_found``, ``missing_field``…, else
``http_status`` / ``exception`` / ``error_code`` / the group's name; see
:mod:`otelsignals.signals.errors`) and ``rule``, the evidence rule that decided the leaf
(``errors.RULES``). A successful result is never read for error words.
``bad_query`` also fires, at confidence 0.6, on a *successful* result that found nothing
(:func:`~otelsignals.signals.errors.empty_result_of`: ``[]``, ``{}``, ``""``, ``null``,
``{"results": []}``, "No results found", "0 results"…) when the call was a query: its arguments
have a query-like key (a word of its name in :data:`QUERY_KEY_WORDS` or starting with
:data:`QUERY_KEY_PREFIXES`: ``query``, ``q``, ``filters``, ``searchTerm``, ``where``, ``sql``) with
a value, or the tool's name has a search word (:data:`SEARCH_NAME_WORDS`: ``search_orders``,
``findUser``) and it was called with arguments (the three lists are data, with example calls:
``rules.query_argument`` in ``phrases/failure.yaml``). ``list_todos()`` answering ``[]`` is no bad query,
and neither is a query made only of the user's own words (the user's constraints found nothing; the
agent did not narrow anything) or a look-up of another item's records by its identifier
(``find_claims(policy_id=…)`` answering ``{"claims": []}``: the policy has no claims).
An empty result of any other call is a bad query too when the agent itself judged it too narrow: in
the same turn its next call of the same tool loosens the request
(:func:`otelsignals.signals.loops.relaxed`: a bound moved outwards, a filter dropped, the text
reworded, no filter added; ``get_transactions(days=1)`` → ``[]`` → ``get_transactions(days=7)``;
metadata ``pattern: "adjusted_after_empty:<kind>"``). Another item (``order_id`` 1001 → 1002),
another day, a poll moved on or the same call again is no judgement on the query.

The helpers that find a tool result's call are shared with :mod:`otelsignals.signals.loops` and
:mod:`otelsignals.signals.exhaustion`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from otelsignals.model import Role, SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext, DetectorSpec, memory_key
from otelsignals.signals.errors import (
    Classification,
    content_is_error,
    result_failed,
    tool_failure,
    word_forms,
)
from otelsignals.signals.loops import relaxed
from otelsignals.signals.taxonomy import (
    AUTH_MISUSE,
    BAD_QUERY,
    INVALID_ARGS,
    STATE_ERROR,
    TOOL_NOT_FOUND,
)
from otelsignals.signals.tool_calls import (
    ARGS_CHARS,
    ARGS_KEPT,
    LOOKBACK,
    PROGRESS,
    argument_leaves,
    argument_words,
    as_arguments,
    call_of,
    canonical_arguments,
    content_of,
    empty_result_at,
    is_identifier,
    is_query_call,
    leaf_key_words,
    name_words,
    progress_done,
    progress_start,
    same_word,
    shown_arguments,
    tool_name_of,
)
from otelsignals.signals.word_lists import word_set

USER_MESSAGES_READ = 3  # recent user messages whose words an empty query may consist of

CONF_EMPTY_RESULT = 0.6

# Keys whose numbers name an item or a page, or size the answer, rather than narrow what is looked for.
UNNARROWING_KEY_WORDS = word_set("failure", "query_argument", "unnarrowing_key_words")
# A key whose last word is one of these identifies an item (policy_id, order_number, booking_ref).
IDENTIFYING_KEY_WORDS = word_set("failure", "records_of_an_item", "key_words")
# A key with one of these words pages or sizes the answer: it narrows nothing (page, limit, cursor).
PAGING_KEY_WORDS = word_set("failure", "records_of_an_item", "paging_words")


# ---------------------------------------------------------------------------------------------
# Shared helpers (also used by the environment layer)


def iter_tool_failures(ctx: DetectionContext, start: int) -> Iterator[tuple[int, str | None, Classification]]:
    """(local index, tool name, classification) of every failed TOOL message from ``start`` on.
    Classified once per call of the detectors, however many leaves ask."""
    key = ("tool_failures", start, len(ctx.messages))
    return iter(ctx.shared(key, lambda: list(_classify_tool_failures(ctx, start))))


def _classify_tool_failures(
    ctx: DetectionContext, start: int
) -> Iterator[tuple[int, str | None, Classification]]:
    for index in range(start, len(ctx.messages)):
        message = ctx.messages[index]
        if message.role is not Role.TOOL:
            continue
        result = message.tool_result
        content = content_of(message)
        if not content and not result_failed(result):
            continue
        name = tool_name_of(ctx, index)
        classification = tool_failure(result, content, name)
        if classification is not None:
            yield index, name, classification


def failure_instance(
    ctx: DetectionContext, index: int, tool: str | None, classification: Classification
) -> SignalInstance:
    """The instance of a failed tool result, with why it failed (``reason``: a named reason of
    errors.yaml such as ``insufficient_funds`` or ``not_found``, else what decided, see
    :class:`~otelsignals.signals.errors.Classification`; ``unclassified`` for the default leaf)."""
    metadata: dict[str, Any] = {
        "pattern": classification.pattern,
        "reason": classification.reason,
        "rule": classification.rule,
        "tool": tool,
        "status_code": classification.status_code,
        "error_type": classification.error_type,
        "source": "tool",
    }
    return SignalInstance(
        type=classification.leaf_type,
        message_index=ctx.absolute_index(index),
        confidence=classification.confidence,
        snippet=classification.snippet,
        metadata=metadata,
    )


def tool_failure_signals(ctx: DetectionContext, leaf: str) -> list[SignalInstance]:
    """The new failed tool results that classify to ``leaf``, once each."""
    key = memory_key(leaf, PROGRESS)
    try:
        start = progress_start(ctx, key)
        found = [
            failure_instance(ctx, index, tool, classification)
            for index, tool, classification in iter_tool_failures(ctx, start)
            if classification.leaf_type == leaf
        ]
        progress_done(ctx, key)
        return found
    except Exception:  # never take the pipeline down over one odd conversation
        return []


# ---------------------------------------------------------------------------------------------
# Failures


def detect_invalid_args(ctx: DetectionContext) -> list[SignalInstance]:
    """Wrong type, missing or unexpected field: 400/422, ValidationError, "missing required"…"""
    return tool_failure_signals(ctx, INVALID_ARGS)


def detect_tool_not_found(ctx: DetectionContext) -> list[SignalInstance]:
    """A call of a tool, function or endpoint that does not exist: "Unknown tool", -32601…"""
    return tool_failure_signals(ctx, TOOL_NOT_FOUND)


def detect_auth_misuse(ctx: DetectionContext) -> list[SignalInstance]:
    """Credentials not passed or not valid: a tool's 401/403, "invalid API key"…"""
    return tool_failure_signals(ctx, AUTH_MISUSE)


def detect_state_error(ctx: DetectionContext) -> list[SignalInstance]:
    """A tool called in the wrong state or order: 409/412/423, "already exists", "is closed"…"""
    return tool_failure_signals(ctx, STATE_ERROR)


def records_of_an_item(tool: str | None, arguments: Any) -> bool:
    """A look-up of another item's records by its identifier: every argument but the paging ones
    (:data:`PAGING_KEY_WORDS`) identifies an item — its key ends in an :data:`IDENTIFYING_KEY_WORDS`
    word (``policy_id``, ``account_number``; not ``number_of_people``) — and names an item the tool
    does not look for (``find_claims(policy_id=…)``; not ``find_order(order_id=…)``, ``find_policies
    (policy_id=…)`` or a bare ``id``). Finding none says the item has none: it narrows nothing."""
    if not tool or not isinstance(as_arguments(arguments), dict):
        return False
    sought = word_forms(name_words(tool))
    identified = 0
    for path in argument_leaves(as_arguments(arguments)):
        words = leaf_key_words(path)
        if set(words) & PAGING_KEY_WORDS:
            continue
        if len(words) < 2 or words[-1] not in IDENTIFYING_KEY_WORDS or sought & word_forms(words[:-1]):
            return False
        identified += 1
    return identified > 0


def _users_own_words(ctx: DetectionContext, index: int, arguments: Any) -> bool:
    """Whether every word of the call's text arguments was said by the user (in the last
    :data:`USER_MESSAGES_READ` user messages): the user's own constraints found nothing, the agent did
    not narrow the query. Ids and dates are left out; no words left → False. A number the user never
    said, under a key that is a constraint (``width_cm: 98``, ``max_price: 40``; not an id, a page or a
    result count: ``UNNARROWING_KEY_WORDS``), is the agent's own narrowing → False."""
    words: set[str] = set()
    numbers: set[float] = set()
    leaves = argument_leaves(as_arguments(arguments))
    for path, value in leaves.items():
        number = _number_value(value)
        if number is not None and not set(leaf_key_words(path)) & UNNARROWING_KEY_WORDS:
            numbers.add(number)
        values = value if isinstance(value, frozenset) else [value]
        for text in values:
            if not isinstance(text, str) or (" " not in text.strip() and is_identifier(text)):
                continue
            words.update(word for word in argument_words(text) if not is_identifier(word))
    if not words:
        return False
    texts = _recent_user_texts(ctx, index)
    said = {word for text in texts for word in argument_words(text)}
    if numbers and not numbers <= {value for text in texts for value in _written_numbers(text)}:
        return False
    return all(word in said or any(same_word(word, other) for other in said) for word in words)


def _recent_user_texts(ctx: DetectionContext, index: int) -> list[str]:
    """The last USER_MESSAGES_READ user messages before ``index`` (within LOOKBACK messages)."""
    texts: list[str] = []
    for j in range(index - 1, max(-1, index - 1 - LOOKBACK), -1):
        message = ctx.messages[j]
        if message.role is Role.USER and isinstance(message.content, str):
            texts.append(message.content)
            if len(texts) >= USER_MESSAGES_READ:
                break
    return texts


def _number_value(value: Any) -> float | None:
    """A JSON number's value; None for anything else (a boolean is no number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


# A number as people write it: "49.50", "1,000", "-18", "1k", "2.5m".
_WRITTEN_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:[km]\b)?", re.IGNORECASE)
_MULTIPLIERS = {"k": 1e3, "m": 1e6}


def _written_numbers(text: str) -> Iterator[float]:
    """The values of the numbers written in ``text`` (its first ARGS_KEPT characters)."""
    for written in _WRITTEN_NUMBER.findall(text[:ARGS_KEPT]):
        multiplier = _MULTIPLIERS.get(written[-1].lower(), 1.0)
        try:
            yield float(written.rstrip("kKmM").replace(",", "")) * multiplier
        except ValueError:
            continue


def _empty_success(ctx: DetectionContext, index: int) -> str | None:
    """How the TOOL message ``ctx.messages[index]`` found nothing, when it succeeded; else None."""
    message = ctx.messages[index]
    kind = empty_result_at(ctx, index)
    if kind is None or result_failed(message.tool_result) or content_is_error(content_of(message)):
        return None
    return kind


def _narrowed(ctx: DetectionContext, index: int, name: str | None, arguments: Any) -> bool:
    """The agent narrowed the request: not only the user's own words, not another item's records."""
    return not records_of_an_item(name, arguments) and not _users_own_words(ctx, index, arguments)


def _bad_query(
    ctx: DetectionContext, index: int, kind: str, name: str | None, arguments: Any
) -> SignalInstance:
    return SignalInstance(
        type=BAD_QUERY,
        message_index=ctx.absolute_index(index),
        confidence=CONF_EMPTY_RESULT,
        snippet=(content_of(ctx.messages[index]) or "").strip()[:ARGS_CHARS],
        metadata={
            "pattern": kind,
            "tool": name,
            "arguments": shown_arguments(canonical_arguments(arguments)),
            "status_code": None,
            "source": "tool",
        },
    )


def _relaxed_after_empty(ctx: DetectionContext, index: int) -> Iterator[SignalInstance]:
    """For each call of the ASSISTANT message ``ctx.messages[index]``: the same tool's previous call
    in this turn, when its result found nothing, it was no query by its arguments, and this call
    loosens that request (:func:`otelsignals.signals.loops.relaxed`) — the agent's own verdict that
    the query was too narrow. Only the call right before is compared (its result may be missing:
    then nothing), so an empty result is judged once however many calls follow."""
    for call in ctx.messages[index].tool_calls[:8]:
        if not call.name:
            continue
        for j in range(index - 1, max(-1, index - 1 - LOOKBACK), -1):
            message = ctx.messages[j]
            if message.role is Role.USER or (
                message.role is Role.ASSISTANT
                and any(other.name == call.name for other in message.tool_calls)
            ):
                break  # the user spoke, or the previous call's result was not captured
            if message.role is not Role.TOOL:
                continue
            result = message.tool_result
            if result is not None and result.name and result.name != call.name:
                continue  # another tool's result, told apart without finding its call
            name, arguments = call_of(ctx, j)
            if name != call.name:
                continue
            kind = _empty_success(ctx, j)
            if (
                kind is not None
                and not is_query_call(name, arguments)
                and relaxed(canonical_arguments(arguments), canonical_arguments(call.arguments))
                and _narrowed(ctx, j, name, arguments)
            ):
                yield _bad_query(ctx, j, f"adjusted_after_empty:{kind}", name, arguments)
            break


def detect_bad_query(ctx: DetectionContext) -> list[SignalInstance]:
    """Failed queries (the classifier's bad_query), successful queries that found nothing, and empty
    results the agent adjusted its request after."""
    key = memory_key(BAD_QUERY, f"empty:{PROGRESS}")
    try:
        found = tool_failure_signals(ctx, BAD_QUERY)
        failed_at = {instance.message_index for instance in found}
        start = progress_start(ctx, key)
        for index in range(start, len(ctx.messages)):
            message = ctx.messages[index]
            if message.role is Role.ASSISTANT and message.tool_calls:
                found.extend(_relaxed_after_empty(ctx, index))
            if message.role is not Role.TOOL or ctx.absolute_index(index) in failed_at:
                continue
            kind = _empty_success(ctx, index)
            if kind is None:
                continue
            name, arguments = call_of(ctx, index)
            if is_query_call(name, arguments) and _narrowed(ctx, index, name, arguments):
                found.append(_bad_query(ctx, index, f"empty_result:{kind}", name, arguments))
        progress_done(ctx, key)
        # one instance per message: parallel calls may each adjust the same empty request
        by_message = {instance.message_index: instance for instance in reversed(found)}
        return [by_message[position] for position in sorted(by_message)]
    except Exception:
        return []


DETECTORS: tuple[DetectorSpec, ...] = (
    DetectorSpec((tx.INVALID_ARGS,), detect_invalid_args, needs_content=False),
    DetectorSpec((tx.BAD_QUERY,), detect_bad_query, needs_content=False),
    DetectorSpec((tx.TOOL_NOT_FOUND,), detect_tool_not_found, needs_content=False),
    DetectorSpec((tx.AUTH_MISUSE,), detect_auth_misuse, needs_content=False),
    DetectorSpec((tx.STATE_ERROR,), detect_state_error, needs_content=False),
)
