"""Datasets from the conversation index: the triaged conversations as data for the next model.

``otelsignals export`` selects indexed conversations (``flagged``, ``excellent``, ``priority>=X``,
optionally a time range and signals) and writes JSON lines in one of three shapes:

- ``openai-chat``: one conversation per line as OpenAI's chat fine-tuning format expects it,
  ``{"messages": [{"role", "content", "tool_calls": [{"id", "type": "function", "function":
  {"name", "arguments"}}], "tool_call_id"}]}``, for supervised sets (select the excellent ones);
- ``preference``: unpaired preference examples, one per assistant answer the user reacted to, in the
  shape TRL's KTO trainer reads: ``{"prompt": [messages before the answer], "completion": [the
  answer], "label": true|false, "reason": the reaction's signal, "session_id"}``. An answer followed
  by a correction, a rephrase, frustration, a request for a person or giving up is undesirable; one
  followed by thanks, a confirmation or "that worked" is desirable; answers with no reaction are left
  out. Model-free, like the signals it comes from;
- ``hf``: one flat record per conversation for failure analysis with ``datasets.load_dataset("json",
  data_files=…)``: the messages, the signals, the scores, the priority and its reasons, the counts and
  the session metrics (outcome fields), the trace ids.

Text must have been kept (``index.content``): conversations indexed without it are skipped and
counted, and when none of the matching ones has it the command says so and exits 2.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson

from otelsignals.signals import taxonomy as tx
from otelsignals.stores.conversation_index import ConversationFilter, ConversationIndex, IndexedConversation

FORMATS = ("openai-chat", "preference", "hf")
# A reaction in the next user message that makes the answer before it undesirable, or desirable.
UNDESIRABLE = frozenset(
    [tx.CORRECTION, tx.REPHRASE, tx.CLARIFICATION, tx.NEGATIVE_STANCE, tx.ESCALATION, tx.QUIT]
)
DESIRABLE = frozenset([tx.GRATITUDE, tx.CONFIRMATION, tx.SUCCESS])
_PRIORITY = re.compile(r"priority>=(\d+(?:\.\d+)?)")


class ExportError(ValueError):
    """A selection that cannot be exported (bad --select, or conversations kept without text)."""


def selection(select: str) -> ConversationFilter:
    """``flagged``, ``excellent`` or ``priority>=X`` as index conditions."""
    if select == "flagged":
        return ConversationFilter(flagged=True)
    if select == "excellent":
        return ConversationFilter(qualities=("excellent",))
    match = _PRIORITY.fullmatch(select.replace(" ", ""))
    if match:
        return ConversationFilter(min_priority=float(match.group(1)))
    raise ExportError(f"--select must be flagged, excellent or priority>=X, got {select!r}")


def selected(index: ConversationIndex, conditions: ConversationFilter) -> Iterator[IndexedConversation]:
    """Every indexed conversation meeting ``conditions``, highest priority first, page by page."""
    cursor = None
    while True:
        page = index.query(conditions, "-priority", 200, cursor)
        yield from page.items
        cursor = page.next_cursor
        if cursor is None:
            return


def records(item: IndexedConversation, form: str) -> list[dict[str, Any]]:
    """The lines ``item`` gives in format ``form``; raises ExportError when it kept no text."""
    messages = item.detail.get("messages")
    if messages is None:
        raise ExportError(
            f"conversation {item.key!r} was indexed without its text: turn on index.content "
            "(and signals.snippets) to export datasets"
        )
    chat = [chat_message(m) for m in messages]
    if form == "openai-chat":
        return [{"messages": chat}]
    if form == "preference":
        return preference_examples(item, chat)
    if form == "hf":
        return [hf_record(item, chat)]
    raise ExportError(f"--format must be one of {', '.join(FORMATS)}, got {form!r}")


def chat_message(message: dict[str, Any]) -> dict[str, Any]:
    """An indexed message in OpenAI's chat format."""
    role = message["role"]
    out: dict[str, Any] = {"role": role, "content": message.get("content") or ""}
    calls = message.get("tool_calls")
    if role == "assistant" and calls:
        out["tool_calls"] = [
            {
                "id": call.get("id") or f"call_{n}",
                "type": "function",
                "function": {"name": call["name"], "arguments": _arguments(call.get("arguments"))},
            }
            for n, call in enumerate(calls)
        ]
    result = message.get("tool_result")
    if role == "tool" and result is not None:
        out["tool_call_id"] = result.get("call_id") or ""
    return out


def _arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return orjson.dumps(arguments if arguments is not None else {}).decode()


def preference_examples(item: IndexedConversation, chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One example per assistant answer the next user message reacted to (see the module docstring)."""
    offset = int(item.detail.get("message_offset") or 0)
    reactions: dict[int, set[str]] = {}
    for signal in item.detail.get("signals", []):
        reactions.setdefault(int(signal["message_index"]) - offset, set()).add(signal["type"])
    examples = []
    for i, message in enumerate(chat):
        if message["role"] != "user" or i not in reactions:
            continue
        answer = _previous_answer(chat, i)
        if answer is None:
            continue
        bad = sorted(reactions[i] & UNDESIRABLE)
        good = sorted(reactions[i] & DESIRABLE)
        if not bad and not good:
            continue
        examples.append(
            {
                "session_id": item.key,
                "prompt": chat[:answer],
                "completion": [chat[answer]],
                "label": not bad,  # a complaint beside thanks still marks the answer undesirable
                "reason": (bad or good)[0],
            }
        )
    return examples


def _previous_answer(chat: list[dict[str, Any]], user_at: int) -> int | None:
    """The index of the assistant's text answer just before the user message at ``user_at``."""
    for j in range(user_at - 1, -1, -1):
        role = chat[j]["role"]
        if role == "user":
            return None
        if role == "assistant" and chat[j]["content"]:
            return j
    return None


def hf_record(item: IndexedConversation, chat: list[dict[str, Any]]) -> dict[str, Any]:
    detail = item.detail
    offset = int(detail.get("message_offset") or 0)
    return {
        "session_id": item.key,
        "agent_id": item.agent,
        "first_seen": item.first_seen,
        "last_seen": item.last_seen,
        "user_turns": item.turns,
        "quality": item.quality,
        "quality_score": item.quality_score,
        "priority": item.priority,
        "priority_reasons": detail.get("priority_reasons", []),
        "flagged": item.flagged,
        "closed": item.closed,
        "signal_types": list(item.signal_types),
        # JSON text: the keys differ per conversation, which a columnar dataset cannot hold as a struct.
        "counts": orjson.dumps(detail.get("counts", {})).decode(),
        # Numbered within this record's messages: a conversation trimmed at sessions.max_messages
        # keeps its later messages only (message_offset of them came before); a signal on one of
        # those earlier messages is left out (it is in counts).
        "message_offset": offset,
        "signals": [
            {"type": s["type"], "message_index": s["message_index"] - offset, "confidence": s["confidence"]}
            for s in detail.get("signals", [])
            if 0 <= s["message_index"] - offset < len(chat)
        ],
        "session_metrics": [
            {"name": m["name"], "score": m["score"], "passed": m["passed"]}
            for m in detail.get("session_metrics") or []
        ],
        "trace_ids": detail.get("trace_ids", []),
        "messages": [
            {
                "role": m["role"],
                "content": m["content"],
                "tool_calls": orjson.dumps(m.get("tool_calls", [])).decode(),
                "tool_call_id": m.get("tool_call_id", ""),
            }
            for m in chat
        ],
    }


def export(
    index: ConversationIndex, conditions: ConversationFilter, form: str, out: Any
) -> tuple[int, int, int]:
    """Writes the selected conversations to the binary stream ``out``; returns (conversations
    exported, lines, conversations skipped because they were indexed without text). Raises
    ExportError when conversations matched and none had its text."""
    if form not in FORMATS:
        raise ExportError(f"--format must be one of {', '.join(FORMATS)}, got {form!r}")
    conversations = lines = skipped = 0
    for item in selected(index, conditions):
        if item.detail.get("messages") is None:
            skipped += 1  # indexed before index.content was turned on, or with it off
            continue
        for record in records(item, form):
            out.write(orjson.dumps(record) + b"\n")
            lines += 1
        conversations += 1
    if skipped and not conversations:
        raise ExportError(
            f"the {skipped} matching conversations were indexed without their text: turn on "
            "index.content (and signals.snippets) to export datasets"
        )
    return conversations, lines, skipped
