"""interaction.satisfaction (SPEC §3): the user thanks the agent, confirms, or says the task worked.

Phrase groups in ``phrases/satisfaction.yaml``. A confirmation made only of bare acknowledgements
("got it", "I see") does not count after an agent answer that refused or gave bad news.
"""

from __future__ import annotations

from otelsignals.model import SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext, DetectorSpec
from otelsignals.signals.phrase_analysis import (
    BAD_NEWS,
    analysis_of,
    detect_phrases,
    phrase_instance,
    phrase_library,
    previous_assistant_cues,
    user_texts,
)

# --- satisfaction ----------------------------------------------------------------------------------


def detect_gratitude(ctx: DetectionContext) -> list[SignalInstance]:
    """Thanks: "thanks", "thank you", "thx", "ty", "much appreciated", "cheers"."""
    return detect_phrases(ctx, tx.GRATITUDE, after_assistant=True)


def detect_confirmation(ctx: DetectionContext) -> list[SignalInstance]:
    """Explicit satisfaction or understanding: "perfect", "exactly what I needed", "got it". A message
    whose only confirmation is an acknowledgement ("got it", "I see", "understood") does not count
    when the agent's last answer refused or gave bad news: the user accepts it, nothing more."""
    found: list[SignalInstance] = []
    groups = phrase_library().groups
    for i, text, follows in user_texts(ctx):
        analysis = analysis_of(ctx, text)
        instance = phrase_instance(
            tx.CONFIRMATION, ctx.absolute_index(i), text, analysis, opening=not follows
        )
        if instance is None:
            continue
        acknowledged = all(groups[m.group].acknowledgement for m in analysis.hits[tx.CONFIRMATION])
        if acknowledged and BAD_NEWS in previous_assistant_cues(ctx, i):
            continue
        found.append(instance)
    return found


def detect_success(ctx: DetectionContext) -> list[SignalInstance]:
    """The task worked: "it works now", "that fixed it", "tests pass", "the booking went through"."""
    return detect_phrases(ctx, tx.SUCCESS, after_assistant=True)


DETECTORS: tuple[DetectorSpec, ...] = (
    DetectorSpec((tx.GRATITUDE,), detect_gratitude),
    DetectorSpec((tx.CONFIRMATION,), detect_confirmation),
    DetectorSpec((tx.SUCCESS,), detect_success),
)
