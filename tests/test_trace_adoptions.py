"""A trace's later histories catch up with its earlier merges exactly as if each merge had been
applied to them at once (conversation._TraceAdoptions), whether a history takes the previous
catch-up's window over or is replayed position by position."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelsignals.conventions.memory import HistoryCache, adopt_in
from otelsignals.conversation import _TraceAdoptions
from otelsignals.model import Message, Role, leading_system_prompts

_ROLES = (Role.USER, Role.ASSISTANT, Role.TOOL)


def _copy(message: Message) -> Message:
    return Message(message.role, content=message.content)


@st.composite
def traces(draw: st.DrawFn) -> tuple[list[list[Message]], list[list[tuple[int, int, list[int], list[int]]]]]:
    """Histories of a trace's calls, as readers hand them out: each resends the previous one's body
    (the same objects, as the history cache hands them out) and 0-3 messages of its own, behind the
    trace's 0-2 system prompts (mostly the same ones; now and then read anew, or another number of
    them); now and then one is read whole (copies of everything, which the next ones resend). And,
    per call, the merges' draws: (start, end, positions whose message is replaced, which of them by
    an earlier replacement rather than a new message)."""
    body = [Message(_ROLES[i % 3], content=f"m{i}") for i in range(draw(st.integers(0, 40)))]
    system_prompts = [Message(Role.SYSTEM, content=f"s{i}") for i in range(2)]
    trace_lead = draw(st.integers(0, 2))
    histories: list[list[Message]] = []
    merges = []
    for _ in range(draw(st.integers(1, 12))):
        lead = trace_lead if draw(st.integers(0, 5)) else draw(st.integers(0, 2))
        prompts = system_prompts[:lead]
        if draw(st.integers(0, 5)) == 0:
            prompts = [_copy(m) for m in prompts]
        body = body + [Message(_ROLES[i % 3], content="new") for i in range(draw(st.integers(0, 3)))]
        if draw(st.integers(0, 5)) == 0:  # read whole: copies, the window cannot be taken over
            body = [_copy(m) for m in body]
        history = prompts + body
        histories.append(history)
        start = draw(st.integers(-2, len(history) + 2))
        end = start + draw(st.integers(0, 20))  # windows of 16 positions or more are kept
        replaced = draw(st.lists(st.integers(0, 40), max_size=10))
        again = draw(st.lists(st.booleans(), min_size=len(replaced), max_size=len(replaced)))
        merges.append([(start, end, replaced, [int(flag) for flag in again])])
    return histories, merges


class _Holding(HistoryCache):
    """A history cache that holds the given lists: those histories are adopted at every merge."""

    def __init__(self, held: list[list[Message]]) -> None:
        super().__init__()
        self._held = held

    def holds(self, messages: list[Message]) -> bool:
        return any(messages is held for held in self._held)


@pytest.mark.source_modules  # _Holding subclasses a class of the compiled core
@settings(max_examples=400, deadline=None)
@given(traces(), st.lists(st.integers(0, 11), max_size=3))
def test_each_history_catches_up_with_exactly_what_the_earlier_merges_did(
    trace: tuple[list[list[Message]], list[list[tuple[int, int, list[int], list[int]]]]],
    held_by_the_cache: list[int],
) -> None:
    histories, merges = trace
    # The reference: every merge applied at once to every later history (the eager adoption).
    expected = [list(history) for history in histories]
    held = [histories[number] for number in held_by_the_cache if number < len(histories)]
    adoptions = _TraceAdoptions(histories, _Holding(held))
    put_there: list[Message] = []  # replacements made so far: a later merge may replace them again
    for number, history in enumerate(histories):
        adoptions.catch_up(number)
        assert [id(m) for m in history] == [id(m) for m in expected[number]], f"call {number}"
        lead = leading_system_prompts(history)
        for start, end, replaced, again in merges[number]:
            counterparts: dict[int, Message] = {}
            span = range(max(0, start), min(end + lead, len(history)))
            for position, reuse in zip(replaced, again, strict=True):
                if not span:
                    break
                copy = history[span[position % len(span)]]
                # A merge's replacement reads as the copy: the same role (so every history keeps
                # its count of leading system prompts).
                alike = [m for m in put_there if m.role is copy.role]
                shown = alike[position % len(alike)] if reuse and alike else _copy(copy)
                if shown is not copy:
                    counterparts[id(copy)] = shown
            put_there.extend(counterparts.values())
            adoptions.add(counterparts, start, end)
            for later in expected[number + 1 :]:
                adopt_in(later, counterparts, start, end + leading_system_prompts(later))


def test_a_long_trace_takes_each_window_over_and_replays_only_the_new_merge(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """200 calls, each resending the previous history and adding two messages, each merge spanning
    its call's new messages: every catch-up after the tenth takes the window over, and looks up
    only the positions the latest merge spanned (the previous algorithm looked up every position
    any earlier merge spanned: 2 × call of them)."""
    messages = [Message(_ROLES[i % 2], content=f"m{i}") for i in range(402)]
    histories = [messages[: 2 * call + 1] for call in range(200)]
    shown = {id(m): _copy(m) for m in messages}
    adoptions = _TraceAdoptions(histories, HistoryCache())
    replayed: list[int] = []
    original = _TraceAdoptions._replayed

    def counted(self: _TraceAdoptions, message: Message, position: int, lead: int, since: int) -> Message:
        replayed.append(position)
        return original(self, message, position, lead, since)

    monkeypatch.setattr(_TraceAdoptions, "_replayed", counted)
    for call, history in enumerate(histories):
        replayed.clear()
        adoptions.catch_up(call)
        if call >= 10:  # the earlier merges spanned 17 positions or more: a window worth keeping
            # the latest merge spanned 2 positions past the window taken over
            assert replayed == [2 * call - 3, 2 * call - 2], f"call {call}"
        caught_up = history[: max(0, 2 * call - 1)]  # the positions the earlier merges spanned
        assert all(message is shown[id(messages[i])] for i, message in enumerate(caught_up))
        new = history[2 * call - 1 :] if call else history
        adoptions.add({id(m): shown[id(m)] for m in new}, max(0, 2 * call - 1), 2 * call + 1)


def _messages(count: int) -> list[Message]:
    return [Message(_ROLES[i % 2], content=f"m{i}") for i in range(count)]


def test_a_window_caught_up_under_another_count_of_system_prompts_is_not_taken_over() -> None:
    """The same messages from position 2 on, behind two system prompts, then behind one: a merge
    reaches as many positions past its end as a history has leading system prompts."""
    m = _messages(22)
    system, other_system = Message(Role.SYSTEM, content="s"), Message(Role.SYSTEM, content="t")
    shown = Message(m[20].role, content=m[20].content)
    histories = [[system, other_system, *m[2:21]], [system, other_system, *m[2:22]], [system, m[1], *m[2:22]]]
    adoptions = _TraceAdoptions(histories, HistoryCache())
    adoptions.catch_up(0)
    adoptions.add({id(m[20]): shown}, 2, 19)  # positions 2-20 behind two prompts, 2-19 behind one
    adoptions.catch_up(1)  # a window of 19 positions, kept
    assert histories[1][20] is shown
    adoptions.catch_up(2)
    assert histories[2][20] is m[20]


def test_a_history_shorter_than_the_window_is_caught_up_position_by_position() -> None:
    """A late span's history, read shorter (the history cache hands out a prefix of the latest
    one): its messages are the window's first ones, and it must not grow by the window's rest."""
    m = _messages(20)
    shown = {id(message): Message(message.role, content=message.content) for message in m}
    histories = [list(m), list(m), m[:18]]
    adoptions = _TraceAdoptions(histories, HistoryCache())
    adoptions.catch_up(0)
    adoptions.add(shown, 0, 20)
    adoptions.catch_up(1)  # a window of 20 positions, kept
    adoptions.catch_up(2)
    assert [id(message) for message in histories[2]] == [id(shown[id(message)]) for message in m[:18]]
