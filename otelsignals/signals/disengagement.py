"""interaction.disengagement (SPEC §3): the user asks for a person, gives up, or turns against the agent.

- ``escalation`` and ``quit``: phrase groups in ``phrases/disengagement.yaml`` ("let me talk to a
  human", "forget it").
- ``negative_stance``: one instance per kind of cue that matched in a message, as the reference
  counts them (``metadata.pattern_type``): ``complaint`` (a phrase of the complaint, exasperation,
  sarcasm… groups), ``all_caps`` (shouting: ALL CAPS, or a run of capitalised words that are not names
  or keywords), ``rhetorical_question`` ("are you even listening?"), ``excessive_punctuation`` (a run of
  "!"/"?" in a complaining sentence), ``annoyed_emoji`` (🙄, 😒, 😠, 😡, 🤬), ``echoed_figure`` (a wait
  or a price the agent gave, thrown back with what it is for: "24 hours for a refund on cold food.").
  "THIS IS RIDICULOUS!!!"
  is three instances; the snippet is the words each cue matched. Dropped when the message blames a
  third party or the world and nothing in it points at the agent (``cues`` in
  ``phrases/interaction.yaml``). The word lists of the shouting, punctuation, rhetorical-question and
  emoji cues are data, with their examples: ``rules`` in ``phrases/disengagement.yaml``.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from typing import Any

from otelsignals.model import SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext, DetectorSpec
from otelsignals.signals.matching import DEFAULT_NEGATORS, Scan, clause_snippet, snippet
from otelsignals.signals.phrase_analysis import (
    COMPLAINTS,
    TextAnalysis,
    analysis_of,
    best_match,
    detect_phrases,
    holds_any,
    previous_assistant_text,
    sentence_closing,
    sentence_spans,
    user_texts,
)
from otelsignals.signals.tokens import Token, inside, tokenise, unify
from otelsignals.signals.word_lists import canonical_forms, word_sequences, word_set

CAPS_RATIO = 0.7
CAPS_MIN_LETTERS = 12
CAPS_MIN_WORDS = 3
CAPS_CONFIDENCE = 0.6
CAPS_RUN_WORDS = 2  # partial shouting: this many consecutive ALL-CAPS words…
CAPS_RUN_LETTERS = 3  # …of at least this many letters each ("I", "IT", "PR", "CI" never count)
CAPS_RUN_CONFIDENCE = 0.55
# Capitalised words that are names, keys or keywords, not raised voices: they break a run ("CAPS LOCK",
# "LEFT JOIN", "ARG TARGETARCH", "AWS IAM"). Acronyms without a vowel (HTTP, VRR, SQL) never count anyway.
CAPS_NOT_SHOUTING = word_set("disengagement", "caps_run", "not_shouting")
PUNCTUATION_CONFIDENCE = 0.55
# "!!!" is anger only in a sentence that complains ("why is it STILL charging me!!!", "it doesn't work!!!");
# in any other sentence it is excitement ("it's for my son's 10th birthday!!!"). "???" and "?!?" always count.
BANG_ANGER_WORDS = DEFAULT_NEGATORS | word_set("disengagement", "excessive_punctuation", "anger_words")

_PUNCTUATION_RUNS = tuple(a + b + c for a in "!?" for b in "!?" for c in "!?")
# Emoji that roll their eyes or fume at the other side ("yes I can read the list 🙄"); not those of
# triumph or of a user laughing at themself (😤, 🤦, 😅).
ANNOYED_EMOJI = tuple(sorted(word_set("disengagement", "annoyed_emoji", "characters")))
# Words of a sentence that names or describes the emoji instead of throwing it ("what does 🙄 mean",
# "she replied 😒", "write a tweet about Mondays 🙄").
EMOJI_NAMED_BY = word_set("disengagement", "annoyed_emoji", "named_by")
EMOJI_CONFIDENCE = 0.6
# The agent's wait or price thrown back ("24 hours for a refund on cold food."): rule echoed_figure.
FIGURE_UNITS = canonical_forms("disengagement", "echoed_figure", "units")
FIGURE_UNIT_QUALIFIERS = word_set("disengagement", "echoed_figure", "unit_qualifiers")
FIGURE_CURRENCIES = word_set("disengagement", "echoed_figure", "currencies")
FIGURE_NUMBER_WORDS = canonical_forms("disengagement", "echoed_figure", "number_words")
FIGURE_WHAT_FOR = word_set("disengagement", "echoed_figure", "what_for")
FIGURE_ONLY = word_set("disengagement", "echoed_figure", "only")
FIGURE_OWN_VERBS = word_set("disengagement", "echoed_figure", "own_verbs")
FIGURE_ACCEPTED = word_sequences("disengagement", "echoed_figure", "accepted")
# what the figure buys named as the known item ("24 hours for the refund."): a restatement
FIGURE_KNOWN_ITEM = word_set("disengagement", "echoed_figure", "known_item")
# words after "for": indignation characterises what the figure buys ("for gems i already paid for"); a
# restatement only names it ("for a refund", "for express delivery")
FIGURE_MIN_COMPLEMENT = 4
FIGURE_CONFIDENCE = 0.55
_COMPACT_FIGURE = re.compile(r"(\d+)([a-z]+)")  # "24h", "10min"


# --- disengagement ---------------------------------------------------------------------------------


def detect_escalation(ctx: DetectionContext) -> list[SignalInstance]:
    """The user asks for a human, an agent, a manager or support."""
    return detect_phrases(ctx, tx.ESCALATION, after_assistant=False)


def detect_quit(ctx: DetectionContext) -> list[SignalInstance]:
    """The user gives up, leaves, cancels or goes elsewhere."""
    return detect_phrases(ctx, tx.QUIT, after_assistant=True)


@dataclass(frozen=True)
class _Cue:
    pattern: str  # complaint | all_caps | rhetorical_question | excessive_punctuation
    confidence: float
    start: int
    end: int
    metadata: dict[str, Any] = field(default_factory=dict)


def detect_negative_stance(ctx: DetectionContext) -> list[SignalInstance]:
    """Complaints and frustration phrases, ALL CAPS, or excessive "!!!" / "???" / "?!?"."""
    found: list[SignalInstance] = []
    for i, text, after_assistant in user_texts(ctx):
        analysis = analysis_of(ctx, text)
        caps = caps_cue(text, analysis) or caps_run_cue(text, analysis)
        candidates = [
            # the words of a complaint count once, whichever rule read them ("This is ridiculous." is a
            # phrase and a condemnation: one instance, as the reference counts it)
            _phrase_cue(analysis)
            or _condemnation_cue(text, analysis)
            or _censored_swearing_cue(text, analysis),
            caps,
            _punctuation_cue(text, analysis),
            _rhetorical_cue(text, analysis),
            _emoji_cue(text, analysis),
            _echoed_figure_cue(ctx, i, text, analysis) if after_assistant else None,
        ]
        cues = [cue for cue in candidates if cue is not None]
        if cues and not analysis.aimed_elsewhere:
            found.extend(_stance_instance(ctx.absolute_index(i), text, cue) for cue in cues)
    return found


def _stance_instance(index: int, text: str, cue: _Cue) -> SignalInstance:
    # The words the cue matched; a run of "!"/"?" alone says nothing, so it brings its sentence.
    if cue.pattern == "excessive_punctuation":
        words = snippet(text, cue.start, cue.end)
    elif cue.pattern == "complaint":
        words = clause_snippet(text, cue.start, cue.end)
    else:
        words = text[cue.start : cue.end].strip()
    metadata = {"pattern": cue.pattern, "pattern_type": cue.pattern, **cue.metadata}
    return SignalInstance(tx.NEGATIVE_STANCE, index, cue.confidence, words, metadata)


def _phrase_cue(analysis: TextAnalysis) -> _Cue | None:
    best = best_match(tx.NEGATIVE_STANCE, analysis)
    if best is None:
        return None
    confidence, match = best
    metadata = {"group": match.group, "phrase": match.phrase, "fuzzy": match.fuzzy}
    return _Cue("complaint", confidence, match.start, match.end, metadata)


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


def caps_cue(text: str, analysis: TextAnalysis) -> _Cue | None:
    """Shouting: ≥ 70 % upper-case letters over ≥ 12 letters and ≥ 3 words (quotes and code aside);
    not when the message is satisfied ("THANK YOU SO MUCH")."""
    if analysis.satisfied or _clearly_not_shouting(text):
        return None
    pasted = _introduced_blocks(text)
    tokens = [
        t
        for t in analysis.scan.tokens
        if not t.quoted and not t.norm.isdigit() and not inside(pasted, t.start)
    ]
    if len(tokens) < CAPS_MIN_WORDS:
        return None
    letters = "".join(text[t.start : t.end] for t in tokens)
    upper = sum(map(str.isupper, letters))
    cased = upper + sum(map(str.islower, letters))
    if cased < CAPS_MIN_LETTERS or upper < CAPS_RATIO * cased:
        return None
    metadata = {"upper_ratio": round(upper / cased, 3), "letters": cased}
    return _Cue("all_caps", CAPS_CONFIDENCE, tokens[0].start, tokens[-1].end, metadata)


def caps_run_cue(text: str, analysis: TextAnalysis) -> _Cue | None:
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
    pasted = _introduced_blocks(text)
    for token in analysis.scan.tokens:
        if not _shouted_word(text, token) or inside(pasted, token.start):
            run = []
        elif run and text[run[-1].end : token.start].isspace():
            run.append(token)
        else:
            run = [token]
        if len(run) >= CAPS_RUN_WORDS:
            metadata = {"words": len(run)}
            return _Cue("all_caps", CAPS_RUN_CONFIDENCE, run[0].start, run[-1].end, metadata)
    return None


def _introduced_blocks(text: str) -> list[tuple[int, int]]:
    """Spans of text the user pastes after announcing it with a colon and a blank line ("your
    checker says:", "so you can see what I mean:"), each up to the next blank line and of two lines
    or more: a report's or a manuscript's headings are in capitals without anyone raising their voice.
    A single line there ("I told you:\n\nTHE ORDER WAS FOR TWO CHAIRS") is the user's own voice."""
    blocks: list[tuple[int, int]] = []
    for intro in _PASTE_INTRO.finditer(text):
        start = intro.end()
        if blocks and start < blocks[-1][1]:
            continue
        blank = _BLANK_LINE.search(text, start)
        end = len(text) if blank is None else blank.start()
        if text.count("\n", start, end) >= 1:
            blocks.append((start, end))
    return blocks


# A colon closing a line, then a blank line ("says:\r\n\r\n", "says: \n \n"); a blank line.
_PASTE_INTRO = re.compile(r":[ \t]*\r?\n[ \t]*\r?\n\s*")
_BLANK_LINE = re.compile(r"\r?\n[ \t]*\r?\n")


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
_RHETORICAL_HEADS = word_sequences("disengagement", "rhetorical_question", "heads")


def _rhetorical_cue(text: str, analysis: TextAnalysis) -> _Cue | None:
    """A sentence opening with a _RHETORICAL_HEADS question and closed by "." or "!" (sarcasm)."""
    tokens = analysis.scan.tokens
    for start, end in sentence_spans(tokens):
        words = tuple(t.norm for t in tokens[start : start + 4])
        if tokens[start].quoted or not any(words[: len(head)] == head for head in _RHETORICAL_HEADS):
            continue
        after = sentence_closing(text, tokens, end)
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


def _emoji_cue(text: str, analysis: TextAnalysis) -> _Cue | None:
    """The first unquoted ANNOYED_EMOJI of a message that is not satisfied, thrown rather than named
    (no EMOJI_NAMED_BY word in its sentence)."""
    if analysis.satisfied:
        return None
    found = [at for at in (_unquoted_find(text, emoji, analysis.scan) for emoji in ANNOYED_EMOJI) if at >= 0]
    for at in sorted(found):
        if not any(token.norm in EMOJI_NAMED_BY for token in _sentence_around(analysis.scan.tokens, at)):
            return _Cue("annoyed_emoji", EMOJI_CONFIDENCE, at, at + 1, {"emoji": text[at : at + 1]})
    return None


# --- a judgement passed on the service or what it did ("These deductions are baseless and frankly
# insulting.", "Das ist doch absurd.", "I find this wholly unacceptable"): a condemning word said of
# "this", "that", "it", "these…", "your…" (or what the user finds it), a few intensifiers between.
# Not when the clause is negated ("this is not unfair": the walk back stops at the negator), asks
# ("isn't it unfair to ask?"), reports someone else's words or sets a writing task ("my son says your
# app is useless", "write a tweet saying this is unacceptable"), the subject is not the service or
# the situation ("late payment is unacceptable", "their app was a shambles"), or the word goes on
# about something else ("theft cover", "absurd how fast it learns"); rule condemnation in
# phrases/disengagement.yaml.
CONDEMNATION_CONFIDENCE = 0.65
_CONDEMNING = word_sequences("disengagement", "condemnation", "words")
_CONDEMNING_FIRST = frozenset(words[0] for words in _CONDEMNING)
_COPULAS = word_set("disengagement", "condemnation", "copulas")
_POINTER_COPULAS = word_set("disengagement", "condemnation", "pointer_copulas")  # "that's", "c'est"
_POINTERS = word_set("disengagement", "condemnation", "pointers")
_INTENSIFIERS = word_set("disengagement", "condemnation", "intensifiers")
_JUDGING = word_sequences("disengagement", "condemnation", "judging")
_REPORTED = word_set("disengagement", "condemnation", "reported")
_ARTICLES = word_set("disengagement", "condemnation", "articles")
_TRAILING = word_set("disengagement", "condemnation", "trailing")
_FOLLOWERS = word_set("disengagement", "condemnation", "followers")
CONDEMNED_SUBJECT_WORDS = 3  # "these (three) deductions are": the pointer at most this far before the verb
CONDEMNED_OBJECT_WORDS = 6  # "I find (the lack of any communication) wholly unacceptable"


def _condemnation_cue(text: str, analysis: TextAnalysis) -> _Cue | None:
    if analysis.satisfied:
        return None
    tokens = analysis.scan.tokens
    for start, end in sentence_spans(tokens):
        after = sentence_closing(text, tokens, end)
        if "?" in after:
            continue
        for k in range(start, end):
            if tokens[k].norm not in _CONDEMNING_FIRST or tokens[k].quoted:
                continue
            words = _condemning_at(tokens, k, end)
            if (
                words
                and _judged(tokens, start, k)
                and _closes_clause(tokens, words, k + len(words), end)
                and not any(t.norm in _REPORTED for t in tokens[start:k])
            ):
                return _Cue(
                    "condemnation",
                    CONDEMNATION_CONFIDENCE,
                    tokens[start].start,
                    tokens[k + len(words) - 1].end,
                    {"words": " ".join(words)},
                )
    return None


def _condemning_at(tokens: list[Token], k: int, end: int) -> tuple[str, ...] | None:
    """The longest _CONDEMNING sequence starting at token ``k`` within the sentence, or None."""
    norms = tuple(t.norm for t in tokens[k:end])
    found = [words for words in _CONDEMNING if norms[: len(words)] == words]
    return max(found, key=len) if found else None


def _closes_clause(tokens: list[Token], words: tuple[str, ...], after: int, end: int) -> bool:
    """A judgement closes its clause, a few words of tone aside ("your service is a shambles now"):
    "it's a farce my son wrote" names a farce. An adjective may also go on with a word of _FOLLOWERS
    ("ridiculous that I have to wait", "unacceptable for a 4 star hotel"); "theft cover", "rubbish
    collection", "absurd how fast it learns" are about something else."""
    while after < end and tokens[after].norm in _TRAILING and not tokens[after].clause_start:
        after += 1
    if after == end or tokens[after].clause_start:
        return True
    return words[0] not in _ARTICLES and tokens[after].norm in _FOLLOWERS


def _judged(tokens: list[Token], start: int, k: int) -> bool:
    """The condemning word at ``k`` is said of the service or the situation: intensifiers aside, a
    fused pointer and verb just before it ("that's", "c'est"), or a verb with a pointer at most
    CONDEMNED_SUBJECT_WORDS before it ("these deductions are"), or the user's "I find" within
    CONDEMNED_OBJECT_WORDS ("I find the delay wholly unacceptable"), in the same clause."""
    j = k - 1
    while j >= start and tokens[j].norm in _INTENSIFIERS and not tokens[j + 1].clause_start:
        j -= 1
    if j < start or tokens[j + 1].clause_start:
        return False
    if tokens[j].norm in _POINTER_COPULAS:
        return True
    if tokens[j].norm in _COPULAS:
        for m in range(j - 1, max(start, j - 1 - CONDEMNED_SUBJECT_WORDS) - 1, -1):
            if tokens[m].norm in _POINTERS:
                return True
            if tokens[m + 1].clause_start:
                break
    clause_start = next((m for m in range(j, start - 1, -1) if tokens[m].clause_start), start)
    before = tuple(t.norm for t in tokens[max(clause_start, j - CONDEMNED_OBJECT_WORDS) : j + 1])
    return any(before[m : m + len(judging)] == judging for judging in _JUDGING for m in range(len(before)))


# --- censored swearing ("this is a f***ing 4 star hotel", "what the sh*t"): the common swear words
# with letters starred out, as their skeletons (_CENSORED). Not initials ("J**"), Python's power
# ("x**y"), markdown emphasis ("**Status Bar**"), arithmetic ("5*3"), a wildcard ("*.txt") or a
# masked password ("p*****").
CENSORED_CONFIDENCE = 0.6
_CENSORED = re.compile(
    r"(?<![\w*])(?:"
    r"f(?:\*{2,4}(?:c?k)?|\*ck|\*\*k|u\*k|u\*\*)(?:ing|in|ed|er|s)?"  # f**k, f***, f*cking, fu*k
    r"|sh(?:\*t|\*\*t?|i\*)(?:ty|s)?"  # sh*t, sh**, shi*
    r"|(?:bull|hor)s\*{1,2}t"  # bulls**t
    r"|a\*{2}(?:hole)?|a\*shole|b\*tch|b\*{2}ch|cr\*p|d\*mn|b\*llocks|b\*{4}cks|p\*ss(?:ed)?|wt\*"
    r")(?![\w*])",
    re.IGNORECASE,
)


def _censored_swearing_cue(text: str, analysis: TextAnalysis) -> _Cue | None:
    if "*" not in text:
        return None
    for found in _CENSORED.finditer(text):
        line_start = text.rfind("\n", 0, found.start()) + 1
        emphasis = "**" in text[line_start : found.start()]  # the closing stars of "**bold**"
        if not emphasis and analysis.scan.quoted_end(found.start()) is None:
            return _Cue("censored_swearing", CENSORED_CONFIDENCE, found.start(), found.end(), {})
    return None


@dataclass(frozen=True)
class _Figure:
    numbers: frozenset[str]  # digits ("5", "10" of "5-10 days"; "1" of "an hour")
    kind: str  # a unit's kind ("hour") or "currency"
    end: int  # the token after it


def _echoed_figure_cue(ctx: DetectionContext, i: int, text: str, analysis: TextAnalysis) -> _Cue | None:
    """A message opening with a wait or a price the agent's last message gave, then, stated, what it
    is for, not named as the known item: "24 hours for a refund on cold food.", "10 days. for a 14
    day ban." ("24 hours for the refund." restates it; rule echoed_figure)."""
    tokens = analysis.scan.tokens
    plain = text if text.isascii() else unify(text)
    figure = _figure_at(plain, tokens, 0) if tokens and not tokens[0].quoted else None
    if figure is None:
        return None
    at = figure.end + (figure.end < len(tokens) and tokens[figure.end].norm in FIGURE_ONLY)
    if at >= len(tokens) or tokens[at].norm not in FIGURE_WHAT_FOR or "?" in plain[: tokens[at].start]:
        return None
    end = next((k for k in range(at + 1, len(tokens)) if tokens[k].sentence_start), len(tokens))
    complement = tokens[at + 1 : end]
    closer = plain[tokens[end - 1].end : tokens[end].start if end < len(tokens) else len(plain)]
    if (
        len(complement) < FIGURE_MIN_COMPLEMENT
        or complement[0].norm in FIGURE_KNOWN_ITEM
        or "?" in closer
        or any(token.clause_start or token.quoted for token in complement)
        or any(token.norm in FIGURE_OWN_VERBS for token in tokens[:end])
        or analysis.satisfied
        or holds_any(tuple(token.norm for token in tokens if not token.quoted), FIGURE_ACCEPTED)
        or not _agent_gave(figure, previous_assistant_text(ctx, i))
    ):
        return None
    metadata = {"head": f"{figure.kind} {tokens[at].norm}"}
    return _Cue("echoed_figure", FIGURE_CONFIDENCE, tokens[0].start, tokens[end - 1].end, metadata)


def _figure_at(plain: str, tokens: list[Token], k: int) -> _Figure | None:
    """The wait ("24 hours", "5-10 business days", "an hour", "24h") or price ("£150", "$11.50", "40
    euros") starting at ``tokens[k]`` (``plain``: the text with its dashes unified), or None."""
    first = tokens[k].norm
    compact = _COMPACT_FIGURE.fullmatch(first)
    if compact and compact.group(2) in FIGURE_UNITS:
        return _Figure(frozenset({compact.group(1)}), FIGURE_UNITS[compact.group(2)], k + 1)
    number = first if first.isdigit() else FIGURE_NUMBER_WORDS.get(first)
    if number is None:
        return None
    before = plain[tokens[k - 1].end if k else 0 : tokens[k].start].strip()
    numbers, j = {number}, k + 1
    # more of the figure: "11.50", "5-10"
    while (
        j < len(tokens) and tokens[j].norm.isdigit() and plain[tokens[j - 1].end : tokens[j].start] in ".,-"
    ):
        numbers.add(tokens[j].norm)
        j += 1
    if j + 1 < len(tokens) and tokens[j].norm == "to" and tokens[j + 1].norm.isdigit():  # "3 to 5 days"
        numbers.add(tokens[j + 1].norm)
        j += 2
    if before[-1:] in ("£", "$", "€"):
        return _Figure(frozenset(numbers), "currency", j)
    while j < len(tokens) and tokens[j].norm in FIGURE_UNIT_QUALIFIERS:
        j += 1
    if j < len(tokens) and tokens[j].norm in FIGURE_CURRENCIES:
        return _Figure(frozenset(numbers), "currency", j + 1)
    if j < len(tokens) and tokens[j].norm in FIGURE_UNITS:
        return _Figure(frozenset(numbers), FIGURE_UNITS[tokens[j].norm], j + 1)
    return None


def _agent_gave(figure: _Figure, agent_text: str) -> bool:
    """The agent's text gives a figure of the same kind holding every number of ``figure`` ("within
    5-10 business days" for "5-10 days"; "Order 10 ships in 3 days" gives no "10 days")."""
    plain = agent_text if agent_text.isascii() else unify(agent_text)
    tokens = tokenise(plain)
    for k in range(len(tokens)):
        given = _figure_at(plain, tokens, k)
        if given is not None and given.kind == figure.kind and figure.numbers <= given.numbers:
            return True
    return False


def _sentence_around(tokens: list[Token], at: int) -> list[Token]:
    """The tokens of the sentence that character ``at`` (not a token itself) stands in: from the last
    sentence start before it to the next one after it."""
    after = next((k for k, token in enumerate(tokens) if token.start > at), len(tokens))
    start = next((k for k in range(after - 1, -1, -1) if tokens[k].sentence_start), 0)
    end = next((k for k in range(after, len(tokens)) if tokens[k].sentence_start), len(tokens))
    return tokens[start:end]


def _punctuation_cue(text: str, analysis: TextAnalysis) -> _Cue | None:
    """The first unquoted run of 3+ "!"/"?" ("!!!", "???", "?!?"); an all-"!" run in a satisfied
    message, or outside a complaining sentence in a message without complaint, is enthusiasm."""
    first = -1
    for run in _PUNCTUATION_RUNS:
        if run == "!!!" and analysis.satisfied:
            continue
        at = _unquoted_find(text, run, analysis.scan)
        if run == "!!!" and not any(analysis.hits.get(signal) for signal in COMPLAINTS):
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
    complaining = any(analysis.hits.get(signal) for signal in COMPLAINTS)
    for start, end in sentence_spans(tokens):
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


DETECTORS: tuple[DetectorSpec, ...] = (
    DetectorSpec((tx.ESCALATION,), detect_escalation),
    DetectorSpec((tx.QUIT,), detect_quit),
    DetectorSpec((tx.NEGATIVE_STANCE,), detect_negative_stance),
)
