"""POST /v1/eval-runs and GET /v1/eval-runs/{id} on the live sidecar: session metrics with custom
weights, an LLM-judge metric against a real OpenAI-compatible server, bad requests, and runs that
survive a restart (they live in the store)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import orjson
import pytest

from otelsignals.demo.traffic import load_conversations, send_demo_traffic
from otelsignals.pipeline.eval_runs import EvalRunError, parse_request
from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.sidecar import SidecarProcess

SESSION = next(c for c in load_conversations() if c.get("session_id") and len(c["turns"]) >= 2)


def call(sidecar: SidecarProcess, method: str, path: str, body: object = None) -> tuple[int, dict]:
    data = None if body is None else orjson.dumps(body)
    request = urllib.request.Request(f"{sidecar.admin_url}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, orjson.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, orjson.loads(error.read())


def finished(sidecar: SidecarProcess, run_id: str, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, run = call(sidecar, "GET", f"/v1/eval-runs/{run_id}")
        assert status == 200
        if run["status"] != "running":
            return run
        time.sleep(0.1)
    raise AssertionError(f"eval run {run_id} still running after {timeout}s")


def with_traffic(sidecar: SidecarProcess) -> None:
    stats = send_demo_traffic(sidecar.grpc_endpoint, None)
    sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", stats.spans)


def test_session_metrics_run_with_custom_weights_survives_a_restart(tmp_path):
    sidecar = SidecarProcess(tmp_path)
    with sidecar:
        with_traffic(sidecar)
        body = {
            "session_ids": [SESSION["session_id"], "no-such-session"],
            "metrics": ["agent_reliability", "agent_consistency"],
            "signal_weights": {"tool_correctness": 1.0},
        }
        status, started = call(sidecar, "POST", "/v1/eval-runs", body)
        assert status == 202 and started["status"] == "running"
        run = finished(sidecar, started["id"])
    assert run["status"] == "done" and run["request"]["signal_weights"] == {"tool_correctness": 1.0}
    results = run["results"][SESSION["session_id"]]
    reliability = results["agent_reliability"]
    assert 0.0 <= reliability["score"] <= 1.0
    assert reliability["metadata"]["signal_weights"]["tool_correctness"] == 1.0
    assert reliability["metadata"]["total_traces_in_session"] == len(SESSION["turns"])
    assert "agent_consistency" in results
    assert "neither open nor indexed" in run["results"]["no-such-session"]["error"]
    with sidecar:  # a restart: the run is read back from the store
        status, again = call(sidecar, "GET", f"/v1/eval-runs/{started['id']}")
    assert status == 200 and again == run


def test_judge_metric_against_an_openai_compatible_server(tmp_path):
    with FakeOpenAI() as judge:
        judge.script(Reply.text(json.dumps({"score": 0.8, "concerns": [], "reason": "steady answers"})))
        evals = {"judge_url": judge.base_url, "judge_model": "gpt-4o-mini"}
        with SidecarProcess(tmp_path, evals=evals) as sidecar:
            with_traffic(sidecar)
            body = {
                "session_ids": [SESSION["session_id"]],
                "metrics": ["confidence"],
                "model": "openai/judge-1",
            }
            status, started = call(sidecar, "POST", "/v1/eval-runs", body)
            assert status == 202
            run = finished(sidecar, started["id"])
        sent = judge.completion_requests
    verdict = run["results"][SESSION["session_id"]]["confidence"]
    assert verdict["score"] == 0.8 and verdict["passed"] is True
    assert verdict["metadata"]["source"] == "llm_judge"
    assert [request.body["model"] for request in sent] == ["judge-1"]  # provider/model override
    assert SESSION["turns"][0]["user"] in json.dumps(sent[0].messages)


def test_with_snippets_off_the_judges_words_are_withheld_and_its_numbers_kept(tmp_path):
    quoted = SESSION["turns"][0]["user"]
    with FakeOpenAI() as judge:
        # A judge quoting the conversation in its reason and concerns.
        verdict = {"score": 0.3, "concerns": [f"user said: {quoted}"], "reason": f"because {quoted}"}
        judge.script(Reply.text(json.dumps(verdict)))
        evals = {"judge_url": judge.base_url, "judge_model": "gpt-4o-mini"}
        with SidecarProcess(tmp_path, evals=evals, signals={"snippets": False}) as sidecar:
            with_traffic(sidecar)
            body = {"session_ids": [SESSION["session_id"]], "metrics": ["confidence"]}
            status, started = call(sidecar, "POST", "/v1/eval-runs", body)
            assert status == 202
            run = finished(sidecar, started["id"])
            stored = (tmp_path / "data").glob("*")
            stored_bytes = b"".join(path.read_bytes() for path in stored if path.is_file())
    served = run["results"][SESSION["session_id"]]["confidence"]
    assert served["score"] == 0.3 and served["passed"] is False
    assert served["metadata"]["source"] == "llm_judge" and served["metadata"]["status"] == "ok"
    assert served["reason"].endswith("withheld: signals.snippets is off]")
    assert quoted not in json.dumps(run)
    assert quoted.encode() not in stored_bytes  # nor in the store other replicas read
    assert quoted not in sidecar.stderr_path.read_text()


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ({}, "session_ids"),
        ({"session_ids": []}, "session_ids"),
        ({"session_ids": ["s"], "metrics": ["vibes"]}, "metrics"),
        ({"session_ids": ["s"], "signal_weights": {"coherence": -1}}, "signal_weights"),
        ({"session_ids": ["s"], "model": "gpt-4o"}, "provider/model"),
        ({"session_ids": ["s"], "metrics": ["task_completion"]}, "evals.judge_url"),
    ],
)
def test_bad_requests_are_refused_with_the_field_named(tmp_path, body, complaint):
    with SidecarProcess(tmp_path) as sidecar:
        status, answer = call(sidecar, "POST", "/v1/eval-runs", body)
        assert status == 400 and complaint in answer["error"]
        assert call(sidecar, "GET", "/v1/eval-runs/unknown")[0] == 404


def test_trace_signals_come_from_the_judge_when_asked(tmp_path):
    from tests.support.clients import export_grpc
    from tests.test_enrichment_e2e import documented_example

    with FakeOpenAI() as judge:
        judge.script(Reply.text(json.dumps({"score": 0.35, "concerns": ["user upset"], "reason": "shaky"})))
        evals = {"judge_url": judge.base_url, "judge_model": "gpt-4o-mini", "judge_traces": True}
        with SidecarProcess(tmp_path, evals=evals) as sidecar:
            export_grpc(sidecar.grpc_endpoint, documented_example())
            deadline = time.monotonic() + 15
            signals: list = []
            while time.monotonic() < deadline:
                status, session = call(sidecar, "GET", "/v1/sessions/sess-doc-example")
                signals = session.get("trace_signals", []) if status == 200 else []
                if signals and signals[0]["sources"]["confidence"] == "llm_judge":
                    break
                time.sleep(0.1)
    assert signals[0]["confidence"] == 0.35
    assert signals[0]["sources"]["confidence"] == "llm_judge"
    assert signals[0]["sources"]["coherence"] == "embedding"


def test_old_runs_are_removed_by_count_on_write(tmp_path):
    """Retention on the live sidecar (its default SQLite store): beyond evals.runs_max_count, the
    oldest runs are removed when a run is written; the newest stay readable."""
    import sqlite3

    keep = 4
    with SidecarProcess(tmp_path, evals={"runs_max_count": keep}) as sidecar:
        ids = []
        for _ in range(10):
            status, started = call(sidecar, "POST", "/v1/eval-runs", {"session_ids": ["no-such-session"]})
            assert status == 202
            finished(sidecar, started["id"])
            ids.append(started["id"])
        assert [call(sidecar, "GET", f"/v1/eval-runs/{i}")[0] for i in ids] == [404] * 6 + [200] * keep
    with sqlite3.connect(tmp_path / "data" / "otelsignals.db") as conn:
        (stored,) = conn.execute("SELECT count(*) FROM documents WHERE kind = 'eval_run'").fetchone()
    assert stored == keep


@pytest.mark.parametrize(
    ("variable", "value"),
    [("OTELSIGNALS_EVALS__RUNS_MAX_COUNT", "0"), ("OTELSIGNALS_EVALS__RUNS_MAX_AGE", "0s")],
)
def test_retention_settings_are_validated(variable, value):
    from otelsignals.config import Config, ConfigError, validate
    from otelsignals.config_loading import load_config

    assert (Config().evals.runs_max_age, Config().evals.runs_max_count) == (7 * 86400.0, 1000)
    with pytest.raises(ConfigError) as raised:
        validate(load_config(None, environ={variable: value}))
    assert raised.value.key == "evals." + variable.rsplit("__", 1)[1].lower()


def test_withholding_keeps_enumerations_and_numbers_only():
    from otelsignals.pipeline.eval_runs import withhold_text

    result = {
        "name": "task_completion",
        "score": 0.5,
        "reason": "the user Alice asked for a refund",
        "metadata": {"verdict": "partial", "outcome": "Alice's card 4111 was refunded", "task": "refund"},
    }
    withheld = withhold_text(result)
    assert withheld["name"] == "task_completion" and withheld["score"] == 0.5
    assert withheld["metadata"]["verdict"] == "partial"
    assert "Alice" not in json.dumps(withheld) and "4111" not in json.dumps(withheld)


def closed_and_indexed(sidecar: SidecarProcess, count: int) -> None:
    deadline = time.monotonic() + 20
    while call(sidecar, "GET", "/v1/sessions?closed=true&limit=500")[1]["sessions"].__len__() < count:
        assert time.monotonic() < deadline, "sessions not closed and indexed in time"
        time.sleep(0.2)


def test_a_filtered_run_evaluates_closed_conversations_from_the_index(tmp_path):
    sessions = [c for c in load_conversations() if c.get("session_id")]
    with FakeOpenAI() as judge:
        judge.script(*[Reply.text(json.dumps({"score": 0.6, "concerns": [], "reason": "fine"}))] * 3)
        settings = {
            "sessions": {"ttl": "1s"},
            "index": {"flush_interval": "100ms", "content": True},
            "evals": {"judge_url": judge.base_url, "judge_model": "gpt-4o-mini"},
        }
        with SidecarProcess(tmp_path, **settings) as sidecar:
            with_traffic(sidecar)
            closed_and_indexed(sidecar, len(sessions))
            flagged = call(sidecar, "GET", "/v1/sessions?flagged=true&closed=true&limit=500")[1]["sessions"]
            body = {
                "filter": {"flagged": True, "closed": True},
                "limit": 3,
                "metrics": ["agent_reliability", "confidence"],
            }
            status, started = call(sidecar, "POST", "/v1/eval-runs", body)
            assert status == 202, started
            run = finished(sidecar, started["id"])
            status, listed = call(sidecar, "GET", "/v1/eval-runs")
    expected = [item["session_id"] for item in flagged[:3]]  # the highest priority first
    assert run["status"] == "done" and run["request"]["session_ids"] == expected
    for key in expected:
        result = run["results"][key]
        assert 0.0 <= result["agent_reliability"]["score"] <= 1.0
        assert result["confidence"]["score"] == 0.6  # judged from the messages the index kept
    assert status == 200 and [r["id"] for r in listed["runs"]] == [started["id"]]
    assert "results" not in listed["runs"][0]


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ({"filter": {"flagged": "maybe"}}, "flagged"),
        ({"filter": {"colour": "red"}}, "colour"),
        ({"filter": {"sort": "-priority"}}, "not filters"),
        ({"filter": {}, "session_ids": ["s"]}, "one of"),
        ({"filter": {}, "limit": 0}, "limit"),
    ],
)
def test_bad_filters_are_refused(tmp_path, body, complaint):
    with SidecarProcess(tmp_path) as sidecar:
        status, answer = call(sidecar, "POST", "/v1/eval-runs", body)
    assert status == 400 and complaint in answer["error"]


def test_per_trace_metrics_can_be_asked_for_in_a_run(tmp_path):
    with SidecarProcess(tmp_path) as sidecar:
        with_traffic(sidecar)
        body = {"session_ids": [SESSION["session_id"]], "metrics": ["coherence", "loop_detection"]}
        status, started = call(sidecar, "POST", "/v1/eval-runs", body)
        assert status == 202, started
        run = finished(sidecar, started["id"])
    results = run["results"][SESSION["session_id"]]
    for name in ("coherence", "loop_detection"):
        per_trace = results[name]["metadata"]["per_trace"]
        # A value per analysed trace that has one (loop detection needs an earlier trace to compare with).
        assert 0 < len(per_trace) <= len(SESSION["turns"])
        assert results[name]["score"] == pytest.approx(sum(per_trace.values()) / len(per_trace))
        assert results[name]["metadata"]["success"] == results[name]["passed"]


def test_a_per_trace_metric_without_values_passes_with_nothing_evaluated():
    from otelsignals.evals.session_metrics import TraceSignals
    from otelsignals.pipeline.eval_runs import per_trace_result

    result = per_trace_result("coherence", [TraceSignals("t1", confidence=0.9)], 0.5)
    assert (result.score, result.passed, result.metadata["traces_evaluated"]) == (1.0, True, 0)
    low = per_trace_result(
        "coherence", [TraceSignals("t1", coherence=0.2), TraceSignals("t2", coherence=0.4)], 0.5
    )
    assert low.score == pytest.approx(0.3) and not low.passed and "t1" in low.reason


# ---- trace-level runs ----------------------------------------------------------------------------


def test_a_trace_level_run_judges_the_conversation_as_it_stood_after_each_trace(tmp_path):
    """Per trace: the recorded per-trace metrics, and a judge metric of the conversation up to that
    trace — the first trace's judge sees the first user message, not the second."""
    first_user, second_user = SESSION["turns"][0]["user"], SESSION["turns"][1]["user"]
    with FakeOpenAI() as judge:
        judge.script(*[Reply.text(json.dumps({"score": 0.7, "concerns": [], "reason": "ok"}))] * 2)
        evals = {"judge_url": judge.base_url, "judge_model": "gpt-4o-mini"}
        with SidecarProcess(tmp_path, evals=evals) as sidecar:
            with_traffic(sidecar)
            status, session = call(sidecar, "GET", f"/v1/sessions/{SESSION['session_id']}")
            assert status == 200
            first, second = session["trace_ids"][:2]
            body = {"trace_ids": [first, second], "metrics": ["coherence", "confidence"]}
            status, started = call(sidecar, "POST", "/v1/eval-runs", body)
            assert status == 202, started
            run = finished(sidecar, started["id"])
        sent = [json.dumps(request.messages) for request in judge.completion_requests]
    assert run["status"] == "done" and list(run["results"]) == [first, second]
    for trace_id in (first, second):
        result = run["results"][trace_id]
        assert result["session_id"] == SESSION["session_id"]
        assert 0.0 <= result["coherence"]["score"] <= 1.0
        assert result["coherence"]["metadata"] == {
            "trace_id": trace_id,
            "source": "embedding",
            "threshold": 0.5,
            "success": result["coherence"]["passed"],
        }
        assert result["confidence"]["score"] == 0.7
    assert first_user in sent[0] and second_user not in sent[0]
    assert first_user in sent[1] and second_user in sent[1]


def test_a_closed_conversations_trace_is_found_in_the_index(tmp_path):
    settings = {"sessions": {"ttl": "1s"}, "index": {"flush_interval": "100ms"}}
    with SidecarProcess(tmp_path, **settings) as sidecar:
        with_traffic(sidecar)
        status, session = call(sidecar, "GET", f"/v1/sessions/{SESSION['session_id']}")
        trace_id = session["trace_ids"][0]
        closed_and_indexed(sidecar, len([c for c in load_conversations() if c.get("session_id")]))
        body = {"trace_ids": [trace_id, "0" * 32], "metrics": ["coherence"]}
        status, started = call(sidecar, "POST", "/v1/eval-runs", body)
        assert status == 202, started
        run = finished(sidecar, started["id"])
    found, unknown = run["results"][trace_id], run["results"]["0" * 32]
    assert found["session_id"] == SESSION["session_id"]
    assert 0.0 <= found["coherence"]["score"] <= 1.0
    assert "not in the index" in unknown["error"]


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ({"trace_ids": ["abc"]}, "32 lower-case hex"),
        ({"trace_ids": ["A" * 32]}, "32 lower-case hex"),
        ({"trace_ids": ["a" * 32], "metrics": ["agent_reliability"]}, "no session metrics"),
        ({"trace_ids": ["a" * 32], "session_ids": ["s"]}, "one of"),
        ({"trace_ids": []}, "trace_ids"),
        ({"trace_ids": ["a" * 32] * 501}, "at most 500"),
    ],
)
def test_bad_trace_level_requests_are_refused(body, complaint):
    with pytest.raises(EvalRunError, match=complaint):
        parse_request(body)


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ({"session_ids": ["s"], "model": "openai/"}, "provider/model"),
        ({"session_ids": ["s"], "model": "/gpt-4o"}, "provider/model"),
        ({"filter": {"quality": "bogus"}}, "quality: unknown 'bogus'"),
        ({"filter": {"quality": ["severe", None]}}, "filter: a value is"),
        ({"filter": {"signal": "no.such.signal"}}, "signal: unknown 'no.such.signal'"),
        ({"filter": {"signal": "execution"}}, "signal: unknown 'execution'"),  # a layer: not indexed
        ({"filter": {"agent": {"x": 1}}}, "filter: a value is"),
    ],
)
def test_requests_that_would_evaluate_nothing_are_refused_at_once(body, complaint):
    """These were accepted (202): the model failed when the run started, and a filter with a typo
    matched no conversation, so the run ended "done" having evaluated nothing."""
    from otelsignals.pipeline.eval_runs import EvalRunError, parse_request

    with pytest.raises(EvalRunError) as refused:
        parse_request(body)
    assert complaint in str(refused.value)


@pytest.mark.parametrize(
    "conditions",
    [
        {"quality": ["severe", "poor"], "flagged": True},
        {"signal": "execution.failure"},  # a category
        {"signal": "interaction.misalignment.rephrase", "agent": "support-bot", "min_priority": 50},
    ],
)
def test_their_near_misses_are_accepted(conditions):
    from otelsignals.pipeline.eval_runs import parse_request

    assert parse_request({"filter": conditions})["filter"] == conditions


def test_another_replica_sees_a_run_going_until_its_process_stops_beating(tmp_path):
    """Every replica but the one running it called a running run "interrupted" at once: a client
    polling another replica gave up on a run that was still going."""
    import asyncio
    import time as clock

    import orjson

    from otelsignals.config import EvalsConfig
    from otelsignals.pipeline import eval_runs
    from otelsignals.pipeline.eval_runs import EvalRuns
    from otelsignals.pipeline.sessions import SessionStore
    from otelsignals.stores import open_store

    url = f"sqlite:///{tmp_path}/shared.db"

    async def slow(reader):
        await asyncio.sleep(1.0)  # a long run (judge calls) on replica A
        return reader()

    async def main() -> tuple[str, str, str]:
        config = EvalsConfig(trace_metrics=False)
        a = EvalRuns(open_store(url), SessionStore(60, 100, lambda *_: None), config, read_state=slow)
        b = EvalRuns(open_store(url), SessionStore(60, 100, lambda *_: None), config)
        run = await a.start({"session_ids": ["s1"], "metrics": ["agent_reliability"]})
        await asyncio.sleep(0.3)
        on_a, on_b = (await a.get(run["id"]))["status"], (await b.get(run["id"]))["status"]
        await a.stop()
        # A run whose process stopped beating long ago (written by hand, as a killed process left it).
        dead = {**run, "id": "d" * 32, "created_at": clock.time() - 10 * eval_runs.RUN_STALE_S}
        b.store.save_document(eval_runs.KIND, dead["id"], orjson.dumps(dead).decode())
        stale = (await b.get(dead["id"]))["status"]
        return on_a, on_b, stale

    on_a, on_b, stale = asyncio.run(main())
    assert (on_a, on_b, stale) == ("running", "running", "interrupted")


def test_a_heartbeat_being_written_never_lands_after_the_runs_end(tmp_path, monkeypatch):
    """The heartbeat was cancelled at the run's end, but a write already in its thread went on and
    could land after the final one: the run read "running" again, then "interrupted", its results
    lost."""
    import asyncio
    import time as clock

    import orjson

    from otelsignals.config import EvalsConfig
    from otelsignals.pipeline import eval_runs
    from otelsignals.pipeline.eval_runs import EvalRuns
    from otelsignals.pipeline.sessions import SessionStore
    from otelsignals.stores import open_store

    monkeypatch.setattr(eval_runs, "RUN_HEARTBEAT_S", 0.05)
    store = open_store(f"sqlite:///{tmp_path}/shared.db")
    save = store.save_document
    beats: list[float] = []

    def slow_beats(kind: str, key: str, body: str, now: float | None = None) -> None:
        if "heartbeat_at" in orjson.loads(body):
            beats.append(clock.monotonic())
            clock.sleep(0.3)  # a heartbeat's write still going when the run ends
        save(kind, key, body, now)

    store.save_document = slow_beats  # type: ignore[method-assign]

    async def slow(reader):
        await asyncio.sleep(0.2)
        return reader()

    async def main() -> str:
        runs = EvalRuns(
            store, SessionStore(60, 100, lambda *_: None), EvalsConfig(trace_metrics=False), read_state=slow
        )
        run = await runs.start({"session_ids": ["s1"], "metrics": ["agent_reliability"]})
        while run["id"] in runs._running:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.6)  # any write left in flight has landed by now
        return orjson.loads(store.load_document(eval_runs.KIND, run["id"]) or "{}")["status"]

    assert asyncio.run(main()) == "done" and beats  # (a beat was written while the run went)
