"""Opening a SQLite database file the way every SQLite-backed store here uses it: WAL mode, a busy
timeout, writers in several threads or processes."""

from __future__ import annotations

import os
import sqlite3
import time

# Between two tries to switch a new database to WAL mode (see connect).
_WAL_RETRY_S = 0.01


def connect(path: str, busy_timeout_s: float) -> sqlite3.Connection:
    """A connection to ``path`` (its directory made first; ``:memory:`` as it is) that waits up to
    ``busy_timeout_s`` for other writers, in WAL mode (synchronous NORMAL: safe against a process
    crash; a power loss may lose the last commits).

    Switching a new database to WAL needs it to itself: when several connections open it at once,
    SQLite refuses the switch to all but one with "database is locked" at once, without waiting on
    the busy timeout (the lock it would wait for could deadlock). The others try again until the
    timeout. The mode is kept in the file, so once it is set, later opens change nothing."""
    if path != ":memory:":
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        if path != ":memory:":
            _use_wal(conn, time.monotonic() + busy_timeout_s)
        conn.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        conn.close()
        raise
    return conn


def _use_wal(conn: sqlite3.Connection, deadline: float) -> None:
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
            time.sleep(_WAL_RETRY_S)
