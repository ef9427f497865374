"""Environment layer (SPEC §3): exhaustion caused by the outside world, not by the agent. Model-free.

Two sources, one instance per (leaf, message) at most:

- **tool results** that failed and that :func:`~otelsignals.signals.errors.classify_failure` puts in
  the environment layer (429 → ``rate_limit``, 5xx → ``api_error``, timeouts, connection errors,
  undecodable responses, context limits); the execution detectors leave them here. Metadata
  ``source: "tool"``.
- **failed model calls** of the current trace (``ctx.new_llm_calls`` with ``failed``): their HTTP
  status, ``error.type`` and exception message, classified the same way for a model call
  (``context_length_exceeded`` → ``context_overflow``; a 401 or 400 from the model API, which the
  agent did not cause as a tool misuse, → ``api_error``; a failure with no usable detail →
  ``api_error`` at confidence 0.5; a cancelled call → nothing). Metadata ``source: "llm_call"``.
  ``message_index`` is the last message present when the call failed: the last message read from
  that call's own span when there is one (matched by span id), else the conversation's last message
  (``ctx.absolute_index(len(ctx.messages) - 1)``), or 0 for an empty conversation. Several failed
  calls at the same message make one instance with ``count``.

Confidence is the classifier's (HTTP status / exception type 0.95, message text 0.8, an unexplained
failed model call 0.5).
"""

from __future__ import annotations

from typing import Any

from otelsignals.model import LlmCall, SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext, DetectorSpec, holds_message_numbers, memory_key
from otelsignals.signals.errors import classify_failure
from otelsignals.signals.failure import tool_failure_signals
from otelsignals.signals.taxonomy import (
    API_ERROR,
    CONTEXT_OVERFLOW,
    MALFORMED_RESPONSE,
    NETWORK,
    RATE_LIMIT,
    TIMEOUT,
)

SEEN_CALLS = 256  # model-call span ids remembered, so a call handed over twice counts once
EMITTED = 512  # (leaf, message) pairs remembered, so a message never gets a leaf twice
SPAN_LOOKBACK = 64  # messages searched back for the failed call's own span


def _llm_message_index(ctx: DetectionContext, call: LlmCall) -> int:
    messages = ctx.messages
    if not messages:
        return 0
    if call.span_id:
        for local in range(len(messages) - 1, max(-1, len(messages) - 1 - SPAN_LOOKBACK), -1):
            if messages[local].span_id == call.span_id:
                return ctx.absolute_index(local)
    return ctx.absolute_index(len(messages) - 1)


_EMITTED = holds_message_numbers("emitted")  # memory_key(leaf, _EMITTED): the messages signalled


def _remembered(ctx: DetectionContext, key: str) -> list[Any]:
    """The list kept under ``key``, or a new one (kept by :func:`_remember` once it holds anything:
    most conversations never see a failed call, and twelve empty lists cost each of them ~1 KB)."""
    value = ctx.memory.get(key)
    return value if isinstance(value, list) else []


def _remember(ctx: DetectionContext, key: str, values: list[Any], limit: int) -> None:
    del values[:-limit]
    if values:
        ctx.memory[key] = values


def llm_call_signals(ctx: DetectionContext, leaf: str) -> list[SignalInstance]:
    """The failed model calls of this trace that classify to ``leaf``, merged per message."""
    seen_key = memory_key(leaf, "llm_seen")
    seen = _remembered(ctx, seen_key)
    found: dict[int, SignalInstance] = {}
    for call in ctx.new_llm_calls or ():
        if not isinstance(call, LlmCall) or not call.failed:
            continue
        span = call.span_id.hex() if isinstance(call.span_id, bytes) and call.span_id else None
        if span is not None and span in seen:
            continue
        classification = classify_failure(
            call.status_code, call.error_type, call.error_message, None, source="llm_call"
        )
        if span is not None:
            seen.append(span)
        if classification is None or classification.leaf_type != leaf:
            continue
        index = _llm_message_index(ctx, call)
        existing = found.get(index)
        if existing is not None:
            existing.metadata["count"] = int(existing.metadata.get("count", 1)) + 1
            existing.confidence = max(existing.confidence, classification.confidence)
            continue
        found[index] = SignalInstance(
            type=leaf,
            message_index=index,
            confidence=classification.confidence,
            snippet=classification.snippet,
            metadata={
                "pattern": classification.pattern,
                "reason": classification.reason,
                "rule": classification.rule,
                "source": "llm_call",
                "status_code": classification.status_code
                if classification.status_code is not None
                else call.status_code,
                "error_type": call.error_type,
                "model": call.model,
                "count": 1,
            },
        )
    _remember(ctx, seen_key, seen, SEEN_CALLS)
    return list(found.values())


def environment_signals(ctx: DetectionContext, leaf: str) -> list[SignalInstance]:
    """Tool results and model calls of ``leaf``, at most one instance per message, ever."""
    try:
        emitted_key = memory_key(leaf, _EMITTED)
        emitted = _remembered(ctx, emitted_key)
        done = set(emitted)
        found: list[SignalInstance] = []
        for instance in [*tool_failure_signals(ctx, leaf), *llm_call_signals(ctx, leaf)]:
            if instance.message_index in done:
                for kept in found:  # the same message again: count it on the instance kept
                    if kept.message_index == instance.message_index:
                        kept.metadata["count"] = int(kept.metadata.get("count", 1)) + int(
                            instance.metadata.get("count", 1)
                        )
                continue
            done.add(instance.message_index)
            emitted.append(instance.message_index)
            found.append(instance)
        _remember(ctx, emitted_key, emitted, EMITTED)
        found.sort(key=lambda instance: instance.message_index)
        return found
    except Exception:  # never take the pipeline down over one odd conversation
        return []


def detect_api_error(ctx: DetectionContext) -> list[SignalInstance]:
    """5xx, overloaded, unavailable; a model call failing for no stated reason."""
    return environment_signals(ctx, API_ERROR)


def detect_timeout(ctx: DetectionContext) -> list[SignalInstance]:
    """408/504, ReadTimeout, "timed out", deadline exceeded."""
    return environment_signals(ctx, TIMEOUT)


def detect_rate_limit(ctx: DetectionContext) -> list[SignalInstance]:
    """429 (never an execution failure), quota exhausted, throttled; GitHub/Google 403 rate limits."""
    return environment_signals(ctx, RATE_LIMIT)


def detect_network(ctx: DetectionContext) -> list[SignalInstance]:
    """Connection refused or reset, DNS failure, TLS failure."""
    return environment_signals(ctx, NETWORK)


def detect_malformed_response(ctx: DetectionContext) -> list[SignalInstance]:
    """Invalid JSON or an unexpected schema in what a tool or API returned."""
    return environment_signals(ctx, MALFORMED_RESPONSE)


def detect_context_overflow(ctx: DetectionContext) -> list[SignalInstance]:
    """Token or context limit exceeded (context_length_exceeded, "prompt is too long", 413)."""
    return environment_signals(ctx, CONTEXT_OVERFLOW)


DETECTORS: tuple[DetectorSpec, ...] = (
    DetectorSpec((tx.API_ERROR,), detect_api_error, needs_content=False),
    DetectorSpec((tx.TIMEOUT,), detect_timeout, needs_content=False),
    DetectorSpec((tx.RATE_LIMIT,), detect_rate_limit, needs_content=False),
    DetectorSpec((tx.NETWORK,), detect_network, needs_content=False),
    DetectorSpec((tx.MALFORMED_RESPONSE,), detect_malformed_response, needs_content=False),
    DetectorSpec((tx.CONTEXT_OVERFLOW,), detect_context_overflow, needs_content=False),
)
