"""What the interaction detectors share: the phrase library, one scan per message, and the rules of a hit.

The interaction layer (SPEC §3) has one module per category, each with its detectors and its phrase
data: :mod:`~otelsignals.signals.misalignment` (with :mod:`~otelsignals.signals.rephrase`),
:mod:`~otelsignals.signals.stagnation`, :mod:`~otelsignals.signals.disengagement`,
:mod:`~otelsignals.signals.satisfaction`, and :mod:`~otelsignals.signals.outcome` (the user's report
that the problem persists, beyond SPEC §3's leaves). Every detector is incremental: it looks at the
messages from ``ctx.new_from`` on and keeps what it must remember in ``ctx.memory`` (one dict per
conversation). Only USER messages feed misalignment, disengagement, satisfaction and outcome;
stagnation.repetition reads ASSISTANT messages and stagnation.dragging counts USER turns.

Phrases come from ``phrases/<category>.yaml`` (data, with positive and near-miss examples per group)
and ``phrases/interaction.yaml`` (negators, spelling lists and context cues all groups share), matched
by one :class:`~otelsignals.signals.matching.PhraseMatcher` built on first use: :func:`analyse_text`
scans a message once for every group and every detector reads that one scan. A hit counts when it is
neither quoted nor (for groups that respect negation) negated.

Misalignment, satisfaction and quit read most phrases only after an assistant turn: there is nothing to
correct, clarify or be satisfied with yet, "thanks in advance" is not satisfaction, and a first
message "cancel my subscription" is the task, not the user leaving. But the sidecar often sees a
conversation only from the middle, so the phrase groups marked ``first_message`` (unambiguous
statements: "I'm confused.", "forget it, I'll just go to the store", "that's exactly what I needed",
"that fixed it") also fire on a user message with no assistant turn before it; context-dependent
signals (a correction, a rephrase, a term question, gratitude) still need one. Escalation and
negative stance fire on any user message.

Context rules (cue lists in the YAML's ``cues`` section, matched by a second PhraseMatcher):
negative stance is dropped when the message blames a third party or the world ("my flight got
delayed again, so frustrating") and nothing in it points at the agent, the chat or the service
("you keep…", "this chat"); a confirmation made of acknowledgements only ("got it", "I see",
"understood", the ``acknowledgement`` groups) is dropped when the agent's last answer refused or gave
bad news ("unfortunately…", "I can't…"): accepting bad news is not satisfaction; "I meant…" (the
``answers_which`` groups) is no correction when the agent's last answer asked which one the user
meant ("Which Blue do you mean?"): it answers the question. A satisfaction hit
in the value of a status readout (a message with two or more ``label: value`` lines, "- **Signal
Strength**: Excellent (4 bars)", "Connection: Connected") reports a state, not the user's reaction
(:func:`readout_values`), so it does not count.

Confidence of a phrase hit (documented rule, :func:`phrase_confidence`): the group's base confidence
from the YAML, minus 0.15 when a word matched through a typo, plus 0.05 when the phrase is the whole
message, multiplied for messages longer than 40 tokens by ``max(0.6, (40 / tokens) ** 0.15)`` (the
phrase is a small part of a long text), clamped to [0.05, 0.99]. The best hit of a leaf in a message
gives its instance; there is at most one instance per (leaf, message).

Metadata keys are declared in :mod:`otelsignals.signals.base`. ``phrase`` is the phrase as written
in the library, never the user's words; the user's own words (``rejected``, ``term``, ``shared``,
``brought_back``, a piecemeal ``marker``) are content, sent as ``blake2b:`` digests when
``signals.snippets`` is off. A new key must be declared there.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from otelsignals.model import Message, RecentList, Role, SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext, holds_message_numbers
from otelsignals.signals.matching import (
    DEFAULT_NEGATORS,
    Match,
    PhraseGroup,
    PhraseMatcher,
    Scan,
    clause_snippet,
    phrase_tokens,
)
from otelsignals.signals.tokens import Token, inside, tokenise, unify
from otelsignals.signals.word_lists import phrase_file, strings, word_set

FUZZY_PENALTY = 0.15
WHOLE_MESSAGE_BONUS = 0.05
LONG_MESSAGE_TOKENS = 40
LONG_MESSAGE_FLOOR = 0.6

COMPARE_CHARS = 4000  # characters of a message compared with earlier ones: bounded cost per comparison
SEED_LOOKBACK = 50  # messages looked back over when the memory is new but messages were analysed before

STOP_WORDS = word_set("interaction", "stop_words", "words")
SATISFACTION = (tx.GRATITUDE, tx.CONFIRMATION, tx.SUCCESS)
# a message with one of these makes its "!!!" anger whatever the sentence ("get me a human!!!")
COMPLAINTS = (tx.CORRECTION, tx.ESCALATION, tx.QUIT, tx.NEGATIVE_STANCE)

# --- the phrase library ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupSpec:
    group: PhraseGroup
    signal: str
    positives: tuple[str, ...] = ()
    near_misses: tuple[str, ...] = ()
    unless_satisfied: bool = False  # dropped when a satisfaction group fires in the same message
    statement_only: bool = False  # dropped when its clause is a question ("works now?", "all set?")
    # dropped when a complaint (a negative-stance group not itself unless_satisfied) fires in the same
    # message: "great, now it's even worse" is sarcasm
    unless_complaining: bool = False
    # a trouble cue ("it crashed", "which is down", "by mistake"): it counts (as its signal) only beside
    # a bare praise word and no other satisfaction ("which is down. brilliant."), see _sarcastic
    with_praise: bool = False
    # also fires on a user message with no assistant turn before it (the first message as the sidecar
    # sees it); other groups of misalignment, satisfaction and quit need an assistant turn first
    first_message: bool = False
    # dropped when its clause closes with a single "?" ("really?" is surprise; "really??" and
    # "really." are not)
    unless_plain_question: bool = False
    # dropped when the message asks something after the hit's clause: a user who still asks has not
    # given up ("looks like I won't be able to get there by 5, can the courier wait?")
    unless_asking: bool = False
    # a bare acknowledgement ("got it", "I see"): confirmation only when the agent's last answer did
    # not refuse or give bad news (see detect_confirmation)
    acknowledgement: bool = False
    # "I meant…": no correction when the agent's last answer asked which one the user meant (the
    # asked_which cue): the user answers the question (see detect_correction)
    answers_which: bool = False
    # an irony marker ("🙃"): it counts (as its signal) only beside thanks or praise and no success,
    # and then takes their place ("thanks so much for all your help 🙃" is no gratitude)
    ironic: bool = False
    # dropped when the message holds any trouble word (``troubled`` in interaction.yaml: a negator, "but",
    # "still", "if", "wrong", "pending"…) or trouble cue: a state read off a screen ("it says
    # delivered", "the dashboard is green") is an outcome only in a message that reports nothing amiss
    unless_troubled: bool = False
    # dropped when said as a condition about a later possibility: a hypothetical want in its clause and
    # a condition that is no courtesy in its sentence ("if it jumps a lot I'd want to speak to
    # someone"): ``conditions``, ``courtesies`` and ``hypothetical`` in interaction.yaml
    unless_hypothetical: bool = False
    opening_positives: tuple[str, ...] = ()  # sent as the first message: must fire the group
    opening_near_misses: tuple[str, ...] = ()  # sent as the first message: must fire nothing of it


@dataclass(frozen=True)
class PhraseLibrary:
    matcher: PhraseMatcher
    groups: dict[str, GroupSpec] = field(default_factory=dict)
    # words a sarcastic confirmation is made of ("great", "super helpful", "oh wonderful"): a confirmation
    # hit all of whose words are praise words can be sarcasm (see _sarcastic)
    praise_words: frozenset[str] = frozenset()
    # context cues (the YAML's ``cues``): third_party, agent (in user text), bad_news (in the agent's)
    cues: PhraseMatcher | None = None
    cue_examples: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)
    # characters that mark a message as ironic ("🙃"): its thanks and praise are then no satisfaction
    # (the ``ironic`` groups, see _ironic); looked for as plain substrings, only when such a group hit
    irony_markers: tuple[str, ...] = ()
    irony_cancelled_by: tuple[str, ...] = ()  # words of a user laughing at themself: no irony then
    troubled_words: frozenset[str] = frozenset()  # see GroupSpec.unless_troubled
    # see GroupSpec.unless_hypothetical: word sequences (by first word) of a condition, of a courtesy
    # that is no condition ("if possible"), and of a hypothetical want
    conditions: dict[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    courtesies: dict[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    hypothetical: dict[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)

    def signal_of(self, group: str) -> str:
        return self.groups[group].signal

    def cue_hits(self, text: str) -> frozenset[str]:
        """Names of the cue lists with an unquoted, un-negated hit in ``text``."""
        if self.cues is None:
            return frozenset()
        return _groups_hit(self.cues.find(text))

    def scanned_cue_hits(self, scan: Scan) -> frozenset[str]:
        """cue_hits of the text ``scan`` (the phrase matcher's) holds, reusing its tokens."""
        if self.cues is None:
            return frozenset()
        return _groups_hit(self.cues.rescan(scan).matches)


def _groups_hit(matches: list[Match]) -> frozenset[str]:
    """The groups of ``matches`` with a hit neither quoted nor negated."""
    return frozenset(m.group for m in matches if not (m.quoted or m.negated))


_SLOT = re.compile(r"\{([a-z_]+)\}")
MAX_EXPANSIONS = 2000  # phrases one templated phrase may stand for


def expand_slots(phrases: tuple[str, ...], slots: dict[str, tuple[str, ...]], where: str) -> tuple[str, ...]:
    """``phrases`` with each ``{name}`` replaced by every alternative of the slot ``name``, in every
    combination ("{reach} {a_human}": each way of asking to reach each kind of person), each phrase
    once, in order. A slot after the first whose alternatives are single words is written as one set
    of alternatives instead, ``(said|wrote|sent)`` (matching.split_wildcards): the same phrases,
    matched as one entry, so a family of them does not take the matcher's memory."""
    expanded: dict[str, None] = {}
    for phrase in phrases:
        names = _SLOT.findall(phrase)
        unknown = sorted(set(names) - slots.keys())
        if unknown:
            raise ValueError(f"{where}: {phrase!r} names no slot {', '.join(unknown)}")
        parts = _SLOT.split(phrase)  # literal, name, literal, name, …, literal
        choices: list[tuple[str, ...]] = []
        worded = False  # a word comes before this part in every expansion
        for at, part in enumerate(parts):
            if at % 2 == 0:
                choices.append((part,))
                worded = worded or any(char.isalnum() for char in part)
                continue
            options = slots[part]
            # After the first slot (expanded: it makes the matcher's keys, so that no key is a word as
            # common as "you"), a slot of one-word alternatives standing as a word of its own is a set.
            alone = parts[at - 1][-1:] in ("", " ") and parts[at + 1][:1] in ("", " ", "$")
            if at > 1 and worded and alone and all(_one_word(option) for option in options):
                choices.append((f"({'|'.join(options)})",))
            else:
                choices.append(options)
            worded = worded or all(any(char.isalnum() for char in option) for option in options)
        if math.prod(len(options) for options in choices) > MAX_EXPANSIONS:
            raise ValueError(f"{where}: {phrase!r} stands for more than {MAX_EXPANSIONS} phrases")
        for combination in itertools.product(*choices):
            expanded[" ".join("".join(combination).split())] = None
    return tuple(expanded)


def written_out(phrases: tuple[str, ...], contractions: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """``phrases`` and, for each with a contraction of ``contractions``, every variant with some or
    all of them written out ("i don't follow" → also "i do not follow"; "can't" → "cannot", "can
    not"), each phrase once, in order: formal and non-native writers spell them out."""
    if not contractions:
        return phrases
    pattern = re.compile(
        r"(?<![\w'])(" + "|".join(map(re.escape, sorted(contractions, key=len, reverse=True))) + r")(?![\w'])"
    )
    expanded: dict[str, None] = {}
    for phrase in phrases:
        parts = pattern.split(phrase)  # literal, contraction, literal, …
        choices = [(part,) if at % 2 == 0 else (part, *contractions[part]) for at, part in enumerate(parts)]
        if math.prod(len(options) for options in choices) > MAX_EXPANSIONS:
            raise ValueError(f"{phrase!r} stands for more than {MAX_EXPANSIONS} phrases written out")
        for combination in itertools.product(*choices):
            # "'s" before "been" or "got" is "has": "it's been fine" → "it has been fine"
            variant = _HAS_NOT_IS.sub(r"\1has \2", "".join(combination))
            # a question's "not" goes after its subject: "why didn't you say so" → "why did you not say so"
            expanded[_ASKED_NOT.sub(r"\1\2 \4 not", variant)] = None
    return tuple(expanded)


_HAS_NOT_IS = re.compile(r"\b(it |he |she |that |there |what |who )is (been|got)\b")
_ASKED_NOT = re.compile(
    r"(^\^?|\bwhy |\bhow come )(do|does|did|can|could|would|will|should|are|is|was|were|have|has|had)"
    r"( ?not) (you|i|we|they|it|he|she)\b"
)


def _contractions(value: Any) -> dict[str, tuple[str, ...]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"contractions must map a contraction to its written-out forms; got {value!r}")
    return {
        key: strings(forms if isinstance(forms, list) else [forms], f"contraction {key!r}")
        for key, forms in value.items()
    }


def _one_word(option: str) -> bool:
    """A slot alternative that is one plain word (no wildcard, anchor or set of its own)."""
    return len(phrase_tokens(option)[0]) == 1 and not any(mark in option for mark in "*^$()| ")


def _slots(value: Any) -> dict[str, tuple[str, ...]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"slots must be a mapping of slot names to lists of phrases; got {value!r}")
    return {name: strings(options, f"slot {name!r}") for name, options in value.items()}


def parse_library(data: dict[str, Any]) -> PhraseLibrary:
    """Build the library from the YAML's parsed content; rejects unknown leaves and bad values."""
    specs: dict[str, GroupSpec] = {}
    slots = _slots(data.get("slots"))
    contractions = _contractions(data.get("contractions"))
    for name, entry in data["groups"].items():
        signal = entry["signal"]
        if signal not in tx.LEAF_TYPES:
            raise ValueError(f"phrase group {name!r}: unknown signal {signal!r}")
        if entry.get("negation", "respect") not in ("respect", "ignore"):
            raise ValueError(f"phrase group {name!r}: negation must be 'respect' or 'ignore'")
        confidence = float(entry.get("confidence", 0.8))
        if not 0.0 <= confidence <= 1.0:
            raise ValueError(f"phrase group {name!r}: confidence {confidence} outside [0, 1]")
        group = PhraseGroup(
            name=name,
            phrases=_group_list(entry, name, "phrases", slots, contractions),
            negation=entry.get("negation", "respect") == "respect",
            unless_wanted=bool(entry.get("unless_wanted", False)),
            confidence=confidence,
            exclude=_group_list(entry, name, "exclude", slots, contractions),
            whole_message=strings(entry.get("whole_message"), f"phrase group {name!r}: whole_message"),
            starts_with=strings(entry.get("starts_with"), f"phrase group {name!r}: starts_with"),
        )
        specs[name] = GroupSpec(
            group,
            signal,
            tuple(entry.get("positives", ())),
            tuple(entry.get("near_misses", ())),
            bool(entry.get("unless_satisfied", False)),
            bool(entry.get("statement_only", False)),
            bool(entry.get("unless_complaining", False)),
            bool(entry.get("with_praise", False)),
            bool(entry.get("first_message", False)),
            bool(entry.get("unless_plain_question", False)),
            bool(entry.get("unless_asking", False)),
            bool(entry.get("acknowledgement", False)),
            bool(entry.get("answers_which", False)),
            bool(entry.get("ironic", False)),
            bool(entry.get("unless_troubled", False)),
            bool(entry.get("unless_hypothetical", False)),
            tuple(entry.get("opening_positives", ())),
            tuple(entry.get("opening_near_misses", ())),
        )
    negators = strings(data["negators"], "negators") if "negators" in data else tuple(DEFAULT_NEGATORS)
    protected_words = strings(data.get("protected_words"), "protected_words")
    matcher = PhraseMatcher(
        (spec.group for spec in specs.values()),
        negators=negators,
        protected_words=protected_words,
        lead_ins=strings(data.get("lead_ins"), "lead_ins"),
        trailers=strings(data.get("trailers"), "trailers"),
        wanting=strings(data.get("wanting"), "wanting"),
    )
    praise = frozenset(
        word
        for phrase in strings(data.get("praise_words"), "praise_words")
        for word in phrase_tokens(phrase)[0]
    )
    cue_groups: list[PhraseGroup] = []
    examples: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for name, entry in (data.get("cues") or {}).items():
        if name not in _CUE_NAMES:
            raise ValueError(f"cue list {name!r}: unknown (expected one of {sorted(_CUE_NAMES)})")
        cue_groups.append(
            PhraseGroup(
                name=name,
                phrases=written_out(
                    strings(entry.get("phrases"), f"cue list {name!r}: phrases"), contractions
                ),
                negation=entry.get("negation", "respect") == "respect",
                exclude=written_out(
                    strings(entry.get("exclude"), f"cue list {name!r}: exclude"), contractions
                ),
            )
        )
        examples[name] = (tuple(entry.get("positives", ())), tuple(entry.get("near_misses", ())))
    cues = (
        PhraseMatcher(
            cue_groups,
            negators=negators,
            protected_words=protected_words,
        )
        if cue_groups
        else None
    )
    irony_markers = strings(data.get("irony_markers"), "irony_markers")
    irony_cancelled_by = strings(data.get("irony_cancelled_by"), "irony_cancelled_by")
    troubled = (
        frozenset(
            word for phrase in strings(data.get("troubled"), "troubled") for word in phrase_tokens(phrase)[0]
        )
        | matcher.negators
    )
    return PhraseLibrary(
        matcher,
        specs,
        praise,
        cues,
        examples,
        irony_markers,
        irony_cancelled_by,
        troubled,
        _word_sequences(data, "conditions", contractions),
        _word_sequences(data, "courtesies", contractions),
        _word_sequences(data, "hypothetical", contractions),
    )


def _group_list(
    entry: dict[str, Any],
    name: str,
    key: str,
    slots: dict[str, tuple[str, ...]],
    contractions: dict[str, tuple[str, ...]],
) -> tuple[str, ...]:
    """A group's ``phrases`` or ``exclude``: its slots expanded, its contractions written out too."""
    where = f"phrase group {name!r}" if key == "phrases" else f"phrase group {name!r} ({key})"
    return written_out(
        expand_slots(strings(entry.get(key), f"phrase group {name!r}: {key}"), slots, where), contractions
    )


def _word_sequences(
    data: dict[str, Any], key: str, contractions: dict[str, tuple[str, ...]]
) -> dict[str, tuple[tuple[str, ...], ...]]:
    """A list of phrases (written out too) as word sequences indexed by their first word."""
    phrases = written_out(strings(data.get(key), key), contractions)
    return by_first_word(tuple(tuple(phrase_tokens(phrase)[0]) for phrase in phrases))


THIRD_PARTY = "third_party"  # someone or something else caused the trouble ("the courier", "got delayed")
AGENT = "agent"  # the user points at the agent, the chat or the service ("you keep…", "this chat")
BAD_NEWS = "bad_news"  # an agent answer that refuses or gives bad news ("unfortunately", "I can't")
ASKED_WHICH = "asked_which"  # an agent answer that asks which thing the user means ("which one do you mean?")
GREETING = "greeting"  # an agent's opening offer of help ("Hi! How can I help you today?")
_CUE_NAMES = frozenset([THIRD_PARTY, AGENT, BAD_NEWS, ASKED_WHICH, GREETING])


PHRASE_FILES = ("misalignment", "disengagement", "satisfaction", "outcome")  # phrases/<name>.yaml: the groups


def library_data() -> dict[str, Any]:
    """phrases/interaction.yaml (what all groups share) with the groups of every category file."""
    data: dict[str, Any] = phrase_file("interaction")
    data["groups"] = {}
    data["slots"] = dict(data.get("slots") or {})
    for name in PHRASE_FILES:
        category = phrase_file(name)
        for group, entry in category["groups"].items():
            if group in data["groups"]:
                raise ValueError(f"phrase group {group!r} is defined twice (phrases/{name}.yaml)")
            data["groups"][group] = entry
        for slot, options in (category.get("slots") or {}).items():
            if slot in data["slots"]:
                raise ValueError(f"slot {slot!r} is defined twice (phrases/{name}.yaml)")
            data["slots"][slot] = options
    return data


@functools.cache
def phrase_library() -> PhraseLibrary:
    """The interaction phrase library, loaded and compiled once."""
    return parse_library(library_data())


@dataclass(frozen=True)
class TextAnalysis:
    """One user message as the phrase detectors see it."""

    scan: Scan
    hits: dict[str, list[Match]]  # leaf type → accepted hits (not quoted, not negated)

    @property
    def satisfied(self) -> bool:
        return any(self.hits.get(signal) for signal in SATISFACTION)

    @functools.cached_property
    def aimed_elsewhere(self) -> bool:
        """The message blames a third party or the world and points at neither the agent, the chat nor
        the service: its frustration is not a stance toward the agent."""
        cues = phrase_library().scanned_cue_hits(self.scan)
        return THIRD_PARTY in cues and AGENT not in cues


def _complains(spec: GroupSpec) -> bool:
    return spec.signal == tx.NEGATIVE_STANCE and not spec.unless_satisfied


def analyse_text(text: str) -> TextAnalysis:
    """Scan a message for every phrase group (detectors read it through :func:`analysis_of`)."""
    library = phrase_library()
    groups = library.groups
    scan = library.matcher.scan(text)
    plain = text if text.isascii() else unify(text)  # "？" read as "?", at the same offsets
    accepted = [
        m
        for m in scan.matches
        if not (
            m.quoted
            or m.negated
            or (groups[m.group].statement_only and asked(plain, m.start, m.end))
            or (groups[m.group].unless_plain_question and plainly_asked(plain, m.start, m.end))
            or (groups[m.group].unless_asking and asks_later(plain, m.end))
        )
    ]
    conditional = [m for m in accepted if groups[m.group].unless_hypothetical]
    if conditional:
        later = _hypothetical_hits(scan, conditional, library)
        accepted = [m for m in accepted if not (groups[m.group].unless_hypothetical and m.start in later)]
    trouble = [m for m in accepted if groups[m.group].with_praise]
    if trouble or any(groups[m.group].signal in SATISFACTION for m in accepted):
        # A status readout's values ("Signal strength: excellent", "Data roaming: still off") report a
        # state: neither satisfaction nor the praise and trouble of sarcasm.
        values = readout_values(text)
        if values:
            accepted = [
                m
                for m in accepted
                if not (
                    (groups[m.group].signal in SATISFACTION or groups[m.group].with_praise)
                    and inside(values, m.start)
                )
            ]
            trouble = [m for m in trouble if not inside(values, m.start)]
    if trouble:
        accepted = [m for m in accepted if not groups[m.group].with_praise]
        if _sarcastic(text, accepted, library):
            accepted += [m for m in trouble if not asked(plain, m.start, m.end)]
    irony = [m for m in accepted if groups[m.group].ironic]
    if irony:
        accepted = _ironic(text, accepted, irony, library)
    if any(_complains(groups[m.group]) for m in accepted):
        accepted = [m for m in accepted if not groups[m.group].unless_complaining]
    calm = [m for m in accepted if groups[m.group].unless_troubled]
    if calm and _troubled(scan, library, calm):
        accepted = [m for m in accepted if not groups[m.group].unless_troubled]
    if any(groups[m.group].signal in SATISFACTION for m in accepted):
        accepted = [m for m in accepted if not groups[m.group].unless_satisfied]
    hits: dict[str, list[Match]] = {}
    for match in accepted:
        hits.setdefault(groups[match.group].signal, []).append(match)
    return TextAnalysis(scan, hits)


def analysis_of(ctx: DetectionContext, text: str) -> TextAnalysis:
    """:func:`analyse_text`, once per detection call for every detector reading ``text``. Nothing is
    kept between calls, by the process or by the conversation: what a detector needs again later
    it keeps in its memory, prepared (``recent_messages``). A process-wide cache of recent analyses
    served 58 of 1,309 scans on the agent workload and held its texts, so their messages could not
    be compacted (bench/RESULTS.md, 2026-11-28)."""
    analyses: dict[str, TextAnalysis] = ctx.scratch.setdefault(_ANALYSES, {})
    analysis = analyses.get(text)
    if analysis is None:
        analysis = analyses[text] = analyse_text(text)
    return analysis


_ANALYSES = "interaction.analyses"


def _ironic(text: str, accepted: list[Match], irony: list[Match], library: PhraseLibrary) -> list[Match]:
    """The hits of a message with praise of the help that an ``ironic`` group matched: with an irony
    marker in the message, no success and no word of the user laughing at themself, the thanks and
    praise are irony and the ironic hits count in their place ("thanks so much for all your help
    🙃"); else the ironic hits count for nothing."""
    groups = library.groups
    rest = [m for m in accepted if not groups[m.group].ironic]
    if not any(marker in text for marker in library.irony_markers) or any(
        groups[m.group].signal == tx.SUCCESS for m in rest
    ):
        return rest
    lowered = text.lower()
    if any(word in lowered for word in library.irony_cancelled_by):
        return rest
    return [m for m in rest if groups[m.group].signal not in (tx.GRATITUDE, tx.CONFIRMATION)] + irony


def _troubled(scan: Scan, library: PhraseLibrary, hits: list[Match]) -> bool:
    """The message says something is amiss: a trouble word anywhere in it, quoted or not ("I see
    'declined' in the app"), but for one a hit's own phrase says where it stands ("came to inbox, not
    junk"); or a trouble cue (the with_praise groups' phrases: "crashes", "charged twice") outside
    the hits ("the warning is gone")."""
    for token in scan.tokens:
        if token.norm in library.troubled_words and not any(
            h.start <= token.start < h.end and token.norm in _phrase_words(h.phrase) for h in hits
        ):
            return True
    return any(
        library.groups[m.group].with_praise and not any(h.start <= m.start < h.end for h in hits)
        for m in scan.matches
    )


def _hypothetical_hits(scan: Scan, hits: list[Match], library: PhraseLibrary) -> set[int]:
    """The starts of ``hits`` said as a condition about a later possibility: the hit's clause holds
    a hypothetical want ("I'd want", "would need") and its sentence a condition ("if", "in case")
    that is not a courtesy ("if possible", "if you can"). Each clause and sentence is read once, so
    a message of many hits stays linear."""
    tokens = scan.tokens
    if not tokens:
        return set()
    starts = [token.start for token in tokens]
    words = [token.norm for token in tokens]
    clause_of: list[int] = []
    sentence_of: list[int] = []
    for token in tokens:
        clause_of.append(len(clause_of) if token.clause_start or not clause_of else clause_of[-1])
        sentence_of.append(len(sentence_of) if token.sentence_start or not sentence_of else sentence_of[-1])
    wanting: dict[int, bool] = {}
    conditional: dict[int, bool] = {}
    found: set[int] = set()
    for hit in hits:
        k = max(0, bisect.bisect_right(starts, hit.start) - 1)
        clause, sentence = clause_of[k], sentence_of[k]
        if clause not in wanting:
            end = next((j for j in range(clause + 1, len(tokens)) if clause_of[j] != clause), len(tokens))
            wanting[clause] = any(_sequence_at(words, j, library.hypothetical) for j in range(clause, end))
        if not wanting[clause]:
            continue
        if sentence not in conditional:
            end = next(
                (j for j in range(sentence + 1, len(tokens)) if sentence_of[j] != sentence), len(tokens)
            )
            conditional[sentence] = any(
                _sequence_at(words, j, library.conditions) and not _sequence_at(words, j, library.courtesies)
                for j in range(sentence, end)
            )
        if conditional[sentence]:
            found.add(hit.start)
    return found


def _sequence_at(words: list[str], at: int, sequences: dict[str, tuple[tuple[str, ...], ...]]) -> bool:
    """One of ``sequences`` (indexed by first word) starts at ``words[at]``."""
    return any(tuple(words[at : at + len(sequence)]) == sequence for sequence in sequences.get(words[at], ()))


def holds_any(words: tuple[str, ...], sequences: tuple[tuple[str, ...], ...]) -> bool:
    """One of the word ``sequences`` stands, in order, somewhere in ``words`` (one pass)."""
    by_first = by_first_word(sequences)
    listed = list(words)
    return any(_sequence_at(listed, k, by_first) for k in range(len(listed)))


@functools.lru_cache(maxsize=64)  # a few fixed lists of the data files: indexed once each
def by_first_word(sequences: tuple[tuple[str, ...], ...]) -> dict[str, tuple[tuple[str, ...], ...]]:
    """``sequences`` indexed by their first word: a text's words are looked up, not every sequence."""
    index: dict[str, list[tuple[str, ...]]] = {}
    for sequence in sequences:
        if sequence:
            index.setdefault(sequence[0], []).append(sequence)
    return {word: tuple(found) for word, found in index.items()}


@functools.lru_cache(maxsize=4096)
def _phrase_words(phrase: str) -> frozenset[str]:
    return frozenset(phrase_tokens(phrase)[0])


def _sarcastic(text: str, accepted: list[Match], library: PhraseLibrary) -> bool:
    """Praise beside trouble is sarcasm ("great, now it's broken", "which is down. brilliant."): the
    message's only satisfaction is confirmation hits made of praise words alone; thanks, a success or a
    fuller confirmation ("that fixed the error, perfect") make it sincere."""
    praised = False
    for match in accepted:
        spec = library.groups[match.group]
        if spec.signal in (tx.GRATITUDE, tx.SUCCESS):
            return False
        if spec.signal == tx.CONFIRMATION:
            words = phrase_tokens(text[match.start : match.end])[0]
            if not library.praise_words.issuperset(words):
                return False
            praised = True
    return praised


QUESTION_LOOKAHEAD = 200  # characters looked at after a hit for the punctuation closing its clause
_CLAUSE_CLOSERS = frozenset(".!?,;:\n")


def asked(text: str, start: int, end: int) -> bool:
    """The hit ``text[start:end]`` is (part of) a question: its clause closes with "?" ("it works now?",
    "all set?"), or a "?" falls inside it ("fixed? it still crashes" is no "fixed it"). Looks at most
    QUESTION_LOOKAHEAD characters past the hit (constant work per hit)."""
    if "?" in text[start:end]:
        return True
    for char in text[end : end + QUESTION_LOOKAHEAD]:
        if char in _CLAUSE_CLOSERS:
            return char == "?"
    return False


# A line of a status readout: an optional bullet or number, a short label (optionally bold) that
# starts with a letter, a colon, and a value. Bounded repetition only: linear on any line.
_READOUT_LINE = re.compile(
    r"[ \t]*(?:[-*•·+]|\d{1,2}[.)])?[ \t]*(?:\*\*|__)?[^\W\d_][\w ()/&'.-]{0,40}?(?:\*\*|__)?[ \t]*:"
    r"(?:\*\*|__)?[ \t]*(?=\S)"
)
READOUT_MIN_LINES = 2  # one "Update: it works now!" line is the user speaking; a block is a readout
READOUT_MAX_LABEL_WORDS = 5


def readout_values(text: str) -> list[tuple[int, int]]:
    """The (start, end) offsets of the values of ``text``'s status readout lines ("- **Signal
    Strength**: Excellent (4 bars)"), when it holds at least READOUT_MIN_LINES of them; else none."""
    if text.count(":") < READOUT_MIN_LINES:
        return []
    values = []
    at = 0
    for line in text.splitlines(keepends=True):
        found = _READOUT_LINE.match(line)
        if found is not None and len(found.group().split()) <= READOUT_MAX_LABEL_WORDS + 1:
            values.append((at + found.end(), at + len(line)))
        at += len(line)
    return values if len(values) >= READOUT_MIN_LINES else []


def asks_later(text: str, end: int) -> bool:
    """A "?" closes a clause after the one holding the hit that ends at ``end``."""
    for at in range(end, min(len(text), end + QUESTION_LOOKAHEAD)):
        if text[at] in _CLAUSE_CLOSERS:
            return "?" in text[at + 1 :]
    return False


def plainly_asked(text: str, start: int, end: int) -> bool:
    """The hit's clause closes with one "?" and no further "?" or "!" ("really?", not "really??" or
    "really?!"). Looks at most QUESTION_LOOKAHEAD characters past the hit."""
    limit = min(len(text), end + QUESTION_LOOKAHEAD)
    for at in range(end, limit):
        char = text[at]
        if char in _CLAUSE_CLOSERS:
            if char != "?":
                return False
            following = text[at + 1] if at + 1 < len(text) else ""
            return following not in ("?", "!")
    return False


def phrase_confidence(base: float, match: Match, message_tokens: int) -> float:
    """The documented confidence rule of a phrase hit (see the module docstring)."""
    confidence = base
    if match.fuzzy:
        confidence -= FUZZY_PENALTY
    if match.whole_message:
        confidence += WHOLE_MESSAGE_BONUS
    if message_tokens > LONG_MESSAGE_TOKENS:
        confidence *= max(LONG_MESSAGE_FLOOR, (LONG_MESSAGE_TOKENS / message_tokens) ** 0.15)
    return round(min(max(confidence, 0.05), 0.99), 3)


# --- shared helpers --------------------------------------------------------------------------------

# The conversation's first assistant reply (absolute index; None while there is none). An agent's
# greeting ("Hi! How can I help you today?", the GREETING cue in a short message) answers nothing, so a
# user message after it alone is an opening request, not a reply to the agent.
_FIRST_REPLY = holds_message_numbers("interaction.first_reply")
GREETING_MAX_WORDS = 20  # a greeting is short: a longer message says something besides
SALUTATION_MAX_WORDS = 8  # a sentence beside the offer of help that says nothing: "Hi, this is Sam from IT."
_SALUTATION_OPENERS = frozenset(
    strings(phrase_file("interaction").get("salutation_openers"), "salutation_openers")
)


def _first_reply(ctx: DetectionContext) -> int | None:
    """Absolute index of the conversation's first assistant message that is no greeting (remembered)."""
    if _FIRST_REPLY in ctx.memory:
        return ctx.memory[_FIRST_REPLY]
    if ctx.conversation.message_offset:
        return -1  # messages were dropped from the front: there were turns before
    for i in range(ctx.new_from):  # once per conversation; stops at the first reply
        if _replies(ctx.messages[i]):
            return ctx.absolute_index(i)
    return None


def _replies(message: Message) -> bool:
    """``message`` is an assistant message that is no bare greeting: an offer of help (the GREETING cue)
    and at most salutations beside it (a short sentence opening "hi", "welcome", "I'm", "this is"…,
    without a digit or bad news). "Done, order 4417 is cancelled. Need help with anything else?"
    answers; "Hi, this is Sam from IT support. How can I help?" does not."""
    if message.role is not Role.ASSISTANT:
        return False
    text = message.content
    if not text or len(text.split(None, GREETING_MAX_WORDS)) > GREETING_MAX_WORDS:
        return True
    library = phrase_library()
    if GREETING not in library.cue_hits(text):
        return True
    tokens = tokenise(text)
    for start, end in sentence_spans(tokens):
        sentence = text[tokens[start].start : tokens[end - 1].end]
        cues = library.cue_hits(sentence)
        salutation = (
            end - start <= SALUTATION_MAX_WORDS
            and tokens[start].norm in _SALUTATION_OPENERS
            and BAD_NEWS not in cues
            and not any(char.isdigit() for char in sentence)
        )
        if GREETING not in cues and not salutation:
            return True
    return False


def user_texts(ctx: DetectionContext) -> list[tuple[int, str, bool]]:
    """(local index, text, follows an assistant reply: no greeting) for each new user message with text (found
    once per call: every phrase detector reads them)."""
    return ctx.shared(_USER_TEXTS, lambda: _user_texts(ctx))


_USER_TEXTS = "interaction.user_texts"


def _user_texts(ctx: DetectionContext) -> list[tuple[int, str, bool]]:
    first = _first_reply(ctx)
    found: list[tuple[int, str, bool]] = []
    for i in range(ctx.new_from, len(ctx.messages)):
        message, index = ctx.messages[i], ctx.absolute_index(i)
        if first is None and _replies(message):
            first = index
        elif message.role is Role.USER and message.content:
            found.append((i, message.content, first is not None and first < index))
    ctx.memory[_FIRST_REPLY] = first
    return found


def best_match(signal: str, analysis: TextAnalysis, *, opening: bool = False) -> tuple[float, Match] | None:
    """The highest-confidence accepted hit of ``signal`` (the earliest among equals); with ``opening``,
    of the ``first_message`` groups only (a message with no assistant turn before it)."""
    matches = analysis.hits.get(signal)
    if matches and opening:
        groups = phrase_library().groups
        matches = [m for m in matches if groups[m.group].first_message]
    return best_of(matches, analysis) if matches else None


def best_of(matches: list[Match], analysis: TextAnalysis) -> tuple[float, Match]:
    """(confidence, hit) of the highest-confidence of ``matches`` (hits of ``analysis``; the earliest
    among equals)."""
    groups = phrase_library().groups
    tokens = len(analysis.scan.tokens)
    scored = [(phrase_confidence(groups[m.group].group.confidence, m, tokens), m) for m in matches]
    return max(scored, key=lambda item: (item[0], -item[1].start))


def phrase_instance(
    signal: str, index: int, text: str, analysis: TextAnalysis, *, opening: bool = False
) -> SignalInstance | None:
    best = best_match(signal, analysis, opening=opening)
    return None if best is None else instance_of(signal, index, text, analysis, *best)


def instance_of(
    signal: str, index: int, text: str, analysis: TextAnalysis, confidence: float, match: Match
) -> SignalInstance:
    """The instance of ``signal`` for its hit ``match`` in ``text`` (message ``index``)."""
    metadata = {
        "pattern_type": tx.leaf_name(signal),  # the reference's key: the kind of pattern that matched
        "pattern": match.group,
        "phrase": match.phrase,
        "matches": len(analysis.hits[signal]),
        "fuzzy": match.fuzzy,
    }
    snippet = clause_snippet(text, match.start, match.end)  # the matched words, as the reference's
    return SignalInstance(signal, index, confidence, snippet, metadata)


def detect_phrases(ctx: DetectionContext, signal: str, *, after_assistant: bool) -> list[SignalInstance]:
    """Phrase hits of ``signal`` in the new user messages; with ``after_assistant``, a message with no
    assistant turn before it counts only its ``first_message`` groups."""
    found: list[SignalInstance] = []
    for i, text, follows in user_texts(ctx):
        opening = after_assistant and not follows
        instance = phrase_instance(
            signal, ctx.absolute_index(i), text, analysis_of(ctx, text), opening=opening
        )
        if instance is not None:
            found.append(instance)
    return found


_Prepared = TypeVar("_Prepared")  # what recent_messages keeps of each message: text, keys, answer


def recent_messages(
    ctx: DetectionContext, key: str, role: Role, size: int, prepare: Callable[[str], _Prepared]
) -> RecentList[tuple[int, _Prepared]]:
    """The remembered last ``size`` messages of ``role`` as (absolute index, prepared text).

    When the memory is new but messages were analysed before (the conversation went cold:
    ConversationState.go_cold), it is seeded with what it would hold: the latest ``size`` such
    messages before ``new_from``, however far back (but for messages trimmed since).
    """
    recent: RecentList[tuple[int, _Prepared]] | None = ctx.memory.get(key)
    if recent is None:
        recent = RecentList(size)
        earlier: list[tuple[int, _Prepared]] = []
        for i in range(ctx.new_from - 1, -1, -1):
            message = ctx.messages[i]
            if message.role is role and message.content:
                earlier.append((ctx.absolute_index(i), prepare(message.content)))
                if len(earlier) == size:
                    break
        recent.extend(reversed(earlier))
        ctx.memory[key] = recent
    return recent


# Sentence-level cues (restatements, sarcasm) are looked for in a message's first sentences only: what
# a user says to the agent comes first, and a long paste (a log, an email) would otherwise cost per
# sentence for nothing.
MAX_SENTENCES = 12


_SENTENCE_START = operator.attrgetter("sentence_start")


def sentence_spans(tokens: list[Token]) -> list[tuple[int, int]]:
    """[start, end) token ranges of the first MAX_SENTENCES sentences (split at sentence_start tokens)."""
    # C-speed scan of the flags, stopping at the (MAX_SENTENCES + 1)th start
    flags = map(_SENTENCE_START, tokens)
    starts = list(itertools.islice(itertools.compress(itertools.count(), flags), MAX_SENTENCES + 1))
    ends = [*starts[1:], len(tokens)] if len(starts) <= MAX_SENTENCES else starts[1:]
    return list(zip(starts[:MAX_SENTENCES], ends, strict=False))


def previous_assistant_text(ctx: DetectionContext, i: int) -> str:
    """The nearest assistant message with text before local index ``i`` (its first COMPARE_CHARS), or ""."""
    for j in range(i - 1, max(i - SEED_LOOKBACK, 0) - 1, -1):
        message = ctx.messages[j]
        if message.role is Role.ASSISTANT and message.content:
            return message.content[:COMPARE_CHARS]
    return ""


def previous_assistant_cues(ctx: DetectionContext, i: int) -> frozenset[str]:
    """The cue lists (BAD_NEWS, ASKED_WHICH) hit by the nearest assistant message with text before
    local index ``i``."""
    text = previous_assistant_text(ctx, i)
    return phrase_library().cue_hits(text) if text else frozenset()


def previous_assistant_words(ctx: DetectionContext, i: int) -> frozenset[str]:
    """The token norms of the nearest assistant message with text before local index ``i``."""
    return frozenset(t.norm for t in tokenise(previous_assistant_text(ctx, i)))


def stated_sentences(text: str) -> list[list[str]]:
    """The token norms of each of ``text``'s first MAX_SENTENCES sentences that does not close with "?"
    (what an agent's answer states, not what it asks)."""
    tokens = tokenise(text)
    return [
        [t.norm for t in tokens[start:end]]
        for start, end in sentence_spans(tokens)
        if "?" not in sentence_closing(text, tokens, end)
    ]


def sentence_closing(text: str, tokens: list[Token], end: int) -> str:
    """What closes the sentence whose last token is ``tokens[end - 1]``: the text between it and the
    next token ("." or "?!" or an emoji), as the rules that tell a statement from a question read it."""
    return text[tokens[end - 1].end : tokens[end].start if end < len(tokens) else len(text)]


def clause_spans(tokens: list[Token], start: int, end: int) -> list[tuple[int, int]]:
    """[a, b) token ranges of the clauses of the sentence tokens[start:end]."""
    cuts = [k for k in range(start + 1, end) if tokens[k].clause_start]
    return list(zip([start, *cuts], [*cuts, end], strict=True))
