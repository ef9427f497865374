"""What the SQLite and PostgreSQL stores share: reading a window and the agents, closing.

Both keep an ``reputation_agents`` table (agent id, total count) and an evaluations table keyed by
(agent id, sequence number), and answer ``window_since()`` with one JOIN (``window_query``: count
first, then the newest rows) so that a window and its count are one snapshot. Each subclass writes
in its own dialect.

Documents live in ``documents (kind, key, body, saved_at)``; ``saved_at`` (the last write, in Unix
seconds) orders them for retention. A ``documents`` table from before that column is migrated on
open: the column is added and its existing rows count as written at that moment.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Self

from otelsignals.reputation import Evaluation

PRUNE_AGE_QUERY = "DELETE FROM documents WHERE kind = {p} AND saved_at < {p}"
# Ties on saved_at are broken by key, the same order as the Redis store's sorted set.
PRUNE_COUNT_QUERY = (
    "DELETE FROM documents WHERE kind = {p} AND key NOT IN "
    "(SELECT key FROM documents WHERE kind = {p} ORDER BY saved_at DESC, key DESC LIMIT {p})"
)
# Newest first; ties on saved_at broken by key, as retention and the Redis store order them.
DOCUMENT_KEYS_QUERY = "SELECT key FROM documents WHERE kind = {p} ORDER BY saved_at DESC, key DESC LIMIT {p}"
DOCUMENTS_INDEX = "CREATE INDEX IF NOT EXISTS documents_by_age ON documents (kind, saved_at)"


class SqlWindowStore:
    # parameters: (window size, numbered above, agent id); rows: (total, passed, latency_ms, at)
    window_query: str
    save_query: str  # parameters: (kind, key, body, saved_at); an upsert
    load_query: str  # parameters: (kind, key); one row: (body,)
    prune_age_query: str  # parameters: (kind, cutoff); deletes rows with saved_at < cutoff
    prune_count_query: str  # parameters: (kind, kind, max_count); deletes all but the newest max_count
    document_keys_query: str  # parameters: (kind, limit); rows: (key,), newest first

    def __init__(self, conn: Any, window_size: int) -> None:
        self._conn = conn
        self._lock = threading.Lock()  # one connection, shared by the writer thread and the API
        self.window_size = window_size

    def window(self, agent_id: str) -> tuple[list[Evaluation], int]:
        return self.window_since(agent_id, 0)

    def window_since(self, agent_id: str, after: int) -> tuple[list[Evaluation], int]:
        with self._lock:
            rows = self._conn.execute(self.window_query, (self.window_size, after, agent_id)).fetchall()
        if not rows:
            return [], 0
        window = [
            Evaluation(agent_id, bool(passed), latency_ms, at)
            for _, passed, latency_ms, at in rows
            if passed is not None
        ]
        return window, int(rows[0][0])

    def agents(self) -> list[str]:
        with self._lock:
            rows = self._conn.execute("SELECT agent_id FROM reputation_agents ORDER BY agent_id").fetchall()
        return [agent_id for (agent_id,) in rows]

    def document_keys(self, kind: str, limit: int) -> list[str]:
        with self._lock:
            rows = self._conn.execute(self.document_keys_query, (kind, limit)).fetchall()
        return [key for (key,) in rows]

    def save_document(self, kind: str, key: str, body: str, now: float | None = None) -> None:
        with self._lock:
            self._conn.execute(self.save_query, (kind, key, body, time.time() if now is None else now))

    def prune_documents(
        self, kind: str, max_age: float, max_count: int, now: float | None = None
    ) -> tuple[int, int]:
        cutoff = (time.time() if now is None else now) - max_age
        with self._lock:
            by_age = self._conn.execute(self.prune_age_query, (kind, cutoff)).rowcount
            by_count = self._conn.execute(self.prune_count_query, (kind, kind, max_count)).rowcount
        return max(0, by_age), max(0, by_count)

    def load_document(self, kind: str, key: str) -> str | None:
        with self._lock:
            row = self._conn.execute(self.load_query, (kind, key)).fetchone()
        return row[0] if row else None

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
