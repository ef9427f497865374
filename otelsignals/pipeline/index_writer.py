"""Keeps the conversation index up to date: after each analysed trace and when a session closes.

The analysis thread hands over the conversation's state; :func:`indexed_conversation` turns it into
the row the index keeps (no text unless ``index.content`` and ``signals.snippets`` are both on, and
then masked by ``index.redact_patterns``). Rows wait in memory, the latest per conversation, and a
thread of the writer's own writes them in one transaction every ``index.flush_interval`` — the
analysis never waits for the database. A write that fails keeps its rows for the next attempt
(newer states of the same conversation win); past ``index.max_pending`` waiting conversations the
oldest change is dropped and counted. Retention (``max_age``, ``max_bytes``) runs once a minute.

A conversation already indexed when this process first writes it was *resumed*: its session was
evicted (``sessions.max_sessions`` / ``max_bytes``) and it went on, or the process restarted (and the
disk queue may replay traces already analysed). Its state here holds only part of it, so each row
written for it is merged with the row it had before (:func:`resumed`): what fired and where it was
seen are united (leaf types, trace ids, signals, per-trace metrics), counts and priority never go
below what was indexed (the larger of the two: a replayed trace is not counted twice, a leaf that
fires again after a resume may be counted once), and the quality is the worse of the two.
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from otelsignals.config import IndexConfig, StoreConfig
from otelsignals.conversation import UNKNOWN_AGENT, ConversationState
from otelsignals.evals.session_metrics import MetricResult
from otelsignals.model import Message
from otelsignals.scoring import Score, score
from otelsignals.signals.base import redact_metadata, redacted_metadata
from otelsignals.stores.conversation_index import ConversationIndex, IndexedConversation, open_index
from otelsignals.telemetry import ProblemLog
from otelsignals.triage import NO_PRIORITY

PRUNE_INTERVAL_S = 60.0
# Signals kept per conversation row, the latest (the state keeps up to RECENT_SIGNALS, 500): a row is
# built on every trace, so this bounds that work too, and a resumed row keeps as many.
SIGNALS_KEPT = 200
TRACES_KEPT = 200  # trace ids (and per-trace metrics) kept per conversation: the latest
REDACTED = "[redacted]"


class Redactor:
    """Masks every match of the configured patterns (emails, phone and card numbers by default)."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self._pattern = re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None

    def value(self, value: Any) -> Any:
        """``value`` with every string in it masked (tool arguments, signal metadata)."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {key: self.value(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(item) for item in value]
        return value

    def __call__(self, text: str | None) -> str | None:
        if text is None or self._pattern is None:
            return text
        return self._pattern.sub(REDACTED, text)


def indexed_conversation(
    state: ConversationState,
    *,
    now: float,
    closed: bool = False,
    session_metrics: Sequence[MetricResult] = (),
    redact: Redactor | None = None,
    current: Score | None = None,
) -> IndexedConversation:
    """The index row of ``state``; ``redact`` given = keep the messages' text, masked by it."""
    conversation = state.conversation
    current = current or score(conversation, state.leaf_counts)
    detail: dict[str, Any] = {
        "counts": {category: n for category, n in current.counts.items() if n},
        "leaf_counts": {leaf: n for leaf, n in state.leaf_counts.items() if n},
        "efficiency_score": current.efficiency_score,
        "turn_count": current.turn_count,
        "priority_reasons": state.priority.reasons,
        "content_captured": conversation.content_captured,
        "trace_ids": [trace_id.hex() for trace_id in conversation.trace_ids[-TRACES_KEPT:]],
        "signals": [
            {
                "type": signal.type,
                "message_index": signal.message_index,
                "confidence": signal.confidence,
                "snippet": redact(signal.snippet) if redact is not None else None,
                "metadata": redact.value(signal.metadata)
                if redact is not None
                else redacted_metadata(signal),
            }
            for signal in state.recent_signals[-SIGNALS_KEPT:]
        ],
        "trace_metrics": [t.as_dict() for t in list(state.trace_signals)[-TRACES_KEPT:]],
        "session_metrics": [metric.as_dict() for metric in session_metrics] or None,
        "message_offset": conversation.message_offset,
        "messages": [_message(m, redact) for m in conversation.messages] if redact is not None else None,
    }
    first_seen = state.first_seen_ns / 1e9 if state.first_seen_ns else now
    return IndexedConversation(
        key=conversation.key,
        agent=conversation.agent_id or UNKNOWN_AGENT,
        first_seen=min(first_seen, now),
        last_seen=now,
        turns=current.user_turns,
        quality=current.quality,
        quality_score=current.quality_score,
        priority=None if state.priority is NO_PRIORITY else state.priority.value,
        flagged=current.flagged,
        closed=closed,
        signal_types=tuple(sorted(leaf for leaf, n in state.leaf_counts.items() if n)),
        detail=detail,
    )


def _message(message: Message, redact: Redactor) -> dict[str, Any]:
    entry: dict[str, Any] = {"role": message.role.value, "content": redact(message.content)}
    if message.tool_calls:
        entry["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": redact.value(c.arguments)} for c in message.tool_calls
        ]
    result = message.tool_result
    if result is not None:
        entry["tool_result"] = {
            "call_id": result.call_id,
            "name": result.name,
            "is_error": result.is_error,
            "error_type": result.error_type,
        }
    return entry


def resumed(before: IndexedConversation, now: IndexedConversation) -> IndexedConversation:
    """``now`` (the state of a resumed conversation) merged with the row it had ``before``."""
    old, new = before.detail, now.detail
    worse = before if before.quality_score < now.quality_score else now
    ranked = before if _rank(before.priority) > _rank(now.priority) else now
    messages: list[Any] | None = new.get("messages")
    offset = new.get("message_offset", 0)
    keeps_text = messages is not None
    if messages is not None and old.get("messages") is not None and len(old["messages"]) > len(messages):
        messages, offset = old["messages"], old.get("message_offset", 0)
    earlier_signals = (
        old.get("signals", []) if keeps_text else [_without_text(s) for s in old.get("signals", [])]
    )
    detail = {
        **new,
        "counts": _larger(old.get("counts", {}), new.get("counts", {})),
        "leaf_counts": _larger(old.get("leaf_counts", {}), new.get("leaf_counts", {})),
        "efficiency_score": min(old.get("efficiency_score", 1.0), new.get("efficiency_score", 1.0)),
        "turn_count": max(old.get("turn_count", 0), new.get("turn_count", 0)),
        "priority_reasons": ranked.detail.get("priority_reasons", []),
        "trace_ids": _united(old.get("trace_ids", []), new.get("trace_ids", []), lambda t: t)[-TRACES_KEPT:],
        "signals": _united(
            earlier_signals, new.get("signals", []), lambda s: (s["type"], s["message_index"])
        )[-SIGNALS_KEPT:],
        "trace_metrics": _united(
            old.get("trace_metrics", []), new.get("trace_metrics", []), lambda t: t["trace_id"]
        )[-TRACES_KEPT:],
        "session_metrics": new.get("session_metrics") or old.get("session_metrics"),
        "messages": messages,
        "message_offset": offset,
    }
    return dataclasses.replace(
        now,
        first_seen=min(before.first_seen, now.first_seen),
        turns=max(before.turns, now.turns),
        quality=worse.quality,
        quality_score=worse.quality_score,
        priority=ranked.priority,
        flagged=before.flagged or now.flagged,
        signal_types=tuple(sorted(set(before.signal_types) | set(now.signal_types))),
        detail=detail,
    )


def _rank(priority: float | None) -> float:
    return -1.0 if priority is None else priority


def _without_text(signal: dict[str, Any]) -> dict[str, Any]:
    """An earlier row's signal once text is no longer kept: no snippet, metadata redacted."""
    return {**signal, "snippet": None, "metadata": redact_metadata(signal.get("metadata") or {})}


def _larger(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {key: max(a.get(key, 0), b.get(key, 0)) for key in sorted(a.keys() | b.keys())}


def _united(a: list[Any], b: list[Any], identity: Any) -> list[Any]:
    """``a`` then the items of ``b`` not in it (by ``identity``); a later copy replaces an earlier."""
    merged = {identity(item): item for item in a}
    for item in b:
        merged.pop(identity(item), None)
        merged[identity(item)] = item
    return list(merged.values())


class IndexWriter:
    def __init__(
        self,
        config: IndexConfig,
        index: ConversationIndex,
        registry: CollectorRegistry,
        keep_text: bool,
        synchronous: bool = False,
        problems: ProblemLog | None = None,
    ) -> None:
        self.config = config
        self.problems = problems if problems is not None else ProblemLog()
        # Write each change before the caller goes on (the trace is forwarded, its disk-queue records
        # released only after its row is committed), instead of once per flush_interval.
        self.synchronous = synchronous
        self._flush_lock = threading.Lock()  # one flush at a time: the analysis thread's and the writer's
        self.index = index
        self._redact = Redactor(config.redact_patterns) if keep_text else None
        # The latest row per conversation, with the state it was made from.
        self._pending: OrderedDict[str, tuple[IndexedConversation, ConversationState]] = OrderedDict()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._last_prune = 0.0
        self.writes = Counter(
            "otelsignals_index_writes", "Conversation rows written to the index.", registry=registry
        )
        self.write_errors = Counter(
            "otelsignals_index_write_errors",
            "Index writes that failed (kept for the next try).",
            registry=registry,
        )
        self.dropped = Counter(
            "otelsignals_index_dropped",
            "Conversation changes dropped before reaching the index (index.max_pending, or a row "
            "the index refused while it took the others).",
            registry=registry,
        )
        self.pruned = Counter(
            "otelsignals_index_pruned", "Conversations removed by retention.", ["reason"], registry=registry
        )
        self.rows = Gauge("otelsignals_index_conversations", "Conversations in the index.", registry=registry)
        self.size = Gauge(
            "otelsignals_index_bytes", "Bytes of conversation rows in the index.", registry=registry
        )

    # -- on the analysis thread --------------------------------------------------------------------
    def record(
        self,
        state: ConversationState,
        *,
        closed: bool = False,
        session_metrics: Sequence[MetricResult] = (),
        current: Score | None = None,
    ) -> None:
        row = indexed_conversation(
            state,
            now=time.time(),
            closed=closed,
            session_metrics=session_metrics,
            redact=self._redact,
            current=current,
        )
        with self._lock:
            waiting = self._pending.get(row.key)
            if waiting is not None and waiting[1] is not state:
                # A new state for a key whose earlier state's row was not written yet: a resume.
                row = resumed(waiting[0], row)
            self._pending[row.key] = (row, state)
            self._pending.move_to_end(row.key)
            while len(self._pending) > self.config.max_pending:
                self._pending.popitem(last=False)
                self.dropped.inc()
        if self.synchronous:
            self.flush()

    # -- the writer's thread -----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="otelsignals-index", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Writes what is waiting and stops."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()
        self.index.close()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self.config.flush_interval)
            self.flush()
            if time.monotonic() - self._last_prune >= PRUNE_INTERVAL_S:
                self.prune()

    def flush(self) -> None:
        with self._flush_lock:
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            batch, self._pending = list(self._pending.values()), OrderedDict()
        if not batch:
            return
        rows: list[IndexedConversation] | None = None
        try:
            rows = self._with_history(batch)
            self.index.upsert(rows)
        except Exception as exc:
            self.write_errors.inc()
            refused = self._refused_rows(rows, exc)
            if refused is None:  # the index failed, not a row: all of them wait for the next try
                self._put_back(batch)
                self.problems.warning(
                    "index_write_error", f"writing the conversation index failed; retrying: {exc}"
                )
                return
            if refused:
                self.dropped.inc(len(refused))
                self.problems.warning(
                    "index_row_refused",
                    f"the conversation index refused {len(refused)} of {len(batch)} rows; dropped: {exc}",
                )
            self.writes.inc(len(batch) - len(refused))
            return
        self.problems.recovered("index_write_error", "writing the conversation index works again")
        self.writes.inc(len(batch))

    def _refused_rows(
        self, rows: list[IndexedConversation] | None, error: Exception
    ) -> list[IndexedConversation] | None:
        """After a batch failed for what a row holds (a value the index cannot store), the rows one
        by one, and those the index refuses (retrying them would fail every batch after). None when
        the index itself failed (unreachable, a lock, a deadlock), then or on the way: a row is
        dropped only for an error about its values."""
        if rows is None or len(rows) < 2 or not _about_the_values(error):
            return None
        refused = []
        for row in rows:
            try:
                self.index.upsert([row])
            except Exception as alone:
                if not _about_the_values(alone):
                    return None
                refused.append(row)
        return refused

    def _put_back(self, batch: list[tuple[IndexedConversation, ConversationState]]) -> None:
        with self._lock:  # back in line; a newer row of another state is merged with it
            for row, state in batch:
                newer = self._pending.get(row.key)
                if newer is None:
                    self._pending[row.key] = (row, state)
                elif newer[1] is not state:
                    self._pending[row.key] = (resumed(row, newer[0]), newer[1])

    def _with_history(
        self, batch: list[tuple[IndexedConversation, ConversationState]]
    ) -> list[IndexedConversation]:
        """The rows, each resumed conversation's merged with the row it had before this state began
        (read once per state, kept on it: it lives and goes with the session)."""
        unread = [state for _, state in batch if not state.index_base_read]
        if unread:
            earlier = self.index.get_many([state.conversation.key for state in unread])
            for state in unread:
                state.index_base = earlier.get(state.conversation.key)
                state.index_base_read = True
        merged = []
        for row, state in batch:
            before = state.index_base
            merged.append(resumed(before, row) if isinstance(before, IndexedConversation) else row)
        return merged

    def prune(self) -> None:
        self._last_prune = time.monotonic()
        try:
            by_age, by_bytes = self.index.prune(self.config.max_age, int(self.config.max_bytes))
            rows, size = self.index.count()
        except Exception as exc:
            self.problems.warning("index_retention_error", f"conversation index retention failed: {exc}")
            return
        self.problems.recovered("index_retention_error", "conversation index retention works again")
        self.pruned.labels("age").inc(by_age)
        self.pruned.labels("bytes").inc(by_bytes)
        self.rows.set(rows)
        self.size.set(size)


def index_url(config: IndexConfig, store: StoreConfig) -> str:
    return config.url or f"sqlite:///{os.path.join(store.directory, 'index.db')}"


def create_index_reader(config: IndexConfig, store: StoreConfig) -> ConversationIndex | None:
    """A connection of its own for the admin API and eval runs, so that their reads never hold up
    the writer (SQLite in WAL mode and PostgreSQL both let readers run beside a writer)."""
    return open_index(index_url(config, store)) if config.enabled else None


def create_index_writer(
    config: IndexConfig,
    store: StoreConfig,
    registry: CollectorRegistry,
    snippets: bool,
    durable: bool,
    problems: ProblemLog | None = None,
) -> IndexWriter | None:
    """The writer of the ``index`` section (None when it is off); text is kept only when both
    ``index.content`` and ``signals.snippets`` are on. With ``durable`` (the disk queue is on) and a
    local SQLite index, every change is committed before its trace moves on, so a SIGKILL loses no
    change of a trace already delivered (a PostgreSQL index keeps batching: a database that stops
    answering must not stall the analysis)."""
    if not config.enabled:
        return None
    url = index_url(config, store)
    return IndexWriter(
        config,
        open_index(url),
        registry,
        config.content and snippets,
        synchronous=durable and url.startswith("sqlite:"),
        problems=problems,
    )


def _about_the_values(error: Exception) -> bool:
    """Whether a failed write says its values cannot be stored, rather than that the index could
    not be reached or was busy (an error to try again later, the rows kept)."""
    import sqlite3

    import psycopg

    if isinstance(error, sqlite3.ProgrammingError) and "closed" in str(error):
        return False  # a closed connection (ProgrammingError covers values that cannot bind too)
    return not isinstance(error, sqlite3.OperationalError | psycopg.OperationalError | OSError)
