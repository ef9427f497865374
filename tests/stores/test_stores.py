"""The reputation stores (SPEC §7) against real servers: SQLite (a temp file), Redis and PostgreSQL.

The same tests run on every store (parametrised fixture). Redis and PostgreSQL are started once per
session from the Debian binaries (``tests/support/servers.py``; ``scripts/test-deps`` installs them).
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from otelsignals.reputation import Evaluation, reputation
from otelsignals.stores import PartlyRecorded, ReputationStore, open_store

KINDS = ["sqlite", "redis", "postgres"]


@pytest.fixture(params=KINDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty store of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'reputation.db'}"  # an absolute path: sqlite:////tmp/...
    if request.param == "redis":
        url = request.getfixturevalue("redis_server")
        with redis.Redis.from_url(url) as client:
            client.flushdb()
        return url
    url = request.getfixturevalue("postgres_server")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS reputation_window, reputation_agents, documents")
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[ReputationStore]:
    s = open_store(store_url)
    yield s
    s.close()


def ev(i: int, agent: str = "agent-a", passed: bool | None = None) -> Evaluation:
    return Evaluation(agent, i % 4 != 0 if passed is None else passed, 100.0 + i, 1_700_000_000.0 + i)


def test_implements_the_protocol(store: ReputationStore) -> None:
    assert isinstance(store, ReputationStore)
    assert store.window_size == 500


def test_documents_are_shared_and_replaced(store_url: str) -> None:
    writer, reader = open_store(store_url), open_store(store_url)
    try:
        assert reader.load_document("eval_run", "r1") is None
        writer.save_document("eval_run", "r1", '{"status": "running"}')
        assert reader.load_document("eval_run", "r1") == '{"status": "running"}'
        writer.save_document("eval_run", "r1", '{"status": "done"}')
        assert reader.load_document("eval_run", "r1") == '{"status": "done"}'
        assert reader.load_document("other_kind", "r1") is None
    finally:
        writer.close()
        reader.close()


def test_unknown_agent_is_empty(store: ReputationStore) -> None:
    assert store.window("nobody") == ([], 0)
    assert store.agents() == []
    assert reputation(*store.window("nobody"), agent_id="nobody").lifecycle == "new"


def test_window_and_count_are_exact(store_url: str) -> None:
    with open_store(store_url, window_size=5) as s:  # type: ignore[attr-defined]
        for i in range(3):
            s.record(ev(i))
        assert s.window("agent-a") == ([ev(0), ev(1), ev(2)], 3)
        for i in range(3, 8):
            s.record(ev(i))
        s.record(ev(100, agent="agent-b"))
        s.record(ev(101, agent="agent b:with:colons"))
        window, count = s.window("agent-a")
        assert count == 8
        assert window == [ev(i) for i in range(3, 8)]  # exact values, oldest first; 0..2 left
        assert s.window("agent-b") == ([ev(100, agent="agent-b")], 1)
        assert s.window("agent b:with:colons") == ([ev(101, agent="agent b:with:colons")], 1)
        assert s.agents() == ["agent b:with:colons", "agent-a", "agent-b"]


def test_a_batch_is_recorded_exactly_as_one_by_one(store_url: str) -> None:
    # Interleaved agents, more than the window: the batch must trim and count like single records.
    evaluations = [ev(i, agent="agent-a" if i % 3 else "agent-b") for i in range(14)]
    with open_store(store_url, window_size=4) as batched:  # type: ignore[attr-defined]
        batched.record_many(evaluations[:9])
        batched.record_many(evaluations[9:])
        assert batched.window("agent-a") == ([e for e in evaluations if e.agent_id == "agent-a"][-4:], 9)
        assert batched.window("agent-b") == ([e for e in evaluations if e.agent_id == "agent-b"][-4:], 5)
        batched.record_many([])  # nothing to do, no error


def test_records_are_numbered_and_read_from_a_number_on(store_url: str) -> None:
    # What a replica needs to follow a window without reading it all again (reputation.AgentWindow).
    with open_store(store_url, window_size=4) as s:  # type: ignore[attr-defined]
        assert s.record_many([ev(0), ev(1, agent="agent-b"), ev(2)]) == [1, 1, 2]
        assert s.record_many([ev(i) for i in range(3, 7)]) == [3, 4, 5, 6]
        assert s.record_many([]) == []
        assert s.window_since("agent-a", 4) == ([ev(5), ev(6)], 6)
        assert s.window_since("agent-a", 5) == ([ev(6)], 6)
        assert s.window_since("agent-a", 6) == ([], 6)
        assert s.window_since("agent-a", 9) == ([], 6)  # ahead of the store: nothing, and its count
        # Numbered above 1, but the window keeps only the newest 4 (numbers 3..6).
        assert s.window_since("agent-a", 1) == ([ev(i) for i in range(3, 7)], 6)
        assert s.window_since("agent-a", 0) == s.window("agent-a")
        assert s.window_since("nobody", 0) == ([], 0)


def test_replicas_share_the_window(store_url: str) -> None:
    with open_store(store_url) as one, open_store(store_url) as two:  # type: ignore[attr-defined]
        one.record(ev(1))
        two.record(ev(2))
        assert one.window("agent-a") == two.window("agent-a") == ([ev(1), ev(2)], 2)


def test_lifecycle_boundaries_through_the_store(store: ReputationStore) -> None:
    expected = {0: "new", 1: "calibrating", 49: "calibrating", 50: "active", 499: "active", 500: "mature"}
    expected[501] = "mature"
    recorded = 0
    for boundary, lifecycle in expected.items():
        while recorded < boundary:
            store.record(ev(recorded))
            recorded += 1
        window, count = store.window("agent-a")
        assert count == boundary and len(window) == min(boundary, 500)
        rep = reputation(window, count, agent_id="agent-a")
        assert (rep.lifecycle, rep.eval_count, rep.window_entries, rep.window_size) == (
            lifecycle,
            boundary,
            min(boundary, 500),
            500,
        )
        if lifecycle == "calibrating":
            assert rep.score is None and rep.calibration == f"{boundary}/50"
        elif lifecycle != "new":
            assert rep.score is not None and 0 <= rep.score <= 1000
    # After 501 the oldest evaluation has left the window, the newest is last.
    window, _ = store.window("agent-a")
    assert window[0] == ev(1) and window[-1] == ev(500)
    # A failure as the newest evaluation resets the streak and lowers the score.
    before = reputation(window, 501).score
    store.record(ev(501, passed=False))
    after = reputation(*store.window("agent-a"))
    assert after.components["streak"] == 0.0 and after.score is not None and before is not None
    assert after.score < before


PER_PROCESS = 1000
SHARED = "shared-agent"


def _writer(url: str, worker: int, barrier: multiprocessing.synchronize.Barrier) -> None:
    store = open_store(url)
    try:
        barrier.wait(30)
        for i in range(PER_PROCESS):
            store.record(Evaluation(SHARED, i % 2 == 0, float(worker * 100_000 + i), float(i)))
    finally:
        store.close()


def test_two_processes_record_at_once(store_url: str) -> None:
    open_store(store_url).close()  # the schema exists before the race (creating it concurrently is safe too)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_writer, args=(store_url, w, barrier)) for w in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with open_store(store_url) as s:  # type: ignore[attr-defined]
        window, count = s.window(SHARED)
        assert s.agents() == [SHARED]
    assert count == 2 * PER_PROCESS
    assert len(window) == 500
    # The window holds the newest 500: each writer's entries are the tail of what it wrote, in order.
    by_worker: dict[int, list[int]] = {1: [], 2: []}
    for e in window:
        worker, i = divmod(int(e.latency_ms), 100_000)
        by_worker[worker].append(i)
        assert e.passed == (i % 2 == 0) and e.at == float(i)
    for indices in by_worker.values():
        assert indices == list(range(PER_PROCESS - len(indices), PER_PROCESS))
    assert sum(len(v) for v in by_worker.values()) == 500


def test_open_store_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///sub/rel.db") as s:  # type: ignore[attr-defined]
        s.record(ev(1))
    assert (tmp_path / "sub" / "rel.db").exists()
    with open_store(f"sqlite:///{tmp_path}/abs.db") as s:  # type: ignore[attr-defined]
        s.record(ev(1))
        assert s.window("agent-a") == ([ev(1)], 1)
    with open_store("sqlite:///:memory:", window_size=2) as s:  # type: ignore[attr-defined]
        for i in range(3):
            s.record(ev(i))
        assert s.window("agent-a") == ([ev(1), ev(2)], 3)
    for bad in ("mysql://x/y", "sqlite://relative.db", "nothing"):
        with pytest.raises(ValueError):
            open_store(bad)
    with pytest.raises(ValueError):
        open_store("sqlite:///x.db", window_size=0)


def test_sqlite_uses_wal(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path}/wal.db") as s:  # type: ignore[attr-defined]
        assert s._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# -- document retention (eval runs) -------------------------------------------------------------------
def test_documents_are_pruned_by_age_then_count(store_url: str) -> None:
    with open_store(store_url) as s, open_store(store_url) as other:  # type: ignore[attr-defined]
        for i in range(6):
            s.save_document("eval_run", f"r{i}", f'{{"i": {i}}}', now=100.0 + i)
        s.save_document("other_kind", "r0", "{}", now=0.0)
        s.save_document("eval_run", "r0", '{"i": "rewritten"}', now=106.0)  # a rewrite refreshes its age
        # Age: last written before 107 - 4.5 = 102.5 -> r1, r2 (r0 was rewritten at 106).
        assert other.prune_documents("eval_run", 4.5, 100, now=107.0) == (2, 0)
        assert [k for k in ("r0", "r1", "r2", "r3", "r4", "r5") if other.load_document("eval_run", k)] == [
            "r0",
            "r3",
            "r4",
            "r5",
        ]
        # Count: the newest two stay (r0 at 106, r5 at 105).
        assert s.prune_documents("eval_run", 1000.0, 2, now=107.0) == (0, 2)
        assert other.load_document("eval_run", "r0") == '{"i": "rewritten"}'
        assert other.load_document("eval_run", "r5") == '{"i": 5}'
        assert other.load_document("eval_run", "r3") is None and other.load_document("eval_run", "r4") is None
        assert other.load_document("other_kind", "r0") == "{}", "another kind is not touched"
        assert s.prune_documents("eval_run", 1000.0, 2, now=107.0) == (0, 0)
        # A removed key can be written again and is kept like any other.
        s.save_document("eval_run", "r3", "{}", now=108.0)
        assert s.prune_documents("eval_run", 1000.0, 2, now=108.0) == (0, 1)
        assert other.load_document("eval_run", "r3") == "{}" and other.load_document("eval_run", "r5") is None


def test_documents_written_before_retention_are_kept_and_then_pruned(store_url: str, tmp_path: Path) -> None:
    """A store created before documents had a last-written time: its documents count as written
    when the store is first opened by this version."""
    if store_url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(store_url[len("sqlite:///") :]) as conn:
            conn.execute(
                "CREATE TABLE documents (kind TEXT NOT NULL, key TEXT NOT NULL, body TEXT NOT NULL, "
                "PRIMARY KEY (kind, key)) WITHOUT ROWID"
            )
            conn.execute("INSERT INTO documents VALUES ('eval_run', 'old', '{}')")
    elif store_url.startswith("redis"):
        with redis.Redis.from_url(store_url) as client:
            client.set("otelsignals:rep:doc:eval_run:old", "{}")
    else:
        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE documents (kind TEXT NOT NULL, key TEXT NOT NULL, body TEXT NOT NULL, "
                "PRIMARY KEY (kind, key))"
            )
            conn.execute("INSERT INTO documents VALUES ('eval_run', 'old', '{}')")
    import time

    opened = time.time()
    with open_store(store_url) as s:  # type: ignore[attr-defined]
        assert s.load_document("eval_run", "old") == "{}"
        assert s.prune_documents("eval_run", 60.0, 10, now=opened + 30) == (0, 0)
        s.save_document("eval_run", "new", "{}", now=opened + 200)
        assert s.prune_documents("eval_run", 60.0, 10, now=opened + 200) == (1, 0)
        assert s.load_document("eval_run", "old") is None and s.load_document("eval_run", "new") == "{}"


def test_eval_runs_enforce_retention_on_write(store_url: str) -> None:
    import asyncio

    from otelsignals.config import EvalsConfig
    from otelsignals.pipeline.eval_runs import EvalRuns
    from otelsignals.pipeline.sessions import SessionStore

    async def scenario() -> None:
        with open_store(store_url) as s:  # type: ignore[attr-defined]
            runs = EvalRuns(s, SessionStore(60.0, 10), EvalsConfig(runs_max_count=3, runs_max_age=3600.0))  # type: ignore[arg-type]
            s.save_document(
                "eval_run", "ancient", '{"id": "ancient", "status": "done", "created_at": 1.0}', now=1.0
            )
            ids = []
            for _ in range(5):
                ids.append((await runs.start({"session_ids": ["nobody"]}))["id"])
                await asyncio.gather(*runs._running.values())  # one after the other: a clear order
            kept = [i for i in ids if await runs.get(i) is not None]
            assert kept == ids[-3:], "the newest runs_max_count runs stay"
            assert await runs.get("ancient") is None
            assert runs.removed.labels("age")._value.get() == 1
            assert runs.removed.labels("count")._value.get() == 2
            # A run past runs_max_age is not served even before a write prunes it.
            s.save_document(
                "eval_run", "stale", '{"id": "stale", "status": "done", "created_at": 5.0}', now=5.0
            )
            assert await runs.get("stale") is None
            assert s.load_document("eval_run", "stale") is None
            await runs.stop()

    asyncio.run(scenario())


def test_document_keys_list_the_newest_first(store: ReputationStore) -> None:
    for n, key in enumerate(["r1", "r2", "r3"]):
        store.save_document("eval_run", key, "{}", now=1_000.0 + n)
    store.save_document("eval_run", "r1", "{}", now=2_000.0)  # rewritten: now the newest
    store.save_document("other", "x", "{}", now=3_000.0)
    assert store.document_keys("eval_run", 10) == ["r1", "r3", "r2"]
    assert store.document_keys("eval_run", 2) == ["r1", "r3"]
    assert store.document_keys("nothing", 5) == []


def test_redis_says_which_evaluations_of_a_batch_it_recorded(redis_server: str) -> None:
    # Redis runs the batch's scripts without a transaction around them: when one fails (its agent's
    # window key holds another type), the others are recorded, and retrying the whole batch would
    # record them twice. PartlyRecorded says which were recorded, with their numbers.
    with redis.Redis.from_url(redis_server) as client:
        client.flushdb()
        client.set("otelsignals:rep:agent:broken:window", "not a list")
    with open_store(redis_server) as s:  # type: ignore[attr-defined]
        with pytest.raises(PartlyRecorded) as raised:
            s.record_many([ev(0), ev(1, agent="broken"), ev(2, agent="agent-b"), ev(3)])
        assert raised.value.numbers == [1, None, 1, 2]
        assert len(raised.value.errors) == 1 and "WRONGTYPE" in str(raised.value.errors[0])
        assert s.window("agent-a") == ([ev(0), ev(3)], 2)
        assert s.window("agent-b") == ([ev(2, agent="agent-b")], 1)
        with pytest.raises(redis.ResponseError):  # none recorded: the error itself
            s.record_many([ev(4, agent="broken")])
        assert s.window("agent-a")[1] == 2
    with redis.Redis.from_url(redis_server) as client:  # nothing written for the failed ones
        assert client.get("otelsignals:rep:agent:broken:count") is None
        assert not client.sismember("otelsignals:rep:agents", "broken")


def test_postgres_stores_connect_again_after_the_server_ends_their_connection(postgres_server: str) -> None:
    """A server restart, a failover or a terminated backend closed the stores' one connection for
    good: every later record and read failed until the process restarted. Now the statement that
    finds it broken fails (its caller retries) and the next one connects again."""
    import time

    from otelsignals.stores.conversation_index import IndexedConversation, open_index

    store = open_store(postgres_server)
    index = open_index(postgres_server)
    try:
        store.record(Evaluation("agent-a", True, 100.0, time.time()))

        def row(key: str) -> IndexedConversation:
            return IndexedConversation(key, "agent-a", 1.0, 2.0, 1, "good", 0.9, None, False, False, (), {})

        index.upsert([row("before")])
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND datname = current_database()"
            ).fetchone()
        assert ended is not None and ended[0] >= 2
        with pytest.raises(psycopg.OperationalError):  # the statement that finds it broken
            store.record(Evaluation("agent-a", True, 100.0, time.time()))
        with pytest.raises(psycopg.OperationalError):
            index.upsert([row("lost")])
        store.record(Evaluation("agent-a", False, 100.0, time.time()))  # connected again
        index.upsert([row("after")])
        evaluations, count = store.window("agent-a")
        assert count == 2 and [e.passed for e in evaluations] == [True, False]
        assert index.get("after") is not None and index.get("before") is not None
    finally:
        store.close()
        index.close()


def test_redis_records_a_named_evaluation_once_however_often_it_is_sent(redis_server: str) -> None:
    """A request whose answer is lost is sent again (redis-py retries a pipeline on a lost
    connection; the recorder records a failed batch again one by one): each run of the script
    counted it again. A named evaluation (Evaluation.key; the recorder names each) counts once."""
    store = open_store(redis_server)
    try:
        named = Evaluation("twice-agent", True, 10.0, 1.0, key="k-1")
        assert store.record_many([named, named]) == [1, 1]
        store.record(named)
        store.record(Evaluation("twice-agent", False, 10.0, 2.0, key="k-2"))
        store.record(Evaluation("twice-agent", False, 10.0, 2.0))  # unnamed: as before
        evaluations, count = store.window("twice-agent")
        assert count == 3 and [e.passed for e in evaluations] == [True, False, False]
    finally:
        store.close()


def test_a_lost_redis_answer_does_not_count_the_recorders_evaluations_twice(redis_server: str) -> None:
    """Through a TCP relay that closes the connection once Redis has run the scripts, before their
    answer reaches the recorder (a failover, a reset): 3 evaluations submitted were 6 in Redis."""
    import socket
    import threading
    import time

    from otelsignals.pipeline.reputation_recorder import ReputationRecorder
    from otelsignals.reputation import ReputationConfig
    from otelsignals.telemetry import Telemetry

    port = int(redis_server.rsplit(":", 1)[1].split("/")[0])
    answers_to_lose = [1]
    listener = socket.create_server(("127.0.0.1", 0))

    def relay() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", port))
            scripts_sent = threading.Event()

            def pump(
                source: socket.socket, target: socket.socket, sent: threading.Event, to_redis: bool
            ) -> None:
                with contextlib.suppress(OSError):
                    while data := source.recv(65536):
                        if to_redis and b"EVALSHA" in data.upper() and answers_to_lose[0]:
                            answers_to_lose[0] -= 1
                            sent.set()
                        elif not to_redis and sent.is_set():  # Redis ran them; the answer is lost
                            source.shutdown(socket.SHUT_RDWR)
                            target.shutdown(socket.SHUT_RDWR)
                            return
                        target.sendall(data)

            threading.Thread(target=pump, args=(client, server, scripts_sent, True), daemon=True).start()
            threading.Thread(target=pump, args=(server, client, scripts_sent, False), daemon=True).start()

    threading.Thread(target=relay, daemon=True).start()
    store = open_store(f"redis://127.0.0.1:{listener.getsockname()[1]}/0")
    telemetry = Telemetry()
    recorder = ReputationRecorder(store, ReputationConfig(), telemetry)
    recorder.start()
    try:
        for _ in range(3):
            recorder.submit_evaluation(Evaluation("lost-answer-agent", True, 100.0, time.time()))
        deadline = time.monotonic() + 20
        while telemetry.reputation_recorded._value.get() < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        recorder.stop()
        listener.close()
    assert answers_to_lose == [0]  # the answer was lost once
    direct = redis.Redis.from_url(redis_server)
    assert int(direct.get("otelsignals:rep:agent:lost-answer-agent:count") or 0) == 3
    assert direct.llen("otelsignals:rep:agent:lost-answer-agent:window") == 3
