"""The interaction layer (SPEC §3): misalignment, stagnation, disengagement, satisfaction.

Eleven model-free detectors, one per leaf type, each incremental: it looks at the messages from
``ctx.new_from`` on and keeps what it must remember in ``ctx.memory`` (the caller keeps one dict per
conversation for this module). Only USER messages feed misalignment, disengagement and satisfaction;
stagnation.repetition reads ASSISTANT messages and stagnation.dragging counts USER turns.

Phrases come from ``phrases/interaction.yaml`` (data, with positive and near-miss examples per
group), matched by one :class:`~otelsignals.signals.matching.PhraseMatcher` built on first use. A hit
counts when it is neither quoted nor (for groups that respect negation) negated.

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
bad news ("unfortunately…", "I can't…"): accepting bad news is not satisfaction.

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

import functools
import itertools
import operator
import string
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, NamedTuple, TypeVar

import yaml
from rapidfuzz import fuzz, process

from otelsignals.model import Role, SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext, Detector
from otelsignals.signals.matching import (
    DEFAULT_NEGATORS,
    Match,
    PhraseGroup,
    PhraseMatcher,
    Scan,
    Token,
    phrase_tokens,
    snippet,
    tokenise,
)

# --- thresholds -----------------------------------------------------------------------------------
# The near-duplicate thresholds were calibrated on the labelled pairs of tests/signals/test_interaction.py
# (REPHRASE_PAIRS, REPETITION_PAIRS). Rephrase, over content words: restatements scored token_set ≥ 92.3
# with token_sort ≥ 79.4; different requests on one template scored token_set ≤ 88.9 ("summarise the
# first/second chapter", "jira ticket for the login/signup bug") or, when one request only extends the
# other ("sort a list" / "… in reverse order without modifying it", token_set 100), token_sort ≤ 41.
# Known miss: inflected restatements ("counts users by country" / "counting users per country": 77.5).
# Repetition, over normalised text: repeated answers scored ratio ≥ 93.5; templated answers with other
# data ("added milk" / "added eggs to your shopping list") ≤ 88.9.
FUZZY_PENALTY = 0.15
WHOLE_MESSAGE_BONUS = 0.05
LONG_MESSAGE_TOKENS = 40
LONG_MESSAGE_FLOOR = 0.6

REPHRASE_WINDOW = 3  # the user's previous messages compared with a new one
REPHRASE_SIMILARITY = 90.0  # rapidfuzz token_set_ratio over content words, 0–100
REPHRASE_ORDER_SIMILARITY = 75.0  # and token_sort_ratio: a restatement, not a longer follow-up
REPHRASE_MIN_WORDS = 3  # content words (stop words removed) in both messages
REPHRASE_MIN_LETTERS = 15
REPHRASE_MAX_WORDS = 120  # longer messages are compared on their first 120 content words

REPETITION_WINDOW = 5  # previous assistant messages compared with a new one
REPETITION_SIMILARITY = 91.0  # rapidfuzz ratio over normalised text, 0–100
REPETITION_MIN_CHARS = 20
REPETITION_COMPARE_CHARS = 4000  # bounded cost per comparison
# A repeated answer wrapped in a new sentence ("I couldn't find X. How about <the same two gifts>?"): the
# shorter text appears almost verbatim inside the longer one (rapidfuzz partial_ratio). Repeats in the
# corpus scored 98–100; the templated answers of REPETITION_PAIRS ≤ 89. The shorter text must be long
# (a shared stock sentence is not a repeated answer) and at least half the longer one.
REPETITION_CONTAINED_SIMILARITY = 95.0
REPETITION_CONTAINED_MIN_CHARS = 60
REPETITION_CONTAINED_MIN_SHARE = 0.5
# A repeated answer behind a new opening ("I understand your concern. <the same two sentences>"): most of
# the new answer is sentences that nearly duplicate sentences of one earlier answer (rapidfuzz ratio per
# sentence, as for whole answers). The repeated sentences must carry most of the new text (a stock
# "I'm sorry for the inconvenience." among new content is not a repeated answer) and be long enough
# to mean something.
REPETITION_SENTENCE_SIMILARITY = 90.0
REPETITION_SENTENCE_SHARE = 0.66  # of the new answer's characters in repeated sentences
REPETITION_SENTENCE_MIN_CHARS = 60  # characters of repeated sentences, at least

DRAGGING_EFFICIENCY = 0.5  # SPEC §8: dragging fires when efficiency drops below this
DRAGGING_CONFIDENCE = 0.8

CAPS_RATIO = 0.7
CAPS_MIN_LETTERS = 12
CAPS_MIN_WORDS = 3
CAPS_CONFIDENCE = 0.6
CAPS_RUN_WORDS = 2  # partial shouting: this many consecutive ALL-CAPS words…
CAPS_RUN_LETTERS = 3  # …of at least this many letters each ("I", "IT", "PR", "CI" never count)
CAPS_RUN_CONFIDENCE = 0.55
# Capitalised words that are names, keys or keywords, not raised voices: they break a run ("CAPS LOCK",
# "LEFT JOIN", "ARG TARGETARCH", "AWS IAM"). Acronyms without a vowel (HTTP, VRR, SQL) never count anyway.
# fmt: off
CAPS_NOT_SHOUTING = frozenset([
    "caps", "lock", "num", "scroll", "page", "print", "screen", "home", "end", "insert", "delete", "enter",
    "shift", "ctrl", "alt", "tab", "esc", "select", "from", "where", "join", "left", "right", "inner",
    "outer", "full", "cross", "order", "group", "into", "values", "update", "set", "create", "table",
    "alter", "drop", "index", "null", "union", "exists", "limit", "case", "when", "arg", "run", "copy",
    "env", "cmd", "workdir", "entrypoint", "expose", "label", "volume", "add", "user", "healthcheck",
    "then", "else", "primary", "key", "get", "post", "put", "patch", "head", "options", "info", "warn",
    "error", "debug", "trace", "fatal", "todo", "fixme", "note", "readme", "json", "yaml", "toml", "api",
    "aws", "iam", "gcp", "azure", "nasa", "ieee", "ansi", "ascii", "utf", "usb", "hdmi", "ram", "rom",
    "ssd", "hdd", "gpu", "cpu", "vpn", "dns", "ssh", "sso", "saml", "oauth", "auth", "ldap", "imap", "pop",
    "asap", "fyi", "faq", "eta", "ceo", "cto", "cfo", "uuid", "ajax", "cors", "corp", "inc", "ltd", "llc",
    "usa", "eur", "usd", "gbp", "aud", "cad", "jpy", "utc", "gmt", "pdf", "csv", "xml", "html", "php",
    "ios", "mac", "wifi", "lan", "wan", "ota", "sim", "pin", "otp", "ups", "dhl", "dpd", "atm", "iban",
    "tsa", "jfk", "lax", "lhr", "cdg", "ord", "sfo", "ams", "fra", "dub", "kix", "hnd", "nrt", "pnr",
])
# fmt: on
PUNCTUATION_CONFIDENCE = 0.55
# "!!!" is anger only in a sentence that complains ("why is it STILL charging me!!!", "it doesn't work!!!");
# in any other sentence it is excitement ("it's for my son's 10th birthday!!!"). "???" and "?!?" always count.
# fmt: off
BANG_ANGER_WORDS = DEFAULT_NEGATORS | frozenset([
    "still", "again", "why", "stop", "wrong", "enough", "seriously", "broken", "nothing", "anything",
    "useless", "ridiculous", "already", "hate", "worst", "terrible", "awful", "wtf", "ugh", "fix", "nobody",
])
# fmt: on
EXTRA_CUE_BONUS = 0.1  # negative stance: each further cue in the same message
ANALYSIS_CACHE_CHARS = 2_000_000  # message text held by the shared analysis cache
SEED_LOOKBACK = 50  # messages looked back over when the memory is new but messages were analysed before

# fmt: off
STOP_WORDS = frozenset([
    "a", "an", "the", "i", "me", "my", "we", "our", "you", "your", "it", "its", "this", "that", "these",
    "those", "is", "are", "was", "were", "be", "been", "am", "do", "does", "did", "to", "of", "in", "on",
    "at", "for", "with", "and", "or", "but", "so", "if", "then", "can", "could", "would", "should", "will",
    "shall", "may", "might", "please", "pls", "just", "also", "too", "very", "really", "some", "any",
    "there", "here", "what", "which", "who", "how", "when", "where", "why", "again", "now", "ok", "okay",
    "hi", "hello", "hey"
])
# fmt: on
_SATISFACTION = (tx.GRATITUDE, tx.CONFIRMATION, tx.SUCCESS)
# a message with one of these makes its "!!!" anger whatever the sentence ("get me a human!!!")
_COMPLAINTS = (tx.CORRECTION, tx.ESCALATION, tx.QUIT, tx.NEGATIVE_STANCE)
_PUNCTUATION_RUNS = tuple(a + b + c for a in "!?" for b in "!?" for c in "!?")


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
    # a bare acknowledgement ("got it", "I see"): confirmation only when the agent's last answer did
    # not refuse or give bad news (see detect_confirmation)
    acknowledgement: bool = False
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

    def signal_of(self, group: str) -> str:
        return self.groups[group].signal

    def cue_hits(self, text: str) -> frozenset[str]:
        """Names of the cue lists with an unquoted, un-negated hit in ``text``."""
        if self.cues is None:
            return frozenset()
        return frozenset(m.group for m in self.cues.find(text) if not (m.quoted or m.negated))


def parse_library(data: dict[str, Any]) -> PhraseLibrary:
    """Build the library from the YAML's parsed content; rejects unknown leaves and bad values."""
    specs: dict[str, GroupSpec] = {}
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
            phrases=tuple(entry.get("phrases", ())),
            negation=entry.get("negation", "respect") == "respect",
            confidence=confidence,
            exclude=tuple(entry.get("exclude", ())),
            whole_message=tuple(entry.get("whole_message", ())),
            starts_with=tuple(entry.get("starts_with", ())),
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
            bool(entry.get("acknowledgement", False)),
            tuple(entry.get("opening_positives", ())),
            tuple(entry.get("opening_near_misses", ())),
        )
    matcher = PhraseMatcher(
        (spec.group for spec in specs.values()),
        negators=data.get("negators", DEFAULT_NEGATORS),
        protected_words=data.get("protected_words", ()),
        lead_ins=data.get("lead_ins", ()),
        trailers=data.get("trailers", ()),
    )
    praise = frozenset(
        word for phrase in data.get("praise_words", ()) for word in phrase_tokens(str(phrase))[0]
    )
    cue_groups: list[PhraseGroup] = []
    examples: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for name, entry in (data.get("cues") or {}).items():
        if name not in _CUE_NAMES:
            raise ValueError(f"cue list {name!r}: unknown (expected one of {sorted(_CUE_NAMES)})")
        cue_groups.append(
            PhraseGroup(
                name=name,
                phrases=tuple(entry.get("phrases", ())),
                negation=entry.get("negation", "respect") == "respect",
                exclude=tuple(entry.get("exclude", ())),
            )
        )
        examples[name] = (tuple(entry.get("positives", ())), tuple(entry.get("near_misses", ())))
    cues = (
        PhraseMatcher(
            cue_groups,
            negators=data.get("negators", DEFAULT_NEGATORS),
            protected_words=data.get("protected_words", ()),
        )
        if cue_groups
        else None
    )
    return PhraseLibrary(matcher, specs, praise, cues, examples)


THIRD_PARTY = "third_party"  # someone or something else caused the trouble ("the courier", "got delayed")
AGENT = "agent"  # the user points at the agent, the chat or the service ("you keep…", "this chat")
BAD_NEWS = "bad_news"  # an agent answer that refuses or gives bad news ("unfortunately", "I can't")
_CUE_NAMES = frozenset([THIRD_PARTY, AGENT, BAD_NEWS])


@functools.cache
def phrase_library() -> PhraseLibrary:
    """The interaction phrase library, loaded and compiled once."""
    source = resources.files("otelsignals.signals").joinpath("phrases", "interaction.yaml")
    # The C loader when PyYAML has it: the library is large and is loaded at start-up.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return parse_library(yaml.load(source.read_text(encoding="utf-8"), Loader=loader))


@dataclass(frozen=True)
class TextAnalysis:
    """One user message as the phrase detectors see it."""

    scan: Scan
    hits: dict[str, list[Match]]  # leaf type → accepted hits (not quoted, not negated)

    @property
    def satisfied(self) -> bool:
        return any(self.hits.get(signal) for signal in _SATISFACTION)

    @functools.cached_property
    def aimed_elsewhere(self) -> bool:
        """The message blames a third party or the world and points at neither the agent, the chat nor
        the service: its frustration is not a stance toward the agent."""
        cues = phrase_library().cue_hits(self.scan.text)
        return THIRD_PARTY in cues and AGENT not in cues


class _AnalysisCache:
    """Recent analyses by message text, bounded by the total characters held (not by count), so
    that the detectors reading one message share one scan even when messages are 100 KB long."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.chars = 0
        self.entries: OrderedDict[str, TextAnalysis] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, text: str) -> TextAnalysis | None:
        with self.lock:
            found = self.entries.get(text)
            if found is not None:
                self.entries.move_to_end(text)
            return found

    def put(self, text: str, analysis: TextAnalysis) -> None:
        with self.lock:
            if text in self.entries or len(text) > self.max_chars:
                return
            self.entries[text] = analysis
            self.chars += len(text)
            while self.chars > self.max_chars:
                evicted, _ = self.entries.popitem(last=False)
                self.chars -= len(evicted)

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.chars = 0


_CACHE = _AnalysisCache(ANALYSIS_CACHE_CHARS)


def _complains(spec: GroupSpec) -> bool:
    return spec.signal == tx.NEGATIVE_STANCE and not spec.unless_satisfied


def analyse_text(text: str) -> TextAnalysis:
    """Scan a message once for every phrase group (cached: several detectors read each message)."""
    cached = _CACHE.get(text)
    if cached is not None:
        return cached
    library = phrase_library()
    groups = library.groups
    scan = library.matcher.scan(text)
    accepted = [
        m
        for m in scan.matches
        if not (
            m.quoted
            or m.negated
            or (groups[m.group].statement_only and asked(text, m.start, m.end))
            or (groups[m.group].unless_plain_question and plainly_asked(text, m.start, m.end))
        )
    ]
    trouble = [m for m in accepted if groups[m.group].with_praise]
    if trouble:
        accepted = [m for m in accepted if not groups[m.group].with_praise]
        if _sarcastic(text, accepted, library):
            accepted += [m for m in trouble if not asked(text, m.start, m.end)]
    if any(_complains(groups[m.group]) for m in accepted):
        accepted = [m for m in accepted if not groups[m.group].unless_complaining]
    if any(groups[m.group].signal in _SATISFACTION for m in accepted):
        accepted = [m for m in accepted if not groups[m.group].unless_satisfied]
    hits: dict[str, list[Match]] = {}
    for match in accepted:
        hits.setdefault(groups[match.group].signal, []).append(match)
    analysis = TextAnalysis(scan, hits)
    _CACHE.put(text, analysis)
    return analysis


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


def efficiency(user_turns: int, baseline: int) -> float:
    """SPEC §4: 1.0 up to the baseline, then ``1 / (1 + 0.3 × (turns − baseline))``."""
    if user_turns <= baseline:
        return 1.0
    return 1.0 / (1.0 + 0.3 * (user_turns - baseline))


# --- shared helpers --------------------------------------------------------------------------------

_FIRST_ASSISTANT = "interaction.first_assistant"


def _first_assistant(ctx: DetectionContext) -> int | None:
    """Absolute index of the conversation's first assistant message seen so far (remembered)."""
    if _FIRST_ASSISTANT in ctx.memory:
        return ctx.memory[_FIRST_ASSISTANT]
    if ctx.conversation.message_offset:
        return -1  # messages were dropped from the front: there were turns before
    for i in range(ctx.new_from):  # once per conversation; stops at the first assistant message
        if ctx.messages[i].role is Role.ASSISTANT:
            return ctx.absolute_index(i)
    return None


def _user_texts(ctx: DetectionContext) -> list[tuple[int, str, bool]]:
    """(local index, text, follows an assistant turn) for each new user message with text."""
    first = _first_assistant(ctx)
    found: list[tuple[int, str, bool]] = []
    for i in range(ctx.new_from, len(ctx.messages)):
        message, index = ctx.messages[i], ctx.absolute_index(i)
        if message.role is Role.ASSISTANT and (first is None or index < first):
            first = index
        elif message.role is Role.USER and message.content:
            found.append((i, message.content, first is not None and first < index))
    ctx.memory[_FIRST_ASSISTANT] = first
    return found


def _best_match(signal: str, analysis: TextAnalysis, *, opening: bool = False) -> tuple[float, Match] | None:
    """The highest-confidence accepted hit of ``signal`` (the earliest among equals); with ``opening``,
    of the ``first_message`` groups only (a message with no assistant turn before it)."""
    matches = analysis.hits.get(signal)
    groups = phrase_library().groups
    if matches and opening:
        matches = [m for m in matches if groups[m.group].first_message]
    if not matches:
        return None
    tokens = len(analysis.scan.tokens)
    scored = [(phrase_confidence(groups[m.group].group.confidence, m, tokens), m) for m in matches]
    return max(scored, key=lambda item: (item[0], -item[1].start))


def _phrase_instance(
    signal: str, index: int, text: str, analysis: TextAnalysis, *, opening: bool = False
) -> SignalInstance | None:
    best = _best_match(signal, analysis, opening=opening)
    if best is None:
        return None
    confidence, match = best
    metadata = {
        "pattern": match.group,
        "phrase": match.phrase,
        "matches": len(analysis.hits[signal]),
        "fuzzy": match.fuzzy,
    }
    return SignalInstance(signal, index, confidence, snippet(text, match.start, match.end), metadata)


def _detect_phrases(ctx: DetectionContext, signal: str, *, after_assistant: bool) -> list[SignalInstance]:
    """Phrase hits of ``signal`` in the new user messages; with ``after_assistant``, a message with no
    assistant turn before it counts only its ``first_message`` groups."""
    found: list[SignalInstance] = []
    for i, text, follows in _user_texts(ctx):
        opening = after_assistant and not follows
        instance = _phrase_instance(signal, ctx.absolute_index(i), text, analyse_text(text), opening=opening)
        if instance is not None:
            found.append(instance)
    return found


_Prepared = TypeVar("_Prepared")  # what _recent keeps of each message: text, keys, answer


def _recent(
    ctx: DetectionContext, key: str, role: Role, size: int, prepare: Callable[[str], _Prepared]
) -> deque[tuple[int, _Prepared]]:
    """The remembered last ``size`` messages of ``role`` as (absolute index, prepared text).

    Seeded from at most SEED_LOOKBACK messages before ``new_from`` when the memory is new.
    """
    recent: deque[tuple[int, _Prepared]] | None = ctx.memory.get(key)
    if recent is None:
        recent = deque(maxlen=size)
        earlier: list[tuple[int, _Prepared]] = []
        for i in range(ctx.new_from - 1, max(ctx.new_from - SEED_LOOKBACK, 0) - 1, -1):
            message = ctx.messages[i]
            if message.role is role and message.content and len(earlier) < size:
                earlier.append((ctx.absolute_index(i), prepare(message.content)))
        recent.extend(reversed(earlier))
        ctx.memory[key] = recent
    return recent


# --- misalignment ----------------------------------------------------------------------------------


def detect_correction(ctx: DetectionContext) -> list[SignalInstance]:
    """The user corrects or negates the assistant: "no, I meant…", "that's wrong", or sets the right
    thing against a wrong one from the conversation ("we fly into osaka actually, not tokyo")."""
    found: list[SignalInstance] = []
    for i, text, follows in _user_texts(ctx):
        if not follows:
            continue
        analysis = analyse_text(text)
        index = ctx.absolute_index(i)
        instance = _phrase_instance(tx.CORRECTION, index, text, analysis)
        if instance is None and not analysis.satisfied:
            instance = _contrast_instance(ctx, i, text, analysis) or _piecemeal_instance(
                index, text, analysis
            )
        if instance is not None:
            found.append(instance)
    return found


# --- a needlessly piecemeal approach: "you don't need to check them one by one, just…" ----------------
# A clause telling the agent it need not, or should stop, doing something, with a piecemeal marker in the
# same clause: "X by X" ("one by one", "store by store", "file by file"), "one at a time", "individually",
# "separately", "each one", "one after another". The user corrects the approach. Not a question ("you
# don't have to pay them one by one?", "…one at a time, right?"): that asks.
PIECEMEAL_CONFIDENCE = 0.7
_PIECEMEAL_HEADS = (
    ("you", "dont", "need", "to"),
    ("you", "dont", "have", "to"),
    ("you", "do", "not", "need", "to"),
    ("you", "do", "not", "have", "to"),
    ("you", "shouldnt", "have", "to"),
    ("no", "need", "to"),
    ("theres", "no", "need", "to"),
    ("why", "are", "you"),
    ("stop",),
    ("instead", "of"),
)
_PIECEMEAL_MARKERS = (
    ("one", "at", "a", "time"),
    ("individually",),
    ("separately",),
    ("each", "one"),
    ("one", "after", "another"),
    ("one", "after", "the", "other"),
)
_PIECEMEAL_WORDS = frozenset(["by", *(marker[0] for marker in _PIECEMEAL_MARKERS)])
_STOP_BY = (("by",), ("at",), ("in",), ("over",), ("off",))  # "stop by the shop": a visit, not a halt
_CLAUSE_LEADS = frozenset(["so", "but", "and", "just", "please", "ok", "okay", "look", "no"])
QUESTION_TAG_WORDS = 2  # "…, right?", "…, don't I?": a clause followed only by this many words and "?"


def _piecemeal_instance(index: int, text: str, analysis: TextAnalysis) -> SignalInstance | None:
    """The first clause of the first MAX_SENTENCES sentences that opens with a _PIECEMEAL_HEADS head and
    holds a piecemeal marker after it (see above)."""
    tokens = analysis.scan.tokens
    if _PIECEMEAL_WORDS.isdisjoint(t.norm for t in tokens):
        return None  # the cheap first look: no marker word at all
    for start, end in _sentences(tokens):
        after = text[tokens[end - 1].end : tokens[end].start if end < len(tokens) else len(text)]
        question = "?" in after
        for a, b in _clauses(tokens, start, end):
            if question and end - b <= QUESTION_TAG_WORDS:
                continue  # the clause is, or is tagged as, a question
            head = _piecemeal_head(tokens, a, b)
            if head is None:
                continue
            marker = _piecemeal_marker(tokens, head, b)
            if marker is not None:
                metadata = {"pattern": "piecemeal", "marker": marker}
                span = snippet(text, tokens[a].start, tokens[b - 1].end)
                return SignalInstance(tx.CORRECTION, index, PIECEMEAL_CONFIDENCE, span, metadata)
    return None


def _piecemeal_head(tokens: list[Token], a: int, b: int) -> int | None:
    """The index after a _PIECEMEAL_HEADS head opening the clause tokens[a:b] (after at most one
    _CLAUSE_LEADS word), else None."""
    for at in (a, a + 1):
        if at >= b or (at > a and tokens[a].norm not in _CLAUSE_LEADS) or tokens[at].quoted:
            continue
        words = tuple(t.norm for t in tokens[at : at + 5])
        for head in _PIECEMEAL_HEADS:
            if words[: len(head)] == head and not (head == ("stop",) and words[1:2] in _STOP_BY):
                return at + len(head)
    return None


def _piecemeal_marker(tokens: list[Token], at: int, b: int) -> str | None:
    for k in range(at, b):
        norm = tokens[k].norm
        if (
            norm == "by"
            and at < k < b - 1
            and tokens[k - 1].norm.isalpha()
            and tokens[k - 1].norm == tokens[k + 1].norm
        ):
            return f"{tokens[k - 1].norm} by {tokens[k + 1].norm}"
        words = tuple(t.norm for t in tokens[k : min(k + 4, b)])
        for marker in _PIECEMEAL_MARKERS:
            if words[: len(marker)] == marker:
                return " ".join(marker)
    return None


CONTRAST_CONFIDENCE = 0.7
CONTRAST_MAX_WORDS = 3  # "…, not tokyo", "…, not the 7am one": a short rejected item
# Words after a clause-opening "not" that make an idiom or a hedge, not a rejected item ("not bad").
# fmt: off
_CONTRAST_IDIOMS = frozenset([
    "bad", "sure", "yet", "quite", "exactly", "much", "anymore", "necessarily", "always", "only", "even",
    "everything", "all", "really", "ever", "once", "twice", "true", "problem", "worry", "worries", "least",
])
# fmt: on


def _contrast_instance(
    ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis
) -> SignalInstance | None:
    """A sentence "X…, not Y" (Y a short clause after a comma or dash, closing the sentence) is a
    correction when the user marks it ("actually") or Y is the conversation's: the agent said it (in a
    statement; after a question "the window, not the aisle" is a choice) or the user asked for it before
    ("that's everyone active today, not Q1"). Plain "for my son, not me" or "not bad" never count."""
    tokens = analysis.scan.tokens
    context: frozenset[str] | None = None  # read lazily: most messages have no contrast at all
    for start, end in _sentences(tokens):
        rejected = _rejected_item(tokens, start, end)
        if not rejected:
            continue
        marked = any(t.norm == "actually" for t in tokens[start:end])
        if not marked and context is None:
            context = _conversation_words(ctx, i)
        if marked or rejected & (context or frozenset()):
            metadata = {"pattern": "contrast", "rejected": " ".join(sorted(rejected)), "actually": marked}
            span = snippet(text, tokens[start].start, tokens[end - 1].end)
            return SignalInstance(tx.CORRECTION, ctx.absolute_index(i), CONTRAST_CONFIDENCE, span, metadata)
    return None


def _rejected_item(tokens: list[Token], start: int, end: int) -> frozenset[str]:
    """Y's content words when tokens[start:end] is "X…, not Y" with X holding a content word (not only
    "actually") and Y 1–CONTRAST_MAX_WORDS tokens closing the sentence; empty otherwise."""
    for k in range(start + 1, end):
        token = tokens[k]
        if token.norm != "not" or not token.clause_start or token.quoted or end - k - 1 > CONTRAST_MAX_WORDS:
            continue  # (the length check first keeps this linear: at most 3 candidates per sentence)
        item = [t.norm for t in tokens[k + 1 : end]]
        before = [t.norm for t in tokens[start:k] if t.norm not in STOP_WORDS and t.norm != "actually"]
        words = {w for w in item if w not in STOP_WORDS and w not in DEFAULT_NEGATORS}
        if 0 < len(item) <= CONTRAST_MAX_WORDS and before and words and not words & _CONTRAST_IDIOMS:
            return frozenset(words)
    return frozenset()


def _conversation_words(ctx: DetectionContext, i: int) -> frozenset[str]:
    """Words the contrast may reject: the previous assistant message's, when it states rather than asks,
    and those of the user's earlier messages (both bounded by SEED_LOOKBACK and the compare length)."""
    words: set[str] = set()
    assistant_seen = False
    for j in range(i - 1, max(i - SEED_LOOKBACK, 0) - 1, -1):
        message = ctx.messages[j]
        if not message.content:
            continue
        content = message.content[:REPETITION_COMPARE_CHARS]
        if message.role is Role.USER:
            words.update(t.norm for t in analyse_text(content).scan.tokens)
        elif message.role is Role.ASSISTANT and not assistant_seen:
            assistant_seen = True
            if not content.rstrip().endswith("?"):
                words.update(t.norm for t in tokenise(content))
    return frozenset(words)


def detect_clarification(ctx: DetectionContext) -> list[SignalInstance]:
    """The user asks for clarification or shows confusion: "what do you mean", "huh?", or asks what a
    term the assistant just used is ("what's TARGETARCH?", "what is intune?")."""
    found: list[SignalInstance] = []
    for i, text, follows in _user_texts(ctx):
        analysis = analyse_text(text)
        instance = _phrase_instance(
            tx.CLARIFICATION, ctx.absolute_index(i), text, analysis, opening=not follows
        )
        if instance is None and follows:  # a term question needs the agent's words to ask about
            instance = _term_question(ctx, i, text, analysis)
        if instance is not None:
            found.append(instance)
    return found


TERM_QUESTION_CONFIDENCE = 0.7
TERM_QUESTION_MAX_WORDS = 2  # "what's intune?", "what is open jaw?": a term, not a new question
# A bare "what" echoes the agent's words back ("what unpaid invoice?", "what fee?"): the user does not
# know what the agent is talking about. Not when the words ask for something new ("what else?", "what
# about the hotel?", "what happened?", "what time?" names no word of the agent's unless it used it).
# fmt: off
_ECHO_NOT_TERMS = frozenset([
    "about", "else", "if", "happened", "happens", "now", "then", "next", "for", "abt", "has", "have", "had",
    "kind", "sort", "type", "other", "others", "exactly", "way",
])
# fmt: on
_TERM_QUESTION_HEADS = (
    ("what",),
    ("whats",),
    ("what", "is"),
    ("what", "are"),
    ("what", "s"),
    ("whats", "a"),
    ("what", "is", "a"),
    ("what", "is", "an"),
    ("whats", "an"),
)
# "what does R01 mean?", "what does ACH stand for?": the same question, the term inside
_MEANING_HEADS = (("what", "does"), ("what", "do"), ("whats",))
_MEANING_TAILS = (
    ("mean",),
    ("stand", "for"),
    ("mean", "here"),
    ("mean", "exactly"),
    ("mean", "exactly", "here"),
    ("means", "exactly"),
)
# "what means 'service name'?" (non-native word order), "what's shared parental leave exactly?"
_PLAIN_MEANING_HEADS = (("what", "means"), ("what", "mean"))
_TERM_HEDGES = ("exactly", "here", "again")
# a term quoted back from the agent's answer ("what does 're-applied to the term' mean")
QUOTED_TERM_MAX_WORDS = 6
_TERM_QUESTION_LONGEST = max(map(len, _TERM_QUESTION_HEADS)) + QUOTED_TERM_MAX_WORDS + 3


def _term_question(ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis) -> SignalInstance | None:
    """A sentence that is only "what's <term>?" (or "what does <term> mean?"), the term being 1–2 words
    of the assistant message just before: the user does not know a word the agent used ("whats the
    difference between…" is a longer, new question and "what's the weather?" names nothing the agent
    said)."""
    previous: frozenset[str] | None = None  # read lazily
    tokens = analysis.scan.tokens
    for start, sentence_end in _sentences(tokens):
        token = tokens[start]
        if token.quoted:
            continue
        # the first clause, when a question follows it ("what does X mean, will the 8k be moved?")
        end = next(
            (k for k in range(start + 1, sentence_end) if tokens[k].clause_start and not tokens[k].quoted),
            sentence_end,
        )
        if end - start > _TERM_QUESTION_LONGEST:
            continue
        words = [t.norm for t in tokens[start:end]]
        head = next((h for h in _TERM_QUESTION_HEADS[::-1] if tuple(words[: len(h)]) == h), None)
        head = next((h for h in _PLAIN_MEANING_HEADS if tuple(words[: len(h)]) == h), head)
        term = words[len(head) :] if head else []
        for meaning in _MEANING_HEADS:
            tail = next((t for t in _MEANING_TAILS if tuple(words[-len(t) :]) == t), None)
            if tail and tuple(words[: len(meaning)]) == meaning:
                head, term = meaning, words[len(meaning) : -len(tail)]
                break
        while len(term) > 1 and term[-1] in _TERM_HEDGES:
            term = term[:-1]
        if head == ("what",) and any(w in _ECHO_NOT_TERMS for w in term):
            continue
        closing = tokens[sentence_end].start if sentence_end < len(tokens) else len(text)
        after = text[tokens[sentence_end - 1].end : closing]
        first = start + (len(head) if head else 0)
        quoted = bool(term) and all(t.quoted for t in tokens[first : first + len(term)])
        limit = QUOTED_TERM_MAX_WORDS if quoted else TERM_QUESTION_MAX_WORDS
        if not (0 < len(term) <= limit and "?" in after):
            continue
        previous = _previous_assistant_words(ctx, i) if previous is None else previous
        content = [w for w in term if w not in STOP_WORDS]
        if content and all(w in previous for w in content) and (quoted or len(content) == len(term)):
            pattern = "echo_question" if head == ("what",) else "term_question"
            metadata = {"pattern": pattern, "term": " ".join(term)}
            span = snippet(text, token.start, tokens[end - 1].end)
            return SignalInstance(
                tx.CLARIFICATION, ctx.absolute_index(i), TERM_QUESTION_CONFIDENCE, span, metadata
            )
    return None


def _previous_assistant_words(ctx: DetectionContext, i: int) -> frozenset[str]:
    """The token norms of the nearest assistant message with text before local index ``i``."""
    for j in range(i - 1, max(i - SEED_LOOKBACK, 0) - 1, -1):
        message = ctx.messages[j]
        if message.role is Role.ASSISTANT and message.content:
            return frozenset(t.norm for t in tokenise(message.content[:REPETITION_COMPARE_CHARS]))
    return frozenset()


def content_words(text: str) -> str:
    """The message's words without stop words, for near-duplicate comparison (first 300)."""
    return " ".join(_content_tokens(analyse_text(text).scan.tokens))


@functools.lru_cache(maxsize=65536)  # words repeat across messages; this runs per token
def stem(word: str) -> str:
    """Light stemming so inflected restatements compare equal ("counting"/"counts" → count,
    "exits"/"exiting" → exit): one common ending off words of 5+ letters, nothing else."""
    if len(word) >= 5 and word.isalpha():
        for ending in ("ing", "ed", "es", "s"):
            if word.endswith(ending) and len(word) - len(ending) >= 3:
                return word[: -len(ending)]
    return word


def _content_tokens(tokens: list[Token]) -> list[str]:
    words: list[str] = []
    for token in tokens:
        if token.norm not in STOP_WORDS:
            words.append(stem(token.norm))
            if len(words) >= REPHRASE_MAX_WORDS:
                break
    return words


def _substantial(words: str) -> bool:
    return (
        words.count(" ") + 1 >= REPHRASE_MIN_WORDS and sum(c.isalpha() for c in words) >= REPHRASE_MIN_LETTERS
    )


def rephrase_similarity(words: str, earlier: str) -> float:
    """0–100; 0 unless both messages are substantial and the new one restates the earlier one."""
    if not (_substantial(words) and _substantial(earlier)):
        return 0.0
    if fuzz.token_sort_ratio(words, earlier) < REPHRASE_ORDER_SIMILARITY:
        return 0.0
    return fuzz.token_set_ratio(words, earlier)


def _restated(words: str, recent: deque[tuple[int, str]]) -> tuple[int, float] | None:
    best: tuple[int, float] | None = None
    for index, earlier in recent:
        ratio = rephrase_similarity(words, earlier)
        if ratio >= REPHRASE_SIMILARITY and (best is None or ratio > best[1]):
            best = (index, ratio)
    return best


def _answered_since(ctx: DetectionContext, recent: deque[tuple[int, str]], i: int, follows: bool) -> bool:
    """An assistant message lies between the user's previous message and message ``i``."""
    if not recent:
        return follows
    start = max(recent[-1][0] - ctx.conversation.message_offset + 1, 0)
    return any(ctx.messages[j].role is Role.ASSISTANT for j in range(start, i))


def detect_rephrase(ctx: DetectionContext) -> list[SignalInstance]:
    """The user restates a request, after the assistant answered (short messages never count): an
    explicit marker ("let me rephrase"), a near-duplicate of one of their last 3 messages, a short
    request clause restating one of their sentences in other words, or an insisting one (see
    _insistence_instance) that brings their request back after the agent steered away from it."""
    recent = _recent(ctx, "rephrase.recent", Role.USER, REPHRASE_WINDOW, content_words)
    keys = _recent(ctx, "rephrase.keys", Role.USER, REPHRASE_WINDOW, sentence_keys)
    _task(ctx)  # seeds the remembered task from the earlier messages when the memory is new
    found: list[SignalInstance] = []
    for i, text, follows in _user_texts(ctx):
        index = ctx.absolute_index(i)
        analysis = analyse_text(text)
        words = " ".join(_content_tokens(analysis.scan.tokens))
        instance = _phrase_instance(tx.REPHRASE, index, text, analysis) if follows else None
        if instance is None and not analysis.satisfied and _answered_since(ctx, recent, i, follows):
            instance = (
                _near_duplicate_instance(index, text, words, recent)
                or _restatement_instance(ctx, i, text, analysis, keys)
                or _insistence_instance(ctx, i, text, analysis, [*keys, *_task(ctx)])
                or _reask_instance(ctx, i, text, analysis, [*keys, *_task(ctx)])
            )
        if instance is not None:
            found.append(instance)
        sentences = sentence_keys(text)
        recent.append((index, words))
        keys.append((index, sentences))
        if ctx.memory.get(_TASK) is None and _is_task(sentences):
            ctx.memory[_TASK] = (index, sentences)
    return found


# --- restatement in other words: a short request whose key words the user already wrote ------------
# "no. I want to dispute it" … "why would I contact them. I want to dispute the charge": a request
# clause that mostly repeats (after stemming and a few synonyms) the key words of one earlier sentence
# of the user's, after the assistant answered. Clauses, not sentences: "it has to leave after five, the
# 14:20 is no good for me" restates in its first clause and reacts to the agent in its second.
# Questions are left to the near-duplicate rule: a follow-up question naturally reuses the request's
# nouns ("are the flights to osaka direct?"); so is a message that moves the task on ("ok, book the
# flight to osaka"): it opens with an acknowledgement or brings in a verb of progress.
RESTATE_MIN_SHARED = 2  # key words shared with the earlier sentence
RESTATE_SHARE = 0.66  # of the new clause's key words
RESTATE_MAX_KEYS = 6  # a restatement is short; a longer clause is a new, fuller request
RESTATE_CONFIDENCE = 0.6
INSISTENCE_CONFIDENCE = 0.6
# fmt: off
_RESTATE_OPENERS = frozenset([
    "ok", "okay", "yes", "yeah", "yep", "sure", "great", "good", "fine", "then", "also", "and", "now",
    "next", "perfect", "cool", "alright", "thanks", "so",
])
_PROGRESS_WORDS = frozenset([
    "book", "buy", "pay", "confirm", "order", "proceed", "go", "choose", "pick", "take", "select", "send",
    "add", "change", "cancel", "next", "another", "other", "more", "instead", "also", "else", "too",
])
# not key words: fillers, and the modal words of a request ("it has to…", "I'd like…"); "want" and
# "need" stay, they are the request's verb when the object is a pronoun ("I want to dispute it")
_KEY_STOP = STOP_WORDS | DEFAULT_NEGATORS | frozenset([
    "yes", "yeah", "yep", "nope", "nah", "one", "ones", "thing", "like", "get", "has", "have", "must",
    "would", "id", "asked", "asking", "trying", "me", "its", "im", "something", "anything",
])
# the same request in other words: number words and times as digits, a few everyday synonyms
_CANONICAL = {  # keys as _key leaves them (stemmed, final "e" off)
    "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7", "eight": "8",
    "nine": "9", "ten": "10", "eleven": "11", "twelve": "12", "depart": "leav", "departur": "leav",
    "purchas": "buy", "cheapest": "cheap", "cheaper": "cheap", "inexpensiv": "cheap", "repair": "fix",
    "solv": "fix", "reimburs": "refund", "installer": "install", "payment": "charg", "transaction": "charg",
}
# fmt: on


def _key(word: str) -> str:
    """A key word's canonical form: stem, a final "e" off ("dispute"/"disputing"), times as their
    hour ("5pm" → 5), then the synonym table."""
    word = stem(word)
    if len(word) >= 5 and word.endswith("e"):
        word = word[:-1]
    if word[:-2].isdigit() and word[-2:] in ("am", "pm"):
        word = word[:-2]
    return _CANONICAL.get(word, word)


# fmt: off
_QUESTION_OPENERS = frozenset([
    "how", "what", "why", "when", "where", "which", "who", "can", "could", "is", "are", "does", "do",
])
# A restated request says what the user wants or needs ("I want to dispute the charge", "it has to
# leave after five"); a sentence without such a word reports ("still says offline") and never counts.
_REQUEST_WORDS = frozenset([
    "want", "wanted", "need", "needed", "needs", "looking", "must", "require", "required",
    "asked", "asking", "trying", "should", "would", "please", "pls",
])
# Questions that ask the agent to do something, or how to ("how do I cancel", "can you book it").
_REQUEST_QUESTIONS = (
    ("how", "do", "i"), ("how", "can", "i"), ("how", "do", "we"), ("how", "can", "we"), ("can", "you"),
    ("could", "you"), ("would", "you"), ("will", "you"), ("can", "i"), ("could", "i"),
)
# Words skipped before a clause's first word when reading it as an imperative ("just cancel it").
_IMPERATIVE_FILLERS = frozenset([
    "just", "please", "pls", "then", "now", "so", "simply", "and", "again", "really", "only",
])
# Words that add to the task rather than restate it ("another one", "also the hotel", "one more").
_ADDITIVE_WORDS = frozenset(["another", "other", "more", "instead", "also", "else", "too", "next"])
# Request words are not what a request is about: "I need…" shared with "I need…" restates nothing.
_GENERIC_KEYS = frozenset(_key(word) for word in (*_REQUEST_WORDS, "help", "want", "need"))
_PROGRESS_KEYS = frozenset(_key(word) for word in _PROGRESS_WORDS)
# fmt: on


class _Unit(NamedTuple):
    """A sentence or a clause of a user message as the restatement rules read it."""

    keys: frozenset[str]
    asks: bool  # a question
    wants: bool  # a request word, "has to", or "give me…"
    asks_for: bool  # a question asking the agent to act, or how to ("how do I cancel")
    lead: str  # the key of its first word after _IMPERATIVE_FILLERS ("" when that is a stop word)
    progress: bool  # an _ADDITIVE_WORDS word ("also", "another", "too"): the task moves on
    sentence: frozenset[str]  # the key words of its whole sentence


def _units(text: str, *, clauses: bool) -> tuple[_Unit, ...]:
    """The first MAX_SENTENCES sentences of ``text`` (first REPETITION_COMPARE_CHARS characters), or
    their clauses, as _Unit records (cached: each message is read for several rules)."""
    return _units_of(text[:REPETITION_COMPARE_CHARS], clauses)


_REQUEST_MARKS = _REQUEST_WORDS | frozenset(["has", "have", "had", "like"])


@functools.lru_cache(maxsize=1024)  # keys are at most REPETITION_COMPARE_CHARS long: bounded memory
def _units_of(text: str, clauses: bool) -> tuple[_Unit, ...]:
    scan = analyse_text(text).scan
    tokens = scan.tokens
    units: list[_Unit] = []
    for start, end in _sentences(tokens):
        after = scan.text[tokens[end - 1].end : tokens[end].start if end < len(tokens) else len(scan.text)]
        closed_by_question = "?" in after
        spans = _clauses(tokens, start, end) if clauses else [(start, end)]
        whole = _keys(tokens, start, end)
        for a, b in spans:
            norms = [t.norm for t in tokens[a:b]]
            asks = norms[0] in _QUESTION_OPENERS or (closed_by_question and b == end)
            lead = next((norm for norm in norms if norm not in _IMPERATIVE_FILLERS), "")
            wants = (len(norms) > 1 and norms[1] == "me") or (
                not _REQUEST_MARKS.isdisjoint(norms) and any(_requests(tokens, k) for k in range(a, b))
            )
            units.append(
                _Unit(
                    whole if len(spans) == 1 else _keys(tokens, a, b),
                    asks,
                    wants,
                    asks and any(tuple(norms[: len(q)]) == q for q in _REQUEST_QUESTIONS),
                    "" if lead in _KEY_STOP else _key(lead),
                    not _ADDITIVE_WORDS.isdisjoint(norms),
                    whole,
                )
            )
    return tuple(units)


def _keys(tokens: list[Token], a: int, b: int) -> frozenset[str]:
    return frozenset(_key(t.norm) for t in tokens[a:b] if t.norm not in _KEY_STOP and not t.quoted)


def _clauses(tokens: list[Token], start: int, end: int) -> list[tuple[int, int]]:
    """[a, b) token ranges of the clauses of the sentence tokens[start:end]."""
    cuts = [k for k in range(start + 1, end) if tokens[k].clause_start]
    return list(zip([start, *cuts], [*cuts, end], strict=True))


def sentence_keys(text: str) -> tuple[tuple[frozenset[str], bool, bool], ...]:
    """Per sentence: its key words, whether it cannot be restated by the restatement rule (a question,
    or no request word), and whether it is a request at all (a request word, or a question asking the
    agent to act)."""
    return tuple(
        (unit.keys, unit.asks or not unit.wants, unit.wants or unit.asks_for)
        for unit in _units(text, clauses=False)
    )


def _requests(tokens: list[Token], k: int) -> bool:
    """tokens[k] makes its sentence a request: a _REQUEST_WORDS word, or "has/have to" ("he has loads
    of books" states a fact; "it has to leave after five" asks for something), "I'd like", not negated in its
    clause ("I don't want the premium plan" refuses)."""
    for j in (k - 1, k - 2):
        if j < 0 or tokens[j + 1].clause_start:
            break
        if tokens[j].norm in DEFAULT_NEGATORS:
            return False
    norm = tokens[k].norm
    if norm in ("has", "have", "had"):
        return k + 1 < len(tokens) and tokens[k + 1].norm == "to" and not tokens[k + 1].sentence_start
    if norm == "like":  # "I'd like…", "we would like…"
        return k > 0 and tokens[k - 1].norm in ("id", "wed", "would") and not tokens[k].clause_start
    return norm in _REQUEST_WORDS


def _restatement_instance(
    ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis, keys: deque[tuple[int, Any]]
) -> SignalInstance | None:
    """A request clause restating an earlier sentence of the user's. Its sentence must be short too: a
    sentence with more than RESTATE_MAX_KEYS key words of its own (words of the agent's last answer it
    merely refers to, "the 14:20 is no good", aside) is a new, fuller request."""
    tokens = analysis.scan.tokens
    if not tokens or _accepts(tokens):
        return None
    answer: frozenset[str] | None = None  # read lazily
    for unit in _units(text, clauses=True):
        if unit.asks or not unit.wants or unit.progress:
            continue
        if not RESTATE_MIN_SHARED <= len(unit.keys) <= RESTATE_MAX_KEYS:
            continue
        if len(unit.sentence) > RESTATE_MAX_KEYS:
            answer = _answer_keys(ctx, i) if answer is None else answer
            if len(unit.sentence - answer) > RESTATE_MAX_KEYS:
                continue
        for earlier_index, earlier in keys:
            for before, *_ in earlier:
                shared = _restates(unit.keys, before)
                if shared:
                    metadata = {
                        "pattern": "restatement",
                        "similar_to": earlier_index,
                        "shared": sorted(shared),
                    }
                    span = snippet(text, 0, min(len(text), 200))
                    return SignalInstance(
                        tx.REPHRASE, ctx.absolute_index(i), RESTATE_CONFIDENCE, span, metadata
                    )
    return None


def _accepts(tokens: list[Token]) -> bool:
    """The message opens by accepting ("ok, …", "great, …"), unless a "but" follows ("yes but I need
    the reset itself"): then it pushes back."""
    return tokens[0].norm in _RESTATE_OPENERS and not (len(tokens) > 1 and tokens[1].norm == "but")


def _restates(sentence: frozenset[str], before: frozenset[str]) -> frozenset[str]:
    """The key words ``sentence`` shares with ``before`` when it restates it, else an empty set."""
    shared = sentence & before
    new = sentence - before
    # a word swapped for another, the sentence no shorter ("a dentist in Leeds" → "in Bristol"): the
    # same template with a new value, a new request
    swapped = bool(new and before - sentence and len(sentence) >= len(before))
    if (
        len(shared) < max(RESTATE_MIN_SHARED, RESTATE_SHARE * len(sentence))
        or new & _PROGRESS_KEYS
        or swapped
    ):
        return frozenset()
    return shared


# --- insistence: the request brought back after the agent steered away -------------------------------
# "nope, just cancel it" / "I don't want a discount. … how do I cancel" / "are you serious. CANCEL MY
# SUBSCRIPTION", the agent having offered a pause, a discount, anything but the cancellation. Three
# things together: the message insists (it opens by rejecting the agent's offer, says "I don't want…",
# or is angry: a negative-stance phrase or shouting); one of its clauses is a request (a request word,
# a question asking to act, or an imperative whose verb is the request's), whose key words mostly come
# from one of the user's earlier requests (the conversation's first one, the task, included however long
# ago); and one of those shared words is absent from the agent's last answer: the agent dropped it and
# the user brings it back. When the agent just offered the very thing ("shall I book it?" … "book it"),
# the user moves on rather than insists. A message that corrects ("no, I said cancel, not pause") points
# back at the earlier words, which the correction covers; it is not also a restatement.
_TASK = "rephrase.task"
_REJECTIONS = frozenset(["no", "nope", "nah"])
_REJECTION_WORDS = _REJECTIONS | frozenset(["thanks", "thank", "you", "ty", "way"])
_REFUSALS = (
    ("i", "dont", "want"),
    ("i", "do", "not", "want"),
    ("i", "dont", "need"),
    ("not", "interested"),
    ("im", "not", "interested"),
    ("i", "am", "not", "interested"),
)


def _is_task(sentences: tuple[tuple[frozenset[str], bool, bool], ...]) -> bool:
    """A request with at least two key words beyond the request words: what the conversation is for."""
    return any(request and len(keys - _GENERIC_KEYS) >= 2 for keys, _, request in sentences)


def _task(ctx: DetectionContext) -> list[tuple[int, Any]]:
    """[(index, sentence keys)] of the conversation's first request (remembered; seeded once from the
    first SEED_LOOKBACK messages when the memory is new)."""
    if _TASK not in ctx.memory:
        ctx.memory[_TASK] = None
        for i in range(min(ctx.new_from, SEED_LOOKBACK)):
            message = ctx.messages[i]
            if message.role is Role.USER and message.content:
                sentences = sentence_keys(message.content)
                if _is_task(sentences):
                    ctx.memory[_TASK] = (ctx.absolute_index(i), sentences)
                    break
    task = ctx.memory[_TASK]
    return [task] if task is not None else []


def _insists(text: str, analysis: TextAnalysis) -> bool:
    """The message opens by rejecting ("nope", "no thanks") or pushing back ("ok but…"), refuses
    something ("I don't want a discount"), or is angry (a negative-stance phrase, shouting)."""
    tokens = analysis.scan.tokens
    if len(tokens) > 1 and tokens[0].norm in _RESTATE_OPENERS and tokens[1].norm == "but":
        return True  # "ok but…", "yes but…"
    if tokens and tokens[0].norm in _REJECTIONS:
        end = next((k for k in range(1, len(tokens)) if tokens[k].clause_start), len(tokens))
        if all(t.norm in _REJECTION_WORDS for t in tokens[:end]):
            return True
    for start, _ in _sentences(tokens):
        words = tuple(t.norm for t in tokens[start : start + 4])
        if any(words[: len(refusal)] == refusal for refusal in _REFUSALS):
            return True
    return bool(analysis.hits.get(tx.NEGATIVE_STANCE)) or bool(
        _caps_cue(text, analysis) or _caps_run_cue(text, analysis)
    )


def _insistence_instance(
    ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis, earlier: list[tuple[int, Any]]
) -> SignalInstance | None:
    tokens = analysis.scan.tokens
    if not tokens or _accepts(tokens) or analysis.hits.get(tx.CORRECTION):
        return None
    requests = [(at, keys) for at, sentences in earlier for keys, _, request in sentences if request]
    if not requests:
        return None
    answer: frozenset[str] | None = None  # read lazily, as is whether the message insists
    insists: bool | None = None
    for unit in _units(text, clauses=True):
        wanted = unit.keys - _GENERIC_KEYS
        if not wanted or len(wanted) > RESTATE_MAX_KEYS or unit.progress:
            continue
        for at, before in requests:
            shared = wanted & before
            if not shared or len(shared) < RESTATE_SHARE * len(wanted):
                continue
            if not (unit.wants or unit.asks_for or unit.lead in shared):
                continue
            insists = _insists(text, analysis) if insists is None else insists
            if not insists:
                return None
            answer = _answer_keys(ctx, i) if answer is None else answer
            if shared - answer:
                metadata = {
                    "pattern": "insistence",
                    "similar_to": at,
                    "shared": sorted(shared),
                    "brought_back": sorted(shared - answer),
                }
                span = snippet(text, 0, min(len(text), 200))
                return SignalInstance(
                    tx.REPHRASE, ctx.absolute_index(i), INSISTENCE_CONFIDENCE, span, metadata
                )
    return None


# --- asked again after a repeated answer ---------------------------------------------------------------
# The agent answered with (nearly) the same text as one of its earlier answers, and the user asks again: a
# question or a request about what they asked before (a key word shared with one of their earlier
# sentences). "you pasted the same thing again. wow" complains without asking; "is there a human I can
# talk to?" escalates rather than restates; a satisfied reply moves on.
REASK_CONFIDENCE = 0.6


def _reask_instance(
    ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis, earlier: list[tuple[int, Any]]
) -> SignalInstance | None:
    if not earlier or analysis.hits.get(tx.ESCALATION) or analysis.hits.get(tx.QUIT):
        return None
    units = [
        u for u in _units(text, clauses=False) if (u.asks or u.wants or u.asks_for) and u.keys - _GENERIC_KEYS
    ]
    if not units:
        return None
    repeated = _repeated_answer(ctx, i)
    if repeated is None:
        return None
    for unit in units:
        wanted = unit.keys - _GENERIC_KEYS
        for at, sentences in earlier:
            shared = next((wanted & keys for keys, *_ in sentences if wanted & keys), None)
            if shared:
                metadata = {
                    "pattern": "asked_again",
                    "similar_to": at,
                    "shared": sorted(shared),
                    "repeated_answer": repeated,
                }
                span = snippet(text, 0, min(len(text), 200))
                return SignalInstance(tx.REPHRASE, ctx.absolute_index(i), REASK_CONFIDENCE, span, metadata)
    return None


def _repeated_answer(ctx: DetectionContext, i: int) -> int | None:
    """Absolute index of the assistant's last answer before local index ``i`` when it nearly repeats one
    of the REPETITION_WINDOW answers before it (the repetition detector's rule), else None."""
    answers: list[tuple[int, _Answer]] = []
    for j in range(i - 1, max(i - SEED_LOOKBACK, 0) - 1, -1):
        message = ctx.messages[j]
        if message.role is Role.ASSISTANT and message.content:
            answers.append((ctx.absolute_index(j), comparable_answer(message.content)))
            if len(answers) > REPETITION_WINDOW:
                break
    if len(answers) < 2:
        return None
    (last, answer), before = answers[0], deque(reversed(answers[1:]))
    return last if _most_similar(answer, before) is not None else None


def _answer_keys(ctx: DetectionContext, i: int) -> frozenset[str]:
    """The key forms of the words of the assistant's last answer before local index ``i``."""
    return frozenset(_key(word) for word in _previous_assistant_words(ctx, i))


def _near_duplicate_instance(
    index: int, text: str, words: str, recent: deque[tuple[int, str]]
) -> SignalInstance | None:
    best = _restated(words, recent)
    if best is None:
        return None
    earlier, ratio = best
    confidence = round(0.55 + 0.35 * (ratio - REPHRASE_SIMILARITY) / (100 - REPHRASE_SIMILARITY), 3)
    metadata = {"pattern": "near_duplicate", "similar_to": earlier, "ratio": round(ratio / 100, 3)}
    return SignalInstance(tx.REPHRASE, index, confidence, snippet(text, 0, min(len(text), 200)), metadata)


# --- stagnation ------------------------------------------------------------------------------------


def detect_dragging(ctx: DetectionContext) -> list[SignalInstance]:
    """Once per conversation, at the user turn where efficiency first drops below 0.5 (SPEC §4/§8)."""
    if ctx.memory.get("dragging.fired"):
        return []
    turns = ctx.memory.get("dragging.user_turns")
    if turns is None:  # new memory: count the turns analysed before (once)
        turns = sum(1 for m in ctx.messages[: ctx.new_from] if m.role is Role.USER)
    found: list[SignalInstance] = []
    for i in range(ctx.new_from, len(ctx.messages)):
        if ctx.messages[i].role is not Role.USER:
            continue
        turns += 1
        score = efficiency(turns, ctx.baseline_user_turns)
        if score < DRAGGING_EFFICIENCY:
            metadata = {
                "pattern": "turn_count",
                "user_turns": turns,
                "baseline": ctx.baseline_user_turns,
                "efficiency": round(score, 4),
            }
            found.append(
                SignalInstance(tx.DRAGGING, ctx.absolute_index(i), DRAGGING_CONFIDENCE, None, metadata)
            )
            ctx.memory["dragging.fired"] = True
            break
    ctx.memory["dragging.user_turns"] = turns
    return found


def comparable_text(text: str) -> str:
    """Normalised (casefolded, punctuation-free) first REPETITION_COMPARE_CHARS characters."""
    return " ".join(t.norm for t in tokenise(text[:REPETITION_COMPARE_CHARS]))


class _Answer(NamedTuple):
    """An assistant message as the repetition rule compares it."""

    text: str  # comparable_text
    sentences: tuple[str, ...]  # its first MAX_SENTENCES sentences, normalised the same way


def comparable_answer(text: str) -> _Answer:
    return _comparable_answer(text[:REPETITION_COMPARE_CHARS])


@functools.lru_cache(maxsize=1024)  # keys are at most REPETITION_COMPARE_CHARS long: bounded memory
def _comparable_answer(text: str) -> _Answer:
    # Only the words: an assistant message needs no phrase scan (nor its spelling correction).
    tokens = tokenise(text)
    spans = _sentences(tokens)
    sentences = tuple(" ".join(t.norm for t in tokens[a:b]) for a, b in spans)
    if not spans or spans[-1][1] == len(tokens):  # every sentence read: the text is their join
        return _Answer(" ".join(sentences), sentences)
    return _Answer(" ".join(t.norm for t in tokens), sentences)


def detect_repetition(ctx: DetectionContext) -> list[SignalInstance]:
    """A new assistant message nearly duplicates one of the previous 5 assistant messages: as a whole,
    contained in it (or containing it), or sentence by sentence behind a new opening."""
    recent = _recent(ctx, "repetition.recent", Role.ASSISTANT, REPETITION_WINDOW, comparable_answer)
    found: list[SignalInstance] = []
    for i in range(ctx.new_from, len(ctx.messages)):
        message = ctx.messages[i]
        if message.role is not Role.ASSISTANT or not message.content:
            continue
        answer = comparable_answer(message.content)
        best = _most_similar(answer, recent)
        if best is not None:
            found.append(_repetition_instance(ctx.absolute_index(i), message.content, *best))
        recent.append((ctx.absolute_index(i), answer))
    return found


def _most_similar(answer: _Answer, recent: deque[tuple[int, _Answer]]) -> tuple[int, float, str] | None:
    """(index, ratio, pattern) of the earlier answer the new one repeats best, if any."""
    text = answer.text
    if len(text) < REPETITION_MIN_CHARS:
        return None
    best: tuple[int, float, str] | None = None
    for index, earlier in recent:
        if len(earlier.text) < REPETITION_MIN_CHARS:
            continue
        found = _whole_or_contained(text, earlier.text) or _repeated_sentences(answer, earlier)
        if found and (best is None or found[0] > best[1]):
            best = (index, *found)
    return best


def _whole_or_contained(text: str, earlier: str) -> tuple[float, str] | None:
    ratio = fuzz.ratio(text, earlier, score_cutoff=REPETITION_SIMILARITY)
    if ratio:
        return ratio, "near_duplicate"
    ratio = _contained(text, earlier)
    return (ratio, "contained") if ratio else None


def _repeated_sentences(answer: _Answer, earlier: _Answer) -> tuple[float, str] | None:
    """(mean ratio of the repeated sentences, "repeated_sentences") when repeated sentences make up
    REPETITION_SENTENCE_SHARE of the new answer and REPETITION_SENTENCE_MIN_CHARS characters."""
    if len(answer.sentences) < 2:
        return None  # one sentence: the whole-answer comparisons decide
    total = sum(len(sentence) for sentence in answer.sentences)
    needed = max(REPETITION_SENTENCE_MIN_CHARS, REPETITION_SENTENCE_SHARE * total)
    repeated, weighted, left = 0, 0.0, total
    for sentence in answer.sentences:
        if repeated + left < needed:
            return None  # the rest cannot make up the share any more
        left -= len(sentence)
        if len(sentence) < REPETITION_MIN_CHARS:
            continue  # a short stock sentence never counts as repeated content
        match = process.extractOne(
            sentence, earlier.sentences, scorer=fuzz.ratio, score_cutoff=REPETITION_SENTENCE_SIMILARITY
        )
        if match is not None:
            ratio = match[1]
            repeated += len(sentence)
            weighted += ratio * len(sentence)
    if repeated < needed:
        return None
    return weighted / repeated, "repeated_sentences"


def _contained(text: str, earlier: str) -> float:
    """partial_ratio when one answer nearly contains the other (see REPETITION_CONTAINED_*), else 0."""
    short, long = sorted((text, earlier), key=len)
    if len(short) < REPETITION_CONTAINED_MIN_CHARS or len(short) < REPETITION_CONTAINED_MIN_SHARE * len(long):
        return 0.0
    ratio = fuzz.partial_ratio(short, long, score_cutoff=REPETITION_CONTAINED_SIMILARITY)
    return min(ratio, 100.0)


def _repetition_instance(
    index: int, content: str, earlier: int, ratio: float, pattern: str
) -> SignalInstance:
    confidence = round(0.6 + 0.35 * max(ratio - REPETITION_SIMILARITY, 0) / (100 - REPETITION_SIMILARITY), 3)
    metadata = {
        "pattern": pattern,
        "similar_to": earlier,
        "ratio": round(ratio / 100, 3),
        "threshold": REPETITION_SIMILARITY / 100,
    }
    return SignalInstance(tx.REPETITION, index, confidence, content[:200].strip(), metadata)


# --- disengagement ---------------------------------------------------------------------------------


def detect_escalation(ctx: DetectionContext) -> list[SignalInstance]:
    """The user asks for a human, an agent, a manager or support."""
    return _detect_phrases(ctx, tx.ESCALATION, after_assistant=False)


def detect_quit(ctx: DetectionContext) -> list[SignalInstance]:
    """The user gives up, leaves, cancels or goes elsewhere."""
    return _detect_phrases(ctx, tx.QUIT, after_assistant=True)


@dataclass(frozen=True)
class _Cue:
    pattern: str  # phrase | all_caps | excessive_punctuation
    confidence: float
    start: int
    end: int
    metadata: dict[str, Any] = field(default_factory=dict)


def detect_negative_stance(ctx: DetectionContext) -> list[SignalInstance]:
    """Complaints and frustration phrases, ALL CAPS, or excessive "!!!" / "???" / "?!?"."""
    found: list[SignalInstance] = []
    for i, text, _ in _user_texts(ctx):
        analysis = analyse_text(text)
        caps = _caps_cue(text, analysis) or _caps_run_cue(text, analysis)
        candidates = [
            _phrase_cue(analysis),
            caps,
            _punctuation_cue(text, analysis),
            _rhetorical_cue(text, analysis),
        ]
        cues = [cue for cue in candidates if cue is not None]
        if cues and not analysis.aimed_elsewhere:
            found.append(_stance_instance(ctx.absolute_index(i), text, cues))
    return found


def _stance_instance(index: int, text: str, cues: list[_Cue]) -> SignalInstance:
    best = max(cues, key=lambda cue: cue.confidence)
    confidence = round(min(0.95, best.confidence + EXTRA_CUE_BONUS * (len(cues) - 1)), 3)
    metadata = {"pattern": best.pattern, **best.metadata, "cues": [cue.pattern for cue in cues]}
    return SignalInstance(
        tx.NEGATIVE_STANCE, index, confidence, snippet(text, best.start, best.end), metadata
    )


def _phrase_cue(analysis: TextAnalysis) -> _Cue | None:
    best = _best_match(tx.NEGATIVE_STANCE, analysis)
    if best is None:
        return None
    confidence, match = best
    metadata = {"group": match.group, "phrase": match.phrase, "fuzzy": match.fuzzy}
    return _Cue("phrase", confidence, match.start, match.end, metadata)


_DELETE_UPPER = dict.fromkeys(map(ord, string.ascii_uppercase))
_DELETE_LOWER = dict.fromkeys(map(ord, string.ascii_lowercase))


def _clearly_not_shouting(text: str) -> bool:
    """A C-speed first look: with no quoted or code part to set aside, a text whose ASCII letters are
    mostly lower case cannot pass the precise check below."""
    if any(mark in text for mark in ('"', "`", ">", "\u201c")):
        return False
    upper = len(text) - len(text.translate(_DELETE_UPPER))
    lower = len(text) - len(text.translate(_DELETE_LOWER))
    return upper < CAPS_RATIO * (upper + lower) - 1


def _caps_cue(text: str, analysis: TextAnalysis) -> _Cue | None:
    """Shouting: ≥ 70 % upper-case letters over ≥ 12 letters and ≥ 3 words (quotes and code aside);
    not when the message is satisfied ("THANK YOU SO MUCH")."""
    if analysis.satisfied or _clearly_not_shouting(text):
        return None
    tokens = [t for t in analysis.scan.tokens if not t.quoted and not t.norm.isdigit()]
    if len(tokens) < CAPS_MIN_WORDS:
        return None
    letters = "".join(text[t.start : t.end] for t in tokens)
    upper = sum(map(str.isupper, letters))
    cased = upper + sum(map(str.islower, letters))
    if cased < CAPS_MIN_LETTERS or upper < CAPS_RATIO * cased:
        return None
    metadata = {"upper_ratio": round(upper / cased, 3), "letters": cased}
    return _Cue("all_caps", CAPS_CONFIDENCE, tokens[0].start, tokens[-1].end, metadata)


def _caps_run_cue(text: str, analysis: TextAnalysis) -> _Cue | None:
    """Partial shouting: ≥ 2 consecutive whole words in capitals of ≥ 3 letters, separated by spaces
    only ("I ALREADY PRUNED", "install it MYSELF NOW"). A word joined by "/", "_", "-" or digits is a
    name or an identifier ("HDMI/VRR", "MAX_RETRIES"), a word without a vowel an acronym (VRR, SQL), and
    a run of keys, keywords and common acronyms (CAPS LOCK, LEFT JOIN) no raised voice."""
    if analysis.satisfied:
        return None
    # Cheap first look: most messages have fewer than two capitalised words at all.
    capitalised = [word for word in text.split() if word.isupper()]
    if sum(1 for word in capitalised if len(word) >= CAPS_RUN_LETTERS) < CAPS_RUN_WORDS:
        return None
    run: list[Token] = []
    for token in analysis.scan.tokens:
        if not _shouted_word(text, token):
            run = []
        elif run and text[run[-1].end : token.start].isspace():
            run.append(token)
        else:
            run = [token]
        if len(run) >= CAPS_RUN_WORDS:
            metadata = {"words": len(run)}
            return _Cue("all_caps", CAPS_RUN_CONFIDENCE, run[0].start, run[-1].end, metadata)
    return None


def _shouted_word(text: str, token: Token) -> bool:
    word = text[token.start : token.end]
    if token.quoted or len(word) < CAPS_RUN_LETTERS or not (word.isalpha() and word.isupper()):
        return False
    if token.norm in CAPS_NOT_SHOUTING:
        return False
    before = text[token.start - 1] if token.start else " "
    after = text[token.end] if token.end < len(text) else " "
    joined = before.isalnum() or before in "/_-$@#.=" or after.isalnum() or after in "/_-@#'=(["
    return not joined and any(vowel in token.norm for vowel in "aeiouy")


RHETORICAL_CONFIDENCE = 0.6
# Sentence openings of a question the user answers themself: closed with "." or "!" instead of "?", it
# is sarcasm ("why would I contact a restaurant I've never been to."); with "?" (or nothing) it may be a
# real question ("why would I need a visa?") and does not count.
_RHETORICAL_HEADS = (
    ("why", "would", "i"),
    ("why", "would", "we"),
    ("why", "would", "anyone"),
    ("why", "should", "i"),
    ("why", "on", "earth"),
    ("how", "would", "i", "know"),
    ("how", "am", "i", "supposed"),
    ("how", "is", "that", "helpful"),
    ("how", "does", "that", "help"),
)


def _rhetorical_cue(text: str, analysis: TextAnalysis) -> _Cue | None:
    """A sentence opening with a _RHETORICAL_HEADS question and closed by "." or "!" (sarcasm)."""
    tokens = analysis.scan.tokens
    for start, end in _sentences(tokens):
        words = tuple(t.norm for t in tokens[start : start + 4])
        if tokens[start].quoted or not any(words[: len(head)] == head for head in _RHETORICAL_HEADS):
            continue
        after = text[tokens[end - 1].end : tokens[end].start if end < len(tokens) else len(text)]
        closer = next((char for char in after if char in ".!?"), "")
        if closer in (".", "!"):
            metadata = {"head": " ".join(words[:3])}
            return _Cue(
                "rhetorical_question",
                RHETORICAL_CONFIDENCE,
                tokens[start].start,
                tokens[end - 1].end,
                metadata,
            )
    return None


# Sentence-level cues (restatements, sarcasm) are looked for in a message's first sentences only: what
# a user says to the agent comes first, and a long paste (a log, an email) would otherwise cost per
# sentence for nothing.
MAX_SENTENCES = 12


_SENTENCE_START = operator.attrgetter("sentence_start")


def _sentences(tokens: list[Token]) -> list[tuple[int, int]]:
    """[start, end) token ranges of the first MAX_SENTENCES sentences (split at sentence_start tokens)."""
    # C-speed scan of the flags, stopping at the (MAX_SENTENCES + 1)th start
    flags = map(_SENTENCE_START, tokens)
    starts = list(itertools.islice(itertools.compress(itertools.count(), flags), MAX_SENTENCES + 1))
    ends = [*starts[1:], len(tokens)] if len(starts) <= MAX_SENTENCES else starts[1:]
    return list(zip(starts[:MAX_SENTENCES], ends, strict=False))


def _punctuation_cue(text: str, analysis: TextAnalysis) -> _Cue | None:
    """The first unquoted run of 3+ "!"/"?" ("!!!", "???", "?!?"); an all-"!" run in a satisfied
    message, or outside a complaining sentence in a message without complaint, is enthusiasm."""
    first = -1
    for run in _PUNCTUATION_RUNS:
        if run == "!!!" and analysis.satisfied:
            continue
        at = _unquoted_find(text, run, analysis.scan)
        if run == "!!!" and not any(analysis.hits.get(signal) for signal in _COMPLAINTS):
            at = _angry_bangs(text, at, analysis.scan)
        if at >= 0 and (first < 0 or at < first):
            first = at
    if first < 0:
        return _double_punctuation_cue(text, analysis)
    end = first
    while end < len(text) and end - first < 50 and text[end] in "!?":
        end += 1
    return _Cue("excessive_punctuation", PUNCTUATION_CONFIDENCE, first, end, {"run": text[first:end]})


SHORT_DOUBT_TOKENS = 3  # "usually?? …", "no?? …", "and the fries?? …": an echo thrown back in disbelief


def _double_punctuation_cue(text: str, analysis: TextAnalysis) -> _Cue | None:
    """A doubled "??" or "!!" closing a sentence, in anger: "??" after a short echo the user goes on
    from ("usually?? this happened in july as well"), "!!" closing a complaining or shouting sentence ("I
    TOLD the bank I was travelling!!") or in a message that complains or corrects ("this is what I had in
    the beginning!! it was my first message"). A long question ending "??" asks; a satisfied "!!"
    rejoices."""
    if analysis.satisfied or ("??" not in text and "!!" not in text):
        return None
    tokens = analysis.scan.tokens
    complaining = any(analysis.hits.get(signal) for signal in _COMPLAINTS)
    for start, end in _sentences(tokens):
        gap = tokens[end - 1].end
        after = text[gap : tokens[end].start if end < len(tokens) else len(text)]
        run = next((r for r in ("??", "!!") if r in after), "")
        at = after.find(run) if run else -1
        if at < 0 or tokens[start].quoted or after[at + 2 : at + 3] in ("!", "?") or "!" in after[:at]:
            continue  # no doubled mark, or a longer run (counted above) or a mixed one
        if run == "??":
            angry = end - start <= SHORT_DOUBT_TOKENS and end < len(tokens)
        else:
            angry = complaining or any(
                t.norm in BANG_ANGER_WORDS or _shouted_word(text, t) for t in tokens[start:end]
            )
        if angry:
            return _Cue("excessive_punctuation", PUNCTUATION_CONFIDENCE, gap + at, gap + at + 2, {"run": run})
    return None


def _angry_bangs(text: str, at: int, scan: Scan) -> int:
    """The first unquoted "!!!" from ``at`` on that closes a complaining sentence (BANG_ANGER_WORDS),
    or -1. One forward pass over the tokens and the runs: linear in the text."""
    tokens = scan.tokens
    i, angry = 0, False
    while at >= 0:
        while i < len(tokens) and tokens[i].end <= at:
            angry = (angry and not tokens[i].sentence_start) or tokens[i].norm in BANG_ANGER_WORDS
            i += 1
        if angry:
            return at
        end = at
        while end < len(text) and text[end] == "!":
            end += 1
        at = _unquoted_find_from(text, "!!!", scan, end)
    return -1


def _unquoted_find_from(text: str, needle: str, scan: Scan, begin: int) -> int:
    at = text.find(needle, begin)
    while at >= 0:
        span_end = scan.quoted_end(at)
        if span_end is None:
            return at
        at = text.find(needle, span_end)
    return -1


def _unquoted_find(text: str, needle: str, scan: Scan) -> int:
    return _unquoted_find_from(text, needle, scan, 0)


# --- satisfaction ----------------------------------------------------------------------------------


def detect_gratitude(ctx: DetectionContext) -> list[SignalInstance]:
    """Thanks: "thanks", "thank you", "thx", "ty", "much appreciated", "cheers"."""
    return _detect_phrases(ctx, tx.GRATITUDE, after_assistant=True)


def detect_confirmation(ctx: DetectionContext) -> list[SignalInstance]:
    """Explicit satisfaction or understanding: "perfect", "exactly what I needed", "got it". A message
    whose only confirmation is an acknowledgement ("got it", "I see", "understood") does not count
    when the agent's last answer refused or gave bad news: the user accepts it, nothing more."""
    found: list[SignalInstance] = []
    groups = phrase_library().groups
    for i, text, follows in _user_texts(ctx):
        analysis = analyse_text(text)
        instance = _phrase_instance(
            tx.CONFIRMATION, ctx.absolute_index(i), text, analysis, opening=not follows
        )
        if instance is None:
            continue
        acknowledged = all(groups[m.group].acknowledgement for m in analysis.hits[tx.CONFIRMATION])
        if acknowledged and _after_bad_news(ctx, i):
            continue
        found.append(instance)
    return found


def _after_bad_news(ctx: DetectionContext, i: int) -> bool:
    """The nearest assistant message with text before local index ``i`` refuses or gives bad news."""
    for j in range(i - 1, max(i - SEED_LOOKBACK, 0) - 1, -1):
        message = ctx.messages[j]
        if message.role is Role.ASSISTANT and message.content:
            return BAD_NEWS in phrase_library().cue_hits(message.content[:REPETITION_COMPARE_CHARS])
    return False


def detect_success(ctx: DetectionContext) -> list[SignalInstance]:
    """The task worked: "it works now", "that fixed it", "tests pass", "the booking went through"."""
    return _detect_phrases(ctx, tx.SUCCESS, after_assistant=True)


INTERACTION_DETECTORS: tuple[Detector, ...] = (
    detect_correction,
    detect_rephrase,
    detect_clarification,
    detect_dragging,
    detect_repetition,
    detect_escalation,
    detect_quit,
    detect_negative_stance,
    detect_gratitude,
    detect_confirmation,
    detect_success,
)
