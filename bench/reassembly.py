"""Conversation reassembly speed per convention, and the cost of one more turn as history grows.

    python bench/reassembly.py [--turns 20] [--repeat 9]

Conversations are emitted with the real OpenTelemetry SDK in each convention the demo traffic
speaks (one trace per turn; each model-call span carries the whole history so far, as stateless
chat APIs do; a tool call every fifth turn, so that turns 5, 20 and 80 are all tool turns), then fed
trace by trace to the analyzer's assembly (parse the GenAI spans, read them with the convention's
reader, merge into the conversation).
Prints per convention:
- conversations/s for ``--turns``-turn conversations (all their traces, in order);
- the cost of one more turn when the history is 5, 20 and 80 turns long, next to the same-run
  baseline of merely parsing that turn's spans from protobuf whole (what the receiver pays once for
  any span it takes in; the assembly itself parses only what a span adds to its conversation);
- the same-run baseline of turn 80 with every span parsed and decoded whole (conventions/decoding.py
  off), which is what the cost of a turn would grow like without it.

    python bench/reassembly.py --calls-in-one-trace 10,50,200

One trace of an agent that makes that many model calls (an agent run exported as one trace), merged
into a new conversation (``conversation.apply_trace``, best of ``--repeat``): each call's history
resends the previous one's messages as the history cache hands them out (the same objects) plus the
previous answer and its tool result read anew. Prints ms per trace and µs per call: what grows
faster than the calls is what one call's merge costs per earlier call of its trace.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otelsignals.config import SessionsConfig
from otelsignals.conventions import decoding
from otelsignals.demo.emitter import ConversationEmitter
from otelsignals.demo.traffic import CONVENTIONS, SPAN_LIMITS
from otelsignals.otlp.wire import split_request
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.telemetry import Telemetry

QUESTIONS = [
    "Can you check the status of order {n}? It was supposed to arrive on Tuesday.",
    "And what about the invoice for order {n}, has it been sent to my billing address?",
    "Please change the delivery address for order {n} to 14 Rue des Lilas, Lyon.",
    "Is there a cheaper shipping option for order {n}, I am not in a hurry.",
]


def script(convention: str, turns: int) -> dict:
    steps = []
    for n in range(turns):
        tool_step = (
            [
                {
                    "tool_calls": [
                        {
                            "name": "get_order",
                            "arguments": {"order_id": f"A-{n}"},
                            "result": {"order_id": f"A-{n}", "status": "shipped", "eta": "2 days"},
                        }
                    ]
                }
            ]
            if n % 5 == 4
            else []
        )
        steps.append(
            {
                "user": QUESTIONS[n % len(QUESTIONS)].format(n=1000 + n),
                "steps": [
                    *tool_step,
                    {"text": f"Order {1000 + n} is on its way and should arrive in two days."},
                ],
            }
        )
    return {
        "id": f"bench-{convention}-{turns}",
        "agent_name": "bench",
        "service_name": "bench-agent",
        "convention": convention,
        "session_id": f"bench-{convention}-{turns}",
        "model": "gpt-4o-mini",
        "system_prompt": "You are the order-status assistant.",
        "turns": steps,
        "story": "",
    }


def traces_of(convention: str, turns: int) -> list[ReleasedTrace]:
    return traces_of_conversation(script(convention, turns))


def traces_of_conversation(conversation: dict) -> list[ReleasedTrace]:
    """A scripted conversation (otelsignals/demo's format) emitted by the real SDK, one released
    trace per turn, complete, in the order they started."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": conversation["service_name"]}), span_limits=SPAN_LIMITS
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    ConversationEmitter(conversation, provider, {}, 0, time.time_ns() - 10**12).emit()
    provider.shutdown()
    by_trace: dict[int, list] = {}
    for span in memory.get_finished_spans():
        by_trace.setdefault(span.context.trace_id, []).append(span)
    traces = []
    for spans in sorted(by_trace.values(), key=lambda s: min(x.start_time for x in s)):
        records = split_request(encode_spans(spans)).records
        traces.append(
            ReleasedTrace(records[0].trace_id, records, "complete", sum(len(r.data) for r in records))
        )
    return traces


def assemble_all(traces: list[ReleasedTrace]) -> float:
    analyzer = Analyzer(Telemetry(), SessionsConfig())
    started = time.perf_counter()
    for trace in traces:
        analyzer.assemble(trace)
    return time.perf_counter() - started


TURNS = (5, 20, 80)


def one_turn(traces: list[ReleasedTrace], turn: int) -> tuple[float, float]:
    """(seconds to assemble turn ``turn`` after the ones before, seconds to parse its spans)."""
    analyzer = Analyzer(Telemetry(), SessionsConfig())
    for trace in traces[: turn - 1]:
        analyzer.assemble(trace)
    target = traces[turn - 1]
    started = time.perf_counter()
    analyzer.assemble(target)
    cost = time.perf_counter() - started
    started = time.perf_counter()
    for record in target.spans:
        Span.FromString(record.data)
    return cost, time.perf_counter() - started


def turn_costs(traces: list[ReleasedTrace], repeat: int) -> dict[str, float]:
    """Best of ``repeat``, in seconds: one more turn at each of TURNS (``turn N``), parsing that
    turn's spans (``parse N``), and the last turn with every span decoded whole (``whole``).

    They are measured round-robin, so that a noisy stretch of a shared machine slows them all
    alike; the minimum is the run least disturbed by other work."""
    samples: dict[str, list[float]] = {}
    for _ in range(repeat):
        for turn in TURNS:
            cost, parse = one_turn(traces, turn)
            samples.setdefault(f"turn {turn}", []).append(cost)
            samples.setdefault(f"parse {turn}", []).append(parse)
        with full_decoding():
            samples.setdefault("whole", []).append(one_turn(traces, TURNS[-1])[0])
    return {name: min(values) for name, values in samples.items()}


def one_trace_readings(calls: int) -> list[tuple[Any, Any]]:
    from otelsignals.conventions.base import SpanReading, SpanView
    from otelsignals.model import LlmCall, Message, Role, ToolCall, ToolResult

    trace_id = b"\x01" * 16
    history = [
        Message(Role.SYSTEM, "You are a coding agent working in the user's repository. " * 8),
        Message(Role.USER, "The date parsing test fails since yesterday; find out why and fix it. " * 3),
    ]
    readings = []
    for call in range(calls):
        span_id = (call + 1).to_bytes(8, "big")
        tool_call = ToolCall("read_file", {"path": f"src/module_{call}.py"}, id=f"call_{call}")
        answer = Message(
            Role.ASSISTANT,
            f"Step {call}: reading the next module to see where the parsing goes wrong. " * 3,
            tool_calls=[tool_call],
        )
        view = SpanView(trace_id, span_id, start_time_unix_nano=call * 10, end_time_unix_nano=call * 10 + 5)
        readings.append((view, SpanReading("bench", list(history), [answer], llm_call=LlmCall(span_id))))
        result = f"module {call}:\n" + "def parse(value):\n    return value\n" * 20
        history = [
            *history,
            Message(Role.ASSISTANT, answer.content, tool_calls=[tool_call]),  # read anew, its text shared
            Message(Role.TOOL, result, tool_result=ToolResult(call_id=f"call_{call}", content=result)),
        ]
    return readings


def calls_in_one_trace(sizes: list[int], repeat: int) -> str:
    from otelsignals.conversation import ConversationState, apply_trace

    lines = ["| model calls in the trace | ms per trace | µs per call |", "|---|---|---|"]
    for calls in sizes:
        best = float("inf")
        for _ in range(repeat):
            readings = one_trace_readings(calls)
            state = ConversationState.new("bench")
            started = time.thread_time()
            apply_trace(state, b"\x01" * 16, readings)
            best = min(best, time.thread_time() - started)
        lines.append(f"| {calls:,} | {best * 1e3:,.1f} | {best / calls * 1e6:,.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--calls-in-one-trace", help="model calls, e.g. 10,50,200: one trace's merge")
    args = parser.parse_args()
    if args.calls_in_one_trace:
        print(calls_in_one_trace([int(n) for n in args.calls_in_one_trace.split(",")], args.repeat))
        return
    print(
        f"conversation reassembly ({args.turns}-turn conversations; cost of turn N = best of {args.repeat})"
    )
    print(
        f"{'convention':<14}{'conv/s':>9}  "
        + "  ".join(f"{'turn ' + str(n):>22}" for n in TURNS)
        + f"{'80 ÷ 5':>8}{'turn 80, no memo':>20}"
    )
    print(f"{'':<14}{'':>9}  " + "  ".join(f"{'µs (whole parse)':>22}" for _ in TURNS) + f"{'':>8}{'µs':>20}")
    for convention in CONVENTIONS:
        traces = traces_of(convention, args.turns)
        rate = 1 / statistics.median(assemble_all(traces) for _ in range(args.repeat))
        costs = turn_costs(traces_of(convention, TURNS[-1]), args.repeat)
        cells = [f"{costs[f'turn {n}'] * 1e6:>9.0f} ({costs[f'parse {n}'] * 1e6:>6.0f})" for n in TURNS]
        ratio = costs[f"turn {TURNS[-1]}"] / costs[f"turn {TURNS[0]}"]
        print(
            f"{convention:<14}{rate:>9.1f}  "
            + "  ".join(f"{c:>22}" for c in cells)
            + f"{ratio:>7.2f}×{costs['whole'] * 1e6:>20.0f}"
        )


@contextmanager
def full_decoding() -> Iterator[None]:
    saved = decoding.MEMO_MIN_BYTES
    decoding.MEMO_MIN_BYTES = 1 << 62
    try:
        yield
    finally:
        decoding.MEMO_MIN_BYTES = saved


if __name__ == "__main__":
    main()
