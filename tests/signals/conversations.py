"""Tiny helpers: write a conversation as ("user", "text") / ("assistant", "text") pairs and run
detectors over it the way the pipeline does, incrementally, one trace (here: one step) at a time; read
the conversation examples of a rule in the data files."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from otelsignals.model import Conversation, Message, Role, SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import BASELINE_USER_TURNS, DetectionContext, Detector
from otelsignals.signals.detect import detectors_of
from otelsignals.signals.word_lists import phrase_file

Turn = tuple[str, str]  # (role, text): "user", "assistant", "tool" or "system"

# A neutral opening so that the message under test follows an assistant turn.
OPENING: list[Turn] = [
    ("user", "Hi, I need some help with my account."),
    ("assistant", "Sure, I have your account open."),
]


def message(role: str, text: str | None) -> Message:
    return Message(Role(role), text)


def conversation(turns: Iterable[Turn], key: str = "conv-1") -> Conversation:
    return Conversation(key, [message(role, text) for role, text in turns])


def run_incrementally(
    detectors: Sequence[Detector],
    turns: Sequence[Turn],
    *,
    step: int = 1,
    baseline: int = BASELINE_USER_TURNS,
    memory: dict[str, Any] | None = None,
) -> list[SignalInstance]:
    """Add ``step`` messages at a time and run every detector over the new ones, as the pipeline will."""
    convo = Conversation("conv-1")
    memory = {} if memory is None else memory
    found: list[SignalInstance] = []
    for start in range(0, len(turns), step):
        convo.messages.extend(message(role, text) for role, text in turns[start : start + step])
        ctx = DetectionContext(convo, new_from=start, memory=memory, baseline_user_turns=baseline)
        for detector in detectors:
            found += detector(ctx)
    return found


def run_once(
    detectors: Sequence[Detector], turns: Sequence[Turn], *, baseline: int = BASELINE_USER_TURNS
) -> list[SignalInstance]:
    """Run every detector once over the whole conversation."""
    return run_incrementally(detectors, turns, step=max(len(turns), 1), baseline=baseline)


def of_type(instances: Iterable[SignalInstance], signal_type: str) -> list[SignalInstance]:
    return [i for i in instances if i.type == signal_type]


def key(instance: SignalInstance) -> tuple[Any, ...]:
    """A comparable identity of an instance (type, index, confidence, snippet, metadata)."""
    return (
        instance.type,
        instance.message_index,
        instance.confidence,
        instance.snippet,
        repr(instance.metadata),
    )


U, A, T = "user", "assistant", "tool"

INTERACTION_DETECTORS = detectors_of(tx.MISALIGNMENT, tx.STAGNATION, tx.DISENGAGEMENT, tx.SATISFACTION)


def opened(*turns: Turn) -> list[Turn]:
    """``turns`` after the neutral OPENING exchange."""
    return [*OPENING, *turns]


def only(signal: str, turns: Sequence[Turn]) -> list[SignalInstance]:
    """The instances of ``signal`` the interaction layer finds in ``turns`` run turn by turn."""
    return of_type(run_incrementally(INTERACTION_DETECTORS, turns), signal)


def assert_fires(signal: str, turns: Sequence[Turn], index: int | None = None) -> None:
    """``signal`` fires on message ``index`` (default: the last) and nowhere else: one instance per
    kind of pattern that matched there (the reference's counting: "THIS IS USELESS!!!" is a complaint,
    shouting and punctuation), each with a snippet of that user's own words."""
    index = len(turns) - 1 if index is None else index
    found = only(signal, turns)
    assert found, f"{signal} did not fire"
    kinds = [instance.metadata["pattern"] for instance in found]
    assert all(kinds) and len(set(kinds)) == len(kinds), kinds
    for instance in found:
        assert instance.type == signal
        assert instance.message_index == index
        assert 0.0 <= instance.confidence <= 1.0
        assert instance.snippet and instance.snippet in turns[index][1] and len(instance.snippet) <= 200


def rule_conversations(category: str, rule: str, kind: str) -> list[list[Turn]]:
    """The ``positives`` or ``near_misses`` of a rule in ``phrases/<category>.yaml`` as turns, after the
    OPENING exchange when the rule says ``opening: true``."""
    entry = phrase_file(category)["rules"][rule]
    prefix = OPENING if entry["opening"] else []
    return [[*prefix, *((str(role), str(text)) for role, text in example)] for example in entry[kind]]
