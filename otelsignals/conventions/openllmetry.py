"""OpenLLMetry (traceloop) legacy indexed attributes, and its tool spans.

Sources checked (traceloop/openllmetry):
- ``packages/opentelemetry-instrumentation-openai/.../shared/chat_wrappers.py`` (``_set_prompts``,
  ``_set_completions``): ``gen_ai.prompt.{i}.role|content|tool_call_id``,
  ``gen_ai.prompt.{i}.tool_calls.{j}.id|name|arguments``, ``gen_ai.completion.{i}.role|content|
  finish_reason|refusal|tool_calls.{j}.*``; a list-valued content is written as a JSON string; a
  legacy ``function_call`` is written as ``tool_calls.0``. Before the move to ``gen_ai.*`` the
  prefixes were ``llm.prompts`` / ``llm.completions``.
- ``packages/opentelemetry-instrumentation-anthropic/.../span_utils.py``: content lists (JSON) with
  ``tool_result`` / ``tool_use`` blocks; ``gen_ai.prompt.0.user`` for the legacy completion API;
  thinking written as its own completion with role ``thinking`` (which takes the finish reason).
- ``packages/traceloop-sdk`` decorators: ``traceloop.span.kind`` (workflow/task/agent/tool),
  ``traceloop.entity.name``, ``traceloop.entity.input = json({"args": [...], "kwargs": {...}})``,
  ``traceloop.entity.output = json(result)``; the LangChain callback handler writes tool spans as
  ``{"input_str", "inputs", "tags", "metadata", "kwargs"}`` → ``{"output", "kwargs"}``.
- ``llm.request.type``: chat / completion / embedding / rerank.

Workflow, task and agent spans carry no messages of their own (the model spans under them do), so
they are not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from otelsignals.conventions.base import (
    SpanReading,
    SpanView,
    ToolExecution,
    llm_call_of,
    parse_json,
    tool_result_of,
)
from otelsignals.conventions.genai import (
    arguments_of,
    content_blocks,
    has_content,
    id_of,
    join_text,
    link_tool_names,
    name_of,
    role_of,
    text_of,
    tool_call_of,
    tool_calls_of,
    tool_message,
)
from otelsignals.model import LlmCall, Message, Role, ToolCall

PROMPT_PREFIXES = ("gen_ai.prompt.", "llm.prompts.")
COMPLETION_PREFIXES = ("gen_ai.completion.", "llm.completions.")
# The history namespace (base.Histories) of the prompt history (completions are new on every call).
PROMPT_HISTORY = "openllmetry:gen_ai.prompt"
SPAN_KIND = "traceloop.span.kind"
OPENINFERENCE_SPAN_KIND = "openinference.span.kind"
ENTITY_NAME = "traceloop.entity.name"
ENTITY_INPUT = "traceloop.entity.input"
ENTITY_OUTPUT = "traceloop.entity.output"
REQUEST_TYPE = "llm.request.type"
MODEL_REQUEST_TYPES = frozenset({"chat", "completion"})
NOT_CONVERSATION_REQUEST_TYPES = frozenset({"embedding", "rerank"})
# Token counts under their pre-semconv names, read when the current ones are absent.
LEGACY_INPUT_TOKENS = ("gen_ai.usage.prompt_tokens", "llm.usage.prompt_tokens")
LEGACY_OUTPUT_TOKENS = ("gen_ai.usage.completion_tokens", "llm.usage.completion_tokens")


# -- indexed attributes -----------------------------------------------------------------------
def _index(text: str) -> int | None:
    # ASCII digits only: str.isdigit() accepts characters such as "²" that int() rejects.
    return int(text) if text.isascii() and text.isdigit() else None


def _indexed_entries(span: SpanView, groups: tuple[tuple[str, ...], ...]) -> list[list[dict[str, Any]]]:
    """Per group of prefixes, the ``{prefix}{i}.{field}`` attributes grouped per index ``i`` and sorted
    numerically (indexes may be sparse or arrive in any order); ``tool_calls.{j}.{field}`` become
    ``entry["tool_calls"][j]``. A span resending a long history
    has hundreds of them, the same keys every call: what a key means is worked out once
    (:func:`_slot`), and the entries of attributes an earlier span of the conversation had too are
    that span's (SpanView.indexed_groups)."""
    keys = _IndexedKeys(groups)
    return span.indexed_groups(f"openllmetry:{groups}", len(groups), keys.locate, keys.fill)


class _IndexedKeys:
    """What the indexed keys of ``groups`` mean, for SpanView.indexed_groups. A class rather than
    closures over each other: compiled (native.py), closures that call each other form a reference
    cycle on every call, which only the cyclic collector frees (tests/test_gc_policy.py)."""

    def __init__(self, groups: tuple[tuple[str, ...], ...]) -> None:
        self.groups = groups
        self.every = tuple(prefix for prefixes in groups for prefix in prefixes)

    def slot_of(self, key: str) -> tuple[int, int, str, str, int] | None:
        if not key.startswith(self.every):
            return None
        # Only keys of a sensible length are memoised: the memo must not keep huge strings alive.
        return _slot(key, self.groups) if len(key) <= MAX_MEMO_KEY else _slot.__wrapped__(key, self.groups)

    def locate(self, key: str) -> tuple[int, int] | None:
        slot = self.slot_of(key)
        return None if slot is None else (slot[0], slot[1])

    def fill(self, entry: dict[str, Any], key: str, value: Any) -> None:
        _, _, kind, field, call_index = self.slot_of(key)  # type: ignore[misc]  # located: not None
        if kind == _FIELD:
            entry[field] = value
        elif kind == _CALL_FIELD:
            entry.setdefault("tool_calls", {}).setdefault(call_index, {})[field] = value
        elif kind == _FUNCTION_CALL_FIELD:
            entry.setdefault("function_call", {})[field] = value
        elif kind == _CALLS_VALUE:
            entry["tool_calls_value"] = value  # the whole list as one JSON attribute


MAX_MEMO_KEY = 256
# What an indexed key sets in its entry (_NOTHING: a malformed tool call key, which still makes
# the index exist).
_FIELD, _CALL_FIELD, _FUNCTION_CALL_FIELD, _CALLS_VALUE, _NOTHING = "field", "call", "function", "calls", ""


@lru_cache(maxsize=1 << 14)
def _slot(key: str, groups: tuple[tuple[str, ...], ...]) -> tuple[int, int, str, str, int] | None:
    """(group, index, kind, field, tool call index) of an indexed key, or None when it is not one."""
    matched = next(
        (
            (group, prefix)
            for group, prefixes in enumerate(groups)
            for prefix in prefixes
            if key.startswith(prefix)
        ),
        None,
    )
    if matched is None:
        return None
    group, prefix = matched
    index_text, _, field = key[len(prefix) :].partition(".")
    index = _index(index_text)
    if index is None or not field:
        return None
    if field.startswith("tool_calls."):
        call_text, _, call_field = field[len("tool_calls.") :].partition(".")
        call_index = _index(call_text)
        if call_index is not None and call_field:
            return group, index, _CALL_FIELD, call_field, call_index
        return group, index, _NOTHING, "", 0
    if field.startswith("function_call."):
        return group, index, _FUNCTION_CALL_FIELD, field[len("function_call.") :], 0
    if field == "tool_calls":
        return group, index, _CALLS_VALUE, "", 0
    return group, index, _FIELD, field, 0


def _indexed_calls(entry: Mapping[str, Any]) -> list[ToolCall]:
    calls = entry.get("tool_calls")
    if isinstance(calls, dict):
        return [tool_call_of(calls[j]) for j in sorted(calls)]
    function_call = entry.get("function_call")
    if isinstance(function_call, dict) and function_call:
        return [tool_call_of(function_call)]
    return tool_calls_of(entry["tool_calls_value"]) if "tool_calls_value" in entry else []


def _content(value: Any) -> tuple[str | None, list[Mapping[str, Any]]]:
    """(visible text, content blocks) of a content attribute: a plain string, or a JSON list of
    OpenAI / Anthropic content parts whose text parts are joined."""
    blocks = content_blocks(value)
    if blocks is None:
        return text_of(value), []
    return join_text(blocks), blocks


def prompt_messages(entry: Mapping[str, Any], span_id: bytes) -> list[Message]:
    role = role_of(entry.get("role"))
    content = entry.get("content")
    if content is None and "user" in entry:
        content, role = entry["user"], role or Role.USER  # legacy completion API: gen_ai.prompt.0.user
    text, blocks = _content(content)
    call_id = id_of(entry.get("tool_call_id"))
    if role is Role.TOOL or call_id is not None:
        return [tool_message(span_id, call_id, name_of(entry.get("name")), text)]
    calls = _indexed_calls(entry) or [tool_call_of(b) for b in blocks if b.get("type") == "tool_use"]
    # Anthropic sends tool results as tool_result blocks inside a user message; they come first.
    messages = [
        tool_message(span_id, id_of(b.get("tool_use_id")), None, text_of(b.get("content"), json_parts=True))
        for b in blocks
        if b.get("type") == "tool_result"
    ]
    if text is not None or calls or not messages:
        messages.append(Message(role or Role.USER, content=text, tool_calls=calls, span_id=span_id))
    return messages


def prompt_history(entries: list[dict[str, Any]], span: SpanView) -> list[Message]:
    """The messages of the prompt entries, one position of the history per entry."""
    span_id = span.span_id
    return span.histories.indexed(PROMPT_HISTORY, entries, lambda entry: prompt_messages(entry, span_id))


def completion_messages(entries: list[dict[str, Any]], span_id: bytes) -> list[Message]:
    messages: list[Message] = []
    carried_finish: str | None = None
    for entry in entries:
        finish = name_of(entry.get("finish_reason"))
        if entry.get("role") == "thinking":
            # Anthropic's reasoning: not shown to the user. Its finish reason belongs to the answer.
            carried_finish = carried_finish or finish
            continue
        content = entry.get("content")
        text, blocks = _content(content if content is not None else entry.get("refusal"))
        calls = _indexed_calls(entry) or [tool_call_of(b) for b in blocks if b.get("type") == "tool_use"]
        role = role_of(entry.get("role")) or Role.ASSISTANT
        messages.append(
            Message(
                role, content=text, tool_calls=calls, span_id=span_id, finish_reason=finish or carried_finish
            )
        )
        carried_finish = None
    return messages


def _first_int(span: SpanView, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = span.attribute_int(key)
        if value is not None:
            return value
    return None


def model_call_of(span: SpanView) -> LlmCall:
    call = llm_call_of(span)
    if call.input_tokens is None:
        call.input_tokens = _first_int(span, LEGACY_INPUT_TOKENS)
    if call.output_tokens is None:
        call.output_tokens = _first_int(span, LEGACY_OUTPUT_TOKENS)
    return call


# -- tool spans -------------------------------------------------------------------------------
def entity_arguments(raw: Any) -> Any:
    """The tool's arguments from ``traceloop.entity.input``."""
    parsed = parse_json(raw)
    if isinstance(parsed, dict) and "input_str" in parsed:  # LangChain callback handler
        inputs = parsed.get("inputs")
        return inputs if inputs is not None else arguments_of(parsed["input_str"])
    if isinstance(parsed, dict) and parsed and parsed.keys() <= {"args", "kwargs"}:  # SDK decorators
        args = parsed.get("args") if isinstance(parsed.get("args"), list) else []
        kwargs = parsed.get("kwargs") if isinstance(parsed.get("kwargs"), dict) else {}
        if not args:
            return kwargs
        if not kwargs and len(args) == 1:
            return args[0]
        return {"args": args, "kwargs": kwargs}
    return parsed if isinstance(parsed, dict | list) else raw


def entity_output(raw: Any) -> Any:
    """The tool's result from ``traceloop.entity.output`` (``json.dumps(result)``, so a string result
    arrives quoted)."""
    parsed = parse_json(raw)
    if isinstance(parsed, dict) and "output" in parsed and parsed.keys() <= {"output", "kwargs"}:
        return parsed["output"]  # LangChain callback handler
    return parsed


def tool_reading(span: SpanView, convention: str) -> SpanReading:
    attributes = span.attributes
    name = span.attribute_str(ENTITY_NAME) or span.name.removesuffix(".tool") or None
    call_id = id_of(attributes.get("gen_ai.tool.call.id"))
    raw_input, raw_output = attributes.get(ENTITY_INPUT), attributes.get(ENTITY_OUTPUT)
    execution = ToolExecution(
        name=name,
        call_id=call_id,
        arguments=None if raw_input is None else entity_arguments(raw_input),
        result=tool_result_of(span, None if raw_output is None else entity_output(raw_output), call_id, name),
    )
    return SpanReading(
        convention=convention,
        tool_execution=execution,
        content_captured=raw_input is not None or raw_output is not None,
    )


class OpenLlmetryReader:
    name = "openllmetry"
    key_prefixes: tuple[str, ...] = ("gen_ai.", "llm.", "traceloop.")

    def read(self, span: SpanView) -> SpanReading | None:
        if span.attribute_str(SPAN_KIND) == "tool":
            return tool_reading(span, self.name)
        if span.attribute_str(OPENINFERENCE_SPAN_KIND) is not None:
            # OpenInference's completions spans write llm.prompts.N.prompt.text, under the prefix of
            # OpenLLMetry's legacy prompts: its own reader reads them (read here, the text was lost).
            return None
        request_type = span.attribute_str(REQUEST_TYPE)
        if request_type in NOT_CONVERSATION_REQUEST_TYPES:
            return None  # embedding inputs are recorded as gen_ai.prompt.{i}.content too
        prompts, completions = _indexed_entries(span, (PROMPT_PREFIXES, COMPLETION_PREFIXES))
        if not prompts and not completions and request_type not in MODEL_REQUEST_TYPES:
            return None
        inputs = prompt_history(prompts, span)
        outputs = completion_messages(completions, span.span_id)
        link_tool_names(inputs + outputs)
        return SpanReading(
            convention=self.name,
            input_messages=inputs,
            output_messages=outputs,
            llm_call=model_call_of(span),
            content_captured=has_content(inputs) or has_content(outputs),
        )


OPENLLMETRY_READER = OpenLlmetryReader()
