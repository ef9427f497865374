"""What three small memories on the analysis' hot paths save, each against the way before it, on the
texts the conversations keep: the 473 real agent conversations and the agent workload's.

    python bench/reuse.py [--workload-conversations 60] [--rounds 3]

- **compaction**: an old message's text compressed by ``compaction._packed`` (Zstandard level 1, one
  compressor reused per thread) against zlib level 1, the way before: µs per text (≥ 64 characters,
  as compaction takes them) and bytes kept (``sys.getsizeof`` of what is stored);
- **rare tokens**: the embedding vocabulary's ``rows_of`` (the tokens outside the frequent words
  remembered with their rows) against finding the frequent words and searching every other token's
  hash, as before: µs per text, tokenised beforehand, on the user's and the assistant's messages
  (those the trace metrics embed), each round starting with nothing remembered;
- **tool results parsed once**: a tool result asked whether it is an error and then whether it
  found nothing, as the detectors ask, with the latest parses remembered against with none
  remembered: µs per result (the error verdicts' own cache is emptied before each).

The conversations are read by the pipeline's Analyzer first (bench/session_memory.py's), and the
texts taken from what they keep. Each text goes through both ways in turn, in one process (the
machines here are shared and noisy: interleaving keeps the ratio steady); the two ways must give
equal results, or the benchmark stops.
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))

from session_memory import fresh_analyzer, real_traces, workload_traces  # noqa: E402

from otelsignals import compaction  # noqa: E402
from otelsignals.evals.embeddings import _Vocabulary, default_embedder, tokenize  # noqa: E402
from otelsignals.model import Role  # noqa: E402
from otelsignals.pipeline.assembler import ReleasedTrace  # noqa: E402
from otelsignals.signals.errors import payload  # noqa: E402


class Kept(NamedTuple):
    texts: list[str]  # every message text the conversations keep, in order
    embedded: list[str]  # the user's and the assistant's: those the trace metrics embed
    results: list[str]  # every tool result's text


def kept_texts(traces: Iterable[ReleasedTrace]) -> Kept:
    analyzer = fresh_analyzer()
    for trace in traces:
        analyzer.process(trace)
    kept = Kept([], [], [])
    for state in analyzer.sessions:
        for message in state.conversation.messages:
            if message.content:
                kept.texts.append(message.content)
                if message.role in (Role.USER, Role.ASSISTANT):
                    kept.embedded.append(message.content)
            result = message.tool_result
            if message.role is Role.TOOL and result is not None and result.content:
                kept.results.append(result.content)
    return kept


def interleaved(
    now: Callable[[Any], Any],
    before: Callable[[Any], Any],
    items: list[Any],
    rounds: int,
    reset: Callable[[], None] = lambda: None,
    new_round: Callable[[], None] = lambda: None,
) -> tuple[float, float]:
    """Seconds per item of each way, alternating item by item (``reset`` before each item's ways,
    ``new_round`` before each round, both untimed)."""
    spent_now = spent_before = 0.0
    clock = time.perf_counter
    for round_ in range(rounds):
        new_round()
        for item in items:
            ways = ((now, True), (before, False)) if round_ % 2 == 0 else ((before, False), (now, True))
            results = {}
            for way, is_now in ways:
                reset()
                started = clock()
                results[is_now] = way(item)
                seconds = clock() - started
                if is_now:
                    spent_now += seconds
                else:
                    spent_before += seconds
            if results[True] != results[False]:
                raise SystemExit(f"different results for {str(item)[:200]!r}")
    count = rounds * len(items)
    return spent_now / count, spent_before / count


def zlib_packed(text: str) -> bytes:
    return compaction._LENGTH.pack(len(text)) + zlib.compress(text.encode("utf-8", "surrogatepass"), 1)


def compaction_row(texts: list[str], rounds: int) -> str:
    long = [text for text in texts if len(text) >= compaction.COMPACT_MIN_CHARACTERS]
    for text in long:  # what is kept reads back the text
        stored = compaction._packed(text)
        if stored is not None and compaction._expand(stored) != text:
            raise SystemExit(f"compaction does not read back {text[:200]!r}")
    # Compaction keeps the compressed form only when it is smaller than the string.
    now_kept = sum(sys.getsizeof(compaction._packed(text) or text) for text in long)
    before_kept = sum(min(sys.getsizeof(zlib_packed(text)), sys.getsizeof(text)) for text in long)
    now_seconds, before_seconds = interleaved(
        lambda text: compaction._packed(text) is not None,
        lambda text: zlib_packed(text) is not None,
        long,
        rounds,
    )
    return (
        f"| compaction, {len(long):,} texts | {before_seconds * 1e6:.1f} µs, "
        f"{before_kept / len(long):,.0f} bytes kept | {now_seconds * 1e6:.1f} µs, "
        f"{now_kept / len(long):,.0f} bytes kept | {before_seconds / now_seconds:.2f} |"
    )


def search_every_rare_token(vocabulary: _Vocabulary, tokens: list[str]) -> list[int]:
    """rows_of as it was: the frequent words from the dict, every other token searched."""
    frequent = vocabulary._frequent.get
    rows = [frequent(token, -1) for token in tokens]
    others = [position for position, row in enumerate(rows) if row < 0]
    if others:
        for position, row in zip(others, vocabulary._rows_by_hash([tokens[p] for p in others]), strict=True):
            rows[position] = row
    return rows


def rare_tokens_row(texts: list[str], rounds: int) -> str:
    vocabulary = default_embedder().model.vocab
    tokenised = [tokenize(text) for text in texts]
    # Each round starts with nothing remembered: in the pipeline a text reaches rows_of once (the
    # embedding rows are cached by text), so a second round would find every token remembered.
    now_seconds, before_seconds = interleaved(
        vocabulary.rows_of,
        lambda tokens: search_every_rare_token(vocabulary, tokens),
        tokenised,
        rounds,
        new_round=vocabulary._rare.clear,
    )
    return (
        f"| rare tokens, {len(texts):,} texts | {before_seconds * 1e6:.1f} µs | {now_seconds * 1e6:.1f} µs "
        f"| {before_seconds / now_seconds:.2f} |"
    )


def both_questions(content: str) -> tuple[bool, str | None]:
    return payload.content_is_error(content), payload.empty_result_of(content)


def both_questions_parsed_twice(content: str) -> tuple[bool, str | None]:
    failed = payload.content_is_error(content)
    payload._recent_parses = ()
    return failed, payload.empty_result_of(content)


def forget_parses() -> None:
    payload._recent_parses = ()
    payload._FAILED_CONTENT.clear()


def parses_row(results: list[str], rounds: int) -> str:
    now_seconds, before_seconds = interleaved(
        both_questions, both_questions_parsed_twice, results, rounds, reset=forget_parses
    )
    return (
        f"| tool results parsed once, {len(results):,} results | {before_seconds * 1e6:.1f} µs "
        f"| {now_seconds * 1e6:.1f} µs | {before_seconds / now_seconds:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload-conversations", type=int, default=60)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sets = {
        "real": real_traces,
        "workload": lambda: workload_traces(args.workload_conversations, args.seed),
    }
    for name, traces in sets.items():
        kept = kept_texts(traces())
        print(f"\n### {name}: {len(kept.texts):,} message texts, {len(kept.results):,} tool results\n")
        print("| memory | before, per text | now, per text | before / now |")
        print("|---|---|---|---|")
        print(compaction_row(kept.texts, args.rounds))
        print(rare_tokens_row(kept.embedded, args.rounds))
        print(parses_row(kept.results, args.rounds))


if __name__ == "__main__":
    main()
