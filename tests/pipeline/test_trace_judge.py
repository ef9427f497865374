"""The per-trace judge (pipeline/trace_judge.py) judges the conversation as of the trace."""

from __future__ import annotations

import types
from typing import Any

from otelsignals.config import EvalsConfig
from otelsignals.conversation import ConversationState
from otelsignals.model import Conversation, Message, Role
from otelsignals.pipeline.trace_judge import TraceJudge
from otelsignals.telemetry import Telemetry


def test_the_conversation_judged_carries_the_tools_the_agent_was_offered(monkeypatch) -> None:
    """The snapshot kept the key and the messages only, so the judge's tool_correctness saw
    "Available tools (not known)" where the spans had listed them (eval runs kept them)."""
    state = ConversationState.new("s1")
    state.append(Message(Role.USER, "where is my order A1?"))
    state.conversation.available_tools = {"get_order": {"name": "get_order", "description": "look up"}}
    judged: list[Conversation] = []
    monkeypatch.setattr(
        TraceJudge, "_start", lambda self, session, trace, conversation: judged.append(conversation)
    )
    judge = TraceJudge(
        EvalsConfig(judge_url="http://127.0.0.1:9/v1", judge_model="m", judge_traces=True),
        types.SimpleNamespace(get=lambda key: state),  # type: ignore[arg-type]
        Telemetry(),
        on_event_loop=lambda callback: callback(),
        on_analysis_thread=lambda callback: callback(),
    )
    analysis: Any = types.SimpleNamespace(conversation_id="s1", trace_id=b"\x01" * 16)
    judge.submit(analysis)
    state.append(Message(Role.ASSISTANT, "a later answer"))  # the live conversation goes on
    state.conversation.available_tools["refund"] = {"name": "refund"}
    (snapshot,) = judged
    assert [m.content for m in snapshot.messages] == ["where is my order A1?"]
    assert list(snapshot.available_tools) == ["get_order"]
