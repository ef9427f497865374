"""Conversations recorded from the REAL instrumentation libraries (tests/fixtures, made by
scripts/generate_fixtures.py) are reassembled as the scripted conversation a human saw.

Variants whose libraries write message content to OTLP *log records* rather than spans
(`*_events`, `openai_v2_legacy`) are read with their log records, as the receiver joins them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from otelsignals.config import Config
from otelsignals.model import Role
from otelsignals.offline import analyze_files, read_requests, traces_in_time_order
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.telemetry import Telemetry

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted(
    (path.parent.name, path.name.removesuffix(".expected.json"))
    for path in FIXTURES.glob("*/*.expected.json")
)


def recorded(variant: str, scenario: str) -> tuple[Analyzer, list[ReleasedTrace]]:
    """A fresh Analyzer holding the recording's log records, if any, and its traces in time order."""
    analyzer = Analyzer(Telemetry())
    logs = FIXTURES / variant / f"{scenario}.logs.binpb"
    if logs.exists():
        # The libraries that write content to log records: the receiver hands those to the analyzer.
        analyzer.log_events.add(ExportLogsServiceRequest.FromString(logs.read_bytes()))
    return analyzer, list(traces_in_time_order(read_requests(FIXTURES / variant / f"{scenario}.binpb")))


def reassemble(variant: str, scenario: str):
    analyzer, traces = recorded(variant, scenario)
    for trace in traces:
        analyzer.assemble(trace)
    return {state.conversation.key: state.conversation for state in analyzer.sessions}


def normalise_result(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))


@pytest.mark.parametrize(("variant", "scenario"), CASES)
def test_fixture_reassembles_as_scripted(variant, scenario):
    expected = json.loads((FIXTURES / variant / f"{scenario}.expected.json").read_text())
    conversations = reassemble(variant, scenario)
    assert expected["session_id"] in conversations, sorted(conversations)
    conversation = conversations[expected["session_id"]]
    messages = conversation.messages
    scripted_tools = [m for m in expected["messages"] if m["role"] == "tool"]
    tool_results = [m.tool_result for m in messages if m.role is Role.TOOL]
    # Structure comes through in every variant: tool executions with their names and failures.
    assert [r.name for r in tool_results] == [m["name"] for m in scripted_tools]
    assert [r.is_error for r in tool_results] == ["error" in m for m in scripted_tools]
    assert sum(1 for call in conversation.llm_calls if call.failed) == expected["failed_model_calls"]
    if not expected["content_captured"]:
        assert not any(m.content for m in messages if m.role in (Role.USER, Role.ASSISTANT))
        assert not conversation.content_captured
        return
    assert conversation.content_captured
    users = [m.content for m in messages if m.role is Role.USER]
    assert users == [m["text"] for m in expected["messages"] if m["role"] == "user"]
    answers = [m.content for m in messages if m.role is Role.ASSISTANT and m.content]
    assert answers == [m["text"] for m in expected["messages"] if m["role"] == "assistant" and m.get("text")]
    calls = [(c.name, c.arguments) for m in messages if m.role is Role.ASSISTANT for c in m.tool_calls]
    scripted_calls = [
        (c["name"], c["arguments"])
        for m in expected["messages"]
        if m["role"] == "assistant"
        for c in m.get("tool_calls", [])
    ]
    assert calls == scripted_calls
    system = [m.content for m in messages if m.role is Role.SYSTEM]
    scripted_system = [m["text"] for m in expected["messages"] if m["role"] == "system"]
    assert system == scripted_system


def test_analyze_runs_over_every_fixture_without_error():
    paths = sorted(FIXTURES.glob("*/*.binpb"))
    paths = [p for p in paths if not p.name.endswith(".logs.binpb")]
    results = list(analyze_files(paths, Config()))
    assert sum(1 for r in results if r.analysis is not None) >= len(paths)
