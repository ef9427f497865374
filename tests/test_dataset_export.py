"""``otelsignals export``: datasets from the conversation index, checked by shape, by a
``datasets.load_dataset("json", …)`` round trip, and end to end from the live sidecar's index."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import datasets
import orjson
import pytest

from otelsignals.dataset_export import ExportError, records, selection
from otelsignals.demo.traffic import load_conversations, send_demo_traffic
from otelsignals.signals import taxonomy as tx
from otelsignals.stores.conversation_index import ConversationFilter, IndexedConversation
from tests.support.sidecar import SidecarProcess

SESSIONS = {c["session_id"] for c in load_conversations() if c.get("session_id")}

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a travel agent."},
    {"role": "user", "content": "Book me a flight to Lima on Friday."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "name": "search", "arguments": {"to": "LIM"}}],
    },
    {
        "role": "tool",
        "content": '{"flights": ["LA2411"]}',
        "tool_result": {"call_id": "c1", "name": "search"},
    },
    {"role": "assistant", "content": "I booked LA2411 to Lisbon."},
    {"role": "user", "content": "No, I said Lima, not Lisbon."},
    {"role": "assistant", "content": "Sorry: LA2411 to Lima on Friday is booked."},
    {"role": "user", "content": "Perfect, thanks!"},
]


def item(messages: list[dict[str, Any]] | None = MESSAGES, offset: int = 0) -> IndexedConversation:
    signals = [
        {"type": tx.CORRECTION, "message_index": offset + 5, "confidence": 0.8},
        {"type": tx.GRATITUDE, "message_index": offset + 7, "confidence": 0.9},
        {"type": tx.CONFIRMATION, "message_index": offset + 7, "confidence": 0.8},
    ]
    detail = {"messages": messages, "signals": signals, "message_offset": offset, "counts": {"x": 1}}
    return IndexedConversation(
        "s1", "agent", 1.0, 2.0, 3, "poor", 0.4, 55.0, True, True, (tx.CORRECTION,), detail
    )


def test_openai_chat_lines_have_the_fine_tuning_shape() -> None:
    (line,) = records(item(), "openai-chat")
    chat = line["messages"]
    assert [m["role"] for m in chat] == [m["role"] for m in MESSAGES]
    call = chat[2]["tool_calls"][0]
    assert call == {
        "id": "c1",
        "type": "function",
        "function": {"name": "search", "arguments": '{"to":"LIM"}'},
    }
    assert chat[3]["tool_call_id"] == "c1" and chat[2]["content"] == ""


@pytest.mark.parametrize("offset", [0, 40])  # messages trimmed from the front: indices stay absolute
def test_preference_examples_label_the_answer_the_user_reacted_to(offset: int) -> None:
    bad, good = records(item(offset=offset), "preference")
    assert bad["completion"] == [{"role": "assistant", "content": "I booked LA2411 to Lisbon."}]
    assert bad["label"] is False and bad["reason"] == tx.CORRECTION
    assert len(bad["prompt"]) == 4  # everything before the answer
    assert good["completion"][0]["content"].startswith("Sorry: LA2411 to Lima")
    assert good["label"] is True and good["reason"] == tx.CONFIRMATION


@pytest.mark.parametrize("offset", [0, 40])
def test_hf_records_number_signals_within_their_own_messages(offset: int) -> None:
    """A conversation trimmed at sessions.max_messages keeps its later messages: the signals kept
    the conversation's numbers (21, 25 for a record of 9 messages), so messages[i] was another
    message or none. Now they point into the record's messages; the offset says how many came
    before, and a signal on a message no longer kept is left out."""
    conversation = item(offset=offset)
    conversation.detail["signals"].append(
        {"type": tx.CORRECTION, "message_index": offset - 1, "confidence": 0.5}
    )
    (record,) = records(conversation, "hf")
    assert record["message_offset"] == offset
    indexed = [(s["type"], record["messages"][s["message_index"]]["content"]) for s in record["signals"]]
    assert indexed == [
        (tx.CORRECTION, "No, I said Lima, not Lisbon."),
        (tx.GRATITUDE, MESSAGES[7]["content"]),
        (tx.CONFIRMATION, MESSAGES[7]["content"]),
    ]


def test_a_conversation_without_text_cannot_be_exported() -> None:
    with pytest.raises(ExportError, match=r"index\.content"):
        records(item(messages=None), "hf")


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        ("flagged", ConversationFilter(flagged=True)),
        ("excellent", ConversationFilter(qualities=("excellent",))),
        ("priority>=40", ConversationFilter(min_priority=40.0)),
        ("priority >= 12.5", ConversationFilter(min_priority=12.5)),
    ],
)
def test_selections(select: str, expected: ConversationFilter) -> None:
    assert selection(select) == expected


@pytest.mark.parametrize("select", ["priority>40", "all", "priority>=high"])
def test_a_bad_selection_is_refused(select: str) -> None:
    with pytest.raises(ExportError, match="--select"):
        selection(select)


def run_export(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "otelsignals.cli", "export", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def indexed_demo(tmp_path: Path, content: bool) -> Path:
    """The demo's conversations in a sidecar's index (closed); returns the sidecar's config file."""
    sidecar = SidecarProcess(
        tmp_path,
        sessions={"ttl": "1s"},
        signals={"snippets": True},
        index={"flush_interval": "100ms", "content": content},
    )
    with sidecar:
        stats = send_demo_traffic(sidecar.grpc_endpoint, None)
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", stats.spans)
        deadline = time.monotonic() + 20
        while sidecar.metric("otelsignals_sessions_closed_total") < len(SESSIONS):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(0.5)  # one more index flush
    return sidecar.config_path


def test_exported_datasets_load_with_the_datasets_library(tmp_path: Path) -> None:
    config = indexed_demo(tmp_path, content=True)
    out = tmp_path / "flagged.jsonl"
    done = run_export(config, "--select", "flagged", "--format", "hf", "--out", str(out))
    assert done.returncode == 0, done.stderr
    loaded = datasets.load_dataset("json", data_files=str(out), split="train")
    assert loaded.num_rows >= 3 and all(loaded["flagged"])
    priorities = loaded["priority"]
    assert priorities == sorted(priorities, reverse=True)
    first = loaded[0]
    assert first["messages"][0]["content"] and first["signals"] and first["trace_ids"]

    chat = tmp_path / "chat.jsonl"
    assert (
        run_export(
            config, "--select", "priority>=0", "--format", "openai-chat", "--out", str(chat)
        ).returncode
        == 0
    )
    lines = [orjson.loads(line) for line in chat.read_bytes().splitlines()]
    assert len(lines) >= len(SESSIONS) and all(
        line["messages"][0]["role"] in ("system", "user") for line in lines
    )
    assert datasets.load_dataset("json", data_files=str(chat), split="train").num_rows == len(lines)

    preference = tmp_path / "preference.jsonl"
    assert (
        run_export(
            config, "--select", "priority>=0", "--format", "preference", "--out", str(preference)
        ).returncode
        == 0
    )
    examples = [orjson.loads(line) for line in preference.read_bytes().splitlines()]
    assert {e["label"] for e in examples} == {True, False}  # the demo has both kinds of reaction


def test_without_kept_text_the_export_says_so_and_exits_2(tmp_path: Path) -> None:
    config = indexed_demo(tmp_path, content=False)
    done = run_export(config, "--select", "flagged", "--format", "openai-chat")
    assert done.returncode == 2
    assert "index.content" in done.stderr
