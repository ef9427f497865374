"""The SQLite reputation store (the default): one file, WAL mode, shared by processes on one host.

``record`` is one ``BEGIN IMMEDIATE`` transaction (it takes the database write lock up front, so
concurrent writers queue on ``busy_timeout`` instead of failing on a lock upgrade):

1. upsert the agent's row, ``total_count = total_count + 1``, returning the new count ``n``;
2. insert the evaluation with sequence number ``n`` (unique per agent: writers are serialised);
3. delete the agent's rows with ``seq <= n - window_size`` (the oldest beyond the window).

``window`` reads the count and the rows in one statement, hence one consistent snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from otelsignals.reputation import Evaluation
from otelsignals.stores import DEFAULT_WINDOW, sqlite_files
from otelsignals.stores.sql import (
    DOCUMENT_KEYS_QUERY,
    DOCUMENTS_INDEX,
    PRUNE_AGE_QUERY,
    PRUNE_COUNT_QUERY,
    SqlWindowStore,
)

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS reputation_agents (
        agent_id TEXT PRIMARY KEY,
        total_count INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS reputation_window (
        agent_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        passed INTEGER NOT NULL,
        latency_ms REAL NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (agent_id, seq)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS documents (
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        body TEXT NOT NULL,
        saved_at REAL NOT NULL DEFAULT 0,
        PRIMARY KEY (kind, key)
    ) WITHOUT ROWID""",
)

WINDOW_QUERY = """
    SELECT a.total_count, w.passed, w.latency_ms, w.at
    FROM reputation_agents a LEFT JOIN reputation_window w
      ON w.agent_id = a.agent_id AND w.seq > a.total_count - ? AND w.seq > ?
    WHERE a.agent_id = ?
    ORDER BY w.seq
"""


class SqliteStore(SqlWindowStore):
    window_query = WINDOW_QUERY
    save_query = (
        "INSERT INTO documents (kind, key, body, saved_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (kind, key) DO UPDATE SET body = excluded.body, saved_at = excluded.saved_at"
    )
    load_query = "SELECT body FROM documents WHERE kind = ? AND key = ?"
    prune_age_query = PRUNE_AGE_QUERY.format(p="?")
    prune_count_query = PRUNE_COUNT_QUERY.format(p="?")
    document_keys_query = DOCUMENT_KEYS_QUERY.format(p="?")

    def __init__(self, path: str, *, window_size: int = DEFAULT_WINDOW, busy_timeout_s: float = 30.0) -> None:
        self.path = path
        super().__init__(sqlite_files.connect(path, busy_timeout_s), window_size)
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in SCHEMA:
                    self._conn.execute(statement)
                columns = {row[1] for row in self._conn.execute("PRAGMA table_info(documents)")}
                if "saved_at" not in columns:  # a store from before document retention
                    self._conn.execute("ALTER TABLE documents ADD COLUMN saved_at REAL NOT NULL DEFAULT 0")
                    self._conn.execute("UPDATE documents SET saved_at = ?", (time.time(),))
                self._conn.execute(DOCUMENTS_INDEX)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def record(self, evaluation: Evaluation) -> None:
        self.record_many([evaluation])

    def record_many(self, evaluations: Sequence[Evaluation]) -> list[int]:
        numbers: list[int] = []
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                for evaluation in evaluations:
                    (count,) = conn.execute(
                        "INSERT INTO reputation_agents (agent_id, total_count) VALUES (?, 1) "
                        "ON CONFLICT (agent_id) DO UPDATE SET total_count = total_count + 1 "
                        "RETURNING total_count",
                        (evaluation.agent_id,),
                    ).fetchone()
                    conn.execute(
                        "INSERT INTO reputation_window (agent_id, seq, passed, latency_ms, at) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (
                            evaluation.agent_id,
                            count,
                            int(evaluation.passed),
                            evaluation.latency_ms,
                            evaluation.at,
                        ),
                    )
                    conn.execute(
                        "DELETE FROM reputation_window WHERE agent_id = ? AND seq <= ?",
                        (evaluation.agent_id, count - self.window_size),
                    )
                    numbers.append(count)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return numbers
