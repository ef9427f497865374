"""Records one evaluation per analysed conversation turn into the reputation store, off the hot path.

Store writes (a local SQLite file, or Redis / PostgreSQL shared by replicas) happen on one writer
thread fed by a bounded queue, so a slow store never stalls the pipeline: when the queue is full the
evaluation is dropped and counted. The writer takes everything waiting, and what arrives within
``BATCH_WAIT_S`` of the first (up to ``BATCH_MAX``), and records it in one transaction / round trip.

Each agent's window is followed in memory (``reputation.AgentWindow``, up to ``AGENTS_FOLLOWED``
agents, the least recently written forgotten first) and its reputation recomputed from it once per
batch, for the enricher. The store is read back only for what this process did not write: an
agent's whole window the first time it is seen (unless this is its first evaluation anywhere), the
entries other replicas recorded in between (the sequence numbers the store gives back skip), the
whole window when numbers went back or entries it lacks were trimmed already, and the whole window
once every ``WHOLE_READ_INTERVAL_S`` for what no number shows. So replicas sharing a store get its
own reputation, and a process alone reads each agent once a minute at most
(``otelsignals_reputation_window_reads_total`` counts the reads, by reason).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import secrets
import threading
import time
from collections import OrderedDict
from pathlib import Path

from otelsignals.analysis import Analysis
from otelsignals.config import ConfigError, StoreConfig
from otelsignals.conversation import UNKNOWN_AGENT
from otelsignals.reputation import AgentWindow, Evaluation, Reputation, ReputationConfig, reputation
from otelsignals.stores import PartlyRecorded, ReputationStore, open_store
from otelsignals.telemetry import Telemetry

logger = logging.getLogger("otelsignals.reputation")

FAILING_QUALITIES = ("poor", "severe")
_STOP = object()
# Evaluations recorded in one transaction at most.
BATCH_MAX = 512
# After the first evaluation of a batch, the writer waits this long for others: at a steady load
# one turn at a time, each batch was one transaction and one recomputed reputation per turn (0.3-0.4
# ms of CPU a turn, bench/agent_workload.py); the reputations the enricher reads lag by this much.
BATCH_WAIT_S = 0.05
# Agents whose window is followed in memory (a window is ~40 bytes per evaluation: 20 KB at 500).
AGENTS_FOLLOWED = 1_000
# A followed window is read whole again this often (at its agent's next evaluation): what no
# sequence number shows (a store emptied and refilled past this process's count, a replica
# keeping a smaller window trimming entries this one holds) lasts no longer than that.
WHOLE_READ_INTERVAL_S = 60.0


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
        # The agents' windows, the least recently written first (the first forgotten), and when each
        # was last read whole (time.monotonic()).
        self._windows: OrderedDict[str, AgentWindow] = OrderedDict()
        self._read_whole_at: dict[str, float] = {}
        self._writer = threading.Thread(target=self._write_forever, name="reputation-writer", daemon=True)
        self._stopping = threading.Event()

    def start(self) -> None:
        self._writer.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is pending (up to ``timeout``)."""
        self._stopping.set()
        with contextlib.suppress(queue.Full):
            self._pending.put(_STOP, timeout=timeout)
        self._writer.join(timeout)

    def submit(self, analysis: Analysis) -> None:
        self.submit_evaluation(evaluation_of(analysis, time.time()))

    def submit_evaluation(self, evaluation: Evaluation) -> None:
        if not evaluation.key:  # named, so that a store asked twice (a lost answer) records it once
            evaluation = dataclasses.replace(evaluation, key=secrets.token_hex(8))
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
            # The others of the batch are taken once the wait is over, not as each comes: a get
            # with a timeout woke this thread at every put (four context switches a turn). stop()
            # ends the wait; a full batch does not wait.
            if batch[0] is not _STOP and self._pending.qsize() < BATCH_MAX - 1:
                self._stopping.wait(BATCH_WAIT_S)
            while len(batch) < BATCH_MAX and batch[-1] is not _STOP:
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
            numbers = self.store.record_many(evaluations)
            written = list(zip(evaluations, numbers, strict=True))
        except PartlyRecorded as partly:  # those not recorded once more, alone (never the others)
            written = [(e, n) for e, n in zip(evaluations, partly.numbers, strict=True) if n is not None]
            retried = [e for e, n in zip(evaluations, partly.numbers, strict=True) if n is None]
            written += [(e, n) for e in retried if (n := self._write_one(e)) is not None]
        except Exception:  # one bad evaluation must not cost the batch: one by one, to know which
            written = [(e, n) for e in evaluations if (n := self._write_one(e)) is not None]
        if not written:
            return
        read_failed = not self._follow(written)
        # Counted once the reputation is up to date: who sees the count sees the reputation.
        self.telemetry.reputation_recorded.inc(len(written))
        if not read_failed:
            self.telemetry.problems.recovered("reputation_store_error", "the reputation store records again")

    def _follow(self, written: list[tuple[Evaluation, int]]) -> bool:
        """Bring each agent's window up to date with what was just recorded, and its reputation;
        False when a read from the store failed (that agent keeps its last reputation)."""
        windows = self._windows
        now = time.monotonic()
        missed: dict[str, str] = {}  # agent -> why its window is read from the store
        for evaluation, number in written:
            agent_id = evaluation.agent_id
            if agent_id in missed:
                continue  # the read brings this one too
            window = windows.get(agent_id)
            if window is None and number == 1:  # its first evaluation anywhere: nothing to read
                window = windows[agent_id] = AgentWindow(agent_id, self.config.window)
                self._read_whole_at[agent_id] = now
            if window is None:
                missed[agent_id] = "first_seen"
            elif now - self._read_whole_at.get(agent_id, now) >= WHOLE_READ_INTERVAL_S:
                missed[agent_id] = "periodic"
            elif window.append(number, evaluation):
                windows.move_to_end(agent_id)
            else:
                missed[agent_id] = "other_writer" if number > window.total else "store_reset"
        read = all([self._read_back(agent_id, reason, now) for agent_id, reason in missed.items()])
        for agent_id in dict.fromkeys(e.agent_id for e, _ in written):
            window = windows.get(agent_id)
            if window is not None:
                self._latest[agent_id] = window.reputation(self.config)
        while len(windows) > AGENTS_FOLLOWED:
            forgotten, _ = windows.popitem(last=False)  # its last reputation stays for the spans
            self._read_whole_at.pop(forgotten, None)
        return read

    def _read_back(self, agent_id: str, reason: str, now: float) -> bool:
        """Bring the agent's window up to the store's: the entries it lacks, or all of it; False
        when the store failed (the window is then forgotten: read whole at the next evaluation)."""
        reads = self.telemetry.reputation_window_reads
        window = self._windows.pop(agent_id, None)
        try:
            if window is not None and reason == "other_writer":
                reads.labels(reason).inc()
                entries, total = self.store.window_since(agent_id, window.total)
                # All the entries it lacks, unless the count went back (emptied and written again
                # since) or they were trimmed already (a replica keeping a smaller window).
                if total >= window.total and len(entries) == min(total - window.total, self.config.window):
                    window.extend(entries, total)
                    self._windows[agent_id] = window
                    return True
                reason = "store_reset" if total < window.total else "trimmed_elsewhere"
            reads.labels(reason).inc()
            entries, total = self.store.window(agent_id)
        except Exception as exc:
            self._store_failed(exc, 0)
            self._read_whole_at.pop(agent_id, None)
            return False
        window = AgentWindow(agent_id, self.config.window)
        window.extend(entries, total)
        self._windows[agent_id] = window
        self._read_whole_at[agent_id] = now
        return True

    def _write_one(self, evaluation: Evaluation) -> int | None:
        try:
            (number,) = self.store.record_many([evaluation])
        except Exception as exc:
            self._store_failed(exc, 1)
            return None
        return number

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
