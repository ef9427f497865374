"""Writes an analysis onto the spans (SPEC §5): attributes, one event per signal, the 🚩 marker.

Enriched are the span that carries the analysed conversation (its latest model call) and the
trace's root span. Events go on the model-call span only, so a backend counting events counts
each signal once. A span that already carries ``signals.quality`` (re-sent by a client, or
enriched by an upstream otelsignals) is left alone, and no existing attribute is ever overwritten.

Every enriched span names the conversation and the agent it was analysed under
(``signals.conversation.id``, ``signals.agent.id``): the instrumentation may carry them under any
of several keys, or only on another span of the trace (the key: on the app's request span; the
agent: a resource's ``service.name``), and a backend can only group by an attribute the span has.
The flag is always written as ``signals.flagged``; ``signals.flag_span_name: false`` keeps the span
name as it came, for RED metrics keyed on span names.

Private by default: with ``signals.snippets`` off, no message or argument text leaves on a span.
``signal.snippet`` is not written, and ``signal.metadata`` goes through
:func:`~otelsignals.signals.base.redact_metadata`: the values detectors declare as content (tool
arguments, the user's rejected or shared words, a clarified term…), names that do not look like
identifiers and any undeclared key become stable ``"blake2b:<16 hex>"`` digests. With snippets on,
metadata is written as the detectors made it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otelsignals.analysis import Analysis
from otelsignals.config import SignalsConfig
from otelsignals.conversation import UNKNOWN_AGENT
from otelsignals.model import SignalInstance
from otelsignals.otlp.wire import SpanRecord, span_head
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.reputation import Reputation
from otelsignals.scoring import severity
from otelsignals.signals import taxonomy as t
from otelsignals.signals.base import redacted_metadata

FLAG = " \U0001f6a9"  # " 🚩"
MARKER_ATTRIBUTE = "signals.quality"


def legacy_attributes(
    counts: Mapping[str, int], leaves: Mapping[str, int], user_turns: int
) -> dict[str, Any]:
    """The reference's pre-taxonomy keys, each only when it has something to say (as the reference
    emits them: a dashboard's "has frustration" is the key's presence)."""
    misalignment, frustration = counts.get(t.MISALIGNMENT, 0), leaves.get(t.NEGATIVE_STANCE, 0)
    attributes: dict[str, Any] = {}
    if misalignment:
        attributes["signals.follow_up.repair.count"] = misalignment
        attributes["signals.follow_up.repair.ratio"] = round(misalignment / max(user_turns, 1), 4)
    if frustration:
        attributes["signals.frustration.count"] = frustration
        attributes["signals.frustration.severity"] = severity(frustration)
    if counts.get(t.STAGNATION, 0):
        attributes["signals.repetition.count"] = counts[t.STAGNATION]
    if leaves.get(t.ESCALATION, 0) or leaves.get(t.QUIT, 0):
        attributes["signals.escalation.requested"] = True
    if counts.get(t.SATISFACTION, 0):
        attributes["signals.positive_feedback.count"] = counts[t.SATISFACTION]
    return attributes


def span_attributes(
    analysis: Analysis, legacy: bool = True, reputation: Reputation | None = None
) -> dict[str, Any]:
    """The ``signals.*`` attributes of SPEC §5, in the order they are written."""
    s = analysis.score
    attributes: dict[str, Any] = {
        "signals.conversation.id": analysis.conversation_id,
        "signals.agent.id": analysis.agent_id or UNKNOWN_AGENT,
        "signals.flagged": s.flagged,
        "signals.quality": s.quality,
        "signals.quality_score": float(s.quality_score),
        "signals.turn_count": s.turn_count,
        "signals.efficiency_score": float(s.efficiency_score),
        "signals.triage.priority": float(analysis.priority.value),
    }
    for category, count in s.counts.items():
        if count > 0:
            attributes[f"signals.{category}.count"] = count
            attributes[f"signals.{category}.severity"] = severity(count)
    if legacy:
        attributes |= legacy_attributes(s.counts, s.leaf_counts, s.user_turns)
    if analysis.skipped:
        attributes["signals.skipped"] = list(analysis.skipped)
    if reputation is not None:
        # The score is withheld while the agent is calibrating (fewer than 50 evaluations).
        if reputation.score is not None:
            attributes["signals.reputation.score"] = reputation.score
        attributes["signals.reputation.lifecycle"] = reputation.lifecycle
    return attributes


class Enricher:
    def __init__(self, config: SignalsConfig) -> None:
        self.config = config

    def enrich(self, trace: ReleasedTrace, analysis: Analysis, reputation: Reputation | None = None) -> int:
        """Enrich the trace's spans in place; returns how many spans were changed."""
        targets: list[tuple[SpanRecord, bool]] = []
        for record in trace.spans:
            if record.span_id == analysis.span_id:
                targets.append((record, True))
            elif record.is_local_root:
                targets.append((record, False))
        attributes = span_attributes(analysis, self.config.legacy_attributes, reputation)
        flag = self.config.flag_span_name and analysis.score.flagged
        # The attributes serialized once, for every span they are appended to.
        attribute_block = Span()
        self._write(attribute_block, attributes, [], 0)
        block = attribute_block.SerializeToString()
        changed = 0
        for record, carries_events in targets:
            signals = analysis.new_signals if carries_events else []
            data = self._appended(record.data, block, signals, flag)
            if data is None:
                data = self._rewritten(record.data, attributes, signals, flag)
            if data is None:
                continue
            trace.size += len(data) - len(record.data)
            record.data = data
            changed += 1
        return changed

    def _appended(
        self, data: bytes, attribute_block: bytes, signals: list[SignalInstance], flag: bool
    ) -> bytes | None:
        """The span enriched without parsing or re-serializing what it carries: the new attributes
        (``attribute_block``, serialized as a span of their own), events and name are appended.
        Protobuf parsers merge a message's repeated fields across its occurrences and keep the last
        value of a singular one, so the result reads as the span with the attributes and events
        added and the name replaced.

        None when the span has a ``signals.`` attribute (it may be the marker or a key written,
        which only a parse can tell) or too many fields to walk cheaply: the caller then rewrites
        it in full.
        """
        try:
            head = span_head(data, _MAX_WALKED_FIELDS)
        except IndexError:
            return None
        if head is None or any(key.startswith(_SIGNALS_PREFIX) for key in head.attribute_keys):
            return None
        added = Span()
        self._write(added, {}, signals, head.end_time_unix_nano or head.start_time_unix_nano)
        if flag and not head.name.endswith(FLAG):
            added.name = head.name + FLAG
        return data + attribute_block + added.SerializeToString()

    def _rewritten(
        self, data: bytes, attributes: dict[str, Any], signals: list[SignalInstance], flag: bool
    ) -> bytes | None:
        """The span parsed, enriched and serialized again; None when it already carries the marker."""
        span = Span.FromString(data)
        if any(kv.key == MARKER_ATTRIBUTE for kv in span.attributes):
            return None
        self._write(span, attributes, signals, span.end_time_unix_nano or span.start_time_unix_nano)
        if flag and not span.name.endswith(FLAG):
            span.name += FLAG
        return span.SerializeToString()

    def _write(
        self, span: Span, attributes: dict[str, Any], signals: list[SignalInstance], event_time: int
    ) -> None:
        present = {kv.key for kv in span.attributes}
        for key, value in attributes.items():
            if key not in present:
                write_attribute(span.attributes.add(), key, value)
        for signal in signals:
            event = span.events.add()
            event.name = f"signal.{signal.type}"
            event.time_unix_nano = event_time
            write_attribute(event.attributes.add(), "signal.type", signal.type)
            write_attribute(event.attributes.add(), "signal.message_index", signal.message_index)
            write_attribute(event.attributes.add(), "signal.confidence", float(signal.confidence))
            if self.config.snippets and signal.snippet:
                write_attribute(event.attributes.add(), "signal.snippet", signal.snippet)
            metadata = signal.metadata if self.config.snippets else redacted_metadata(signal)
            write_attribute(
                event.attributes.add(), "signal.metadata", orjson.dumps(metadata, default=str).decode()
            )


_SIGNALS_PREFIX = b"signals."
# Above this many top-level fields (attributes and events, mostly: OpenLLMetry's indexed histories) a
# parse in C costs less than walking the fields in Python.
_MAX_WALKED_FIELDS = 64


def write_attribute(kv: KeyValue, key: str, value: Any) -> None:
    """Fill an attribute with a Python value (bool, int, float, list of strings, else text)."""
    kv.key = key
    if isinstance(value, bool):
        kv.value.bool_value = value
    elif isinstance(value, int):
        kv.value.int_value = value
    elif isinstance(value, float):
        kv.value.double_value = value
    elif isinstance(value, list):
        for item in value:
            kv.value.array_value.values.add().string_value = str(item)
    else:
        kv.value.string_value = str(value)
