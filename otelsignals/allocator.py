"""What the C allocator holds, beside the process's resident memory: how much of it is live, and
how much is memory freed and kept for reuse.

A burst fills the backlogs (`analyzer.queue_max_bytes`, `exporter.queue.max_bytes`, the requests
being read); once they drain, glibc's malloc keeps most of the freed memory mapped for the next
burst, so the resident memory stays near its high-water mark while little of it is in use. Without
these figures that looks like a leak. ``otelsignals_malloc_bytes{state}`` tells the two apart:

- ``in_use``: blocks handed out by malloc and not freed (large strings, request and batch buffers;
  Python's own small objects live in the 1 MiB arenas it maps itself and are not counted here);
- ``free``: freed memory malloc keeps in its heaps (not all of it resident: pages never touched
  again may have been given back);
- ``mmapped``: large blocks malloc mapped on their own (the embedding model's tables).

Read from ``mallinfo2()`` (glibc 2.33 and later) at each scrape; absent elsewhere (musl, macOS).
``mallinfo2`` walks every arena's free lists under its lock, so its cost grows with fragmentation:
scraped every few seconds it is negligible (bench/RESULTS.md gives the measured cost).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class _MallInfo2(ctypes.Structure):
    # glibc's struct mallinfo2, every field a size_t, in this order.
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",  # bytes obtained from the system for the heaps (main and thread arenas)
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",  # bytes in blocks mapped on their own
            "usmblks",
            "fsmblks",
            "uordblks",  # bytes handed out, not freed
            "fordblks",  # bytes free in the heaps
            "keepcost",
        )
    ]


def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    try:
        # The C library the process already runs on (no ldconfig lookup).
        function = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):  # not glibc, or a glibc before 2.33
        return None
    function.restype = _MallInfo2
    function.argtypes = []
    return function


_MALLINFO2 = _mallinfo2()


def malloc_bytes() -> dict[str, int] | None:
    """The allocator's bytes by state (``in_use``, ``free``, ``mmapped``); None without glibc."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return {"in_use": info.uordblks, "free": info.fordblks, "mmapped": info.hblkhd}


class MallocCollector(Collector):
    """``otelsignals_malloc_bytes{state}`` at each scrape (nothing where glibc is not the allocator)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    def describe(self) -> Iterator[Metric]:
        # The name, for the registry's duplicate check, without reading the allocator.
        if _MALLINFO2 is not None:
            yield _family()

    def collect(self) -> Iterator[Metric]:
        figures = malloc_bytes()
        if figures is None:
            return
        family = _family()
        for state, value in figures.items():
            family.add_metric([state], value)
        yield family


def _family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "otelsignals_malloc_bytes",
        "The C allocator's memory: in_use (not freed; its growth is what a leak of large objects "
        "shows), free (freed and kept for reuse, not all of it resident), mmapped (large blocks "
        "mapped on their own). Resident memory also holds Python's small-object arenas, libraries "
        "and stacks.",
        labels=["state"],
    )
