"""Readers that turn span attributes and events of each instrumentation convention into messages.

The registry is explicit: a span is offered to each reader in ``READERS`` order and the first that
recognises it wins, so the current OTel GenAI attributes take precedence over legacy forms that
some libraries still emit beside them. Registering a reader is all a new convention needs: the
GenAI pre-filter searches for the key prefixes the registered readers declare (markers.py), and the
span decoder (span_decoder.py) decodes and offers them the spans.
"""

from __future__ import annotations

from otelsignals.conventions.base import Reader, SpanReading, SpanView
from otelsignals.conventions.genai import GENAI_READER
from otelsignals.conventions.openinference import OPENINFERENCE_READER
from otelsignals.conventions.openllmetry import OPENLLMETRY_READER
from otelsignals.conventions.pydantic_ai import PYDANTIC_AI_READER
from otelsignals.conventions.tools import TOOLS_READER
from otelsignals.conventions.vercel_ai import VERCEL_AI_READER

# Current OTel GenAI first (several libraries emit it beside their own legacy keys), then the
# OTel tool spans, then each library's own form.
READERS: tuple[Reader, ...] = (
    GENAI_READER,
    TOOLS_READER,
    OPENLLMETRY_READER,
    PYDANTIC_AI_READER,
    OPENINFERENCE_READER,
    VERCEL_AI_READER,
)


__all__ = ["READERS", "Reader", "SpanReading", "SpanView"]
