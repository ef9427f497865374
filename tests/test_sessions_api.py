"""The live sidecar reassembles the demo's conversations and shows them on the admin API."""

from __future__ import annotations

import urllib.error
import urllib.request

import orjson
import pytest

from otelsignals.demo.traffic import load_conversations, send_demo_traffic
from tests.support.sidecar import SidecarProcess

SCRIPTS = {c["id"]: c for c in load_conversations()}


def get_session(sidecar: SidecarProcess, session_id: str) -> dict:
    with urllib.request.urlopen(f"{sidecar.admin_url}/v1/sessions/{session_id}", timeout=5) as answer:
        return orjson.loads(answer.read())


@pytest.mark.parametrize("snippets", [True, False])
def test_demo_sessions_are_reassembled_live(tmp_path, snippets):
    with SidecarProcess(tmp_path, signals={"snippets": snippets}) as sidecar:
        stats = send_demo_traffic(sidecar.grpc_endpoint, f"{sidecar.http_url}/v1/traces")
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", stats.spans)
        for script in SCRIPTS.values():
            if not script.get("session_id"):
                continue
            session = get_session(sidecar, script["session_id"])
            users = [m for m in session["messages"] if m["role"] == "user"]
            assert len(users) == len(script["turns"])
            assert len(session["trace_ids"]) == len(script["turns"])
            if snippets:
                assert [m["content"] for m in users] == [turn["user"] for turn in script["turns"]]
            else:
                assert all(m["content"] is None for m in session["messages"])
            scripted_tools = [
                call["name"]
                for turn in script["turns"]
                for step in turn["steps"]
                for call in step.get("tool_calls", [])
            ]
            assert [
                m["tool_result"]["name"] for m in session["messages"] if "tool_result" in m
            ] == scripted_tools
            assert 0.0 <= session["priority"] <= 100.0 and isinstance(session["priority_reasons"], list)
            if session["flagged"]:
                assert session["priority"] > 0 and session["priority_reasons"]
        with pytest.raises(urllib.error.HTTPError) as missing:
            get_session(sidecar, "no-such-session")
        assert missing.value.code == 404


def test_session_bounds_are_counted_in_metrics(tmp_path):
    with SidecarProcess(tmp_path, sessions={"max_sessions": 3, "max_messages": 10}) as sidecar:
        stats = send_demo_traffic(sidecar.grpc_endpoint, None)
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", stats.spans)
        assert sidecar.metric("otelsignals_sessions_active") == 3
        assert sidecar.metric("otelsignals_sessions_evicted_total", reason="capacity") >= len(SCRIPTS) - 3
        assert sidecar.metric("otelsignals_sessions_trimmed_messages_total") > 0
