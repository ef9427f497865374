"""The interaction layer (SPEC §3): misalignment, stagnation, disengagement, satisfaction.

Eleven model-free detectors, one per leaf type, each incremental: it looks at the messages from
``ctx.new_from`` on and keeps what it must remember in ``ctx.memory`` (the caller keeps one dict per
conversation for this module). Only USER messages feed misalignment, disengagement and satisfaction;
stagnation.repetition reads ASSISTANT messages and stagnation.dragging counts USER turns.

Phrases come from ``phrases/interaction.yaml`` (data, with positive and near-miss examples per
group), matched by one :class:`~otelsignals.signals.matching.PhraseMatcher` built on first use. A hit
counts when it is neither quoted nor (for groups that respect negation) negated.

Misalignment, satisfaction and quit need an assistant turn before the message: there is nothing to
correct, clarify or be satisfied with yet, "thanks in advance" is not satisfaction, and a first
message "cancel my subscription" is the task, not the user leaving. Escalation and negative stance
fire on any user message.

Confidence of a phrase hit (documented rule, :func:`phrase_confidence`): the group's base confidence
from the YAML, minus 0.15 when a word matched through a typo, plus 0.05 when the phrase is the whole
message, multiplied for messages longer than 40 tokens by ``max(0.6, (40 / tokens) ** 0.15)`` (the
phrase is a small part of a long text), clamped to [0.05, 0.99]. The best hit of a leaf in a message
gives its instance; there is at most one instance per (leaf, message).
"""

from __future__ import annotations

import functools
import string
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml
from rapidfuzz import fuzz

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
    snippet,
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


@dataclass(frozen=True)
class PhraseLibrary:
    matcher: PhraseMatcher
    groups: dict[str, GroupSpec] = field(default_factory=dict)

    def signal_of(self, group: str) -> str:
        return self.groups[group].signal


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
        )
    matcher = PhraseMatcher(
        (spec.group for spec in specs.values()),
        negators=data.get("negators", DEFAULT_NEGATORS),
        protected_words=data.get("protected_words", ()),
        lead_ins=data.get("lead_ins", ()),
        trailers=data.get("trailers", ()),
    )
    return PhraseLibrary(matcher, specs)


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


def analyse_text(text: str) -> TextAnalysis:
    """Scan a message once for every phrase group (cached: several detectors read each message)."""
    cached = _CACHE.get(text)
    if cached is not None:
        return cached
    groups = phrase_library().groups
    scan = phrase_library().matcher.scan(text)
    accepted = [
        m
        for m in scan.matches
        if not (m.quoted or m.negated or (groups[m.group].statement_only and asked(text, m.start, m.end)))
    ]
    if any(groups[m.group].signal in _SATISFACTION for m in accepted):
        accepted = [m for m in accepted if not groups[m.group].unless_satisfied]
    hits: dict[str, list[Match]] = {}
    for match in accepted:
        hits.setdefault(groups[match.group].signal, []).append(match)
    analysis = TextAnalysis(scan, hits)
    _CACHE.put(text, analysis)
    return analysis


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


def _best_match(signal: str, analysis: TextAnalysis) -> tuple[float, Match] | None:
    """The highest-confidence accepted hit of ``signal`` (the earliest among equals)."""
    matches = analysis.hits.get(signal)
    if not matches:
        return None
    groups = phrase_library().groups
    tokens = len(analysis.scan.tokens)
    scored = [(phrase_confidence(groups[m.group].group.confidence, m, tokens), m) for m in matches]
    return max(scored, key=lambda item: (item[0], -item[1].start))


def _phrase_instance(signal: str, index: int, text: str, analysis: TextAnalysis) -> SignalInstance | None:
    best = _best_match(signal, analysis)
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
    found: list[SignalInstance] = []
    for i, text, follows in _user_texts(ctx):
        if after_assistant and not follows:
            continue
        instance = _phrase_instance(signal, ctx.absolute_index(i), text, analyse_text(text))
        if instance is not None:
            found.append(instance)
    return found


def _recent(ctx: DetectionContext, key: str, role: Role, size: int, prepare: Any) -> deque[tuple[int, str]]:
    """The remembered last ``size`` messages of ``role`` as (absolute index, prepared text).

    Seeded from at most SEED_LOOKBACK messages before ``new_from`` when the memory is new.
    """
    recent = ctx.memory.get(key)
    if recent is None:
        recent = deque(maxlen=size)
        earlier: list[tuple[int, str]] = []
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
            instance = _contrast_instance(ctx, i, text, analysis)
        if instance is not None:
            found.append(instance)
    return found


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
                words.update(t.norm for t in analyse_text(content).scan.tokens)
    return frozenset(words)


def detect_clarification(ctx: DetectionContext) -> list[SignalInstance]:
    """The user asks for clarification or shows confusion: "what do you mean", "huh?", or asks what a
    term the assistant just used is ("what's TARGETARCH?", "what is intune?")."""
    found: list[SignalInstance] = []
    for i, text, follows in _user_texts(ctx):
        if not follows:
            continue
        analysis = analyse_text(text)
        instance = _phrase_instance(tx.CLARIFICATION, ctx.absolute_index(i), text, analysis)
        if instance is None:
            instance = _term_question(ctx, i, text, analysis)
        if instance is not None:
            found.append(instance)
    return found


TERM_QUESTION_CONFIDENCE = 0.7
TERM_QUESTION_MAX_WORDS = 2  # "what's intune?", "what is open jaw?": a term, not a new question
_TERM_QUESTION_HEADS = (
    ("whats",),
    ("what", "is"),
    ("what", "are"),
    ("what", "s"),
    ("whats", "a"),
    ("what", "is", "a"),
    ("what", "is", "an"),
    ("whats", "an"),
)


def _term_question(ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis) -> SignalInstance | None:
    """A sentence that is only "what's <term>?", the term being 1–2 words of the assistant message
    just before: the user does not know a word the agent used ("whats the difference between…" is a
    longer, new question and "what's the weather?" names nothing the agent said)."""
    previous = _previous_assistant_words(ctx, i)
    tokens = analysis.scan.tokens
    for start, token in enumerate(tokens):
        if not token.sentence_start or token.quoted:
            continue
        end = start + 1
        while end < len(tokens) and not tokens[end].sentence_start:
            end += 1
        words = [t.norm for t in tokens[start:end]]
        head = next((h for h in _TERM_QUESTION_HEADS[::-1] if tuple(words[: len(h)]) == h), None)
        term = words[len(head) :] if head else []
        after = text[tokens[end - 1].end : tokens[end].start if end < len(tokens) else len(text)]
        if (
            0 < len(term) <= TERM_QUESTION_MAX_WORDS
            and "?" in after
            and all(w in previous and w not in STOP_WORDS for w in term)
        ):
            metadata = {"pattern": "term_question", "term": " ".join(term)}
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
            return frozenset(
                t.norm for t in analyse_text(message.content[:REPETITION_COMPARE_CHARS]).scan.tokens
            )
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
    """The user restates a request: an explicit marker, or a near-duplicate of one of their last 3
    messages sent after the assistant answered (short messages never count)."""
    recent = _recent(ctx, "rephrase.recent", Role.USER, REPHRASE_WINDOW, content_words)
    keys = _recent(ctx, "rephrase.keys", Role.USER, REPHRASE_WINDOW, sentence_keys)
    found: list[SignalInstance] = []
    for i, text, follows in _user_texts(ctx):
        index = ctx.absolute_index(i)
        analysis = analyse_text(text)
        words = " ".join(_content_tokens(analysis.scan.tokens))
        instance = _phrase_instance(tx.REPHRASE, index, text, analysis) if follows else None
        if instance is None and not analysis.satisfied and _answered_since(ctx, recent, i, follows):
            instance = _near_duplicate_instance(index, text, words, recent) or _restatement_instance(
                index, text, analysis, keys
            )
        if instance is not None:
            found.append(instance)
        recent.append((index, words))
        keys.append((index, sentence_keys(text)))
    return found


# --- restatement in other words: a short statement whose key words the user already wrote ----------
# "no. I want to dispute it" … "why would I contact them. I want to dispute the charge": a sentence
# that mostly repeats (after stemming and a few synonyms) the key words of one earlier sentence of the
# user's, after the assistant answered. Questions are left to the near-duplicate rule: a follow-up
# question naturally reuses the request's nouns ("are the flights to osaka direct?"); so is a message
# that moves the task on ("ok, book the flight to osaka"): it opens with an acknowledgement or brings
# in a verb of progress.
RESTATE_MIN_SHARED = 2  # key words shared with the earlier sentence
RESTATE_SHARE = 0.66  # of the new sentence's key words
RESTATE_MAX_KEYS = 6  # a restatement is short; a longer sentence is a new, fuller request
RESTATE_CONFIDENCE = 0.6
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
    "yes", "yeah", "one", "ones", "thing", "like", "get", "has", "have", "must", "would", "id", "asked",
    "asking", "trying", "me", "its", "im", "something", "anything",
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


def sentence_keys(text: str) -> tuple[tuple[frozenset[str], bool], ...]:
    """Per sentence (first REPETITION_COMPARE_CHARS characters): its key words, and whether it cannot be
    a restatement (a question, or no request word)."""
    scan = analyse_text(text[:REPETITION_COMPARE_CHARS]).scan
    tokens = scan.tokens
    found: list[tuple[frozenset[str], bool]] = []
    for start, end in _sentences(tokens):
        keys = frozenset(_key(t.norm) for t in tokens[start:end] if t.norm not in _KEY_STOP and not t.quoted)
        after = scan.text[tokens[end - 1].end : tokens[end].start if end < len(tokens) else len(scan.text)]
        asks = "?" in after or tokens[start].norm in _QUESTION_OPENERS
        # "give me…", "show me…": an imperative addressed to the agent is a request too
        imperative = end - start > 1 and tokens[start + 1].norm == "me"
        wants = imperative or any(_requests(tokens, k) for k in range(start, end))
        found.append((keys, asks or not wants))
    return tuple(found)


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
# fmt: on


def _requests(tokens: list[Token], k: int) -> bool:
    """tokens[k] makes its sentence a request: a _REQUEST_WORDS word, or "has/have to" ("he has loads
    of books" states a fact; "it has to leave after five" asks for something)."""
    norm = tokens[k].norm
    if norm in ("has", "have", "had"):
        return k + 1 < len(tokens) and tokens[k + 1].norm == "to" and not tokens[k + 1].sentence_start
    return norm in _REQUEST_WORDS


def _restatement_instance(
    index: int, text: str, analysis: TextAnalysis, keys: deque[tuple[int, Any]]
) -> SignalInstance | None:
    tokens = analysis.scan.tokens
    if not tokens or tokens[0].norm in _RESTATE_OPENERS:
        return None
    for sentence, skip in sentence_keys(text):
        if skip or not RESTATE_MIN_SHARED <= len(sentence) <= RESTATE_MAX_KEYS:
            continue
        for earlier_index, earlier in keys:
            for before, _ in earlier:
                shared = _restates(sentence, before)
                if shared:
                    metadata = {
                        "pattern": "restatement",
                        "similar_to": earlier_index,
                        "shared": sorted(shared),
                    }
                    span = snippet(text, 0, min(len(text), 200))
                    return SignalInstance(tx.REPHRASE, index, RESTATE_CONFIDENCE, span, metadata)
    return None


def _restates(sentence: frozenset[str], before: frozenset[str]) -> frozenset[str]:
    """The key words ``sentence`` shares with ``before`` when it restates it, else an empty set."""
    shared = sentence & before
    new = sentence - before
    # a word swapped for another, the sentence no shorter ("a dentist in Leeds" → "in Bristol"): the
    # same template with a new value, a new request
    swapped = bool(new and before - sentence and len(sentence) >= len(before))
    if (
        len(shared) < max(RESTATE_MIN_SHARED, RESTATE_SHARE * len(sentence))
        or new & _PROGRESS_WORDS
        or swapped
    ):
        return frozenset()
    return shared


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
    return " ".join(t.norm for t in analyse_text(text[:REPETITION_COMPARE_CHARS]).scan.tokens)


def detect_repetition(ctx: DetectionContext) -> list[SignalInstance]:
    """A new assistant message nearly duplicates one of the previous 5 assistant messages."""
    recent = _recent(ctx, "repetition.recent", Role.ASSISTANT, REPETITION_WINDOW, comparable_text)
    found: list[SignalInstance] = []
    for i in range(ctx.new_from, len(ctx.messages)):
        message = ctx.messages[i]
        if message.role is not Role.ASSISTANT or not message.content:
            continue
        text = comparable_text(message.content)
        best = _most_similar(text, recent)
        if best is not None:
            found.append(_repetition_instance(ctx.absolute_index(i), message.content, *best))
        recent.append((ctx.absolute_index(i), text))
    return found


def _most_similar(text: str, recent: deque[tuple[int, str]]) -> tuple[int, float] | None:
    if len(text) < REPETITION_MIN_CHARS:
        return None
    best: tuple[int, float] | None = None
    for index, earlier in recent:
        if len(earlier) < REPETITION_MIN_CHARS:
            continue
        ratio = fuzz.ratio(text, earlier, score_cutoff=REPETITION_SIMILARITY) or _contained(text, earlier)
        if ratio and (best is None or ratio > best[1]):
            best = (index, ratio)
    return best


def _contained(text: str, earlier: str) -> float:
    """partial_ratio when one answer nearly contains the other (see REPETITION_CONTAINED_*), else 0."""
    short, long = sorted((text, earlier), key=len)
    if len(short) < REPETITION_CONTAINED_MIN_CHARS or len(short) < REPETITION_CONTAINED_MIN_SHARE * len(long):
        return 0.0
    ratio = fuzz.partial_ratio(short, long, score_cutoff=REPETITION_CONTAINED_SIMILARITY)
    return min(ratio, 100.0)


def _repetition_instance(index: int, content: str, earlier: int, ratio: float) -> SignalInstance:
    confidence = round(0.6 + 0.35 * (ratio - REPETITION_SIMILARITY) / (100 - REPETITION_SIMILARITY), 3)
    metadata = {
        "pattern": "near_duplicate",
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
        cues = [
            _phrase_cue(analysis),
            caps,
            _punctuation_cue(text, analysis),
            _rhetorical_cue(text, analysis),
        ]
        cues = [cue for cue in cues if cue is not None]
        if cues:
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


def _sentences(tokens: list[Token]) -> list[tuple[int, int]]:
    """[start, end) token ranges of the first MAX_SENTENCES sentences (split at sentence_start tokens)."""
    starts: list[int] = []
    for i, token in enumerate(tokens):
        if token.sentence_start:
            starts.append(i)
            if len(starts) > MAX_SENTENCES:
                break
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
        return None
    end = first
    while end < len(text) and end - first < 50 and text[end] in "!?":
        end += 1
    return _Cue("excessive_punctuation", PUNCTUATION_CONFIDENCE, first, end, {"run": text[first:end]})


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
    """Explicit satisfaction or understanding: "perfect", "exactly what I needed", "got it"."""
    return _detect_phrases(ctx, tx.CONFIRMATION, after_assistant=True)


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
