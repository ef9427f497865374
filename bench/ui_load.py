"""How long the triage page takes to load with 10,000 indexed conversations, beside an empty index.

    python bench/ui_load.py [--conversations 10000] [--loads 7]

Fills a conversation index (SQLite, as the sidecar's default) with synthetic conversations spread over
the last 24 hours — qualities, priorities, signal types, 20 signals and 10 per-trace metrics each, no
text — starts ``otelsignals run`` on it, and loads ``/ui`` in Debian's chromium (Playwright) until
the page says it is ready (plots drawn, the first 50 conversations listed). The same with an empty
index in the same run is the baseline. Prints milliseconds per load (median and worst) for both.
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from otelsignals.signals.taxonomy import LEAF_TYPES
from otelsignals.stores.conversation_index import IndexedConversation, open_index

QUALITIES = ("severe", "poor", "neutral", "good", "excellent")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def fill(directory: Path, count: int) -> None:
    rng = random.Random(18)
    now = time.time()
    index = open_index(f"sqlite:///{directory / 'index.db'}")
    rows = []
    for n in range(count):
        types = tuple(sorted(rng.sample(LEAF_TYPES, rng.randint(0, 5))))
        last = now - rng.uniform(0, 86_400)
        detail = {
            "counts": {leaf.rsplit(".", 1)[0]: 1 for leaf in types},
            "signals": [
                {
                    "type": rng.choice(LEAF_TYPES),
                    "message_index": i,
                    "confidence": 0.8,
                    "snippet": None,
                    "metadata": {},
                }
                for i in range(20)
            ],
            "trace_metrics": [
                {
                    "trace_id": f"{n:016x}{i:016x}",
                    "confidence": 0.7,
                    "loop_detection": None,
                    "tool_correctness": 1.0,
                    "coherence": 0.9,
                    "sources": {},
                }
                for i in range(10)
            ],
            "trace_ids": [f"{n:016x}{i:016x}" for i in range(10)],
            "messages": None,
        }
        rows.append(
            IndexedConversation(
                f"conv-{n:05d}",
                f"agent-{n % 7}",
                last - 300,
                last,
                rng.randint(1, 30),
                rng.choice(QUALITIES),
                rng.random(),
                rng.uniform(0, 100),
                rng.random() < 0.3,
                True,
                types,
                detail,
            )
        )
        if len(rows) == 1000:
            index.upsert(rows)
            rows = []
    index.upsert(rows)
    index.close()


def load_times(directory: Path, loads: int) -> list[float]:
    admin = free_port()
    config = {
        "receiver": {
            "grpc": {"endpoint": f"127.0.0.1:{free_port()}"},
            "http": {"endpoint": f"127.0.0.1:{free_port()}"},
        },
        "admin": {"endpoint": f"127.0.0.1:{admin}"},
        "exporter": {"file_path": str(directory / "out.jsonl")},
        "store": {"directory": str(directory)},
    }
    path = directory / "otelsignals.yaml"
    path.write_text(yaml.safe_dump(config))
    process = subprocess.Popen([sys.executable, "-m", "otelsignals.cli", "run", "--config", str(path)])
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = browser.new_page()
            times = []
            for _ in range(loads):
                started = time.perf_counter()
                page.goto(f"http://127.0.0.1:{admin}/ui")
                page.wait_for_selector("body[data-ready=true]", timeout=30_000)
                times.append((time.perf_counter() - started) * 1000)
            browser.close()
        return times
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=7)
    args = parser.parse_args()
    results = {}
    for name, count in (
        ("empty index (baseline)", 0),
        (f"{args.conversations:,} conversations", args.conversations),
    ):
        with tempfile.TemporaryDirectory() as directory:
            if count:
                fill(Path(directory), count)
            results[name] = load_times(Path(directory), args.loads)
    print("| index | median load (ms) | worst (ms) |\n|---|---|---|")
    for name, times in results.items():
        print(f"| {name} | {statistics.median(times):.0f} | {max(times):.0f} |")
    baseline, full = (statistics.median(t) for t in results.values())
    print(f"\nratio (full / empty), median: {full / baseline:.2f}")


if __name__ == "__main__":
    main()
