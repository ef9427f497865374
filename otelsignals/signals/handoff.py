"""The agent handing the conversation to a person: ``interaction.handoff.transfer``.

Evidence (``phrases/handoff.yaml``): a tool call whose name pairs a transfer verb with a person
(``transfer_to_human_agents``), or an assistant message announcing the transfer ("You are being
transferred to a human agent"); offers ("would you like me to transfer you?") and negations ("I
can't transfer you") are not a transfer. One instance per user turn: the tool call and the
announcement that follows it are one hand-off.

Given up or routed: a hand-off whose message, or the text of whose transfer call's arguments (the
summary for the person taking over), says the problem outlasted what the agent tried ("no service
despite the APN reset", "the issue persists", "I was unable to resolve it") carries
``unresolved``: the library phrase found (``phrases/handoff.yaml``, ``unresolved``). Routing a case
the agent must not handle names the reason instead ("the SIM is PIN-locked") and carries none; the
triage priority weighs an unresolved hand-off more (otelsignals/triage.py).

Who asked, and after what, is settled in :func:`settle` once every detector has run on the trace:

- ``asked_by: "user"`` when the trace's escalation signal (the user asking for a person) comes
  before the hand-off, else ``"agent"``;
- ``after``: the friction categories the conversation showed before the hand-off (misalignment,
  disengagement, stagnation, execution failures and loops, exhaustion).

A user's request for a person that the agent honours **with no friction before it** (the agent
declined per policy, the user asked to be transferred) is the hand-off's request, not a
disengagement: the escalation instance is dropped and the hand-off says ``asked_by: "user"``. After
friction the escalation stays, as SPEC §3 reads it. The request and the hand-off must be analysed
in the same trace (one user turn); a hand-off in a later trace leaves an earlier escalation as it is.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from otelsignals.model import Role, SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext, DetectorSpec, memory_key
from otelsignals.signals.matching import PhraseGroup, PhraseMatcher, snippet
from otelsignals.signals.tool_calls import PROGRESS, progress_done, progress_start
from otelsignals.signals.word_lists import strings

CONF_TOOL = 0.95
CONF_ANNOUNCEMENT = 0.85
# Categories that count as friction before a hand-off. Satisfaction is not friction, and the
# escalation the hand-off answers is judged by this very rule.
FRICTION_CATEGORIES = (
    tx.MISALIGNMENT,
    tx.DISENGAGEMENT,
    tx.STAGNATION,
    tx.FAILURE,
    tx.LOOPS,
    tx.EXHAUSTION,
)
_NAME_PARTS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")  # linear: tool names are short, bounded below
_NAME_LIMIT = 128


@dataclass(frozen=True)
class HandoffLibrary:
    verbs: frozenset[str]
    people: frozenset[str]
    announcements: PhraseMatcher
    data: Mapping[str, Any]
    unresolved: PhraseMatcher | None = None
    # Every announcement phrase matches this: a cheap test before the scan (None: no test).
    announcement_stems: re.Pattern[str] | None = None
    # Every match of announcement_stems holds one of these: a cheaper test before it.
    stem_words: tuple[str, ...] = ()

    def is_handoff_tool(self, name: str | None) -> bool:
        if not isinstance(name, str) or not name:
            return False
        words = {part.lower() for part in _NAME_PARTS.findall(name[:_NAME_LIMIT])}
        return bool(words & self.verbs) and bool(words & self.people)

    def announcement(self, text: str) -> tuple[int, int] | None:
        """(start, end) of the first announcement in ``text`` that is neither negated nor quoted."""
        stems = self.announcement_stems
        if stems is not None:
            folded = text.casefold()
            words = self.stem_words
            if (words and not any(word in folded for word in words)) or not stems.search(folded):
                return None
        for match in self.announcements.find(text):
            if not match.negated and not match.quoted:
                return match.start, match.end
        return None

    def unresolved_phrase(self, texts: list[str]) -> str | None:
        """The first ``unresolved`` phrase (as written in the library) in ``texts``, unquoted."""
        if self.unresolved is None:
            return None
        for text in texts:
            for match in self.unresolved.find(text[:UNRESOLVED_TEXT_LIMIT]):
                if not match.quoted:
                    return match.phrase
        return None


# Characters of a hand-off's texts read for `unresolved` (a summary is a few sentences; bounded work).
UNRESOLVED_TEXT_LIMIT = 4000


def parse_library(data: Mapping[str, Any]) -> HandoffLibrary:
    tools, said = data["tool_names"], data["announcements"]
    group = PhraseGroup(
        name="announcement",
        phrases=strings(said["phrases"], "announcements: phrases"),
        exclude=strings(said.get("exclude"), "announcements: exclude"),
    )
    return HandoffLibrary(
        verbs=frozenset(word.lower() for word in strings(tools["verbs"], "tool_names: verbs")),
        people=frozenset(word.lower() for word in strings(tools["people"], "tool_names: people")),
        announcements=PhraseMatcher([group]),
        data=data,
        announcement_stems=_any_of(strings(said.get("requires"), "announcements: requires")),
        stem_words=strings(said.get("requires_words"), "announcements: requires_words"),
        unresolved=_unresolved_matcher(data.get("unresolved")),
    )


def _unresolved_matcher(section: Mapping[str, Any] | None) -> PhraseMatcher | None:
    if not section:
        return None
    group = PhraseGroup(
        name="unresolved",
        phrases=strings(section["phrases"], "unresolved: phrases"),
        negation=False,  # the phrases carry their own ("did not resolve")
        exclude=strings(section.get("exclude"), "unresolved: exclude"),
    )
    return PhraseMatcher([group])


def _any_of(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    return re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None


@functools.cache
def library() -> HandoffLibrary:
    source = resources.files("otelsignals.signals").joinpath("phrases", "handoff.yaml")
    return parse_library(yaml.safe_load(source.read_text(encoding="utf-8")))


_DONE_KEY = memory_key("handoff", PROGRESS)
_TURN_KEY = "handoff:this_turn"  # a hand-off was found since the latest user message


def detect_handoff(ctx: DetectionContext) -> list[SignalInstance]:
    lib = library()
    start = progress_start(ctx, _DONE_KEY)
    found: list[SignalInstance] = []
    handed_off = bool(ctx.memory.get(_TURN_KEY))
    for index in range(start, len(ctx.messages)):
        message = ctx.messages[index]
        if message.role is Role.USER:
            handed_off = False
            continue
        if handed_off:
            continue
        instance = _handoff_in(lib, message, ctx.absolute_index(index))
        if instance is not None:
            found.append(instance)
            handed_off = True
    ctx.memory[_TURN_KEY] = handed_off
    progress_done(ctx, _DONE_KEY)
    return found


def _handoff_in(lib: HandoffLibrary, message: Any, index: int) -> SignalInstance | None:
    if message.role is Role.ASSISTANT:
        found = None
        for call in message.tool_calls:
            if lib.is_handoff_tool(call.name):
                found = _instance(index, CONF_TOOL, call.name, {"via": "tool", "tool": call.name})
                break
        if found is None and message.content:
            span = lib.announcement(message.content)
            if span is not None:
                text = snippet(message.content, *span)
                found = _instance(index, CONF_ANNOUNCEMENT, text, {"via": "message"})
        if found is not None:
            texts = [message.content] if message.content else []
            for call in message.tool_calls:
                texts += _strings_in(call.arguments)
            phrase = lib.unresolved_phrase(texts)
            if phrase is not None:
                found.metadata["unresolved"] = phrase
        return found
    elif message.role is Role.TOOL and message.tool_result is not None:
        # The tool span alone (message content not captured): its name still says what it did.
        name = message.tool_result.name
        if lib.is_handoff_tool(name):
            return _instance(index, CONF_TOOL, name, {"via": "tool", "tool": name})
    return None


def _strings_in(value: object, limit: int = 16) -> list[str]:
    """The strings of a tool call's parsed arguments, and of the objects among them (a summary is
    usually a top-level string; at most ``limit`` values looked at in each)."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, dict):
        return []
    found: list[str] = []
    for item in itertools.islice(value.values(), limit):
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            found += [inner for inner in itertools.islice(item.values(), limit) if isinstance(inner, str)]
    return found


def _instance(index: int, confidence: float, text: str | None, metadata: dict[str, Any]) -> SignalInstance:
    return SignalInstance(tx.HANDOFF, index, confidence, text, {"asked_by": "agent", **metadata})


def settle(found: list[SignalInstance], prior_counts: Mapping[str, int]) -> list[SignalInstance]:
    """Fill in who asked for each hand-off and after what friction; drop an escalation that a
    frictionless hand-off answered (module docstring). ``found`` is one trace's instances."""
    handoffs = [signal for signal in found if signal.type == tx.HANDOFF]
    if not handoffs:
        return found
    dropped: set[int] = set()
    for handoff in handoffs:
        before = [signal for signal in found if signal.message_index < handoff.message_index]
        requests = [signal for signal in before if signal.type == tx.ESCALATION]
        friction = {tx.category_of(leaf) for leaf, count in prior_counts.items() if count > 0} | {
            tx.category_of(signal.type) for signal in before if signal.type != tx.ESCALATION
        }
        after = [category for category in FRICTION_CATEGORIES if category in friction]
        handoff.metadata["after"] = after
        if requests:
            handoff.metadata["asked_by"] = "user"
            # Where, not what: message text leaves only as a snippet, which can be switched off.
            handoff.metadata["request_index"] = requests[-1].message_index
            if not after:
                dropped.update(id(signal) for signal in requests)
    return [signal for signal in found if id(signal) not in dropped]


DETECTORS: tuple[DetectorSpec, ...] = (
    DetectorSpec(
        (tx.HANDOFF,), detect_handoff, needs_content=False
    ),  # a transfer tool call is structure; its announcement is read when text is there
)
