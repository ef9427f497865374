"""The live sidecar indexes the demo's conversations: they can be listed, filtered and opened after
their sessions closed, and after a restart; text is kept only when index.content is on."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

from otelsignals.demo.traffic import load_conversations, send_demo_traffic
from tests.support.otlp_sink import OtlpSink
from tests.support.sidecar import SidecarProcess

SESSIONS = {c["session_id"] for c in load_conversations() if c.get("session_id")}


def get(sidecar: SidecarProcess, path: str, **query: Any) -> Any:
    url = f"{sidecar.admin_url}{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(url, timeout=5) as answer:
        return orjson.loads(answer.read())


def listing(sidecar: SidecarProcess, **query: Any) -> list[dict]:
    """Every page of GET /v1/sessions with ``query``."""
    found: list[dict] = []
    cursor = None
    while True:
        page = get(sidecar, "/v1/sessions", limit=5, **query, **({"cursor": cursor} if cursor else {}))
        found += page["sessions"]
        cursor = page["next_cursor"]
        if cursor is None:
            return found


def wait_until(check: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def test_closed_conversations_stay_findable_and_filterable(tmp_path: Path) -> None:
    settings: dict[str, Any] = {"sessions": {"ttl": "1s"}, "index": {"flush_interval": "100ms"}}
    with SidecarProcess(tmp_path, **settings) as sidecar:
        stats = send_demo_traffic(sidecar.grpc_endpoint, f"{sidecar.http_url}/v1/traces")
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", stats.spans)
        closed = wait_until(lambda: len(listing(sidecar, closed="true")) >= len(SESSIONS))
        assert closed, "every demo conversation indexed as closed"
        everything = listing(sidecar)
        keys = {item["session_id"] for item in everything}
        assert keys >= SESSIONS
        # Ranked by priority, the highest first; every page disjoint.
        priorities = [item["priority"] if item["priority"] is not None else -1 for item in everything]
        assert priorities == sorted(priorities, reverse=True) and len(keys) == len(everything)

        one = next(iter(sorted(SESSIONS)))
        opened = get(sidecar, f"/v1/sessions/{one}")  # the session is closed: read from the index
        assert opened["source"] == "index" and opened["closed"] is True
        assert opened["session_metrics"] and opened["trace_ids"]
        assert opened["messages"] is None  # index.content is off by default

        failing = listing(sidecar, signal="execution.failure")
        assert failing and all(
            any(t.startswith("execution.failure.") for t in i["signal_types"]) for i in failing
        )
        poor = listing(sidecar, quality="severe,poor", flagged="true")
        assert all(i["quality"] in ("severe", "poor") and i["flagged"] for i in poor)
        assert listing(sidecar, agent="no-such-agent") == []

        bad_listings: list[dict[str, str]] = [
            {"sort": "name"},
            {"flagged": "maybe"},
            {"since": "yesterday"},
            {"colour": "red"},
            {"limit": "inf"},
            {"limit": "0"},
            {"limit": "nan"},
            {"since": "nan"},
            {"min_priority": "inf"},
        ]
        for path, bad in [("/v1/sessions", b) for b in bad_listings] + [
            ("/v1/timeline", {"buckets": "inf"}),
            ("/v1/timeline", {"since": "1e308"}),
            ("/v1/timeline", {"until": "0", "since": "10"}),
        ]:
            with pytest.raises(urllib.error.HTTPError) as refused:
                get(sidecar, path, **bad)
            assert refused.value.code == 400, (path, bad)
            assert orjson.loads(refused.value.read())["error"]
        assert "messages" not in get(sidecar, "/v1/sessions", limit=1)["sessions"][0]  # listings stay light
        assert sidecar.metric("otelsignals_index_writes_total") >= len(SESSIONS)

    # A restart: the conversations are still there (the index is a file in store.directory).
    with SidecarProcess(tmp_path, **settings) as again:
        assert {item["session_id"] for item in listing(again)} >= SESSIONS


def test_text_is_kept_only_when_asked_and_masked(tmp_path: Path) -> None:
    settings: dict[str, Any] = {
        "sessions": {"ttl": "1s"},
        "index": {"flush_interval": "100ms", "content": True, "redact_patterns": [r"\b[Oo]rder\b"]},
    }
    with SidecarProcess(tmp_path, **settings) as sidecar:
        stats = send_demo_traffic(sidecar.grpc_endpoint, None)
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", stats.spans)
        wait_until(lambda: len(listing(sidecar, closed="true")) >= len(SESSIONS))
        texts = [
            m["content"]
            for key in SESSIONS
            for m in get(sidecar, f"/v1/sessions/{key}")["messages"]
            if m["content"]
        ]
        assert texts and any("[redacted]" in t for t in texts)
        assert not any(re.search(r"\b[Oo]rder\b", t) for t in texts)


def test_with_the_disk_queue_a_sigkill_loses_no_delivered_conversation(
    tmp_path: Path, sink: OtlpSink
) -> None:
    """Every change is committed before its trace is forwarded: once downstream has the spans, the
    index has the conversation, even if the process is killed before any periodic flush (60 s here)."""
    exporter = {"endpoint": sink.grpc_endpoint, "queue": {"directory": str(tmp_path / "queue")}}
    sidecar = SidecarProcess(tmp_path, exporter, index={"flush_interval": "60s"}).start()
    try:
        stats = send_demo_traffic(sidecar.grpc_endpoint, None)
        sink.wait_for_spans(stats.spans, timeout=30)
        sidecar.kill()
    finally:
        sidecar.__exit__()
    with SidecarProcess(tmp_path, exporter, index={"flush_interval": "60s"}) as again:
        assert {item["session_id"] for item in listing(again)} >= SESSIONS
