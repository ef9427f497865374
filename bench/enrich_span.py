"""Enriching one span: appending to its bytes against parsing and re-serializing it, same run.

    python bench/enrich_span.py

One model-call span carrying a history of 10 KB, 300 KB and 3 MB (``gen_ai.input.messages``), enriched
with the attributes and one signal event of a flagged turn: by ``Enricher`` as it runs (the new
attributes, events and name appended to the span's bytes) and by the same enricher with that shortcut
turned off (the span parsed, changed and serialized again). Best of 3 × 50 runs, µs per span.
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

import orjson
from opentelemetry.proto.trace.v1.trace_pb2 import Span

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from otelsignals.analysis import Analysis
from otelsignals.config import SignalsConfig
from otelsignals.model import SignalInstance
from otelsignals.otlp.wire import ScopeContext, SpanRecord
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.pipeline.enricher import Enricher
from otelsignals.scoring import Score
from otelsignals.signals import taxonomy as tx

TRACE_ID, SPAN_ID = bytes(range(1, 17)), b"\x01" * 8


class RewritingEnricher(Enricher):
    def _appended(self, *args: object) -> bytes | None:
        return None


def span_bytes(history_bytes: int) -> bytes:
    text = "Where is my order? I was charged twice, “again” — please check. "
    history = [{"role": "user", "parts": [{"type": "text", "content": text * (history_bytes // len(text))}]}]
    attributes = [{"key": "gen_ai.input.messages", "value": {"string_value": orjson.dumps(history).decode()}}]
    span = Span(
        trace_id=TRACE_ID, span_id=SPAN_ID, name="chat gpt-4o", end_time_unix_nano=5, attributes=attributes
    )
    return span.SerializeToString()


def analysis() -> Analysis:
    score = Score("bad", 0.2, 0.5, True, {tx.MISALIGNMENT: 1}, {tx.CORRECTION: 1}, 2, 4, False)
    signal = SignalInstance(tx.CORRECTION, 2, 0.9, "no, I meant", {"cue": "no, I meant"})
    return Analysis("conv-1", TRACE_ID, SPAN_ID, "agent", score, [signal])


def trace(data: bytes) -> ReleasedTrace:
    record = SpanRecord(TRACE_ID, SPAN_ID, b"", data, ScopeContext(None, "", None, ""), 0)
    return ReleasedTrace(TRACE_ID, [record], "complete", len(data))


def main() -> None:
    turn = analysis()
    print("| span | appended (µs) | parsed and re-serialized (µs) | ratio |")
    print("|---|---|---|---|")
    for size in (10_000, 300_000, 3_000_000):
        data = span_bytes(size)
        timings = []
        for enricher in (Enricher(SignalsConfig()), RewritingEnricher(SignalsConfig())):
            runs = timeit.repeat(lambda e=enricher, d=data: e.enrich(trace(d), turn), number=50, repeat=3)
            timings.append(min(runs) / 50 * 1e6)
        appended, rewritten = timings
        print(
            f"| {len(data) // 1000:,} KB | {appended:,.0f} | {rewritten:,.0f} | {appended / rewritten:.2f} |"
        )


if __name__ == "__main__":
    main()
