"""SQLite stores opened by many writers at once: the switch of a new database to WAL mode, which
SQLite refuses at once (no busy wait) to all but one of the connections asking together."""

from __future__ import annotations

import threading
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
    for round_number in range(25):
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
