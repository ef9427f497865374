"""The reputation writer: evaluations recorded in batches, each agent's window read back once per
batch (not once per turn), on a real SQLite store; the result is the same as one by one."""

from __future__ import annotations

from pathlib import Path

import pytest

from otelsignals.config import ConfigError
from otelsignals.pipeline.reputation_recorder import ReputationRecorder
from otelsignals.reputation import Evaluation, ReputationConfig, reputation
from otelsignals.stores.sqlite import SqliteStore
from otelsignals.telemetry import Telemetry


class CountingStore(SqliteStore):
    """A real SQLite store that counts how often a window is read back."""

    window_reads = 0

    def window(self, agent_id: str) -> tuple[list[Evaluation], int]:
        self.window_reads += 1
        return super().window(agent_id)


def test_a_burst_is_written_in_batches_with_one_window_read_per_agent_and_batch(tmp_path: Path) -> None:
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
    # 1,500 evaluations of 3 agents in batches of at most 512: 3 batches x 3 agents.
    assert store.window_reads <= 9
    config = recorder.config
    for agent in ("agent-0", "agent-1", "agent-2"):
        mine = [e for e in evaluations if e.agent_id == agent]
        expected = reputation(mine[-500:], len(mine), config, agent_id=agent)
        assert recorder.current(agent) == expected
    store.close()


class RefusingStore(SqliteStore):
    """A real SQLite store that refuses one agent's evaluations (as PostgreSQL refuses a NUL byte)."""

    def record_many(self, evaluations) -> None:  # type: ignore[no-untyped-def]
        if any(e.agent_id == "refused" for e in evaluations):
            raise ValueError("invalid agent id")
        super().record_many(evaluations)


def test_one_refused_evaluation_does_not_cost_its_batch(tmp_path: Path) -> None:
    store = RefusingStore(str(tmp_path / "rep.db"), window_size=500)
    telemetry = Telemetry()
    recorder = ReputationRecorder(store, ReputationConfig(), telemetry)
    for i in range(100):
        agent = "refused" if i == 50 else "fine"
        recorder.submit_evaluation(Evaluation(agent, True, 100.0, 1_700_000_000.0 + i))
    recorder.start()
    recorder.stop(timeout=30)
    assert telemetry.registry.get_sample_value("otelsignals_reputation_evaluations_total") == 99
    assert telemetry.registry.get_sample_value("otelsignals_reputation_store_errors_total") == 1
    assert store.window("fine")[1] == 99
    store.close()


def test_a_recorder_refuses_settings_the_score_cannot_use(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "rep.db"), window_size=500)
    with pytest.raises(ConfigError) as raised:
        ReputationRecorder(store, ReputationConfig(streak_target=0), Telemetry())
    assert raised.value.key == "reputation.streak_target"
    store.close()
