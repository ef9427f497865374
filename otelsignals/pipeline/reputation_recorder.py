"""Records one evaluation per analysed conversation turn into the reputation store, off the hot path.

Store writes (a local SQLite file, or Redis / PostgreSQL shared by replicas) happen on one writer
thread fed by a bounded queue, so a slow store never stalls the pipeline: when the queue is full the
evaluation is dropped and counted. The writer takes everything waiting at once (up to
``BATCH_MAX``), records it in one transaction / round trip, and then recomputes each agent's
reputation from the store's window (which other replicas may also have written to) once per batch,
not once per turn, and keeps it for the enricher: under load the store is read once per batch.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from pathlib import Path

from otelsignals.analysis import Analysis
from otelsignals.config import ConfigError, StoreConfig
from otelsignals.conversation import UNKNOWN_AGENT
from otelsignals.reputation import Evaluation, Reputation, ReputationConfig, reputation
from otelsignals.stores import ReputationStore, open_store
from otelsignals.telemetry import Telemetry

logger = logging.getLogger("otelsignals.reputation")

FAILING_QUALITIES = ("poor", "severe")
_STOP = object()
# Evaluations recorded in one transaction at most.
BATCH_MAX = 512


def evaluation_of(analysis: Analysis, at: float) -> Evaluation:
    """SPEC §7: a turn passes when its conversation is not poor or severe and the turn had no
    execution failure."""
    failed_tool = any(signal.type.startswith("execution.failure.") for signal in analysis.new_signals)
    passed = analysis.score.quality not in FAILING_QUALITIES and not failed_tool
    return Evaluation(analysis.agent_id or UNKNOWN_AGENT, passed, analysis.latency_ms, at)


def session_evaluation(
    agent_id: str | None, quality: str, leaf_counts: dict[str, int], turn_latencies_ms: list[float], at: float
) -> Evaluation:
    """SPEC §7's evaluation of a closed session: it passes when the conversation ended neither poor
    nor severe and had no execution failure; its latency is the median turn latency."""
    failed_tool = any(n for leaf, n in leaf_counts.items() if leaf.startswith("execution.failure."))
    latencies = sorted(turn_latencies_ms)
    latency = latencies[len(latencies) // 2] if latencies else 0.0
    return Evaluation(
        agent_id or UNKNOWN_AGENT, quality not in FAILING_QUALITIES and not failed_tool, latency, at
    )


def store_url(config: StoreConfig) -> str:
    if config.url:
        return config.url
    directory = Path(config.directory)
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{directory / 'otelsignals.db'}"


class ReputationRecorder:
    def __init__(self, store: ReputationStore, config: ReputationConfig, telemetry: Telemetry) -> None:
        # A bad window or target would only fail later, on the writer thread, and stop it.
        problems = config.validate()
        if problems:
            raise ConfigError.from_problems(problems, "reputation")
        self.config = config
        self.telemetry = telemetry
        self.store = store
        self._pending: queue.Queue[object] = queue.Queue(maxsize=config.max_pending)
        self._latest: dict[str, Reputation] = {}
        self._writer = threading.Thread(target=self._write_forever, name="reputation-writer", daemon=True)

    def start(self) -> None:
        self._writer.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is pending (up to ``timeout``)."""
        with contextlib.suppress(queue.Full):
            self._pending.put(_STOP, timeout=timeout)
        self._writer.join(timeout)

    def submit(self, analysis: Analysis) -> None:
        self.submit_evaluation(evaluation_of(analysis, time.time()))

    def submit_evaluation(self, evaluation: Evaluation) -> None:
        try:
            self._pending.put_nowait(evaluation)
        except queue.Full:
            self.telemetry.reputation_dropped.inc()
            self.telemetry.problems.warning(
                "reputation_queue_full", "reputation store is behind: evaluations are being dropped"
            )

    def current(self, agent_id: str | None) -> Reputation | None:
        """The agent's reputation as of its last recorded evaluation (for the enricher)."""
        return self._latest.get(agent_id or UNKNOWN_AGENT)

    def lookup(self, agent_id: str) -> Reputation | None:
        """The agent's reputation read from the store now (for the REST API); None if unknown."""
        window, total = self.store.window(agent_id)
        if total == 0:
            return None
        return reputation(window, total, self.config, agent_id=agent_id)

    def agents(self) -> list[str]:
        return sorted(self.store.agents())

    def _write_forever(self) -> None:
        while True:
            batch = [self._pending.get()]
            while len(batch) < BATCH_MAX:
                try:
                    batch.append(self._pending.get_nowait())
                except queue.Empty:
                    break
            stopping = any(item is _STOP for item in batch)
            evaluations = [item for item in batch if isinstance(item, Evaluation)]
            if evaluations:
                self._write(evaluations)
            if stopping:
                return

    def _write(self, evaluations: list[Evaluation]) -> None:
        try:
            self.store.record_many(evaluations)
            written = evaluations
        except Exception:  # one bad evaluation must not cost the batch: one by one, to know which
            written = [e for e in evaluations if self._write_one(e)]
        if not written:
            return
        self.telemetry.reputation_recorded.inc(len(written))
        self.telemetry.problems.recovered("reputation_store_error", "the reputation store records again")
        for agent_id in dict.fromkeys(e.agent_id for e in written):
            try:
                window, total = self.store.window(agent_id)
            except Exception as exc:
                self._store_failed(exc, 0)
                continue
            self._latest[agent_id] = reputation(window, total, self.config, agent_id=agent_id)

    def _write_one(self, evaluation: Evaluation) -> bool:
        try:
            self.store.record_many([evaluation])
        except Exception as exc:
            self._store_failed(exc, 1)
            return False
        return True

    def _store_failed(self, exc: Exception, evaluations: int) -> None:
        """The store is outside us: keep serving, count what was not recorded, say so (rate-limited)."""
        if evaluations:
            self.telemetry.reputation_errors.inc(evaluations)
        self.telemetry.problems.warning(
            "reputation_store_error", f"reputation store failed: {exc}", error=type(exc).__name__
        )


def open_configured_store(config: StoreConfig, window: int) -> ReputationStore:
    """The store of the ``store`` section, keeping ``window`` evaluations per agent; one that
    cannot be opened is an OSError naming the URL (the CLI reports those in one line)."""
    url = store_url(config)
    try:
        return open_store(url, window_size=window)
    except Exception as exc:  # each driver has its own error types
        raise OSError(f"cannot open the store {url} (store.url): {exc}") from exc


def create_reputation_recorder(
    config: ReputationConfig, store: ReputationStore, telemetry: Telemetry
) -> ReputationRecorder | None:
    """The recorder of the ``reputation`` section; None when it is not enabled."""
    return ReputationRecorder(store, config, telemetry) if config.enabled else None
