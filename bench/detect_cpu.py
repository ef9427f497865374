"""The detect stage alone on the agent workload: CPU per turn, per detector, and a digest of its output.

    python bench/detect_cpu.py [--conversations 60] [--active 30] [--per-detector] [--profile] [--sizes]
                               [--stage read] [--by-length]

The requests of ``bench/agent_workload.py`` (same generator, same ``--seed``) go through the pipeline's
path in this process (parse, trace assembly, the Analyzer); only ``analysis.detect`` is measured, in
CPU time of this thread (``time.thread_time``: on a shared machine, far steadier than wall time).
Prints the detect stage's µs per turn, the signals found and a digest of every signal (type, index,
confidence, snippet, metadata) and skipped group: a refactor of the detectors must leave the digest
as it is. ``--per-detector``: each registered detector's share; ``--profile``: the top functions of the
detect stage under cProfile; ``--sizes``: the detectors' memory per open conversation (deep size of
what ``detector_memory`` holds beyond the conversation's messages, and of the whole state);
``--by-length``: the stage's µs per turn by the conversation's length after the turn (messages, the
trimmed ones included), to show what still grows with the history (issue 16: "O(new text)"), and
per model call where the stage knows the trace's calls (a real agent run may make 190 model calls
in one trace: its µs per turn says how long the trace is, its µs per call what each call costs).
``--stage read`` measures (and profiles) the convention readers instead (``Analyzer.assemble``: span
decoding, reading the messages, merging them into the conversation), ``--stage metrics`` the per-trace
agent metrics (``Analyzer._record_trace``); the digest is still of the signals found, which depend on
every message read, and a second digest is printed of every trace's agent metrics (``TraceSignals``).
``--stage cap`` measures the text limits applied to each span's reading, a part of the read stage
(``limits.cap_reading``; with ``--by-length`` bucketed by the span's history length: µs per span).
``--stage score`` measures the conversation's score and triage priority after each trace
(``analysis.score`` and ``analysis.rank``) and prints a digest of every priority (with
``--by-length`` each of the two calls is bucketed: µs per call there, not per turn).
``--embedding-cache 0`` runs the trace metrics with an embedding cache that never hits, as with
thousands of open conversations. ``--real``: the 473 real agent conversations of
../shared/data/agent-trajectories (to_otlp.py, traces in time order) instead of the workload, a
turn being one of their traces (``--conversations``, ``--active`` and ``--seed`` are the workload's).
``--cold``: every conversation goes cold after each trace (sessions.cold_after); the digests must
stay as they are.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import hashlib
import io
import math
import pstats
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
from cachetools import LRUCache

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import agent_workload  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from session_memory import deep_size  # noqa: E402

import otelsignals.analysis as analysis_module  # noqa: E402
import otelsignals.pipeline.analyzer as analyzer_module  # noqa: E402
from otelsignals.compaction import expansions  # noqa: E402
from otelsignals.config_loading import load_config  # noqa: E402
from otelsignals.conventions.base import SpanReading  # noqa: E402
from otelsignals.conversation import ConversationState, TraceUpdate  # noqa: E402
from otelsignals.model import Conversation  # noqa: E402
from otelsignals.otlp.wire import split_request  # noqa: E402
from otelsignals.pipeline.analyzer import Analyzer  # noqa: E402
from otelsignals.pipeline.assembler import Assembler, ReleasedTrace  # noqa: E402
from otelsignals.signals import detect as detect_module  # noqa: E402
from otelsignals.signals.base import DetectionContext  # noqa: E402
from otelsignals.telemetry import Telemetry  # noqa: E402

LENGTH_BUCKETS = (250, 150, 50, 0)  # --by-length: messages, the largest bucket first


def timed_detectors(spent: dict[str, float]) -> tuple[detect_module.Registered, ...]:
    """The registry with each detector's CPU time added to ``spent`` under its module.function."""

    def wrap(entry: detect_module.Registered) -> detect_module.Registered:
        name = f"{entry.detector.__module__.rsplit('.', 1)[1]}.{entry.detector.__name__}"
        inner = entry.detector

        def run(ctx: DetectionContext) -> Any:
            started = time.thread_time()
            try:
                return inner(ctx)
            finally:
                spent[name] = spent.get(name, 0.0) + time.thread_time() - started

        return dataclasses.replace(entry, detector=run)

    return tuple(wrap(entry) for entry in detect_module.DETECTORS)


def print_sizes(analyzer: Analyzer) -> None:
    states = list(analyzer.sessions)
    memory = whole = 0
    for state in states:
        seen: set[int] = set()
        deep_size(state.conversation, seen)  # the messages' text is the conversation's, not the detectors'
        memory += deep_size(state.detector_memory, seen)
        whole += deep_size(state, set())
    print(
        f"{len(states)} conversations: detector memory {memory / len(states):,.0f} B each beyond the "
        f"messages; whole state {whole / len(states):,.0f} B"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=60)
    parser.add_argument("--active", type=int, default=30, help="conversations open at once (per phase)")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--per-detector", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--sizes", action="store_true")
    parser.add_argument("--by-length", action="store_true")
    parser.add_argument("--stage", choices=("detect", "read", "cap", "metrics", "score"), default="detect")
    parser.add_argument(
        "--embedding-cache",
        type=int,
        help="texts the embedder's LRU keeps (default: the shipped size); 0 costs what a cache that "
        "misses costs, as it does once thousands of conversations are open",
    )
    parser.add_argument("--real", action="store_true", help="the real conversations, not the workload")
    parser.add_argument("--cold", action="store_true", help="every conversation cold after each trace")
    args = parser.parse_args()

    if args.real:
        from gc_pauses import real_traces

        real: list[ReleasedTrace] | None = real_traces()
        bodies: list[bytes] = []
    else:
        real = None
        bodies = [
            turn.body
            for turn in agent_workload.build_workload(args.conversations, args.active, args.seed).turns
        ]
    config = load_config(None, environ={})
    original: Callable[..., Any] = analysis_module.detect
    spent_by_detector: dict[str, float] = {}
    if args.per_detector:
        detect_module.DETECTORS = timed_detectors(spent_by_detector)
    profiler = cProfile.Profile() if args.profile else None
    digest = hashlib.blake2b(digest_size=8)
    spent = 0.0
    signals = 0
    by_length: dict[int, list[float]] = {}  # length bucket -> [turns, seconds, model calls]

    def measured(function: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            nonlocal spent
            if profiler is not None:
                profiler.enable()
            started = time.thread_time()
            result = None
            try:
                result = function(*args)
                return result
            finally:
                seconds = time.thread_time() - started
                spent += seconds
                if profiler is not None:
                    profiler.disable()
                length = length_of((*args, result))
                if length is not None:
                    bucket = by_length.setdefault(next(b for b in LENGTH_BUCKETS if length >= b), [0, 0.0, 0])
                    bucket[0] += 1
                    bucket[1] += seconds
                    bucket[2] += model_calls_of((*args, result))

        return run

    def length_of(values: tuple[Any, ...]) -> int | None:
        """The length a stage's call is bucketed by: its conversation's, the trimmed messages
        included, or for --stage cap the span's history's."""
        conversation = conversation_of(values)
        if conversation is not None:
            return conversation.message_offset + len(conversation.messages)
        reading = next((value for value in values if isinstance(value, SpanReading)), None)
        return len(reading.input_messages) if reading is not None else None

    def conversation_of(values: tuple[Any, ...]) -> Conversation | None:
        """The conversation a stage's call worked on, from its arguments or its result."""
        for value in values:
            if isinstance(value, Conversation):
                return value
            if isinstance(value, DetectionContext | ConversationState):
                return value.conversation
            if isinstance(value, TraceUpdate):
                state = analyzer.sessions.get(value.key)
                return state.conversation if state is not None else None
        return None

    def model_calls_of(values: tuple[Any, ...]) -> int:
        """The model calls of the trace a stage's call worked on (0 where the stage is not given them)."""
        for value in values:
            if isinstance(value, TraceUpdate):
                return len(value.llm_calls)
            if isinstance(value, DetectionContext):
                return len(value.new_llm_calls)
        return 0

    measured_detect = measured(original) if args.stage == "detect" else original
    stage_methods = {"read": "assemble", "metrics": "_record_trace"}
    method = stage_methods.get(args.stage)
    original_method = getattr(Analyzer, method) if method else None
    if method:
        setattr(Analyzer, method, measured(original_method))
    original_cap = analyzer_module.cap_reading
    if args.stage == "cap":
        analyzer_module.cap_reading = measured(original_cap)

    # --stage score: the conversation's score and triage priority after each trace (analysis.score
    # and analysis.rank), and a digest of every priority with its terms and reasons.
    ranking = {name: getattr(analysis_module, name) for name in ("score", "rank")}
    priorities = hashlib.blake2b(digest_size=8)

    def rank(*args: Any) -> Any:
        result = measured_rank(*args)
        priorities.update(
            orjson.dumps([result.value, result.terms, result.reasons], option=orjson.OPT_SORT_KEYS)
        )
        return result

    measured_rank = measured(ranking["rank"]) if args.stage == "score" else ranking["rank"]
    analysis_module.rank = rank
    if args.stage == "score":
        analysis_module.score = measured(ranking["score"])

    def detect(context: DetectionContext, disabled: frozenset[str] = frozenset()) -> Any:
        nonlocal signals
        found, skipped = measured_detect(context, disabled)
        for s in found:
            fields = [s.type, s.message_index, s.confidence, s.snippet, s.metadata]
            digest.update(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS))
        digest.update(orjson.dumps(skipped))
        signals += len(found)
        return found, skipped

    analysis_module.detect = detect
    analyzer = Analyzer(Telemetry(), config.sessions, config.signals, config.evals, config.analyzer)
    trace_metrics: dict[str, dict[str, Any]] = {}

    def keep_trace_metrics(state: ConversationState, reason: str = "") -> None:
        for metrics in state.trace_signals:
            trace_metrics[metrics.trace_id] = metrics.as_dict()

    analyzer.on_session_closed = keep_trace_metrics
    released: list[ReleasedTrace] = []
    assembler = Assembler(released.append, lambda record: None, decision_wait=2.0)
    detect_module.warm_up()
    if analyzer.embedder is not None:
        if args.embedding_cache is not None:
            analyzer.embedder.cache = LRUCache(args.embedding_cache)  # type: ignore[attr-defined]
        analyzer.embedder.embed(["warm up"])

    def assembled() -> Iterator[list[ReleasedTrace]]:
        """Each request assembled as the receiver would (the workload's traces come whole)."""
        for body in bodies:
            assembler.add(split_request(ExportTraceServiceRequest.FromString(body)).records)
            yield released
            released.clear()

    batches = ([trace] for trace in real) if real is not None else assembled()
    turns = 0
    for batch in batches:
        turns += 1
        for trace in batch:
            analyzer.process(trace)
            if args.cold:
                analyzer.sessions.cool_idle(now=math.inf)
    analysis_module.detect = original
    for name, function in ranking.items():
        setattr(analysis_module, name, function)
    if method:
        setattr(Analyzer, method, original_method)
    analyzer_module.cap_reading = original_cap

    per_turn = spent / turns * 1e6
    print(f"{turns:,} turns: {args.stage} {per_turn:,.0f} µs CPU per turn, {signals:,} signals, ", end="")
    print(f"digest {digest.hexdigest()}; compacted texts read back: {expansions():,}")
    if args.stage == "score":
        print(f"{turns:,} priorities (score, terms, reasons): digest {priorities.hexdigest()}")
    if args.stage == "metrics":
        for state in analyzer.sessions:
            keep_trace_metrics(state)
        metrics_digest = hashlib.blake2b(
            orjson.dumps(trace_metrics, option=orjson.OPT_SORT_KEYS), digest_size=8
        )
        print(f"{len(trace_metrics):,} traces' agent metrics: digest {metrics_digest.hexdigest()}")
    if args.by_length:
        unit = "span" if args.stage == "cap" else "turn"
        whose = "the span's history" if args.stage == "cap" else "the conversation's length after the turn"
        print(f"{args.stage}, by {whose}:")
        for low in sorted(by_length):
            count, seconds, calls = by_length[low]
            line = f"  {low:>4}+ messages: {count:5,} {unit}s, {seconds / count * 1e6:7,.0f} µs per {unit}"
            if calls:
                line += f"; {calls:6,.0f} model calls, {seconds / calls * 1e6:6,.0f} µs per call"
            print(line)
    for name, seconds in sorted(spent_by_detector.items(), key=lambda item: -item[1]):
        print(f"  {name:45s} {seconds / turns * 1e6:8,.0f} µs per turn")
    if args.sizes:
        print_sizes(analyzer)
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(args.top)
        print(text.getvalue())


if __name__ == "__main__":
    main()
