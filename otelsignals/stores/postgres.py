"""The PostgreSQL reputation store, for several replicas sharing one window.

Tables ``reputation_agents (agent_id, total_count)`` and ``reputation_window (agent_id, seq, passed,
latency_ms, at)``. ``record`` is one transaction:

1. ``INSERT ... ON CONFLICT (agent_id) DO UPDATE SET total_count = total_count + 1 RETURNING`` —
   this takes the agent row's lock until commit, so writers of one agent are serialised and the
   returned count ``n`` is the new evaluation's unique sequence number;
2. insert the evaluation with ``seq = n``;
3. delete the agent's rows with ``seq <= n - window_size`` (the oldest beyond the window).

``window`` reads the count and the rows in one statement, hence one snapshot. The schema is
created under a transaction-level advisory lock, so replicas starting together do not race.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from otelsignals.reputation import Evaluation
from otelsignals.stores import DEFAULT_WINDOW
from otelsignals.stores.postgres_connection import PostgresConnection
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
        total_count BIGINT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS reputation_window (
        agent_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        passed BOOLEAN NOT NULL,
        latency_ms DOUBLE PRECISION NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (agent_id, seq)
    )""",
    """CREATE TABLE IF NOT EXISTS documents (
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        body TEXT NOT NULL,
        saved_at DOUBLE PRECISION NOT NULL DEFAULT 0,
        PRIMARY KEY (kind, key)
    )""",
    # A store from before document retention: its documents count as written now (set below).
    "ALTER TABLE documents ADD COLUMN IF NOT EXISTS saved_at DOUBLE PRECISION NOT NULL DEFAULT 0",
    DOCUMENTS_INDEX,
)
SCHEMA_LOCK = 0x07E15E75  # any constant: the advisory lock id for schema creation

WINDOW_QUERY = """
    SELECT a.total_count, w.passed, w.latency_ms, w.at
    FROM reputation_agents a LEFT JOIN reputation_window w
      ON w.agent_id = a.agent_id AND w.seq > a.total_count - %s AND w.seq > %s
    WHERE a.agent_id = %s
    ORDER BY w.seq
"""


class PostgresStore(SqlWindowStore):
    window_query = WINDOW_QUERY
    save_query = (
        "INSERT INTO documents (kind, key, body, saved_at) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (kind, key) DO UPDATE SET body = EXCLUDED.body, saved_at = EXCLUDED.saved_at"
    )
    load_query = "SELECT body FROM documents WHERE kind = %s AND key = %s"
    prune_age_query = PRUNE_AGE_QUERY.format(p="%s")
    prune_count_query = PRUNE_COUNT_QUERY.format(p="%s")
    document_keys_query = DOCUMENT_KEYS_QUERY.format(p="%s")

    def __init__(self, url: str, *, window_size: int = DEFAULT_WINDOW) -> None:
        super().__init__(PostgresConnection(url), window_size)
        with self._lock, self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            for statement in SCHEMA:
                self._conn.execute(statement)
            self._conn.execute("UPDATE documents SET saved_at = %s WHERE saved_at = 0", (time.time(),))

    def record(self, evaluation: Evaluation) -> None:
        self.record_many([evaluation])

    def record_many(self, evaluations: Sequence[Evaluation]) -> list[int]:
        numbers: list[int] = []
        with self._lock, self._conn.transaction():
            for evaluation in evaluations:
                row = self._conn.execute(
                    "INSERT INTO reputation_agents (agent_id, total_count) VALUES (%s, 1) "
                    "ON CONFLICT (agent_id) DO UPDATE SET total_count = reputation_agents.total_count + 1 "
                    "RETURNING total_count",
                    (evaluation.agent_id,),
                ).fetchone()
                assert row is not None
                count = row[0]
                self._conn.execute(
                    "INSERT INTO reputation_window (agent_id, seq, passed, latency_ms, at) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    (evaluation.agent_id, count, evaluation.passed, evaluation.latency_ms, evaluation.at),
                )
                self._conn.execute(
                    "DELETE FROM reputation_window WHERE agent_id = %s AND seq <= %s",
                    (evaluation.agent_id, count - self.window_size),
                )
                numbers.append(count)
        return numbers
