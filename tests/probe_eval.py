"""Recall and precision of one interaction leaf on a probe set written by someone who never saw the
detectors (tests/probes/<leaf>/{dev,test}.json; README, "Probe sets from unseen writers").

    python -m tests.probe_eval                      # every leaf, both halves: one line each
    python -m tests.probe_eval --leaf rephrase --misses   # the dev half's misses, to work on

Each item is a short conversation ending with the user message judged, and its label: does that
message show the leaf? The detectors run over it turn by turn, as the pipeline runs them; the leaf
"fires" when an instance of it lands on the last message. Only the dev half's misses are printed:
the test half is kept for measuring.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otelsignals.signals import taxonomy as tx
from tests.signals.conversations import INTERACTION_DETECTORS, run_incrementally

PROBES = Path(__file__).resolve().parent / "probes"
LEAVES = {
    "correction": tx.CORRECTION,
    "rephrase": tx.REPHRASE,
    "negative_stance": tx.NEGATIVE_STANCE,
    "quit": tx.QUIT,
    "clarification": tx.CLARIFICATION,
}
HALVES = ("dev", "test")


@dataclass
class ProbeScore:
    true_positives: int = 0
    false_positives: int = 0
    false_negatives: int = 0
    true_negatives: int = 0

    @property
    def precision(self) -> float:
        fired = self.true_positives + self.false_positives
        return self.true_positives / fired if fired else 1.0

    @property
    def recall(self) -> float:
        labelled = self.true_positives + self.false_negatives
        return self.true_positives / labelled if labelled else 1.0


def load(leaf: str, half: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads((PROBES / leaf / f"{half}.json").read_text(encoding="utf-8"))
    return items


def fires(signal: str, turns: list[tuple[str, str]]) -> bool:
    """``signal`` lands on the last message when the detectors run turn by turn."""
    last = len(turns) - 1
    return any(
        s.type == signal and s.message_index == last for s in run_incrementally(INTERACTION_DETECTORS, turns)
    )


def score(leaf: str, half: str, misses: list[str] | None = None) -> ProbeScore:
    """The leaf's score on one half; each miss appended to ``misses`` when given."""
    result = ProbeScore()
    for item in load(leaf, half):
        turns = [(role, text) for role, text in item["turns"]]
        fired = fires(LEAVES[leaf], turns)
        if item["label"]:
            if fired:
                result.true_positives += 1
            else:
                result.false_negatives += 1
        elif fired:
            result.false_positives += 1
        else:
            result.true_negatives += 1
        if misses is not None and fired != item["label"]:
            kind = "FN" if item["label"] else "FP"
            misses.append(f"{kind} {item['id']} ({item.get('why', 'no note')}): {turns[-1][1]!r}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--leaf", choices=sorted(LEAVES), help="one leaf (default: every leaf)")
    parser.add_argument("--misses", action="store_true", help="list the dev half's misses")
    args = parser.parse_args()
    print(f"{'leaf':18s}{'half':>6s}{'TP':>5s}{'FP':>5s}{'FN':>5s}{'TN':>5s}{'precision':>11s}{'recall':>8s}")
    misses: list[str] = []
    for leaf in [args.leaf] if args.leaf else sorted(LEAVES):
        for half in HALVES:
            s = score(leaf, half, misses if args.misses and half == "dev" else None)
            print(
                f"{leaf:18s}{half:>6s}{s.true_positives:>5d}{s.false_positives:>5d}{s.false_negatives:>5d}"
                f"{s.true_negatives:>5d}{s.precision:>11.2f}{s.recall:>8.2f}"
            )
    for line in misses:
        print(line)


if __name__ == "__main__":
    main()
