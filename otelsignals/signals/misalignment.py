"""interaction.misalignment (SPEC §3): the user says the agent misunderstood, or does not understand it.

- ``correction``: the user corrects the agent, by phrase ("that's wrong", "I said X, not Y"; groups
  ``correction*`` in ``phrases/misalignment.yaml``), by a short contrast ("…, not tokyo") that rejects
  something the conversation mentioned, or by telling the agent its approach is needlessly piecemeal
  ("you don't need to check them one by one, just…").
- ``rephrase``: the user restates an earlier request (:mod:`otelsignals.signals.rephrase`).
- ``clarification``: the user does not understand the agent, by phrase ("what do you mean?",
  "I'm confused") or by asking what a term of the agent's last answer means ("what's intune?").

Phrase hits follow the shared rules of :mod:`otelsignals.signals.phrase_analysis` (quoting, negation,
first message, confidence). The word lists of the piecemeal, contrast, term-question and echo-question
rules are data, with their examples: ``rules`` in ``phrases/misalignment.yaml``.
"""

from __future__ import annotations

import re

from rapidfuzz.distance import OSA

from otelsignals.model import Role, SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext, DetectorSpec
from otelsignals.signals.matching import DEFAULT_NEGATORS, Match, snippet
from otelsignals.signals.phrase_analysis import (
    ASKED_WHICH,
    COMPARE_CHARS,
    SEED_LOOKBACK,
    STOP_WORDS,
    TextAnalysis,
    analysis_of,
    best_of,
    by_first_word,
    clause_spans,
    holds_any,
    instance_of,
    phrase_instance,
    phrase_library,
    previous_assistant_cues,
    previous_assistant_text,
    previous_assistant_words,
    sentence_closing,
    sentence_spans,
    stated_sentences,
    user_texts,
)
from otelsignals.signals.rephrase import detect_rephrase
from otelsignals.signals.tokens import Token, tokenise
from otelsignals.signals.word_lists import word_order, word_sequences, word_set

# --- misalignment ----------------------------------------------------------------------------------


def detect_correction(ctx: DetectionContext) -> list[SignalInstance]:
    """The user corrects or negates the assistant: "no, I meant…", "that's wrong", or sets the right
    thing against a wrong one from the conversation ("we fly into osaka actually, not tokyo")."""
    found: list[SignalInstance] = []
    for i, text, follows in user_texts(ctx):
        if not follows:
            continue
        analysis = analysis_of(ctx, text)
        index = ctx.absolute_index(i)
        instance = phrase_instance(tx.CORRECTION, index, text, analysis)
        if instance is not None and _answers_which(ctx, i, analysis):
            instance = None
        if instance is None and not analysis.satisfied:
            instance = (
                _contrast_instance(ctx, i, text, analysis)
                or _piecemeal_instance(index, text, analysis)
                or _said_before_instance(ctx, i, text, analysis)
                or _denial_instance(ctx, i, text, analysis)
                or _restated_number_instance(ctx, i, text, analysis)
            )
        if instance is not None:
            found.append(instance)
    return found


# --- what the agent said of the user, denied: "I'm not a student." ------------------------------------
# A clause of a statement opening with a denial ("it isn't", "I'm not") whose first content word after it is
# one the agent's last answer said of the user or their things, in a sentence that speaks to them
# ("you", "your"), states (no "?"), supposes nothing ("if", "unless") nor sets a state as a condition
# ("you need to be resident"), and does not deny the word itself. "I'm not a student" after "As a
# student, you get 20% off" corrects the agent, "It isn't my first licence" after "To apply for your
# first licence, you'll need form D1" too; after "The fee is waived for students" (a rule, said of
# nobody) or "If you're a student…" it does not, nor does "It's not a problem" (a courtesy). Saying
# what one lacks opens the clause ("I don't have a porch", "there's no employer") and corrects only a
# sentence that asks or requires nothing: "I don't have the receipt" after "you'll need your
# receipt" answers a requirement.
DENIAL_CONFIDENCE = 0.65
DENIAL_OPENING_WORDS = 3  # the denial opens the clause after a subject of two words at most ("the fee isn't")
_DENIALS = by_first_word(word_sequences("misalignment", "denial", "denials"))
_LACKING = by_first_word(word_sequences("misalignment", "denial", "lacking"))
_DENIAL_SKIPPED = word_set("misalignment", "denial", "skipped")
_NOT_DENIED = word_set("misalignment", "denial", "courtesies")
_ADDRESSED = word_set("misalignment", "denial", "addressed")
_ASKING = word_set("misalignment", "denial", "asking")
_SUPPOSING = word_set("misalignment", "denial", "supposing")
_STATE_REQUIRED = word_sequences("misalignment", "denial", "state_required")
_QUESTION_WORDS = word_set("misalignment", "denial", "question_words")


def _denial_instance(
    ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis
) -> SignalInstance | None:
    tokens = analysis.scan.tokens
    said: tuple[frozenset[str], frozenset[str]] | None = None  # read lazily: most messages deny nothing
    for start, end in sentence_spans(tokens):
        if "?" in sentence_closing(text, tokens, end) or tokens[start].norm in _QUESTION_WORDS:
            continue
        for a, b in clause_spans(tokens, start, end):
            found = _denied_word(tokens, a, b)
            if found is None:
                continue
            denied, lacking = found
            if said is None:
                said = _said_of_the_user(previous_assistant_text(ctx, i))
            if _stem(tokens[denied].norm) in said[lacking]:
                metadata = {"pattern": "denial", "rejected": tokens[denied].norm}
                span = snippet(text, tokens[a].start, tokens[b - 1].end)
                return SignalInstance(tx.CORRECTION, ctx.absolute_index(i), DENIAL_CONFIDENCE, span, metadata)
    return None


def _denied_word(tokens: list[Token], a: int, b: int) -> tuple[int, bool] | None:
    """(index of the first content word after a denial opening the clause tokens[a:b], whether the
    denial says what the user lacks), else None."""
    words = [t.norm for t in tokens[a : min(b, a + DENIAL_OPENING_WORDS + 3)]]
    # a denial may follow a subject of two words; what one lacks is said from the clause's start
    for at, first in enumerate(words[:DENIAL_OPENING_WORDS]):
        candidates = [(d, False) for d in _DENIALS.get(first, ())]
        if at == 0:
            candidates += [(d, True) for d in _LACKING.get(first, ())]
        for denial, lacking in candidates:
            if tuple(words[at : at + len(denial)]) != denial:
                continue
            k = a + at + len(denial)
            while k < b and tokens[k].norm in _DENIAL_SKIPPED:
                k += 1
            if k == b or tokens[k].quoted:
                return None
            word = tokens[k].norm
            if word in STOP_WORDS or word in DEFAULT_NEGATORS or word in _NOT_DENIED or len(word) < 3:
                return None
            return k, lacking
    return None


def _said_of_the_user(answer: str) -> tuple[frozenset[str], frozenset[str]]:
    """Stems of the words of ``answer``'s statements addressed to the user, less those denied in them
    (within three words before): of those that suppose nothing and set no state as a condition, and
    of those that moreover ask or require nothing."""
    stated: set[str] = set()
    plain: set[str] = set()
    for norms in stated_sentences(answer):
        if (
            _ADDRESSED.isdisjoint(norms)
            or not _SUPPOSING.isdisjoint(norms)
            or holds_any(tuple(norms), _STATE_REQUIRED)
        ):
            continue
        words = {
            _stem(norm)
            for k, norm in enumerate(norms)
            if DEFAULT_NEGATORS.isdisjoint(norms[max(0, k - 3) : k])
        }
        stated |= words
        if _ASKING.isdisjoint(norms):
            plain |= words
    return frozenset(stated), frozenset(plain)


def _answers_which(ctx: DetectionContext, i: int, analysis: TextAnalysis) -> bool:
    """Every correction hit is an "I meant…" (the ``answers_which`` groups) and the agent's last answer
    asked which one the user meant: "Which Blue do you mean?" → "I meant the US album" answers it."""
    groups = phrase_library().groups
    return all(groups[m.group].answers_which for m in analysis.hits[tx.CORRECTION]) and (
        ASKED_WHICH in previous_assistant_cues(ctx, i)
    )


# --- what the user said, said again: "I said no meat." ------------------------------------------------
# A statement opening with a head ("i said", "but i said", "i asked about") whose content words the
# user's own earlier messages hold: the user points back at what they asked, against what the agent
# did. "I said the wrong name at the pharmacy" (said nowhere before), "I said thanks" (no content
# word) and a question ("I said no to the insurance, is that ok?") are reports, not corrections.
SAID_BEFORE_CONFIDENCE = 0.7
_SAID_HEADS = word_sequences("misalignment", "said_before", "heads")
_SAID_COURTESIES = word_set("misalignment", "said_before", "courtesies")  # "I said thanks" says nothing back


def _stem(word: str) -> str:
    """A plural's singular, roughly ("afternoons" is "afternoon"): enough to see a word said again."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _said_before_instance(
    ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis
) -> SignalInstance | None:
    tokens = analysis.scan.tokens
    earlier: frozenset[str] | None = None  # read lazily: most messages hold no head
    for start, end in sentence_spans(tokens):
        words = tuple(t.norm for t in tokens[start:end])
        head = next((h for h in _SAID_HEADS if words[: len(h)] == h), None)
        if (
            head is None
            or tokens[start].quoted
            or "?" in text[tokens[start].start : _sentence_end(text, tokens, end)]
        ):
            continue
        content = {
            _stem(w)
            for w in words[len(head) :]
            if w not in STOP_WORDS and w not in DEFAULT_NEGATORS and w not in _SAID_COURTESIES
        }
        if not content:
            continue
        if earlier is None:
            earlier = frozenset(map(_stem, _earlier_user_words(ctx, i)))
        echoed = content & earlier
        if echoed:
            metadata = {"pattern": "said_before", "rejected": " ".join(sorted(echoed)), "actually": False}
            span = snippet(text, tokens[start].start, tokens[end - 1].end)
            return SignalInstance(
                tx.CORRECTION, ctx.absolute_index(i), SAID_BEFORE_CONFIDENCE, span, metadata
            )
    return None


def _sentence_end(text: str, tokens: list[Token], end: int) -> int:
    """Where the sentence ending before token ``end`` stops, its closing punctuation included."""
    return tokens[end].start if end < len(tokens) else len(text)


def _earlier_user_words(ctx: DetectionContext, i: int) -> frozenset[str]:
    """Token norms of the user's messages before local index ``i`` (bounded by SEED_LOOKBACK and the
    compare length; other roles' texts are not read: an old one may be compacted)."""
    words: set[str] = set()
    for j in range(i - 1, max(i - SEED_LOOKBACK, 0) - 1, -1):
        message = ctx.messages[j]
        if message.role is Role.USER and message.content:
            words.update(t.norm for t in analysis_of(ctx, message.content[:COMPARE_CHARS]).scan.tokens)
    return frozenset(words)


# --- a number the agent got one slip wrong, said again: "0093." after "account 0039" ---------------------
# The user says again a number (or an identifier with digits) of their own earlier messages, and the
# agent's last answer holds, instead of it, one a single slip away: two digits swapped, one dropped or
# added ("1200" written "120", "0093" read "0039"), or, in four characters or more, one changed (4471
# for 4472), named alike in both ("account 0093" / "Account 0039": a word near each, not a stop word
# or a unit). The agent misread or mistyped it. Both have three characters or more: shorter ones (a
# date's day, a count) are as often other numbers ("3 sentences max" beside "June 30"); a figure named
# by no shared word is another figure ("a 2019 model" / "2018 and earlier models"). Not in a question,
# and not the user's own correction of a figure they had given wrongly ("sorry, 14 not 41": 14 was
# never said before).
RESTATED_NUMBER_CONFIDENCE = 0.7
RESTATED_NUMBER_MIN = 3
RESTATED_NUMBER_SUBSTITUTION_MIN = 4  # numbers differing in one digit are as often other numbers


def _restated_number_instance(
    ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis
) -> SignalInstance | None:
    tokens = analysis.scan.tokens
    said: dict[str, int] = {}  # number → its first token, in the message's first COMPARE_CHARS
    for k, token in enumerate(tokens):
        if token.start >= COMPARE_CHARS:
            break
        number = _number_of(token.norm)
        if number is not None:
            said.setdefault(number, k)
    if not said:
        return None  # the cheap first look: no number at all
    answer_text = previous_assistant_text(ctx, i)
    answer_words = _words_of(answer_text)
    answer = sorted({n for word in answer_words if (n := _number_of(word)) is not None})
    slips = [(k, n, s) for n, k in said.items() if n not in answer for s in answer if _one_slip(n, s)]
    if not slips:
        return None
    earlier: list[str] = []  # the words of the user's own messages, read only now: the rare case
    for j in range(i - 1, max(i - SEED_LOOKBACK, 0) - 1, -1):
        message = ctx.messages[j]
        if message.role is Role.USER and message.content:
            earlier += _words_of(message.content[:COMPARE_CHARS])
    user_numbers = {n for w in earlier if (n := _number_of(w)) is not None}
    for k, number, slipped in slips[:MAX_SLIPS_TRIED]:
        # the agent's number is the user's too ("order 4471 and order 4417"): another thing, no slip
        if slipped in user_numbers or _in_question(text, tokens, k):
            continue
        labels = _labels(earlier, number)
        if not labels or not labels & _labels(answer_words, slipped):
            continue
        metadata = {"pattern": "restated_number", "rejected": slipped}
        span = snippet(text, tokens[k].start, tokens[k].end)
        return SignalInstance(
            tx.CORRECTION, ctx.absolute_index(i), RESTATED_NUMBER_CONFIDENCE, span, metadata
        )
    return None


_ORDINAL = re.compile(r"(\d+)(?:st|nd|rd|th)")


NUMBER_LABEL_WORDS = 3  # words either side of a number that name what it is ("order", "account")
MAX_SLIPS_TRIED = 8  # a numeric paste after a numeric answer has many candidates; a few decide
LABEL_MIN_CHARS = 3  # shorter words ("1" of "$1,200", "s", "id"…) name nothing reliably
_UNITS = word_set("misalignment", "restated_number", "units")


def _labels(words: list[str], number: str) -> set[str]:
    """The words within NUMBER_LABEL_WORDS of each place ``number`` stands in ``words``, but stop words
    and units: what the number is named ("order 4417", "employee ID 60418", "555-123-2002"). A
    quantity's unit ("2500 euros", "120 guests") names no thing: budgets and capacities differ."""
    found: set[str] = set()
    for at, word in enumerate(words):
        if word == number or (not word.isalpha() and _number_of(word) == number):
            found.update(words[max(0, at - NUMBER_LABEL_WORDS) : at + NUMBER_LABEL_WORDS + 1])
    return {
        w
        for w in found
        if len(w) >= LABEL_MIN_CHARS and w not in STOP_WORDS and w not in _UNITS and _number_of(w) != number
    }


def _words_of(text: str) -> list[str]:
    """``text``'s token norms, in order."""
    return [token.norm for token in tokenise(text)]


def _number_of(norm: str) -> str | None:
    """The number a token stands for ("14th" is 14), or the token itself when it is an identifier with
    three digits or more ("px9920318gb"), else None."""
    if norm.isalpha():
        return None  # most words: no digit at all
    if norm.isdigit():
        return norm
    ordinal = _ORDINAL.fullmatch(norm)
    if ordinal:
        return ordinal.group(1)
    return norm if sum(map(str.isdigit, norm)) >= 3 else None


def _one_slip(said: str, written: str) -> bool:
    """``written`` is ``said`` with one slip (both RESTATED_NUMBER_MIN characters or more): two
    neighbours swapped, one character dropped or added, or (RESTATED_NUMBER_SUBSTITUTION_MIN characters
    or more) one changed."""
    if said == written or min(len(said), len(written)) < RESTATED_NUMBER_MIN:
        return False
    if OSA.distance(said, written, score_cutoff=1) > 1:
        return False
    if len(said) != len(written) or len(said) >= RESTATED_NUMBER_SUBSTITUTION_MIN:
        return True
    return sorted(said) == sorted(written)  # same length, short: only a swap


def _in_question(text: str, tokens: list[Token], k: int) -> bool:
    """Token ``k`` is in a sentence that closes with "?"."""
    for start, end in sentence_spans(tokens):
        if start <= k < end:
            return "?" in sentence_closing(text, tokens, end)
    return False


# --- a needlessly piecemeal approach: "you don't need to check them one by one, just…" ----------------
# A clause telling the agent it need not, or should stop, doing something, with a piecemeal marker in the
# same clause: "X by X" ("one by one", "store by store", "file by file"), "one at a time", "individually",
# "separately", "each one", "one after another". The user corrects the approach. Not a question ("you
# don't have to pay them one by one?", "…one at a time, right?"): that asks.
PIECEMEAL_CONFIDENCE = 0.7
_PIECEMEAL_HEADS = word_sequences("misalignment", "piecemeal", "heads")
_PIECEMEAL_MARKERS = word_sequences("misalignment", "piecemeal", "markers")
_PIECEMEAL_WORDS = frozenset(["by", *(marker[0] for marker in _PIECEMEAL_MARKERS)])
_STOP_VISITS = word_sequences("misalignment", "piecemeal", "stop_visits")  # "stop by the shop"
_CLAUSE_LEADS = word_set("misalignment", "piecemeal", "clause_leads")
QUESTION_TAG_WORDS = 2  # "…, right?", "…, don't I?": a clause followed only by this many words and "?"


def _piecemeal_instance(index: int, text: str, analysis: TextAnalysis) -> SignalInstance | None:
    """The first clause of the first MAX_SENTENCES sentences that opens with a _PIECEMEAL_HEADS head and
    holds a piecemeal marker after it (see above)."""
    tokens = analysis.scan.tokens
    if _PIECEMEAL_WORDS.isdisjoint(t.norm for t in tokens):
        return None  # the cheap first look: no marker word at all
    for start, end in sentence_spans(tokens):
        after = sentence_closing(text, tokens, end)
        question = "?" in after
        for a, b in clause_spans(tokens, start, end):
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
            if words[: len(head)] == head and not (head == ("stop",) and words[1:2] in _STOP_VISITS):
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
_CONTRAST_IDIOMS = word_set("misalignment", "contrast", "idioms")
# An agent message offering a choice ("I could send it by express for £5", "would you like…").
_CONTRAST_OFFERS = word_sequences("misalignment", "contrast", "offers")
# "not" in the languages users mix in ("É o de outubro, não setembro", "Pour 4, pas 2")
_NOT = word_set("misalignment", "contrast", "not_words")


def _contrast_instance(
    ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis
) -> SignalInstance | None:
    """A sentence "X…, not Y" (Y a short clause after a comma or dash, closing the sentence) is a
    correction when the user marks it ("actually") or Y is the conversation's: the agent said it (in a
    statement; after a question "the window, not the aisle" is a choice) or the user asked for it before
    ("that's everyone active today, not Q1"). Plain "for my son, not me" or "not bad" never count;
    nor does a choice between two of the agent's options (_chose), the user's own slip (_own_mistake),
    or a number the agent never gave (_numbers_corrected)."""
    tokens = analysis.scan.tokens
    context: frozenset[str] | None = None  # read lazily: most messages have no contrast at all
    for start, end in sentence_spans(tokens):
        after = sentence_closing(text, tokens, end)
        # "Not P45." as a sentence of its own, beside others; not "Not 10 January?", which asks
        alone = (start > 0 or end < len(tokens)) and "?" not in after
        rejected = _rejected_item(tokens, start, end, alone=alone)
        if not rejected:
            continue
        marked = any(t.norm == "actually" for t in tokens[start:end])
        if not marked and context is None:
            context = _conversation_words(ctx, i)
        if not (marked or _mentioned(rejected, context or frozenset())):
            continue
        said = previous_assistant_words(ctx, i)
        if _chose(text, tokens, start, end, rejected, said) or _own_mistake(tokens):
            continue
        # a number set against a number corrects the agent's number with one the user gave before
        # ("32 not 36" after asking for a 32), not the user's own figures ("my old car seated 7 not 5")
        if all(word.isdigit() for word in rejected) and not _numbers_corrected(
            ctx, i, tokens, start, end, said
        ):
            continue
        metadata = {"pattern": "contrast", "rejected": " ".join(sorted(rejected)), "actually": marked}
        span = snippet(text, tokens[start].start, tokens[end - 1].end)
        return SignalInstance(tx.CORRECTION, ctx.absolute_index(i), CONTRAST_CONFIDENCE, span, metadata)
    return None


CHOICE_MIN_LETTERS = 5  # kept words this long (or numbers) name an option, not a function word
# words that long that name no option ("not after the 25th")
_NOT_OPTIONS = word_set("misalignment", "contrast", "not_options")


def _chose(
    text: str, tokens: list[Token], start: int, end: int, rejected: frozenset[str], said: frozenset[str]
) -> bool:
    """The user keeps one of two things of a kind the agent's last message named and drops the other:
    a choice between its options ("Je préfère mercredi, pas mardi" after "mardi ou mercredi"; "We'll
    go for Belém. Not Alfama." after "Alfama is charming; Belém is quieter"), not a correction. Of a
    kind: both numbers, both names, or both other words ("approved on the 27th, not after the 25th"
    keeps the agent's "approved" but sets a date against a date the agent got wrong). The kept words
    are the sentence's; when it holds only the rejection ("Not Alfama."), those of the sentences
    before and after it."""
    if not rejected <= said:
        return False
    kinds = {_kind(text, t) for t in tokens[start:end] if t.norm in rejected and t.norm not in _NOT_OPTIONS}
    kept = _option_words(text, tokens, start, end, rejected)
    if not kept:
        spans = sentence_spans(tokens)
        at = spans.index((start, end))
        around = spans[max(at - 1, 0)][0], spans[min(at + 1, len(spans) - 1)][1]
        kept = _option_words(text, tokens, *around, rejected)
    return any(word in said and kind in kinds for word, kind in kept)


def _option_words(
    text: str, tokens: list[Token], start: int, end: int, rejected: frozenset[str]
) -> set[tuple[str, str]]:
    return {
        (t.norm, _kind(text, t))
        for t in tokens[start:end]
        if t.norm not in rejected
        and t.norm not in STOP_WORDS
        and t.norm not in _NOT_OPTIONS
        and (len(t.norm) >= CHOICE_MIN_LETTERS or any(c.isdigit() for c in t.norm))
    }


def _kind(text: str, token: Token) -> str:
    """A number (any digit: "2pm", "27th"), a name (capitalised inside its sentence), or a word."""
    if any(c.isdigit() for c in token.norm):
        return "number"
    return "name" if text[token.start].isupper() and not token.sentence_start else "word"


def _numbers_corrected(
    ctx: DetectionContext, i: int, tokens: list[Token], start: int, end: int, said: frozenset[str]
) -> bool:
    """The sentence rejects a number of the agent's last message and keeps only numbers the user
    gave before."""
    numbers = {t.norm for t in tokens[start:end] if t.norm.isdigit()}
    rejected = numbers & said
    kept = numbers - said
    return bool(rejected) and kept <= _earlier_user_words(ctx, i)


_OWN_MISTAKE = word_sequences("misalignment", "contrast", "own_mistake")


def _own_mistake(tokens: list[Token]) -> bool:
    """The user owns the slip ("sorry, I meant 14, not 41, my typo", "oops, make it 6:30 not 6"):
    fixing their own mistake is no correction of the agent's."""
    norms = tuple(t.norm for t in tokens)
    return holds_any(norms, _OWN_MISTAKE)


def _mentioned(words: frozenset[str], context: frozenset[str]) -> bool:
    """One of ``words`` is in ``context``, a plural's "s" aside ("not dog" after "your dog's plan")."""
    return any(w in context or w + "s" in context or w.removesuffix("s") in context for w in words)


def _rejected_item(tokens: list[Token], start: int, end: int, *, alone: bool = False) -> frozenset[str]:
    """Y's content words when tokens[start:end] is "X…, not Y" with X holding a content word (not only
    "actually") and Y 1–CONTRAST_MAX_WORDS tokens closing the sentence, or "(no,) not Y, X…" with Y a
    clause of 1–CONTRAST_MAX_WORDS tokens and more said after it; empty otherwise."""
    fronted = _fronted_rejection(tokens, start, end, alone=alone)
    if fronted:
        return fronted
    # After "no," the comma may go ("wait no, cream not white!!"): the user is already rejecting.
    rejecting = _opens_with_no(tokens, start, end)
    for k in range(start + 1, end):
        token = tokens[k]
        if token.norm not in _NOT or token.quoted or end - k - 1 > CONTRAST_MAX_WORDS:
            continue  # (the length check first keeps this linear: at most 3 candidates per sentence)
        if not token.clause_start and not (
            (rejecting and _set_against(tokens, k, end)) or _numbers_against(tokens, k, end)
        ):
            continue
        item = [t.norm for t in tokens[k + 1 : end]]
        before = [t.norm for t in tokens[start:k] if t.norm not in STOP_WORDS and t.norm != "actually"]
        words = {w for w in item if w not in STOP_WORDS and w not in DEFAULT_NEGATORS}
        if 0 < len(item) <= CONTRAST_MAX_WORDS and before and words and not words & _CONTRAST_IDIOMS:
            return frozenset(words)
    return frozenset()


_FRONTED_LEADS = frozenset({"no", "nope", "nah"})
# "oh no," is dismay, not a rejection: "oh" is not among them.
_INTERJECTIONS = frozenset({"wait", "um", "umm", "hmm", "ah", "sorry", "erm"})
_NOT_AFTER_VERB = frozenset({"still", "just", "really", "yet", "even", "also", "im", "mine", "its", "thats"})


def _set_against(tokens: list[Token], k: int, end: int) -> bool:
    """A comma-less "X not Y" sets two things against each other ("cream not white"): one word each
    side, neither a verb's form nor an adverb ("printer not working", "sadly not available", "I'm not
    available" negate a state, they name no right thing)."""
    if k + 2 != end:
        return False
    right, wrong = tokens[k - 1].norm, tokens[k + 1].norm
    return all(
        word not in STOP_WORDS
        and word not in _NOT_AFTER_VERB
        and not word.endswith(("ing", "ed", "ly", "able", "ible"))
        for word in (right, wrong)
    )


def _opens_with_no(tokens: list[Token], start: int, end: int) -> bool:
    """The sentence opens "no," (or "wait no,", "hmm nope."): a rejection word closed by a boundary."""
    k = start + 1 if tokens[start].norm in _INTERJECTIONS else start
    return k + 1 < end and tokens[k].norm in _FRONTED_LEADS and tokens[k + 1].clause_start


def _numbers_against(tokens: list[Token], k: int, end: int) -> bool:
    """A comma-less "32 not 36" closing its sentence: a number set against a number."""
    return k + 2 == end and all(tokens[j].norm.isdigit() for j in (k - 1, k + 1))


def _fronted_rejection(tokens: list[Token], start: int, end: int, *, alone: bool) -> frozenset[str]:
    """Y's content words when the sentence opens "(no,) not Y, X…": the rejected item first ("no, not
    pannierstraße, that's the old one"), closed by a clause boundary, the sentence going on after it;
    or, with ``alone`` (the message has other sentences and this one does not ask), when the sentence
    is "not Y." ("P60. Not P45. I haven't left.", "Go. The language. Not Python.")."""
    lead = start + 1 if tokens[start].norm in _INTERJECTIONS and start + 1 < end else start  # "wait no not…"
    led = tokens[lead].norm in _FRONTED_LEADS and lead + 1 < end
    k = lead + 1 if led else start
    # "no, not leeds, manchester" and "no not leeds, manchester" alike: after "no" the comma may go
    if tokens[k].norm not in _NOT or not (tokens[k].clause_start or led) or tokens[k].quoted:
        return frozenset()
    close = next(
        (j for j in range(k + 1, min(end, k + 2 + CONTRAST_MAX_WORDS)) if tokens[j].clause_start), None
    )
    if close is None and alone and not led and end - k - 1 <= CONTRAST_MAX_WORDS:
        close = end
    if close is None or close == k + 1:
        return frozenset()
    item = {t.norm for t in tokens[k + 1 : close]}
    words = item - STOP_WORDS - DEFAULT_NEGATORS
    return frozenset(words) if words and not item & _CONTRAST_IDIOMS else frozenset()


def _conversation_words(ctx: DetectionContext, i: int) -> frozenset[str]:
    """Words the contrast may reject: the previous assistant message's, when it states rather than asks,
    and those of the user's earlier messages (both bounded by SEED_LOOKBACK and the compare length)."""
    words = set(_earlier_user_words(ctx, i))
    for j in range(i - 1, max(i - SEED_LOOKBACK, 0) - 1, -1):
        message = ctx.messages[j]
        content = (message.content or "")[:COMPARE_CHARS]
        if message.role is Role.ASSISTANT and content:
            tokens = tokenise(content)
            norms = tuple(t.norm for t in tokens)
            # a question or an offer ("I could send it by express for £5") gives a choice, not a claim
            if not content.rstrip().endswith("?") and not holds_any(norms, _CONTRAST_OFFERS):
                # what the agent itself denied ("it's not urgent") is no claim to reject either
                words.update(
                    norm
                    for k, norm in enumerate(norms)
                    if not set(norms[max(0, k - 2) : k]) & DEFAULT_NEGATORS
                )
            break
    return frozenset(words)


def detect_clarification(ctx: DetectionContext) -> list[SignalInstance]:
    """The user asks for clarification or shows confusion: "what do you mean", "huh?", or asks what a
    term the assistant just used is ("what's TARGETARCH?", "what is intune?")."""
    found: list[SignalInstance] = []
    for i, text, follows in user_texts(ctx):
        analysis = analysis_of(ctx, text)
        instance = phrase_instance(
            tx.CLARIFICATION, ctx.absolute_index(i), text, analysis, opening=not follows
        )
        if instance is not None and follows:
            instance = _about_the_answer(ctx, i, text, analysis, instance)
        if instance is None and follows:  # a term question needs the agent's words to ask about
            instance = _term_question(ctx, i, text, analysis)
        if instance is not None:
            found.append(instance)
    return found


# --- "I don't follow football": confusion said of something the agent never spoke of -----------------
# A confusion verb ending its phrase ("I don't follow", "I don't understand") with an object whose words
# the agent's last answer does not hold says what the user does not know or do ("I don't follow
# football", "I don't understand the German on this form", "…why people love cruises"), not that the
# answer lost them. No object ("I don't understand it", "…at all", "…well"), an object with a word
# pointing at the answer ("your steps", "what you mean"), none but words read through ("this",
# "why"), a part of an answer ("the last step") or the answer's own words keeps the hit.
_OBJECT_VERBS = word_set("misalignment", "confusion_object", "verbs")
_POINTING_WORDS = word_set("misalignment", "confusion_object", "pointing")
_READ_THROUGH = word_set("misalignment", "confusion_object", "read_through")
_NO_OBJECT = word_set("misalignment", "confusion_object", "no_object")
_ANSWER_PARTS = word_set("misalignment", "confusion_object", "answer_parts")
OBJECT_MAX_WORDS = 4  # the object's words read: "the German on this form"


def _about_the_answer(
    ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis, instance: SignalInstance
) -> SignalInstance | None:
    """``instance`` (of the message's best clarification hit) when no hit names something else, else
    the instance of the best hit left, if any."""
    hits = analysis.hits[tx.CLARIFICATION]
    kept = [m for m in hits if not _names_something_else(ctx, i, m, analysis)]
    if len(kept) == len(hits):
        return instance
    if not kept:
        return None
    return instance_of(tx.CLARIFICATION, ctx.absolute_index(i), text, analysis, *best_of(kept, analysis))


def _names_something_else(ctx: DetectionContext, i: int, match: Match, analysis: TextAnalysis) -> bool:
    if match.phrase.rsplit(" ", 1)[-1] not in _OBJECT_VERBS:
        return False
    tokens = analysis.scan.tokens
    after = next((k for k, t in enumerate(tokens) if t.start >= match.end), len(tokens))
    words: list[str] = []
    for token in tokens[after : after + OBJECT_MAX_WORDS]:
        if token.clause_start:  # "I don't follow, which key?": no object
            break
        words.append(token.norm)
    if not words or words[0] in _NO_OBJECT or not _POINTING_WORDS.isdisjoint(words):
        return False  # "I don't understand it", "I don't follow you", "…what you mean"
    content = {w for w in words if w not in STOP_WORDS and w not in _READ_THROUGH and w not in _NO_OBJECT}
    if not content or content & _ANSWER_PARTS:
        return False
    return not {_stem(w) for w in content} & {_stem(w) for w in previous_assistant_words(ctx, i)}


TERM_QUESTION_CONFIDENCE = 0.7
TERM_QUESTION_MAX_WORDS = 2  # "what's intune?", "what is open jaw?": a term, not a new question
# "what's shared parental leave?": a longer term counts when the agent wrote those words in that order
# (three words merely found here and there in its answer make a new question)
TERM_RUN_MAX_WORDS = 3
# A bare "what" echoes the agent's words back ("what unpaid invoice?", "what fee?"): the user does not
# know what the agent is talking about. Not when the words ask for something new ("what else?", "what
# about the hotel?", "what happened?", "what time?" names no word of the agent's unless it used it).
_ECHO_NOT_TERMS = word_set("misalignment", "echo_question", "not_terms")
_TERM_QUESTION_HEADS = word_sequences("misalignment", "term_question", "heads")
# "what does R01 mean?", "what does ACH stand for?": the same question, the term inside
_MEANING_HEADS = word_sequences("misalignment", "term_question", "meaning_heads")
# the longest first: "mean" must not take the end of "what does X really mean"
_MEANING_TAILS = tuple(
    sorted(word_sequences("misalignment", "term_question", "meaning_tails"), key=len, reverse=True)
)
# "what means 'service name'?" (non-native word order), "what's shared parental leave exactly?"
_PLAIN_MEANING_HEADS = word_sequences("misalignment", "term_question", "plain_meaning_heads")
_TERM_HEDGES = word_order("misalignment", "term_question", "hedges")
# acknowledgements before the question in its sentence ("ok what does 'transit hop' mean?")
_TERM_OPENERS = word_set("misalignment", "term_question", "openers")
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
    for start, sentence_end in sentence_spans(tokens):
        token = tokens[start]
        if token.quoted:
            continue
        while start < sentence_end - 1 and tokens[start].norm in _TERM_OPENERS:
            start += 1
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
        # "what does X mean" asks without its question mark ("what does GRIEF-AFK even mean, I wasn't
        # afk"); "what X" needs one ("what invoice." is said, not asked)
        meant = False
        for meaning in _MEANING_HEADS:
            tail = next((t for t in _MEANING_TAILS if tuple(words[-len(t) :]) == t), None)
            if tail and tuple(words[: len(meaning)]) == meaning:
                head, term, meant = meaning, words[len(meaning) : -len(tail)], True
                break
        while len(term) > 1 and term[-1] in _TERM_HEDGES:
            term = term[:-1]
        if head == ("what",) and any(w in _ECHO_NOT_TERMS for w in term):
            continue
        closing = tokens[sentence_end].start if sentence_end < len(tokens) else len(text)
        after = text[tokens[sentence_end - 1].end : closing]
        first = start + (len(head) if head else 0)
        quoted = bool(term) and all(t.quoted for t in tokens[first : first + len(term)])
        limit = QUOTED_TERM_MAX_WORDS if quoted else TERM_RUN_MAX_WORDS
        if not (0 < len(term) <= limit and (meant or "?" in after)):
            continue
        previous = previous_assistant_words(ctx, i) if previous is None else previous
        content = [w for w in term if w not in STOP_WORDS]
        if not (content and all(w in previous for w in content) and (quoted or len(content) == len(term))):
            continue
        if quoted or len(term) <= TERM_QUESTION_MAX_WORDS or _written_in_order(ctx, i, term):
            pattern = "echo_question" if head == ("what",) else "term_question"
            metadata = {"pattern": pattern, "term": " ".join(term)}
            span = snippet(text, token.start, tokens[end - 1].end)
            return SignalInstance(
                tx.CLARIFICATION, ctx.absolute_index(i), TERM_QUESTION_CONFIDENCE, span, metadata
            )
    return None


def _written_in_order(ctx: DetectionContext, i: int, term: list[str]) -> bool:
    """The assistant message before local index ``i`` has ``term``'s words one after another."""
    said = " " + " ".join(t.norm for t in tokenise(previous_assistant_text(ctx, i))) + " "
    return f" {' '.join(term)} " in said


DETECTORS: tuple[DetectorSpec, ...] = (
    DetectorSpec((tx.CORRECTION,), detect_correction),
    DetectorSpec((tx.REPHRASE,), detect_rephrase),
    DetectorSpec((tx.CLARIFICATION,), detect_clarification),
)
