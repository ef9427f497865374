"""A cheap pre-filter: could this serialized span carry GenAI data?

Attribute keys and event names sit verbatim in a span's protobuf bytes, so a few substring searches
tell "certainly not GenAI" (the vast majority of spans, which then cost nothing more) from "worth
parsing". The markers searched for are the key prefixes the registered readers declare
(``Reader.key_prefixes``), so a reader of a new convention is offered its spans as soon as it is
registered. A marker found inside a value is a harmless false positive: the readers then find
nothing.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence


def genai_markers(key_prefixes: Iterable[str]) -> tuple[bytes, ...]:
    """The byte strings to search for: per declared prefix (in declared order) the shortest
    declared prefix it contains, each once. A span holding ``gen_ai.`` holds ``ai.`` too, so one
    search does for both and the same spans pass."""
    prefixes = tuple(dict.fromkeys(key_prefixes))
    if "" in prefixes:  # it would mark every span, and make the slice search never move on
        raise ValueError("a reader declares an empty key prefix")
    shortest = (min((other for other in prefixes if other in prefix), key=len) for prefix in prefixes)
    return tuple(dict.fromkeys(prefix.encode() for prefix in shortest))


def carries_any(span_bytes: bytes, markers: tuple[bytes, ...]) -> bool:
    # A plain loop rather than any(...): this runs once per span, and a generator costs about as
    # much as one search.
    for marker in markers:  # noqa: SIM110  (see above)
        if marker in span_bytes:
            return True
    return False


def slices_carrying_any(
    data: bytes, starts: Sequence[int], ends: Sequence[int], markers: tuple[bytes, ...]
) -> list[bool]:
    """For each slice ``data[starts[i]:ends[i]]`` (``starts[i] <= ends[i]``, in ascending order,
    disjoint; not checked: another layout gives wrong answers), what :func:`carries_any` says of
    it, from searches over ``data`` itself rather than a Python call per slice and marker (a
    request's spans). Each marker is searched for only in the runs of slices not yet known to hold
    one: a GenAI span, often the largest of its request, is not searched again for the other
    markers. Within a run, after a hit the search resumes at the next slice's start: at most one
    search per slice and marker. A marker outside every slice, or across a slice's end, marks
    none. Markers must not be empty (genai_markers refuses an empty prefix)."""
    count = len(starts)
    held = [False] * count + [True]  # the last: a stop for the runs' search, not a slice
    find = data.find
    for marker in markers:
        size = len(marker)
        first = 0
        while True:
            try:
                first = held.index(False, first)  # a run of slices not known to hold a marker...
            except ValueError:
                break
            after = held.index(True, first)  # ...up to here
            end = ends[after - 1]
            at = find(marker, starts[first], end)
            while at >= 0:
                # starts[first] <= at and at + size <= end <= starts[after]: first <= i < after
                i = bisect_right(starts, at) - 1
                if at + size <= ends[i]:
                    held[i] = True
                # Either way slice i is done: held, or this hit crosses its end, and then so does
                # any later one starting in it (an earlier one wholly inside would have been found).
                if i + 1 >= after:
                    break
                at = find(marker, starts[i + 1], end)
            first = after
    del held[count]
    return held
