"""What loading the offline embedding model adds to a process's memory.

    python bench/model_memory.py

Each case runs in a fresh process that first imports the sidecar (its usual libraries), then
loads the shipped model (``evals.embeddings.default_embedder``) and embeds one text: the CPU time
that takes, and from /proc/self/status before and after, the RSS it adds, split into anonymous
memory (the process's own) and file pages (mapped files: libraries and the cached table, which
the kernel can drop and other processes share), and the peak (VmHWM) while loading. Cases:

- ``first start``: an empty model cache directory (``evals.model_cache_dir``): the weighted table
  is built and written there;
- ``later starts``: the same directory, now holding the table, which is mapped, and the
  vocabulary (its hashes and frequent words), which is read without pyarrow;
- ``cache not writable``: the table is built and held in the process's memory.

Run with ``PYTHONPATH=<another checkout>`` to measure that tree's code (one from before the cache
loads the model the same way in every case).

``--calls``: the CPU of one embed call as the trace metrics make it (a turn's input and output:
two texts of 50–2,000 characters drawn as bench/agent_workload.py draws them), against the same
call through a dict of every word (the vocabulary's previous form), alternated call by call in
one process so that the machine's drift hits both alike; the outputs are checked equal.

Markdown to stdout.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROBE = """
import json, sys, time
def status():
    fields = {}
    for line in open("/proc/self/status"):
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            fields[name] = int(value.split()[0]) / 1024
    return fields
import otelsignals.sidecar  # the process's usual imports, before the model
from otelsignals.evals.embeddings import default_embedder
before = status()
started = time.process_time()
try:
    embedder = default_embedder(sys.argv[1])
except TypeError:  # a tree from before evals.model_cache_dir (run with PYTHONPATH=that tree)
    embedder = default_embedder()
embedder.embed(["the refund was issued yesterday"])
cpu = time.process_time() - started
print(json.dumps({"before": before, "after": status(), "cpu": {"seconds": cpu}}))
"""


def measure(cache_dir: str, workdir: str) -> dict[str, dict[str, float]]:
    # Not from the checkout's directory: ``-c`` puts the working directory first on sys.path,
    # before PYTHONPATH.
    out = subprocess.run(
        [sys.executable, "-c", PROBE, cache_dir], check=True, capture_output=True, text=True, cwd=workdir
    ).stdout
    result: dict[str, dict[str, float]] = json.loads(out)
    return result


def embed_calls(calls: int, seed: int) -> None:
    import pyarrow.parquet as pq

    sys.path.insert(0, str(Path(__file__).parent))
    from agent_workload import TextPool, log_uniform

    from otelsignals.evals.embeddings import StaticEmbedder, _model_root, _normalise_rows, tokenize

    rng = random.Random(seed)
    pool = TextPool.load()
    pairs = [
        [pool.text(rng, role, log_uniform(rng, 50, 2000)) for role in ("user", "assistant")]
        for _ in range(calls)
    ]
    embedder = StaticEmbedder(cache_size=0)
    table = embedder.model.table
    words = pq.ParquetFile(_model_root() / "glove_6B_index.parquet").read().column(0).to_pylist()
    every_word: dict[str, int] = {}
    for row, word in enumerate(words):
        every_word.setdefault(str(word), row)
    del words

    def through_a_dict(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
        ids: list[int] = []
        offsets: list[int] = []
        rows: list[int] = []
        for row, text in enumerate(texts):
            text_ids = [i for token in tokenize(text) if (i := every_word.get(token)) is not None]
            if text_ids:
                rows.append(row)
                offsets.append(len(ids))
                ids.extend(text_ids)
        if ids:
            out[rows] = np.add.reduceat(table[ids], offsets, axis=0)
        return _normalise_rows(out)

    implementations = {"shipped": embedder._compute, "dict of every word": through_a_dict}
    spent = dict.fromkeys(implementations, 0)
    for call, texts in enumerate(pairs):
        # Each goes first every other call: the second finds the texts and rows in the CPU's caches.
        order = list(implementations) if call % 2 == 0 else list(reversed(implementations))
        outputs = []
        for name in order:
            started = time.thread_time_ns()
            outputs.append(implementations[name](texts))
            spent[name] += time.thread_time_ns() - started
        np.testing.assert_array_equal(outputs[0], outputs[1])
    print(f"\n{calls:,} embed calls of two texts, alternated; µs of CPU per call:\n")
    print("| vocabulary | µs per call |")
    print("|---|---|")
    for name, nanoseconds in spent.items():
        print(f"| {name} | {nanoseconds / calls / 1000:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=0, help="also time this many embed calls (A/B)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="otelsignals-model-cache-") as scratch:
        cache = Path(scratch) / "cache"
        (Path(scratch) / "a-file").write_text("")
        cases = {
            "first start (table built, written to the cache)": str(cache),
            "later starts (table mapped, vocabulary read from the cache)": str(cache),
            "cache not writable (table held in memory)": str(Path(scratch) / "a-file" / "cache"),
        }
        print(
            "| case | load CPU (ms) | RSS added (MiB) | anonymous | file pages "
            "| peak while loading (VmHWM added) |"
        )
        print("|---|---|---|---|---|---|")
        for name, directory in cases.items():
            figures = measure(directory, scratch)
            before, after = figures["before"], figures["after"]
            added = {key: after[key] - before[key] for key in after}
            load_ms = figures["cpu"]["seconds"] * 1000
            print(
                f"| {name} | {load_ms:.0f} | {added['VmRSS']:.0f} | {added['RssAnon']:.0f} "
                f"| {added['RssFile']:.0f} | {after['VmHWM'] - before['VmRSS']:.0f} |"
            )
    if args.calls:
        embed_calls(args.calls, args.seed)


if __name__ == "__main__":
    main()
