"""Runs every detector on what a trace added to its conversation.

The registry is built from the taxonomy: each category ``<layer>.<category>`` has one module,
``otelsignals.signals.<category>``, whose ``DETECTORS`` tuple declares its detectors and the leaf
types each finds (:class:`~otelsignals.signals.base.DetectorSpec`). Every leaf of the taxonomy must be
declared by exactly one detector of its own category, or the import fails. Detectors run in the
taxonomy's order. When the instrumentation did not record message text (OTel's default), the
detectors that need it are reported skipped, by category.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from otelsignals.model import RecentList, SignalInstance
from otelsignals.signals import base, errors, handoff, phrase_analysis
from otelsignals.signals import taxonomy as t
from otelsignals.signals.base import DetectionContext, Detector, DetectorSpec


@dataclass(frozen=True)
class Registered:
    group: str  # the category, reported as skipped without text, e.g. "interaction.misalignment"
    detector: Detector
    needs_content: bool
    leaves: tuple[str, ...]


def category_module_name(category: str) -> str:
    """``interaction.misalignment`` → ``otelsignals.signals.misalignment``."""
    return f"{__package__}.{category.rsplit('.', 1)[1]}"


def registered_for(category: str, specs: tuple[DetectorSpec, ...]) -> list[Registered]:
    """The category's detectors in the taxonomy's leaf order; raises when a leaf of the category is
    declared by no detector or by several, or a detector declares a leaf of another category."""
    leaves = [leaf for leaf in t.LEAF_TYPES if t.category_of(leaf) == category]
    declared = [leaf for spec in specs for leaf in spec.leaves]
    if sorted(declared) != sorted(leaves):
        missing = sorted(set(leaves) - set(declared))
        foreign = sorted(set(declared) - set(leaves))
        twice = sorted({leaf for leaf in declared if declared.count(leaf) > 1})
        raise ValueError(
            f"{category_module_name(category)}.DETECTORS must declare each leaf of {category} once: "
            f"missing {missing}, not of this category {foreign}, declared twice {twice}"
        )
    ordered = sorted(specs, key=lambda spec: min(leaves.index(leaf) for leaf in spec.leaves))
    return [Registered(category, spec.detect, spec.needs_content, spec.leaves) for spec in ordered]


def build_registry() -> tuple[Registered, ...]:
    registry: list[Registered] = []
    for category in t.CATEGORIES:
        module = importlib.import_module(category_module_name(category))
        registry += registered_for(category, module.DETECTORS)
    return tuple(registry)


DETECTORS: tuple[Registered, ...] = build_registry()
# Every detector-memory key the registered detectors rebuild when it is missing (their modules are
# imported now): what a cold conversation drops (conversation.ConversationState.go_cold).
REBUILT_WHEN_MISSING: frozenset[str] = frozenset(base.REBUILT_WHEN_MISSING)
HOLDS_MESSAGE_NUMBERS: frozenset[str] = frozenset(base.HOLDS_MESSAGE_NUMBERS)


def renumber_memory(memory: dict[str, Any], by: int) -> None:
    """``by`` messages were put in front of the conversation (a system prompt that came late): the
    message numbers the detectors remember move with them. What they rebuild when it is missing is
    moved too when it is a list of (message number, …) entries, as the latest messages of a role
    are kept (phrase_analysis.recent_messages), else dropped (a cache, rebuilt with the new
    numbers). Moved, not rebuilt: a rebuild sees only the messages kept, and a trim at
    sessions.max_messages in the same trace would have taken the latest user messages with it."""
    for key in list(memory):
        if key in REBUILT_WHEN_MISSING:
            value = memory[key]
            if isinstance(value, RecentList) and all(_numbered_entry(entry) for entry in value):
                value[:] = [base.moved_numbers(entry, by) for entry in value]
            else:
                del memory[key]
        elif is_numbered(key):
            memory[key] = base.moved_numbers(memory[key], by)


def _numbered_entry(entry: object) -> bool:
    return isinstance(entry, tuple) and bool(entry) and type(entry[0]) is int


def is_numbered(key: str) -> bool:
    """Whether detector memory under ``key`` holds message numbers (base.HOLDS_MESSAGE_NUMBERS names
    the key, or its part after the last ':')."""
    return key.rpartition(":")[2] in HOLDS_MESSAGE_NUMBERS


def warm_up() -> None:
    """Load and compile the phrase libraries now, so the first analysed trace does not pay for it."""
    phrase_analysis.phrase_library()
    errors.library()
    handoff.library()


def detect(
    context: DetectionContext, disabled: frozenset[str] = frozenset()
) -> tuple[list[SignalInstance], list[str]]:
    """(instances found, detector groups skipped for lack of content); ``disabled`` leaf types and
    categories are never reported, and a detector all of whose leaves are disabled does not run."""
    found: list[SignalInstance] = []
    skipped: list[str] = []
    content = context.conversation.content_captured
    for entry in DETECTORS:
        if disabled and all(leaf in disabled or entry.group in disabled for leaf in entry.leaves):
            continue
        if entry.needs_content and not content:
            if entry.group not in skipped:
                skipped.append(entry.group)
            continue
        found.extend(entry.detector(context))
    if disabled:
        found = [s for s in found if s.type not in disabled and t.category_of(s.type) not in disabled]
    found = handoff.settle(found, context.prior_counts)
    found.sort(key=lambda signal: (signal.message_index, signal.type))
    return found, skipped


def detectors_of(*categories: str) -> tuple[Detector, ...]:
    """The registered detectors of ``categories``, in run order (for running one layer alone)."""
    return tuple(entry.detector for entry in DETECTORS if entry.group in categories)
