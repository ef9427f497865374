"""SQLite stores opened by many writers at once: the switch of a new database to WAL mode, which
SQLite refuses at once (no busy wait) to all but one of the connections asking together."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from otelsignals.stores import open_store
from otelsignals.stores.conversation_index import open_index


@pytest.mark.parametrize(
    "opener",
    [
        pytest.param(lambda path: open_index(f"sqlite:///{path}"), id="conversation index"),
        pytest.param(lambda path: open_store(f"sqlite:///{path}"), id="reputation store"),
    ],
)
def test_writers_opening_one_new_database_together_all_get_it(
    tmp_path: Path, opener: Callable[[str], Any]
) -> None:
    # Before: 2 of 40 such rounds of six openers had one fail with "database is locked".
    for round_number in range(15):
        path = str(tmp_path / f"round-{round_number}" / "data.db")
        start = threading.Barrier(6)
        failures: list[BaseException] = []

        def open_it(
            path: str = path, start: threading.Barrier = start, failures: list[BaseException] = failures
        ) -> None:
            start.wait()
            try:
                opener(path).close()
            except BaseException as error:  # reported by the assertion below
                failures.append(error)

        threads = [threading.Thread(target=open_it) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == [], f"round {round_number}: {failures[:2]}"


def test_an_open_waits_for_a_writer_holding_a_new_database_then_switches_it_to_wal(tmp_path: Path) -> None:
    """Another connection writes to the new file when it is opened: SQLite refuses the switch to WAL
    at once rather than waiting; the open tries again until the writer commits."""
    from otelsignals.stores import sqlite_files

    path = str(tmp_path / "data.db")
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("CREATE TABLE t (x)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO t VALUES (1)")
    committer = threading.Timer(0.3, lambda: writer.execute("COMMIT"))
    committer.start()
    try:
        started = time.monotonic()
        conn = sqlite_files.connect(path, busy_timeout_s=5.0)
        waited = time.monotonic() - started
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert waited >= 0.2  # it waited for the writer, and did not take the file from it
        conn.close()
    finally:
        committer.join()
        writer.close()


def test_an_open_gives_up_after_its_busy_timeout_and_closes_its_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from otelsignals.stores import sqlite_files

    path = str(tmp_path / "data.db")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("CREATE TABLE t (x)")
    writer.execute("BEGIN IMMEDIATE")
    opened: list[sqlite3.Connection] = []
    connect = sqlite3.connect
    monkeypatch.setattr(
        sqlite3, "connect", lambda *args, **kwargs: opened.append(connect(*args, **kwargs)) or opened[-1]
    )
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            sqlite_files.connect(path, busy_timeout_s=0.2)
        with pytest.raises(sqlite3.ProgrammingError):  # closed
            opened[0].execute("SELECT 1")
    finally:
        writer.close()
