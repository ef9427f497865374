"""Which attribute names a conversation: SPEC §2's order, or the order `sessions.key_attributes` gives."""

from __future__ import annotations

import itertools
import json

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otelsignals.config import Config, SessionsConfig
from otelsignals.config_loading import load_config
from otelsignals.offline import traces_in_time_order
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.telemetry import Telemetry
from tests.conventions.spans import key_values

_span_ids = itertools.count(1)
T0 = 1_700_000_000_000_000_000


def _span(trace: int, start_ms: int, name: str, attributes: dict, parent: bytes = b"") -> Span:
    span = Span(
        trace_id=trace.to_bytes(16, "big"),
        span_id=next(_span_ids).to_bytes(8, "big"),
        parent_span_id=parent,
        name=name,
        start_time_unix_nano=T0 + start_ms * 1_000_000,
        end_time_unix_nano=T0 + (start_ms + 5) * 1_000_000,
    )
    span.attributes.extend(key_values(attributes))
    return span


def _turn(trace: int, history: list[tuple[str, str]], answer: str, session: dict, run: dict) -> list[Span]:
    """One request of a web app: its own request span names the session (``session``); the agent
    framework's model-call span under it names its run (``run``)."""
    request = _span(trace, trace * 100, "POST /chat", session)
    messages = [{"role": role, "parts": [{"type": "text", "content": text}]} for role, text in history]
    chat = _span(
        trace,
        trace * 100 + 1,
        "chat gpt-4o",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(messages),
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
            ),
            **run,
        },
        parent=request.span_id,
    )
    return [request, chat]


def _conversations(sessions: SessionsConfig, session_key: str, run_key: str) -> dict[str, int]:
    """Two turns of one session, each a run of its own: the conversation keys and their messages."""
    first = [("user", "Hello")]
    second = [*first, ("assistant", "Hi! How can I help?"), ("user", "Where is my order?")]
    spans = [
        *_turn(1, first, "Hi! How can I help?", {session_key: "thread-77"}, {run_key: "run-1"}),
        *_turn(2, second, "It ships today.", {session_key: "thread-77"}, {run_key: "run-2"}),
    ]
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    analyzer = Analyzer(Telemetry(60), sessions)
    for trace in traces_in_time_order([request]):
        analyzer.process(trace)
    return {state.conversation.key: len(state.conversation.messages) for state in analyzer.sessions}


def test_by_default_the_conversation_id_names_the_conversation():
    """SPEC §2: gen_ai.conversation.id before session.id; a framework that writes one per run
    (Pydantic AI without a conversation_id) then splits the session into one conversation per run."""
    assert _conversations(SessionsConfig(), "session.id", "gen_ai.conversation.id") == {
        "run-1": 2,
        "run-2": 4,
    }


@pytest.mark.parametrize(
    ("session_key", "order"),
    [
        ("session.id", ("session.id", "gen_ai.conversation.id")),
        # A name of the app's own, with neither "session" nor "conversation.id" in it, on a span that
        # carries no GenAI attribute: the spans decoded to find the key must include it.
        ("app.thread_id", ("app.thread_id", "gen_ai.conversation.id")),
    ],
)
def test_key_attributes_put_the_apps_session_first(session_key, order):
    assert _conversations(SessionsConfig(key_attributes=order), session_key, "gen_ai.conversation.id") == {
        "thread-77": 4
    }


def test_key_attributes_load_from_yaml_and_the_environment(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("sessions:\n  key_attributes: [session.id, gen_ai.conversation.id]\n")
    assert load_config(path, environ={}).sessions.key_attributes == ("session.id", "gen_ai.conversation.id")
    environ = {"OTELSIGNALS_SESSIONS__KEY_ATTRIBUTES": "app.thread_id, session.id"}
    assert load_config(None, environ=environ).sessions.key_attributes == ("app.thread_id", "session.id")
    assert Config().sessions.key_attributes[0] == "gen_ai.conversation.id"


@pytest.mark.parametrize(
    ("names", "problem"),
    [
        ((), "name at least one attribute"),
        (("session.id", " "), "' ' is not an attribute name"),
        (("x" * 128,), "is not an attribute name of 1 to 127 bytes"),
    ],
)
def test_key_attributes_that_cannot_name_a_conversation_are_refused(names, problem):
    problems = SessionsConfig(key_attributes=names).validate()
    assert any(problem in text for text in problems), problems
