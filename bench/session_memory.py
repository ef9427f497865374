"""What an open conversation costs in memory, against the text it keeps (issue 16: "RSS per open
conversation ≤ 2× the history text it keeps").

    .venv/bin/python bench/session_memory.py [--workload-conversations 60] [--json PATH]

Two sets of conversations are analysed in this process by the pipeline's Analyzer (embedded
defaults, no session bound), then every conversation's state is measured:

- ``real``: the 473 real agent conversations of ../shared/data/agent-trajectories (to_otlp.py);
- ``workload``: bench/agent_workload.py's generated tool-using agent conversations (same seed).

For each set: the states' deep size (everything a state references, objects shared between states
counted once, the analyzer's shared tables not counted; the state object, its detector memory's
table and keys, and the session store's record of it included), the text the conversations keep (message
and tool-result text, tool-call arguments as JSON; in characters and in UTF-8 bytes), the ratio,
the share of each part of the state, and the bytes held by long strings (64 characters or more)
that repeat a string of the same state with another identity (duplicated text). Also the
session store's estimate (``otelsignals_sessions_bytes``: each conversation's, and each system
prompt string once) against the measured size. Markdown to stdout. ``--cold``: every
conversation gone cold before it is measured (``sessions.cold_after``: what an idle one keeps),
its estimate checked against the cold constants.

    .venv/bin/python bench/session_memory.py --resident 100,300

What the process's resident memory does instead: for each number of workload conversations, a
fresh process analyses them (the same Analyzer, embedded defaults, no session bound) and reports
its RSS growth, the C allocator's bytes in use (otelsignals_malloc_bytes) and the text kept; the
slope between two sizes is the resident memory an added conversation costs, free of the process's
fixed part and of what a burst leaves behind (the sidecar's backlogs, not run here).
``--resident-set real`` does the same with that many of the real set's conversations (spread evenly
over its files), e.g. ``--resident 150,473 --resident-set real``; their traces are decoded and
assembled before the first reading, where the workload's requests are split inside the measured
window. Both start with 2 workload conversations (the detectors' tables and the embedding model
loaded): counted in each row's conversations and text, not in its growth; the slope cancels them.
Then every conversation goes cold (``sessions.cold_after`` passed) and the same readings are taken
again: what the process holds once its conversations are idle, allocator slack included.
Memory freed while the requests were built can be reused by the analysis without showing as growth,
as a running sidecar reuses what its traffic frees (a trim of the C library's free memory before the
first reading was tried: bench/RESULTS.md, seventeenth session). So the memory in use is reported
too: the C allocator's bytes in use and the bytes of Python's small objects (512 bytes or less,
which Python takes from arenas of its own: ``sys._debugmallocstats``), whose slope is what an added
conversation holds, whatever the allocators keep free for reuse beside it.

    .venv/bin/python bench/session_memory.py --bound 0.8,0.5

What ``sessions.max_bytes`` does to the analysis: the real set and the workload, each analysed
under a bound of each share of its unbounded peak estimate, with ``cold_after`` at its default
(over the bound, the least recently active goes cold before it is evicted) and at 0
(never cold: evicted at once). For each: the conversations that went cold and were evicted for the
bound, those held at the end, the analyses that differ from the unbounded run's (an evicted
conversation whose traces go on starts again from nothing), and the CPU time. Everything here is
recent, so none is idle for ``cold_after`` (those would be cold, and evicted first).

    .venv/bin/python bench/session_memory.py --resize 100,1000,3000

The CPU one trace's byte accounting costs (``SessionStore.resize`` after a message is added) in a
conversation of each size, µs per resize (2,000 resizes, the conversation growing by one message
each). Only the full count every 16 resizes (sessions.FULL_RECOUNT_EVERY) grows with the
conversation's length (issue 16: "O(new text)").

    .venv/bin/python bench/session_memory.py --long 1000,5000

What a long conversation keeps beyond its messages: one conversation state takes the given numbers
of turns (each a trace of three model calls, one user question and three short answers, and seven
other spans), merged as the pipeline merges them and trimmed to ``sessions.max_messages`` (the
default); the deep size of each part of the state of 1 KiB or more, in KiB, after each number of
turns (the merge alone: no detectors run). A part that grows from column to column grows with the
conversation's length, which message trimming does not bound.

    .venv/bin/python bench/session_memory.py --conventions 1,3,8

The session store's estimate against the measured state per instrumentation convention: the demo
conversations of each convention (otelsignals/demo), their turns said the given numbers of times
over (a longer history each time), analysed by the Analyzer; ``--long-texts`` makes each user
message 20 times as long and ends it with an emoji (text Python keeps at 4 bytes a character).
An estimate under the measured state (a ratio under 1) lets that convention's conversations take
more memory than ``sessions.max_bytes``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

from otelsignals.compaction import stored_message_text, stored_result_text  # noqa: E402
from otelsignals.config_loading import load_config  # noqa: E402
from otelsignals.conversation import ConversationState  # noqa: E402
from otelsignals.otlp.wire import split_request  # noqa: E402
from otelsignals.pipeline.analyzer import Analyzer  # noqa: E402
from otelsignals.pipeline.assembler import Assembler, ReleasedTrace  # noqa: E402
from otelsignals.pipeline.sessions import (  # noqa: E402
    BYTES_PER_ARGUMENT_CHARACTER,
    BYTES_PER_COLD_CONVERSATION,
    BYTES_PER_COLD_MESSAGE,
    BYTES_PER_CONVERSATION,
    BYTES_PER_MESSAGE,
    BYTES_PER_TEXT_BYTE,
    argument_characters,
    records_bytes,
    system_prompt,
    text_storage_bytes,
)
from otelsignals.telemetry import Telemetry  # noqa: E402

SHIPPED_MODEL = (BYTES_PER_TEXT_BYTE, BYTES_PER_ARGUMENT_CHARACTER, BYTES_PER_MESSAGE, BYTES_PER_CONVERSATION)
COLD_MODEL = (
    BYTES_PER_TEXT_BYTE,
    BYTES_PER_ARGUMENT_CHARACTER,
    BYTES_PER_COLD_MESSAGE,
    BYTES_PER_COLD_CONVERSATION,
)
LONG_STRING = 64  # characters: shorter strings are names and ids, not text worth sharing


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def fresh_analyzer() -> Analyzer:
    config = load_config(None, environ={})
    config.sessions.max_sessions = 1_000_000
    config.sessions.max_bytes = 0
    return Analyzer(Telemetry(), config.sessions, config.signals, config.evals, config.analyzer)


def real_traces(count: int | None = None) -> list[ReleasedTrace]:
    from gc_pauses import real_traces as convert

    return convert(count)


def workload_traces(conversations: int, seed: int) -> Iterator[ReleasedTrace]:
    from agent_workload import build_workload

    return traces_of(build_workload(conversations, max(1, conversations // 2), seed))


def traces_of(workload: Any) -> Iterator[ReleasedTrace]:
    released: list[ReleasedTrace] = []
    assembler = Assembler(released.append, lambda record: None, decision_wait=2.0)
    for turn in workload.turns:
        assembler.add(split_request(ExportTraceServiceRequest.FromString(turn.body)).records)
        yield from released
        released.clear()


def parts_of(state: ConversationState) -> Iterator[tuple[str, Any]]:
    """A state's parts, named; the conversation, the decoder's memory and the detectors' memory by
    their own parts."""
    for outer in dataclasses.fields(state):
        value = getattr(state, outer.name)
        if outer.name in ("conversation", "decoder_memory"):
            for inner in dataclasses.fields(value):
                yield f"{outer.name}.{inner.name}", getattr(value, inner.name)
        elif outer.name == "detector_memory":
            for key, memory in value.items():
                yield f"detector_memory[{key}]", memory
        else:
            yield outer.name, value


def containers_of(state: ConversationState, record: object, seen: set[int]) -> Iterator[tuple[str, int]]:
    """What holds a state's parts, which ``parts_of`` does not reach: the state object and its
    attribute table (when it has one), the detector memory's own table and its keys (a key shared
    between conversations counted once, as ``seen`` says), and the session store's record of the
    state's size. (The store's table entries are not counted.)"""
    yield "state (the object)", _shell_size(state)
    memory = state.detector_memory
    keys = [key for key in memory if id(key) not in seen]
    seen.update(map(id, keys))
    yield "detector_memory (its table and keys)", sys.getsizeof(memory) + sum(map(sys.getsizeof, keys))
    yield "session store's record", _shell_size(record)


def _shell_size(item: object) -> int:
    attributes = getattr(item, "__dict__", None)
    return sys.getsizeof(item) + (sys.getsizeof(attributes) if attributes is not None else 0)


def referents(root: object, seen: set[int]) -> Iterator[object]:
    """Every object ``root`` reaches and ``seen`` does not hold yet (classes and functions are
    shared code, not state). A dict's keys too: the collector does not list the keys of a dict
    whose keys are all strings (strings hold no references), and those keys are memory."""
    stack = [root]
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, type) or callable(item):
            continue
        seen.add(id(item))
        yield item
        stack.extend(gc.get_referents(item))
        if isinstance(item, dict):
            stack.extend(item)


def deep_size(root: object, seen: set[int]) -> int:
    """Bytes of everything ``root`` reaches that ``seen`` does not hold yet (then added to it)."""
    return sum(sys.getsizeof(item) for item in referents(root, seen))


def kept_text(state: ConversationState) -> tuple[int, int]:
    """(characters, UTF-8 bytes) of the text the conversation keeps: what sessions_bytes counts."""
    characters = utf8 = 0
    for message in state.conversation.messages:
        texts: list[str] = [message.content or ""]
        result = message.tool_result
        if result is not None and stored_result_text(result) is not stored_message_text(message):
            texts.append(result.content or "")
        texts += [_as_text(call.arguments) for call in message.tool_calls]
        for text in texts:
            characters += len(text)
            utf8 += len(text.encode("utf-8", "surrogatepass"))
    return characters, utf8


def _as_text(arguments: object) -> str:
    if arguments is None:
        return ""
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def measure(name: str, traces: Iterable[ReleasedTrace], cold: bool = False) -> dict[str, Any]:
    """``cold``: every conversation gone cold first, as sessions.cold_after leaves an idle one."""
    analyzer = fresh_analyzer()
    count = 0
    for trace in traces:
        analyzer.process(trace)
        count += 1
    if cold:
        analyzer.sessions.cool_idle(now=math.inf)
    states = list(analyzer.sessions)
    log(f"{name}: {count:,} traces, {len(states):,} conversations; measuring...")
    # What the analyzer shares between conversations (tables, models) is not a conversation's.
    seen: set[int] = {id(analyzer), id(analyzer.sessions)}
    by_part: Counter[str] = Counter()
    duplicated: Counter[str] = Counter()
    total = characters = utf8 = prompt_utf8 = 0
    prompts: dict[int, str] = {}  # the distinct system prompt strings, each held once
    rows: list[tuple[float, ...]] = []  # per conversation: the model's inputs, then the size measured
    ratios: list[float] = []  # per conversation: the store's estimate over the size measured
    for state in states:
        texts: dict[str, str] = {}
        state_size = 0
        for part, value in parts_of(state):
            for item in referents(value, seen):
                size = sys.getsizeof(item)
                by_part[part] += size
                state_size += size
                if isinstance(item, str) and len(item) >= LONG_STRING:
                    first = texts.setdefault(item, item)
                    if first is not item:
                        duplicated[part] += size
        record = analyzer.sessions._sizes[state.conversation.key]
        for part, size in containers_of(state, record, seen):
            by_part[part] += size
            state_size += size
        state_characters, state_utf8 = kept_text(state)
        estimate = record.bytes
        prompt = system_prompt(state.conversation.messages)
        if prompt is not None:
            if id(prompt) not in prompts:  # (measured with the first conversation that holds it)
                estimate += sys.getsizeof(prompt)
            prompts[id(prompt)] = prompt
            prompt_utf8 += len(prompt.encode("utf-8", "surrogatepass"))
        ratios.append(estimate / state_size)
        characters += state_characters
        utf8 += state_utf8
        total += state_size
        rows.append((*model_inputs(state), state_size))
    return {
        "set": name,
        "traces": count,
        "conversations": len(states),
        "bytes": total,
        "text_characters": characters,
        "text_utf8_bytes": utf8,
        "bytes_per_utf8_byte": total / utf8 if utf8 else 0.0,
        "bytes_per_character": total / characters if characters else 0.0,
        "estimated_bytes": analyzer.sessions.bytes,
        # The system prompts: their text as every conversation keeps it, the memory they take once.
        "prompt_utf8_bytes": prompt_utf8,
        "prompt_bytes": sum(map(sys.getsizeof, prompts.values())),
        "prompts": len(prompts),
        "parts": dict(by_part.most_common()),
        "duplicated_text_bytes": dict(duplicated.most_common()),
        "rows": rows,
        "conversations_under": sum(ratio < 1 for ratio in ratios),
        "lowest_ratio": min(ratios, default=0.0),
    }


def model_inputs(state: ConversationState) -> tuple[float, ...]:
    """What the memory model of otelsignals/pipeline/sessions.py reads: (text storage but the system
    prompt's, argument characters, messages, 1, the records of traces, signals and calls as
    estimated)."""
    messages = state.conversation.messages
    prompt = system_prompt(messages)
    text = text_storage_bytes(messages) - (0 if prompt is None else sys.getsizeof(prompt))
    return (text, argument_characters(messages), len(messages), 1.0, records_bytes(state))


def fit(results: list[dict[str, Any]], shipped_model: tuple[float, ...] = SHIPPED_MODEL) -> str:
    """The memory model's per-message coefficients, by least squares over every conversation of
    every set on what its records (counted per trace, signal and call as shipped) leave, and each
    set's median error with them and with the model as shipped (``shipped_model``)."""
    import numpy as np

    table = np.array([row for result in results for row in result["rows"]], dtype=float)
    coefficients, *_ = np.linalg.lstsq(table[:, :4], table[:, 5] - table[:, 4], rcond=None)
    lines = [
        "Least squares over every conversation: bytes = records as shipped + "
        f"{coefficients[0]:.2f} x text storage + {coefficients[1]:.2f} x argument characters + "
        f"{coefficients[2]:.0f} x messages + {coefficients[3]:.0f}",
        "",
        "| set | median error, fitted | median error, as shipped | total: fitted / measured | "
        "as shipped / measured |",
        "|---|---|---|---|---|",
    ]
    for result in results:
        rows = np.array(result["rows"], dtype=float)
        measured = rows[:, 5]
        fitted = rows[:, :4] @ coefficients + rows[:, 4]
        shipped = rows[:, :4] @ np.array(shipped_model) + rows[:, 4]
        lines.append(
            f"| {result['set']} | {np.median(np.abs(fitted - measured) / measured):.0%} | "
            f"{np.median(np.abs(shipped - measured) / measured):.0%} | "
            f"{fitted.sum() / measured.sum():.2f} | {shipped.sum() / measured.sum():.2f} |"
        )
    return "\n".join(lines) + "\n"


def report(result: dict[str, Any], top: int) -> str:
    mib = 2**20
    total = result["bytes"]
    own_text = max(1, result["text_utf8_bytes"] - result["prompt_utf8_bytes"])
    lines = [
        f"### {result['set']}: {result['conversations']:,} conversations, {result['traces']:,} traces",
        "",
        f"State {total / mib:.1f} MiB for {result['text_utf8_bytes'] / mib:.1f} MiB of kept text in UTF-8 "
        f"({result['text_characters'] / mib:.2f} M characters): **{result['bytes_per_utf8_byte']:.2f} bytes "
        f"per UTF-8 byte of text** ({result['bytes_per_character']:.2f} per character, "
        f"{total / result['conversations'] / 1024:.0f} KiB per conversation). "
        f"sessions_bytes estimates {result['estimated_bytes'] / mib:.1f} MiB "
        f"({result['estimated_bytes'] / total:.2f} of the measured; {result['conversations_under']} "
        f"conversations under their measured state, the lowest at {result['lowest_ratio']:.2f}). "
        "Duplicated long text: "
        f"{sum(result['duplicated_text_bytes'].values()) / mib:.1f} MiB. Of the text, "
        f"{result['prompt_utf8_bytes'] / mib:.1f} MiB is the conversations' system prompts, "
        f"{result['prompts']:,} strings held once ({result['prompt_bytes'] / mib:.2f} MiB): without them, "
        f"{(total - result['prompt_bytes']) / own_text:.2f} "
        "bytes of state per byte of the conversations' own text.",
        "",
        "| part of the state | MiB | bytes per UTF-8 byte of text | of which duplicated text (MiB) |",
        "|---|---|---|---|",
    ]
    for part, size in list(result["parts"].items())[:top]:
        duplicate = result["duplicated_text_bytes"].get(part, 0)
        lines.append(
            f"| {part} | {size / mib:.2f} | {size / result['text_utf8_bytes']:.2f} | {duplicate / mib:.2f} |"
        )
    return "\n".join(lines) + "\n"


def resident_child(conversations: int, seed: int, real: bool) -> dict[str, float]:
    """Run in a fresh process: resident memory before and after analysing the conversations (of the
    workload, or that many of the real set's)."""
    from agent_workload import build_workload

    from otelsignals.allocator import malloc_bytes

    # Built first and held to the end: the requests must not count as growth, nor their release.
    requests: list[ReleasedTrace] | Any = (
        real_traces(conversations)
        if real
        else build_workload(conversations, max(1, conversations // 2), seed)
    )
    traces: Iterable[ReleasedTrace] = requests if real else traces_of(requests)
    analyzer = fresh_analyzer()
    for trace in workload_traces(2, seed + 1):  # loads the detectors' tables and the embedding model
        analyzer.process(trace)
    gc.collect()
    before = memory_mib()
    for trace in traces:
        analyzer.process(trace)
    gc.collect()
    active = memory_mib()
    # Then every conversation idle past sessions.cold_after: what the same process holds once they
    # are cold (what they dropped is freed; whether the allocators give it back is what RSS says).
    analyzer.sessions.cool_idle(now=math.inf)
    gc.collect()
    cold = memory_mib()
    started = time.perf_counter()
    for _ in range(20):
        malloc_bytes()
    return {
        "conversations": len(analyzer.sessions),
        **{f"{reading}_growth_mib": active[reading] - before[reading] for reading in before},
        **{f"cold_{reading}_growth_mib": cold[reading] - before[reading] for reading in before},
        "text_mib": sum(kept_text(state)[1] for state in analyzer.sessions) / 2**20,
        "mallinfo2_ms": (time.perf_counter() - started) / 20 * 1000,
    }


def memory_mib() -> dict[str, float]:
    """This process's resident memory and the memory its two allocators have handed out, in MiB:
    ``rss``; ``malloc_in_use``, the C allocator's (its heaps' bytes in use and the large blocks it
    mapped on their own: otelsignals_malloc_bytes, glibc only, else 0); ``small_objects``, Python's
    own for objects of 512 bytes or less (:func:`small_object_mib`)."""
    from otelsignals.allocator import malloc_bytes

    malloc = malloc_bytes() or {}
    return {
        "rss": status_mib("VmRSS"),
        "malloc_in_use": (malloc.get("in_use", 0) + malloc.get("mmapped", 0)) / 2**20,
        "small_objects": small_object_mib(),
    }


def small_object_mib() -> float:
    """MiB in the blocks Python's small-object allocator has handed out and not freed (objects of
    512 bytes or less: what the C allocator's bytes in use leave out), from the report
    ``sys._debugmallocstats`` writes to the C standard error, read through a file put there."""
    with tempfile.TemporaryFile() as report:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(report.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        report.seek(0)
        found = re.search(rb"# bytes in allocated blocks\s*=\s*([\d,]+)", report.read())
    if found is None:
        raise RuntimeError("sys._debugmallocstats printed no allocated blocks (not CPython's pymalloc?)")
    return int(found.group(1).replace(b",", b"")) / 2**20


def status_mib(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def resident(sizes: list[int], seed: int, real: bool) -> str:
    import subprocess

    name = "real" if real else "workload"
    rows = []
    for size in sizes:
        log(f"resident: {size} {name} conversations in a fresh process...")
        command = [sys.executable, __file__, "--resident-child", str(size), "--seed", str(seed)]
        command += ["--resident-set", name]
        rows.append(json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout))
    lines = [
        f"| {name} conversations (and 2 of the workload's, first) | text kept (MiB, UTF-8) "
        "| RSS growth (MiB) | C allocator in use, growth (MiB) | small objects, growth (MiB) "
        "| RSS growth / text | once cold: RSS growth (MiB) | once cold: C allocator in use, growth (MiB) "
        "| once cold: small objects, growth (MiB) | once cold: RSS growth / text | mallinfo2 call (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        text = row["text_mib"]
        cells = [f"{row['conversations']:,}", f"{text:.1f}"]
        for prefix in ("", "cold_"):
            readings = [
                row[f"{prefix}{reading}_growth_mib"] for reading in ("rss", "malloc_in_use", "small_objects")
            ]
            cells += [f"{value:.0f}" for value in readings] + [f"{readings[0] / text:.2f}"]
        lines.append("| " + " | ".join([*cells, f"{row['mallinfo2_ms']:.2f}"]) + " |")
    first, last = rows[0], rows[-1]
    added = last["conversations"] - first["conversations"]
    text = (last["text_mib"] - first["text_mib"]) / added
    lines.append("")
    for when, key in (("active", "rss_growth_mib"), ("once cold", "cold_rss_growth_mib")):
        rss = (last[key] - first[key]) / added
        lines.append(
            f"Per added conversation, {when}: {rss * 1024:.0f} KiB resident for {text * 1024:.0f} KiB of "
            f"text (**{rss / text:.2f} bytes resident per byte of text**)."
        )
    # What the conversations hold, without the memory the allocators freed and keep for reuse.
    for when, prefix in (("active", ""), ("once cold", "cold_")):
        in_use = sum(
            (last[prefix + key] - first[prefix + key]) / added
            for key in ("malloc_in_use_growth_mib", "small_objects_growth_mib")
        )
        lines.append(
            f"Per added conversation, {when}, in use (the C allocator's bytes in use, its mapped blocks "
            f"included, and Python's small objects): {in_use * 1024:.0f} KiB for {text * 1024:.0f} KiB "
            f"of text (**{in_use / text:.2f} bytes in use per byte of text**)."
        )
    return "\n".join(lines) + "\n"


def resize_cost(sizes: list[int], resizes: int = 2000) -> str:
    from otelsignals.model import Message, Role, ToolResult
    from otelsignals.pipeline.sessions import SessionStore

    lines = ["| messages at the start | µs of CPU per resize |", "|---|---|"]
    for size in sizes:
        store = SessionStore(3600, 100, max_bytes=0)
        messages = store.touch("a").conversation.messages
        for n in range(size):
            message = Message(Role.TOOL if n % 4 == 3 else Role.USER, f"text {n} " * 30)
            if message.role is Role.TOOL:
                message.tool_result = ToolResult(content="r" * 300)
            messages.append(message)
        store.resize("a")
        started = time.thread_time()
        for _ in range(resizes):
            messages.append(Message(Role.USER, "new " * 30))
            store.resize("a")
        lines.append(f"| {size:,} | {(time.thread_time() - started) / resizes * 1e6:,.1f} |")
    return "\n".join(lines)


def long_conversation(sizes: list[int]) -> str:
    from otelsignals.config import SessionsConfig
    from otelsignals.conventions.base import SpanReading, SpanView
    from otelsignals.conversation import ConversationState, apply_trace
    from otelsignals.model import LlmCall, Message, Role

    max_messages = SessionsConfig().max_messages
    state = ConversationState.new("long")
    span_numbers = iter(range(1, 1 << 62))
    columns: list[dict[str, int]] = []
    for turn in range(max(sizes)):
        trace_id = turn.to_bytes(16, "big")
        readings = []
        for step in range(10):
            span_id = next(span_numbers).to_bytes(8, "big")
            start = turn * 1_000 + step
            view = SpanView(trace_id, span_id, start_time_unix_nano=start, end_time_unix_nano=start + 1)
            if step < 3:  # a model call: the first carries the user's question
                call = LlmCall(span_id, trace_id, "gpt-4o", input_tokens=900, output_tokens=60)
                asked = [Message(Role.USER, f"question {turn}")] if step == 0 else []
                reading = SpanReading(
                    "bench", asked, [Message(Role.ASSISTANT, f"answer {turn}.{step}")], llm_call=call
                )
            else:
                reading = SpanReading("bench", [], [])
            readings.append((view, reading))
        apply_trace(state, trace_id, readings)
        state.trim(max_messages)
        if turn + 1 in sizes:
            seen: set[int] = set()
            columns.append({part: deep_size(value, seen) for part, value in parts_of(state)})
    largest = {part: max(column.get(part, 0) for column in columns) for part in columns[-1]}
    parts = sorted((part for part in largest if largest[part] >= 1024), key=lambda part: -largest[part])
    lines = [
        "| part of the state | " + " | ".join(f"KiB after {size:,} turns" for size in sorted(sizes)) + " |",
        "|---|" + "---|" * len(sizes),
    ]
    for part in parts:
        lines.append(
            f"| {part} | " + " | ".join(f"{column.get(part, 0) / 1024:,.1f}" for column in columns) + " |"
        )
    return "\n".join(lines)


def repeated_demo(conversations: list[dict[str, Any]], count: int, long_texts: bool) -> list[dict[str, Any]]:
    """Copies of demo ``conversations`` whose turns are said ``count`` times over, each user message
    numbered (so that no two are equal); ``long_texts``: each 20 times as long, with an emoji (text
    Python keeps at 4 bytes a character)."""
    import copy

    conversations = copy.deepcopy(conversations)
    for conversation in conversations:
        conversation["turns"] = [copy.deepcopy(turn) for _ in range(count) for turn in conversation["turns"]]
        for number, turn in enumerate(conversation["turns"]):
            said = turn["user"] * 20 + " \N{THUMBS UP SIGN}" if long_texts else turn["user"]
            turn["user"] = f"({number}) {said}"
    return conversations


def conventions(repeats: list[int], long_texts: bool) -> str:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import otelsignals.demo.traffic as traffic
    from otelsignals.offline import traces_in_time_order

    load = traffic.load_conversations
    demo = load()
    names = list(traffic.CONVENTIONS)
    lines = [
        "| convention | "
        + " | ".join(f"turns x{count}: messages, estimate / measured" for count in repeats)
        + " |",
        "|---|" + "---|" * len(repeats),
    ]
    cells: dict[str, list[str]] = {name: [] for name in names}
    for count in repeats:
        conversations = repeated_demo(demo, count, long_texts)
        spans = InMemorySpanExporter()
        traffic.load_conversations = lambda conversations=conversations: conversations
        try:
            traffic.send_demo_traffic(
                None, None, _exporter_factory=lambda service, transport, into=spans: into
            )
        finally:
            traffic.load_conversations = load
        analyzer = fresh_analyzer()
        for trace in traces_in_time_order([encode_spans(list(spans.get_finished_spans()))]):
            analyzer.process(trace)
        # (the demo conversations without a session id, one conversation per trace, are left out)
        convention_of = {c["session_id"]: c["convention"] for c in conversations if c["session_id"]}
        measured: Counter[str] = Counter()
        estimated: Counter[str] = Counter()
        messages: Counter[str] = Counter()
        seen: set[int] = {id(analyzer), id(analyzer.sessions)}
        for state in analyzer.sessions:
            name = convention_of.get(state.conversation.key)
            if name is None:
                continue
            measured[name] += deep_size(state, seen)  # the state itself, and all it holds
            estimated[name] += analyzer.sessions._sizes[state.conversation.key].bytes
            messages[name] += len(state.conversation.messages)
        for name in names:
            cells[name].append(
                f"{messages[name]:,}, {estimated[name] / measured[name]:.2f}" if measured[name] else "–"
            )
    for name in names:
        lines.append(f"| {name} | " + " | ".join(cells[name]) + " |")
    return "\n".join(lines)


def _bounded_run(
    traces: list[ReleasedTrace], max_bytes: int, cold_after: float
) -> tuple[list[bytes], int, Analyzer, float]:
    """Every analysis (as JSON) of ``traces`` under the bounds given, the store's peak estimate, the
    analyzer after them and the CPU seconds the analyses took."""
    analyzer = fresh_analyzer()
    analyzer.sessions.max_bytes = max_bytes
    analyzer.sessions.cold_after = cold_after
    analyses, peak = [], 0
    started = time.process_time()
    for trace in traces:
        analysis = analyzer.process(trace)
        if analysis is not None:
            analyses.append(analysis.to_json())
        peak = max(peak, analyzer.sessions.bytes)
    return analyses, peak, analyzer, time.process_time() - started


def bounded(shares: list[float], seed: int, workload_conversations: int) -> str:
    """Each set analysed under ``sessions.max_bytes`` = each share of its unbounded peak estimate,
    with ``cold_after`` at its default (the least recently active go cold before any is evicted)
    and at 0 (never cold: evicted at once), against the unbounded run."""
    default_cold_after = load_config(None, environ={}).sessions.cold_after
    lines = [
        "| set | max_bytes, share of the unbounded peak | cold_after (s) | went cold for the bound "
        "| evicted for the bound | held at the end | analyses not as unbounded | CPU (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    sets = (("real", real_traces()), ("workload", list(workload_traces(workload_conversations, seed))))
    for name, traces in sets:
        log(f"bounded: {name}, unbounded first...")
        unbounded, peak, analyzer, cpu = _bounded_run(traces, 0, default_cold_after)
        lines.append(
            f"| {name} | unbounded ({peak / 2**20:.1f} MiB) | {default_cold_after:g} | 0 | 0 "
            f"| {len(analyzer.sessions)} | 0 of {len(unbounded)} | {cpu:.1f} |"
        )
        for share in shares:
            for cold_after in (default_cold_after, 0.0):
                log(f"bounded: {name}, {share:g} of the peak, cold_after {cold_after:g}...")
                analyses, _, analyzer, cpu = _bounded_run(traces, int(share * peak), cold_after)
                registry = analyzer.telemetry.registry
                went_cold, evicted = (
                    registry.get_sample_value(metric, {"reason": "bytes"}) or 0
                    for metric in ("otelsignals_sessions_cooled_total", "otelsignals_sessions_evicted_total")
                )
                differ = sum(a != b for a, b in zip(analyses, unbounded, strict=True))
                lines.append(
                    f"| {name} | {share:g} | {cold_after:g} | {went_cold:,.0f} | {evicted:,.0f} "
                    f"| {len(analyzer.sessions)} | {differ} of {len(analyses)} | {cpu:.1f} |"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload-conversations", type=int, default=60)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--top", type=int, default=15, help="parts listed per set")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--cold", action="store_true", help="every conversation gone cold first (sessions.cold_after)"
    )
    parser.add_argument("--resident", help="workload sizes, e.g. 100,300: resident memory per conversation")
    parser.add_argument(
        "--resident-set",
        choices=["workload", "real"],
        default="workload",
        help="--resident: the workload's conversations, or that many of the real set's (at most 473)",
    )
    parser.add_argument("--resident-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--bound", help="shares of the unbounded peak, e.g. 0.9,0.6: evictions and cold conversations"
    )
    parser.add_argument("--resize", help="conversation sizes, e.g. 100,1000,3000: CPU per resize")
    parser.add_argument("--long", help="turns, e.g. 1000,5000: what one long conversation keeps, by part")
    parser.add_argument("--conventions", help="e.g. 1,3,8: the estimate per convention, turns said so often")
    parser.add_argument("--long-texts", action="store_true", help="--conventions: long user messages")
    args = parser.parse_args()
    if args.conventions:
        print(conventions([int(count) for count in args.conventions.split(",")], args.long_texts))
        return
    if args.long:
        print(long_conversation([int(size) for size in args.long.split(",")]))
        return
    if args.bound:
        print(
            bounded([float(share) for share in args.bound.split(",")], args.seed, args.workload_conversations)
        )
        return
    if args.resize:
        print(resize_cost([int(size) for size in args.resize.split(",")]))
        return
    if args.resident_child:
        print(json.dumps(resident_child(args.resident_child, args.seed, args.resident_set == "real")))
        return
    if args.resident:
        sizes = [int(size) for size in args.resident.split(",")]
        if len(sizes) < 2:
            parser.error("--resident needs two sizes or more (the slope between them), e.g. 100,300")
        print(resident(sizes, args.seed, args.resident_set == "real"))
        return
    gc.disable()  # the measurement walks every object: no collection in the middle
    suffix = ", cold" if args.cold else ""
    results = [
        measure("real" + suffix, real_traces(), args.cold),
        measure("workload" + suffix, workload_traces(args.workload_conversations, args.seed), args.cold),
    ]
    for result in results:
        print(report(result, args.top))
    print(fit(results, COLD_MODEL if args.cold else SHIPPED_MODEL))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
