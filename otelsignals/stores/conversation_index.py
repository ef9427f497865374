"""The conversation index: every analysed conversation as one row, kept after its session closed.

One table, ``conversation_index``, on SQLite (the default: one file beside the reputation store) or
PostgreSQL (several replicas writing one index). The filterable facts are columns (agent, first and
last seen, user turns, quality, score, priority, flagged, closed, the signal types that fired); the
rest — counts, signals, per-trace and session metrics, trace ids, and the messages when
``index.content`` is on — is one JSON document, ``detail``, written whole on each change.

A write is an upsert keyed by the conversation key (the latest analysis wins), so replicas and
restarts never duplicate a conversation. Listing is keyset-paginated: the cursor carries the last
row's sort value and key, so a page is one indexed range scan whatever its depth, and rows written
meanwhile never shift a page. Retention removes rows by age (``last_seen``) and then the oldest until
the stored bytes fit the bound.
"""

from __future__ import annotations

import base64
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from otelsignals.stores import sqlite_files

# sort name -> (SQL expression, descending). A missing priority sorts below every real one.
SORTS: dict[str, tuple[str, bool]] = {
    "-priority": ("COALESCE(priority, -1.0)", True),
    "priority": ("COALESCE(priority, -1.0)", False),
    "-last_seen": ("last_seen", True),
    "last_seen": ("last_seen", False),
    "quality_score": ("quality_score", False),
    "-quality_score": ("quality_score", True),
    "-turns": ("turns", True),
}
MAX_PAGE = 500
MAX_BUCKETS = 500
PRUNE_BATCH = 1000  # rows removed per retention transaction

_COLUMNS = (
    "key, agent, first_seen, last_seen, turns, quality, quality_score, priority, flagged, closed, "
    "signal_types, detail, size_bytes"
)
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS conversation_index (
        key TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        first_seen DOUBLE PRECISION NOT NULL,
        last_seen DOUBLE PRECISION NOT NULL,
        turns INTEGER NOT NULL,
        quality TEXT NOT NULL,
        quality_score DOUBLE PRECISION NOT NULL,
        priority DOUBLE PRECISION,
        flagged BOOLEAN NOT NULL,
        closed BOOLEAN NOT NULL,
        signal_types TEXT NOT NULL,
        detail TEXT NOT NULL,
        size_bytes BIGINT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS conversation_index_last_seen ON conversation_index (last_seen)",
    "CREATE INDEX IF NOT EXISTS conversation_index_priority ON conversation_index (priority)",
    "CREATE INDEX IF NOT EXISTS conversation_index_agent ON conversation_index (agent, last_seen)",
)
_ROW_OVERHEAD_BYTES = 200  # the columns beside ``detail``, roughly, for the byte bound


def is_trace_id(value: str) -> bool:
    """32 lower-case hex digits: a trace id as OTLP/JSON and the trace backends write it."""
    return len(value) == 32 and all(c in "0123456789abcdef" for c in value)


@dataclass
class IndexedConversation:
    key: str
    agent: str
    first_seen: float  # Unix seconds
    last_seen: float
    turns: int  # user turns
    quality: str
    quality_score: float
    priority: float | None  # None when triage did not rank it
    flagged: bool
    closed: bool
    signal_types: tuple[str, ...]  # the leaf types that fired, sorted
    detail: dict[str, Any] = field(default_factory=dict)

    def summary_json(self) -> dict[str, Any]:
        """For listings: the row without its messages, signals and per-trace metrics (those are
        in ``to_json``, for one conversation)."""
        full = self.to_json()
        for heavy in ("messages", "signals", "trace_metrics"):
            full.pop(heavy, None)
        return full

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.key,
            "agent_id": self.agent,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "user_turns": self.turns,
            "quality": self.quality,
            "quality_score": self.quality_score,
            "priority": self.priority,
            "flagged": self.flagged,
            "closed": self.closed,
            "signal_types": list(self.signal_types),
            **self.detail,
        }


@dataclass(frozen=True)
class ConversationFilter:
    """Conditions a listed conversation meets (all of them; within one list, any value)."""

    qualities: tuple[str, ...] = ()
    flagged: bool | None = None
    signals: tuple[str, ...] = ()  # leaf types or categories ("execution.failure")
    agents: tuple[str, ...] = ()
    since: float | None = None  # last seen at or after
    until: float | None = None  # first seen before
    min_priority: float | None = None
    closed: bool | None = None


@dataclass(frozen=True)
class Page:
    items: list[IndexedConversation]
    next_cursor: str | None


class CursorError(ValueError):
    """A cursor that this index did not hand out, or one made for another sort."""


def searchable_types(leaf_types: Iterable[str]) -> str:
    """The leaf types and their categories, space-delimited and space-padded, so that a filter on
    either is one substring test (`` execution.failure `` matches every failure leaf)."""
    names: set[str] = set()
    for leaf in leaf_types:
        names.add(leaf)
        names.add(leaf.rsplit(".", 1)[0])
    return " " + " ".join(sorted(names)) + " " if names else " "


def encode_cursor(sort: str, value: float, key: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([sort, value, key])).decode("ascii")


def decode_cursor(sort: str, cursor: str) -> tuple[float, str]:
    try:
        cursor_sort, value, key = orjson.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (ValueError, TypeError, UnicodeError) as exc:
        raise CursorError(f"not a cursor of this listing: {cursor[:40]!r}") from exc
    if cursor_sort != sort or not isinstance(value, int | float) or not isinstance(key, str):
        raise CursorError(f"the cursor was made for sort {cursor_sort!r}, not {sort!r}")
    return float(value), key


class ConversationIndex:
    """The index on one database connection (used from several threads under one lock)."""

    def __init__(self, conn: Any, placeholder: str, contains: str) -> None:
        self._conn = conn
        self._p = placeholder  # "?" (SQLite) or "%s" (psycopg)
        self._contains = contains  # the dialect's substring test: f(column, param) > 0
        self._lock = threading.Lock()

    # --- writing ---------------------------------------------------------------------------

    def upsert(self, items: Sequence[IndexedConversation]) -> int:
        """Writes the conversations in one transaction; returns the bytes written."""
        if not items:
            return 0
        p = self._p
        names = _COLUMNS.split(", ")
        updates = ", ".join(f"{name} = excluded.{name}" for name in names[1:])
        statement = (
            f"INSERT INTO conversation_index ({_COLUMNS}) VALUES ({', '.join([p] * len(names))}) "
            f"ON CONFLICT (key) DO UPDATE SET {updates}"
        )
        rows = [_row(item) for item in items]
        with self._lock, self._transaction():
            self._executemany(statement, rows)
        return sum(row[-1] for row in rows)

    def prune(self, max_age: float, max_bytes: int, now: float | None = None) -> tuple[int, int]:
        """Removes conversations last seen more than ``max_age`` seconds ago, then the least recently
        seen until the rows fit ``max_bytes``; returns (removed by age, removed by bytes). Works in
        transactions of at most PRUNE_BATCH rows, so a writer waiting for the database never waits
        for a whole cleanup."""
        now = time.time() if now is None else now
        p = self._p
        oldest = f"SELECT key FROM conversation_index WHERE last_seen < {p} ORDER BY last_seen LIMIT {p}"
        by_age = 0
        while True:
            with self._lock, self._transaction():
                removed = self._execute(
                    f"DELETE FROM conversation_index WHERE key IN ({oldest})", (now - max_age, PRUNE_BATCH)
                ).rowcount
            by_age += max(removed, 0)
            if removed < PRUNE_BATCH:
                break
        by_bytes = 0
        while True:
            with self._lock:
                (total,) = self._execute(
                    "SELECT COALESCE(SUM(size_bytes), 0) FROM conversation_index"
                ).fetchone()
            excess = int(total) - max_bytes
            if excess <= 0:
                return by_age, by_bytes
            with self._lock, self._transaction():
                rows = self._execute(
                    f"SELECT key, size_bytes FROM conversation_index ORDER BY last_seen, key LIMIT {p}",
                    (PRUNE_BATCH,),
                ).fetchall()
                doomed: list[str] = []
                for key, size in rows:
                    if excess <= 0:
                        break
                    doomed.append(key)
                    excess -= int(size)
                self._executemany(f"DELETE FROM conversation_index WHERE key = {p}", [(k,) for k in doomed])
            if not doomed:
                return by_age, by_bytes
            by_bytes += len(doomed)

    # --- reading ---------------------------------------------------------------------------

    def get(self, key: str) -> IndexedConversation | None:
        with self._lock:
            row = self._execute(
                f"SELECT {_COLUMNS} FROM conversation_index WHERE key = {self._p}", (stored_text(key),)
            ).fetchone()
        return _item(row) if row is not None else None

    def find_trace(self, trace_id: str) -> IndexedConversation | None:
        """The conversation whose recorded trace ids (the latest ones) include ``trace_id`` (32 hex
        digits). A scan of the rows' details: for on-demand lookups, not for the hot path."""
        if not is_trace_id(trace_id):
            raise ValueError(f"a trace id is 32 lower-case hex digits, got {trace_id!r}")
        pattern = f'%"{trace_id}"%'  # as the detail's JSON lists it
        with self._lock:
            row = self._execute(
                f"SELECT {_COLUMNS} FROM conversation_index WHERE detail LIKE {self._p} "
                "ORDER BY last_seen DESC LIMIT 1",
                (pattern,),
            ).fetchone()
        return _item(row) if row is not None else None

    def get_many(self, keys: Sequence[str]) -> dict[str, IndexedConversation]:
        """The rows of those of ``keys`` that are indexed."""
        found: dict[str, IndexedConversation] = {}
        asked = {stored_text(key): key for key in keys}
        stored = list(asked)
        for at in range(0, len(stored), 500):
            chunk = stored[at : at + 500]
            marks = ", ".join([self._p] * len(chunk))
            with self._lock:
                rows = self._execute(
                    f"SELECT {_COLUMNS} FROM conversation_index WHERE key IN ({marks})", tuple(chunk)
                ).fetchall()
            found.update((asked.get(row[0], row[0]), _item(row)) for row in rows)
        return found

    def query(
        self,
        conditions: ConversationFilter = ConversationFilter(),
        sort: str = "-priority",
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        if sort not in SORTS:
            raise ValueError(f"sort must be one of {', '.join(SORTS)}, not {sort!r}")
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be between 1 and {MAX_PAGE}, not {limit}")
        expression, descending = SORTS[sort]
        where, params = self._where(conditions)
        if cursor is not None:
            value, key = decode_cursor(sort, cursor)
            beyond = "<" if descending else ">"
            where.append(
                f"({expression} {beyond} {self._p} OR ({expression} = {self._p} AND key > {self._p}))"
            )
            params += [value, value, key]
        order = f"{expression} {'DESC' if descending else 'ASC'}, key ASC"
        statement = (
            f"SELECT {_COLUMNS}, {expression} FROM conversation_index"
            f"{' WHERE ' + ' AND '.join(where) if where else ''} ORDER BY {order} LIMIT {self._p}"
        )
        with self._lock:
            rows = self._execute(statement, (*params, limit + 1)).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = encode_cursor(sort, float(rows[-1][-1]), rows[-1][0]) if more else None
        return Page([_item(row[:-1]) for row in rows], next_cursor)

    def timeline(self, since: float, until: float, buckets: int) -> dict[str, Any]:
        """Conversations last seen in [since, until) in ``buckets`` equal time buckets: per bucket the
        count per quality, and per category the conversations where it fired (for the triage page)."""
        if not until > since or not 1 <= buckets <= MAX_BUCKETS:
            raise ValueError(f"need since < until and 1 to {MAX_BUCKETS} buckets")
        p = self._p
        with self._lock:
            rows = self._execute(
                f"SELECT last_seen, quality, signal_types FROM conversation_index "
                f"WHERE last_seen >= {p} AND last_seen < {p}",
                (since, until),
            ).fetchall()
        width = (until - since) / buckets
        qualities: list[dict[str, int]] = [{} for _ in range(buckets)]
        categories: list[dict[str, int]] = [{} for _ in range(buckets)]
        for last_seen, quality, types in rows:
            at = min(int((float(last_seen) - since) / width), buckets - 1)
            qualities[at][quality] = qualities[at].get(quality, 0) + 1
            for name in types.split():
                if name.count(".") == 1:  # a category (leaves have two dots)
                    categories[at][name] = categories[at].get(name, 0) + 1
        return {
            "since": since,
            "until": until,
            "bucket_seconds": width,
            "buckets": [
                {
                    "start": since + i * width,
                    "conversations": sum(q.values()),
                    "qualities": q,
                    "categories": c,
                }
                for i, (q, c) in enumerate(zip(qualities, categories, strict=True))
            ],
        }

    def count(self) -> tuple[int, int]:
        """(conversations, bytes) held."""
        with self._lock:
            rows, size = self._execute(
                "SELECT COUNT(*), COALESCE(SUM(size_bytes), 0) FROM conversation_index"
            ).fetchone()
        return int(rows), int(size)

    def _where(self, conditions: ConversationFilter) -> tuple[list[str], list[Any]]:
        p = self._p
        where: list[str] = []
        params: list[Any] = []

        def any_of(column: str, values: tuple[str, ...]) -> None:
            where.append(f"{column} IN ({', '.join([p] * len(values))})")
            params.extend(values)

        if conditions.qualities:
            any_of("quality", conditions.qualities)
        if conditions.agents:
            any_of("agent", conditions.agents)
        if conditions.signals:
            where.append(
                "("
                + " OR ".join(
                    [self._contains.format(column="signal_types", param=p)] * len(conditions.signals)
                )
                + ")"
            )
            params.extend(f" {signal} " for signal in conditions.signals)
        for column, value in (("flagged", conditions.flagged), ("closed", conditions.closed)):
            if value is not None:
                where.append(f"{column} = {p}")
                params.append(value)
        for clause, bound in (
            (f"last_seen >= {p}", conditions.since),
            (f"first_seen < {p}", conditions.until),
            (f"priority >= {p}", conditions.min_priority),
        ):
            if bound is not None:
                where.append(clause)
                params.append(bound)
        return where, params

    # --- the connection ---------------------------------------------------------------------

    def _execute(self, statement: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(statement, params)

    def _executemany(self, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        if isinstance(self._conn, sqlite3.Connection):
            self._conn.executemany(statement, rows)
        else:
            with self._conn.cursor() as cursor:
                cursor.executemany(statement, rows)

    def _transaction(self) -> Any:
        if isinstance(self._conn, sqlite3.Connection):
            return _SqliteTransaction(self._conn)
        return self._conn.transaction()

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class _SqliteTransaction:
    """BEGIN IMMEDIATE … COMMIT (ROLLBACK on error): the write lock is taken up front, so concurrent
    writers wait on busy_timeout instead of failing on a lock upgrade."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *_: object) -> None:
        self._conn.execute("ROLLBACK" if kind is not None else "COMMIT")


def stored_text(text: str) -> str:
    """``text`` as a text column keeps it: PostgreSQL refuses the NUL character (OTLP allows it in
    an attribute, so in a session id), which made one such row fail every batch it was in."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _row(item: IndexedConversation) -> tuple[Any, ...]:
    encoded = orjson.dumps(item.detail)
    detail = encoded.decode()
    size = len(encoded) + len(item.key.encode()) + _ROW_OVERHEAD_BYTES  # bytes, not characters
    return (
        stored_text(item.key),
        stored_text(item.agent),
        item.first_seen,
        item.last_seen,
        item.turns,
        item.quality,
        item.quality_score,
        item.priority,
        item.flagged,
        item.closed,
        searchable_types(item.signal_types),
        detail,
        size,
    )


def _item(row: Sequence[Any]) -> IndexedConversation:
    key, agent, first, last, turns, quality, score, priority, flagged, closed, types, detail, _ = row
    leaves = tuple(name for name in types.split() if name.count(".") == 2)
    return IndexedConversation(
        key,
        agent,
        float(first),
        float(last),
        int(turns),
        quality,
        float(score),
        None if priority is None else float(priority),
        bool(flagged),
        bool(closed),
        leaves,
        orjson.loads(detail),
    )


def open_index(url: str, busy_timeout_s: float = 30.0) -> ConversationIndex:
    """``sqlite:///relative.db``, ``sqlite:////absolute.db``, ``sqlite:///:memory:`` or ``postgresql://…``."""
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        if not url.startswith("sqlite:///"):
            raise ValueError(f"a SQLite index URL is sqlite:///<path>, not {url!r}")
        conn = sqlite_files.connect(url[len("sqlite:///") :], busy_timeout_s)
        for statement in _SCHEMA:
            conn.execute(statement)
        return ConversationIndex(conn, "?", "instr({column}, {param}) > 0")
    if scheme in ("postgresql", "postgres"):
        from otelsignals.stores.postgres_connection import PostgresConnection

        shared = PostgresConnection(url)
        with shared.transaction():
            shared.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            for statement in _SCHEMA:
                shared.execute(statement)
        return ConversationIndex(shared, "%s", "strpos({column}, {param}) > 0")
    raise ValueError(f"unsupported index URL scheme {scheme!r} (sqlite:///… or postgresql://…)")


_SCHEMA_LOCK = 0x07E15E76  # the advisory lock id under which replicas create the schema
