"""How fast the detectors read text before any rule runs: ``unify`` and ``comparable_answer`` against
the slower ways that give the same result, on the real conversations' messages.

    python bench/answer_reading.py [--data ../shared/data/agent-trajectories] [--rounds 3]

- ``unify`` (tokens.py: curly quotes, dashes, special spaces made plain) against ``str.translate``
  with the same mapping, on every message text of the set;
- ``comparable_answer`` (stagnation.py: an assistant message as the repetition rule compares it,
  read over bytes by ``tokens.sentence_norms`` where it can) against the same answer built from a
  Token per word (``tokens_of`` and ``sentence_spans``), on every assistant message.

Each text goes through both ways in turn, in one process (the machines here are shared and noisy:
interleaving keeps the ratio steady); the two must give equal results, or the benchmark stops.
Prints µs per text for each way and their ratio, and the share of answers the byte path reads.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from otelsignals.signals import tokens  # noqa: E402
from otelsignals.signals.phrase_analysis import COMPARE_CHARS  # noqa: E402
from otelsignals.signals.stagnation import Answer, _answer_of_tokens, comparable_answer  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "agent-trajectories"
_TRANSLATION = str.maketrans(tokens._UNIFY)


def translated(text: str) -> str:
    return text.translate(_TRANSLATION)


def answer_of_tokens(text: str) -> Answer:
    return _answer_of_tokens(tokens.tokens_of(translated(text[:COMPARE_CHARS])))


def contents(node: Any, role: str | None = None) -> Iterator[str]:
    """Every non-empty ``content`` string in the trajectory (of messages with ``role``, when given)."""
    if isinstance(node, dict):
        content = node.get("content")
        if isinstance(content, str) and content and (role is None or node.get("role") == role):
            yield content
        for value in node.values():
            yield from contents(value, role)
    elif isinstance(node, list):
        for value in node:
            yield from contents(value, role)


def interleaved(
    now: Callable[[str], Any], before: Callable[[str], Any], texts: list[str], rounds: int
) -> tuple[float, float]:
    """Seconds per text of each way, alternating text by text; checks they agree."""
    spent_now = spent_before = 0.0
    clock = time.perf_counter
    for _ in range(rounds):
        for text in texts:
            started = clock()
            result = now(text)
            middle = clock()
            expected = before(text)
            ended = clock()
            if result != expected:
                raise SystemExit(f"different results for {text[:200]!r}: {result!r} != {expected!r}")
            spent_now += middle - started
            spent_before += ended - middle
    return spent_now / rounds / len(texts), spent_before / rounds / len(texts)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trajectories = [
        json.loads(line) for line in (args.data / "dev.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    messages = [text for trajectory in trajectories for text in contents(trajectory["messages"])]
    answers = [text for trajectory in trajectories for text in contents(trajectory["messages"], "assistant")]
    on_bytes = sum(tokens.sentence_norms(tokens.unify(text[:COMPARE_CHARS])) is not None for text in answers)
    print(f"{len(trajectories)} conversations: {len(messages):,} message texts, {len(answers):,} answers")
    print(f"answers read over bytes (sentence_norms): {on_bytes:,} ({on_bytes / len(answers):.0%})\n")
    print("| way | texts | now, µs per text | before, µs per text | before / now |")
    print("|---|---|---|---|---|")
    for name, now, before, texts in (
        ("unify vs str.translate", tokens.unify, translated, messages),
        ("comparable_answer vs a Token per word", comparable_answer, answer_of_tokens, answers),
    ):
        seconds_now, seconds_before = interleaved(now, before, texts, args.rounds)
        print(
            f"| {name} | {len(texts):,} | {seconds_now * 1e6:.1f} | {seconds_before * 1e6:.1f} "
            f"| {seconds_before / seconds_now:.1f} |"
        )


if __name__ == "__main__":
    main()
