"""interaction.misalignment.rephrase: the user asks again for what they already asked.

Six rules, tried in order on each new user message; the first that fires gives the instance, and
its ``pattern`` metadata names the rule (the phrase group, ``near_duplicate``, ``restatement``,
``insistence``, ``asked_again``, ``unanswered``). Rules 2–6 need the agent to have answered since
the earlier message, and never fire on a message that expresses satisfaction:

1. a phrase that says so ("let me rephrase", "again:"; group ``rephrase`` in ``phrases/misalignment.yaml``);
2. a near-duplicate of one of the user's last REPHRASE_WINDOW messages over content words
   (rapidfuzz token_set ≥ REPHRASE_SIMILARITY and token_sort ≥ REPHRASE_ORDER_SIMILARITY);
3. a restatement: a short request whose key words the user already wrote in an earlier sentence;
4. insistence: the task brought back after the agent steered away from it;
5. asked again after the agent repeated an answer;
6. asked again, pushing back, for what the agent's answers left out: a short question or request
   with words of the user's previous one that no answer since used ("I can see the total. I want to
   know why it went up by 18 quid" after "Your bill is £52.40").

The word lists of rules 3–6 are data, with their examples: ``rules`` in ``phrases/misalignment.yaml``.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import NamedTuple

from rapidfuzz import fuzz

from otelsignals.model import Role, SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext, holds_message_numbers, rebuilt_when_missing
from otelsignals.signals.disengagement import caps_cue, caps_run_cue
from otelsignals.signals.matching import DEFAULT_NEGATORS, Scan, snippet
from otelsignals.signals.phrase_analysis import (
    COMPARE_CHARS,
    SEED_LOOKBACK,
    STOP_WORDS,
    TextAnalysis,
    analysis_of,
    asked,
    clause_spans,
    phrase_instance,
    previous_assistant_text,
    previous_assistant_words,
    recent_messages,
    sentence_closing,
    sentence_spans,
    stated_sentences,
    user_texts,
)
from otelsignals.signals.stagnation import REPETITION_WINDOW, Answer, most_similar, prepared_answer
from otelsignals.signals.tokens import Token, tokenise
from otelsignals.signals.word_lists import canonical_forms, word_order, word_sequences, word_set

# The near-duplicate thresholds were calibrated on the labelled pairs REPHRASE_PAIRS (tests/signals/
# test_rephrase.py) and REPETITION_PAIRS (tests/signals/test_stagnation.py). Rephrase, over content
# words: restatements scored token_set ≥ 92.3 with token_sort ≥ 79.4; different requests on one template
# scored token_set ≤ 88.9 ("summarise the first/second chapter", "jira ticket for the login/signup bug")
# or, when one request only extends the other ("sort a list" / "… in reverse order without modifying
# it", token_set 100), token_sort ≤ 41. Known miss: inflected restatements ("counts users by country" /
# "counting users per country": 77.5).

REPHRASE_WINDOW = 3  # the user's previous messages compared with a new one
REPHRASE_SIMILARITY = 90.0  # rapidfuzz token_set_ratio over content words, 0–100
REPHRASE_ORDER_SIMILARITY = 75.0  # and token_sort_ratio: a restatement, not a longer follow-up
REPHRASE_MIN_WORDS = 3  # content words (stop words removed) in both messages
REPHRASE_MIN_LETTERS = 15
REPHRASE_MAX_WORDS = 120  # longer messages are compared on their first 120 content words


def content_words(ctx: DetectionContext, text: str) -> str:
    """The message's words without stop words, for near-duplicate comparison (first 300)."""
    return " ".join(_content_tokens(analysis_of(ctx, text).scan.tokens))


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
    # the letters counted in C, and only up to REPHRASE_MIN_LETTERS (a message's words run to hundreds)
    letters = itertools.islice(filter(str.isalpha, words), REPHRASE_MIN_LETTERS)
    return words.count(" ") + 1 >= REPHRASE_MIN_WORDS and len(list(letters)) >= REPHRASE_MIN_LETTERS


def rephrase_similarity(words: str, earlier: str) -> float:
    """0–100; 0 unless both messages are substantial and the new one restates the earlier one."""
    if not (_substantial(words) and _substantial(earlier)):
        return 0.0
    if fuzz.token_sort_ratio(words, earlier) < REPHRASE_ORDER_SIMILARITY:
        return 0.0
    return fuzz.token_set_ratio(words, earlier)


def _restated(words: str, recent: Sequence[tuple[int, str]]) -> tuple[int, float] | None:
    best: tuple[int, float] | None = None
    for index, earlier in recent:
        ratio = rephrase_similarity(words, earlier)
        if ratio >= REPHRASE_SIMILARITY and (best is None or ratio > best[1]):
            best = (index, ratio)
    return best


def _answered_since(ctx: DetectionContext, recent: Sequence[tuple[int, str]], i: int, follows: bool) -> bool:
    """An assistant message lies between the user's previous message and message ``i``, and the agent
    had replied before ``i`` (``follows``: a bare greeting answers nothing, so a request said again after
    "Hi! How can I help?" restates nothing the agent answered)."""
    if not follows or not recent:
        return follows
    start = max(recent[-1][0] - ctx.conversation.message_offset + 1, 0)
    return any(ctx.messages[j].role is Role.ASSISTANT for j in range(start, i))


# The user's latest messages, as each rule compares them (phrase_analysis.recent_messages).
_RECENT_WORDS = rebuilt_when_missing("rephrase.recent")
_RECENT_KEYS = rebuilt_when_missing("rephrase.keys")


def detect_rephrase(ctx: DetectionContext) -> list[SignalInstance]:
    """The user restates a request, after the assistant answered (short messages never count): an
    explicit marker ("let me rephrase"), a near-duplicate of one of their last 3 messages, a short
    request clause restating one of their sentences in other words, or an insisting one (see
    _insistence_instance) that brings their request back after the agent steered away from it."""
    recent = recent_messages(
        ctx, _RECENT_WORDS, Role.USER, REPHRASE_WINDOW, functools.partial(content_words, ctx)
    )
    keys = recent_messages(
        ctx, _RECENT_KEYS, Role.USER, REPHRASE_WINDOW, functools.partial(sentence_keys, ctx)
    )
    _task(ctx)  # seeds the remembered task from the earlier messages when the memory is new
    found: list[SignalInstance] = []
    for i, text, follows in user_texts(ctx):
        index = ctx.absolute_index(i)
        analysis = analysis_of(ctx, text)
        words = " ".join(_content_tokens(analysis.scan.tokens))
        instance = phrase_instance(tx.REPHRASE, index, text, analysis) if follows else None
        if instance is None and not analysis.satisfied and _answered_since(ctx, recent, i, follows):
            instance = (
                _near_duplicate_instance(index, text, words, recent)
                or _restatement_instance(ctx, i, text, analysis, keys)
                or _insistence_instance(ctx, i, text, analysis, [*keys, *_task(ctx)])
                or _reask_instance(ctx, i, text, analysis, [*keys, *_task(ctx)])
                or _unanswered_instance(ctx, i, text, analysis, keys[-1:])
                or _refused_substitute_instance(ctx, i, text, analysis)
                or _known_then_ask_instance(ctx, i, text, analysis, keys[-1:])
            )
        if instance is not None:
            found.append(instance)
        sentences = sentence_keys(ctx, text)
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
_RESTATE_OPENERS = word_set("misalignment", "restatement", "openers")
_PROGRESS_WORDS = word_set("misalignment", "restatement", "progress_words")
# not key words: fillers, and the modal words of a request ("it has to…", "I'd like…"); "want" and
# "need" stay, they are the request's verb when the object is a pronoun ("I want to dispute it")
_KEY_STOP = STOP_WORDS | DEFAULT_NEGATORS | word_set("misalignment", "restatement", "not_key_words")
# the same request in other words: number words and times as digits, a few everyday synonyms
_CANONICAL = canonical_forms("misalignment", "restatement", "canonical")  # keys as _key leaves them


def _key(word: str) -> str:
    """A key word's canonical form: stem, a final "e" off ("dispute"/"disputing"), times as their
    hour ("5pm" → 5), then the synonym table."""
    word = stem(word)
    if len(word) >= 5 and word.endswith("e"):
        word = word[:-1]
    if word[:-2].isdigit() and word[-2:] in ("am", "pm"):
        word = word[:-2]
    return _CANONICAL.get(word, word)


_QUESTION_OPENERS = word_set("misalignment", "restatement", "question_openers")
# A restated request says what the user wants or needs ("I want to dispute the charge", "it has to
# leave after five"); a sentence without such a word reports ("still says offline") and never counts.
_REQUEST_WORDS = word_set("misalignment", "restatement", "request_words")
# Questions that ask the agent to do something, or how to ("how do I cancel", "can you book it").
_REQUEST_QUESTIONS = word_sequences("misalignment", "restatement", "request_questions")
# Words skipped before a clause's first word when reading it as an imperative ("just cancel it").
_IMPERATIVE_FILLERS = word_set("misalignment", "restatement", "imperative_fillers")
# Words that add to the task rather than restate it ("another one", "also the hotel", "one more").
_ADDITIVE_WORDS = word_set("misalignment", "restatement", "additive_words")
# Request words are not what a request is about: "I need…" shared with "I need…" restates nothing.
_GENERIC_KEYS = frozenset(
    _key(word) for word in (*_REQUEST_WORDS, *word_order("misalignment", "restatement", "generic_words"))
)
_PROGRESS_KEYS = frozenset(_key(word) for word in _PROGRESS_WORDS)


class _Unit(NamedTuple):
    """A sentence or a clause of a user message as the restatement rules read it."""

    keys: frozenset[str]
    asks: bool  # a question
    wants: bool  # a request word, "has to", or "give me…"
    asks_for: bool  # a question asking the agent to act, or how to ("how do I cancel")
    lead: str  # the key of its first word after _IMPERATIVE_FILLERS ("" when that is a stop word)
    progress: bool  # an _ADDITIVE_WORDS word ("also", "another", "too"): the task moves on
    sentence: frozenset[str]  # the key words of its whole sentence


def _units(ctx: DetectionContext, text: str, *, clauses: bool) -> tuple[_Unit, ...]:
    """The first MAX_SENTENCES sentences of ``text`` (first COMPARE_CHARS characters), or
    their clauses, as _Unit records (once per detection call: each message is read for several
    rules; what is kept between calls is ``sentence_keys``, in the detector's memory)."""
    read: dict[tuple[str, bool], tuple[_Unit, ...]] = ctx.scratch.setdefault(_UNITS, {})
    units = read.get((text, clauses))
    if units is None:
        units = read[text, clauses] = _units_of(analysis_of(ctx, text[:COMPARE_CHARS]).scan, clauses)
    return units


_UNITS = "rephrase.units"


_REQUEST_MARKS = _REQUEST_WORDS | frozenset(["has", "have", "had", "like"])


def _units_of(scan: Scan, clauses: bool) -> tuple[_Unit, ...]:
    tokens = scan.tokens
    units: list[_Unit] = []
    for start, end in sentence_spans(tokens):
        after = scan.text[tokens[end - 1].end : tokens[end].start if end < len(tokens) else len(scan.text)]
        closed_by_question = "?" in after
        spans = clause_spans(tokens, start, end) if clauses else [(start, end)]
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


class KeptSentence(NamedTuple):
    """A sentence of a user message as the detector's memory keeps it between calls."""

    # Its key words, sorted: as a frozenset, a few words took 216-728 bytes (the largest part of
    # this detector's memory); the rules make a set of them only where they compare.
    keys: tuple[str, ...]
    request: bool  # a request word, or a question asking the agent to act
    asks: bool = False  # a question of any kind ("what time do you open on Sunday?")


KeptMessage = tuple[int, tuple[KeptSentence, ...]]  # a user message's absolute index, its sentences


def sentence_keys(ctx: DetectionContext, text: str) -> tuple[KeptSentence, ...]:
    """The sentences of ``text`` as :class:`KeptSentence` records."""
    return tuple(
        KeptSentence(tuple(sorted(unit.keys)), unit.wants or unit.asks_for, unit.asks)
        for unit in _units(ctx, text, clauses=False)
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
    ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis, keys: Sequence[KeptMessage]
) -> SignalInstance | None:
    """A request clause restating an earlier sentence of the user's. Its sentence must be short too: a
    sentence with more than RESTATE_MAX_KEYS key words of its own (words of the agent's last answer it
    merely refers to, "the 14:20 is no good", aside) is a new, fuller request."""
    tokens = analysis.scan.tokens
    if not tokens or _accepts(tokens):
        return None
    answer: frozenset[str] | None = None  # read lazily
    for unit in _units(ctx, text, clauses=True):
        if unit.asks or not unit.wants or unit.progress:
            continue
        if not RESTATE_MIN_SHARED <= len(unit.keys) <= RESTATE_MAX_KEYS:
            continue
        if len(unit.sentence) > RESTATE_MAX_KEYS:
            answer = _answer_keys(ctx, i) if answer is None else answer
            if len(unit.sentence - answer) > RESTATE_MAX_KEYS:
                continue
        for earlier_index, earlier in keys:
            for sentence in earlier:
                if unit.keys.isdisjoint(sentence.keys):
                    continue  # nothing shared: not a restatement (the set is made only otherwise)
                shared = _restates(unit.keys, frozenset(sentence.keys))
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
_TASK = holds_message_numbers("rephrase.task")
_REJECTIONS = word_set("misalignment", "insistence", "rejections")
# what may follow a rejection in its clause ("no thanks", "nope, thank you", "no way")
_REJECTION_WORDS = _REJECTIONS | word_set("misalignment", "insistence", "rejection_fillers")
_REFUSALS = word_sequences("misalignment", "insistence", "refusals")


def _is_task(sentences: tuple[KeptSentence, ...]) -> bool:
    """A request with at least two key words beyond the request words: what the conversation is for."""
    return any(
        sentence.request and sum(key not in _GENERIC_KEYS for key in sentence.keys) >= 2
        for sentence in sentences
    )


def _task(ctx: DetectionContext) -> list[KeptMessage]:
    """[(index, sentence keys)] of the conversation's first request (remembered; seeded once from the
    first SEED_LOOKBACK messages when the memory is new)."""
    if _TASK not in ctx.memory:
        ctx.memory[_TASK] = None
        for i in range(min(ctx.new_from, SEED_LOOKBACK)):
            message = ctx.messages[i]
            if message.role is Role.USER and message.content:
                sentences = sentence_keys(ctx, message.content)
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
    for start, _ in sentence_spans(tokens):
        words = tuple(t.norm for t in tokens[start : start + 4])
        if any(words[: len(refusal)] == refusal for refusal in _REFUSALS):
            return True
    return bool(analysis.hits.get(tx.NEGATIVE_STANCE)) or bool(
        caps_cue(text, analysis) or caps_run_cue(text, analysis)
    )


def _insistence_instance(
    ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis, earlier: list[KeptMessage]
) -> SignalInstance | None:
    tokens = analysis.scan.tokens
    if not tokens or _accepts(tokens) or analysis.hits.get(tx.CORRECTION):
        return None
    requests = [(at, s.keys) for at, sentences in earlier for s in sentences if s.request]
    if not requests:
        return None
    answer: frozenset[str] | None = None  # read lazily, as is whether the message insists
    insists: bool | None = None
    for unit in _units(ctx, text, clauses=True):
        wanted = unit.keys - _GENERIC_KEYS
        if not wanted or len(wanted) > RESTATE_MAX_KEYS or unit.progress:
            continue
        for at, before in requests:
            shared = wanted.intersection(before)
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
    ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis, earlier: list[KeptMessage]
) -> SignalInstance | None:
    if not earlier or analysis.hits.get(tx.ESCALATION) or analysis.hits.get(tx.QUIT):
        return None
    units = [
        u
        for u in _units(ctx, text, clauses=False)
        if (u.asks or u.wants or u.asks_for) and u.keys - _GENERIC_KEYS
    ]
    if not units:
        return None
    repeated = _repeated_answer(ctx, i)
    if repeated is None:
        return None
    for unit in units:
        wanted = unit.keys - _GENERIC_KEYS
        for at, sentences in earlier:
            shared = next(
                (wanted.intersection(s.keys) for s in sentences if not wanted.isdisjoint(s.keys)), None
            )
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


# --- asked again for what the answer left out ------------------------------------------------------
# "Why is my bill £18 higher?" … "Your bill is £52.40, due on 28 May." … "I can see the total. I want
# to know why it went up by 18 quid": the user pushes back (_pushes_back) and asks again, in a short
# question or request, with words of their previous question or request that none of the agent's
# answers since then used ("but sunday??", "not sort code, I need the IBAN"). A follow-up about what
# the agent did answer shares only words the agent used ("is the Osaka flight direct?" after "booked
# the Osaka flight"); a new request shares none; and without pushback a question on the same
# template is a new one ("how do I sort a dictionary?" after "how do I sort a list?", the answer in
# other words).
UNANSWERED_CONFIDENCE = 0.55


def _root(key: str) -> str:
    """What is compared to tell whether the agent used a word: its first four letters ("monthly" and
    "month", "tops" and "top up", "cancellation" and "cancel" are one word here), a short word without
    a plural "s". Coarse on purpose: a word taken for answered only spares a signal."""
    return key[:4] if len(key) > 4 else key.removesuffix("s")


_PUSHBACK_OPENERS = word_sequences("misalignment", "unanswered", "pushback_openers")
_PUSHBACK_WORDS = word_set("misalignment", "unanswered", "pushback_words")
# words that say nothing of what was asked for ("could you guide me", "am I doing something wrong?")
_VAGUE = frozenset(_root(_key(word)) for word in word_order("misalignment", "unanswered", "vague_words"))
# asking again is short: a longer message or sentence is a new, fuller request or a report
UNANSWERED_MAX_KEYS = 8
UNANSWERED_MAX_SENTENCES = 3


def _unanswered_instance(
    ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis, earlier: Sequence[KeptMessage]
) -> SignalInstance | None:
    tokens = analysis.scan.tokens
    if not tokens or _accepts(tokens) or not earlier or analysis.hits.get(tx.CLARIFICATION):
        return None
    units = [
        u
        for u in _units(ctx, text, clauses=False)
        if (u.asks or u.wants) and not u.progress and len(u.keys - _GENERIC_KEYS) <= UNANSWERED_MAX_KEYS
    ]
    if not units or len(sentence_spans(tokens)) > UNANSWERED_MAX_SENTENCES:
        return None
    asked = [
        (at, frozenset(s.keys) - _GENERIC_KEYS)
        for at, sentences in earlier
        for s in sentences
        if s.request or s.asks
    ]
    candidates = [
        (at, unit.keys & before) for unit in units for at, before in asked if not unit.keys.isdisjoint(before)
    ]
    if not candidates:
        return None
    pushback: bool | None = None  # read lazily
    answers: dict[int, frozenset[str]] = {}  # one earlier message's sentences share its answers
    for at, shared in candidates:
        answered = answers[at] if at in answers else answers.setdefault(at, _answers_keys(ctx, at, i))
        left_out = {word for word in shared if _root(word) not in answered and _root(word) not in _VAGUE}
        if not left_out:
            continue
        pushback = _pushes_back(text, tokens) if pushback is None else pushback
        if not pushback:
            continue
        metadata = {"pattern": "unanswered", "similar_to": at, "left_out": sorted(left_out)}
        span = snippet(text, 0, min(len(text), 200))
        return SignalInstance(tx.REPHRASE, ctx.absolute_index(i), UNANSWERED_CONFIDENCE, span, metadata)
    return None


# --- the agent's substitute refused, the request said again: "I don't want a voucher. I want my money
# back." A clause refusing ("I don't want", "I didn't ask for") a thing the agent's last answer put
# forward in a statement ("What I can do is put a £7.75 voucher on your account"), followed in the
# message by what the user does want ("I want", "I need", "all I want"). Refusing an offer the agent
# asked about ("Would you like a voucher?" → "I don't want a voucher, I want a refund") answers it;
# refusing alone ("I don't want the insurance, thanks") says no more than no.
REFUSED_SUBSTITUTE_CONFIDENCE = 0.7
_SUBSTITUTE_REFUSALS = word_sequences("misalignment", "refused_substitute", "refusals")
_WANTS = word_sequences("misalignment", "refused_substitute", "wants")
_WANT_FIRST_WORDS = frozenset(want[0] for want in _WANTS)
_REFUSAL_FIRST_WORDS = frozenset(refusal[0] for refusal in _SUBSTITUTE_REFUSALS)
_REFUSAL_LEADS = word_set("misalignment", "refused_substitute", "leads")  # "no, I don't want…"
_NO_COURTESIES = word_set("misalignment", "refused_substitute", "no_courtesies")  # "no problem", "no rush"
_REFUSED_SKIPPED = word_set("misalignment", "refused_substitute", "skipped")  # "a", "the", "another"


def _refused_substitute_instance(
    ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis
) -> SignalInstance | None:
    tokens = analysis.scan.tokens
    norms = [t.norm for t in tokens]
    last_want: int | None = None  # found once, when first needed: a long message may refuse often
    for k, token in enumerate(tokens):
        if not token.clause_start or token.quoted:
            continue
        at = k + 1 if norms[k] in _REFUSAL_LEADS else k
        if at < len(norms) and norms[at] in _REFUSAL_FIRST_WORDS:
            refusal = next((r for r in _SUBSTITUTE_REFUSALS if tuple(norms[at : at + len(r)]) == r), None)
            if refusal is None:
                continue
            thing = at + len(refusal)
        elif (
            norms[k] == "no"
            and at < len(norms)
            and not tokens[at].clause_start
            and norms[at] not in _NO_COURTESIES
            and not asked(text, tokens[k].start, tokens[at].end)
        ):
            thing = at  # "no pause. i want it cancelled", "No replacement please, I want a refund"
        else:
            continue
        while thing < len(norms) and norms[thing] in _REFUSED_SKIPPED:
            thing += 1
        if last_want is None:
            last_want = _last_want(norms)
        if thing == len(norms) or last_want <= thing:
            continue
        offered = {
            _root(w) for sentence in stated_sentences(previous_assistant_text(ctx, i)) for w in sentence
        }
        if norms[thing] not in STOP_WORDS and _root(norms[thing]) in offered:
            metadata = {"pattern": "refused_substitute", "rejected": norms[thing]}
            span = snippet(text, tokens[k].start, tokens[thing].end)
            return SignalInstance(
                tx.REPHRASE, ctx.absolute_index(i), REFUSED_SUBSTITUTE_CONFIDENCE, span, metadata
            )
    return None


# --- told what they knew, asking again: "I know they need replacing. What's the price?" -------------
# The message opens (after "yes", "ok"…) by saying the user knew what the agent's last answer stated:
# the opener names a word of that answer's statements ("I know the syntax", "I can see it's £52.40"),
# or says nothing more and pushes back ("I get that, but…"). Then, in the same message, the user asks
# or requests without moving on ("also", "another", "instead"), while their previous request still
# holds words none of the agent's answers since used (as _unanswered_instance reads it). Unlike that
# rule the new question need not repeat the request's words ("What's the price?" after "How much
# would it cost…"): saying the answer told them nothing new is the pushback.
KNOWN_CONFIDENCE = 0.6
_KNOWN_OPENERS = word_sequences("misalignment", "known_then_ask", "openers")
_KNOWN_LEADS = word_set("misalignment", "known_then_ask", "leads")
_KNOWN_CONTRASTS = word_set("misalignment", "known_then_ask", "contrasts")
_KNOWN_IDIOMS = word_sequences("misalignment", "known_then_ask", "idioms")
_KNOWN_COMPLEMENTS = word_set("misalignment", "known_then_ask", "complements")
_QUESTION_KEYS = frozenset(_key(word) for word in _QUESTION_OPENERS)


def _known_then_ask_instance(
    ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis, earlier: Sequence[KeptMessage]
) -> SignalInstance | None:
    tokens = analysis.scan.tokens
    norms = [t.norm for t in tokens]
    start = 0
    while start < len(norms) and norms[start] in _KNOWN_LEADS:
        start += 1
    opener = next((o for o in _KNOWN_OPENERS if tuple(norms[start : start + len(o)]) == o), None)
    if opener is None or not earlier or any(tuple(norms[start : start + len(d)]) == d for d in _KNOWN_IDIOMS):
        return None
    end = start + len(opener)  # the end of what the user says they knew: the clause, or "but"
    if end < len(tokens) and norms[end] in _KNOWN_COMPLEMENTS:
        end += 1  # "Ich weiß, dass…": the clause after the comma is what they knew
    while end < len(tokens) and not tokens[end].clause_start and norms[end] not in _KNOWN_CONTRASTS:
        end += 1
    known = [norm for norm in norms[start + len(opener) : end] if norm not in _KEY_STOP]
    if not known and not (end < len(tokens) and norms[end] in _KNOWN_CONTRASTS):
        return None  # "I understand, thanks." neither names the answer nor pushes back
    stated = {
        _root(_key(word))
        for sentence in stated_sentences(previous_assistant_text(ctx, i))
        for word in sentence
    }
    if known and all(_root(_key(norm)) not in stated for norm in known):
        return None
    if not stated or not _asks_after(text, tokens, end):
        return None
    for at, sentences in earlier:
        if not any(s.request or s.asks for s in sentences):
            continue
        # the whole message: "my car clicks when I turn left. what could that be?" asks about the car
        before = frozenset(key for s in sentences for key in s.keys) - _GENERIC_KEYS - _QUESTION_KEYS
        answered = _answers_keys(ctx, at, i)
        left_out = {word for word in before if _root(word) not in answered and _root(word) not in _VAGUE}
        if left_out:
            metadata = {"pattern": "known_then_ask", "similar_to": at, "left_out": sorted(left_out)}
            span = snippet(text, 0, min(len(text), 200))
            return SignalInstance(tx.REPHRASE, ctx.absolute_index(i), KNOWN_CONFIDENCE, span, metadata)
    return None


def _asks_after(text: str, tokens: list[Token], at: int) -> bool:
    """The message asks or requests after token ``at`` (a contrast word there skipped), in a sentence
    that does not move on to something else (_ADDITIVE_WORDS)."""
    for start, end in sentence_spans(tokens):
        if end <= at:
            continue
        first = max(start, at)
        if first < end and tokens[first].norm in _KNOWN_CONTRASTS:
            first += 1
        if first >= end or not _ADDITIVE_WORDS.isdisjoint(t.norm for t in tokens[first:end]):
            continue
        if (
            tokens[first].norm in _QUESTION_OPENERS
            or "?" in sentence_closing(text, tokens, end)
            or any(_requests(tokens, k) for k in range(first, end))
        ):
            return True
    return False


def _last_want(norms: list[str]) -> int:
    """Where the message's last _WANTS sequence not negated (no negator just before) starts, else -1."""
    for k in range(len(norms) - 1, -1, -1):
        if (
            norms[k] in _WANT_FIRST_WORDS
            and (k == 0 or norms[k - 1] not in DEFAULT_NEGATORS)
            and any(tuple(norms[k : k + len(want)]) == want for want in _WANTS)
        ):
            return k
    return -1


def _pushes_back(text: str, tokens: list[Token]) -> bool:
    """Pushback: "??"; a sentence opening with it ("not sort code…", "but sunday", "I know, but…";
    PUSHBACK_OPENERS); or a word of it in a sentence that states ("I don't want an estimate", "The
    visa though."; PUSHBACK_WORDS). Inside a question such a word asks on: "can I still bring a
    bag?", "but I only have brown rice, does that work?"."""
    if "??" in text:
        return True
    for start, end in sentence_spans(tokens):
        if tokens[start].quoted:
            continue
        words = tuple(t.norm for t in tokens[start : start + 4])
        if any(words[: len(opener)] == opener for opener in _PUSHBACK_OPENERS):
            return True
        after = sentence_closing(text, tokens, end)
        if "?" not in after and any(t.norm in _PUSHBACK_WORDS for t in tokens[start:end]):
            return True
    return False


def _answers_keys(ctx: DetectionContext, at: int, i: int) -> frozenset[str]:
    """The :func:`_root` of the key form of every word the assistant wrote between absolute index ``at``
    and local index ``i``."""
    keys: set[str] = set()
    for j in range(max(at - ctx.conversation.message_offset + 1, 0), i):
        message = ctx.messages[j]
        if message.role is Role.ASSISTANT and message.content:
            keys.update(_root(_key(t.norm)) for t in tokenise(message.content[:COMPARE_CHARS]))
    return frozenset(keys)


def _repeated_answer(ctx: DetectionContext, i: int) -> int | None:
    """Absolute index of the assistant's last answer before local index ``i`` when it nearly repeats one
    of the REPETITION_WINDOW answers before it (the repetition detector's rule), else None."""
    answers: list[tuple[int, Answer]] = []
    for j in range(i - 1, max(i - SEED_LOOKBACK, 0) - 1, -1):
        message = ctx.messages[j]
        if message.role is Role.ASSISTANT and (content := message.content):
            answers.append((ctx.absolute_index(j), prepared_answer(ctx, j, content)))
            if len(answers) > REPETITION_WINDOW:
                break
    if len(answers) < 2:
        return None
    (last, answer), before = answers[0], answers[:0:-1]
    return last if most_similar(answer, before) is not None else None


def _answer_keys(ctx: DetectionContext, i: int) -> frozenset[str]:
    """The key forms of the words of the assistant's last answer before local index ``i``."""
    return frozenset(_key(word) for word in previous_assistant_words(ctx, i))


def _near_duplicate_instance(
    index: int, text: str, words: str, recent: Sequence[tuple[int, str]]
) -> SignalInstance | None:
    best = _restated(words, recent)
    if best is None:
        return None
    earlier, ratio = best
    confidence = round(0.55 + 0.35 * (ratio - REPHRASE_SIMILARITY) / (100 - REPHRASE_SIMILARITY), 3)
    metadata = {"pattern": "near_duplicate", "similar_to": earlier, "ratio": round(ratio / 100, 3)}
    return SignalInstance(tx.REPHRASE, index, confidence, snippet(text, 0, min(len(text), 200)), metadata)
