"""The reputation writer on real SQLite stores: evaluations recorded in batches, each agent's window
followed in memory and read back only for what this process did not write (its first evaluation
seen here, other replicas' entries, a store emptied), with the store's own reputation every time."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import redis

from otelsignals.config import ConfigError
from otelsignals.pipeline import reputation_recorder
from otelsignals.pipeline.reputation_recorder import ReputationRecorder
from otelsignals.reputation import Evaluation, ReputationConfig, reputation
from otelsignals.stores.redis import RedisStore
from otelsignals.stores.sqlite import SqliteStore
from otelsignals.telemetry import Telemetry


class CountingStore(SqliteStore):
    """A real SQLite store that counts how often a window is read back."""

    window_reads = 0

    def window_since(self, agent_id: str, after: int) -> tuple[list[Evaluation], int]:
        self.window_reads += 1
        return super().window_since(agent_id, after)


def reads(telemetry: Telemetry, reason: str) -> float:
    value = telemetry.registry.get_sample_value(
        "otelsignals_reputation_window_reads_total", {"reason": reason}
    )
    return value or 0.0


def test_a_burst_is_written_in_batches_and_never_read_back(tmp_path: Path) -> None:
    store = CountingStore(str(tmp_path / "rep.db"), window_size=500)
    telemetry = Telemetry()
    recorder = ReputationRecorder(store, ReputationConfig(), telemetry)
    evaluations = [
        Evaluation(f"agent-{i % 3}", i % 5 != 0, 200.0 + i, 1_700_000_000.0 + i) for i in range(1500)
    ]
    for evaluation in evaluations:  # queued before the writer starts: a burst
        recorder.submit_evaluation(evaluation)
    recorder.start()
    recorder.stop(timeout=30)
    assert telemetry.registry.get_sample_value("otelsignals_reputation_evaluations_total") == 1500
    # The store was empty: every agent's first evaluation was number 1, and nobody else wrote.
    assert store.window_reads == 0
    config = recorder.config
    for agent in ("agent-0", "agent-1", "agent-2"):
        mine = [e for e in evaluations if e.agent_id == agent]
        expected = reputation(mine[-500:], len(mine), config, agent_id=agent)
        assert recorder.current(agent) == expected == reputation(*store.window(agent), config, agent_id=agent)
    store.close()


class BatchCountingStore(SqliteStore):
    """A real SQLite store that counts its transactions."""

    batches = 0

    def record_many(self, evaluations: Sequence[Evaluation]) -> list[int]:
        self.batches += 1
        return super().record_many(evaluations)


def test_evaluations_arriving_one_by_one_share_a_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A steady load sends one turn's evaluation at a time: the writer waits BATCH_WAIT_S after the
    # first of a batch for the others instead of a transaction (and a recomputed reputation) each.
    # Long here, so that a loaded machine cannot split the batch; stop() ends the wait at once.
    monkeypatch.setattr(reputation_recorder, "BATCH_WAIT_S", 5.0)
    store = BatchCountingStore(str(tmp_path / "rep.db"), window_size=500)
    telemetry = Telemetry()
    recorder = ReputationRecorder(store, ReputationConfig(), telemetry)
    recorder.start()
    evaluations = series("agent", 0, 10, passed_every=3)
    for evaluation in evaluations:
        recorder.submit_evaluation(evaluation)
        time.sleep(0.005)  # each finds the writer waiting (without the wait: ten transactions)
    started = time.monotonic()
    recorder.stop(timeout=30)
    assert time.monotonic() - started < 2.5
    assert telemetry.registry.get_sample_value("otelsignals_reputation_evaluations_total") == 10
    assert store.batches == 1
    assert recorder.current("agent") == reputation(evaluations, 10, recorder.config, agent_id="agent")
    store.close()


def written(recorder: ReputationRecorder, telemetry: Telemetry, evaluations: list[Evaluation]) -> None:
    """Submit and wait until the writer has recorded them (it keeps running; it counts them once
    the reputation is up to date)."""
    before = telemetry.registry.get_sample_value("otelsignals_reputation_evaluations_total") or 0
    for evaluation in evaluations:
        recorder.submit_evaluation(evaluation)
    deadline = time.monotonic() + 30
    while telemetry.registry.get_sample_value("otelsignals_reputation_evaluations_total") != before + len(
        evaluations
    ):
        assert time.monotonic() < deadline, "the writer did not record them"
        time.sleep(0.01)


def series(agent: str, start: int, count: int, passed_every: int) -> list[Evaluation]:
    return [
        Evaluation(agent, i % passed_every != 0, 100.0 + 7 * i, float(i)) for i in range(start, start + count)
    ]


class Replica:
    """A running recorder (with its telemetry) on its own connection to a store; stopped and closed
    on exit."""

    def __init__(self, store: SqliteStore, config: ReputationConfig) -> None:
        self.store = store
        self.telemetry = Telemetry()
        self.recorder = ReputationRecorder(store, config, self.telemetry)

    def __enter__(self) -> Replica:
        self.recorder.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.recorder.stop(timeout=30)
        self.store.close()

    def write(self, evaluations: list[Evaluation]) -> None:
        written(self.recorder, self.telemetry, evaluations)

    def reads(self, reason: str) -> float:
        return reads(self.telemetry, reason)

    def current(self, agent: str) -> object:
        return self.recorder.current(agent)


WINDOW_40 = ReputationConfig(window=40, calibration=5)


def in_store(store: SqliteStore, agent: str, config: ReputationConfig = WINDOW_40) -> object:
    """The agent's reputation as the store has it now."""
    return reputation(*store.window(agent), config, agent_id=agent)


def test_replicas_on_one_store_read_only_what_the_others_wrote(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    with (
        Replica(SqliteStore(path, window_size=40), WINDOW_40) as one,
        Replica(SqliteStore(path, window_size=40), WINDOW_40) as two,
        SqliteStore(path, window_size=40) as check,
    ):
        one.write(series("shared", 0, 30, 3) + series("mine", 0, 5, 2))
        assert one.current("shared") == in_store(check, "shared")
        assert one.reads("first_seen") == one.reads("other_writer") == 0

        two.write(series("shared", 30, 25, 4))  # two has not seen "shared" yet
        assert two.current("shared") == in_store(check, "shared")
        assert two.reads("first_seen") == 1

        one.write(series("shared", 55, 10, 5))  # numbers 56.. : 31..55 were two's
        assert one.current("shared") == in_store(check, "shared")
        assert one.reads("other_writer") == 1
        one.write(series("shared", 65, 3, 2))  # nobody wrote in between: no read
        assert one.reads("other_writer") == 1
        assert one.current("shared") == in_store(check, "shared")
        assert one.current("mine") == in_store(check, "mine")

        # The store emptied (a new Redis, a deleted file's tables): numbering starts again at 1.
        check._conn.execute("DELETE FROM reputation_window")
        check._conn.execute("DELETE FROM reputation_agents")
        one.write(series("shared", 100, 1, 2) + series("shared", 101, 3, 2))
        assert one.current("shared") == in_store(check, "shared")
        assert one.current("shared").eval_count == 4  # type: ignore[attr-defined]
        two.write(series("shared", 104, 2, 2))  # two was at 55: the count went back
        assert two.reads("store_reset") == 1
        assert two.current("shared") == in_store(check, "shared")


def test_the_least_recently_written_agents_are_forgotten_and_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reputation_recorder, "AGENTS_FOLLOWED", 2)
    with Replica(SqliteStore(str(tmp_path / "rep.db"), window_size=40), WINDOW_40) as replica:
        for agent in ("a", "b", "c"):
            replica.write(series(agent, 0, 6, 2))
        # "a" is no longer followed ("b" and "c" were written since); its spans keep its reputation.
        assert replica.current("a") == in_store(replica.store, "a")
        replica.write(series("a", 6, 1, 2))
        assert replica.reads("first_seen") == 1
        assert replica.current("a") == in_store(replica.store, "a")


def test_what_no_number_shows_is_read_whole_periodically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store emptied and written past this process's count by another replica before this one
    # writes again: the numbers follow on, only a whole read shows it.
    path = str(tmp_path / "rep.db")
    with (
        Replica(SqliteStore(path, window_size=40), WINDOW_40) as mine,
        SqliteStore(path, window_size=40) as other,
    ):
        mine.write(series("x", 0, 10, 2))  # half failed
        other._conn.execute("DELETE FROM reputation_window")
        other._conn.execute("DELETE FROM reputation_agents")
        other.record_many(series("x", 100, 12, 1000))  # all passed: numbers 1..12
        mine.write(series("x", 200, 1, 1000))  # number 13: "others wrote 11..12"
        assert mine.current("x") != in_store(other, "x")  # half of its window is from before
        monkeypatch.setattr(reputation_recorder, "WHOLE_READ_INTERVAL_S", 0.0)
        mine.write(series("x", 300, 1, 1000))
        assert mine.reads("periodic") == 1
        assert mine.current("x") == in_store(other, "x")


def test_a_replica_keeping_a_smaller_window_makes_this_one_read_whole(tmp_path: Path) -> None:
    path = str(tmp_path / "rep.db")
    with (
        Replica(SqliteStore(path, window_size=40), WINDOW_40) as mine,
        SqliteStore(path, window_size=10) as smaller,
    ):
        mine.write(series("x", 0, 30, 3))
        # More than its window: some of what this one lacks is gone already (what it holds beyond
        # the smaller window goes too, which the periodic whole read catches up with).
        smaller.record_many(series("x", 30, 15, 2))
        mine.write(series("x", 45, 2, 2))
        assert mine.reads("trimmed_elsewhere") == 1
        assert mine.current("x") == in_store(mine.store, "x")


class FailingReadStore(SqliteStore):
    """A real SQLite store whose reads fail while ``failing`` is set (a store that went away)."""

    failing = False

    def window_since(self, agent_id: str, after: int) -> tuple[list[Evaluation], int]:
        if self.failing:
            raise OSError("store unreachable for a read")
        return super().window_since(agent_id, after)


def test_a_failed_read_keeps_the_last_reputation_and_reads_whole_next_time(tmp_path: Path) -> None:
    path = str(tmp_path / "rep.db")
    failing = FailingReadStore(path, window_size=40)
    with Replica(failing, WINDOW_40) as mine, SqliteStore(path, window_size=40) as other:
        mine.write(series("x", 0, 10, 2))
        before = mine.current("x")
        other.record_many(series("x", 10, 3, 2))
        failing.failing = True
        mine.write(series("x", 13, 1, 2))  # a gap: the read fails
        assert mine.current("x") == before is not None
        failing.failing = False
        mine.write(series("x", 14, 1, 2))
        assert mine.reads("first_seen") == 1  # forgotten after the failure: read whole
        assert mine.current("x") == in_store(other, "x")


class RefusingStore(SqliteStore):
    """A real SQLite store that refuses one agent's evaluations (as PostgreSQL refuses a NUL byte)."""

    def record_many(self, evaluations) -> list[int]:  # type: ignore[no-untyped-def]
        if any(e.agent_id == "refused" for e in evaluations):
            raise ValueError("invalid agent id")
        return super().record_many(evaluations)


def refusing_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> SqliteStore | RedisStore:
    """A real store whose every record of agent "refused" fails: SQLite fails the whole batch (one
    transaction), Redis only that evaluation's script (no transaction around a batch's scripts)."""
    if kind == "sqlite":
        return RefusingStore(str(tmp_path / "rep.db"), window_size=500)
    url = request.getfixturevalue("redis_server")
    with redis.Redis.from_url(url) as client:
        client.flushdb()
        client.set("otelsignals:rep:agent:refused:window", "not a list")  # its scripts fail
    return RedisStore(url, window_size=500)


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_one_refused_evaluation_costs_only_itself(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # Neither lost with its batch nor, where the store recorded the rest of it, recorded twice.
    store = refusing_store(kind, tmp_path, request)
    telemetry = Telemetry()
    recorder = ReputationRecorder(store, ReputationConfig(), telemetry)
    for i in range(100):  # queued before the writer starts: one batch
        agent = "refused" if i == 50 else "fine"
        recorder.submit_evaluation(Evaluation(agent, i % 3 != 0, 100.0, 1_700_000_000.0 + i))
    recorder.start()
    recorder.stop(timeout=30)
    assert telemetry.registry.get_sample_value("otelsignals_reputation_evaluations_total") == 99
    assert telemetry.registry.get_sample_value("otelsignals_reputation_store_errors_total") == 1
    assert store.window("fine")[1] == 99
    assert store.window("refused") == ([], 0)  # nothing of it counted, even where the store failed in part
    assert recorder.current("fine") == reputation(*store.window("fine"), recorder.config, agent_id="fine")
    store.close()


def test_a_recorder_refuses_settings_the_score_cannot_use(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "rep.db"), window_size=500)
    with pytest.raises(ConfigError) as raised:
        ReputationRecorder(store, ReputationConfig(streak_target=0), Telemetry())
    assert raised.value.key == "reputation.streak_target"
    store.close()
