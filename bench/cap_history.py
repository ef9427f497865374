"""The text limits (``limits.cap_messages``) on one long history resent with every model call, with
the conversation's memory of what was measured and without it (which measures every message, as
before the memory): µs per call, the two interleaved call by call in this process.

    python bench/cap_history.py [--messages 1000] [--calls 200] [--textless-results]

The history is read through the conversation's history cache, as the GenAI reader reads
``gen_ai.input.messages``, and grows by one message a call. Half of its messages are tool results;
``--textless-results`` sends them without text (content not captured), the case where the memory's
first version measured every such result again on every call. A history over
``max_messages_per_span`` (2,000) still needs each message's size on every call.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any

import orjson

from otelsignals.conventions.genai import otel_messages
from otelsignals.conventions.memory import ConversationMemory
from otelsignals.limits import TextLimits, cap_messages
from otelsignals.model import Message, Role


def item(number: int, textless_results: bool) -> dict[str, Any]:
    if number % 2:
        content = None if textless_results else f"result {number}: " + "ok " * 40
        return {"role": "tool", "content": content, "tool_call_id": f"c{number}"}
    return {"role": "assistant", "content": f"step {number}: " + "thinking " * 20}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--textless-results", action="store_true")
    args = parser.parse_args()
    limits = TextLimits()
    memories = {"with the memory": ConversationMemory(), "without": ConversationMemory()}
    spent = dict.fromkeys(memories, 0)
    items = [item(number, args.textless_results) for number in range(args.messages)]
    for call in range(args.calls):
        items.append(item(len(items), args.textless_results))
        text = orjson.dumps(items).decode()
        span_id = call.to_bytes(8, "big")

        def read(parsed: Any, span_id: bytes = span_id) -> list[Message]:
            return otel_messages(parsed, span_id, Role.USER)

        for name, memory in memories.items():
            history = memory.histories.messages("gen_ai.input.messages", text, read)
            started = time.thread_time_ns()
            cap_messages(list(history), limits, Counter(), memory if name == "with the memory" else None)
            spent[name] += time.thread_time_ns() - started
    for name, nanoseconds in spent.items():
        print(f"{name}: {nanoseconds / args.calls / 1000:,.0f} µs per call")
    print(f"ratio: {spent['with the memory'] / spent['without']:.2f}")


if __name__ == "__main__":
    main()
