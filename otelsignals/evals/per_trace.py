"""The per-trace signals the session metrics aggregate (SPEC §6), computed as each trace is analysed.

Without an LLM judge, ``confidence`` and ``tool_correctness`` come from model-free proxies over the
trace's signals and tool results; ``coherence`` and ``loop_detection`` come from the offline
embedding model. Each value records its source.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from otelsignals.evals.embeddings import Embedder
from otelsignals.evals.proxies import proxy_confidence, proxy_tool_correctness
from otelsignals.evals.session_metrics import TraceSignals
from otelsignals.evals.trace_metrics import ComparableOutput, coherence, loop_detection_between
from otelsignals.model import Conversation, Message, Role, SignalInstance


def turn_texts(messages: Sequence[Message]) -> tuple[str, str]:
    """(what the user said, what the assistant answered) in these messages."""
    said = "\n".join(m.content for m in messages if m.role is Role.USER and m.content)
    answered = "\n".join(m.content for m in messages if m.role is Role.ASSISTANT and m.content)
    return said, answered


def trace_signals(
    trace_id: str,
    new_messages: Sequence[Message],
    new_signals: Sequence[SignalInstance],
    previous_outputs: Sequence[ComparableOutput],
    embedder: Embedder | None,
) -> tuple[TraceSignals, ComparableOutput | None]:
    """The trace's signals, and its output prepared for the next traces' loop detection (None when
    it answered nothing or no embedder is configured); ``previous_outputs`` are the earlier ones."""
    values: dict[str, float] = {
        "confidence": proxy_confidence(Counter(s.type for s in new_signals)).score,
    }
    sources = {"confidence": "proxy"}
    if any(m.role is Role.TOOL and m.tool_result is not None for m in new_messages):
        # Present only when the trace used tools: with none there is nothing to be right about.
        values["tool_correctness"] = proxy_tool_correctness(Conversation("", list(new_messages))).score
        sources["tool_correctness"] = "proxy"
    said, answered = turn_texts(new_messages)
    output = None
    if embedder is not None and (said or answered):
        # What is not blank, embedded in one call (a blank text is never sent: an embeddings API
        # may refuse it); the answer's row is kept for the next traces' loop detection.
        wanted = [text for text in (said, answered) if text.strip()]
        rows = dict(zip(wanted, embedder.embed(wanted), strict=True)) if wanted else {}
        said_row, answered_row = rows.get(said), rows.get(answered)
        both = None if said_row is None or answered_row is None else (said_row, answered_row)
        values["coherence"] = coherence(said, answered, embedder, vectors=both).score
        sources["coherence"] = "embedding"
        if answered:
            output = ComparableOutput.of(answered, answered_row)
            if previous_outputs:
                values["loop_detection"] = loop_detection_between(output, previous_outputs).score
                sources["loop_detection"] = "embedding"
    shared_sources = _SOURCES.setdefault(tuple(sources.items()), sources)
    return TraceSignals(trace_id, sources=shared_sources, **values), output


# The few distinct ``sources`` a trace's signals have, one dict each for every trace (a dict of
# its own was ~180 bytes a trace kept; nothing changes a TraceSignals' sources in place).
_SOURCES: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
