"""The garbage-collection policy (otelsignals/gc_policy.py) and the property it relies on: the
conversation state the analysis keeps never forms reference cycles, so freezing it out of the
collector's reach leaks nothing — a closed session is freed by reference counting alone."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from bench import triage_real
from otelsignals.config_loading import load_config
from otelsignals.gc_policy import YOUNG_THRESHOLD, GcPolicy
from otelsignals.offline import read_requests, traces_in_time_order
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.enricher import Enricher
from otelsignals.telemetry import Telemetry

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def collector_restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    gc.enable()


def _analyse_and_close_everything(paths: list[Path]) -> int:
    """Cyclic garbage left by analysing ``paths``' traces and closing every session."""
    config = load_config(None, environ={})
    analyzer = Analyzer(Telemetry(), config.sessions, config.signals, config.evals, config.analyzer)
    enricher = Enricher(config.signals)
    traces = traces_in_time_order(request for path in paths for request in read_requests(path))
    # Lazily built module state (phrase automata, caches) is not what is measured.
    for trace in traces[:5]:
        analyzer.process(trace)
    gc.collect()
    gc.disable()
    for trace in traces:
        analysis = analyzer.process(trace)
        if analysis is not None:
            enricher.enrich(trace, analysis)
    assert len(analyzer.sessions) > 0
    analyzer.sessions.ttl = -1.0
    analyzer.expire()
    assert len(analyzer.sessions) == 0
    del traces
    # The analyzer itself stays: it lives as long as the process (and does hold cycles).
    return gc.collect()


def test_instrumentation_fixtures_leave_no_cyclic_garbage(collector_restored) -> None:
    paths = [path for path in sorted(FIXTURES.rglob("*.binpb")) if not path.name.endswith(".logs.binpb")]
    assert len(paths) >= 10
    assert _analyse_and_close_everything(paths) == 0


@pytest.mark.slow
def test_real_agent_conversations_leave_no_cyclic_garbage(collector_restored, tmp_path: Path) -> None:
    data = triage_real.DEFAULT_DATA
    if not (data / "dev.jsonl").exists():
        pytest.skip(f"the development set is not beside the checkout ({data})")
    triage_real.convert(data, tmp_path)
    paths = sorted(tmp_path.rglob("*.binpb"))[:120]
    assert _analyse_and_close_everything(paths) == 0


def test_start_freezes_what_is_loaded_and_raises_the_young_threshold(collector_restored) -> None:
    policy = GcPolicy(60.0, CollectorRegistry())
    policy.start()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
    kept = [[n] for n in range(1000)]  # survivors of the next young collection
    frozen = gc.get_freeze_count()
    policy.tick()  # not yet: the interval has not passed
    assert gc.get_freeze_count() == frozen
    policy.freeze_interval = 0.001
    time.sleep(0.002)
    policy.tick()
    assert gc.get_freeze_count() >= frozen + len(kept)
    policy.stop()
    assert gc.get_threshold()[0] != YOUNG_THRESHOLD


def test_cyclic_garbage_is_collected_before_it_is_frozen(collector_restored) -> None:
    """Each freeze first collects the two younger generations: an unreachable cycle that aged a
    generation before it was dropped is freed, not frozen for good."""
    policy = GcPolicy(0.001, CollectorRegistry())
    policy.start()
    gc.disable()  # no collection of its own in between: only the policy's tick collects

    class Node:
        pass

    try:
        cycle = Node()
        cycle.itself = cycle  # type: ignore[attr-defined]
        gc.collect(0)  # survives a young collection: now in generation 1
        gone = weakref.ref(cycle)
        del cycle
        time.sleep(0.002)
        policy.tick()
        assert gone() is None  # collected before the freeze (a young-only collection would freeze it)
    finally:
        policy.stop()


def test_pauses_are_timed_by_generation_even_with_the_policy_off(collector_restored) -> None:
    registry = CollectorRegistry()
    policy = GcPolicy(0.0, registry)
    thresholds = gc.get_threshold()
    policy.start()
    assert gc.get_threshold() == thresholds  # off: Python's collector as it was
    gc.collect()
    policy.stop()
    gc.collect()  # after stop: not counted
    count = registry.get_sample_value("otelsignals_gc_pause_seconds_count", {"generation": "2"})
    assert count == 1
