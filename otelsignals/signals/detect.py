"""Runs every detector on what a trace added to its conversation.

Detectors are registered explicitly, each with whether it needs message text: when the
instrumentation did not record content (OTel's default), the structural detectors (tool
executions, model-call failures, turn counts) still run and the content ones are reported skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from otelsignals.model import SignalInstance
from otelsignals.signals import environment, errors, execution, handoff, interaction
from otelsignals.signals import taxonomy as t
from otelsignals.signals.base import DetectionContext, Detector


@dataclass(frozen=True)
class Registered:
    group: str  # what is reported as skipped, e.g. "interaction.misalignment"
    detector: Detector
    needs_content: bool


DETECTORS: tuple[Registered, ...] = (
    Registered(t.MISALIGNMENT, interaction.detect_correction, needs_content=True),
    Registered(t.MISALIGNMENT, interaction.detect_rephrase, needs_content=True),
    Registered(t.MISALIGNMENT, interaction.detect_clarification, needs_content=True),
    # Dragging only counts user turns, which are known even when their text was not recorded.
    Registered(t.STAGNATION, interaction.detect_dragging, needs_content=False),
    Registered(t.STAGNATION, interaction.detect_repetition, needs_content=True),
    Registered(t.DISENGAGEMENT, interaction.detect_escalation, needs_content=True),
    Registered(t.DISENGAGEMENT, interaction.detect_quit, needs_content=True),
    Registered(t.DISENGAGEMENT, interaction.detect_negative_stance, needs_content=True),
    Registered(t.SATISFACTION, interaction.detect_gratitude, needs_content=True),
    Registered(t.SATISFACTION, interaction.detect_confirmation, needs_content=True),
    Registered(t.SATISFACTION, interaction.detect_success, needs_content=True),
    # A transfer tool call is structure; its announcement in text is read when content is there.
    Registered(t.HANDOFF_CATEGORY, handoff.detect_handoff, needs_content=False),
    # Tool executions and model-call failures come from span status, error.type, HTTP codes and
    # exception events: structure, not content.
    *(Registered(t.FAILURE, d, needs_content=False) for d in execution.EXECUTION_DETECTORS[:5]),
    *(Registered(t.LOOPS, d, needs_content=False) for d in execution.EXECUTION_DETECTORS[5:]),
    *(Registered(t.EXHAUSTION, d, needs_content=False) for d in environment.ENVIRONMENT_DETECTORS),
)


def warm_up() -> None:
    """Load and compile the phrase libraries now, so the first analysed trace does not pay for it."""
    interaction.phrase_library()
    errors.library()
    handoff.library()


def detect(context: DetectionContext) -> tuple[list[SignalInstance], list[str]]:
    """(instances found, detector groups skipped for lack of content)."""
    found: list[SignalInstance] = []
    skipped: list[str] = []
    content = context.conversation.content_captured
    for entry in DETECTORS:
        if entry.needs_content and not content:
            if entry.group not in skipped:
                skipped.append(entry.group)
            continue
        found.extend(entry.detector(context))
    found = handoff.settle(found, context.prior_counts)
    found.sort(key=lambda signal: (signal.message_index, signal.type))
    return found, skipped
