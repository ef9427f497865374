"""Runs the detectors over the labelled corpus the way the pipeline does (trace by trace) and
measures precision and recall per leaf type against the human labels."""

from __future__ import annotations

import argparse
import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from otelsignals.analysis import Analysis, analyze_update
from otelsignals.conversation import ConversationState, TraceUpdate
from otelsignals.signals.taxonomy import LABELLED_LEAF_TYPES, NEGATIVE_STANCE
from tests.corpus import ALL_SETS, BLIND_DIR, HELDOUT_DIR, KEPT_BLIND, CorpusConversation, load_corpus


@dataclass
class LeafScore:
    true_positives: int = 0
    false_positives: int = 0
    false_negatives: int = 0

    @property
    def precision(self) -> float:
        found = self.true_positives + self.false_positives
        return self.true_positives / found if found else 1.0

    @property
    def recall(self) -> float:
        expected = self.true_positives + self.false_negatives
        return self.true_positives / expected if expected else 1.0


@dataclass
class Evaluation:
    leaves: dict[str, LeafScore] = field(
        default_factory=lambda: {leaf: LeafScore() for leaf in LABELLED_LEAF_TYPES}
    )
    misses: list[str] = field(default_factory=list)  # "conversation: type @ index (FP|FN)"
    qualities: dict[str, str] = field(default_factory=dict)  # conversation id -> final quality bucket

    def total(self) -> LeafScore:
        return LeafScore(
            sum(s.true_positives for s in self.leaves.values()),
            sum(s.false_positives for s in self.leaves.values()),
            sum(s.false_negatives for s in self.leaves.values()),
        )

    def table(self) -> str:
        lines = [f"{'leaf type':<42}{'TP':>5}{'FP':>5}{'FN':>5}{'precision':>11}{'recall':>8}"]
        for leaf, s in self.leaves.items():
            lines.append(
                f"{leaf:<42}{s.true_positives:>5}{s.false_positives:>5}{s.false_negatives:>5}"
                f"{s.precision:>11.2f}{s.recall:>8.2f}"
            )
        total = self.total()
        lines.append(
            f"{'all':<42}{total.true_positives:>5}{total.false_positives:>5}{total.false_negatives:>5}"
            f"{total.precision:>11.2f}{total.recall:>8.2f}"
        )
        return "\n".join(lines)


def chunks(entry: CorpusConversation) -> list[tuple[int, int]]:
    """[start, end) message ranges the conversation arrives in: one per user turn, cut also right
    after each failed model call, so a call fails while its preceding messages are the latest."""
    cuts = {i for i, m in enumerate(entry.messages) if m.role.value == "user"}
    cuts |= {after + 1 for after, _ in entry.llm_calls}
    bounds = sorted(c for c in cuts | {0, len(entry.messages)} if 0 <= c <= len(entry.messages))
    return [(a, b) for a, b in itertools.pairwise(bounds) if a < b]


def analyses(entry: CorpusConversation) -> Iterator[Analysis]:
    """The analysis of each chunk of ``entry`` as it arrives (see :func:`chunks`)."""
    state = ConversationState.new(entry.id)
    for number, (start, end) in enumerate(chunks(entry)):
        for message in entry.messages[start:end]:
            state.append(message)
        calls = [call for after, call in entry.llm_calls if after == end - 1]
        state.conversation.llm_calls.extend(calls)
        update = TraceUpdate(entry.id, bytes([number % 256]) * 16, start, end - start, calls, None, True)
        yield analyze_update(state, update)


def detect_incrementally(entry: CorpusConversation) -> tuple[list[tuple[str, int]], str]:
    """(every (type, message_index) found, the final quality bucket)."""
    found: list[tuple[str, int]] = []
    analysis = None
    for analysis in analyses(entry):
        found += [
            (signal.type, signal.message_index)
            for signal in analysis.new_signals
            if signal.type in LABELLED_LEAF_TYPES  # the corpora label SPEC §3's leaves only
        ]
    assert analysis is not None
    return found, analysis.score.quality


def one_stance_per_message(found: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The labels say which leaves a message shows: a message whose negative stance shows in several
    kinds of cue ("THIS IS USELESS!!!": a complaint, shouting, punctuation; an instance each) is one
    detection of it here. Any other leaf found twice on a message still counts twice."""
    stance = [key for key in dict.fromkeys(found) if key[0] == NEGATIVE_STANCE]
    return [key for key in found if key[0] != NEGATIVE_STANCE] + stance


def evaluate(corpus: list[CorpusConversation] | None = None) -> Evaluation:
    """Scores ``corpus`` (default: the main corpus, ``load_corpus()``)."""
    evaluation = Evaluation()
    for entry in load_corpus() if corpus is None else corpus:
        found, quality = detect_incrementally(entry)
        evaluation.qualities[entry.id] = quality
        expected = Counter(entry.expected)
        detected = Counter(one_stance_per_message(found))
        for key in expected | detected:
            leaf = evaluation.leaves[key[0]]
            hits = min(expected[key], detected[key])
            leaf.true_positives += hits
            if detected[key] > hits:
                leaf.false_positives += detected[key] - hits
                evaluation.misses.append(f"{entry.id}: {key[0]} @ {key[1]} (FP)")
            if expected[key] > hits:
                leaf.false_negatives += expected[key] - hits
                evaluation.misses.append(f"{entry.id}: {key[0]} @ {key[1]} (FN)")
    return evaluation


def totals() -> dict[str, LeafScore]:
    """Every labelled set's totals over all leaves, by name (ALL_SETS)."""
    return {name: evaluate(load_corpus(directory)).total() for name, directory in ALL_SETS.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--heldout", action="store_true", help=f"evaluate the blind held-out set ({HELDOUT_DIR}) instead"
    )
    parser.add_argument(
        "--blind", action="store_true", help=f"evaluate the second blind set ({BLIND_DIR}) instead"
    )
    parser.add_argument("--dir", type=Path, help="evaluate the corpus in this directory instead")
    parser.add_argument(
        "--all",
        action="store_true",
        help="one line of totals per labelled set (no misses: some are kept blind)",
    )
    args = parser.parse_args()
    if args.all:
        print(f"{'set':<10}{'TP':>5}{'FP':>5}{'FN':>5}{'precision':>11}{'recall':>8}")
        for name, total in totals().items():
            blind = " (kept blind)" if name in KEPT_BLIND else ""
            print(
                f"{name:<10}{total.true_positives:>5}{total.false_positives:>5}{total.false_negatives:>5}"
                f"{total.precision:>11.2f}{total.recall:>8.2f}{blind}"
            )
        raise SystemExit(0)
    directory = args.dir or (BLIND_DIR if args.blind else HELDOUT_DIR if args.heldout else None)
    result = evaluate(load_corpus(directory) if directory else None)
    print(result.table())
    print("\n".join(result.misses))
