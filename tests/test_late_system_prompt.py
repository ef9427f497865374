"""A system prompt that comes late (first seen in the second trace's history) is put in front of the
messages held, so every message number moves on by one: what the analysis remembers by number
(detector memory, the latest signals) must move with it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from otelsignals.analysis import analyze_update
from otelsignals.conventions.base import SpanReading
from otelsignals.conversation import ConversationState, apply_trace
from otelsignals.model import LlmCall, Message, RecentList, Role, ToolCall, ToolResult
from otelsignals.signals.base import MESSAGE_NUMBER_METADATA_KEYS, moved_numbers
from otelsignals.signals.detect import REBUILT_WHEN_MISSING, is_numbered, renumber_memory
from tests.corpus import BLIND_DIR, HELDOUT_DIR, CorpusConversation, load_corpus
from tests.corpus_eval import chunks
from tests.test_conversation import SYSTEM, view

_SAME_ANSWER = (
    "I could not find a booking under that reference. Please check the six characters of the "
    "reference and send them again, and I will look the booking up once more."
)
# The user asks for a person after the agent repeated itself, and is handed over, all in the first
# trace: the hand-off's request_index and the repetition's similar_to point back into it.
HANDED_OVER = CorpusConversation(
    id="late-prompt-handover",
    domain="travel",
    informative=True,
    messages=[
        Message(Role.USER, "Can you move my flight, booking QX7R2P, to Friday?"),
        Message(Role.ASSISTANT, _SAME_ANSWER),
        Message(Role.USER, "The reference is QX7R2P, as I wrote."),
        Message(Role.ASSISTANT, _SAME_ANSWER),
        Message(Role.USER, "Let me speak to a human agent, please."),
        Message(
            Role.ASSISTANT,
            None,
            tool_calls=[ToolCall(id="h1", name="transfer_to_human_agents", arguments={})],
        ),
        Message(
            Role.TOOL,
            "queued",
            tool_result=ToolResult(call_id="h1", name="transfer_to_human_agents", content="queued"),
        ),
        Message(Role.ASSISTANT, "You are in the queue for a colleague now."),
        Message(Role.USER, "ok"),
        Message(Role.ASSISTANT, "Anything else while you wait?"),
        Message(Role.USER, "No."),
        Message(Role.ASSISTANT, "Alright."),
        Message(Role.USER, "Still waiting."),
        Message(Role.ASSISTANT, "A colleague will be with you shortly."),
    ],
    llm_calls=[],
    expected=[],
)
CORPUS = [*load_corpus(), *load_corpus(HELDOUT_DIR), *load_corpus(BLIND_DIR), HANDED_OVER]


def _signal_rows(signals: Any, moved_by: int = 0) -> list[tuple[str, int, str]]:
    """(type, number, metadata) of each signal, its numbers moved on by ``moved_by``."""
    return sorted(
        (
            s.type,
            s.message_index + moved_by,
            repr(
                sorted(
                    (key, moved_numbers(value, moved_by) if key in MESSAGE_NUMBER_METADATA_KEYS else value)
                    for key, value in s.metadata.items()
                )
            ),
        )
        for s in signals
    )


def _trace_ends(entry: CorpusConversation) -> list[int]:
    """Where each trace's history ends: the first trace holds the first half of the chunks
    (tests/corpus_eval.chunks: one per user turn), so that it has signals that point back at earlier
    messages; then one trace per chunk."""
    body = [m for m in entry.messages if m.role is not Role.SYSTEM]
    ends = [end for _, end in chunks(dataclasses.replace(entry, messages=body))]
    return ends[len(ends) // 2 - 1 :]


def _delivered(
    entry: CorpusConversation, prompt_late: bool, max_messages: int = 0
) -> tuple[list[Any], ConversationState]:
    """``entry`` sent as one chat span per trace (:func:`_trace_ends`) resending the whole history,
    with a system prompt from the first trace on, or only from the second on; trimmed after each
    trace to ``max_messages`` as the analyzer trims (0: never). Returns each trace's new signals,
    numbered as the conversation numbers them at its end, and the state."""
    body = [m for m in entry.messages if m.role is not Role.SYSTEM]
    state = ConversationState.new(entry.id)
    per_trace = []
    for number, end in enumerate(_trace_ends(entry)):
        before_prompt = prompt_late and number == 0
        history = body[:end] if before_prompt else [SYSTEM, *body[:end]]
        span = view(10 * (number + 1))
        reading = SpanReading("test", history, [], llm_call=LlmCall(span.span_id))
        update = apply_trace(state, bytes([number + 1]) * 16, [(span, reading)])
        assert update.put_in_front == (1 if prompt_late and number == 1 else 0)
        if max_messages:
            trimmed = state.trim(max_messages)
            update.first_new_message = max(0, update.first_new_message - trimmed)
        signals = analyze_update(state, update).new_signals
        per_trace.append(_signal_rows(signals, 1 if before_prompt else 0))
    return per_trace, state


def _numbered_memory(state: ConversationState) -> dict[str, Any]:
    return {key: value for key, value in state.detector_memory.items() if is_numbered(key)}


@pytest.mark.parametrize("entry", [e for e in CORPUS if len(_trace_ends(e)) > 1], ids=lambda e: e.id)
def test_a_system_prompt_that_comes_late_leaves_every_signal_and_number_as_if_it_came_first(entry):
    early, early_state = _delivered(entry, prompt_late=False)
    late, late_state = _delivered(entry, prompt_late=True)
    assert [m.content for m in late_state.conversation.messages] == [
        m.content for m in early_state.conversation.messages
    ]
    assert late == early
    assert _signal_rows(late_state.recent_signals) == _signal_rows(early_state.recent_signals)
    assert _numbered_memory(late_state) == _numbered_memory(early_state)


@pytest.mark.parametrize("entry", [e for e in CORPUS if len(_trace_ends(e)) > 2], ids=lambda e: e.id)
def test_a_system_prompt_that_comes_late_with_a_trim_in_the_same_trace_changes_nothing(entry):
    """The prompt comes with the second trace, which is also trimmed at sessions.max_messages (set
    so that the first trace fits: both deliveries then hold the same messages from the second trace
    on). The detectors' latest messages of a role were dropped and seeded again from the kept
    messages only: a rephrase of a trimmed user message went unseen (one corpus conversation)."""
    max_messages = _trace_ends(entry)[0] + 2
    early, early_state = _delivered(entry, prompt_late=False, max_messages=max_messages)
    late, late_state = _delivered(entry, prompt_late=True, max_messages=max_messages)
    assert late == early
    assert _signal_rows(late_state.recent_signals) == _signal_rows(early_state.recent_signals)
    assert _numbered_memory(late_state) == _numbered_memory(early_state)


def test_the_corpus_exercises_what_the_renumbering_moves():
    """Without numbers to move, before the prompt and after it, the test above could not fail."""
    before: set[str] = set()  # metadata keys that hold message numbers, in the first trace's signals
    after = moved_memory = 0
    for entry in CORPUS:
        early, state = _delivered(entry, prompt_late=False)
        before |= {key for row in early[0] for key in MESSAGE_NUMBER_METADATA_KEYS if f"'{key}'" in row[2]}
        after += any("similar_to" in row[2] for rows in early[1:] for row in rows)
        moved_memory += any(isinstance(v, int) and v > 0 for v in _numbered_memory(state).values())
    assert before == MESSAGE_NUMBER_METADATA_KEYS and after >= 10 and moved_memory >= 100


@pytest.mark.parametrize(
    ("value", "moved"),
    [
        (7, 8),
        (0, 1),
        (-1, -1),  # no message: "before the messages kept"
        (None, None),
        ([3, 5], [4, 6]),
        ([], []),
        ((4, ["refund", "order"]), (5, ["refund", "order"])),
        ("text", "text"),
        (True, True),  # a flag, not a number
    ],
)
def test_a_remembered_message_number_moves_on_and_what_is_not_one_stays(value, moved):
    assert moved_numbers(value, 1) == moved


def test_renumbering_moves_declared_numbers_and_the_latest_messages_drops_caches_and_leaves_the_rest():
    rebuilt = sorted(REBUILT_WHEN_MISSING)
    latest = RecentList[tuple[int, list[str]]](3)
    latest.extend([(2, ["a"]), (5, ["b"])])
    memory: dict[str, Any] = {
        "execution.loops.retry:next": 12,
        "environment.exhaustion.timeout:emitted": [3, 9],
        "rephrase.task": (1, ["cancel"]),
        "interaction.first_reply": -1,  # before the messages kept: stays
        "dragging.user_turns": 4,  # a count, not a message number
        "execution.loops.retry:state": {"run": 2},
        rebuilt[0]: ["prepared"],  # not a list of numbered entries: a cache, dropped
        rebuilt[1]: latest,
    }
    renumber_memory(memory, 1)
    assert memory == {
        "execution.loops.retry:next": 13,
        "environment.exhaustion.timeout:emitted": [4, 10],
        "rephrase.task": (2, ["cancel"]),
        "interaction.first_reply": -1,
        "dragging.user_turns": 4,
        "execution.loops.retry:state": {"run": 2},
        rebuilt[1]: [(3, ["a"]), (6, ["b"])],
    }
    assert memory[rebuilt[1]] is latest and latest.maxlen == 3  # moved in place
