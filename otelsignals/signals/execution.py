"""Execution layer (SPEC §3): the agent's own tool failures and tool-call loops. Model-free.

**Failures** (``execution.failure.*``) come from TOOL messages that failed — the span said so
(``ToolResult.is_error``) or the content is unmistakably an error payload (see
:func:`otelsignals.signals.errors.tool_failure`); :func:`~otelsignals.signals.errors.classify_failure`
decides the leaf, and a leaf of the environment layer (429, 5xx, timeouts…) is left to
:mod:`otelsignals.signals.environment`. No failed result goes silent: one nothing explains gets the
documented default, ``invalid_args`` at 0.5 with ``reason: "unclassified"``; only a cancelled or
interrupted call fires nothing. Every execution failure's metadata has ``reason`` (why the call was
refused: ``insufficient_funds``, ``wrong_state``, ``not_found``, ``missing_field``…, else
``http_status`` / ``exception`` / ``error_code`` / the group's name; see
:mod:`otelsignals.signals.errors`). A successful result is never read for error words.
``bad_query`` also fires, at confidence 0.6, on a *successful* result that found nothing
(:func:`~otelsignals.signals.errors.empty_result_of`: ``[]``, ``{}``, ``""``, ``null``,
``{"results": []}``, "No results found", "0 results"…) when the call was a query: its arguments
have a query-like key (a word of its name in :data:`QUERY_KEY_WORDS` or starting with
:data:`QUERY_KEY_PREFIXES`: ``query``, ``q``, ``filters``, ``searchTerm``, ``where``, ``sql``) with
a value, or the tool's name has a search word (:data:`SEARCH_NAME_WORDS`: ``search_orders``,
``findUser``) and it was called with arguments. ``list_todos()`` answering ``[]`` is no bad query,
and neither is a query made only of the user's own words (the user's constraints found nothing; the
agent did not narrow anything).

**Loops** (``execution.loops.*``) look at the sequence of tool calls: the ASSISTANT messages'
``tool_calls``, or, for a call no assistant message carried (content not captured), the TOOL
message's ``tool_result.name`` / ``arguments``. A USER message ends every run — a call the user asks
for again after a good answer is not the agent looping — unless the last result failed or came back
empty ("yes, try again please" continues the loop). The recent calls and the open runs live in
``ctx.memory``, so detection is incremental across traces.

- ``retry``: the same tool with identical canonical arguments (JSON, keys sorted) ≥ 3 times in a
  row. Unknown arguments (not captured) never count as identical.
- ``parameter_drift``: the same tool ≥ 3 times in a row, each call's arguments different from the
  previous call's and either near-duplicates of them (:func:`arguments_similarity` ≥
  :data:`DRIFT_LOWER_BOUND`) or an adjustment of the same request (:func:`adjusted`: a query
  reformulated, a threshold moved, a filter dropped) made right after a failed or empty result or
  inside a drift already running. An identical repeat neither extends nor breaks the run. An
  enumeration ("Paris", "Tokyo", "Lima"; order 1001, 1002; page 1, 2, 3), even after a failure, is
  not a drift.
- ``oscillation``: two tools alternating, A→B→A→B→A→B (3 cycles, 6 calls), or one tool
  alternating between two call signatures (tool name + canonical arguments): ``get_details_by_id``
  P1001, P1002, P1001, P1002, P1001, P1002 (metadata ``pattern: "alternating_arguments"`` and the
  two ``signatures``). Enumerating ids (P1, P2, P3…) never fires: a third argument set starts a new
  pair.

A loop fires when its run first reaches the threshold and again each time it grows by another
threshold's worth (3, 6, 9 calls; 6, 12, 18 for oscillation), so a long loop counts more; at most
one instance per (leaf, message).

Confidence: failures as the classifier says (HTTP status / exception type 0.95, message text 0.8…);
empty result of a query 0.6; retry 0.9; parameter drift 0.7 (0.6 when a step was an adjustment
rather than a near-duplicate); oscillation 0.85 when each tool is
repeated with the same arguments as its previous call (flip-flopping; always so for one tool's two
signatures), else 0.6 (alternating over different inputs, e.g. search → open → search → open, is
sometimes just diligence).

Metadata keys are declared in :mod:`otelsignals.signals.base`: ``arguments`` (and those inside
``signatures``) are the call's own text, content that leaves as a ``blake2b:`` digest when
``signals.snippets`` is off; ``tool`` and ``error_type`` are kept only when they look like
identifiers. A new key must be declared there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import orjson
from rapidfuzz.distance import OSA

from otelsignals.model import Message, Role, SignalInstance, ToolResult
from otelsignals.signals.base import DetectionContext, Detector
from otelsignals.signals.errors import (
    Classification,
    content_is_error,
    empty_result_of,
    normalise,
    result_failed,
    tool_failure,
)
from otelsignals.signals.taxonomy import (
    AUTH_MISUSE,
    BAD_QUERY,
    INVALID_ARGS,
    OSCILLATION,
    PARAMETER_DRIFT,
    RETRY,
    STATE_ERROR,
    TOOL_NOT_FOUND,
)

LOOP_THRESHOLD = 3  # calls in a run for retry and parameter drift
OSCILLATION_CYCLES = 3  # A→B cycles
DRIFT_LOWER_BOUND = 80.0  # calibrated on DRIFT_PAIRS / ENUMERATION_PAIRS in tests/signals/test_execution.py
MAX_CALLS = 64  # recent calls kept per conversation
LOOKBACK = 32  # messages searched back for the assistant call of a tool result
ARGS_CHARS = 200  # arguments shown in metadata and snippets
USER_MESSAGES_READ = 3  # recent user messages whose words an empty query may consist of
_ARGS_KEPT = 8000  # canonical arguments kept in memory for the similarity of the next call

CONF_EMPTY_RESULT = 0.6
CONF_RETRY = 0.9
CONF_DRIFT = 0.7
CONF_DRIFT_ADJUSTED = 0.6
CONF_OSCILLATION_SAME_ARGS = 0.85
CONF_OSCILLATION = 0.6

SCORE_SAME_WORDS = 100.0
SCORE_TYPOS = 95.0
SCORE_REFINEMENT = 90.0
SCORE_SLOT = 50.0  # the most one word replaced by another can score
# Keys whose numbers name items (a different order, page or row), not thresholds to adjust.
ITEM_KEY_WORDS = frozenset(
    {"id", "ids", "uuid", "number", "num", "no", "page", "offset", "cursor", "index", "idx", "sku", "code"}
)

# A query-like argument: one of its name's words (snake_case or camelCase) is one of these or starts
# with one of the prefixes: query, q, search_term, searchQuery, filters, where, sql, keywords…
QUERY_KEY_WORDS = frozenset(
    {
        "q",
        "qs",
        "sql",
        "where",
        "pattern",
        "regex",
        "term",
        "terms",
        "jql",
        "cql",
        "kql",
        "lucene",
        "grep",
        "glob",
    }
)
QUERY_KEY_PREFIXES = ("quer", "search", "filter", "keyword")
# A tool whose name has one of these words is a search when called with arguments.
SEARCH_NAME_WORDS = frozenset({"search", "query", "find", "lookup", "filter", "grep", "sql"})
_STOP_WORDS = frozenset(
    {"a", "an", "the", "of", "in", "on", "at", "to", "for", "from", "by", "with", "and", "or", "is", "are"}
    | {"my", "me", "i", "please", "near", "about"}
)


# ---------------------------------------------------------------------------------------------
# Shared helpers (also used by the environment layer)


def _progress_start(ctx: DetectionContext, key: str) -> int:
    """Local index of the first message to examine: ``new_from``, or past what this detector saw
    (a re-analysed trace yields nothing twice)."""
    start = ctx.new_from
    done = ctx.memory.get(key)
    if isinstance(done, int):
        start = max(start, done - ctx.conversation.message_offset)
    return max(0, min(start, len(ctx.messages)))


def _progress_done(ctx: DetectionContext, key: str) -> None:
    ctx.memory[key] = ctx.absolute_index(len(ctx.messages))


def _content_of(message: Message) -> str | None:
    result = message.tool_result
    if result is not None and isinstance(result.content, str) and result.content:
        return result.content
    if isinstance(message.content, str):
        return message.content
    return result.content if result is not None and isinstance(result.content, str) else None


def _assistant_call(ctx: DetectionContext, index: int, result: ToolResult | None) -> tuple[str | None, Any]:
    """(name, arguments) of the assistant call a tool result answers, searched a bounded way back."""
    call_id = result.call_id if result is not None else None
    name = result.name if result is not None else None
    for j in range(index - 1, max(-1, index - 1 - LOOKBACK), -1):
        message = ctx.messages[j]
        if message.role is Role.USER:
            break
        if message.role is not Role.ASSISTANT or not message.tool_calls:
            continue
        for call in message.tool_calls:
            if call_id and call.id == call_id:
                return call.name, call.arguments
        if not call_id and name:
            for call in message.tool_calls:
                if call.name == name:
                    return call.name, call.arguments
        if not call_id and not name and len(message.tool_calls) == 1:
            call = message.tool_calls[0]
            return call.name, call.arguments
    return name, None


def tool_name_of(ctx: DetectionContext, index: int) -> str | None:
    message = ctx.messages[index]
    result = message.tool_result
    if result is not None and result.name:
        return result.name
    return _assistant_call(ctx, index, result)[0]


def iter_tool_failures(ctx: DetectionContext, start: int) -> Iterator[tuple[int, str | None, Classification]]:
    """(local index, tool name, classification) of every failed TOOL message from ``start`` on.
    Classified once per call of the detectors, however many leaves ask."""
    key = ("tool_failures", start, len(ctx.messages))
    cached = ctx.scratch.get(key)
    if cached is None:
        cached = ctx.scratch[key] = list(_classify_tool_failures(ctx, start))
    return iter(cached)


def _classify_tool_failures(
    ctx: DetectionContext, start: int
) -> Iterator[tuple[int, str | None, Classification]]:
    for index in range(start, len(ctx.messages)):
        message = ctx.messages[index]
        if message.role is not Role.TOOL:
            continue
        result = message.tool_result
        content = _content_of(message)
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
    key = f"{leaf}:next"
    try:
        start = _progress_start(ctx, key)
        found = [
            failure_instance(ctx, index, tool, classification)
            for index, tool, classification in iter_tool_failures(ctx, start)
            if classification.leaf_type == leaf
        ]
        _progress_done(ctx, key)
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


def _as_arguments(value: Any) -> Any:
    """Arguments as a value: JSON text parsed, anything else as given."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("{", "[") and len(stripped) <= 1_000_000:
            try:
                return orjson.loads(stripped)
            except orjson.JSONDecodeError:
                return value
    return value


def _has_value(value: Any) -> bool:
    if value is None or value is False:
        return False
    if isinstance(value, str | list | dict | tuple):
        return len(value) > 0 and (not isinstance(value, str) or bool(value.strip()))
    return True


def _name_words(name: str) -> list[str]:
    """``searchTerm`` / ``search_term`` / ``search-term`` → ["search", "term"]."""
    spaced = "".join(f" {ch}" if ch.isupper() else ch for ch in name[:200])
    return normalise(spaced).split()


def _query_key(key: str) -> bool:
    return any(word in QUERY_KEY_WORDS or word.startswith(QUERY_KEY_PREFIXES) for word in _name_words(key))


def is_query_call(tool: str | None, arguments: Any) -> bool:
    """A query: a query-like argument with a value, or a search-verb tool called with arguments."""
    arguments = _as_arguments(arguments)
    if isinstance(arguments, dict):
        for key, value in list(arguments.items())[:64]:
            if isinstance(key, str) and _query_key(key) and _has_value(value):
                return True
            nested = (
                isinstance(value, dict) and isinstance(key, str) and key.lower() in ("params", "parameters")
            )
            if nested and any(
                isinstance(k, str) and _query_key(k) and _has_value(v) for k, v in value.items()
            ):
                return True
    return bool(tool and _has_value(arguments) and set(_name_words(tool)) & SEARCH_NAME_WORDS)


def _users_own_words(ctx: DetectionContext, index: int, arguments: Any) -> bool:
    """Whether every word of the call's text arguments was said by the user (in the last
    :data:`USER_MESSAGES_READ` user messages): the user's own constraints found nothing, the agent did
    not narrow the query. Ids, dates and numbers are left out; no words left → False."""
    words: set[str] = set()
    leaves = _leaves(_as_arguments(arguments))
    for value in leaves.values():
        values = value if isinstance(value, frozenset) else [value]
        for text in values:
            if not isinstance(text, str) or (" " not in text.strip() and _identifier(text)):
                continue
            words.update(word for word in _words(text) if not _identifier(word))
    if not words:
        return False
    said: set[str] = set()
    seen = 0
    for j in range(index - 1, max(-1, index - 1 - LOOKBACK), -1):
        message = ctx.messages[j]
        if message.role is Role.USER and isinstance(message.content, str):
            said.update(_words(message.content))
            seen += 1
            if seen >= USER_MESSAGES_READ:
                break
    return all(word in said or any(same_word(word, other) for other in said) for word in words)


def detect_bad_query(ctx: DetectionContext) -> list[SignalInstance]:
    """Failed queries (the classifier's bad_query) and successful queries that found nothing."""
    key = f"{BAD_QUERY}:empty:next"
    try:
        found = tool_failure_signals(ctx, BAD_QUERY)
        failed_at = {instance.message_index for instance in found}
        start = _progress_start(ctx, key)
        for index in range(start, len(ctx.messages)):
            message = ctx.messages[index]
            if message.role is not Role.TOOL or ctx.absolute_index(index) in failed_at:
                continue
            result = message.tool_result
            if result_failed(result):
                continue
            content = _content_of(message)
            kind = empty_result_of(content)
            if kind is None or content_is_error(content):
                continue
            name, arguments = _assistant_call(ctx, index, result)
            if result is not None and result.arguments is not None:
                arguments = result.arguments
            name = (result.name if result is not None and result.name else None) or name
            if not is_query_call(name, arguments) or _users_own_words(ctx, index, arguments):
                continue
            found.append(
                SignalInstance(
                    type=BAD_QUERY,
                    message_index=ctx.absolute_index(index),
                    confidence=CONF_EMPTY_RESULT,
                    snippet=(content or "").strip()[:ARGS_CHARS],
                    metadata={
                        "pattern": f"empty_result:{kind}",
                        "tool": name,
                        "arguments": _shown(_canonical(arguments)),
                        "status_code": None,
                        "source": "tool",
                    },
                )
            )
        _progress_done(ctx, key)
        found.sort(key=lambda instance: instance.message_index)
        return found
    except Exception:
        return []


# ---------------------------------------------------------------------------------------------
# Loops: the call sequence


def _canonical(arguments: Any) -> str | None:
    """Canonical JSON of a call's arguments (keys sorted); None when they were not captured."""
    if arguments is None:
        return None
    value = _as_arguments(arguments)
    if isinstance(value, str):
        value = value.strip()
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):
        return repr(value)


def _digest(canonical: str | None) -> str | None:
    if canonical is None:
        return None
    return hashlib.blake2b(canonical.encode("utf-8", "replace"), digest_size=12).hexdigest()


def _shown(canonical: str | None) -> str | None:
    if canonical is None:
        return None
    return canonical if len(canonical) <= ARGS_CHARS else canonical[: ARGS_CHARS - 1] + "…"


def _consume(pending: list[list[Any]], call_id: str | None, name: str | None) -> bool:
    """Match a tool result to an assistant call already counted (by id, else by name, else the first)."""
    if not pending:
        return False
    if call_id:
        for position, (pending_id, _) in enumerate(pending):
            if pending_id == call_id:
                del pending[position]
                return True
    if name:
        for position, (_, pending_name) in enumerate(pending):
            if pending_name == name:
                del pending[position]
                return True
        return False
    del pending[0]
    return True


def unsatisfying(message: Message) -> bool:
    """A tool result the agent had reason to try again after: it failed or it found nothing."""
    result = message.tool_result
    if result_failed(result):
        return True
    content = _content_of(message)
    return bool(content is not None and (content_is_error(content) or empty_result_of(content) is not None))


def _call_events(ctx: DetectionContext, state: dict[str, Any], start: int) -> Iterator[tuple[int, str, Any]]:
    """(local index, kind, payload) in order: ``("user", None)``; ``("call", (name, canonical
    arguments or None))``; ``("result", unsatisfying)`` for the tool result of a call."""
    pending: list[list[Any]] = state.setdefault("pending", [])
    for index in range(start, len(ctx.messages)):
        message = ctx.messages[index]
        if message.role is Role.USER:
            pending.clear()
            yield index, "user", None
        elif message.role is Role.ASSISTANT and message.tool_calls:
            pending[:] = [[call.id, call.name] for call in message.tool_calls[:MAX_CALLS]]
            for call in message.tool_calls:
                name = call.name if isinstance(call.name, str) and call.name else None
                yield index, "call", (name, _canonical(call.arguments))
        elif message.role is Role.TOOL:
            result = message.tool_result
            call_id = result.call_id if result is not None else None
            name = result.name if result is not None else None
            if not _consume(pending, call_id, name):
                if result is None or not isinstance(name, str) or not name:
                    continue
                # A call no assistant message carried (content not captured): known from its span.
                yield index, "call", (name, _canonical(result.arguments))
            yield index, "result", unsatisfying(message)


def _state(ctx: DetectionContext, key: str) -> dict[str, Any]:
    state = ctx.memory.get(key)
    if not isinstance(state, dict):
        state = {}
        ctx.memory[key] = state
    return state


def _remember(state: dict[str, Any], index: int, name: str | None, canonical: str | None) -> None:
    calls: list[list[Any]] = state.setdefault("calls", [])
    calls.append([index, name, _shown(canonical)])
    del calls[:-MAX_CALLS]


def _emit(found: dict[int, SignalInstance], instance: SignalInstance) -> None:
    """One instance per (leaf, message): a later, longer run at the same message replaces it."""
    found[instance.message_index] = instance


def _loop_detector(leaf: str, step: Any) -> Detector:
    """Run ``step(ctx, state, index, call, after_unsatisfying)`` over the call sequence; ``call`` None
    ends the runs. A USER message ends them unless the last result failed or was empty (the user
    saying "try again" continues the loop)."""
    key = f"{leaf}:state"

    def detect(ctx: DetectionContext) -> list[SignalInstance]:
        try:
            state = _state(ctx, key)
            start = _progress_start(ctx, f"{leaf}:next")
            found: dict[int, SignalInstance] = {}
            for index, kind, payload in _call_events(ctx, state, start):
                if kind == "result":
                    state["unsatisfied"] = bool(payload)
                    continue
                if kind == "user":
                    if state.get("unsatisfied"):
                        continue
                    instance = step(ctx, state, index, None, False)
                else:
                    _remember(state, ctx.absolute_index(index), payload[0], payload[1])
                    after_unsatisfying = bool(state.get("unsatisfied"))
                    state["unsatisfied"] = False
                    instance = step(ctx, state, index, payload, after_unsatisfying)
                if instance is not None:
                    _emit(found, instance)
            _progress_done(ctx, f"{leaf}:next")
            return sorted(found.values(), key=lambda instance: instance.message_index)
        except Exception:
            return []

    return detect


def _snippet(name: str, canonical: str | None) -> str:
    text = f"{name}({canonical if canonical is not None else '…'})"
    return text if len(text) <= ARGS_CHARS else text[: ARGS_CHARS - 1] + "…"


# ---------------------------------------------------------------------------------------------
# Retry


def _retry_step(
    ctx: DetectionContext, state: dict[str, Any], index: int, call: Any, after_unsatisfying: bool
) -> SignalInstance | None:
    if call is None:
        state.update(name=None, digest=None, run=0)
        return None
    name, canonical = call
    digest = _digest(canonical)
    if name is None or digest is None:
        state.update(name=name, digest=None, run=0)
        return None
    if name == state.get("name") and digest == state.get("digest"):
        state["run"] = int(state.get("run") or 0) + 1
    else:
        state.update(name=name, digest=digest, run=1)
    run = state["run"]
    if run < LOOP_THRESHOLD or run % LOOP_THRESHOLD:
        return None
    return SignalInstance(
        type=RETRY,
        message_index=ctx.absolute_index(index),
        confidence=CONF_RETRY,
        snippet=_snippet(name, canonical),
        metadata={
            "pattern": "identical_arguments",
            "tool": name,
            "run_length": run,
            "threshold": LOOP_THRESHOLD,
            "arguments": _shown(canonical),
        },
    )


# ---------------------------------------------------------------------------------------------
# Parameter drift


def _words(text: str) -> list[str]:
    return [word for word in normalise(text[:_ARGS_KEPT]).split() if word not in _STOP_WORDS]


def _identifier(word: str) -> bool:
    """Numbers, ids, dates, codes: two of them are different items, however alike they look."""
    return any(ch.isdigit() for ch in word)


def same_word(a: str, b: str) -> bool:
    """A typo or inflection of the same word: one edit apart (insertion, deletion, substitution or
    swap of neighbours: paris/pariss, restaurant/restaurants, sna/san) when the shorter has ≥ 4
    letters; in shorter words only an added or dropped letter (jon/john), since one other letter in
    a short word is usually another word (jan/jun, red/bed). Numbers and ids never match."""
    if a == b:
        return True
    if _identifier(a) or _identifier(b) or min(len(a), len(b)) < 3:
        return False
    if OSA.distance(a, b, score_cutoff=1) > 1:
        return False
    return min(len(a), len(b)) >= 4 or len(a) != len(b)


def text_similarity(a: str, b: str) -> float:
    """0–100: how near-duplicate two argument values are, word by word.

    100 the same words (case, punctuation, order or stop words differ); 95 the same up to typos and
    inflections (word pairs one edit apart, :func:`same_word`); 90 words added or
    removed (a refined query: "cheap flights paris" → "cheap flights to paris in june"); otherwise
    words were replaced and the score is the Jaccard similarity of the word sets × 100, at most 50
    when exactly one word was replaced by one other — another subject ("weather paris" → "weather
    tokyo", "ORD-10023" → "ORD-10024", country 'FR' → 'DE' in a long SQL query).
    """
    set_a, set_b = set(_words(a)), set(_words(b))
    if set_a == set_b:
        return SCORE_SAME_WORDS
    only_a, only_b = set_a - set_b, set_b - set_a
    paired = 0
    for word in sorted(only_a):
        match = next((other for other in sorted(only_b) if same_word(word, other)), None)
        if match is not None:
            only_a.discard(word)
            only_b.discard(match)
            paired += 1
    if not only_a and not only_b:
        return SCORE_TYPOS
    if not only_a or not only_b:
        return SCORE_REFINEMENT if (set_a & set_b or paired) else 0.0
    shared = len(set_a & set_b) + paired
    union = shared + len(only_a) + len(only_b)
    jaccard = round(100.0 * shared / union, 1) if union else 0.0
    if len(only_a) == 1 and len(only_b) == 1:
        return min(jaccard, SCORE_SLOT)  # one word for another: another item, however long the text
    return jaccard


def _reformulated(a: str, b: str) -> bool:
    """The same request in other words: words added or removed, or several replaced while at least
    half of the shorter one's words stay ("map SMB share fs01 on macOS…" → "map network drive mac smb
    fs01"). One word replaced by one other is another item, not a reformulation."""
    set_a, set_b = set(_words(a)), set(_words(b))
    if not set_a or not set_b:
        return False
    only_a, only_b = set_a - set_b, set_b - set_a
    for word in sorted(only_a):
        match = next((other for other in sorted(only_b) if same_word(word, other)), None)
        if match is not None:
            only_a.discard(word)
            only_b.discard(match)
    if not only_a or not only_b:
        return True
    if len(only_a) == 1 and len(only_b) == 1:
        return False
    return len(set_a & set_b) >= 0.5 * min(len(set_a), len(set_b))


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _leaves(value: Any, path: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Flattened arguments: ``.filters.city`` → value; a list of scalars is one leaf, a frozenset
    (``.amenities[]``), so dropping an item is a change of that leaf, not of every later index."""
    out = {} if out is None else out
    if len(out) >= 64:
        return out
    if isinstance(value, dict):
        for key in sorted(value, key=str)[:64]:
            _leaves(value[key], f"{path}.{key}", out)
    elif isinstance(value, list) and value and all(_scalar(item) for item in value):
        out[f"{path}[]"] = frozenset(str(item) for item in value[:64])
    elif isinstance(value, list) and value and len(value) <= 64:
        for position, item in enumerate(value):
            _leaves(item, f"{path}[{position}]", out)
    else:
        out[path] = value
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _item_key(path: str) -> bool:
    """A key whose numbers name items, not thresholds: ``id``, ``order_number``, ``page``, ``offset``."""
    last = path.rsplit(".", 1)[-1]
    return bool(set(_name_words(last)) & ITEM_KEY_WORDS)


def _parsed(canonical: str) -> Any:
    try:
        return orjson.loads(canonical)
    except orjson.JSONDecodeError:
        return canonical


def adjusted(a: str | None, b: str | None) -> bool:
    """Whether ``b`` adjusts the same request ``a`` rather than asking about another item: every
    leaf that changed is a reformulated text (:func:`_reformulated`), a threshold moved (a number
    under a key that does not name items: ``max_distance_m`` 300 → 500, not ``page`` or ``id``), or a
    list with items added or dropped; and the two share at least one leaf."""
    if a is None or b is None or a == b:
        return False
    leaves_a, leaves_b = _leaves(_parsed(a)), _leaves(_parsed(b))
    shared = leaves_a.keys() & leaves_b.keys()
    if not shared:
        return False
    for path in shared:
        x, y = leaves_a[path], leaves_b[path]
        if x == y and type(x) is type(y):
            continue
        if isinstance(x, str) and isinstance(y, str):
            if not _reformulated(x, y):
                return False
        elif _number(x) and _number(y):
            if _item_key(path):
                return False
        elif isinstance(x, frozenset) and isinstance(y, frozenset):
            if not (x <= y or y <= x):
                return False
        else:
            return False
    return True


def arguments_similarity(a: str | None, b: str | None) -> float:
    """0–100: how near-duplicate two calls' canonical arguments are.

    The arguments are flattened to leaves (``.query``, ``.filters.city``); the score is the lowest
    over the leaves whose values differ: :func:`text_similarity` for two strings, 0 for anything else
    that changed (numbers, booleans: page 1 → 2, limit 10 → 20 are other items, not a drift). Leaves
    only added or removed, with the others unchanged, are a refinement (90). No leaf in common → 0.
    """
    if a is None or b is None:
        return 0.0
    if a == b:
        return SCORE_SAME_WORDS
    try:
        value_a, value_b = orjson.loads(a), orjson.loads(b)
    except orjson.JSONDecodeError:
        value_a, value_b = a, b
    leaves_a, leaves_b = _leaves(value_a), _leaves(value_b)
    shared = leaves_a.keys() & leaves_b.keys()
    if not shared:
        return 0.0
    scores = []
    for path in shared:
        x, y = leaves_a[path], leaves_b[path]
        if x == y and type(x) is type(y):
            continue
        if isinstance(x, str) and isinstance(y, str):
            scores.append(text_similarity(x, y))
        elif isinstance(x, frozenset) and isinstance(y, frozenset) and (x <= y or y <= x):
            scores.append(SCORE_REFINEMENT)  # list items added or dropped
        else:
            scores.append(0.0)
    if scores:
        return min(scores)
    return SCORE_REFINEMENT if leaves_a.keys() != leaves_b.keys() else SCORE_SAME_WORDS


def _drift_step(
    ctx: DetectionContext, state: dict[str, Any], index: int, call: Any, after_unsatisfying: bool
) -> SignalInstance | None:
    """A drift step: near-duplicate arguments (similarity ≥ the bound), or arguments that adjust the
    same request (:func:`adjusted`) right after a failed or empty result or within a drift already
    running (the agent reformulating a query until it works)."""
    if call is None:
        state.update(name=None, args=None, run=0, low=None, seen=[], adjusted=False)
        return None
    name, canonical = call
    if name is None or canonical is None:
        state.update(name=name, args=None, run=0, low=None, seen=[], adjusted=False)
        return None
    kept = canonical[:_ARGS_KEPT]
    if name != state.get("name") or state.get("args") is None:
        state.update(name=name, args=kept, run=1, low=None, seen=[_shown(canonical)], adjusted=False)
        return None
    if kept == state["args"]:
        return None  # an identical repeat is a retry: it neither extends nor breaks the drift
    run = int(state.get("run") or 0)
    similarity = arguments_similarity(state["args"], kept)
    step_adjusted = False
    if similarity < DRIFT_LOWER_BOUND:
        if not ((after_unsatisfying or run >= 2) and adjusted(state["args"], kept)):
            state.update(args=kept, run=1, low=None, seen=[_shown(canonical)], adjusted=False)
            return None
        step_adjusted = True
    low = state.get("low")
    state.update(
        args=kept,
        run=run + 1,
        low=similarity if low is None else min(low, similarity),
        seen=([*(state.get("seen") or []), _shown(canonical)])[-LOOP_THRESHOLD:],
        adjusted=bool(state.get("adjusted")) or step_adjusted,
    )
    run += 1
    if run < LOOP_THRESHOLD or run % LOOP_THRESHOLD:
        return None
    was_adjusted = bool(state["adjusted"])
    return SignalInstance(
        type=PARAMETER_DRIFT,
        message_index=ctx.absolute_index(index),
        confidence=CONF_DRIFT_ADJUSTED if was_adjusted else CONF_DRIFT,
        snippet=_snippet(name, canonical),
        metadata={
            "pattern": "adjusted_arguments" if was_adjusted else "near_duplicate_arguments",
            "tool": name,
            "run_length": run,
            "threshold": LOOP_THRESHOLD,
            "similarity": state["low"],
            "lower_bound": DRIFT_LOWER_BOUND,
            "arguments": list(state["seen"]),
        },
    )


# ---------------------------------------------------------------------------------------------
# Oscillation


def _oscillation_step(
    ctx: DetectionContext, state: dict[str, Any], index: int, call: Any, after_unsatisfying: bool
) -> SignalInstance | None:
    """Two tools alternating (:func:`_tool_oscillation_step`), or one tool alternating between two
    argument sets (:func:`_signature_oscillation_step`); the two never fire on the same calls (one
    needs the tool to change at every call, the other to stay)."""
    signatures: dict[str, Any] = state.setdefault("signatures", {})
    by_signature = _signature_oscillation_step(ctx, signatures, index, call)
    by_tool = _tool_oscillation_step(ctx, state, index, call)
    return by_tool or by_signature


def _signature_oscillation_step(
    ctx: DetectionContext, state: dict[str, Any], index: int, call: Any
) -> SignalInstance | None:
    """The same tool called with two argument sets in turn, A→B→A→B→A→B (``get_details_by_id`` P1001,
    P1002, P1001, P1002…): neither a retry (the arguments change every call) nor a drift or an
    enumeration (they come back). A third argument set starts a new pair with the previous call, so
    enumerating ids (P1, P2, P3…) never fires. Unknown arguments end the run."""
    if call is None or call[0] is None or call[1] is None:
        state.update(tool=None, last=None, other=None, run=0, shown={})
        return None
    name, canonical = call
    digest = _digest(canonical)
    shown: dict[str | None, Any] = state.get("shown") or {}  # digest → arguments as shown
    run = int(state.get("run") or 0)
    last, other = state.get("last"), state.get("other")
    if run == 0 or name != state.get("tool") or digest == last:
        # Another tool, or the same call again (a retry's business): a run may start here.
        state.update(tool=name, last=digest, other=None, run=1, shown={digest: _shown(canonical)})
        return None
    if run == 1 or digest != other:
        state.update(last=digest, other=last, run=2, shown={last: shown.get(last), digest: _shown(canonical)})
        return None
    state.update(last=digest, other=last, run=run + 1)
    run += 1
    if run % (2 * OSCILLATION_CYCLES):
        return None
    first, second = shown.get(last), shown.get(digest)  # the previous call's, then this one's
    return SignalInstance(
        type=OSCILLATION,
        message_index=ctx.absolute_index(index),
        confidence=CONF_OSCILLATION_SAME_ARGS,
        snippet=_snippet_pair(name, first, second),
        metadata={
            "pattern": "alternating_arguments",
            "tools": [name],
            "run_length": run,
            "cycles": run // 2,
            "threshold_cycles": OSCILLATION_CYCLES,
            "same_arguments": True,
            "signatures": [{"tool": name, "arguments": first}, {"tool": name, "arguments": second}],
        },
    )


def _snippet_pair(name: str, first: str | None, second: str | None) -> str:
    text = f"{name}({first or '…'}) ⇄ {name}({second or '…'})"
    return text if len(text) <= ARGS_CHARS else text[: ARGS_CHARS - 1] + "…"


def _tool_oscillation_step(
    ctx: DetectionContext, state: dict[str, Any], index: int, call: Any
) -> SignalInstance | None:
    """Two tools alternating, A→B→A→B→A→B, whatever their arguments."""
    if call is None or call[0] is None:
        state.update(last=None, other=None, run=0, args={}, same=True)
        return None
    name, canonical = call
    digest = _digest(canonical)
    run = int(state.get("run") or 0)
    last, other = state.get("last"), state.get("other")
    # Keyed by tool name; ``last`` is None only before the first call (run == 0).
    args: dict[str | None, Any] = state.get("args") or {}
    if run == 0 or name == last:
        state.update(last=name, other=None, run=1, args={name: digest}, same=True)
        return None
    if run == 1 or name != other:
        # A new pair starts with the previous call and this one.
        state.update(other=last, last=name, run=2, args={last: args.get(last), name: digest}, same=True)
        return None
    same = bool(state.get("same", True)) and digest is not None and args.get(name) == digest
    args[name] = digest
    state.update(other=last, last=name, run=run + 1, args=args, same=same)
    run += 1
    calls_per_fire = 2 * OSCILLATION_CYCLES
    if run % calls_per_fire:
        return None
    tools = [state["other"], name] if run % 2 == 0 else [name, state["other"]]
    return SignalInstance(
        type=OSCILLATION,
        message_index=ctx.absolute_index(index),
        confidence=CONF_OSCILLATION_SAME_ARGS if same else CONF_OSCILLATION,
        snippet=f"{tools[0]} ⇄ {tools[1]}",
        metadata={
            "pattern": "alternating_tools",
            "tools": tools,
            "run_length": run,
            "cycles": run // 2,
            "threshold_cycles": OSCILLATION_CYCLES,
            "same_arguments": same,
            "arguments": {tool: None for tool in tools} | _last_arguments(state, tools),
        },
    )


def _last_arguments(state: dict[str, Any], tools: list[str]) -> dict[str, Any]:
    shown: dict[str, Any] = {}
    for _, name, arguments in reversed(state.get("calls") or []):
        if name in tools and name not in shown:
            shown[name] = arguments
        if len(shown) == len(tools):
            break
    return shown


detect_retry = _loop_detector(RETRY, _retry_step)
detect_retry.__name__ = detect_retry.__qualname__ = "detect_retry"
detect_parameter_drift = _loop_detector(PARAMETER_DRIFT, _drift_step)
detect_parameter_drift.__name__ = detect_parameter_drift.__qualname__ = "detect_parameter_drift"
detect_oscillation = _loop_detector(OSCILLATION, _oscillation_step)
detect_oscillation.__name__ = detect_oscillation.__qualname__ = "detect_oscillation"


FAILURE_DETECTORS: tuple[Detector, ...] = (
    detect_invalid_args,
    detect_bad_query,
    detect_tool_not_found,
    detect_auth_misuse,
    detect_state_error,
)
LOOP_DETECTORS: tuple[Detector, ...] = (detect_retry, detect_parameter_drift, detect_oscillation)
# The five failure detectors first, then the three loop detectors (detect.py relies on the order).
EXECUTION_DETECTORS: tuple[Detector, ...] = FAILURE_DETECTORS + LOOP_DETECTORS
