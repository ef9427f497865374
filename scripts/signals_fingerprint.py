"""Every signal the detectors find on the labelled corpora, as one digest per corpus: a refactor of
the detectors must leave the digests unchanged.

    python scripts/signals_fingerprint.py [--dump PATH]

Each conversation is analysed trace by trace as the pipeline does (tests/corpus_eval.py), and every
new signal instance (type, message index, confidence, pattern, metadata, snippet) plus the final
quality and score are recorded. ``--dump`` writes the whole record as JSON, for a diff when the
digests differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.corpus import BLIND_DIR, CORPUS_DIR, HELDOUT_DIR, CorpusConversation, load_corpus
from tests.corpus_eval import analyses


def record(entry: CorpusConversation) -> dict[str, Any]:
    signals: list[Any] = []
    analysis = None
    for analysis in analyses(entry):
        signals += [
            [s.type, s.message_index, s.confidence, s.snippet, s.metadata] for s in analysis.new_signals
        ]
    assert analysis is not None
    return {
        "signals": signals,
        "quality": analysis.score.quality,
        "score": analysis.score.quality_score,
        "priority": analysis.priority.value,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dump", type=Path, help="write every conversation's record here (JSON)")
    args = parser.parse_args()
    everything: dict[str, dict[str, Any]] = {}
    for name, directory in (("corpus", CORPUS_DIR), ("heldout", HELDOUT_DIR), ("blind", BLIND_DIR)):
        records = {entry.id: record(entry) for entry in load_corpus(directory)}
        encoded = json.dumps(records, sort_keys=True, default=str).encode()
        count = sum(len(r["signals"]) for r in records.values())
        digest = hashlib.sha256(encoded).hexdigest()[:16]
        print(f"{name:<8} {len(records):>4} conversations {count:>5} signals  {digest}")
        everything[name] = records
    if args.dump:
        args.dump.write_text(json.dumps(everything, sort_keys=True, indent=1, default=str))


if __name__ == "__main__":
    main()
