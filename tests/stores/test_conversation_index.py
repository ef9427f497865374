"""The conversation index against real databases: SQLite (a temp file) and PostgreSQL (a throwaway
server started from the Debian binaries, tests/support/servers.py). The same tests run on both."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from otelsignals.stores.conversation_index import (
    ConversationFilter,
    ConversationIndex,
    CursorError,
    IndexedConversation,
    open_index,
    searchable_types,
)

FAILURE = "execution.failure.invalid_args"
QUIT = "interaction.disengagement.quit"


@pytest.fixture(params=["sqlite", "postgres"])
def index_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'index.db'}"
    url = request.getfixturevalue("postgres_server")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS conversation_index")
    return url


@pytest.fixture
def index(index_url: str) -> Iterator[ConversationIndex]:
    opened = open_index(index_url)
    yield opened
    opened.close()


def conversation(
    key: str,
    *,
    agent: str = "support",
    last_seen: float = 1_000.0,
    quality: str = "good",
    priority: float | None = 0.5,
    flagged: bool = False,
    closed: bool = False,
    types: tuple[str, ...] = (),
    detail: dict | None = None,
) -> IndexedConversation:
    return IndexedConversation(
        key, agent, last_seen - 60, last_seen, 3, quality, 0.7, priority, flagged, closed, types, detail or {}
    )


def test_a_conversation_is_written_once_and_its_latest_state_wins(index_url: str) -> None:
    writer, reader = open_index(index_url), open_index(index_url)
    try:
        writer.upsert([conversation("c1", quality="good", detail={"turn": 1})])
        writer.upsert([conversation("c1", quality="poor", closed=True, types=(QUIT,), detail={"turn": 2})])
        found = reader.get("c1")
        assert found is not None
        assert (found.quality, found.closed, found.signal_types, found.detail) == (
            "poor",
            True,
            (QUIT,),
            {"turn": 2},
        )
        assert reader.count()[0] == 1
        assert reader.get("nobody") is None
    finally:
        writer.close()
        reader.close()


def test_filters_combine_and_match_a_leaf_or_its_category(index: ConversationIndex) -> None:
    index.upsert(
        [
            conversation("a", quality="severe", flagged=True, types=(FAILURE,)),
            conversation("b", quality="poor", flagged=True, types=(QUIT,)),
            conversation("c", quality="good", types=(FAILURE, QUIT)),
            conversation("d", quality="excellent", agent="billing"),
        ]
    )

    def keys(**conditions: object) -> list[str]:
        return sorted(item.key for item in index.query(ConversationFilter(**conditions), "-last_seen").items)  # type: ignore[arg-type]

    assert keys(signals=("execution.failure",)) == ["a", "c"]
    assert keys(signals=(FAILURE,)) == ["a", "c"]
    assert keys(signals=("execution",)) == []  # a layer is neither a leaf nor a category
    assert keys(signals=("execution.failure.invalid",)) == []  # no partial names
    assert keys(signals=("execution.failure", QUIT)) == ["a", "b", "c"]
    assert keys(qualities=("severe", "poor"), flagged=True) == ["a", "b"]
    assert keys(qualities=("severe", "poor"), signals=(QUIT,)) == ["b"]
    assert keys(agents=("billing",)) == ["d"]
    assert keys(flagged=False) == ["c", "d"]


def test_time_and_priority_bounds(index: ConversationIndex) -> None:
    index.upsert(
        [
            conversation("old", last_seen=100.0, priority=0.9),
            conversation("new", last_seen=500.0, priority=0.2),
            conversation("unranked", last_seen=500.0, priority=None),
        ]
    )
    assert [i.key for i in index.query(ConversationFilter(since=400.0), "last_seen").items] == [
        "new",
        "unranked",
    ]
    assert [i.key for i in index.query(ConversationFilter(until=100.0), "last_seen").items] == ["old"]
    assert [i.key for i in index.query(ConversationFilter(min_priority=0.5)).items] == ["old"]


def test_pages_follow_the_sort_without_gaps_or_repeats(index: ConversationIndex) -> None:
    # Equal priorities across page boundaries: the key breaks ties, so no row is skipped or repeated.
    index.upsert([conversation(f"c{n:03d}", priority=(n % 7) / 10, last_seen=float(n)) for n in range(230)])
    seen: list[IndexedConversation] = []
    cursor = None
    while True:
        page = index.query(ConversationFilter(), "-priority", limit=37, cursor=cursor)
        seen += page.items
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == 230 and len({i.key for i in seen}) == 230
    order = [(-(i.priority or 0.0), i.key) for i in seen]
    assert order == sorted(order)


def test_unranked_conversations_sort_after_ranked_ones(index: ConversationIndex) -> None:
    index.upsert([conversation("none", priority=None), conversation("low", priority=0.0)])
    assert [i.key for i in index.query().items] == ["low", "none"]


@pytest.mark.parametrize("cursor", ["garbage!", "WyJ4Il0="])
def test_a_foreign_cursor_is_refused(index: ConversationIndex, cursor: str) -> None:
    with pytest.raises(CursorError):
        index.query(cursor=cursor)


def test_a_cursor_of_another_sort_is_refused(index: ConversationIndex) -> None:
    index.upsert([conversation(f"c{n}") for n in range(3)])
    cursor = index.query(limit=1).next_cursor
    assert cursor is not None
    with pytest.raises(CursorError, match="sort"):
        index.query(sort="-last_seen", cursor=cursor)


def test_bad_sort_and_limit_are_refused(index: ConversationIndex) -> None:
    with pytest.raises(ValueError, match="sort must be one of"):
        index.query(sort="name")
    with pytest.raises(ValueError, match="limit"):
        index.query(limit=0)


def test_retention_by_age_then_by_bytes_keeps_the_most_recent(index: ConversationIndex) -> None:
    index.upsert([conversation(f"c{n}", last_seen=float(n), detail={"pad": "x" * 1000}) for n in range(10)])
    _, size = index.count()
    by_age, by_bytes = index.prune(max_age=7.5, max_bytes=size, now=10.0)
    assert (by_age, by_bytes) == (3, 0)  # last seen at 0, 1, 2
    per_row = size // 10
    by_age, by_bytes = index.prune(max_age=1e9, max_bytes=per_row * 4, now=10.0)
    assert (by_age, by_bytes) == (0, 3)
    assert sorted(i.key for i in index.query(limit=50).items) == ["c6", "c7", "c8", "c9"]
    assert index.count()[1] <= per_row * 4


def test_concurrent_writers_of_one_index_lose_nothing(index_url: str) -> None:
    def write(worker: int) -> None:
        own = open_index(index_url)
        try:
            for n in range(40):
                own.upsert([conversation(f"w{worker}-{n}")])
        finally:
            own.close()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reader = open_index(index_url)
    try:
        assert reader.count()[0] == 120
    finally:
        reader.close()


def test_searchable_types_lists_leaves_and_categories_once() -> None:
    assert searchable_types([FAILURE, "execution.failure.bad_query"]) == (
        " execution.failure execution.failure.bad_query execution.failure.invalid_args "
    )
    assert searchable_types([]) == " "


def test_an_unknown_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported index URL scheme"):
        open_index("mysql://localhost/x")


def test_the_timeline_counts_qualities_and_categories_per_bucket(index: ConversationIndex) -> None:
    index.upsert(
        [
            conversation("a", last_seen=10.0, quality="poor", types=(FAILURE,)),
            conversation("b", last_seen=15.0, quality="good", types=(FAILURE, QUIT)),
            conversation("c", last_seen=55.0, quality="poor"),
            conversation("late", last_seen=100.0, quality="poor"),  # outside [0, 100)
        ]
    )
    timeline = index.timeline(0.0, 100.0, 4)
    first, _, third, _ = timeline["buckets"]
    assert first == {
        "start": 0.0,
        "conversations": 2,
        "qualities": {"poor": 1, "good": 1},
        "categories": {"execution.failure": 2, "interaction.disengagement": 1},
    }
    assert third["conversations"] == 1 and third["qualities"] == {"poor": 1}
    assert sum(b["conversations"] for b in timeline["buckets"]) == 3
    with pytest.raises(ValueError, match="buckets"):
        index.timeline(10.0, 5.0, 4)


def test_get_many_returns_the_indexed_ones(index: ConversationIndex) -> None:
    index.upsert([conversation(f"c{n}") for n in range(3)])
    found = index.get_many(["c0", "c2", "missing"])
    assert sorted(found) == ["c0", "c2"] and found["c2"].key == "c2"
    assert index.get_many([]) == {}


def test_a_trace_id_finds_its_conversation(index: ConversationIndex) -> None:
    wanted, other = "ab" * 16, "cd" * 16
    index.upsert(
        [
            conversation("c1", detail={"trace_ids": [other]}),
            conversation("c2", detail={"trace_ids": [other, wanted]}, last_seen=2_000.0),
            conversation("c3", detail={"note": wanted[:-2]}),  # a prefix of it is no match
        ]
    )
    found = index.find_trace(wanted)
    assert found is not None and found.key == "c2"
    assert index.find_trace("ef" * 16) is None
    with pytest.raises(ValueError, match="32 lower-case hex"):
        index.find_trace("%' OR 1=1 --")


def test_a_key_with_a_nul_character_is_written_and_found(index: ConversationIndex) -> None:
    """OTLP allows NUL in an attribute, so in a session id; PostgreSQL's text refuses it, and one
    such row made every batch it was in fail (nothing written after it)."""
    index.upsert([conversation("sess-\x00-1", agent="a\x00b"), conversation("plain")])
    found = index.get("sess-\x00-1")
    assert found is not None and found.agent == "a\ufffdb"
    assert set(index.get_many(["sess-\x00-1", "plain", "absent"])) == {"sess-\x00-1", "plain"}
