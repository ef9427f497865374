"""otelsignals_malloc_bytes: the C allocator's live and freed-and-kept memory, read from glibc."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from otelsignals import allocator
from otelsignals.allocator import MallocCollector, malloc_bytes

pytestmark = pytest.mark.skipif(malloc_bytes() is None, reason="glibc's mallinfo2 is not available")


def test_live_blocks_are_in_use_and_freed_ones_leave_it() -> None:
    # In a fresh interpreter, so that other tests' allocations do not blur the figures: 800 blocks
    # of 96 KiB (below malloc's mmap threshold: they come from the heap) are ~75 MiB in use while
    # held, and no longer in use once freed (whether malloc keeps them as free memory or gives
    # the top of its heap back).
    script = textwrap.dedent(
        """
        import json
        from otelsignals.allocator import malloc_bytes
        before = malloc_bytes()
        blocks = [bytearray(96 * 1024) for _ in range(800)]
        held = malloc_bytes()
        del blocks
        after = malloc_bytes()
        print(json.dumps([before, held, after]))
        """
    )
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    before, held, after = json.loads(output)
    allocated = 800 * 96 * 1024
    assert held["in_use"] - before["in_use"] >= 0.95 * allocated
    assert held["in_use"] - after["in_use"] >= 0.95 * allocated
    assert held["mmapped"] - before["mmapped"] < allocated / 10  # not mapped one by one


def test_the_gauge_is_scraped_by_state() -> None:
    registry = CollectorRegistry(auto_describe=True)
    MallocCollector(registry)
    figures = {
        state: registry.get_sample_value("otelsignals_malloc_bytes", {"state": state})
        for state in ("in_use", "free", "mmapped")
    }
    assert all(value is not None and value >= 0 for value in figures.values())
    assert figures["in_use"] > 1024 * 1024  # this interpreter holds megabytes from malloc


def test_absent_without_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_MALLINFO2", None)
    registry = CollectorRegistry(auto_describe=True)
    MallocCollector(registry)
    assert malloc_bytes() is None
    assert b"otelsignals_malloc_bytes" not in generate_latest(registry)
