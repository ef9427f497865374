"""Reading tool calls for the execution and environment detectors: which assistant call a tool result
answers, a call's arguments in canonical form, and the words of a name or a text (the words left out
of an argument text are data: ``rules.argument_words`` in ``phrases/tool_calls.yaml``).
"""

from __future__ import annotations

from typing import Any

import orjson
from rapidfuzz.distance import OSA

from otelsignals.model import Message, Role, ToolResult
from otelsignals.signals.base import DetectionContext, holds_message_numbers
from otelsignals.signals.errors import (
    empty_result_of,
    normalise,
)
from otelsignals.signals.word_lists import word_order, word_set

LOOKBACK = 32  # messages searched back for the assistant call of a tool result
ARGS_KEPT = 8000  # canonical arguments kept in memory for the similarity of the next call
ARGS_CHARS = 200  # arguments shown in metadata and snippets
# Words left out when argument texts are compared ("cheap flights paris" / "cheap flights to paris").
ARGUMENT_STOP_WORDS = word_set("tool_calls", "argument_words", "stop_words")

# A query-like argument: one of its name's words (snake_case or camelCase) is one of these or starts
# with one of the prefixes: query, q, search_term, searchQuery, filters, where, sql, keywords…
QUERY_KEY_WORDS = word_set("failure", "query_argument", "key_words")
QUERY_KEY_PREFIXES = word_order("failure", "query_argument", "key_prefixes")
# A tool whose name has one of these words is a search when called with arguments.
SEARCH_NAME_WORDS = word_set("failure", "query_argument", "search_name_words")


# The last part of every progress marker's key (memory_key(leaf, PROGRESS)): the marker is the number
# of the message after the last one the detector examined.
PROGRESS = holds_message_numbers("next")


def progress_start(ctx: DetectionContext, key: str) -> int:
    """Local index of the first message to examine: ``new_from``, or past what this detector saw
    (a re-analysed trace yields nothing twice)."""
    start = ctx.new_from
    done = ctx.memory.get(key)
    if isinstance(done, int):
        start = max(start, done - ctx.conversation.message_offset)
    return max(0, min(start, len(ctx.messages)))


def progress_done(ctx: DetectionContext, key: str) -> None:
    ctx.memory[key] = ctx.absolute_index(len(ctx.messages))


def content_of(message: Message) -> str | None:
    result = message.tool_result
    if result is not None and isinstance(result.content, str) and result.content:
        return result.content
    if isinstance(message.content, str):
        return message.content
    return result.content if result is not None and isinstance(result.content, str) else None


_EMPTY_RESULTS = "tool_calls.empty_results"  # in ctx.scratch: (local index, tool_named) → kind


def empty_result_at(ctx: DetectionContext, index: int, *, tool_named: bool = True) -> str | None:
    """empty_result_of the content of the TOOL message ``ctx.messages[index]``, worked out once per
    trace: the bad-query rule and the three loop detectors all ask, and it parses the result's JSON.
    ``tool_named``: an object whose list is named for what the tool looks for counts too (the loop
    detectors ask it only of queries: ``get_notifications`` answering ``{"notifications": []}`` is
    an answer that a user may well ask for again)."""
    known: dict[tuple[int, bool], str | None] = ctx.scratch.setdefault(_EMPTY_RESULTS, {})
    key = (index, tool_named)
    if key not in known:
        content = content_of(ctx.messages[index])
        object_body = content is not None and content[:64].lstrip().startswith("{")
        tool = tool_name_of(ctx, index) if tool_named and object_body else None
        known[key] = empty_result_of(content, tool)
    return known[key]


def assistant_call(ctx: DetectionContext, index: int, result: ToolResult | None) -> tuple[str | None, Any]:
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
    return assistant_call(ctx, index, result)[0]


def call_of(ctx: DetectionContext, index: int) -> tuple[str | None, Any]:
    """(tool name, arguments) of the TOOL message ``ctx.messages[index]``: the result's own when it
    has them, else the assistant call it answers."""
    result = ctx.messages[index].tool_result
    name, arguments = assistant_call(ctx, index, result)
    if result is not None and result.arguments is not None:
        arguments = result.arguments
    return (result.name if result is not None and result.name else None) or name, arguments


def _query_key(key: str) -> bool:
    return any(word in QUERY_KEY_WORDS or word.startswith(QUERY_KEY_PREFIXES) for word in name_words(key))


def is_query_call(tool: str | None, arguments: Any) -> bool:
    """A query: a query-like argument with a value, or a search-verb tool called with arguments."""
    arguments = as_arguments(arguments)
    if isinstance(arguments, dict):
        for key, value in list(arguments.items())[:64]:
            if isinstance(key, str) and _query_key(key) and has_value(value):
                return True
            nested = (
                isinstance(value, dict) and isinstance(key, str) and key.lower() in ("params", "parameters")
            )
            if nested and any(
                isinstance(k, str) and _query_key(k) and has_value(v) for k, v in value.items()
            ):
                return True
    return bool(tool and has_value(arguments) and set(name_words(tool)) & SEARCH_NAME_WORDS)


def as_arguments(value: Any) -> Any:
    """Arguments as a value: JSON text parsed, anything else as given."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("{", "[") and len(stripped) <= 1_000_000:
            try:
                return orjson.loads(stripped)
            except orjson.JSONDecodeError:
                return value
    return value


def has_value(value: Any) -> bool:
    if value is None or value is False:
        return False
    if isinstance(value, str | list | dict | tuple):
        return len(value) > 0 and (not isinstance(value, str) or bool(value.strip()))
    return True


def name_words(name: str) -> list[str]:
    """``searchTerm`` / ``search_term`` / ``search-term`` → ["search", "term"]."""
    spaced = "".join(f" {ch}" if ch.isupper() else ch for ch in name[:200])
    return normalise(spaced).split()


def leaf_key_words(path: str) -> list[str]:
    """The words of an argument leaf's own key (:func:`argument_leaves`): ``.filters.maxPrice`` →
    ["max", "price"]; ``.amenities[]`` → ["amenities"]."""
    return name_words(path.rsplit(".", 1)[-1])


def canonical_arguments(arguments: Any) -> str | None:
    """Canonical JSON of a call's arguments (keys sorted); None when they were not captured."""
    if arguments is None:
        return None
    value = as_arguments(arguments)
    if isinstance(value, str):
        value = value.strip()
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):
        return repr(value)


def shown_arguments(canonical: str | None) -> str | None:
    if canonical is None:
        return None
    return canonical if len(canonical) <= ARGS_CHARS else canonical[: ARGS_CHARS - 1] + "…"


def is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def argument_leaves(value: Any, path: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Flattened arguments: ``.filters.city`` → value; a list of scalars is one leaf, a frozenset
    (``.amenities[]``), so dropping an item is a change of that leaf, not of every later index."""
    out = {} if out is None else out
    if len(out) >= 64:
        return out
    if isinstance(value, dict):
        for key in sorted(value, key=str)[:64]:
            argument_leaves(value[key], f"{path}.{key}", out)
    elif isinstance(value, list) and value and all(is_scalar(item) for item in value):
        out[f"{path}[]"] = frozenset(str(item) for item in value[:64])
    elif isinstance(value, list) and value and len(value) <= 64:
        for position, item in enumerate(value):
            argument_leaves(item, f"{path}[{position}]", out)
    else:
        out[path] = value
    return out


def argument_words(text: str) -> list[str]:
    return [word for word in normalise(text[:ARGS_KEPT]).split() if word not in ARGUMENT_STOP_WORDS]


def is_identifier(word: str) -> bool:
    """Numbers, ids, dates, codes: two of them are different items, however alike they look."""
    return any(ch.isdigit() for ch in word)


def same_word(a: str, b: str) -> bool:
    """A typo or inflection of the same word: one edit apart (insertion, deletion, substitution or
    swap of neighbours: paris/pariss, restaurant/restaurants, sna/san) when the shorter has ≥ 4
    letters; in shorter words only an added or dropped letter (jon/john), since one other letter in
    a short word is usually another word (jan/jun, red/bed). Numbers and ids never match."""
    if a == b:
        return True
    if is_identifier(a) or is_identifier(b) or min(len(a), len(b)) < 3:
        return False
    if OSA.distance(a, b, score_cutoff=1) > 1:
        return False
    return min(len(a), len(b)) >= 4 or len(a) != len(b)
