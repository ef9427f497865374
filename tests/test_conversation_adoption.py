"""A resent history's copies of messages the conversation holds give way to the conversation's own
messages (conversation._adopt), read through the real OTel GenAI reader and history cache."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import orjson
import pytest

from otelsignals.compaction import is_compacted, stored_message_text
from otelsignals.conventions.base import SpanReading, SpanView
from otelsignals.conventions.genai import GENAI_READER
from otelsignals.conversation import ConversationState, apply_trace
from otelsignals.limits import TextLimits, cap_reading

_span_ids = itertools.count(1)
DETAILS = " with every detail the planner asked for, written out in full." * 2  # long: shared text


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "parts": [{"type": "text", "content": text}]}


def chat(
    state: ConversationState,
    history: list[dict[str, Any]],
    answer: str | dict[str, Any],
    system: str | None = None,
    limits: TextLimits | None = None,
) -> tuple[SpanView, SpanReading]:
    """A chat span read as the analyzer reads it: through the conversation's history cache."""
    span_id = next(_span_ids)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": orjson.dumps(history).decode(),
        "gen_ai.output.messages": orjson.dumps(
            [assistant(answer) if isinstance(answer, str) else answer]
        ).decode(),
    }
    if system is not None:
        attributes["gen_ai.system_instructions"] = orjson.dumps(
            [{"type": "text", "content": system}]
        ).decode()
    view = SpanView(
        trace_id=b"\x01" * 16,
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=b"",
        start_time_unix_nano=span_id,
        end_time_unix_nano=span_id + 1,
        attributes=attributes,
    )
    view.histories = state.decoder_memory.histories
    reading = GENAI_READER.read(view)
    assert reading is not None
    if limits is not None:
        cap_reading(reading, limits, Counter())
    return view, reading


def positions_held(state: ConversationState, messages: list[Any]) -> list[int | None]:
    """For each of ``messages``: the position in the conversation of that very object, if any."""
    at = {id(message): position for position, message in enumerate(state.conversation.messages)}
    return [at.get(id(message)) for message in messages]


def remembered_histories(state: ConversationState) -> list[list[Any]]:
    memory = state.decoder_memory.histories
    return [history.messages for histories in memory._last.values() for history in histories]


def test_an_answer_repeated_word_for_word_is_adopted_at_its_own_position():
    """Every answer is the same text (one string object, shared): each copy still pairs with the
    answer at its own place, so every slot holds the conversation's message at that position."""
    state = ConversationState.new("c")
    same = "I could not find that order; please check the number." + DETAILS
    history = [user("where is order 1?")]
    apply_trace(state, b"t1", [chat(state, history, same)])
    for turn in range(2, 6):
        history += [assistant(same), user(f"where is order {turn}?")]
        apply_trace(state, b"t%d" % turn, [chat(state, history, same)])
    assert state.last_inputs is not None
    expected = list(range(len(history)))
    assert positions_held(state, state.last_inputs.messages) == expected
    assert positions_held(state, remembered_histories(state)[0]) == expected
    ids = [id(message) for message in state.conversation.messages]
    assert len(ids) == len(set(ids))


def test_a_history_that_no_longer_aligns_does_not_show_a_message_twice():
    """Another agent's exchange in the same conversation, longer than the latest messages a resent
    history may leave out (conversation._OMITTED_LATEST), breaks the alignment: the first agent's
    next history is shown again whole, and the messages the cache hands back are copied, not reused."""
    state = ConversationState.new("c")
    first = [user("plan the trip to Lisbon")]
    apply_trace(state, b"t1", [chat(state, first, "Day one" + DETAILS)])
    first += [assistant("Day one" + DETAILS), user("add a day in Sintra")]
    apply_trace(state, b"t2", [chat(state, first, "Day two" + DETAILS)])
    other = [user("book the hotel in Lisbon"), assistant("Which dates?"), user("May 3 to 5")]
    apply_trace(state, b"t3", [chat(state, other, "Booked" + DETAILS)])
    first += [assistant("Day two" + DETAILS), user("and a day in Porto")]
    apply_trace(state, b"t4", [chat(state, first, "Day three" + DETAILS)])
    messages = state.conversation.messages
    assert len(messages) == 14
    assert len({id(message) for message in messages}) == len(messages)
    # The first answer shown again is a copy with a text of its own: one string held by both messages
    # would keep either from being compacted.
    assert messages[9].content == messages[1].content
    assert stored_message_text(messages[9]) is not stored_message_text(messages[1])


def test_a_system_prompt_put_in_front_keeps_the_retries_on_the_right_messages():
    state = ConversationState.new("c")
    history: list[dict[str, Any]] = []
    for turn in range(20):
        history.append(user(f"question {turn}: where did the parcel go after the depot?" + DETAILS))
        apply_trace(state, b"t%d" % turn, [chat(state, history, f"answer {turn}" + DETAILS)])
        history.append(assistant(f"answer {turn}" + DETAILS))
    held_message = state.conversation.messages[10]
    holder = [held_message.content]  # as the phrase detectors' cache of recent texts would
    state.compact(30)
    assert not is_compacted(held_message)
    history.append(user("one more question" + DETAILS))
    apply_trace(
        state, b"late", [chat(state, history, "ok" + DETAILS, system="You are the planner." + DETAILS)]
    )
    assert state.conversation.messages[0].role.value == "system"  # every message moved by one
    holder.clear()
    state.compact(32)
    assert is_compacted(held_message)


@pytest.mark.parametrize("kept", [10, 40])
def test_copies_are_adopted_when_only_the_latest_messages_were_read(kept: int):
    """The span limits cut a long history to its latest messages: the copies still give way in the
    history cache, which holds the whole history (also when the messages read hold more long texts
    than the recent-text cache keeps)."""
    limits = TextLimits(max_messages_per_span=kept)
    state = ConversationState.new("c")
    history: list[dict[str, Any]] = []
    for turn in range(30):
        history.append(user(f"question {turn}" + DETAILS))
        apply_trace(state, b"t%d" % turn, [chat(state, history, f"answer {turn}" + DETAILS, limits=limits)])
        history.append(assistant(f"answer {turn}" + DETAILS))
    cached = remembered_histories(state)[0]
    answers = [message for message in cached if message.role.value == "assistant"]
    assert len(answers) == 29
    assert None not in positions_held(state, answers)


def test_later_calls_of_a_trace_read_with_or_without_a_system_prompt_still_extend_the_split():
    """The calls of one trace are read before any is merged; a later one that does not read the
    system prompt from its attribute holds the copies one position earlier: they give way there too,
    and its history is split for its new part only."""
    system = "You are the support agent of Acme." + DETAILS
    state = ConversationState.new("c")
    first = [user("where is my order 1234?")]
    apply_trace(state, b"t1", [chat(state, first, "answer 1" + DETAILS, system=system)])
    second = [*first, assistant("answer 1" + DETAILS), user("and order 5678?")]
    third = [*second, assistant("answer 2" + DETAILS), user("thanks, and 9999?")]
    split_before = state.last_inputs
    assert split_before is not None
    apply_trace(
        state,
        b"t2",
        [chat(state, second, "answer 2" + DETAILS, system=system), chat(state, third, "answer 3" + DETAILS)],
    )
    assert state.last_inputs is not None and state.last_inputs.body is split_before.body  # extended
    assert [m.role.value for m in state.conversation.messages] == ["system"] + ["user", "assistant"] * 3


def test_a_sub_agent_repeating_the_users_text_leaves_the_main_history_on_its_own_messages():
    """One trace: a sub-agent's calls and the main agent's, the user's long text said twice. A
    sub-agent merge pairs the user's earlier message with the newer one that reads the same; that
    holds at the sub-agent history's positions only, and the main agent's later history, caught up
    before its own merge, keeps the conversation's messages at its own positions."""

    def tool_call(call_id: str) -> dict[str, Any]:
        return {"role": "assistant", "parts": [{"type": "tool_call", "id": call_id, "name": "search"}]}

    def tool_result(call_id: str, text: str) -> dict[str, Any]:
        return {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": text}]}

    state = ConversationState.new("c")
    again = "continue" + DETAILS  # the same long text said twice by the user
    main = [
        user("question 0" + DETAILS),
        tool_call("c0"),
        tool_result("c0", "r0" + DETAILS),
        assistant("the order shipped" + DETAILS),
        user("question 1" + DETAILS),
        user(again),
        tool_call("c2"),
        tool_result("c2", "r2" + DETAILS),
    ]
    sub = [user("sub task" + DETAILS), assistant("the order shipped" + DETAILS), user(again)]
    apply_trace(state, b"t1", [chat(state, [user("sub task" + DETAILS)], "the order shipped" + DETAILS)])
    apply_trace(state, b"t2", [chat(state, main, "ok" + DETAILS)])
    calls = [
        chat(state, sub, "ok" + DETAILS),
        chat(state, [*main[4:], assistant("ok" + DETAILS), user(again)], tool_call("c4")),
        chat(state, sub, "no results" + DETAILS),
        chat(state, main, tool_call("c5")),  # the main agent, its whole history
    ]
    apply_trace(state, b"t3", calls)
    held = positions_held(state, calls[-1][1].input_messages)
    assert held == list(range(2, 2 + len(main)))  # each slot: the conversation's message there
    messages = state.conversation.messages
    assert len({id(message) for message in messages}) == len(messages)
