"""Conversation assembly from span readings: history resent, not resent, windowed, late, repeated."""

from __future__ import annotations

import copy as copying
import dataclasses
import gc
import itertools
import json
import pickle
import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import otelsignals.conversation as conversation_module
from otelsignals.conventions.base import SpanReading, SpanView, ToolExecution
from otelsignals.conventions.memory import MeasuredHistory
from otelsignals.conversation import (
    ConversationState,
    agent_id_of,
    apply_trace,
    conversation_key,
)
from otelsignals.model import (
    NO_TOOL_CALLS,
    LlmCall,
    Message,
    RecentIds,
    RecentModelCalls,
    Role,
    ToolCall,
    ToolResult,
)

_ids = itertools.count(1)


def view(start: int, parent: bytes = b"", **attributes) -> SpanView:
    span_id = next(_ids).to_bytes(8, "big")
    return SpanView(
        trace_id=b"\x01" * 16,
        span_id=span_id,
        parent_span_id=parent,
        start_time_unix_nano=start,
        end_time_unix_nano=start + 10,
        attributes=attributes,
    )


def user(text: str) -> Message:
    return Message(Role.USER, text)


def assistant(text: str | None = None, *calls: ToolCall) -> Message:
    return Message(Role.ASSISTANT, text, tool_calls=list(calls))


def tool(call_id: str, text: str) -> Message:
    return Message(Role.TOOL, text, tool_result=ToolResult(call_id=call_id, content=text))


SYSTEM = Message(Role.SYSTEM, "You are the support agent of Acme.")


def chat(start: int, inputs: list[Message], outputs: list[Message], parent: bytes = b""):
    span = view(start, parent)
    return span, SpanReading("test", inputs, outputs, llm_call=LlmCall(span.span_id))


def texts(state: ConversationState) -> list[tuple[str, str | None]]:
    return [(m.role.value, m.content) for m in state.conversation.messages]


def test_history_resent_on_every_call_is_kept_once():
    state = ConversationState.new("c1")
    first = apply_trace(
        state, b"t1", [chat(1, [SYSTEM, user("Where is my order?")], [assistant("It ships today.")])]
    )
    second = apply_trace(
        state,
        b"t2",
        [
            chat(
                2,
                [SYSTEM, user("Where is my order?"), assistant("It ships today."), user("Thanks!")],
                [assistant("You're welcome.")],
            )
        ],
    )
    assert texts(state) == [
        ("system", SYSTEM.content),
        ("user", "Where is my order?"),
        ("assistant", "It ships today."),
        ("user", "Thanks!"),
        ("assistant", "You're welcome."),
    ]
    assert (first.first_new_message, first.new_messages) == (0, 3)
    assert (second.first_new_message, second.new_messages) == (3, 2)
    assert state.conversation.trace_ids == [b"t1", b"t2"]


def test_api_that_sends_only_the_new_turn_is_accumulated():
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [chat(1, [user("Book a table for two")], [assistant("For which day?")])])
    apply_trace(state, b"t2", [chat(2, [user("Friday")], [assistant("Booked for Friday.")])])
    assert [m.content for m in state.conversation.messages] == [
        "Book a table for two",
        "For which day?",
        "Friday",
        "Booked for Friday.",
    ]


def test_sliding_window_history_adds_only_the_new_turn():
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [chat(1, [user("a"), assistant("b"), user("c")], [assistant("d")])])
    apply_trace(state, b"t2", [chat(2, [user("c"), assistant("d"), user("e")], [assistant("f")])])
    assert [m.content for m in state.conversation.messages] == ["a", "b", "c", "d", "e", "f"]


def test_repeated_identical_messages_are_not_mistaken_for_history():
    state = ConversationState.new("c1")
    apply_trace(
        state, b"t1", [chat(1, [user("Cancel it"), assistant("Sure?"), user("yes")], [assistant("Sure?")])]
    )
    apply_trace(
        state,
        b"t2",
        [
            chat(
                2,
                [user("Cancel it"), assistant("Sure?"), user("yes"), assistant("Sure?"), user("yes")],
                [assistant("Cancelled.")],
            )
        ],
    )
    assert [m.content for m in state.conversation.messages] == [
        "Cancel it",
        "Sure?",
        "yes",
        "Sure?",
        "yes",
        "Cancelled.",
    ]


def test_a_late_older_snapshot_adds_nothing():
    state = ConversationState.new("c1")
    early = chat(1, [user("hi")], [assistant("hello")])
    late = chat(2, [user("hi"), assistant("hello"), user("order 42?")], [assistant("shipped")])
    apply_trace(state, b"t1", [late])
    update = apply_trace(state, b"t1", [early])  # the first call's span came after the trace was released
    assert [m.content for m in state.conversation.messages] == ["hi", "hello", "order 42?", "shipped"]
    assert update.new_messages == 0


def test_out_of_order_and_duplicated_spans_give_the_clean_result():
    one = chat(1, [user("q1")], [assistant("a1")])
    two = chat(2, [user("q1"), assistant("a1"), user("q2")], [assistant("a2")])
    clean = ConversationState.new("c")
    apply_trace(clean, b"t", [one, two])
    messy = ConversationState.new("c")
    apply_trace(messy, b"t", [two, one, two])
    apply_trace(messy, b"t", [one])  # a client retry re-sent it after release
    assert texts(messy) == texts(clean)
    # a span twice in one trace is one model call
    assert len(messy.conversation.llm_calls) == len(clean.conversation.llm_calls) == 2


def test_what_grows_with_each_trace_is_bounded_and_a_retried_span_still_dropped(monkeypatch):
    from otelsignals import conversation as conversation_module

    monkeypatch.setattr(conversation_module, "RECENT_MODEL_CALLS", 4)
    monkeypatch.setattr(conversation_module, "RECENT_TRACE_IDS", 3)
    state = ConversationState.new("c")
    state.seen_spans = conversation_module.RecentIds(5)
    history: list[Message] = []
    sent = []
    for turn in range(12):
        history = [*history, user(f"question {turn}")]
        span = chat(turn, history, [assistant(f"answer {turn}")])
        sent.append(span)
        apply_trace(state, f"t{turn}".encode(), [span])
        history = [*history, assistant(f"answer {turn}")]
    conversation = state.conversation
    assert [call.span_id for call in conversation.llm_calls] == [s.span_id for s, _ in sent[-4:]]
    assert conversation.trace_ids == [b"t9", b"t10", b"t11"]
    assert 5 <= len(state.seen_spans) <= 10
    # a client's retry of the latest trace adds nothing; neither do the model calls it carried
    kept = texts(state)
    update = apply_trace(state, b"t11", [sent[-1]])
    assert texts(state) == kept and update.llm_calls == [] and len(conversation.llm_calls) == 4


def _id(number: int) -> bytes:
    return number.to_bytes(8, "big")


def test_recent_ids_remember_at_least_their_latest_new_ids_and_at_most_twice_as_many():
    seen = RecentIds(3)
    for item in range(10):
        assert seen.admit([_id(item)]) == [True]
        assert all(_id(latest) in seen for latest in range(max(0, item - 2), item + 1))
        assert len(seen) <= 6
    assert _id(0) not in seen and _id(3) not in seen
    assert seen.admit([_id(7), _id(9)]) == [False, False]  # known already: not counted twice
    assert len(seen) == len({i for i in range(10) if _id(i) in seen})
    seen.discard(_id(8))
    seen.discard(_id(8))  # absent: nothing happens
    assert _id(8) not in seen and _id(9) in seen
    # an id twice in one call is new once
    assert seen.admit([_id(20), _id(21), _id(21), _id(9)]) == [True, True, False, False]
    assert {20, 21, 9} <= {i for i in (*range(10), 20, 21) if _id(i) in seen}
    with pytest.raises(ValueError):
        RecentIds(0)
    for copied in (copying.copy(seen), copying.deepcopy(seen), pickle.loads(pickle.dumps(seen))):
        assert _id(21) in copied and _id(8) not in copied and len(copied) == len(seen)
    # ids of another width (never OTLP's span ids) are kept by a digest of 8 bytes
    assert seen.admit([b"s1", b"a much longer id than eight bytes", b"s1"]) == [True, True, False]
    assert b"s1" in seen and b"a much longer id than eight bytes" in seen and b"s2" not in seen


def test_recent_ids_look_every_id_up_before_remembering_any():
    """A trace whose new spans fill the newer generation still finds its resent spans in the older
    one: they are looked up first."""
    seen = RecentIds(2)
    seen.admit([_id(1), _id(2)])
    seen.admit([_id(3)])  # the newer generation filled: 1 and 2 are the older one now
    assert seen.admit([_id(4), _id(5), _id(6), _id(1)]) == [True, True, True, False]


_SOME_IDS = [_id(number) for number in (1, 2, 3, 2**63, 2**64 - 1)] + [b"x"]


@settings(max_examples=300, deadline=None)
@given(
    capacity=st.integers(1, 5),
    steps=st.lists(
        st.tuples(st.sampled_from(["admit", "discard"]), st.lists(st.sampled_from(_SOME_IDS), max_size=4)),
        max_size=30,
    ),
)
def test_recent_ids_behave_as_two_generations_of_a_set(capacity: int, steps: list[tuple[str, list[bytes]]]):
    """Against the definition: a set per generation, the older forgotten when the newer fills;
    every id of a call looked up before any is remembered."""
    newer: set[bytes] = set()
    older: set[bytes] = set()
    seen = RecentIds(capacity)
    for operation, items in steps:
        if operation == "admit":
            expected = [
                item not in newer and item not in older and item not in items[:position]
                for position, item in enumerate(items)
            ]
            assert seen.admit(items) == expected
            for item, new in zip(items, expected, strict=True):
                if new:
                    if len(newer) >= capacity:
                        older, newer = newer, set()
                    newer.add(item)
        else:
            for item in items:
                seen.discard(item)
                newer.discard(item)
                older.discard(item)
        assert len(seen) == len(newer) + len(older)
        for candidate in _SOME_IDS:
            assert (candidate in seen) == (candidate in newer or candidate in older)


def test_tool_span_failure_is_attached_to_the_tool_result_in_the_history():
    call = ToolCall("reset_password", {"user": "kim"}, id="call_1")
    state = ConversationState.new("c1")
    chat_one = chat(1, [user("Reset my password")], [assistant(None, call)])
    tool_span = view(2)
    failure = ToolResult(
        call_id="call_1",
        name="reset_password",
        is_error=True,
        error_type="PermissionError",
        error_message="401 Unauthorized",
        status_code=401,
    )
    execution = (
        tool_span,
        SpanReading(
            "tools", tool_execution=ToolExecution("reset_password", "call_1", {"user": "kim"}, failure)
        ),
    )
    chat_two = chat(
        3,
        [user("Reset my password"), assistant(None, call), tool("call_1", "error: unauthorized")],
        [assistant("I could not reset it.")],
    )
    apply_trace(state, b"t1", [chat_one, execution, chat_two])
    roles = [m.role for m in state.conversation.messages]
    assert roles == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    result = state.conversation.messages[2].tool_result
    assert result is not None
    assert (result.name, result.is_error, result.status_code, result.error_type) == (
        "reset_password",
        True,
        401,
        "PermissionError",
    )
    assert result.arguments == {"user": "kim"}
    assert state.conversation.messages[2].content == "error: unauthorized"


@pytest.mark.parametrize(
    ("span_arguments", "shared"),
    [
        ({"user": "kim", "notify": True}, True),
        ({"notify": True, "user": "kim"}, False),  # == the call's, but written in another order
        ({"user": "kim", "notify": 1}, False),  # == the call's (1 == True), but not what the call said
        ({"user": "lee", "notify": True}, False),
    ],
)
def test_a_tool_result_keeps_its_calls_id_name_and_arguments_objects_when_they_read_the_same(
    span_arguments: dict[str, object], shared: bool
):
    """The history and the tool span write a call's id, tool name and arguments again: the result
    keeps the call's objects, once per call, where they read exactly the same."""
    call = ToolCall("reset_password", {"user": "kim", "notify": True}, id="call_1")
    state = ConversationState.new("c1")
    execution = ToolExecution(
        "".join(["reset_", "password"]),  # an equal string, another object
        "".join(["call_", "1"]),
        span_arguments,
        ToolResult(call_id="".join(["call_", "1"])),
    )
    copy = ToolCall(
        "".join(["reset_", "password"]), {"user": "kim", "notify": True}, id="".join(["call_", "1"])
    )
    apply_trace(state, b"t1", [chat(1, [user("Reset my password")], [assistant(None, call)])])
    apply_trace(
        state,
        b"t2",
        [
            chat(
                2,
                [user("Reset my password"), assistant(None, copy), tool("".join(["call_", "1"]), "done")],
                [],
            ),
            (view(3), SpanReading("tools", tool_execution=execution)),
        ],
    )
    result = state.conversation.messages[2].tool_result
    assert result is not None
    assert result.call_id is call.id and result.name is call.name
    assert result.arguments == span_arguments
    assert (result.arguments is call.arguments) is shared


def test_tool_names_are_kept_once_for_every_conversation():
    names = []
    for key in ("c1", "c2"):
        state = ConversationState.new(key)
        call = ToolCall("".join(["look_up_", "order"]), {"order": key}, id=f"{key}-call")
        apply_trace(state, b"t1", [chat(1, [user("Where is my order?")], [assistant(None, call)])])
        names.append(state.conversation.messages[1].tool_calls[0].name)
    assert names[0] == "look_up_order" and names[0] is names[1]


def test_a_long_conversation_remembers_the_tool_names_of_its_latest_calls_only():
    """A tool result that gives only its call's id is named from the call: the latest
    TOOL_NAMES_KEPT calls are remembered, not every call of a conversation of thousands of turns
    (which its message trimming would not give back)."""
    import otelsignals.conversation

    kept = getattr(otelsignals.conversation, "TOOL_NAMES_KEPT", 512)
    state = ConversationState.new("c1")
    for turn in range(kept + 100):
        call = ToolCall(f"tool_{turn % 7}", {"n": turn}, id=f"call-{turn}")
        state.append(assistant(None, call))
    assert len(state.tool_names) == kept
    assert "call-0" not in state.tool_names
    latest = kept + 99
    apply_trace(state, b"t2", [chat(1, [], [tool(f"call-{latest}", "ok")])])
    result = state.conversation.messages[-1].tool_result
    assert result is not None and result.name == f"tool_{latest % 7}"


def test_a_text_read_again_is_kept_once_not_also_as_the_key_of_the_recent_texts():
    """The recent-texts table gives the text it keeps for an equal one read again; the copy just
    read must not stay behind as the table's key (each shared text would be held twice)."""
    from otelsignals.conversation import SharedValues

    shared = SharedValues()
    first = "".join(["The refund was issued to the card ending in 4242 ", "on Monday, as you asked."])
    again = "".join(["The refund was issued to the card ending in 4242 on ", "Monday, as you asked."])
    assert first == again and first is not again
    shared.share([Message(Role.ASSISTANT, first)])
    read_again = Message(Role.ASSISTANT, again)
    shared.share([read_again])
    assert read_again.content is first
    assert all(key is value for key, value in shared._texts.items())
    assert not any(key is again for key in shared._texts)


def test_without_content_tool_executions_and_model_calls_still_come_through():
    state = ConversationState.new("c1")
    model_call = view(1)
    no_content = SpanReading(
        "test", llm_call=LlmCall(model_call.span_id, input_tokens=120), content_captured=False
    )
    tool_span = view(2)
    execution = SpanReading(
        "tools",
        content_captured=False,
        tool_execution=ToolExecution(
            "search_flights",
            None,
            None,
            ToolResult(name="search_flights", is_error=True, error_type="TimeoutError"),
        ),
    )
    update = apply_trace(state, b"t1", [(model_call, no_content), (tool_span, execution)])
    assert not update.content_captured and not state.conversation.content_captured
    assert [m.role for m in state.conversation.messages] == [Role.TOOL]
    assert state.conversation.messages[0].tool_result.error_type == "TimeoutError"
    assert state.conversation.llm_calls[0].input_tokens == 120


def test_an_agent_span_that_encloses_model_calls_does_not_repeat_them():
    agent = view(0)
    call = ToolCall("lookup", {"q": "x"}, id="c9")
    inner_one = chat(1, [user("find x")], [assistant(None, call)], parent=agent.span_id)
    inner_two = chat(
        3,
        [user("find x"), assistant(None, call), tool("c9", "x is 4")],
        [assistant("x is 4.")],
        parent=agent.span_id,
    )
    summary = SpanReading("test", [user("find x")], [assistant("x is 4.")])
    state = ConversationState.new("c1")
    update = apply_trace(state, b"t1", [(agent, summary), inner_one, inner_two])
    assert [m.role for m in state.conversation.messages] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
    ]
    assert update.analysed_span_id == inner_two[0].span_id


def test_a_model_call_span_over_another_is_the_same_request_counted_once():
    """Two instrumentations of one request (LangChain's ChatOpenAI span over the OpenAI client's,
    both read as model calls): the enclosing one is a library's view of the inner call."""
    outer = chat(0, [user("Hi")], [assistant("Hello!")])
    inner = chat(1, [user("Hi")], [assistant("Hello!")], parent=outer[0].span_id)
    state = ConversationState.new("c1")
    update = apply_trace(state, b"t1", [outer, inner])
    assert [call.span_id for call in update.llm_calls] == [inner[0].span_id]
    assert [call.span_id for call in state.conversation.llm_calls] == [inner[0].span_id]
    assert texts(state) == [("user", "Hi"), ("assistant", "Hello!")]


@pytest.mark.parametrize("between", [False, True])
def test_a_model_call_span_over_another_counts_once_when_it_comes_in_the_traces_next_part(between):
    """The inner call ends first, so an exporter's batch can carry it alone and the wrapper in the
    trace's next part (BatchSpanProcessor's timer firing between the two ends): the wrapper still
    counts as no call of its own and adds no message, also when a whole other trace of the
    conversation (a title call) came between the two parts."""
    outer_view = dataclasses.replace(view(0), end_time_unix_nano=20)
    outer = (
        outer_view,
        SpanReading("test", [user("Hi")], [assistant("Hello!")], llm_call=LlmCall(outer_view.span_id)),
    )
    inner = chat(1, [user("Hi")], [assistant("Hello!")], parent=outer_view.span_id)
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [inner], {inner[0].span_id: outer_view.span_id})
    if between:
        apply_trace(
            state, b"t2", [chat(30, [user("Hi"), assistant("Hello!"), user("Bye")], [assistant("Bye!")])]
        )
    later = apply_trace(state, b"t1", [outer], {outer_view.span_id: b""})
    assert later.llm_calls == [] and later.new_messages == 0
    assert inner[0].span_id in [call.span_id for call in state.conversation.llm_calls]
    assert outer_view.span_id not in [call.span_id for call in state.conversation.llm_calls]


@pytest.mark.parametrize("same_trace", [True, False])
def test_a_model_call_in_a_later_part_that_wraps_nothing_read_counts(same_trace):
    """Near misses: the agent's next call exported in the trace's next batch (its parent the agent
    span, like the first's), and a next trace's first call whose span id is no parent seen: calls
    of their own."""
    agent = view(0)
    first = chat(1, [user("Hi")], [assistant("Hello!")], parent=agent.span_id)
    second = chat(
        30, [user("Hi"), assistant("Hello!"), user("Bye")], [assistant("Bye!")], parent=agent.span_id
    )
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [first], {first[0].span_id: agent.span_id})
    later = apply_trace(state, b"t1" if same_trace else b"t2", [second], {second[0].span_id: agent.span_id})
    assert [call.span_id for call in later.llm_calls] == [second[0].span_id]
    assert texts(state)[-1] == ("assistant", "Bye!")


def test_model_calls_side_by_side_under_an_agent_span_all_count():
    """Near miss: calls that share a parent (an agent span, no model call itself) are calls of their own."""
    agent = view(0)
    first = chat(1, [user("Hi")], [assistant("Hello!")], parent=agent.span_id)
    second = chat(
        3, [user("Hi"), assistant("Hello!"), user("Bye")], [assistant("Bye!")], parent=agent.span_id
    )
    state = ConversationState.new("c1")
    update = apply_trace(state, b"t1", [(agent, SpanReading("test", [], [])), first, second])
    assert [call.span_id for call in update.llm_calls] == [first[0].span_id, second[0].span_id]


GUARD = Message(Role.SYSTEM, "Check if the user is asking you to do their homework. Answer JSON.")
TUTOR = Message(Role.SYSTEM, "You are a helpful tutor.")
HOMEWORK = user("Can you help me with my math homework?")


@pytest.mark.parametrize("guard_ends_last", [False, True])
def test_a_side_call_on_the_same_history_under_another_system_prompt_stays_out(guard_ends_last):
    """An input guardrail (or an intent classifier) sends the user's history under its own system
    prompt beside the agent's call: when a later call of the trace resends the agent's answer (the
    next call of its loop), the guardrail's JSON verdict is no turn of the conversation and the
    user's message is not shown twice (it read as a rephrase), however the calls are ordered in
    time. Both are still model calls."""
    guard = chat(5 if guard_ends_last else 1, [GUARD, HOMEWORK], [assistant('{"is_homework": true}')])
    tutor = chat(3, [TUTOR, HOMEWORK], [assistant("Sure! What is the problem?")])
    follow_up = [TUTOR, HOMEWORK, assistant("Sure! What is the problem?"), user("2x + 3 = 7")]
    calls = [guard, tutor, chat(7, follow_up, [assistant("x = 2.")])]
    state = ConversationState.new("c1")
    update = apply_trace(state, b"t1", calls)
    assert texts(state) == [
        ("system", TUTOR.content),
        ("user", HOMEWORK.content),
        ("assistant", "Sure! What is the problem?"),
        ("user", "2x + 3 = 7"),
        ("assistant", "x = 2."),
    ]
    assert len(update.llm_calls) == 3


@pytest.mark.parametrize("verdict", ['{"is_homework": true}', '[{"category": "homework", "score": 0.93}]'])
def test_a_guardrail_beside_a_turn_answered_in_text_stays_out(verdict):
    """No later call resends either answer (a turn answered in text), and which call ended last
    tells nothing (guardrails run beside the agent's first call and often end after it); but only
    the guardrail answers JSON: its verdict is left out, and the user's message is not shown twice."""
    guard = chat(5, [GUARD, HOMEWORK], [assistant(verdict)])
    tutor = chat(3, [TUTOR, HOMEWORK], [assistant("Sure! What is the problem?")])
    state = ConversationState.new("c1")
    update = apply_trace(state, b"t1", [tutor, guard])
    assert texts(state) == [
        ("system", TUTOR.content),
        ("user", HOMEWORK.content),
        ("assistant", "Sure! What is the problem?"),
    ]
    assert len(update.llm_calls) == 2


@pytest.mark.parametrize("label", ["homework", "Math homework help"])
def test_a_label_beside_a_turn_answered_in_text_stays_out_under_the_conversations_own_prompt(label):
    """A classifier's label or a title beside the agent's call of a later turn: the agent's call is
    the one under the conversation's own system prompt, the other answers as a side task does."""
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [chat(1, [TUTOR, HOMEWORK], [assistant("Sure! What is the problem?")])])
    history = [TUTOR, HOMEWORK, assistant("Sure! What is the problem?"), user("2x + 3 = 7")]
    apply_trace(
        state,
        b"t2",
        [chat(5, history, [assistant("x = 2.")]), chat(6, [GUARD, *history[1:]], [assistant(label)])],
    )
    assert texts(state)[-2:] == [("user", "2x + 3 = 7"), ("assistant", "x = 2.")]


@pytest.mark.parametrize(
    "answers",
    [
        # both in prose: nothing tells which is the agent's
        ("The user asks for homework help.", "Sure! What is the problem?"),
        # both answer JSON (an agent with structured output)
        ('{"is_homework": true}', '{"reply": "Sure! What is the problem?"}'),
        # a short answer beside a call rewriting the question in prose (LangChain's history-aware
        # retriever): in the first turn, the shapes tell nothing
        ("What is the capital of France?", "Paris"),
        # a title beside the agent's first call: the conversation's own prompt is not known yet
        ("Math homework help", "Sure! What is the problem?"),
    ],
)
def test_side_calls_whose_agent_call_is_not_known_are_all_merged(answers):
    """Near miss: no later call resends either answer and the answers' shapes tell nothing either:
    both are kept rather than the agent's lost."""
    guard = chat(5, [GUARD, HOMEWORK], [assistant(answers[0])])
    tutor = chat(3, [TUTOR, HOMEWORK], [assistant(answers[1])])
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [tutor, guard])
    assert {("assistant", answers[0]), ("assistant", answers[1])} <= set(texts(state))


def next_homework_turn(state: ConversationState, answer: str) -> None:
    """The tutor's next turn in a trace of its own: the history resends the question and ``answer``."""
    history = [TUTOR, HOMEWORK, assistant(answer), user("2x + 3 = 7")]
    apply_trace(state, b"next", [chat(5, history, [assistant("x = 2.")])])


SUMMARY_PROMPT = Message(Role.SYSTEM, "Summarise this chat for the tutor's notes.")
TITLE = Message(Role.SYSTEM, "Write a 3-word title for this chat.")


@pytest.mark.parametrize(
    ("prompt", "side_answer"),
    [
        (SUMMARY_PROMPT, "The student asked for help with a linear equation."),
        # a known limit: nothing tells a title from a hand-off agent's brief answer in the same trace
        (TITLE, "Math homework help"),
    ],
)
def test_a_history_that_leaves_out_a_side_answer_the_conversation_took_in_adds_only_its_new_turn(
    prompt, side_answer
):
    """A call in the agent's trace continues the history under its own prompt, so its answer joins
    the conversation (a summary in prose; a title); the agent's next history does not carry it. That
    history still lines up (a subset of the conversation, in order, ending with one of its latest
    messages): before, the whole history was appended again, the user's question shown twice (a
    rephrase) and the answer too (repetition)."""
    answer = "Sure! What is the problem?"
    state = ConversationState.new("c1")
    apply_trace(
        state,
        b"t1",
        [
            chat(1, [TUTOR, HOMEWORK], [assistant(answer)]),
            chat(3, [prompt, HOMEWORK, assistant(answer)], [assistant(side_answer)]),
        ],
    )
    next_homework_turn(state, answer)
    assert texts(state) == [
        ("system", TUTOR.content),
        ("user", HOMEWORK.content),
        ("assistant", answer),
        ("assistant", side_answer),
        ("user", "2x + 3 = 7"),
        ("assistant", "x = 2."),
    ]


@pytest.mark.parametrize(
    "title",
    ["Math homework help", '"Linear Equations 📐"', '{"title": "Math help", "tags": ["school"]}'],
)
def test_a_title_that_continues_the_history_under_its_own_prompt_is_no_answer(title):
    """A chat title (or tags) asked for in a trace of its own, with the conversation's history under
    a prompt of its own: a model call, not an answer of the conversation (it read as the agent
    answering twice)."""
    answer = "Sure! What is the problem?"
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [chat(1, [TUTOR, HOMEWORK], [assistant(answer)])])
    update = apply_trace(state, b"t2", [chat(3, [TITLE, HOMEWORK, assistant(answer)], [assistant(title)])])
    assert update.new_messages == 0 and len(update.llm_calls) == 1
    next_homework_turn(state, answer)
    assert texts(state) == [
        ("system", TUTOR.content),
        ("user", HOMEWORK.content),
        ("assistant", answer),
        ("user", "2x + 3 = 7"),
        ("assistant", "x = 2."),
    ]


def test_an_agent_continuing_under_its_own_prompt_joins_after_its_prompt_was_trimmed():
    """Near miss: the conversation's system prompt was trimmed away with its first turns; the agent,
    still under that prompt, continues its answer in a new trace: it is the agent's (the prompt is
    remembered apart from the messages kept)."""
    state = ConversationState.new("c1")
    history = [TUTOR]
    for turn in range(6):
        history.append(user(f"question {turn}?"))
        apply_trace(
            state, f"t{turn}".encode(), [chat(10 * turn, list(history), [assistant(f"Answer {turn}.")])]
        )
        history.append(assistant(f"Answer {turn}."))
    state.trim(6)
    assert texts(state)[0][0] != "system"
    apply_trace(state, b"more", [chat(100, history, [assistant("and that is all")])])
    assert texts(state)[-1] == ("assistant", "and that is all")


REWRITE = Message(Role.SYSTEM, "Rewrite the user's last question so that it stands alone.")


@pytest.mark.parametrize(
    ("agent_prompt", "side_prompt", "agent_answer", "side_answer"),
    [
        # an agent answering JSON (structured output) before and now, beside a call rewriting the
        # question in prose: the rewrite is not the agent's answer
        (TUTOR, REWRITE, '{"answer": "Lyon"}', "What is the second largest city of France?"),
        # a label router's call came first, so the conversation holds its prompt: beside its label,
        # the agent's brief answer is no prose either
        (TUTOR, GUARD, "42", "math"),
    ],
)
def test_answers_whose_shapes_tell_nothing_are_all_kept(agent_prompt, side_prompt, agent_answer, side_answer):
    """Near misses: in a later turn answered in text, nothing resends an answer and the shapes do
    not tell the agent's call: both answers are kept rather than the agent's lost."""
    first_answer = '{"answer": "Paris"}' if agent_answer.startswith("{") else "Sure! What is the problem?"
    first_prompt = agent_prompt if agent_answer.startswith("{") else side_prompt
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [chat(1, [first_prompt, HOMEWORK], [assistant(first_answer)])])
    history = [HOMEWORK, assistant(first_answer), user("And the next one?")]
    apply_trace(
        state,
        b"t2",
        [
            chat(3, [agent_prompt, *history], [assistant(agent_answer)]),
            chat(4, [side_prompt, *history], [assistant(side_answer)]),
        ],
    )
    assert {("assistant", agent_answer), ("assistant", side_answer)} <= set(texts(state))


def test_a_hand_off_agents_short_answer_joins():
    """Near miss: the first agent says it hands off and calls the hand-off tool; the next agent,
    under its own prompt, answers briefly after that text (the SDK filtered the call out of its
    history). The hand-off's text came with a call: the turn was not finished, the answer is the
    conversation's."""
    triage = Message(Role.SYSTEM, "You are the triage agent. Hand off to billing for balance questions.")
    billing = Message(Role.SYSTEM, "You are the billing agent.")
    question, handing = user("What's my balance?"), assistant("Let me transfer you to billing.")
    transfer = assistant(None, ToolCall("transfer_to_billing", {}, id="call_1"))
    state = ConversationState.new("c1")
    apply_trace(
        state,
        b"t1",
        [
            chat(1, [triage, question], [handing, transfer]),
            chat(3, [billing, question, handing], [assistant("Your balance is $42")]),
        ],
    )
    assert texts(state)[-1] == ("assistant", "Your balance is $42")


def test_a_title_that_resends_the_answer_still_tells_the_agents_call_from_a_guardrails():
    """The agent answers briefly, a guardrail answered JSON beside it, and a title call of the same
    trace resends the agent's answer (the title joins there: a known limit). What it resent is read
    before any call is set aside, so it tells the agent's call and the verdict stays out."""
    title = Message(Role.SYSTEM, "Write a 3-word title for this chat.")
    capital = user("What is the capital of France?")
    state = ConversationState.new("c1")
    apply_trace(
        state,
        b"t1",
        [
            chat(1, [TUTOR, capital], [assistant("Paris")]),
            chat(2, [GUARD, capital], [assistant('{"is_homework": false}')]),
            chat(4, [title, capital, assistant("Paris")], [assistant("French capital question")]),
        ],
    )
    assert texts(state)[:3] == [("system", TUTOR.content), ("user", capital.content), ("assistant", "Paris")]
    assert ("assistant", '{"is_homework": false}') not in texts(state)


@pytest.mark.parametrize(
    ("inputs", "said"),
    [
        # under the conversation's own prompt: the agent continues its answer
        ([TUTOR, HOMEWORK, assistant("Sure! What is the problem?")], "Send it over"),
        # a hand-off agent greets the user in prose
        ([TITLE, HOMEWORK, assistant("Sure! What is the problem?")], "Hi, I'm the algebra tutor. Go on!"),
        # the history ends with the user's message: a turn, whatever the prompt
        ([TITLE, HOMEWORK], "Math homework help"),
        # the history ends with an answer the conversation does not hold
        ([TITLE, HOMEWORK, assistant("Something else entirely.")], "Math homework help"),
    ],
)
@pytest.mark.parametrize("own_trace", [True, False])
def test_a_call_after_the_answer_that_is_no_title_joins(inputs, said, own_trace):
    """Near misses: calls after the agent's answer that the conversation keeps; and any such call in
    the agent's own trace (a hand-off agent answering briefly after the first agent's text looks the
    same as a title there)."""
    first = chat(1, [TUTOR, HOMEWORK], [assistant("Sure! What is the problem?")])
    state = ConversationState.new("c1")
    if own_trace:
        apply_trace(state, b"t1", [first])
        apply_trace(state, b"t2", [chat(3, inputs, [assistant(said)])])
    else:
        apply_trace(state, b"t1", [first, chat(3, inputs, [assistant(said)])])
    assert ("assistant", said) in texts(state)


def test_a_new_turn_alone_that_repeats_a_recent_message_is_new():
    """Near miss: an API that sends only the new turn, the user saying "yes" again: no earlier
    message comes with it, so it is not taken for a resent one."""
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [chat(1, [user("Shall I book it?")], [assistant("Book the 9:40?")])])
    apply_trace(state, b"t2", [chat(2, [user("yes")], [assistant("Which seat?")])])
    apply_trace(state, b"t3", [chat(3, [user("window")], [assistant("Pay now?")])])
    apply_trace(state, b"t4", [chat(4, [user("yes")], [assistant("Booked.")])])
    assert [content for role, content in texts(state) if role == "user"] == [
        "Shall I book it?",
        "yes",
        "window",
        "yes",
    ]


def test_a_new_turn_whose_answer_repeats_an_earlier_failure_is_new():
    """An API that sends only the new turn; the user asks again and the agent fails again in the
    same words: the repeated request and the repeated failure are the turn, not a resent history (a
    reviewer's regression of the subset rule, which took the answer for a resent message)."""
    state = ConversationState.new("c1")
    turns = [
        ("cancel my order", "Which order?"),
        ("1182", "Sorry, something went wrong."),
        ("what happened?", "The order service timed out."),
        ("cancel my order", "Sorry, something went wrong."),
    ]
    for number, (said, answer) in enumerate(turns):
        apply_trace(state, b"t%d" % number, [chat(number, [TUTOR, user(said)], [assistant(answer)])])
    assert [content for role, content in texts(state) if role != "system"] == [m for t in turns for m in t]


def test_a_new_turn_identical_to_the_one_before_counts_again():
    """An API that sends only the new turn: the user says "yes" again and the agent answers "Done."
    again. The call started after the previous one ended, so it is a new turn, not an older snapshot
    seen late; a copy of a call (overlapping it in time) still adds nothing."""
    state = ConversationState.new("c1")
    for number in range(3):
        span, reading = chat(number * 100, [TUTOR, user("yes")], [assistant("Done.")])
        apply_trace(state, b"t%d" % number, [(span, reading)])
    assert [content for role, content in texts(state) if role != "system"] == ["yes", "Done."] * 3
    copy_span, copy_reading = chat(205, [TUTOR, user("yes")], [assistant("Done.")])  # overlaps the last
    apply_trace(state, b"t2", [(copy_span, copy_reading)])
    assert len(state.conversation.messages) == 1 + 6


def test_calls_on_the_same_history_under_the_same_system_prompt_are_all_merged():
    """Near miss: the same call again (a retry, two samples) is no side call; it aligns as before."""
    state = ConversationState.new("c1")
    first = chat(1, [TUTOR, HOMEWORK], [assistant("Sure!")])
    again = chat(3, [TUTOR, HOMEWORK], [assistant("Sure! What is the problem?")])
    apply_trace(state, b"t1", [first, again])
    assert [content for role, content in texts(state) if role == "assistant"] == [
        "Sure!",
        "Sure! What is the problem?",
    ]


def test_agents_handing_over_with_their_own_system_prompts_are_all_merged():
    """Near miss: a second agent (another system prompt) that continues the history is the conversation."""
    state = ConversationState.new("c1")
    triage = chat(1, [GUARD, HOMEWORK], [assistant("Handing you to the tutor.")])
    tutor = chat(
        3, [TUTOR, HOMEWORK, assistant("Handing you to the tutor.")], [assistant("Hi! Which problem?")]
    )
    apply_trace(state, b"t1", [triage, tutor])
    assert [content for role, content in texts(state) if role == "assistant"] == [
        "Handing you to the tutor.",
        "Hi! Which problem?",
    ]


def test_a_late_system_prompt_goes_first_and_indices_stay_right():
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [chat(2, [user("hi")], [assistant("hello")])])
    update = apply_trace(state, b"t2", [chat(3, [SYSTEM, user("hi"), assistant("hello"), user("bye")], [])])
    assert [m.role for m in state.conversation.messages][:2] == [Role.SYSTEM, Role.USER]
    assert state.conversation.messages[update.first_new_message].content == "bye"


def test_trimming_keeps_message_numbers_absolute():
    state = ConversationState.new("c1")
    history: list[Message] = []
    for turn in range(10):
        history += [user(f"q{turn}")]
        apply_trace(state, f"t{turn}".encode(), [chat(turn, list(history), [assistant(f"a{turn}")])])
        history += [assistant(f"a{turn}")]
        state.trim(6)
    conversation = state.conversation
    assert len(conversation.messages) <= 6
    assert conversation.message_offset + len(conversation.messages) == 20
    everything = [m.content for m in history]
    assert [m.content for m in conversation.messages] == everything[conversation.message_offset :]
    # A resent full history still adds only the new turn after trimming.
    update = apply_trace(state, b"t10", [chat(10, [*history, user("q10")], [assistant("a10")])])
    assert update.new_messages == 2


def test_conversation_key_follows_the_spec_order():
    spans = [view(1, **{"session.id": "s-1"}), view(2, **{"gen_ai.conversation.id": "conv-9"})]
    assert conversation_key(spans, b"\xab" * 16) == "conv-9"
    assert (
        conversation_key([view(1, **{"traceloop.association.properties.session_id": "tl"})], b"\x01") == "tl"
    )
    assert conversation_key([view(1, **{"ai.telemetry.metadata.sessionId": "v"})], b"\x01") == "v"
    assert conversation_key([view(1, **{"langfuse.session.id": "lf", "session.id": "s"})], b"\x01") == "s"
    assert conversation_key([view(1)], b"\xab" * 16) == "ab" * 16


def test_agent_id_prefers_agent_attributes_then_service_name():
    with_name = view(1, **{"gen_ai.agent.name": "Refund bot"})
    with_id = view(2, **{"gen_ai.agent.id": "agent-7"})
    assert agent_id_of([with_name, with_id]) == "agent-7"
    assert agent_id_of([with_name]) == "Refund bot"
    service_only = view(3)
    service_only.resource = {"service.name": "checkout"}
    assert agent_id_of([service_only]) == "checkout"


def _stateless_chat(
    turns: list[tuple[str, str]],
) -> tuple[list[Message], list[tuple[SpanView, SpanReading]]]:
    """The true history of ``turns`` (question, answer) and each call's snapshot (the full history
    resent, then the answer)."""
    history: list[Message] = []
    snapshots = []
    for number, (question, answer) in enumerate(turns):
        history.append(user(question))
        snapshots.append(chat(number, list(history), [assistant(answer)]))
        history.append(assistant(answer))
    return history, snapshots


@settings(max_examples=200, deadline=None)
@given(
    turns=st.lists(
        st.tuples(
            st.sampled_from(["yes", "no", "ok", "why?", "order 42"]),
            st.sampled_from(["Sure.", "Done.", "OK"]),
        ),
        min_size=1,
        max_size=12,
    ),
    data=st.data(),
)
def test_property_resent_history_in_any_delivery_order_gives_the_true_history(turns, data):
    """Snapshots of a stateless chat (full history every call), some delivered late (after later
    calls) and some twice, rebuild exactly the true history, even when short messages repeat."""
    history, snapshots = _stateless_chat(turns)
    state = ConversationState.new("c")
    deferred = []
    for number, snapshot in enumerate(snapshots):
        if data.draw(st.booleans()):
            deferred.append(snapshot)  # its span arrives after the later calls' spans
            continue
        apply_trace(state, f"t{number}".encode(), [snapshot])
        if data.draw(st.booleans()):
            apply_trace(state, b"retry", [snapshot])  # the same span re-sent by a client retry
    for snapshot in deferred:
        apply_trace(state, b"late", [snapshot])
    # The final call always arrives at some point, and with it the whole history.
    rebuilt = [(m.role, m.content) for m in state.conversation.messages]
    assert rebuilt == [(m.role, m.content) for m in history]


@settings(max_examples=60, deadline=None)
@given(
    turns=st.lists(
        st.tuples(st.sampled_from(["hi", "ok", "order 42?"]), st.sampled_from(["Sure.", "Done.", "OK"])),
        min_size=2,
        max_size=10,
    ),
    data=st.data(),
)
def test_property_a_conversation_gone_cold_between_any_traces_is_assembled_the_same(turns, data):
    """Cold (sessions.cold_after), a conversation drops its history index's positions and the
    span decoder's memory; late and repeated snapshots after it still find their place."""
    from otelsignals.signals.detect import REBUILT_WHEN_MISSING

    _, snapshots = _stateless_chat(turns)
    order = data.draw(st.permutations(range(len(snapshots))))
    cold_before = data.draw(st.lists(st.booleans(), min_size=len(order), max_size=len(order)))
    warm, cold = ConversationState.new("c"), ConversationState.new("c")
    for number, goes_cold in zip(order, cold_before, strict=True):
        apply_trace(warm, f"t{number}".encode(), [snapshots[number]])
        if goes_cold:
            cold.go_cold(REBUILT_WHEN_MISSING)
        apply_trace(cold, f"t{number}".encode(), [snapshots[number]])
        assert [(m.role, m.content) for m in cold.conversation.messages] == [
            (m.role, m.content) for m in warm.conversation.messages
        ]
        assert cold.body_positions == warm.body_positions and not cold.cold


def _measured_before(state: ConversationState) -> None:
    """As if limits.cap_messages had measured a history of the conversation (what it remembers)."""
    state.decoder_memory.measured = (MeasuredHistory(list(state.conversation.messages), 0, 0),)


@pytest.mark.parametrize("result_text", ["Seat 14C is free.", None])
def test_a_tool_result_given_its_tool_spans_text_makes_the_histories_be_measured_again(result_text):
    """The text limits remember how much text they measured of a resent history; a tool result the
    history sent without text, given its tool span's, changes that. Near miss: a tool span without
    text gives none, and what was measured stands."""
    call = ToolCall("check_seat", {"flight": "TP1353"}, id="call_7")
    state = ConversationState.new("c1")
    textless = Message(Role.TOOL, None, tool_result=ToolResult(call_id="call_7"))
    apply_trace(state, b"t1", [chat(1, [user("Any aisle seat?"), assistant(None, call), textless], [])])
    _measured_before(state)
    execution = ToolExecution("check_seat", "call_7", None, ToolResult(call_id="call_7", content=result_text))
    apply_trace(state, b"t2", [(view(5), SpanReading("tools", tool_execution=execution))])
    assert state.conversation.messages[2].content == result_text
    assert bool(state.decoder_memory.measured) is (result_text is None)


@pytest.mark.parametrize("history_text", ["none left", None])
def test_a_tool_spans_result_given_a_historys_text_makes_the_histories_be_measured_again(history_text):
    """The other way round: the tool span came first, without text, and the history gives it."""
    call = ToolCall("check_seat", {"flight": "TP1353"}, id="call_7")
    state = ConversationState.new("c1")
    execution = ToolExecution("check_seat", "call_7", None, ToolResult(call_id="call_7"))
    first = chat(1, [user("Any aisle seat?")], [assistant(None, call)])
    apply_trace(state, b"t1", [first, (view(2), SpanReading("tools", tool_execution=execution))])
    _measured_before(state)
    result = Message(Role.TOOL, history_text, tool_result=ToolResult(call_id="call_7", content=history_text))
    apply_trace(state, b"t1", [chat(3, [user("Any aisle seat?"), assistant(None, call), result], [])])
    assert state.conversation.messages[2].content == history_text
    assert bool(state.decoder_memory.measured) is (history_text is None)


def test_a_tool_span_ahead_of_its_history_is_shown_once_and_later_snapshots_still_align():
    """The trace was released before the model call that sent the tool result back (a late span):
    the result is shown at once, and the history that mentions it later neither repeats it nor
    loses its place."""
    call = ToolCall("check_seat", {"flight": "TP1353"}, id="call_7")
    state = ConversationState.new("c1")
    first = chat(1, [user("Any aisle seat?")], [assistant(None, call)])
    tool_span = view(2)
    execution = ToolExecution("check_seat", "call_7", {"flight": "TP1353"}, ToolResult(call_id="call_7"))
    apply_trace(state, b"t1", [first, (tool_span, SpanReading("tools", tool_execution=execution))])
    assert [m.role for m in state.conversation.messages] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    late = chat(
        3,
        [user("Any aisle seat?"), assistant(None, call), tool("call_7", "none left")],
        [assistant("None left, sorry.")],
    )
    apply_trace(state, b"t1", [late])
    nxt = chat(
        9,
        [
            user("Any aisle seat?"),
            assistant(None, call),
            tool("call_7", "none left"),
            assistant("None left, sorry."),
            user("ok, window then"),
        ],
        [assistant("Done.")],
    )
    apply_trace(state, b"t2", [nxt])
    assert [m.role for m in state.conversation.messages] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
        Role.USER,
        Role.ASSISTANT,
    ]
    assert state.conversation.messages[2].content == "none left"


def test_condensed_history_without_earlier_tool_steps_adds_only_the_new_turn():
    """Agent frameworks often resend earlier turns as their final answers only, without the tool
    calls that led to them (the Vercel AI SDK fixture does)."""
    call = ToolCall("get_order", {"order_id": "A1"}, id="c1")
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [chat(1, [user("Where is A1?")], [assistant(None, call)])])
    apply_trace(
        state,
        b"t1",
        [
            chat(
                2,
                [user("Where is A1?"), assistant(None, call), tool("c1", "shipped")],
                [assistant("A1 shipped.")],
            )
        ],
    )
    call_two = ToolCall("get_order", {"order_id": "B2"}, id="c2")
    condensed = [user("Where is A1?"), assistant("A1 shipped."), user("And B2?")]
    apply_trace(state, b"t2", [chat(3, condensed, [assistant(None, call_two)])])
    apply_trace(
        state,
        b"t2",
        [chat(4, [*condensed, assistant(None, call_two), tool("c2", "not found")], [assistant("No B2.")])],
    )
    assert [(m.role.value, m.content) for m in state.conversation.messages] == [
        ("user", "Where is A1?"),
        ("assistant", None),
        ("tool", "shipped"),
        ("assistant", "A1 shipped."),
        ("user", "And B2?"),
        ("assistant", None),
        ("tool", "not found"),
        ("assistant", "No B2."),
    ]


def _calls_and_texts(state: ConversationState) -> list[tuple[str, str | None, list[str | None]]]:
    return [(m.role.value, m.content, [c.id for c in m.tool_calls]) for m in state.conversation.messages]


PARIS = ToolCall("get_weather", {"city": "Paris"}, id="call_P")
LONDON = ToolCall("get_weather", {"city": "London"}, id="call_L")


@pytest.mark.parametrize(
    "resent",
    [
        # OpenAI's Responses API resends each output item: the text, then one item per call.
        [assistant("Let me look both up."), assistant(None, PARIS), assistant(None, LONDON)],
        # One message per parallel call, the text with the first (openai-agents, OpenInference).
        [assistant("Let me look both up.", PARIS), assistant(None, LONDON)],
    ],
    ids=["text-then-one-per-call", "one-per-call"],
)
def test_an_answer_resent_as_one_message_per_part_is_not_added_again(resent):
    """The answer was read as one message (its text and both calls); the next history gives it back
    split into several assistant messages. It lines up with the conversation once each run of
    consecutive assistant messages is read as one, and only what is new is added."""
    state = ConversationState.new("c")
    question = [SYSTEM, user("Weather in Paris and London?")]
    apply_trace(state, b"t1", [chat(1, question, [assistant("Let me look both up.", PARIS, LONDON)])])
    history = [*question, *resent, tool("call_P", "sunny"), tool("call_L", "rainy")]
    apply_trace(state, b"t1", [chat(2, history, [assistant("Paris is sunny, London is rainy.")])])
    expected = [
        ("system", SYSTEM.content, []),
        ("user", "Weather in Paris and London?", []),
        ("assistant", "Let me look both up.", ["call_P", "call_L"]),
        ("tool", "sunny", []),
        ("tool", "rainy", []),
        ("assistant", "Paris is sunny, London is rainy.", []),
    ]
    assert _calls_and_texts(state) == expected
    # The next turn resends it all split again, and lines up again.
    later = [*history, assistant("Paris is sunny, London is rainy."), user("And Rome?")]
    apply_trace(state, b"t2", [chat(3, later, [assistant("Rome is warm.")])])
    assert _calls_and_texts(state) == [
        *expected,
        ("user", "And Rome?", []),
        ("assistant", "Rome is warm.", []),
    ]


@pytest.mark.parametrize(
    "resent",
    [
        # Another call than the one answered: the history is not the conversation's.
        [
            assistant("Let me look both up."),
            assistant(None, PARIS),
            assistant(None, ToolCall("get_weather", {"city": "Rome"}, id="call_R")),
        ],
        # Other words than the answer's.
        [assistant("Looking both up now."), assistant(None, PARIS), assistant(None, LONDON)],
    ],
    ids=["another-call", "other-text"],
)
def test_assistant_messages_that_do_not_join_into_the_answer_are_kept_as_read(resent):
    """Near misses: a run that, read as one, still differs from the recorded answer is new to the
    conversation, and its messages are added one by one, as the history gives them."""
    state = ConversationState.new("c")
    question = [user("Weather in Paris and London?")]
    apply_trace(state, b"t1", [chat(1, question, [assistant("Let me look both up.", PARIS, LONDON)])])
    apply_trace(state, b"t1", [chat(2, [*question, *resent], [assistant("Done.")])])
    assert _calls_and_texts(state)[-4:] == [
        (m.role.value, m.content, [c.id for c in m.tool_calls]) for m in [*resent, assistant("Done.")]
    ]


def test_two_answers_in_a_row_stay_two_messages_and_a_later_answer_resent_per_part_lines_up():
    """Joining a run is for comparing only, and run by run: an agent that spoke twice without a user
    turn between (a hand-off's second agent greeting) keeps its two messages, and a later answer
    that the next history resends one message per part is still recognised."""
    state = ConversationState.new("c")
    history = [user("Hi")]
    apply_trace(state, b"t1", [chat(1, history, [assistant("Hello!")])])
    history.append(assistant("Hello!"))
    apply_trace(state, b"t1", [chat(2, history, [assistant("How can I help?")])])
    history += [assistant("How can I help?"), user("Weather in Paris and London?")]
    apply_trace(state, b"t2", [chat(3, history, [assistant("Let me look both up.", PARIS, LONDON)])])
    history += [
        assistant("Let me look both up."),
        assistant(None, PARIS),
        assistant(None, LONDON),
        tool("call_P", "sunny"),
        tool("call_L", "rainy"),
    ]
    apply_trace(state, b"t2", [chat(4, history, [assistant("Paris sunny, London rainy.")])])
    assert _calls_and_texts(state) == [
        ("user", "Hi", []),
        ("assistant", "Hello!", []),
        ("assistant", "How can I help?", []),
        ("user", "Weather in Paris and London?", []),
        ("assistant", "Let me look both up.", ["call_P", "call_L"]),
        ("tool", "sunny", []),
        ("tool", "rainy", []),
        ("assistant", "Paris sunny, London rainy.", []),
    ]


@pytest.mark.parametrize("cut", [0, 1, 2], ids=["at-the-run", "inside-the-run", "at-its-last-part"])
def test_a_window_cut_inside_a_resent_run_adds_only_what_is_new(cut):
    """A history cut to its latest messages (analyzer.max_messages_per_span) may start inside the
    run that stands for the held answer: the part of the run it keeps is the answer's."""
    state = ConversationState.new("c")
    question = [user("Weather in Paris and London?")]
    apply_trace(state, b"t1", [chat(1, question, [assistant("Let me look both up.", PARIS, LONDON)])])
    resent = [
        assistant("Let me look both up."),
        assistant(None, PARIS),
        assistant(None, LONDON),
        tool("call_P", "sunny"),
        tool("call_L", "rainy"),
    ]
    apply_trace(state, b"t1", [chat(2, resent[cut:], [assistant("Paris sunny, London rainy.")])])
    assert [m.content for m in state.conversation.messages] == [
        "Weather in Paris and London?",
        "Let me look both up.",
        "sunny",
        "rainy",
        "Paris sunny, London rainy.",
    ]


def _turn_resent_per_part(state: ConversationState, history: list[Message], turn: int) -> None:
    """One user turn of two model calls: the first answers with a text and two calls, the second's
    history resends that answer one message per part (as the Responses API does); ``history`` grows."""
    history.append(user(f"Weather, round {turn}?"))
    calls = [ToolCall("get_weather", {"city": c, "round": turn}, id=f"c{turn}{c}") for c in "PL"]
    apply_trace(state, b"t", [chat(10 * turn, list(history), [assistant("Looking.", *calls)])])
    history += [assistant("Looking."), *(assistant(None, c) for c in calls)]
    history += [tool(c.id, "ok") for c in calls]
    apply_trace(state, b"t", [chat(10 * turn + 1, list(history), [assistant(f"Done {turn}.")])])
    history.append(assistant(f"Done {turn}."))


@pytest.mark.parametrize("cold", [False, True], ids=["warm", "gone-cold-once"])
def test_a_trimmed_conversation_resent_per_part_stays_one_copy(cold):
    """Trimmed to its latest messages (sessions.max_messages), a conversation whose histories resend
    each answer per part still lines up: the walk starts where the kept part starts in the history,
    also after going cold (when the previous walk's end is forgotten). Before, every call from the
    first trim on appended the whole history again."""
    state = ConversationState.new("c")
    history: list[Message] = []
    for turn in range(30):
        _turn_resent_per_part(state, history, turn)
        state.trim(40)
        if cold and turn == 20:
            state.go_cold(())
    conversation = state.conversation
    assert conversation.message_offset + len(conversation.messages) == 30 * 5
    users = [m.content for m in conversation.messages if m.role is Role.USER]
    assert len(users) == len(set(users))


def test_a_run_lined_up_once_is_not_joined_again_when_the_same_messages_come_back(monkeypatch):
    """The history cache hands back the same message objects for the part of a history resent: a
    run already paired with its held answer is taken as it is, and the walk resumes where the
    previous one ended, so a long conversation resent per part is not joined again run by run."""
    state = ConversationState.new("c")
    history: list[Message] = []
    for turn in range(6):
        _turn_resent_per_part(state, history, turn)
    joins = []
    monkeypatch.setattr(
        conversation_module, "_joined", lambda run: joins.append(run) or Message(Role.ASSISTANT)
    )
    apply_trace(state, b"u", [chat(100, [*history, user("Thanks!")], [assistant("Bye.")])])
    assert joins == []
    assert len(state.conversation.messages) == 6 * 5 + 2
    assert sum(len(m.tool_calls) for m in state.conversation.messages) == 12


def test_a_resent_history_with_its_system_prompt_read_anew_is_split_for_its_new_part_only():
    """Readers build the system prompt anew from its own attribute on every call while the history
    after it comes from the history cache (the same objects): the merge still extends the previous
    split, and the conversation is the one fresh copies of every message give."""
    history: list[Message] = []
    cached, fresh = ConversationState.new("cached"), ConversationState.new("fresh")
    splits = []
    for turn in range(4):
        history += [user(f"where is order {turn}?"), assistant(f"order {turn} ships today")]
        system = Message(Role.SYSTEM, "You are the order assistant.")
        apply_trace(cached, b"\x01" * 16, [chat(turn * 100, [system, *history[:-1]], [history[-1]])])
        copies = [Message(m.role, m.content) for m in [system, *history]]
        apply_trace(fresh, b"\x01" * 16, [chat(turn * 100, copies[:-1], copies[-1:])])
        splits.append(cached.last_inputs)
    assert texts(cached) == texts(fresh)
    assert texts(cached)[0] == ("system", "You are the order assistant.")
    assert len(cached.conversation.messages) == 1 + 8
    # Each split extended the one before rather than rebuilding the body from the whole history.
    assert all(later.body is splits[0].body for later in splits[1:])
    # A history that does not resend the previous one is split whole.
    apply_trace(cached, b"\x01" * 16, [chat(900, [user("a new topic")], [assistant("sure")])])
    assert cached.last_inputs.body is not splits[0].body


def test_the_tools_offered_are_kept_once_by_name():
    state = ConversationState.new("c1")
    span, reading = chat(1, [user("Where is my order?")], [assistant("Let me look.")])
    reading.tool_definitions = [{"name": "get_order", "description": "old", "parameters": None}]
    apply_trace(state, b"t1", [(span, reading)])
    span, reading = chat(2, [user("Where is my order?")], [assistant("Let me look.")])
    reading.tool_definitions = [
        {"name": "get_order", "description": "Look up an order", "parameters": None},
        {"name": "refund", "description": "", "parameters": None},
    ]
    apply_trace(state, b"t2", [(span, reading)])
    tools = state.conversation.available_tools
    assert list(tools) == ["get_order", "refund"] and tools["get_order"]["description"] == "Look up an order"
    # What the session store counts them by: their JSON characters, the replaced one no longer.
    assert state.tool_definition_characters == sum(
        len(json.dumps(t, separators=(",", ":"))) for t in tools.values()
    )


def test_the_conversation_after_a_trace_survives_trimming() -> None:
    state = ConversationState.new("c")
    for n in range(4):
        state.append(Message(Role.USER, f"question {n}"))
        state.append(Message(Role.ASSISTANT, f"answer {n}"))
        state.record_trace_end(b"trace-%d" % n)
    after = state.conversation_after(b"trace-1")
    assert after is not None and [m.content for m in after.messages][-1] == "answer 1"
    assert len(after.messages) == 4
    state.trim(5)  # keeps the last 4 messages (90 % of the bound): traces 0 and 1 are gone
    assert state.conversation_after(b"trace-0") is None and state.conversation_after(b"trace-1") is None
    after = state.conversation_after(b"trace-2")
    assert after is not None and [m.content for m in after.messages] == ["question 2", "answer 2"]
    assert state.conversation_after(b"unknown") is None


def test_the_conversation_after_a_trace_survives_a_system_prompt_put_in_front() -> None:
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [chat(1, [user("q0")], [assistant("a0")])])
    state.record_trace_end(b"t1")
    system = Message(Role.SYSTEM, "You are the planner.")
    apply_trace(state, b"t2", [chat(2, [system, user("q0"), assistant("a0"), user("q1")], [assistant("a1")])])
    assert texts(state)[0] == ("system", "You are the planner.")  # every message moved by one
    after = state.conversation_after(b"t1")
    assert after is not None
    assert [(m.role.value, m.content) for m in after.messages] == [
        ("system", "You are the planner."),
        ("user", "q0"),
        ("assistant", "a0"),
    ]


def test_the_conversation_after_a_trace_keeps_what_the_spans_said_of_it() -> None:
    """The offered tools come along (a trace-level tool_correctness needs them); the model calls of
    later traces do not."""
    state = ConversationState.new("c")
    state.conversation.available_tools["get_order"] = {"name": "get_order", "parameters": None}
    for n, trace in enumerate((b"\x01" * 16, b"\x02" * 16)):
        state.conversation.trace_ids.append(trace)
        state.conversation.llm_calls.append(LlmCall(span_id=bytes(8), trace_id=trace))
        state.append(Message(Role.USER, f"question {n}"))
        state.record_trace_end(trace)
    after = state.conversation_after(b"\x01" * 16)
    assert after is not None and list(after.available_tools) == ["get_order"]
    assert [call.trace_id for call in after.llm_calls] == [b"\x01" * 16]
    assert after.trace_ids == [b"\x01" * 16] and len(after.messages) == 1
    assert state.conversation.available_tools is not after.available_tools  # a copy


def fresh(text: str) -> str:
    """An equal string, another object."""
    return "".join(list(text))


def _copy(message: Message) -> Message:
    """``message`` as a later span reads it again: equal values, new objects."""
    calls = [
        ToolCall(c.name, dict(c.arguments) if isinstance(c.arguments, dict) else c.arguments, c.id)
        for c in message.tool_calls
    ]
    result = message.tool_result
    content = None if message.content is None else fresh(message.content)
    return Message(
        message.role,
        content,
        calls,
        None if result is None else ToolResult(result.call_id, result.name, content),
    )


LONG_PROMPT = "You are the support agent of Acme. " * 40
LONG_ANSWER = "Your order 1234 left our warehouse this morning and should arrive on Thursday. " * 2


def test_text_and_tool_calls_read_again_are_kept_once():
    state = ConversationState.new("shared")
    system = Message(Role.SYSTEM, LONG_PROMPT)
    ask = user("Where is my order 1234, and when does it arrive? " * 2)
    call = assistant(None, ToolCall("track", {"order": "1234"}, "c1"))
    apply_trace(state, b"t1", [chat(1, [system, ask], [call])])
    result = tool("c1", '{"status": "shipped", "eta": "Thursday", "carrier": "ACME Express", "id": 1234}')
    answer = assistant(LONG_ANSWER)
    # The next call resends the history: what the history cache read before is the same objects (the
    # user's question), the previous answer is read anew, and so is the system prompt.
    resent = [_copy(system), ask, _copy(call), result]
    apply_trace(state, b"t2", [chat(2, resent, [answer])])
    apply_trace(state, b"t3", [chat(3, [_copy(system), *resent[1:], _copy(answer), user("Thanks!")], [])])
    held = state.conversation.messages
    assert [m.role for m in held] == [
        Role.SYSTEM,
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
        Role.USER,
    ]
    assert state.last_inputs is not None
    latest = state.last_inputs.messages
    assert latest[0] is not held[0] and latest[0].content is held[0].content  # the prompt read anew
    assert latest[2] is not held[2] and latest[2].tool_calls is held[2].tool_calls
    assert latest[3].content is held[3].content and latest[3].tool_result.content is held[3].content
    # The answer read again is the conversation's own message from then on (its copy would keep
    # the text alive after the conversation's message was compacted).
    assert latest[4] is held[4]


def test_conversations_of_one_agent_hold_one_copy_of_its_system_prompt():
    first, second = ConversationState.new("one"), ConversationState.new("two")
    prompt = "".join(LONG_PROMPT)  # an equal text, another object than the one the table holds
    apply_trace(first, b"t1", [chat(1, [Message(Role.SYSTEM, prompt), user("Where is it?")], [])])
    copy = fresh(prompt)
    assert copy is not prompt
    apply_trace(second, b"t2", [chat(2, [Message(Role.SYSTEM, copy), user("And mine?")], [])])
    assert second.conversation.messages[0].content is first.conversation.messages[0].content
    # Near misses stay apart: another prompt, and a user message with the prompt's text.
    other = ConversationState.new("other")
    apply_trace(other, b"t3", [chat(3, [Message(Role.SYSTEM, prompt + " Be brief."), user(copy)], [])])
    held = other.conversation.messages
    assert held[0].content != prompt and held[1].content is not first.conversation.messages[0].content


def test_near_misses_are_not_shared():
    state = ConversationState.new("near")
    system = Message(Role.SYSTEM, LONG_PROMPT)
    answer = assistant(LONG_ANSWER, ToolCall("track", {"order": "1234", "express": True}, "c1"))
    apply_trace(state, b"t1", [chat(1, [system, user("Where is it?")], [answer])])
    # The same call id (and so the same fingerprint), arguments that == calls equal but that read
    # differently: keys in another order, 1 for true; and other arguments altogether.
    reordered = assistant(LONG_ANSWER, ToolCall("track", {"express": True, "order": "1234"}, "c1"))
    one_for_true = assistant(LONG_ANSWER, ToolCall("track", {"order": "1234", "express": 1}, "c1"))
    other_arguments = assistant(LONG_ANSWER, ToolCall("track", {"order": "9999", "express": True}, "c1"))
    short = Message(Role.SYSTEM, "Be brief.")
    short_again = _copy(short)
    for number, copy in enumerate((reordered, one_for_true, other_arguments), start=2):
        apply_trace(state, b"t%d" % number, [chat(number, [system, user("Where is it?"), copy], [])])
    apply_trace(state, b"t9", [chat(9, [short, short_again], [])])
    assert short_again.content is short.content  # below SHARED_TEXT_MIN_CHARACTERS: interned
    for copy in (reordered, one_for_true, other_arguments):
        assert copy.content is answer.content  # the text is the same: shared
        assert copy.tool_calls is not answer.tool_calls
    assert repr(reordered.tool_calls[0].arguments) == "{'express': True, 'order': '1234'}"
    assert repr(one_for_true.tool_calls[0].arguments) == "{'order': '1234', 'express': 1}"
    same = assistant(LONG_ANSWER, ToolCall("track", {"order": "1234", "express": True}, "c1"))
    apply_trace(state, b"t10", [chat(10, [system, user("Where is it?"), same], [])])
    assert same.tool_calls is answer.tool_calls  # written alike: shared


def test_short_texts_and_argument_values_are_one_string_per_process():
    """What many conversations say alike (a canned greeting, a tool's short answer, the ids passed
    to tools, the arguments' keys) is one string object for all of them: the real development set
    held 472 copies of its agents' greeting and 937 of one line id."""

    def conversation(key: str, arguments: dict, text: str) -> ConversationState:
        state = ConversationState.new(key)
        call = assistant(None, ToolCall("get_line", arguments, f"{key}-c1"))
        apply_trace(state, key.encode(), [chat(1, [user(fresh("Hi! How can I help you today?"))], [call])])
        apply_trace(state, key.encode() + b"2", [chat(2, [user(fresh(text))], [])])
        return state

    many_keys = {f"k{n}": fresh("L1002") for n in range(40)}  # a payload, not parameters
    nested = {"filter": {"line_id": fresh("L1002")}}
    one = conversation("one", {fresh("line_id"): fresh("L1002")}, LONG_ANSWER)
    two = conversation("two", {fresh("line_id"): fresh("L1002")}, fresh(LONG_ANSWER))
    three = conversation("three", many_keys, "ok")
    four = conversation("four", nested, "ok")
    first, second = one.conversation.messages, two.conversation.messages
    assert first[0].content is second[0].content  # the greeting
    arguments, again = first[1].tool_calls[0].arguments, second[1].tool_calls[0].arguments
    assert arguments == again == {"line_id": "L1002"}
    assert next(iter(arguments)) is next(iter(again)) and arguments["line_id"] is again["line_id"]
    # Near misses, left as read: a long text (shared within its conversation only), a value inside
    # a nested object, the values of arguments with many keys.
    assert first[2].content == second[2].content and first[2].content is not second[2].content
    inner = four.conversation.messages[1].tool_calls[0].arguments["filter"]
    assert inner["line_id"] is nested["filter"]["line_id"]
    assert three.conversation.messages[1].tool_calls[0].arguments is many_keys
    # A text of a str subclass is kept as it is (and not in the recent-texts table either).

    class Text(str):
        pass

    subclassed = ConversationState.new("five")
    apply_trace(subclassed, b"five", [chat(1, [user(Text("hello"))], [])])
    assert type(subclassed.conversation.messages[0].content) is Text
    assert subclassed.shared.texts() == []


@pytest.mark.parametrize(
    ("first", "again", "shared"),
    [
        # Repeated: the same tool with arguments written alike (a retry, a status polled again).
        (("track", {"order": "1234"}), ("track", {"order": "1234"}), True),
        (("search", ["shoes", {"size": 42}]), ("search", ["shoes", {"size": 42}]), True),
        # Near misses: another tool, other values, arguments that == calls equal but that read
        # differently (keys in another order, 1 for true), empty arguments.
        (("track", {"order": "1234"}), ("cancel", {"order": "1234"}), False),
        (("track", {"order": "1234"}), ("track", {"order": "1235"}), False),
        (("track", {"a": 1, "b": 2}), ("track", {"b": 2, "a": 1}), False),
        (("track", {"express": True}), ("track", {"express": 1}), False),
        (("track", {}), ("track", {}), False),
    ],
)
def test_a_repeated_call_takes_the_arguments_of_the_call_it_repeats(first, again, shared):
    """Agents repeat calls (on the real development set 3,474 of 5,334 argument dicts repeated one
    of their conversation's): a new call with the same tool and arguments written alike takes the
    arguments object of the recent call it repeats; nothing else is shared, and no value changes."""
    state = ConversationState.new("repeats")
    name, arguments = first
    earlier = ToolCall(name, arguments, "c1")
    apply_trace(state, b"t1", [chat(1, [user("Where is my order?")], [assistant(None, earlier)])])
    name, arguments = again
    written = repr(arguments)
    later = ToolCall(name, arguments, "c2")
    ask = user("And now?")
    history = [user("Where is my order?"), assistant(None, earlier), ask]
    apply_trace(state, b"t2", [chat(2, history, [assistant(None, later)])])
    assert state.conversation.messages[-1].tool_calls[0] is later
    assert (later.arguments is earlier.arguments) is shared
    assert repr(later.arguments) == written  # the value as read either way


def test_only_a_repeat_of_a_recent_call_is_shared():
    """The calls looked at are the conversation's recent ones (SHARED_VALUES tool-call lists): an
    older call's arguments are not searched for."""
    state = ConversationState.new("older")
    first = ToolCall("track", {"order": "1234"}, "c0")
    history = [user("Where is my order?"), assistant(None, first)]
    apply_trace(state, b"t0", [chat(1, list(history), [])])
    for number in range(1, conversation_module.SHARED_VALUES + 1):
        history.append(assistant(None, ToolCall("track", {"order": f"other {number}"}, f"c{number}")))
        apply_trace(state, b"t%d" % number, [chat(number + 1, list(history), [])])
    again = ToolCall("track", {"order": "1234"}, "late")
    recent = ToolCall("track", {"order": f"other {conversation_module.SHARED_VALUES}"}, "recent")
    history += [assistant(None, again), assistant(None, recent)]
    apply_trace(state, b"late", [chat(99, list(history), [])])
    assert again.arguments == first.arguments and again.arguments is not first.arguments
    assert recent.arguments is history[-3].tool_calls[0].arguments  # the latest call's: shared


def test_a_message_of_many_calls_looks_for_repeats_in_a_bounded_part_of_each_list():
    """A message of a thousand calls must not cost a million comparisons: the first REPEATS_SEARCHED
    calls of a message look at the first REPEATS_SEARCHED of each recent list."""
    bound = conversation_module.REPEATS_SEARCHED
    state = ConversationState.new("many")
    earlier = [ToolCall("get", {"id": number}, f"a{number}") for number in range(2 * bound)]
    history = [user("All of them"), assistant(None, *earlier), user("Again")]
    apply_trace(state, b"t1", [chat(1, history[:1], [history[1]])])
    later = [ToolCall("get", {"id": number}, f"b{number}") for number in range(2 * bound)]
    apply_trace(state, b"t2", [chat(2, history, [assistant(None, *later)])])
    assert [new.arguments is old.arguments for new, old in zip(later, earlier, strict=True)] == [
        True
    ] * bound + [False] * bound
    # One call repeating a call beyond the first REPEATS_SEARCHED of its list: not found.
    beyond = ToolCall("get", {"id": bound}, "c")
    apply_trace(
        state,
        b"t3",
        [chat(3, [*history, assistant(None, *later), user("One more")], [assistant(None, beyond)])],
    )
    assert beyond.arguments == earlier[bound].arguments and beyond.arguments is not earlier[bound].arguments


def test_arguments_read_again_stay_the_dict_their_tool_result_shares(monkeypatch):
    """A client that resends only its latest 50 messages makes every history a whole new read: each
    call's arguments are shared again, also once the call has left the conversation's table of
    recent calls (16), and once the table of shared strings has turned over and holds another
    conversation's equal strings. They must stay the very dict its tool result shares (a new dict
    would hold the arguments twice)."""
    import otelsignals.conversation as conversation_module

    table: dict[str, str] = {}
    monkeypatch.setattr(conversation_module, "_SHORT_TEXTS", table)

    state, other = ConversationState.new("window"), ConversationState.new("other")
    history = [user("Check the lines")]
    for number in range(40):
        call = ToolCall(
            "get_line", {fresh("line_id"): f"L{number}", fresh("format"): fresh("json")}, f"c{number}"
        )
        asked = assistant(None, call)
        result = ToolResult(f"c{number}", content="ok", arguments={"line_id": f"L{number}", "format": "json"})
        apply_trace(state, b"t%d" % number, [chat(number + 1, list(history[-50:]), [asked])])
        history += [asked, Message(Role.TOOL, "ok", tool_result=result)]
        # The table turns over (emptied when full), and another conversation's equal strings take it.
        table.clear()
        theirs = assistant(
            None, ToolCall("get_line", {fresh("line_id"): "L0", fresh("format"): fresh("json")})
        )
        apply_trace(other, b"o%d" % number, [chat(number + 1, [user(fresh("Check the lines"))], [theirs])])
    calls = {call.id: call for message in state.conversation.messages for call in message.tool_calls}
    results = [m.tool_result for m in state.conversation.messages if m.tool_result is not None]
    assert len(results) == 39
    assert all(result.arguments is calls[result.call_id].arguments for result in results)
    assert all(list(call.arguments) == ["line_id", "format"] for call in calls.values())  # order kept


def test_the_table_of_shared_short_texts_is_bounded(monkeypatch):
    """Short texts are shared through a table of the latest ones, emptied when full (sys.intern
    would keep every text ever read on Python 3.12); what was shared stays shared."""
    import otelsignals.conversation as conversation_module

    monkeypatch.setattr(conversation_module, "SHARED_SHORT_TEXTS", 8)
    monkeypatch.setattr(conversation_module, "_SHORT_TEXTS", {})
    first = ConversationState.new("first")
    apply_trace(first, b"t0", [chat(1, [user("".join(["hel", "lo"]))], [])])
    kept = first.conversation.messages[0].content
    for number in range(50):
        apply_trace(first, b"t%d" % (number + 1), [chat(number + 2, [user(f"question {number}")], [])])
        assert len(conversation_module._SHORT_TEXTS) <= 8
    second = ConversationState.new("second")
    apply_trace(second, b"u0", [chat(1, [user("".join(["hel", "lo"]))], [])])
    # "hello" left the table: the second conversation's is its own, the first one's unchanged.
    assert first.conversation.messages[0].content is kept
    assert (
        second.conversation.messages[0].content == "hello"
        and second.conversation.messages[0].content is not kept
    )


def test_sharing_changes_no_value_on_the_recorded_instrumentations(monkeypatch):
    """The recorded fixtures analysed with and without sharing give the same conversations, compared
    by their repr (``==`` would not tell {"a": 1, "b": 2} from {"b": 2, "a": 1}, nor 1 from true).
    Old messages compacted in one run may be left plain in the other (a text shared is held by the
    recent texts too, and compaction leaves it), so the repr is of their values, not their class."""
    from pathlib import Path

    from otelsignals.conversation import SharedValues
    from otelsignals.offline import read_requests, traces_in_time_order
    from otelsignals.pipeline.analyzer import Analyzer
    from otelsignals.telemetry import Telemetry

    fixtures = Path(__file__).parent / "fixtures"
    paths = [p for p in sorted(fixtures.rglob("*.binpb")) if not p.name.endswith(".logs.binpb")]

    def conversations() -> dict[str, str]:
        analyzer = Analyzer(Telemetry())
        for trace in traces_in_time_order(request for path in paths for request in read_requests(path)):
            analyzer.process(trace)
        return {
            state.conversation.key: repr([_values(message) for message in state.conversation.messages])
            for state in analyzer.sessions
        }

    shared = conversations()
    monkeypatch.setattr(SharedValues, "share", lambda self, messages: None)
    assert conversations() == shared and len(shared) >= 5


def _values(item: object) -> tuple[object, ...]:
    """A message's or tool result's fields, its tool result's as their values too."""
    return tuple(
        _values(value) if isinstance(value, ToolResult) else value
        for value in (getattr(item, field.name) for field in dataclasses.fields(item))
    )


def test_a_recent_list_keeps_its_latest_items_as_a_bounded_deque_does():
    import sys
    from collections import deque

    from otelsignals.model import RecentList

    recent: RecentList[int] = RecentList(3)
    bounded: deque[int] = deque(maxlen=3)
    for step in ([1], [2, 3], [4], [5, 6, 7, 8], []):
        recent.extend(step)
        bounded.extend(step)
        assert list(recent) == list(bounded)
    recent.append(9)
    bounded.append(9)
    recent += [10]
    bounded += [10]
    assert list(recent) == list(bounded) == [8, 9, 10]
    assert isinstance(recent, RecentList) and recent.maxlen == 3
    recent.remove(9)
    assert recent == [8, 10]
    with pytest.raises(TypeError):
        recent.insert(0, 1)
    assert sys.getsizeof(RecentList(500)) < sys.getsizeof(deque(maxlen=500)) / 4
    import copy
    import pickle

    for copied in (copy.copy(recent), copy.deepcopy(recent), pickle.loads(pickle.dumps(recent))):
        assert type(copied) is RecentList and copied == [8, 10] and copied.maxlen == 3


def test_messages_without_tool_calls_share_one_empty_list_that_cannot_grow() -> None:
    state = ConversationState.new("c1")
    answers = [assistant("One moment."), assistant("Checking.", ToolCall("lookup", {}))]
    apply_trace(state, b"t1", [chat(1, [user("Where is my refund?")], answers)])
    kept = state.conversation.messages
    assert [m.tool_calls for m in kept] == [[], [], [ToolCall("lookup", {})]]
    # A reader's own empty list (assistant() gives one) is swapped for the shared one.
    assert kept[0].tool_calls is kept[1].tool_calls is NO_TOOL_CALLS
    assert kept[2].tool_calls is not NO_TOOL_CALLS
    assert Message(Role.USER, "hi").tool_calls is NO_TOOL_CALLS and NO_TOOL_CALLS == []
    for grow in (
        lambda calls: calls.append(ToolCall("x")),
        lambda calls: calls.extend([ToolCall("x")]),
        lambda calls: calls.insert(0, ToolCall("x")),
        lambda calls: calls.__iadd__([ToolCall("x")]),
        lambda calls: calls.__setitem__(slice(0, 0), [ToolCall("x")]),
    ):
        with pytest.raises(TypeError, match="assign a new list"):
            grow(kept[0].tool_calls)
    assert NO_TOOL_CALLS == [] and kept[0].tool_calls == []
    # Copied or unpickled, a message keeps the shared list.
    assert copying.deepcopy(kept[0]).tool_calls is NO_TOOL_CALLS
    assert pickle.loads(pickle.dumps(kept[0])).tool_calls is NO_TOOL_CALLS


def test_finish_reasons_and_result_names_are_one_object_per_value() -> None:
    # Each span's JSON gives its own strings; a conversation keeps one per message.
    state = ConversationState.new("c1")
    for turn in range(3):
        answer = Message(Role.ASSISTANT, f"Answer {turn}.", finish_reason="".join(["st", "op"]))
        looked_up = ToolResult(call_id=f"c{turn}", name="".join(["look", "up"]))
        result = Message(Role.TOOL, "ok", tool_result=looked_up)
        apply_trace(state, f"t{turn}".encode(), [chat(turn, [user(f"Question {turn}?")], [result, answer])])
    messages = state.conversation.messages
    reasons = {id(m.finish_reason) for m in messages if m.finish_reason}
    names = {id(m.tool_result.name) for m in messages if m.tool_result is not None}
    assert len(reasons) == 1 and len(names) == 1


_CALLS = [
    LlmCall(
        b"span-id1",
        b"t1",
        "gpt-4o",
        input_tokens=120,
        output_tokens=30,
        start_time_unix_nano=10**18,
        end_time_unix_nano=10**18 + 5,
    ),
    LlmCall(b"span-id2", b"t1"),  # nothing known but its ids
    LlmCall(b"span-id3", b"t2", "m", status_code=200, input_tokens=0, output_tokens=None),
    LlmCall(b"\x00" * 8, b"t3", "m", input_tokens=2**63 - 1),
    LlmCall(b"\xff" * 8, b"t3", output_tokens=-(2**63) + 1),
    # kept whole: failed, a span id not of 8 bytes, a number beyond 64 bits, a count that is no int
    LlmCall(
        b"span-id4",
        b"t2",
        "m",
        failed=True,
        error_type="RateLimitError",
        error_message="429",
        status_code=429,
    ),
    LlmCall(b"s5", b"t2", input_tokens=5),
    LlmCall(b"span-id6", b"t2", input_tokens=2**70),
    LlmCall(b"span-id7", b"t2", output_tokens=-(2**63)),
    LlmCall(b"span-id8", b"t3", input_tokens=True),  # type: ignore[arg-type]
    LlmCall(b"span-id9", b"t3", failed=True, status_code=500),  # failed, no error named
    LlmCall(b"span-idA", b"t3", error_type="x"),
    LlmCall(b"span-idB", b"t3", error_message=""),
    LlmCall(b"span-idC", b"t3", input_tokens=2**63),
    LlmCall(b"span-idD", b"t3", start_time_unix_nano=None),  # type: ignore[arg-type]
    LlmCall(b"span-idE", b"t4", "m", input_tokens=7),  # in the columns, last
]


def test_recent_model_calls_read_back_each_call_as_it_was_added():
    kept = RecentModelCalls(_CALLS)
    plain = list(_CALLS)
    assert len(kept) == len(_CALLS) and list(kept) == _CALLS and kept == _CALLS and plain == kept
    assert [kept[index] for index in range(-len(_CALLS), len(_CALLS))] == _CALLS + _CALLS
    assert kept[1:5] == _CALLS[1:5] and kept[::-2] == _CALLS[::-2] and kept[-100:] == _CALLS
    assert type(kept[7].input_tokens) is int and kept[9].input_tokens is True
    with pytest.raises(IndexError):
        kept[len(_CALLS)]
    for copied in (copying.copy(kept), copying.deepcopy(kept), pickle.loads(pickle.dumps(kept))):
        assert copied == _CALLS
        copied.append(_CALLS[0])
        del copied[0]
        assert kept == _CALLS  # the copy has columns of its own
    for value in (_CALLS[0], (), tuple(_CALLS)):
        assert kept != value and value != kept  # equal to lists only, as a list is


@pytest.mark.parametrize(
    "change",
    [
        lambda calls: calls.__delitem__(slice(None, -3)),  # the pipeline's trimming
        lambda calls: calls.__delitem__(slice(2, 4)),
        lambda calls: calls.__delitem__(slice(None, None, 2)),
        lambda calls: calls.__delitem__(-1),
        lambda calls: calls.__delitem__(slice(None, -100)),
        lambda calls: calls.extend(_CALLS[:2]),
        lambda calls: calls.insert(1, _CALLS[3]),
        lambda calls: calls.__setitem__(0, _CALLS[5]),
        lambda calls: calls.__setitem__(slice(1, 3), _CALLS[4:]),
        lambda calls: calls.reverse(),
        lambda calls: calls.remove(_CALLS[2]),
        lambda calls: calls.pop(3),
        lambda calls: calls.pop(),
        lambda calls: calls.__delitem__(-1),
        lambda calls: calls.extend(calls),
        lambda calls: calls.__iadd__(calls),
        lambda calls: calls.clear(),
    ],
)
def test_recent_model_calls_change_as_a_list_does(change):
    kept, plain = RecentModelCalls(_CALLS), list(_CALLS)
    change(kept)
    change(plain)
    assert kept == plain and len(kept) == len(plain)


def test_recent_model_calls_trim_the_front_and_pop_the_end_in_place():
    """Neither builds the columns anew: clear() pops one call at a time, and rebuilding on each pop
    made it quadratic (2 s for 1,000 calls)."""
    kept = RecentModelCalls(_CALLS)
    columns = kept._span_ids
    del kept[:2]
    kept.pop()
    assert kept == _CALLS[2:-1]
    kept.clear()
    assert kept._span_ids is columns and kept == []


def test_a_call_that_cannot_be_kept_leaves_the_recent_model_calls_as_they_were():
    kept = RecentModelCalls(_CALLS)
    with pytest.raises(TypeError):
        kept[3] = LlmCall(None, b"t")  # type: ignore[arg-type]  # no span id: len() fails
    assert kept == _CALLS


def test_recent_model_calls_keep_a_call_in_under_70_bytes():
    """What the columns are for: an LlmCall and its integers took about 260 bytes a call."""
    span_ids = [number.to_bytes(8, "big") for number in range(500)]
    shared = {id(item) for item in (*span_ids, b"t", "gpt-4o")}
    kept = RecentModelCalls(
        LlmCall(
            span_id,
            b"t",
            "gpt-4o",
            status_code=200,
            input_tokens=1_000 + n,
            output_tokens=300,
            start_time_unix_nano=10**18 + n,
            end_time_unix_nano=10**18 + n + 7,
        )
        for n, span_id in enumerate(span_ids)
    )
    seen, stack, size = set(shared), [kept], 0
    while stack:
        item = stack.pop()
        if id(item) not in seen and not isinstance(item, type):
            seen.add(id(item))
            size += sys.getsizeof(item)
            stack.extend(gc.get_referents(item))
    assert size / len(kept) < 70  # 75 with a list of a None per call beside the columns


def agent_turn(
    steps: list[str],
    under_agent: bool = True,
    content: bool = True,
    user_text: str = "Is my order 12 shipped?",
) -> tuple[list, dict[bytes, bytes]]:
    """One trace of an agent turn, as (readings, parents): "call" a model call answering with a
    tool call (the tool run by its own span after it), "answer" a model call answering with text,
    "silent" a model call with no output recorded. Each model call resends the history so far."""
    agent = view(0)
    parent = agent.span_id if under_agent else b""
    history: list[Message] = [user(user_text)]
    readings: list = []
    for number, step in enumerate(steps):
        start = 10 * (number + 1)
        if step == "call":
            call = ToolCall("order_status", {"order": 12}, id=f"c{number}")
            readings.append(chat(start, list(history), [assistant(None, call)], parent=parent))
            history.append(assistant(None, call))
            result = ToolResult(call_id=call.id, name="order_status", content='{"status": "packed"}')
            readings.append(
                (
                    view(start + 5, parent),
                    SpanReading("tools", tool_execution=ToolExecution("order_status", call.id, None, result)),
                )
            )
            history.append(tool(call.id, '{"status": "packed"}'))
        else:
            outputs = [assistant("It is packed, not shipped yet.")] if step == "answer" else []
            readings.append(chat(start, list(history), outputs, parent=parent))
            history.extend(outputs)
    if not content:
        readings = [
            (
                span,
                SpanReading(
                    r.convention, llm_call=r.llm_call, tool_execution=r.tool_execution, content_captured=False
                ),
            )
            for span, r in readings
        ]
    parents = {span.span_id: span.parent_span_id for span, _ in readings} | {agent.span_id: b""}
    return readings, parents


@pytest.mark.parametrize(
    ("steps", "under_agent", "cut_off", "whole_turn"),
    [
        (["call"], True, True, True),  # the loop stopped after running a tool
        (["call", "call", "call"], True, True, True),  # a step limit
        (["call", "answer"], True, False, True),  # the answer came after the tool
        (["answer"], True, False, True),
        (["call"], False, True, False),  # a lone model call: one step of a turn
        (["call", "answer"], False, False, False),
        # A model call after the tools that recorded no answer (a stream not captured, a failed
        # call): the loop did not stop on the tool.
        (["call", "silent"], True, False, True),
        # An answer, then a tool loop that stopped: a trace may hold several exchanges.
        (["answer", "call"], True, True, True),
    ],
)
def test_how_a_trace_ends_is_read_from_its_last_assistant_message(
    steps: list[str], under_agent: bool, cut_off: bool, whole_turn: bool
) -> None:
    readings, parents = agent_turn(steps, under_agent)
    end = apply_trace(ConversationState.new("c1"), b"t1", readings, parents).turn_end
    assert end is not None and end.cut_off is cut_off and end.whole_turn is whole_turn
    assert end.user_spoke and not end.goes_on


@pytest.mark.parametrize(
    "steps",
    [
        ["call"],  # no content recorded: the tool spans alone say nothing of an answer
        ["silent"],  # the model call recorded its input only: the user's words are last
    ],
)
def test_a_trace_that_added_no_assistant_message_says_nothing_of_how_the_turn_ended(steps: list[str]) -> None:
    readings, parents = agent_turn(steps, content=steps != ["call"])
    assert apply_trace(ConversationState.new("c1"), b"t1", readings, parents).turn_end is None


def test_a_last_model_call_that_recorded_nothing_leaves_the_end_unknown() -> None:
    """The tools ran, then a model call without content (not captured, or its log records still to
    come): it may well have answered."""
    readings, parents = agent_turn(["call"])
    agent_id = next(parent for parent in parents.values() if parent)
    silent = view(90, agent_id)
    parents[silent.span_id] = agent_id
    no_content = SpanReading("test", llm_call=LlmCall(silent.span_id), content_captured=False)
    end = apply_trace(ConversationState.new("c1"), b"t1", [*readings, (silent, no_content)], parents).turn_end
    assert end is not None and not end.cut_off


def test_a_call_for_tools_left_last_is_not_a_turn_cut_off() -> None:
    """An agent that asks a person to approve a tool ends its turn on the call; a tool span that
    ran meanwhile for another call (asking for the approval) is not the call's result."""
    agent = view(0)
    call = ToolCall("refund_order", {"order": 12}, id="c1")
    model_call = chat(1, [user("Refund order 12.")], [assistant(None, call)], parent=agent.span_id)
    approval = ToolResult(call_id="approval-9", name="request_approval", content="pending")
    asking = (
        view(5, agent.span_id),
        SpanReading("tools", tool_execution=ToolExecution("request_approval", "approval-9", None, approval)),
    )
    for readings in ([model_call], [model_call, asking]):
        parents = {agent.span_id: b""} | {span.span_id: agent.span_id for span, _ in readings}
        end = apply_trace(ConversationState.new("c1"), b"t1", readings, parents).turn_end
        assert end is not None and not end.cut_off


def test_a_tool_that_ran_after_the_answer_does_not_make_the_turn_cut_off() -> None:
    """An application that saves a memory after answering, or a tool span the history cannot place
    (another name, the framework's own run id), ends up after the answer: the answer still counts."""
    readings, parents = agent_turn(["call", "answer"])
    agent_id = next(parent for parent in parents.values() if parent)
    late = ToolResult(call_id="run-77", name="save_memory", content="saved")
    after = (
        view(90, agent_id),
        SpanReading("tools", tool_execution=ToolExecution("save_memory", "run-77", None, late)),
    )
    parents[after[0].span_id] = agent_id
    state = ConversationState.new("c1")
    end = apply_trace(state, b"t1", [*readings, after], parents).turn_end
    assert state.conversation.messages[-1].role is Role.TOOL  # the stray result is last
    assert end is not None and not end.cut_off


def test_a_new_trace_without_the_users_words_goes_on_with_a_turn_and_a_late_part_with_none() -> None:
    state = ConversationState.new("c1")
    readings, parents = agent_turn(["call"])
    first = apply_trace(state, b"t1", readings, parents).turn_end
    assert first is not None and first.cut_off and first.user_spoke and not first.goes_on
    call = ToolCall("order_status", {"order": 12}, id="c0")
    history = [user("Is my order 12 shipped?"), assistant(None, call), tool("c0", '{"status": "packed"}')]
    answer = chat(100, history, [assistant("It is packed.")])
    end = apply_trace(state, b"t2", [answer], {answer[0].span_id: b""}).turn_end
    assert end is not None and end.goes_on and not end.user_spoke and not end.cut_off
    late = chat(200, history, [assistant("It is packed, yes.")])
    end = apply_trace(state, b"t1", [late], {late[0].span_id: b""}).turn_end
    assert end is not None and not end.goes_on  # a late part goes on with nothing


# --- Which tool result a tool span gives its details to (conversation._ToolResults) -------------


def _results_searched_from_the_end(state: ConversationState, execution: ToolExecution) -> int | None:
    """The definition the lookup keeps: the latest non-provisional tool result with the span's call
    id, or without one the latest of its tool not yet given arguments, searched from the end."""
    provisional = {id(message) for message in state.provisional}
    messages = state.conversation.messages
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        result = message.tool_result
        if message.role is not Role.TOOL or result is None or id(message) in provisional:
            continue
        if execution.call_id:
            if result.call_id == execution.call_id:
                return index
        elif result.name == execution.name and result.arguments is None:
            return index
    return None


_CALL_IDS = st.sampled_from(["call_1", "call_2", "call_3", "call_4", None])
_TOOLS = st.sampled_from(["search", "fetch"])


@st.composite
def _messages_with_results(draw: st.DrawFn) -> list[Message]:
    messages: list[Message] = []
    for _ in range(draw(st.integers(0, 220))):
        kind = draw(st.sampled_from(["user", "tool", "tool", "bare tool"]))
        if kind == "user":
            messages.append(user("next"))
        elif kind == "bare tool":
            messages.append(Message(Role.TOOL, "no result recorded"))
        else:
            arguments = draw(st.sampled_from([None, {"q": 1}]))
            result = ToolResult(call_id=draw(_CALL_IDS), name=draw(_TOOLS), arguments=arguments)
            messages.append(Message(Role.TOOL, "ok", tool_result=result))
    return messages


@settings(max_examples=150, deadline=None)  # 300 took 23 s of CI
@given(
    messages=_messages_with_results(),
    provisional=st.lists(st.integers(0, 219), max_size=20),
    executions=st.lists(st.tuples(_CALL_IDS, _TOOLS), min_size=1, max_size=8),
)
def test_a_tool_span_finds_the_result_a_search_from_the_end_finds(messages, provisional, executions):
    state = ConversationState.new("c1")
    state.conversation.messages = messages
    state.provisional = [messages[i] for i in provisional if i < len(messages)]
    lookup = conversation_module._ToolResults(state)
    for call_id, name in executions:
        execution = ToolExecution(name, call_id, None, ToolResult(call_id=call_id))
        assert lookup.find(execution) == _results_searched_from_the_end(state, execution)


class _CountedReads(list):
    """A message list that counts the messages read from it."""

    reads = 0

    def __getitem__(self, index):
        _CountedReads.reads += 1
        return super().__getitem__(index)

    def __iter__(self):
        for item in super().__iter__():
            _CountedReads.reads += 1
            yield item


def test_a_trace_of_many_tool_spans_reads_a_long_history_once_not_once_per_span():
    """200 tool spans whose results the trace's model calls resent far back: each searched the
    history from the end before (80,000 message reads here); now the first looks at the latest
    TOOL_RESULT_WINDOW messages, finds nothing there and builds a table of call ids in one pass,
    and the others look their call id up in it."""
    history: list[Message] = []
    for n in range(200):
        call = ToolCall("search", {"q": n}, id=f"call_{n}")
        history += [assistant(None, call), tool(f"call_{n}", f"result {n}")]
    history += [user("and now?")] * 200  # the turn went on after its tools
    state = ConversationState.new("c1")
    state.conversation.messages = _CountedReads(history)
    lookup = conversation_module._ToolResults(state)
    _CountedReads.reads = 0
    for n in range(200):
        execution = ToolExecution("search", f"call_{n}", {"q": n}, ToolResult(call_id=f"call_{n}"))
        assert lookup.find(execution) == 2 * n + 1
    assert _CountedReads.reads <= len(history) + conversation_module.TOOL_RESULT_WINDOW


def test_tool_spans_give_their_details_to_results_far_back_in_the_history():
    """One trace: a model call resends 100 tool steps, then their tool spans are read (failures
    among them): each result far back gets its span's details, and no result is added."""
    calls = [ToolCall("search", {"q": n}, id=f"call_{n}") for n in range(100)]
    inputs = [user("look everything up")]
    for call in calls:
        inputs += [assistant(None, call), tool(call.id or "", f"found {call.arguments}")]
    inputs += [user("thanks")] * 70  # more than TOOL_RESULT_WINDOW messages after the last result
    spans = [chat(1, inputs, [assistant("Done.")])]
    for n, call in enumerate(calls):
        failure = ToolResult(
            call_id=call.id, name="search", is_error=n % 7 == 0, status_code=500 if n % 7 == 0 else None
        )
        spans.append(
            (
                view(2 + n),
                SpanReading("tools", tool_execution=ToolExecution("search", call.id, {"q": n}, failure)),
            )
        )
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", spans)
    messages = state.conversation.messages
    assert len(messages) == len(inputs) + 1
    results = [m.tool_result for m in messages if m.role is Role.TOOL]
    assert [r.call_id for r in results if r is not None] == [call.id for call in calls]
    assert [r.arguments for r in results if r is not None] == [{"q": n} for n in range(100)]
    assert [r.status_code for r in results if r is not None] == [
        500 if n % 7 == 0 else None for n in range(100)
    ]


def _snapshot(state: ConversationState) -> list[tuple[object, ...]]:
    return [
        (
            m.role,
            m.content,
            m.span_id,
            None
            if m.tool_result is None
            else (
                m.tool_result.call_id,
                m.tool_result.name,
                repr(m.tool_result.arguments),
                m.tool_result.is_error,
                m.tool_result.status_code,
                m.tool_result.content,
            ),
        )
        for m in state.conversation.messages
    ] + [("provisional", len(state.provisional))]


def _random_traces(seed: int) -> ConversationState:
    """Traces of a model call resending up to 90 tool steps and up to 12 tool spans (duplicate call
    ids, spans without one, results already there or not yet, failures), merged in turn."""
    global _ids
    _ids = itertools.count(1)  # the same span ids on every run of a seed
    rng = random.Random(seed)
    state = ConversationState.new("c")
    ids = [f"call_{i}" for i in range(6)] + [None]
    for number in range(rng.randrange(1, 5)):
        inputs = [user("go")]
        for k in range(rng.randrange(0, 90)):
            call_id, name = rng.choice(ids), rng.choice(["search", "fetch"])
            if rng.random() < 0.5:
                result = (
                    tool(call_id, f"r{k}")
                    if call_id
                    else Message(Role.TOOL, f"r{k}", tool_result=ToolResult(name=name))
                )
                inputs += [assistant(None, ToolCall(name, {"q": k}, id=call_id)), result]
            else:
                inputs.append(user(f"u{k}"))
        spans = [chat(100 * number + 1, inputs, [assistant(f"done {number}")])]
        for n in range(rng.randrange(0, 12)):
            call_id, name = rng.choice(ids), rng.choice(["search", "fetch"])
            failed = rng.random() < 0.3
            result = ToolResult(
                call_id=call_id,
                name=name,
                is_error=failed,
                status_code=500 if failed else None,
                content=rng.choice([None, "out"]),
            )
            execution = ToolExecution(name, call_id, rng.choice([None, {"q": n}]), result)
            spans.append((view(100 * number + 2 + n), SpanReading("tools", tool_execution=execution)))
        apply_trace(state, f"t{number}".encode(), spans)
    return state


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_traces_of_tool_spans_merge_as_with_the_search_from_the_end(seed):
    """Through apply_trace, where giving a result its details and adding provisional results change
    the conversation between one tool span's lookup and the next: the same conversation as with the
    search from the end (a reviewer's differential check: 3,000 seeds, no difference)."""
    found = _snapshot(_random_traces(seed))
    lookup = conversation_module._ToolResults.find
    try:
        conversation_module._ToolResults.find = lambda self, execution: _results_searched_from_the_end(
            self._state, execution
        )
        searched = _snapshot(_random_traces(seed))
    finally:
        conversation_module._ToolResults.find = lookup
    assert found == searched


PARALLEL = [ToolCall("weather", {"city": city}, id=city[:3].lower()) for city in ("Paris", "Rome", "Oslo")]
WEATHER = {"par": "18C sunny", "rom": "22C cloudy", "osl": "4C snow"}


def _parallel_turn(result_order: list[str]) -> tuple[list[Message], list[Message]]:
    """(A history asking three weather calls at once with their results in ``result_order``, the answer.)"""
    asked = assistant(None, *PARALLEL)
    results = [tool(call_id, WEATHER[call_id]) for call_id in result_order]
    return [user("Weather in Paris, Rome and Oslo?"), asked, *results], [
        assistant("Paris 18C, Rome 22C, Oslo 4C.")
    ]


@pytest.mark.parametrize("first_order", [["rom", "par", "osl"], ["osl", "rom", "par"], ["par", "rom", "osl"]])
def test_parallel_results_resent_in_another_order_line_up(first_order):
    """The results of parallel calls taken in the order they finished, then resent in the order the
    calls were asked (or the other way round): the same history, not a new one to append again
    (which showed the results and the answer twice: a false repetition)."""
    history, answer = _parallel_turn(first_order)
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [chat(1, [history[0]], [history[1]]), chat(30, history, answer)])
    resent, _ = _parallel_turn(["par", "rom", "osl"])
    update = apply_trace(
        state, b"t2", [chat(60, [*resent, *answer, user("Thanks")], [assistant("You're welcome!")])]
    )
    assert update.new_messages == 2
    assert [m.role.value for m in state.conversation.messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]


@pytest.mark.parametrize(
    "changed",
    ["a result of another call", "a result left out", "an answer moved among the results"],
)
def test_a_history_that_differs_beyond_the_results_order_is_not_taken_for_the_same(changed):
    """Near misses: only the order of consecutive results may differ; a result of another call, a
    result missing, or another kind of message moved into the run is no reordering."""
    history, answer = _parallel_turn(["par", "rom", "osl"])
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [chat(1, [history[0]], [history[1]]), chat(30, history, answer)])
    resent = list(history)
    if changed == "a result of another call":
        resent[3] = tool("ber", "12C rain")
    elif changed == "a result left out":
        del resent[4]
    else:
        resent = [*resent[:3], *answer, *resent[3:]]
    resent += [] if changed == "an answer moved among the results" else answer
    fingerprints_held = list(state.body_fingerprints)
    assert not conversation_module._same_but_results_reordered(
        conversation_module.fingerprints(resent), resent, fingerprints_held, 0
    )


def _condense_prompt(transcript: list[tuple[str, str]], follow_up: str) -> Message:
    """LangChain's condense-question step (ConversationalRetrievalChain, create_history_aware_retriever):
    the chat history pasted into one prompt."""
    history = "\n".join(f"{'Human' if role == 'user' else 'Assistant'}: {text}" for role, text in transcript)
    return user(
        "Given the following conversation and a follow up question, rephrase the follow up question "
        f"to be a standalone question.\n\nChat History:\n{history}\nFollow Up Input: {follow_up}\n"
        "Standalone question:"
    )


def test_a_side_call_that_pastes_the_transcript_into_its_prompt_is_no_turn():
    """Turn after turn, the condense step's prompt quotes what the user said and what the agent
    answered: neither the prompt (read again, every complaint in it would count twice) nor its
    answer joins the conversation; the question the agent answered does, and every call counts."""
    qa_system = Message(Role.SYSTEM, "Answer from the context. Context: shipping policy ...")
    state = ConversationState.new("c1")
    apply_trace(
        state,
        b"t1",
        [
            chat(
                1,
                [qa_system, user("My order 1234 never arrived, this is ridiculous!")],
                [assistant("Order 1234 is delayed at the depot, arriving Friday.")],
            )
        ],
    )
    follow_ups = ["Can you send it faster?", "And what does express cost?"]
    standalone = ["Can order 1234 be shipped faster?", "What does express shipping cost for order 1234?"]
    answers = ["Yes, express is possible.", "Express costs $9.90."]
    for turn, (follow_up, question, answer) in enumerate(zip(follow_ups, standalone, answers, strict=True)):
        transcript = texts(state)[1:]
        condense = chat(30 + 40 * turn, [_condense_prompt(transcript, follow_up)], [assistant(question)])
        qa = chat(50 + 40 * turn, [qa_system, user(question)], [assistant(answer)])
        update = apply_trace(state, f"t{turn + 2}".encode(), [condense, qa])
        assert len(update.llm_calls) == 2
    assert texts(state)[1:] == [
        ("user", "My order 1234 never arrived, this is ridiculous!"),
        ("assistant", "Order 1234 is delayed at the depot, arriving Friday."),
        ("user", standalone[0]),
        ("assistant", answers[0]),
        ("user", standalone[1]),
        ("assistant", answers[1]),
    ]


def test_a_chat_title_asked_with_the_transcript_in_its_prompt_is_no_turn():
    state = ConversationState.new("c1")
    question, answer = (
        user("My order 1234 never arrived, can you check?"),
        assistant("Order 1234 is delayed, arriving Friday."),
    )
    apply_trace(state, b"t1", [chat(1, [SYSTEM, question], [answer])])
    transcript = f"USER: {question.content}\nASSISTANT: {answer.content}"
    title = user(f"Create a concise 3-5 word title for this chat.\n\n{transcript}")
    update = apply_trace(state, b"t2", [chat(30, [title], [assistant("Delayed Order Inquiry")])])
    assert update.new_messages == 0 and len(update.llm_calls) == 1
    assert texts(state)[-1] == ("assistant", answer.content)


@pytest.mark.parametrize(
    "said",
    [
        # the agent's answer quoted back (an API that sends only the new turn)
        "You said 'Order 1234 is delayed, arriving Friday.' but it is Saturday and nothing came.",
        # the user's own question again, in a longer message
        "Again: My order 1234 never arrived, can you check? I need it for Monday.",
        # quoting only short messages
        "ok. yes. Please check again.",
        # a new message quoting nothing
        "Where is my refund for order 999?",
    ],
)
def test_a_new_turn_that_quotes_one_side_of_the_conversation_is_heard(said):
    """Near misses: a user's new message (an API that sends only the new turn) that quotes the
    agent, or themself, or nothing: a turn of the conversation."""
    state = ConversationState.new("c1")
    question, answer = (
        user("My order 1234 never arrived, can you check?"),
        assistant("Order 1234 is delayed, arriving Friday."),
    )
    apply_trace(state, b"t1", [chat(1, [question], [answer])])
    apply_trace(state, b"t2", [chat(30, [user("ok")], [assistant("Anything else?")])])
    apply_trace(state, b"t3", [chat(60, [user("yes")], [assistant("Go ahead.")])])
    apply_trace(state, b"t4", [chat(90, [user(said)], [assistant("Let me look.")])])
    assert texts(state)[-2:] == [("user", said), ("assistant", "Let me look.")]


def test_a_window_that_starts_with_a_copy_of_the_latest_answer_adds_only_its_new_turn():
    """A sliding window (the latest six messages) whose first message is word for word the answer
    the conversation ended on ("Is there anything else?"): the window lines up where it repeats the
    most of the conversation's tail, not at its first message (which appended four held messages
    again). Found by bench/alignment_fuzz.py's window style."""
    anything = "Is there anything else I can help you with?"
    call = ToolCall("book", {"table": 2}, id="call_8")
    held = [
        user("Hi"),
        assistant(anything),
        user("go ahead"),
        assistant(None, call),
        tool("call_8", "booked"),
    ]
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [chat(1, [SYSTEM, *held], [assistant(anything)])])
    window = [*held[1:], assistant(anything), user("Book a table for 2 at La Piazza on Thursday evening.")]
    update = apply_trace(state, b"t2", [chat(30, [SYSTEM, *window], [assistant("Booked for Thursday.")])])
    assert update.new_messages == 2
    assert texts(state)[-3:] == [
        ("assistant", anything),
        ("user", "Book a table for 2 at La Piazza on Thursday evening."),
        ("assistant", "Booked for Thursday."),
    ]


def test_the_condense_step_is_no_turn_however_long_ago_the_users_own_words_were_held():
    """The condense step pastes the user's own words, while the conversation holds the standalone
    questions written from them: past the first turns, only the first question and the answers
    are held as pasted; a first answer as short as "Done." still counts as quoted."""
    qa_system = Message(Role.SYSTEM, "Answer from the context.")
    first, done = "Change the delivery address of order 59702 to Elm Street 4.", "Done."
    state = ConversationState.new("c1")
    apply_trace(state, b"t1", [chat(1, [qa_system, user(first)], [assistant(done)])])
    pasted = [("user", first), ("assistant", done)]
    for turn in range(1, 7):
        follow_up, question = f"and the one after, number {turn}?", f"What about order {59702 + turn}?"
        answer = f"Order {59702 + turn} ships on day {turn}."
        condense = chat(40 * turn, [_condense_prompt(pasted, follow_up)], [assistant(question)])
        qa = chat(40 * turn + 20, [qa_system, user(question)], [assistant(answer)])
        update = apply_trace(state, f"t{turn + 1}".encode(), [condense, qa])
        assert update.new_messages == 2 and len(update.llm_calls) == 2
        assert texts(state)[-2:] == [("user", question), ("assistant", answer)]
        pasted += [("user", follow_up), ("assistant", answer)]


def test_a_short_answer_is_quoted_only_as_words_of_its_own():
    """Near miss: a new turn (an API that sends only it) quoting the user's first message, with the
    short answer "Done." only inside a longer word: a turn."""
    state = ConversationState.new("c1")
    first = "Change the delivery address of order 59702 to Elm Street 4."
    apply_trace(state, b"t1", [chat(1, [user(first)], [assistant("Done.")])])
    said = f"Undone.Again: {first} It still shows the old one."
    apply_trace(state, b"t2", [chat(30, [user(said)], [assistant("Let me look.")])])
    assert texts(state)[-2:] == [("user", said), ("assistant", "Let me look.")]


BUFFER_MEMORY = (
    "The following is a friendly conversation between a human and an AI.\n\nCurrent conversation:\n"
    "{history}\nHuman: {input}\nAI:"
)


def test_a_history_kept_as_text_in_the_only_prompt_gives_the_users_new_turn():
    """LangChain's ConversationChain with ConversationBufferMemory pastes the transcript into its one
    prompt: what comes after the pasted part is the user's new turn (a reviewer found every turn after
    the first dropped as a side call: no signal fired on "Get me a human now!")."""
    turns = [
        ("My order 1234 never arrived.", "I'm sorry! Order 1234 is delayed at the depot, arriving Friday."),
        ("This is useless. Get me a human now!", "I understand. Let me transfer you to an agent."),
    ]
    state = ConversationState.new("c1")
    history: list[str] = []
    for number, (said, answer) in enumerate(turns):
        prompt = BUFFER_MEMORY.format(history="\n".join(history), input=said)
        apply_trace(
            state, f"t{number}".encode(), [chat(40 * number + 1, [user(prompt)], [assistant(answer)])]
        )
        history += [f"Human: {said}", f"AI: {answer}"]
    assert texts(state)[-2:] == [("user", "This is useless. Get me a human now!"), ("assistant", turns[1][1])]
    assert len(state.conversation.messages) == 4


@pytest.mark.parametrize(
    "said",
    [
        "hello?? you told me Order 1234 is delayed at the depot, arriving Friday. It's Saturday!!",
        "thanks for nothing. Order 1234 is delayed at the depot, arriving Friday. That's what you said",
        "I said My order 1234 never arrived. and you said Order 1234 is delayed at the depot, arriving Fri",
    ],
)
def test_a_user_who_quotes_both_sides_without_speaker_labels_is_heard(said):
    """Near misses found by a review: in an API that sends only the new turn, a user who quotes the
    agent and (as a word) an earlier message of their own is no pasted transcript: no "User:" or
    "Assistant:" label stands before what is quoted."""
    state = ConversationState.new("c1")
    for number, (asked, answer) in enumerate(
        [
            ("hello", "Hi! How can I help you today?"),
            ("thanks", "You're welcome!"),
            ("My order 1234 never arrived.", "Order 1234 is delayed at the depot, arriving Friday."),
        ]
    ):
        apply_trace(state, f"t{number}".encode(), [chat(40 * number + 1, [user(asked)], [assistant(answer)])])
    update = apply_trace(state, b"t9", [chat(500, [user(said)], [assistant("I'm sorry, let me check.")])])
    assert update.new_messages == 2 and texts(state)[-2] == ("user", said)


def test_the_parents_kept_for_later_parts_stay_bounded():
    """A trace that stays open for a whole session (one call per exporter batch): what is kept for its
    later parts does not grow with it, nor do the traces it is kept for."""
    from otelsignals.conversation import MODEL_CALL_PARENT_TRACES, MODEL_CALL_PARENTS_KEPT

    state = ConversationState.new("c1")
    for number in range(300):
        parent = view(0)
        apply_trace(
            state,
            b"long",
            [chat(10 * number, [user(f"q{number}")], [assistant(f"a{number}")], parent=parent.span_id)],
        )
    for number in range(10):
        apply_trace(state, f"t{number}".encode(), [chat(5000 + number, [user("x")], [assistant("y")])])
    kept = state.model_call_parents
    assert kept is not None and len(kept) <= MODEL_CALL_PARENT_TRACES
    assert all(len(parents) <= MODEL_CALL_PARENTS_KEPT for parents in kept.values())
