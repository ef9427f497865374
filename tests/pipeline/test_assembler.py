"""The trace assembler: complete traces leave at once, incomplete ones after their wait, the buffer
stays within its bounds, and no span is ever lost or doubled."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from otelsignals.otlp.wire import ScopeContext, SpanRecord, split_request
from otelsignals.pipeline.assembler import Assembler, ReleasedTrace

CONTEXT = ScopeContext(None, "", None, "")


def tid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def sid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def rec(trace: int, span: int, parent: int = 0, size: int = 10) -> SpanRecord:
    return SpanRecord(tid(trace), sid(span), sid(parent) if parent else b"", bytes(size), CONTEXT)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Harness:
    def __init__(self, **options: Any) -> None:
        self.clock = Clock()
        self.released: list[ReleasedTrace] = []
        self.duplicates: list[SpanRecord] = []
        # Bytes counted as the spans' own unless a test says otherwise (SPAN_RECORD_BYTES below).
        options.setdefault("span_record_bytes", 0)
        self.assembler = Assembler(self.released.append, self.duplicates.append, clock=self.clock, **options)

    def add(self, *records: SpanRecord) -> None:
        self.assembler.add(records)

    def reasons(self) -> list[tuple[bytes, str]]:
        return [(t.trace_id, t.reason) for t in self.released]

    def assert_empty(self) -> None:
        assert len(self.assembler) == 0
        assert self.assembler.buffered_bytes == 0
        assert self.assembler.buffered_spans == 0


# root 1 ─┬─ 2 ── 4
#         └─ 3
TREE = [rec(1, 1), rec(1, 2, 1), rec(1, 3, 1), rec(1, 4, 2)]


# -- complete traces --------------------------------------------------------------------------------
def first_complete_prefix(spans: list[SpanRecord]) -> int:
    """How many spans must arrive before the root is there and every span's parent too."""
    for n in range(1, len(spans) + 1):
        ids = {r.span_id for r in spans[:n]}
        if any(r.is_local_root for r in spans[:n]) and all(
            r.is_local_root or r.parent_span_id in ids for r in spans[:n]
        ):
            return n
    raise AssertionError("never complete")


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_complete_trace_released_as_soon_as_root_and_parents_are_present(order: tuple[int, ...]) -> None:
    h = Harness(decision_wait=3600)
    spans = [TREE[i] for i in order]
    needed = first_complete_prefix(spans)
    for n, record in enumerate(spans, start=1):  # one add() per span
        h.add(record)
        if n < needed:
            assert h.released == []
            assert h.assembler.buffered_spans == n
        if n == needed:
            assert h.reasons() == [(tid(1), "complete")]
            assert h.released[0].spans == spans[:n]  # arrival order, nothing else
            assert h.released[0].analyzable
    if needed == len(spans):
        h.assert_empty()


@pytest.mark.parametrize("order", list(itertools.permutations(range(1, 4))))
def test_root_last_releases_the_whole_tree_once(order: tuple[int, ...]) -> None:
    """Children end (and are exported) before their parents: the usual SDK order."""
    h = Harness(decision_wait=3600)
    spans = [TREE[i] for i in order]
    h.add(*spans[:1])
    h.add(*spans[1:])
    assert h.released == []
    h.add(TREE[0])
    assert h.reasons() == [(tid(1), "complete")]
    assert sorted(r.span_id for r in h.released[0].spans) == [sid(1), sid(2), sid(3), sid(4)]
    h.assert_empty()


def test_complete_trace_in_one_add_among_other_traces() -> None:
    h = Harness()
    h.add(rec(2, 10, 99), *reversed(TREE), rec(3, 20))
    # Trace 3 (a lone root) and trace 1 are complete; trace 2 waits for span 99.
    assert sorted(h.reasons()) == [(tid(1), "complete"), (tid(3), "complete")]
    assert len(h.assembler) == 1
    assert h.assembler.buffered_spans == 1
    assert h.assembler.buffered_bytes == 10


def test_complete_does_not_wait_for_the_clock() -> None:
    h = Harness(decision_wait=3600)
    h.add(TREE[3], TREE[2])
    h.add(TREE[1])
    h.add(TREE[0])
    assert h.reasons() == [(tid(1), "complete")]


def test_spans_arriving_after_release_form_a_new_release() -> None:
    h = Harness()
    h.add(rec(1, 1))
    h.add(rec(1, 2, 1))  # a late child: its parent left with the first release
    assert h.reasons() == [(tid(1), "complete")]
    h.clock.now += 2.0
    assert h.assembler.expire() == 1
    assert h.reasons() == [(tid(1), "complete"), (tid(1), "timeout")]
    assert [r.span_id for r in h.released[1].spans] == [sid(2)]


def test_remote_parent_is_a_local_root() -> None:
    """A service's part of a distributed trace is complete without the caller's span."""
    h = Harness()
    entry = Span(trace_id=tid(5), span_id=sid(1), parent_span_id=sid(77), flags=0x300, name="server")
    child = Span(trace_id=tid(5), span_id=sid(2), parent_span_id=sid(1), name="llm")
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[child, entry])])]
    )
    h.add(*split_request(request).records)
    assert h.reasons() == [(tid(5), "complete")]


def test_parent_not_marked_remote_makes_the_trace_wait() -> None:
    h = Harness()
    h.add(rec(5, 1, 77), rec(5, 2, 1))
    assert h.released == []


# -- timeouts ---------------------------------------------------------------------------------------
def test_missing_parent_waits_decision_wait_then_times_out() -> None:
    h = Harness(decision_wait=2.0)
    h.add(rec(1, 1), rec(1, 4, 2))  # span 2 never arrives
    h.clock.now += 1.999
    assert h.assembler.expire() == 0
    assert h.released == []
    h.clock.now += 0.001
    assert h.assembler.expire() == 1
    assert h.reasons() == [(tid(1), "timeout")]
    assert h.released[0].analyzable
    h.assert_empty()


def test_wait_restarts_with_each_new_span() -> None:
    h = Harness(decision_wait=2.0)
    h.add(rec(1, 1), rec(1, 3, 2))
    h.clock.now += 1.5
    h.add(rec(1, 4, 2))
    h.clock.now += 1.5  # 3 s after the first span, 1.5 s after the last
    assert h.assembler.expire() == 0
    h.clock.now += 0.5
    assert h.assembler.expire() == 1
    assert len(h.released[0].spans) == 3


def test_trace_without_root_times_out() -> None:
    h = Harness(decision_wait=1.0)
    h.add(rec(1, 2, 1), rec(1, 3, 2))  # root 1 missing; 3's parent 2 is present
    h.clock.now += 1.0
    assert h.assembler.expire() == 1
    assert h.reasons() == [(tid(1), "timeout")]


def test_expire_releases_only_expired_traces_oldest_first() -> None:
    h = Harness(decision_wait=2.0)
    h.add(rec(1, 2, 1))
    h.clock.now += 1.0
    h.add(rec(2, 2, 1))
    h.clock.now += 1.0
    h.add(rec(3, 2, 1))
    h.add(rec(1, 3, 1))  # touches trace 1 again: now the most recent
    h.clock.now += 1.0
    assert h.assembler.expire() == 1
    assert h.reasons() == [(tid(2), "timeout")]
    h.clock.now += 1.0
    assert h.assembler.expire() == 2
    assert h.reasons()[1:] == [(tid(3), "timeout"), (tid(1), "timeout")]


# -- duplicates -------------------------------------------------------------------------------------
def test_duplicates_go_to_on_duplicate_and_the_trace_keeps_one_copy() -> None:
    h = Harness()
    first = rec(1, 2, 1, size=7)
    again = rec(1, 2, 1, size=7)  # a client retry: same span id, another object
    same_call = rec(1, 2, 1, size=7)
    h.add(first, same_call)
    h.add(again)
    assert h.duplicates == [same_call, again]
    assert h.assembler.buffered_spans == 1
    assert h.assembler.buffered_bytes == 7
    h.add(rec(1, 1))
    assert h.reasons() == [(tid(1), "complete")]
    assert h.released[0].spans[0] is first
    assert [r.span_id for r in h.released[0].spans] == [sid(2), sid(1)]
    h.assert_empty()


def test_duplicate_root_does_not_release_twice() -> None:
    h = Harness()
    h.add(rec(1, 1), rec(1, 1))
    assert h.reasons() == [(tid(1), "complete")]
    assert len(h.duplicates) == 1


def test_same_span_id_in_another_trace_is_not_a_duplicate() -> None:
    h = Harness()
    h.add(rec(1, 2, 1), rec(2, 2, 1))
    assert h.duplicates == []
    assert h.assembler.buffered_spans == 2


# -- bounds -----------------------------------------------------------------------------------------
def test_max_traces_evicts_the_least_recently_touched() -> None:
    h = Harness(max_traces=2)
    h.add(rec(1, 2, 1))
    h.add(rec(2, 2, 1))
    h.add(rec(1, 3, 1))  # trace 1 touched again: trace 2 is now the oldest
    h.add(rec(3, 2, 1))
    assert h.reasons() == [(tid(2), "evicted_max_traces")]
    assert not h.released[0].analyzable
    assert len(h.assembler) == 2
    h.add(rec(4, 2, 1), rec(5, 2, 1))
    assert h.reasons()[1:] == [(tid(1), "evicted_max_traces"), (tid(3), "evicted_max_traces")]
    assert [r.span_id for r in h.released[1].spans] == [sid(2), sid(3)]


def test_max_bytes_evicts_the_least_recently_touched() -> None:
    h = Harness(max_bytes=100)
    h.add(rec(1, 2, 1, size=40))
    h.add(rec(2, 2, 1, size=40))
    h.add(rec(1, 3, 1, size=10))  # 90 bytes; trace 2 is the oldest now
    assert h.released == []
    h.add(rec(3, 2, 1, size=30))  # 120 > 100: trace 2 goes (80 left)
    assert h.reasons() == [(tid(2), "evicted_max_bytes")]
    assert h.assembler.buffered_bytes == 80
    h.add(rec(4, 2, 1, size=100))  # 180: traces 1 then 3 go
    assert h.reasons()[1:] == [(tid(1), "evicted_max_bytes"), (tid(3), "evicted_max_bytes")]
    assert h.assembler.buffered_bytes == 100
    assert h.assembler.buffered_spans == 1


def test_a_trace_bigger_than_max_bytes_is_evicted_not_dropped() -> None:
    h = Harness(max_bytes=50)
    h.add(rec(1, 2, 1, size=80))
    assert h.reasons() == [(tid(1), "evicted_max_bytes")]
    assert len(h.released[0].spans) == 1
    h.assert_empty()


def test_complete_traces_leave_before_bounds_are_checked() -> None:
    """A trace completed by this add() is released as complete, not evicted."""
    h = Harness(max_traces=1)
    h.add(rec(1, 2, 1))
    h.add(rec(1, 1), rec(2, 2, 1))
    assert h.reasons() == [(tid(1), "complete")]


# -- flush and accounting ---------------------------------------------------------------------------
def test_flush_releases_everything_for_shutdown() -> None:
    h = Harness()
    h.add(rec(1, 2, 1, size=5), rec(2, 3, 1, size=6), rec(2, 4, 3, size=7))
    assert h.assembler.buffered_bytes == 18
    assert h.assembler.buffered_spans == 3
    h.assembler.flush()
    assert sorted(h.reasons()) == [(tid(1), "shutdown"), (tid(2), "shutdown")]
    assert all(t.analyzable for t in h.released)
    h.assert_empty()
    h.assembler.flush()  # nothing left: nothing more
    assert len(h.released) == 2


def test_expire_on_an_empty_buffer() -> None:
    h = Harness()
    assert h.assembler.expire() == 0


# -- no span lost or doubled, whatever happens ------------------------------------------------------
_events = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            st.lists(
                st.tuples(
                    st.integers(1, 6),  # trace
                    st.integers(1, 6),  # span
                    st.integers(0, 6),  # parent (0: root)
                    st.integers(0, 40),  # size
                ),
                min_size=1,
                max_size=6,
            ),
        ),
        st.tuples(st.just("tick"), st.floats(0, 1.5)),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(_events, st.integers(0, 4), st.integers(0, 120))
def test_property_every_span_comes_out_exactly_once(
    events: list[tuple[str, object]], max_traces: int, max_bytes: int
) -> None:
    h = Harness(decision_wait=1.0, max_traces=max_traces, max_bytes=max_bytes)
    added: list[SpanRecord] = []
    for kind, payload in events:
        if kind == "add":
            batch = [rec(t, s, p, size) for t, s, p, size in payload]  # type: ignore[attr-defined]
            added.extend(batch)
            h.add(*batch)
            assert len(h.assembler) <= max_traces
            assert h.assembler.buffered_bytes <= max_bytes
        else:
            h.clock.now += payload  # type: ignore[operator]
            h.assembler.expire()
        held = h.assembler.buffered_spans
        released = sum(len(t.spans) for t in h.released)
        assert held + released + len(h.duplicates) == len(added)
    h.assembler.flush()
    h.assert_empty()
    out = [id(r) for t in h.released for r in t.spans] + [id(r) for r in h.duplicates]
    assert Counter(out) == Counter(id(r) for r in added)
    for trace in h.released:
        assert {r.trace_id for r in trace.spans} == {trace.trace_id}
        assert trace.size == sum(len(r.data) for r in trace.spans)
        assert len({r.span_id for r in trace.spans}) == len(trace.spans)
        if trace.reason == "complete":
            ids = {r.span_id for r in trace.spans}
            assert any(not r.parent_span_id for r in trace.spans)
            assert all(not r.parent_span_id or r.parent_span_id in ids for r in trace.spans)


def test_max_bytes_counts_what_each_span_takes_besides_its_bytes() -> None:
    """Many small spans: each costs its record and ids (~470 bytes measured) besides its bytes, so
    assembler.max_bytes bounds their memory too (it counted 12 MB for 156 MiB of RSS)."""
    from otelsignals.pipeline.assembler import SPAN_RECORD_BYTES

    h = Harness(max_bytes=10 * (SPAN_RECORD_BYTES + 40), span_record_bytes=SPAN_RECORD_BYTES)
    h.add(*[rec(n, 2, 1, size=40) for n in range(1, 11)])  # ten waiting traces: at the bound
    assert h.released == [] and h.assembler.buffered_bytes == 10 * (SPAN_RECORD_BYTES + 40)
    h.add(rec(11, 2, 1, size=40))
    assert h.reasons() == [(tid(1), "evicted_max_bytes")]
    assert h.assembler.buffered_bytes == 10 * (SPAN_RECORD_BYTES + 40)
    h.assembler.flush()
    h.assert_empty()
