"""bench/session_memory.py --resident: the memory a process's allocators have handed out, beside RSS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from otelsignals.allocator import malloc_bytes

ROOT = Path(__file__).resolve().parents[1]  # where bench/ is importable from


def _fresh_interpreter(script: str) -> list[float]:
    # Python's own small-object allocator, whatever the environment running the tests asks for
    # (PYTHONMALLOC=malloc has none; the debug allocators add a header to every block).
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONMALLOC", "PYTHONDEVMODE")}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=environment,
    )
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_small_objects_held_are_counted_and_freed_ones_are_not() -> None:
    # 200,000 tuples of two floats: a tuple takes a 64-byte block (its header and two slots), a float
    # a 32-byte one, 24.4 MiB in all; bytearrays of 96 KiB come from malloc, not from these blocks.
    before, held, freed, with_large = _fresh_interpreter(
        """
        import json
        from bench.session_memory import small_object_mib
        before = small_object_mib()
        small = [(float(i), float(-i)) for i in range(200_000)]
        held = small_object_mib()
        del small
        freed = small_object_mib()
        large = [bytearray(96 * 1024) for _ in range(200)]
        print(json.dumps([before, held, freed, small_object_mib()]))
        """
    )
    assert 22 <= held - before <= 27
    assert held - freed >= 22
    assert with_large - freed < 2


@pytest.mark.skipif(malloc_bytes() is None, reason="glibc's mallinfo2 is not available")
def test_the_c_allocator_counts_large_blocks_mapped_on_their_own() -> None:
    # 20 blocks of 4 MiB are over malloc's threshold for mapping a block on its own: counted too.
    before, held = _fresh_interpreter(
        """
        import json
        from bench.session_memory import memory_mib
        before = memory_mib()["malloc_in_use"]
        blocks = [bytearray(4 * 2**20) for _ in range(20)]
        print(json.dumps([before, memory_mib()["malloc_in_use"]]))
        """
    )
    assert 78 <= held - before <= 84
