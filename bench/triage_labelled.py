"""Triage on the labelled sets: does the priority rank the conversations a person should see first?

    python bench/triage_labelled.py

Method
- Every labelled set (``tests/corpus*``: the main corpus and the nine sets written blind, from the
  labelling rules only, by writers who never opened the detectors) labels each conversation
  ``informative``: would an engineer triaging agent quality want to look at it (the rules are the
  comment block at the top of ``tests/corpus/support.yaml``). The label is the writer's, not ours.
- Each conversation goes through the real analysis trace by trace, as the analyzer stage sees it
  (``tests.corpus_eval.analyses``: one trace per user turn, cut after each failed model call); its
  ranking value is the last turn's triage priority.
- Compared with the trivial rankings a team could use without otelsignals, read from the
  conversation itself: the number of tool calls, of messages and of user turns. Random sampling's
  expectation is an AUROC of 0.5 and a top-20 % lift of 1.00×.
- Figures per set and pooled: AUROC for "informative" (ties count half) and the share of informative
  conversations in the top 20 % divided by the base rate (ties at the cut in expectation).

The sets kept blind (``tests.corpus.KEPT_BLIND``) are measured too: this prints only totals, as
``python -m tests.corpus_eval --all`` does. Caveat: most conversations of these sets are informative
(base rate 0.60–0.86), so the best possible top-20 % lift is 1.16–1.67×; AUROC is the figure to read.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from triage_real import auroc, lift_at

from otelsignals.model import Role
from tests.corpus import ALL_SETS, CorpusConversation, load_corpus
from tests.corpus_eval import analyses

TOP_FRACTION = 0.2


@dataclass(frozen=True)
class Ranked:
    """One conversation: its label and what each ranking gives it."""

    informative: bool
    values: dict[str, float]


RANKINGS: dict[str, Callable[[CorpusConversation], float]] = {
    "tool calls": lambda entry: sum(len(m.tool_calls or ()) for m in entry.messages),
    "messages": lambda entry: len(entry.messages),
    "user turns": lambda entry: sum(m.role is Role.USER for m in entry.messages),
}


def ranked(entry: CorpusConversation) -> Ranked:
    last = list(analyses(entry))[-1]  # the priority after the conversation's last trace
    values = {"priority": last.priority.value} | {name: rank(entry) for name, rank in RANKINGS.items()}
    return Ranked(entry.informative, values)


def figures(rows: list[Ranked]) -> dict[str, tuple[float, float]]:
    """Ranking name → (AUROC, top-20 % lift) for "informative"."""
    labels = [row.informative for row in rows]
    return {
        name: (
            auroc([row.values[name] for row in rows], labels),
            lift_at([row.values[name] for row in rows], labels, TOP_FRACTION),
        )
        for name in rows[0].values
    }


def table(results: dict[str, list[Ranked]]) -> str:
    pooled = [row for rows in results.values() for row in rows]
    names = list(pooled[0].values)
    header = "| set | conversations | informative | " + " | ".join(names) + " |"
    lines = [
        f"AUROC for 'informative' (top {TOP_FRACTION:.0%} lift in brackets; random: 0.500 (1.00×))",
        "",
        header,
        "|" + "---|" * (3 + len(names)),
    ]
    for name, rows in [*results.items(), ("pooled", pooled)]:
        found = figures(rows)
        rate = sum(row.informative for row in rows) / len(rows)
        cells = " | ".join(f"{found[n][0]:.3f} ({found[n][1]:.2f}×)" for n in names)
        lines.append(f"| {name} | {len(rows)} | {rate:.2f} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    results = {
        name: [ranked(entry) for entry in load_corpus(directory)] for name, directory in ALL_SETS.items()
    }
    print(table(results))


if __name__ == "__main__":
    main()
