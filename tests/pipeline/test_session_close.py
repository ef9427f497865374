"""An idle session is closed and summarised downstream in an otelsignals.session span (SPEC §6):
its own trace, links to the session's traces, reliability and consistency as attributes; the
admin API shows the same metrics while the session is open."""

from __future__ import annotations

import time
import urllib.request

import orjson
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otelsignals.conventions.decoding import any_value
from otelsignals.demo.traffic import load_conversations, send_demo_traffic
from otelsignals.pipeline.session_span import session_span
from tests.support.otlp_sink import OtlpSink
from tests.support.sidecar import SidecarProcess

SESSIONS = [c for c in load_conversations() if c.get("session_id")]


def session_spans(sink: OtlpSink) -> list:
    return [span for span in sink.decoded_spans() if span.name == "otelsignals.session"]


def test_idle_sessions_are_summarised_in_session_spans(tmp_path, sink: OtlpSink):
    exporter = {"endpoint": sink.grpc_endpoint}
    with SidecarProcess(tmp_path, exporter, sessions={"ttl": "2s"}) as sidecar:
        stats = send_demo_traffic(sidecar.grpc_endpoint, None)
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", stats.spans)
        # While open, the admin API computes the metrics on demand.
        session_id = SESSIONS[0]["session_id"]
        with urllib.request.urlopen(f"{sidecar.admin_url}/v1/sessions/{session_id}", timeout=5) as answer:
            live = orjson.loads(answer.read())
        assert [m["name"] for m in live["session_metrics"]] == ["agent_reliability", "agent_consistency"]
        assert len(live["trace_signals"]) == len(SESSIONS[0]["turns"])
        assert all(s["sources"]["confidence"] == "proxy" for s in live["trace_signals"])
        conversations = sidecar.metric("otelsignals_sessions_active")
        sidecar.wait_for_metric("otelsignals_sessions_closed_total", conversations, timeout=20, reason="ttl")
        deadline = time.monotonic() + 10
        while len(session_spans(sink)) < conversations and time.monotonic() < deadline:
            time.sleep(0.1)
        # One reputation evaluation per analysed turn, and one more per closed session (SPEC §7).
        turns = sidecar.metric("otelsignals_analysed_turns_total")
        sidecar.wait_for_metric("otelsignals_reputation_evaluations_total", turns + conversations)
        with urllib.request.urlopen(f"{sidecar.admin_url}/v1/reputation", timeout=5) as answer:
            agents = orjson.loads(answer.read())["agents"]
        assert sum(agent["eval_count"] for agent in agents) == turns + conversations
    spans = session_spans(sink)
    assert len(spans) == conversations
    sent_traces = {trace_id for trace_id, _ in sink.spans()}
    by_session = {}
    for span in spans:
        attributes = {kv.key: any_value(kv.value) for kv in span.attributes}
        by_session[attributes["otelsignals.session.id"]] = (span, attributes)
        # Findable by the names queries already group by.
        assert attributes["session.id"] == attributes["signals.conversation.id"]
        assert attributes["session.id"] == attributes["otelsignals.session.id"]
        assert attributes["signals.agent.id"] == attributes["gen_ai.agent.id"]
        assert span.trace_id not in {link.trace_id for link in span.links}, "a trace of its own"
        assert {link.trace_id for link in span.links} <= sent_traces
        assert attributes["otelsignals.session.close_reason"] == "ttl"
        for metric in ("agent_reliability", "agent_consistency"):
            assert 0.0 <= attributes[f"signals.{metric}.score"] <= 1.0
            assert isinstance(orjson.loads(attributes[f"signals.{metric}.metadata"]), dict)
    for script in SESSIONS:
        span, attributes = by_session[script["session_id"]]
        assert attributes["otelsignals.session.trace_count"] == len(script["turns"]) == len(span.links)


def test_a_session_span_without_a_known_agent_names_it_as_its_reputation_does():
    record = session_span("sess-42", None, [(b"\x01" * 16, b"\x02" * 8)], [], "capacity", 10, 20)
    span = Span.FromString(record.data)
    attributes = {kv.key: any_value(kv.value) for kv in span.attributes}
    assert attributes["session.id"] == attributes["signals.conversation.id"] == "sess-42"
    assert attributes["signals.agent.id"] == "unknown" and "gen_ai.agent.id" not in attributes
    assert attributes["otelsignals.session.close_reason"] == "capacity"
    assert attributes["otelsignals.session.trace_count"] == 1 == len(span.links)
