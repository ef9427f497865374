"""How the process uses Python's cyclic garbage collector: no stop-the-world pause that grows with
the number of open conversations.

A full collection examines every tracked object: with tens of thousands of open conversations
(about a thousand objects each) that stopped the process for seconds. Conversation state never
forms reference cycles (tests/test_gc_policy.py checks it over real traces), so it is freed by
reference counting when its session closes and the cyclic collector has nothing to find in it. So:

- at start-up, and then every ``service.gc_freeze_interval``, what has survived a young
  collection is moved to the permanent generation (``gc.freeze()``, constant time), which later
  collections skip: each collection looks only at what is younger than the last freeze;
- young collections run every 2,000 allocations rather than 700 (fewer, still short passes), and
  before each freeze the two younger generations are collected, so that cyclic garbage that died
  there is freed rather than frozen for good (a frozen unreachable cycle is never collected: a
  refused gRPC request once stayed that way with its body, see grpc_receiver.py). The oldest
  generation not frozen yet (what survived a generation-1 collection since the last freeze) is
  frozen as it is: collecting it too doubled the collector's time (bench/RESULTS.md);
- every pause is timed: ``otelsignals_gc_pause_seconds{generation}``, and the objects frozen are
  counted (``otelsignals_gc_frozen_objects_total``; ``gc.get_freeze_count()`` walks them all, so it
  is not asked).
"""

from __future__ import annotations

import gc
import time

from prometheus_client import CollectorRegistry, Counter, Histogram

YOUNG_THRESHOLD = 2_000
_PAUSE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class GcPolicy:
    def __init__(self, freeze_interval: float, registry: CollectorRegistry) -> None:
        self.freeze_interval = freeze_interval
        self.pauses = Histogram(
            "otelsignals_gc_pause_seconds",
            "Stop-the-world pauses of Python's cyclic garbage collector, by generation collected.",
            ["generation"],
            buckets=_PAUSE_BUCKETS,
            registry=registry,
        )
        self._pause_by_generation = [self.pauses.labels(str(g)) for g in range(3)]
        self.frozen = Counter(
            "otelsignals_gc_frozen_objects",
            "Objects moved out of the collector's reach (start-up objects and long-lived state).",
            registry=registry,
        )
        self._started_at = 0.0
        self._last_freeze = 0.0
        self._previous_thresholds = gc.get_threshold()

    @property
    def enabled(self) -> bool:
        return self.freeze_interval > 0

    def start(self) -> None:
        """Call once the process has loaded what it keeps for its lifetime (models, phrase data).
        The start-up collection is not timed: it happens before the process takes any data."""
        self._previous_thresholds = gc.get_threshold()
        if self.enabled:
            gc.collect()
            self._freeze()
            _, older, oldest = self._previous_thresholds
            gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
            self._last_freeze = time.monotonic()
        gc.callbacks.append(self._timed)

    def tick(self) -> None:
        """From the pipeline's ticker: freeze what survived since the last time, if it is time."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last_freeze < self.freeze_interval:
            return
        self._last_freeze = now
        # Cyclic garbage of the younger generations is collected first (a short pass: everything
        # older than the last freeze is out of it).
        gc.collect(1)
        self._freeze()

    def _freeze(self) -> None:
        # What is in reach now is what was not frozen before: counted before it goes.
        self.frozen.inc(sum(len(gc.get_objects(generation)) for generation in range(3)))
        gc.freeze()

    def stop(self) -> None:
        if self._timed in gc.callbacks:
            gc.callbacks.remove(self._timed)
        if self.enabled:
            gc.set_threshold(*self._previous_thresholds)

    def _timed(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started_at = time.perf_counter()
        elif self._started_at:
            self._pause_by_generation[info["generation"]].observe(time.perf_counter() - self._started_at)
            self._started_at = 0.0
