"""The index writer: what a row keeps (no text unless asked, masked when kept), and that a failed
write keeps its rows for the next attempt without overwriting newer states."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from otelsignals.config import IndexConfig
from otelsignals.conversation import ConversationState
from otelsignals.model import Message, Role, SignalInstance
from otelsignals.pipeline.index_writer import SIGNALS_KEPT, IndexWriter, Redactor, indexed_conversation
from otelsignals.stores.conversation_index import open_index

DEFAULT = Redactor(IndexConfig().redact_patterns)


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("call me on +1 (555) 123-4567", "call me on [redacted]"),
        ("card 4111 1111 1111 1111 please", "card [redacted] please"),
        ("write to ana.lopez+billing@example.co.uk", "write to [redacted]"),
        ("0044 20 7946 0958", "[redacted]"),
        ("booked for 2024-06-01 10:30", "booked for [redacted]:30"),  # a date and a time: 10 digits in a row
    ],
)
def test_default_patterns_mask_contact_details(text: str, masked: str) -> None:
    assert DEFAULT(text) == masked


@pytest.mark.parametrize(
    "text",
    [
        "charged on 2024-06-01 and 2024-06-03",  # dates stay
        "the plan costs $79.99 a month",  # amounts stay
        "order 1234567 was shipped",  # short ids stay
        "at 10:30 on 12.05.2024",  # times and dates stay
    ],
)
def test_default_patterns_leave_dates_amounts_and_ids(text: str) -> None:
    assert DEFAULT(text) == text


def state_with_text() -> ConversationState:
    state = ConversationState.new("c1")
    state.append(Message(Role.USER, "I was charged twice, mail me at a@b.io", span_id=b"\x01" * 8))
    state.leaf_counts["interaction.disengagement.quit"] += 1
    state.recent_signals.append(
        SignalInstance("interaction.disengagement.quit", 0, 0.8, "mail me at a@b.io", {"phrase": "forget it"})
    )
    return state


def test_a_row_holds_no_text_unless_asked() -> None:
    row = indexed_conversation(state_with_text(), now=100.0)
    assert row.detail["messages"] is None
    assert row.detail["signals"][0]["snippet"] is None
    assert row.signal_types == ("interaction.disengagement.quit",)


def test_kept_text_is_masked() -> None:
    row = indexed_conversation(state_with_text(), now=100.0, redact=DEFAULT)
    assert row.detail["messages"][0]["content"] == "I was charged twice, mail me at [redacted]"
    assert row.detail["signals"][0]["snippet"] == "mail me at [redacted]"


def test_a_row_keeps_the_latest_signals_of_a_long_conversation() -> None:
    state = state_with_text()
    quit_ = "interaction.disengagement.quit"
    state.recent_signals.extend(SignalInstance(quit_, number, 0.8) for number in range(1, SIGNALS_KEPT + 50))
    kept = [signal["message_index"] for signal in indexed_conversation(state, now=100.0).detail["signals"]]
    assert kept == list(range(50, SIGNALS_KEPT + 50))


def test_a_failed_write_is_retried_and_newer_states_win(tmp_path: Path) -> None:
    index = open_index(f"sqlite:///{tmp_path / 'index.db'}")
    writer = IndexWriter(IndexConfig(), index, CollectorRegistry(), keep_text=False)
    state = state_with_text()
    writer.record(state)
    index.close()  # the database goes away: the write fails and the row waits
    writer.flush()
    assert writer.write_errors._value.get() == 1
    writer.index = open_index(f"sqlite:///{tmp_path / 'index.db'}")
    state.leaf_counts["interaction.misalignment.rephrase"] += 1
    writer.record(state)  # a newer state of the same conversation while the first waits
    writer.flush()
    found = writer.index.get("c1")
    assert found is not None and "interaction.misalignment.rephrase" in found.signal_types
    assert writer.writes._value.get() == 1


def test_past_max_pending_the_oldest_change_is_dropped_and_counted(tmp_path: Path) -> None:
    index = open_index(f"sqlite:///{tmp_path / 'index.db'}")
    writer = IndexWriter(IndexConfig(max_pending=2), index, CollectorRegistry(), keep_text=False)
    for key in ("a", "b", "c"):
        writer.record(ConversationState.new(key))
    writer.flush()
    assert writer.dropped._value.get() == 1
    assert index.get("a") is None and index.get("c") is not None


def turn(state: ConversationState, leaf: str, trace: bytes, at: int) -> None:
    """One analysed turn: a user message, the signal it fired, the trace it came in."""
    state.append(Message(Role.USER, f"message {at}", span_id=trace[:8]))
    state.leaf_counts[leaf] += 1
    state.recent_signals.append(SignalInstance(leaf, at, 0.8, None, {}))
    state.conversation.trace_ids.append(trace)


def test_a_resumed_conversation_keeps_what_was_indexed_before(tmp_path: Path) -> None:
    """Its session was evicted (or the process restarted) and it went on: the new state holds only the
    new turns, and the row keeps the earlier ones."""
    url = f"sqlite:///{tmp_path / 'index.db'}"
    writer = IndexWriter(IndexConfig(), open_index(url), CollectorRegistry(), keep_text=False)
    first = ConversationState.new("c1")
    turn(first, "interaction.misalignment.correction", b"\x01" * 16, 0)
    turn(first, "interaction.misalignment.correction", b"\x02" * 16, 1)
    writer.record(first)
    writer.flush()
    before = writer.index.get("c1")
    assert before is not None

    again = ConversationState.new("c1")  # evicted, then the conversation went on
    turn(again, "interaction.disengagement.quit", b"\x03" * 16, 2)
    writer.record(again)
    writer.flush()
    after = writer.index.get("c1")
    assert after is not None
    assert after.detail["leaf_counts"] == {
        "interaction.disengagement.quit": 1,
        "interaction.misalignment.correction": 2,  # not lowered to the new state's 0
    }
    assert after.signal_types == ("interaction.disengagement.quit", "interaction.misalignment.correction")
    assert after.detail["trace_ids"] == [(b * 16).hex() for b in (b"\x01", b"\x02", b"\x03")]
    assert [s["message_index"] for s in after.detail["signals"]] == [0, 1, 2]
    assert after.first_seen == before.first_seen
    assert after.quality_score <= min(before.quality_score, 1.0)

    # A restart: a new process (a new writer) resumes it again, and replays a trace already counted.
    restarted = IndexWriter(IndexConfig(), writer.index, CollectorRegistry(), keep_text=False)
    replay = ConversationState.new("c1")
    turn(replay, "interaction.disengagement.quit", b"\x03" * 16, 2)
    restarted.record(replay)
    restarted.flush()
    final = restarted.index.get("c1")
    assert (
        final is not None and final.detail["leaf_counts"] == after.detail["leaf_counts"]
    )  # not counted twice
    assert final.detail["trace_ids"] == after.detail["trace_ids"]


def test_a_conversation_new_to_the_index_is_written_as_it_is(tmp_path: Path) -> None:
    writer = IndexWriter(
        IndexConfig(), open_index(f"sqlite:///{tmp_path / 'index.db'}"), CollectorRegistry(), keep_text=False
    )
    state = ConversationState.new("fresh")
    turn(state, "interaction.satisfaction.gratitude", b"\x09" * 16, 0)
    writer.record(state)
    writer.flush()
    turn(state, "interaction.satisfaction.gratitude", b"\x0a" * 16, 1)
    writer.record(state)  # the same state: its own earlier row is no history to merge with
    writer.flush()
    found = writer.index.get("fresh")
    assert found is not None and found.detail["leaf_counts"] == {"interaction.satisfaction.gratitude": 2}


def test_a_resume_before_the_earlier_state_was_written_loses_nothing(tmp_path: Path) -> None:
    writer = IndexWriter(
        IndexConfig(), open_index(f"sqlite:///{tmp_path / 'index.db'}"), CollectorRegistry(), keep_text=False
    )
    first = ConversationState.new("c1")
    turn(first, "interaction.misalignment.correction", b"\x01" * 16, 0)
    writer.record(first, closed=True)  # closed (evicted), not flushed yet
    again = ConversationState.new("c1")
    turn(again, "interaction.satisfaction.gratitude", b"\x02" * 16, 1)
    writer.record(again)  # the conversation goes on before the flush
    writer.flush()
    found = writer.index.get("c1")
    assert found is not None
    assert found.signal_types == ("interaction.misalignment.correction", "interaction.satisfaction.gratitude")
    assert found.detail["trace_ids"] == [(b"\x01" * 16).hex(), (b"\x02" * 16).hex()]


def test_text_kept_before_is_dropped_once_it_is_no_longer_kept(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'index.db'}"
    with_text = IndexWriter(IndexConfig(), open_index(url), CollectorRegistry(), keep_text=True)
    with_text.record(state_with_text())
    with_text.flush()
    stored = with_text.index.get("c1")
    assert stored is not None and stored.detail["messages"]
    # A restart with index.content off: the conversation goes on, its old text must not stay.
    without = IndexWriter(IndexConfig(), open_index(url), CollectorRegistry(), keep_text=False)
    without.record(state_with_text())
    without.flush()
    found = without.index.get("c1")
    assert found is not None and found.detail["messages"] is None
    assert all(signal["snippet"] is None for signal in found.detail["signals"])


def test_kept_tool_arguments_and_signal_metadata_are_masked() -> None:
    from otelsignals.model import ToolCall

    state = state_with_text()
    state.append(Message(Role.ASSISTANT, None, tool_calls=[ToolCall("notify", {"to": "ana@example.com"})]))
    state.recent_signals.append(
        SignalInstance(
            "interaction.misalignment.correction", 0, 0.8, None, {"rejected": "call +1 555 123 4567"}
        )
    )
    row = indexed_conversation(state, now=1.0, redact=DEFAULT)
    assert row.detail["messages"][1]["tool_calls"][0]["arguments"] == {"to": "[redacted]"}
    assert row.detail["signals"][-1]["metadata"] == {"rejected": "call [redacted]"}


def test_a_row_the_index_refuses_is_dropped_and_the_others_written(tmp_path: Path) -> None:
    """The index refuses a row for what it holds (here a number JSON cannot carry): the batch was
    put back whole and failed again on every flush, so nothing was written any more. Now the rows
    are written one by one after a failed batch, and the refused one is dropped and counted."""
    index = open_index(f"sqlite:///{tmp_path / 'index.db'}")
    writer = IndexWriter(IndexConfig(), index, CollectorRegistry(), keep_text=False)
    for key in ("a", "b"):
        writer.record(ConversationState.new(key))
    poisoned = ConversationState.new("poisoned")
    writer.record(poisoned)
    row, state = writer._pending["poisoned"]
    writer._pending["poisoned"] = (dataclasses.replace(row, detail={**row.detail, "n": 2**70}), state)
    writer.flush()
    assert writer.index.get("a") is not None and writer.index.get("b") is not None
    assert writer.index.get("poisoned") is None and not writer._pending
    assert writer.dropped._value.get() == 1 and writer.writes._value.get() == 2
    writer.record(ConversationState.new("c"))
    writer.flush()  # the next batch is written
    assert writer.index.get("c") is not None
    index.close()


def test_an_outage_puts_the_whole_batch_back(tmp_path: Path) -> None:
    index = open_index(f"sqlite:///{tmp_path / 'index.db'}")
    writer = IndexWriter(IndexConfig(), index, CollectorRegistry(), keep_text=False)
    for key in ("a", "b", "c"):
        writer.record(ConversationState.new(key))
    index.close()  # every row fails, alone too: kept for the next try, none dropped
    writer.flush()
    assert sorted(writer._pending) == ["a", "b", "c"] and writer.dropped._value.get() == 0


def test_a_row_is_dropped_only_for_its_values_not_for_a_busy_index(tmp_path: Path) -> None:
    """After a batch failed for one row's values, the rows were written one by one and any that
    failed was dropped: a lock or a reconnect during those writes dropped good rows for good."""
    import sqlite3

    index = open_index(f"sqlite:///{tmp_path / 'index.db'}")
    upsert = index.upsert
    calls = [0]

    def busy_once_alone(rows: list[Any]) -> int:
        calls[0] += 1
        if calls[0] == 2:  # the first row written alone finds the index locked
            raise sqlite3.OperationalError("database is locked")
        return upsert(rows)

    index.upsert = busy_once_alone  # type: ignore[method-assign]
    writer = IndexWriter(IndexConfig(), index, CollectorRegistry(), keep_text=False)
    for key in ("a", "b", "poisoned"):
        writer.record(ConversationState.new(key))
    row, state = writer._pending["poisoned"]
    writer._pending["poisoned"] = (dataclasses.replace(row, detail={**row.detail, "n": 2**70}), state)
    writer.flush()  # the batch fails for the poisoned row, then the index is busy: all wait
    assert sorted(writer._pending) == ["a", "b", "poisoned"] and writer.dropped._value.get() == 0
    writer.flush()  # the batch fails again, the rows alone: the poisoned one is dropped
    assert writer.index.get("a") is not None and writer.index.get("b") is not None
    assert writer.dropped._value.get() == 1 and not writer._pending
    index.close()
