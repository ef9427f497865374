"""Reputation stores (SPEC §7): one interface over SQLite (default), Redis and PostgreSQL.

Every store keeps, per agent, the newest ``window_size`` evaluations (oldest first) and the total
number of evaluations ever recorded. ``record`` is atomic: appending to the window, dropping the
entries beyond ``window_size`` (oldest first) and incrementing the count happen together or not at
all, so several replicas writing to one store at once end with the exact window and count. The count
an evaluation brings the agent to is its sequence number (1, 2, 3… whoever wrote it):
``record_many`` returns them, and ``window_since`` reads only the entries numbered above one, so that
a replica can follow the window without reading it all again (``reputation.AgentWindow``).

Stores also keep JSON documents (eval runs) with the time each was last written, so that
``prune_documents`` can enforce retention by age and by count on every backend alike.

    store = open_store("sqlite:///otelsignals-data/reputation.db")   # relative path
    store = open_store("sqlite:////var/lib/otelsignals/reputation.db")  # absolute path
    store = open_store("redis://127.0.0.1:6379/0")
    store = open_store("postgresql://user:pass@host:5432/dbname")
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from otelsignals.reputation import Evaluation

DEFAULT_WINDOW = 500


class PartlyRecorded(Exception):
    """``record_many`` recorded some evaluations of the batch and not others (a store that runs them
    without a transaction around the batch: Redis). ``numbers[i]`` is evaluation i's sequence number,
    None where it was not recorded; retrying the whole batch would record the others twice."""

    def __init__(self, numbers: list[int | None], errors: list[Exception]) -> None:
        super().__init__(f"{len(errors)} of {len(numbers)} evaluations not recorded: {errors[0]}")
        self.numbers = numbers
        self.errors = errors


@runtime_checkable
class ReputationStore(Protocol):
    window_size: int

    def record(self, evaluation: Evaluation) -> None:
        """Append to the agent's window, drop beyond ``window_size`` oldest-first, count it; atomic."""
        ...

    def record_many(self, evaluations: Sequence[Evaluation]) -> list[int]:
        """``record`` for each, in order, in one round trip (one transaction on SQL stores); returns
        each evaluation's sequence number, its agent's count once it was recorded. Raises
        ``PartlyRecorded`` when only some were recorded, anything else when none was."""
        ...

    def window(self, agent_id: str) -> tuple[list[Evaluation], int]:
        """The agent's window (oldest first) and its total count, read consistently; ([], 0) if unknown."""
        ...

    def window_since(self, agent_id: str, after: int) -> tuple[list[Evaluation], int]:
        """The entries of the agent's window numbered above ``after`` (oldest first) and its total
        count, read consistently: ``window(agent_id)`` is ``window_since(agent_id, 0)``."""
        ...

    def agents(self) -> list[str]:
        """Every agent with at least one evaluation, sorted."""
        ...

    def save_document(self, kind: str, key: str, body: str, now: float | None = None) -> None:
        """Store (or replace) a JSON document, e.g. an eval run, shared by every replica; ``now``
        (default: the current time) is its last-written time, which retention goes by."""
        ...

    def load_document(self, kind: str, key: str) -> str | None: ...

    def document_keys(self, kind: str, limit: int) -> list[str]:
        """The keys of the newest ``limit`` documents of ``kind``, the most recently written first."""
        ...

    def prune_documents(
        self, kind: str, max_age: float, max_count: int, now: float | None = None
    ) -> tuple[int, int]:
        """Remove the documents of ``kind`` last written more than ``max_age`` seconds before ``now``,
        then the oldest beyond the newest ``max_count``; returns (removed by age, removed by count)."""
        ...

    def close(self) -> None: ...


def open_store(url: str, *, window_size: int = DEFAULT_WINDOW) -> ReputationStore:
    """A store from its URL: ``sqlite:///relative.db``, ``sqlite:////absolute.db``, ``sqlite:///:memory:``,
    ``redis://host:port/db`` (also ``rediss://``, ``unix://``), ``postgresql://...`` (or ``postgres://``)."""
    if window_size < 1:
        raise ValueError("window_size must be >= 1")
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from otelsignals.stores.sqlite import SqliteStore

        if not url.startswith("sqlite:///"):
            raise ValueError(f"a SQLite store URL is sqlite:///<path>, not {url!r}")
        return SqliteStore(url[len("sqlite:///") :], window_size=window_size)
    if scheme in ("redis", "rediss", "unix"):
        from otelsignals.stores.redis import RedisStore

        return RedisStore(url, window_size=window_size)
    if scheme in ("postgresql", "postgres"):
        from otelsignals.stores.postgres import PostgresStore

        return PostgresStore(url, window_size=window_size)
    raise ValueError(f"unknown reputation store URL scheme {scheme!r} (sqlite, redis, postgresql)")


__all__ = ["DEFAULT_WINDOW", "ReputationStore", "open_store"]
