"""The index writer: what a row keeps (no text unless asked, masked when kept), and that a failed
write keeps its rows for the next attempt without overwriting newer states."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from otelsignals.config import IndexConfig
from otelsignals.conversation import ConversationState
from otelsignals.model import Message, Role, SignalInstance
from otelsignals.pipeline.index_writer import IndexWriter, Redactor, indexed_conversation
from otelsignals.stores.conversation_index import open_index

DEFAULT = Redactor(IndexConfig().redact_patterns)


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("call me on +1 (555) 123-4567", "call me on [redacted]"),
        ("card 4111 1111 1111 1111 please", "card [redacted] please"),
        ("write to ana.lopez+billing@example.co.uk", "write to [redacted]"),
        ("0044 20 7946 0958", "[redacted]"),
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
