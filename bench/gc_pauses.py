"""Garbage-collector pauses with many open conversations, with and without otelsignals' policy
(otelsignals/gc_policy.py), in one process.

    .venv/bin/python bench/gc_pauses.py [--conversations 50000] [--json PATH]

(The memory model of otelsignals/pipeline/sessions.py is fitted by bench/session_memory.py.)

The 473 real agent conversations of ../shared/data/agent-trajectories (converted with its
to_otlp.py) are analysed by the pipeline's Analyzer; their states are then copied under new keys
until ``--conversations`` are open, as a sidecar holding that many sessions would. Then, for each
setting (Python's default collector; the policy: start-up freeze, freezes every second, young
threshold 2,000), the bench measures what a full collection costs now and the pauses the collector
takes on its own while another 2,000 traces are analysed. A full collection with the policy only
examines what is younger than the last freeze, which is what a real process triggers.

The states are copied with ``copy.deepcopy``, which the compiled core's classes do not support, so
this bench runs the core's source (OTELSIGNALS_PURE_PYTHON=1, set here; README, "The compiled
core"). What the collector walks is the same either way: an open real conversation adds 227.3
GC-tracked objects compiled and from source (bench/RESULTS.md, "The compiled core").
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["OTELSIGNALS_PURE_PYTHON"] = "1"  # before otelsignals is imported: see the docstring

from otelsignals.config_loading import load_config  # noqa: E402
from otelsignals.gc_policy import GcPolicy  # noqa: E402
from otelsignals.offline import read_requests, traces_in_time_order  # noqa: E402
from otelsignals.pipeline.analyzer import Analyzer  # noqa: E402
from otelsignals.pipeline.assembler import ReleasedTrace  # noqa: E402
from otelsignals.telemetry import Telemetry  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "agent-trajectories"


def real_traces(count: int | None = None) -> list[ReleasedTrace]:
    """The real trajectories' traces in time order; ``count``: only that many trajectories (one file
    each), spread evenly over the set's sorted files, so that every domain keeps its share."""
    with tempfile.TemporaryDirectory(prefix="gc-pauses-") as directory:
        out = Path(directory)
        subprocess.run(
            [sys.executable, str(DATA / "to_otlp.py"), "--out", str(out)], check=True, capture_output=True
        )
        paths = sorted(out.rglob("*.binpb"))
        if count is not None and count > len(paths):
            raise ValueError(f"the real set has {len(paths)} conversations, not {count}")
        if count is not None and count < len(paths):
            paths = [paths[i * len(paths) // count] for i in range(count)]
        return traces_in_time_order(request for path in paths for request in read_requests(path))


def open_conversations(traces: list[ReleasedTrace], count: int) -> Analyzer:
    config = load_config(None, environ={})
    config.sessions.max_sessions = count + 10_000
    analyzer = Analyzer(Telemetry(), config.sessions, config.signals, config.evals, config.analyzer)
    for trace in traces:
        analyzer.process(trace)
    originals = list(analyzer.sessions)
    copies = 0
    while len(analyzer.sessions) < count:
        source = originals[copies % len(originals)]
        copies += 1
        state = copy.deepcopy(source)
        key = f"{source.conversation.key}#copy{copies}"
        state.conversation.key = key
        analyzer.sessions._states[key] = state  # as if its traces had come
    return analyzer


class Pauses:
    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._started))


def fresh_analyzer() -> Analyzer:
    config = load_config(None, environ={})
    return Analyzer(Telemetry(), config.sessions, config.signals, config.evals, config.analyzer)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(traces: list[ReleasedTrace], policy_on: bool) -> dict[str, float]:
    policy = GcPolicy(1.0 if policy_on else 0.0, CollectorRegistry())
    gc.unfreeze()
    gc.collect()
    policy.start()
    tracked = len(gc.get_objects())  # frozen objects are out of reach: not listed
    started = time.perf_counter()
    gc.collect()
    full = time.perf_counter() - started
    pauses = Pauses()
    gc.callbacks.append(pauses)
    # Continued traffic: the real conversations again, as new ones, in a second analyzer (what the
    # collector examines is every tracked object of the process, whichever analyzer holds it).
    analyzer = fresh_analyzer()
    began = time.perf_counter()
    for trace in traces:
        analyzer.process(trace)
        policy.tick()
    elapsed = time.perf_counter() - began
    gc.callbacks.remove(pauses)
    policy.stop()
    durations = [d for _, d in pauses.pauses]
    return {
        "tracked_objects_in_reach": tracked,
        "full_collection_ms": full * 1000,
        "automatic_collections": len(durations),
        "worst_pause_ms": max(durations, default=0.0) * 1000,
        "gc_share_of_time": sum(durations) / elapsed if elapsed else 0.0,
        "full_collections_seen": sum(1 for g, _ in pauses.pauses if g == 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=50_000)
    parser.add_argument("--traces", type=int, default=2_000, help="traces analysed while measuring")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    traces = real_traces()
    print(f"{len(traces)} real traces; opening {args.conversations} conversations", file=sys.stderr)
    held = open_conversations(traces, args.conversations)
    more = traces[: args.traces]
    results = {}
    for name, on in (("python default", False), ("otelsignals policy", True)):
        print(f"measuring: {name}", file=sys.stderr)
        results[name] = measure(more, on)
    print(
        f"{len(held.sessions):,} open conversations ({rss_mib():,.0f} MiB RSS), "
        f"{len(more):,} more traces analysed per setting\n"
    )
    keys = list(next(iter(results.values())))
    print("| figure | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))
    for key in keys:
        cells = [f"{r[key]:,.3f}" if isinstance(r[key], float) else f"{r[key]:,}" for r in results.values()]
        print(f"| {key} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
