"""slices_carrying_any: which slices of a request's bytes hold a GenAI key prefix, found by searching
the request itself; it must say what carries_any says of each slice alone."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelsignals.conventions.markers import carries_any, genai_markers, slices_carrying_any

MARKERS = (b"ai.", b"llm.")


def _layout(*parts: tuple[bytes, bool]) -> tuple[bytes, list[int], list[int]]:
    """Bytes made of ``parts``, each (bytes, whether it is a slice), and the slices' starts and ends."""
    data, starts, ends = b"", [], []
    for chunk, is_slice in parts:
        if is_slice:
            starts.append(len(data))
            ends.append(len(data) + len(chunk))
        data += chunk
    return data, starts, ends


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        pytest.param([(b"key gen_ai.system", True)], [True], id="one slice holding a marker"),
        pytest.param([(b"db.system", True), (b"x llm.model", True)], [False, True], id="the second marker"),
        pytest.param([(b"gen_ai.a ai.b", True), (b"plain", True)], [True, False], id="many in one slice"),
        # near-misses: the bytes hold a marker, no slice does
        pytest.param([(b"service ai.", False), (b"db.system", True)], [False], id="marker before the slices"),
        pytest.param([(b"db", True), (b"ai.x", False), (b"http", True)], [False, False], id="marker between"),
        pytest.param([(b"plain", True), (b"llm.", False)], [False], id="marker after the slices"),
        pytest.param([(b"xx a", True), (b"i.yy", True)], [False, False], id="marker across two slices"),
        pytest.param([(b"x a", True), (b"i.", False), (b"ai.", True)], [False, True], id="across, then in"),
        pytest.param([(b"ai", True), (b".ai.", True)], [False, True], id="an edge, then a marker"),
        pytest.param([], [], id="no slices"),
    ],
)
def test_slices_holding_a_marker(parts: list[tuple[bytes, bool]], expected: list[bool]) -> None:
    data, starts, ends = _layout(*parts)
    assert slices_carrying_any(data, starts, ends, MARKERS) == expected


_BYTES = st.sampled_from([b"a", b"i", b".", b"l", b"x"])
_WORDS = st.lists(_BYTES, min_size=1, max_size=4).map(b"".join)


@given(
    st.lists(st.tuples(st.lists(_BYTES, max_size=12).map(b"".join), st.booleans()), max_size=8),
    st.lists(_WORDS, min_size=1, max_size=3).map(tuple),  # overlapping, prefixes of one another
)
def test_it_says_what_searching_each_slice_alone_says(
    parts: list[tuple[bytes, bool]], markers: tuple[bytes, ...]
) -> None:
    data, starts, ends = _layout(*parts)
    alone = [carries_any(data[start:end], markers) for start, end in zip(starts, ends, strict=True)]
    assert slices_carrying_any(data, starts, ends, markers) == alone


def test_an_empty_key_prefix_is_refused() -> None:
    with pytest.raises(ValueError, match="empty key prefix"):
        genai_markers(["gen_ai.", ""])


class _Searches(bytes):
    """Bytes that note the range of each search made in them."""

    ranges: list[tuple[bytes, int, int]]

    def find(self, sub, start=None, end=None):  # type: ignore[override]
        self.ranges.append((sub, start or 0, len(self) if end is None else end))
        return super().find(sub, start, end)


def test_a_span_known_to_hold_a_marker_is_not_searched_for_the_others() -> None:
    # A chat span is often most of its request: searching it again for each marker it lacks cost
    # 100 times what its marks are worth on an agent's requests.
    data, starts, ends = _layout((b"plain", True), (b"gen_ai.input " + b"x" * 1000, True), (b"db", True))
    searched = _Searches(data)
    searched.ranges = []
    assert slices_carrying_any(searched, starts, ends, MARKERS) == [False, True, False]
    later = [(start, end) for marker, start, end in searched.ranges if marker == b"llm."]
    assert later and all(end <= starts[1] or start >= ends[1] for start, end in later)
