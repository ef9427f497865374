"""One PostgreSQL connection that is opened again once it broke.

A server restart, a failover or a terminated backend closes a psycopg connection for good: every
later statement failed until the process restarted, while the sidecar stayed ready (the reputation
store and the conversation index each lost everything written after it). Here the statement that
finds the connection broken still fails (its caller counts and retries it as it counts any store
error: a statement is not sent twice by this module, since whether it took effect is not known),
and the next one, outside a transaction, runs on a new connection.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import psycopg

logger = logging.getLogger("otelsignals.stores")

# Seconds to wait for a connection (libpq's connect_timeout), unless the URL sets its own: a store
# that does not answer must not hold the thread that writes to it for the operating system's TCP
# timeout (minutes).
CONNECT_TIMEOUT = 10


class PostgresConnection:
    """The parts of a psycopg autocommit connection the stores use: ``execute``, ``cursor``,
    ``transaction`` and ``close``. Used by one thread at a time (the stores hold a lock)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._options: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in url:
            self._options["connect_timeout"] = CONNECT_TIMEOUT
        self._conn = psycopg.connect(url, **self._options)
        self._in_transaction = 0

    def _live(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if (conn.closed or conn.broken) and not self._in_transaction:
            with contextlib.suppress(psycopg.Error):
                conn.close()
            self._conn = conn = psycopg.connect(self._url, **self._options)
            logger.warning("connected to PostgreSQL again after the connection was lost")
        return conn

    def execute(self, query: Any, params: Any = None) -> psycopg.Cursor[Any]:
        return self._live().execute(query, params)

    def cursor(self) -> psycopg.Cursor[Any]:
        return self._live().cursor()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """A transaction on the current connection; a connection that breaks in it is not replaced
        until it ends (its statements fail rather than run outside it)."""
        conn = self._live()
        self._in_transaction += 1
        try:
            with conn.transaction():
                yield
        finally:
            self._in_transaction -= 1

    @property
    def closed(self) -> bool:
        return bool(self._conn.closed)

    def close(self) -> None:
        self._conn.close()
