"""A cheap pre-filter: could this serialized span carry GenAI data?

Attribute keys and event names sit verbatim in a span's protobuf bytes, so a few substring searches
tell "certainly not GenAI" (the vast majority of spans, which then cost nothing more) from "worth
parsing". The markers searched for are the key prefixes the registered readers declare
(``Reader.key_prefixes``), so a reader of a new convention is offered its spans as soon as it is
registered. A marker found inside a value is a harmless false positive: the readers then find
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable


def genai_markers(key_prefixes: Iterable[str]) -> tuple[bytes, ...]:
    """The byte strings to search for: per declared prefix (in declared order) the shortest
    declared prefix it contains, each once. A span holding ``gen_ai.`` holds ``ai.`` too, so one
    search does for both and the same spans pass."""
    prefixes = tuple(dict.fromkeys(key_prefixes))
    shortest = (min((other for other in prefixes if other in prefix), key=len) for prefix in prefixes)
    return tuple(dict.fromkeys(prefix.encode() for prefix in shortest))


def carries_any(span_bytes: bytes, markers: tuple[bytes, ...]) -> bool:
    # A plain loop rather than any(...): this runs once per span, and a generator costs about as
    # much as one search.
    for marker in markers:  # noqa: SIM110  (see above)
        if marker in span_bytes:
            return True
    return False
