"""Execution loops (SPEC §3, ``execution.loops.*``): the agent calling tools in circles. Model-free.

Loops look at the sequence of tool calls: the ASSISTANT messages'
``tool_calls``, or, for a call no assistant message carried (content not captured), the TOOL
message's ``tool_result.name`` / ``arguments``. A USER message ends every run — a call the user asks
for again after a good answer, or after doing something themselves ("I restarted the router, check
again"), is not the agent looping — unless it says the last attempt did not do it: the last result
failed or came back empty ("yes, try again please"), or the user's words complain, correct or
restate the request ("that's wrong, I said the Austin store", "you've checked the server 3 times",
:data:`_STILL_UNRESOLVED`). A report that the problem persists alone does not: "I restarted the
phone. Still no signal." reports the user's own step, and the agent rightly checks again. The open
runs (and the previous call's arguments as shown) live in ``ctx.memory``, so detection is
incremental across traces.

- ``retry``: the same tool with identical canonical arguments (JSON, keys sorted) ≥ 3 times in a
  row. Unknown arguments (not captured) never count as identical.
- ``parameter_drift``: the same tool ≥ 3 times in a row, each call's arguments different from the
  previous call's and either near-duplicates of them (:func:`arguments_similarity` ≥
  :data:`DRIFT_LOWER_BOUND`) or an adjustment of the same request (:func:`adjusted`: a query
  reformulated, a threshold moved, a filter dropped) made right after a failed or empty result or
  inside a drift already running. An identical repeat neither extends nor breaks the run. An
  enumeration ("Paris", "Tokyo", "Lima"; order 1001, 1002; page 1, 2, 3), even after a failure, is
  not a drift (the keys that name items are data: ``rules.item_key`` in ``phrases/loops.yaml``).
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

import datetime
import hashlib
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

import orjson

from otelsignals.model import Role, SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext, Detector, DetectorSpec, memory_key
from otelsignals.signals.errors import (
    content_is_error,
    result_failed,
)
from otelsignals.signals.phrase_analysis import analysis_of
from otelsignals.signals.taxonomy import (
    OSCILLATION,
    PARAMETER_DRIFT,
    RETRY,
)
from otelsignals.signals.tool_calls import (
    ARGS_CHARS,
    ARGS_KEPT,
    PROGRESS,
    argument_leaves,
    argument_words,
    call_of,
    canonical_arguments,
    content_of,
    empty_result_at,
    is_identifier,
    is_query_call,
    leaf_key_words,
    progress_done,
    progress_start,
    same_word,
    shown_arguments,
)
from otelsignals.signals.word_lists import word_set

LOOP_THRESHOLD = 3  # calls in a run for retry and parameter drift
OSCILLATION_CYCLES = 3  # A→B cycles
DRIFT_LOWER_BOUND = 80.0  # calibrated on DRIFT_PAIRS / ENUMERATION_PAIRS in tests/signals/test_loops.py
MAX_CALLS = 64  # calls of one message followed

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
ITEM_KEY_WORDS = word_set("loops", "item_key", "key_words")
# Values that ask for anything: a filter set to one of them is a filter dropped ("any", "all").
WILDCARD_WORDS = word_set("loops", "wildcard_value", "words")
# Keys that bound what is looked for, by a word of their name: an upper bound (max_price, before,
# within_days, radius_miles) loosens as it grows, a lower bound (min_rating, after, since) as it falls.
UPPER_BOUND_WORDS = word_set("loops", "bound_key", "upper_words")
LOWER_BOUND_WORDS = word_set("loops", "bound_key", "lower_words")
# Text that is still a quantity: a time ("14:00", "9am", "9:30 pm"), a date with or without its time
# ("2026-12-02", "2026-12-02T09:00"), an amount ("90", "212.40", "£9.99").
_TIME_TEXT = re.compile(r"(\d{1,2})(?::(\d{2}))?(?::\d{2})?\s*([ap]\.?m\.?)?", re.IGNORECASE)
_AMOUNT_TEXT = re.compile(r"[£$€]?\s*(\d+(?:\.\d+)?)")


# ---------------------------------------------------------------------------------------------
# Loops: the call sequence


def _digest(canonical: str | None) -> str | None:
    if canonical is None:
        return None
    return hashlib.blake2b(canonical.encode("utf-8", "replace"), digest_size=12).hexdigest()


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


_UNSATISFYING = "loops.unsatisfying"  # in ctx.scratch: local index → _unsatisfying_at(index)
# How unsatisfying a tool result was (:func:`_unsatisfying_at`).
SATISFIED = 0
ANSWERED_EMPTY = 1  # the list named for what the tool looks for came back empty from no query
UNSATISFIED = 2  # failed, or found nothing


def _unsatisfying_at(ctx: DetectionContext, index: int) -> int:
    """How the tool result ``ctx.messages[index]`` left the agent: :data:`UNSATISFIED` when it failed
    or found nothing; :data:`ANSWERED_EMPTY` when only the list named for what the tool looks for is
    empty and the call was no query (``get_notifications`` → ``{"notifications": []}``: a reason to
    adjust the next call in the same turn, but an answer a user may well ask for again); else
    :data:`SATISFIED`. Worked out once per trace for the three loop detectors (it parses JSON)."""
    known: dict[int, int] = ctx.scratch.setdefault(_UNSATISFYING, {})
    verdict = known.get(index)
    if verdict is None:
        message = ctx.messages[index]
        content = content_of(message)
        if result_failed(message.tool_result) or (
            content is not None
            and (content_is_error(content) or empty_result_at(ctx, index, tool_named=False) is not None)
        ):
            verdict = UNSATISFIED
        elif content is not None and empty_result_at(ctx, index) is not None:
            verdict = UNSATISFIED if is_query_call(*call_of(ctx, index)) else ANSWERED_EMPTY
        else:
            verdict = SATISFIED
        known[index] = verdict
    return verdict


def _call_events(ctx: DetectionContext, state: dict[str, Any], start: int) -> Iterator[tuple[int, str, Any]]:
    """(local index, kind, payload) in order: ``("user", None)``; ``("call", (name, canonical
    arguments or None))``; ``("result", how unsatisfying)`` for the tool result of a call
    (:func:`_unsatisfying_at`)."""
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
                yield index, "call", (name, canonical_arguments(call.arguments))
        elif message.role is Role.TOOL:
            result = message.tool_result
            call_id = result.call_id if result is not None else None
            name = result.name if result is not None else None
            if not _consume(pending, call_id, name):
                if result is None or not isinstance(name, str) or not name:
                    continue
                # A call no assistant message carried (content not captured): known from its span.
                yield index, "call", (name, canonical_arguments(result.arguments))
            yield index, "result", _unsatisfying_at(ctx, index)


def _state(ctx: DetectionContext, key: str) -> dict[str, Any]:
    """The detector's state as kept, or a new one (kept once it is not at rest: :func:`_at_rest`)."""
    state = ctx.memory.get(key)
    return state if isinstance(state, dict) else {}


def _at_rest(state: dict[str, Any]) -> bool:
    """No run under way and no call waiting for its result: every step then starts from scratch at
    the next call, as it does from an empty state, so the state need not be kept (half of the real
    development set's conversations, three dicts each). The rest does not matter then: the signature
    rule's run is under way only while the tool rule's is (both count named calls), and an
    unsatisfying result carried over changes nothing while no run is under way."""
    return not (state.get("run") or state.get("pending"))


def _emit(found: dict[int, SignalInstance], instance: SignalInstance) -> None:
    """One instance per (leaf, message): a later, longer run at the same message replaces it."""
    found[instance.message_index] = instance


def _loop_detector(leaf: str, step: Any) -> Detector:
    """Run ``step(ctx, state, index, call, after_unsatisfying)`` over the call sequence; ``call`` None
    ends the runs. A USER message ends them only when the user moved on (:func:`_moves_on`)."""
    key = memory_key(leaf, "state")
    next_key = memory_key(leaf, PROGRESS)

    def detect(ctx: DetectionContext) -> list[SignalInstance]:
        state = _state(ctx, key)
        try:
            start = progress_start(ctx, next_key)
            found: dict[int, SignalInstance] = {}
            for index, kind, payload in _call_events(ctx, state, start):
                if kind == "result":
                    state["unsatisfied"] = payload
                    continue
                if kind == "user":
                    if not _moves_on(ctx, index, state.get("unsatisfied") == UNSATISFIED):
                        continue
                    instance = step(ctx, state, index, None, False)
                else:
                    after_unsatisfying = bool(state.get("unsatisfied"))
                    state["unsatisfied"] = False
                    instance = step(ctx, state, index, payload, after_unsatisfying)
                if instance is not None:
                    _emit(found, instance)
            progress_done(ctx, next_key)
            return sorted(found.values(), key=lambda instance: instance.message_index)
        except Exception:
            return []
        finally:  # what the steps recorded is kept when one fails too
            if _at_rest(state):
                ctx.memory.pop(key, None)
            else:
                ctx.memory[key] = state

    return detect


def _moves_on(ctx: DetectionContext, index: int, after_unsatisfying: bool) -> bool:
    """Whether the user message ``ctx.messages[index]`` ends the loops under way: the last result was
    a good one and the user's words (when captured) do not say the attempt failed them."""
    if after_unsatisfying:
        return False
    text = ctx.messages[index].content
    if not isinstance(text, str):
        return True
    hits = analysis_of(ctx, text).hits
    return not any(hits.get(signal) for signal in _STILL_UNRESOLVED)


# What a user turn says when the agent's last attempt did not do it. Not a report that the problem
# persists: in a troubleshooting script the user reports each step of their own ("I restarted the
# phone. Still no signal.") and the agent rightly checks the line again.
_STILL_UNRESOLVED = (tx.NEGATIVE_STANCE, tx.CORRECTION, tx.REPHRASE, tx.ESCALATION)


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
            "arguments": shown_arguments(canonical),
        },
    )


# ---------------------------------------------------------------------------------------------
# Parameter drift


def text_similarity(a: str, b: str) -> float:
    """0–100: how near-duplicate two argument values are, word by word.

    100 the same words (case, punctuation, order or stop words differ); 95 the same up to typos and
    inflections (word pairs one edit apart, :func:`same_word`); 90 words added or
    removed (a refined query: "cheap flights paris" → "cheap flights to paris in june"); otherwise
    words were replaced and the score is the Jaccard similarity of the word sets × 100, at most 50
    when exactly one word was replaced by one other — another subject ("weather paris" → "weather
    tokyo", "ORD-10023" → "ORD-10024", country 'FR' → 'DE' in a long SQL query).
    """
    set_a, set_b = set(argument_words(a)), set(argument_words(b))
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
    fs01"). One word replaced by one other in its place is another item, not a reformulation
    ("weather paris" → "weather tokyo"); one dropped and another added elsewhere is (:func:`_moved`)."""
    words_a, words_b = argument_words(a), argument_words(b)
    set_a, set_b = set(words_a), set(words_b)
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
        return _moved(words_a, words_b, only_a.pop(), only_b.pop())
    return len(set_a & set_b) >= 0.5 * min(len(set_a), len(set_b))


MOVED_MIN_KEPT = 3  # words kept, in order, for one dropped and one added elsewhere to be a rewording


def _moved(words_a: list[str], words_b: list[str], dropped: str, added: str) -> bool:
    """One word dropped at one place and another added at another, the other words kept in their
    order (up to typos and plurals: "ford focus 2019 airbags" → "focus 2019 airbag recall"): the
    request reworded. In the same place the new word fills the old one's slot: another item ("cheap
    flights paris june" → "cheap flights tokyo june"); so is a number or code for another."""
    if is_identifier(dropped) and is_identifier(added):
        return False
    kept_a = [word for word in words_a if word != dropped]
    kept_b = [word for word in words_b if word != added]
    if len(kept_a) != len(kept_b) or len(kept_a) < MOVED_MIN_KEPT:
        return False
    if not all(same_word(x, y) for x, y in zip(kept_a, kept_b, strict=True)):
        return False
    return words_a.index(dropped) != words_b.index(added)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _item_key(path: str) -> bool:
    """A key whose values name items, not thresholds: ``id``, ``order_number``, ``page``, ``offset``."""
    return bool(set(leaf_key_words(path)) & ITEM_KEY_WORDS)


def _parsed(canonical: str) -> Any:
    try:
        return orjson.loads(canonical)
    except orjson.JSONDecodeError:
        return canonical


def _wildcard(value: Any) -> bool:
    """A value that asks for anything: null, "", "*", "any", "all"."""
    if value is None:
        return True
    return isinstance(value, str) and (value.strip() in ("", "*") or value.strip().lower() in WILDCARD_WORDS)


def _location(text: str) -> str | None:
    """A path or address as compared ("/srv/app", "~/notes", "C:\\data", "https://example.com/a",
    trailing slash aside); None for other text ("12/03/2026", "n/a", "km/h" are no places)."""
    stripped = text.strip()
    if " " in stripped:
        return None
    if (
        stripped.startswith(("/", "~/", "./", "../"))
        or "://" in stripped
        or re.match(r"[A-Za-z]:\\", stripped)
    ):
        return stripped.rstrip("/\\") or stripped
    return None


def _quantity(text: str) -> tuple[str, float] | None:
    """(kind, value) of text that is a time (minutes), a date and time (seconds) or an amount; None
    for other text."""
    stripped = text.strip()
    if len(stripped) > 32:
        return None
    time = _TIME_TEXT.fullmatch(stripped)
    if time and (time.group(2) or time.group(3)):
        hours, meridiem = int(time.group(1)), (time.group(3) or "").lower()
        if meridiem:
            hours = hours % 12 + (12 if meridiem.startswith("p") else 0)
        return "time", hours * 60.0 + int(time.group(2) or 0)
    try:
        moment = datetime.datetime.fromisoformat(stripped.replace("Z", "+00:00")).replace(tzinfo=None)
    except ValueError:
        amount = _AMOUNT_TEXT.fullmatch(stripped)
        return ("amount", float(amount.group(1))) if amount else None
    return "date", (moment - _EPOCH).total_seconds()


_EPOCH = datetime.datetime(1970, 1, 1)


def _bound_move(path: str, x: float, y: float) -> str:
    """How a bound moved: "looser" or "tighter" under a bound's key, "other" under any other key."""
    words = set(leaf_key_words(path))
    if words & UPPER_BOUND_WORDS and not words & LOWER_BOUND_WORDS:
        return "looser" if y > x else "tighter"
    if words & LOWER_BOUND_WORDS and not words & UPPER_BOUND_WORDS:
        return "looser" if y < x else "tighter"
    return "other"


def _leaf_change(path: str, x: Any, y: Any) -> str:
    """How one argument leaf changed from one call to the next: "same"; "dropped" (set to a wildcard
    in the later call); "reworded" (text, :func:`_reformulated`); "looser" or "tighter" (a bound's
    number, time, date or amount moved, :func:`_bound_move`); "moved" (a number under any other key
    that names no item); "fewer" or "more" (list items dropped or added); "other" (another item: an
    id, a page, a path, a word in another's place, a filter added)."""
    if x == y and type(x) is type(y):
        return "same"
    if _item_key(path):
        return "other"
    if _wildcard(y):
        return "dropped"
    if _wildcard(x):
        return "other"
    if isinstance(x, str) and isinstance(y, str):
        place_x, place_y = _location(x), _location(y)
        if place_x is not None or place_y is not None:
            return "same" if place_x == place_y else "other"
        quantity_x, quantity_y = _quantity(x), _quantity(y)
        if quantity_x is not None and quantity_y is not None:
            same_kind = quantity_x[0] == quantity_y[0]
            return _bound_move(path, quantity_x[1], quantity_y[1]) if same_kind else "other"
        return "reworded" if _reformulated(x, y) else "other"
    if _number(x) and _number(y):
        move = _bound_move(path, float(x), float(y))
        return "moved" if move == "other" else move
    if isinstance(x, frozenset) and isinstance(y, frozenset):
        return "fewer" if y < x else "more" if x < y else "other"
    return "other"


_ADJUSTMENTS = frozenset({"same", "dropped", "reworded", "looser", "tighter", "moved", "fewer", "more"})
_RELAXATIONS = frozenset({"same", "dropped", "reworded", "looser", "fewer"})


def _changes(a: str | None, b: str | None) -> tuple[set[str], set[str]] | None:
    """(the kinds of change of the leaves the two calls share, and "dropped" when the earlier has a
    leaf the later lacks; the kinds of the leaves only the later has: "dropped" for a wildcard, else
    "other"); None when they share no leaf or are the same call."""
    if a is None or b is None or a == b:
        return None
    leaves_a, leaves_b = argument_leaves(_parsed(a)), argument_leaves(_parsed(b))
    shared = leaves_a.keys() & leaves_b.keys()
    if not shared:
        return None
    kinds = {_leaf_change(path, leaves_a[path], leaves_b[path]) for path in shared}
    if leaves_a.keys() - shared:
        kinds.add("dropped")
    added = {"dropped" if _wildcard(leaves_b[path]) else "other" for path in leaves_b.keys() - shared}
    return kinds, added


def adjusted(a: str | None, b: str | None) -> bool:
    """Whether ``b`` adjusts the same request ``a`` rather than asking about another item: the two
    share a leaf, and every shared leaf that changed was reworded, moved as a threshold (a number
    under a key that names no item: ``max_distance_m`` 300 → 500, not ``page`` or ``id``; a time,
    date or amount written as text only under a bound's key: ``before`` "12:00" → "14:00"), dropped
    (a wildcard in the later call: null, "", "*", "any"), or is a list with items added or dropped
    (:func:`_leaf_change`)."""
    changes = _changes(a, b)
    return changes is not None and changes[0] <= _ADJUSTMENTS


def relaxed(a: str | None, b: str | None) -> bool:
    """Whether ``b`` loosens the request ``a``: it is :func:`adjusted`, and every change widens what
    is looked for — text reworded, a bound moved outwards (``days`` 1 → 7, ``min_rating`` 4.8 → 4,
    ``before`` "12:00" → "14:00"), a filter dropped (gone, or a wildcard), list items dropped — with
    no filter added. Another day, account or page, a poll's ``since`` moved on, or a number under a
    key that bounds nothing (``issue`` 41 → 42) is no loosening."""
    changes = _changes(a, b)
    if changes is None:
        return False
    kinds, added = changes
    return kinds <= _RELAXATIONS and added <= {"dropped"} and (kinds | added) != {"same"}


def arguments_similarity(a: str | None, b: str | None) -> float:
    """0–100: how near-duplicate two calls' canonical arguments are.

    The arguments are flattened to leaves (``.query``, ``.filters.city``); the score is the lowest
    over the leaves whose values differ: :func:`text_similarity` for two strings, 0 for anything else
    that changed (numbers, booleans, paths and addresses: page 1 → 2, limit 10 → 20, /srv/app →
    /srv/app/logs are other items, not a drift). Leaves only added or removed, with the others
    unchanged, are a refinement (90). No leaf in common → 0.
    """
    if a is None or b is None:
        return 0.0
    if a == b:
        return SCORE_SAME_WORDS
    try:
        value_a, value_b = orjson.loads(a), orjson.loads(b)
    except orjson.JSONDecodeError:
        value_a, value_b = a, b
    leaves_a, leaves_b = argument_leaves(value_a), argument_leaves(value_b)
    shared = leaves_a.keys() & leaves_b.keys()
    if not shared:
        return 0.0
    scores = []
    for path in shared:
        x, y = leaves_a[path], leaves_b[path]
        if x == y and type(x) is type(y):
            continue
        if isinstance(x, str) and isinstance(y, str):
            places = _location(x), _location(y)
            scores.append(text_similarity(x, y) if places == (None, None) else 0.0)
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
    kept = canonical[:ARGS_KEPT]
    if name != state.get("name") or state.get("args") is None:
        state.update(name=name, args=kept, run=1, low=None, seen=[shown_arguments(canonical)], adjusted=False)
        return None
    if kept == state["args"]:
        return None  # an identical repeat is a retry: it neither extends nor breaks the drift
    run = int(state.get("run") or 0)
    similarity = arguments_similarity(state["args"], kept)
    step_adjusted = False
    if similarity < DRIFT_LOWER_BOUND:
        if not ((after_unsatisfying or run >= 2) and adjusted(state["args"], kept)):
            state.update(args=kept, run=1, low=None, seen=[shown_arguments(canonical)], adjusted=False)
            return None
        step_adjusted = True
    low = state.get("low")
    state.update(
        args=kept,
        run=run + 1,
        low=similarity if low is None else min(low, similarity),
        seen=([*(state.get("seen") or []), shown_arguments(canonical)])[-LOOP_THRESHOLD:],
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
    needs the tool to change at every call, the other to stay). Both keep the call's digest and
    arguments as shown: made once here, one string each rather than an equal one per rule."""
    signatures: dict[str, Any] = state.setdefault("signatures", {})
    seen = None if call is None else _SeenCall(call[0], _digest(call[1]), shown_arguments(call[1]))
    by_signature = _signature_oscillation_step(ctx, signatures, index, seen)
    by_tool = _tool_oscillation_step(ctx, state, index, seen)
    return by_tool or by_signature


class _SeenCall(NamedTuple):
    name: str | None
    digest: str | None  # of the canonical arguments; None when they were not captured
    shown: str | None  # the arguments as a signal shows them


def _signature_oscillation_step(
    ctx: DetectionContext, state: dict[str, Any], index: int, call: _SeenCall | None
) -> SignalInstance | None:
    """The same tool called with two argument sets in turn, A→B→A→B→A→B (``get_details_by_id`` P1001,
    P1002, P1001, P1002…): neither a retry (the arguments change every call) nor a drift or an
    enumeration (they come back). A third argument set starts a new pair with the previous call, so
    enumerating ids (P1, P2, P3…) never fires. Unknown arguments end the run."""
    if call is None or call.name is None or call.digest is None:
        state.update(tool=None, last=None, other=None, run=0, shown={})
        return None
    name, digest, arguments = call.name, call.digest, call.shown
    shown: dict[str | None, Any] = state.get("shown") or {}  # digest → arguments as shown
    run = int(state.get("run") or 0)
    last, other = state.get("last"), state.get("other")
    if run == 0 or name != state.get("tool") or digest == last:
        # Another tool, or the same call again (a retry's business): a run may start here.
        state.update(tool=name, last=digest, other=None, run=1, shown={digest: arguments})
        return None
    if run == 1 or digest != other:
        state.update(last=digest, other=last, run=2, shown={last: shown.get(last), digest: arguments})
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
    ctx: DetectionContext, state: dict[str, Any], index: int, call: _SeenCall | None
) -> SignalInstance | None:
    """Two tools alternating, A→B→A→B→A→B, whatever their arguments. The arguments shown are the
    previous call's (the other tool's) and this one's: all of the past a signal shows."""
    if call is None or call.name is None:
        state.update(last=None, other=None, run=0, args={}, same=True, last_shown=None)
        return None
    name, digest, shown = call.name, call.digest, call.shown
    previous_shown = state.get("last_shown")
    state["last_shown"] = shown
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
            "arguments": {tool: shown if tool == name else previous_shown for tool in tools},
        },
    )


detect_retry = _loop_detector(RETRY, _retry_step)
detect_retry.__name__ = detect_retry.__qualname__ = "detect_retry"
detect_parameter_drift = _loop_detector(PARAMETER_DRIFT, _drift_step)
detect_parameter_drift.__name__ = detect_parameter_drift.__qualname__ = "detect_parameter_drift"
detect_oscillation = _loop_detector(OSCILLATION, _oscillation_step)
detect_oscillation.__name__ = detect_oscillation.__qualname__ = "detect_oscillation"


DETECTORS: tuple[DetectorSpec, ...] = (
    DetectorSpec((tx.RETRY,), detect_retry, needs_content=False),
    DetectorSpec((tx.PARAMETER_DRIFT,), detect_parameter_drift, needs_content=False),
    DetectorSpec((tx.OSCILLATION,), detect_oscillation, needs_content=False),
)
