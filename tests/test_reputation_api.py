"""Reputation in the live sidecar: one evaluation per analysed turn, the REST API, the span
attributes, a shared Redis store, and the bearer token."""

from __future__ import annotations

import urllib.error
import urllib.request

import orjson
import pytest

from otelsignals.demo.traffic import load_conversations, send_demo_traffic
from otelsignals.stores import open_store
from tests.support.otlp_sink import OtlpSink
from tests.support.servers import run_redis
from tests.support.sidecar import SidecarProcess


def get(sidecar: SidecarProcess, path: str, token: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(f"{sidecar.admin_url}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, orjson.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, orjson.loads(error.read())


def send_and_wait(sidecar: SidecarProcess, repeat: int = 1) -> None:
    stats = send_demo_traffic(sidecar.grpc_endpoint, None, repeat=repeat)
    sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", stats.spans)
    turns = sidecar.metric("otelsignals_analysed_turns_total")
    sidecar.wait_for_metric("otelsignals_reputation_evaluations_total", turns)


def test_agents_are_calibrating_after_a_few_turns(tmp_path):
    with SidecarProcess(tmp_path) as sidecar:
        send_and_wait(sidecar)
        status, listing = get(sidecar, "/v1/reputation")
        assert status == 200
        agents = listing["agents"]
        assert len(agents) == len({(c["service_name"], c["agent_name"]) for c in load_conversations()})
        assert sum(a["eval_count"] for a in agents) == sidecar.metric("otelsignals_analysed_turns_total")
        for agent in agents:
            assert agent["lifecycle"] == "calibrating" and agent["score"] is None
            assert agent["calibration"] == f"{agent['eval_count']}/50"
            status, one = get(sidecar, f"/v1/reputation/{agent['agent_id']}")
            assert status == 200 and one == agent
        status, missing = get(sidecar, "/v1/reputation/no-such-agent")
        assert status == 404 and "no-such-agent" in missing["error"]
    assert (tmp_path / "data" / "otelsignals.db").exists()


def test_active_agents_get_a_score_on_their_spans(tmp_path, sink: OtlpSink):
    exporter = {"endpoint": sink.grpc_endpoint}
    with SidecarProcess(tmp_path, exporter, reputation={"calibration": 3}) as sidecar:
        send_and_wait(sidecar, repeat=3)
        _, listing = get(sidecar, "/v1/reputation")
        for agent in listing["agents"]:
            assert agent["lifecycle"] == "active"
            assert 0 <= agent["score"] <= 1000
            assert set(agent["components"]) == {"pass_rate", "latency", "streak", "volume"}
    scored = [
        {kv.key: kv.value for kv in span.attributes}
        for span in sink.decoded_spans()
        if any(kv.key == "signals.reputation.score" for kv in span.attributes)
    ]
    assert scored, "spans of active agents carry their reputation"
    for attributes in scored:
        assert attributes["signals.reputation.lifecycle"].string_value == "active"
        assert 0 <= attributes["signals.reputation.score"].int_value <= 1000


def test_a_shared_redis_store_holds_the_window(tmp_path):
    with run_redis() as url:
        with SidecarProcess(tmp_path, store={"url": url}) as sidecar:
            send_and_wait(sidecar)
            _, listing = get(sidecar, "/v1/reputation")
        store = open_store(url)
        try:
            assert sorted(store.agents()) == sorted(a["agent_id"] for a in listing["agents"])
            for agent in listing["agents"]:
                window, total = store.window(agent["agent_id"])
                assert total == agent["eval_count"] == len(window)
        finally:
            store.close()


@pytest.mark.parametrize("path", ["/v1/reputation", "/v1/sessions/anything"])
def test_bearer_token_guards_the_api_but_not_health(tmp_path, path):
    with SidecarProcess(tmp_path, admin={"auth_token": "s3cret-token"}) as sidecar:
        assert get(sidecar, path)[0] == 401
        assert get(sidecar, path, "wrong")[0] == 401
        assert get(sidecar, path, "s3cret-token")[0] in (200, 404)
        with urllib.request.urlopen(f"{sidecar.admin_url}/healthz", timeout=5) as answer:
            assert answer.status == 200
