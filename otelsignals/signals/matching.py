"""Linear-time phrase matching over user text: normalisation, tokens, negation, quoting, typos.

Text is never fed to a backtracking regex. A message is tokenised in one pass (``str.split`` plus a
character scan of the words that carry punctuation), the token sequence is joined into one string
``" tok tok tok "`` and searched with one pyahocorasick automaton whose keys are the phrases written
the same way, so a phrase only ever matches whole tokens ("thanks" never matches inside
"thanksgiving") and the search is linear in the text length.

Normalisation (the same for phrases and text): curly apostrophes/quotes, primes, dashes and full-width
punctuation are unified
(a 1:1 character map, so offsets stay offsets into the original text), tokens are runs of letters and
digits, casefolded (a Chinese or Japanese character, written without spaces between words, is a token
of its own), with in-word apostrophes dropped ("Don't" → ``dont``, "that’s" → ``thats``);
everything else is a token boundary, except a few emoji that stand for a word (👍 → ``thumbsup``,
👌 → ``okhand``, 🙏 → ``foldedhands``, 🙌 → ``raisedhands``: a thumbs-up is a reply in chat; ✅ and
🎉 close a report: "it says verified ✅") and become a token of their own, with a clause boundary on
each side. Punctuation between tokens is kept as two
flags on the next token:
``sentence_start`` (``. ! ? ;`` newline, or the start of the text) and ``clause_start`` (any
of those or ``, : ( ) [ ] " …`` or a free-standing dash).

Typos: a text token of 5–30 letters that is not a phrase word is replaced by the phrase word (of 5+
letters) it is one *interior* edit away from — one substitution, insertion, deletion or adjacent
transposition that leaves the first and the last letter alone ("thnak" → thank, "escalte" →
escalate, "manger" → manager). Edits at a word's ends are not typos for this purpose: they are
inflections ("fixes"/"fixed", "human"/"humans", "worker"/"worked"). Real words listed as protected
are never corrected ("leasing" is not "leaving"). A word stretched for emphasis, a letter three or
more times in a row ("thank youuu", "pleeease"), is the phrase word with that run read as one letter
or two. Candidates come from a deletion index
(SymSpell-style, built once), so correcting a token costs O(len²) with len ≤ 30: constant per token.

Negation: a hit is ``negated`` when a negator token ("not", "no", "never", "dont", "without"…)
stands within the 3 tokens before it, without a sentence or clause boundary in between ("No problem,
thanks!" thanks; "no thanks" does not). Groups whose phrases carry their own negation ("that's not
what I asked") opt out (``negation=False``). Groups of outcomes (``unless_wanted``) read the matcher's
*wanting* words ("need", "want", "hope"…) as negators too: "I need my phone working again" states
a goal, not that it works.

Quoting: a hit is ``quoted`` when its first token lies inside a double-quote pair, a single-quote pair
(an apostrophe between two letters is never a quote), backticks or a fenced code block, on a line
starting with ``>``, or after an e-mail reply header ("On Mon, … wrote:", "-----Original Message").

Phrase syntax (in the phrase lists): words as a person writes them; a leading ``^`` requires the
phrase to start a clause, a trailing ``$`` requires it to end one ("^perfect$" fires on "Perfect,
thanks!" but not on "the perfect gift"). A phrase, an exclude too, lies within one sentence ("forget
it" is not in "I always forget. It happens"); a line break or an ellipsis ends none, and an emoji goes
with the sentence before it. A clause still starts at a phrase preceded only by up to two *lead-in*
words ("ok", "yeah", "ah": "ok great" is "^great$"), and still ends at one followed only by up to
three *trailer* words ("thanks", "thank you", "mate": "awesome thanks" is "^awesome$"); both lists
are data (the library's ``lead_ins`` and ``trailers``), empty by default. Per group, ``exclude``
phrases veto any overlapping hit of that group ("thanks to", "thank you note"),
``whole_message`` entries fire only when they are the whole message ("huh?", "ty"), and
``starts_with`` entries are literal message prefixes ("again:").

Wildcards (for a class of phrasings rather than a list of sentences): after at least one literal word, a
phrase word ``*`` stands for any one token and ``*ing`` (``*ed``…) for any token of 5+ characters
ending so ("you keep *ing" fires on "you keep suggesting", "i can * now" on "I can print now"). The
literal words before the first wildcard are the automaton key; the rest (the *tail*) is checked token
by token on each hit, so matching stays linear. Wildcard tokens are never typo-corrected into. A tail
word may also be a set of one-word alternatives, ``(said|wrote|sent)``: the phrase library writes a
slot of one-word alternatives after a phrase's first slot so, one entry instead of one per word.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import ahocorasick

from otelsignals.signals.tokens import EMOJI_WORDS, FAR, Token, mark_quoted, quoted_spans, tokens_of, unify

MIN_TYPO_LEN = 5  # words shorter than this are matched exactly
MAX_TYPO_LEN = 30  # longer tokens are not typo-corrected (keeps the per-token cost constant)
NEGATION_WINDOW = 3  # tokens looked at before a phrase
MIN_WILDCARD_SUFFIX_TOKEN = 5  # "*ing" needs a real word before the ending ("sing" is not a verb form)
MAX_WHOLE_MESSAGE_TOKENS = 8
MAX_LEAD_INS = 2  # "ok yeah great": lead-in words skipped before a "^" phrase
MAX_TRAILERS = 3  # "great thank you mate": trailer words skipped after a "$" phrase
STRETCHED_RUN = 3  # a letter this many times in a row stretches a word ("youuu"): read as two or one
MIN_STRETCHED_LEN = 4  # "sooo" is stretched; shorter tokens are left alone
MAX_STRETCHED_RUNS = 3  # runs read both ways in a token: at most 2 ** 3 candidates
_STRETCH = re.compile(r"(\w)\1\1", re.IGNORECASE)
SNIPPET_LIMIT = 200

# fmt: off
DEFAULT_NEGATORS = frozenset([
    "not", "no", "never", "dont", "doesnt", "didnt", "isnt", "wasnt", "arent", "werent", "cant", "cannot",
    "couldnt", "wont", "wouldnt", "shouldnt", "havent", "hasnt", "hadnt", "aint", "without", "nor",
    "neither", "hardly"
])
# fmt: on


@dataclass(frozen=True, slots=True)
class PhraseGroup:
    """One named list of phrases, as the phrase library defines it."""

    name: str
    phrases: tuple[str, ...]
    negation: bool = True  # True: a negated hit is reported as negated; False: never negated
    # a hit after a wanting word ("I need my phone working again") is reported as negated too: an
    # outcome wished for is not one reached (the matcher's ``wanting`` words; needs ``negation``)
    unless_wanted: bool = False
    confidence: float = 0.8
    exclude: tuple[str, ...] = ()
    whole_message: tuple[str, ...] = ()
    starts_with: tuple[str, ...] = ()


class Match(NamedTuple):
    group: str
    phrase: str  # as written in the phrase list
    start: int  # span in the original text
    end: int
    negated: bool = False
    quoted: bool = False
    fuzzy: bool = False  # a word matched through a one-edit typo
    whole_message: bool = False


@dataclass(slots=True)
class Scan:
    """Everything one pass over a text found, with the work it took."""

    text: str
    tokens: list[Token]
    matches: list[Match]
    quoted_spans: list[tuple[int, int]]
    candidates: int = 0  # automaton hits examined
    corrections: int = 0  # deletion-index look-ups made for typo correction

    def quoted_end(self, position: int) -> int | None:
        """End of the quoted span containing ``position``; None when it is not quoted."""
        at = bisect.bisect_right(self.quoted_spans, (position, FAR)) - 1
        if at >= 0 and self.quoted_spans[at][0] <= position < self.quoted_spans[at][1]:
            return self.quoted_spans[at][1]
        return None


# --- typos -----------------------------------------------------------------------------------------


def interior_one_edit(word: str, target: str) -> bool:
    """True when ``word`` is one substitution, insertion, deletion or adjacent transposition away
    from ``target`` and the edit leaves the first and last letters of both alone."""
    if word == target or not word or not target or word[0] != target[0] or word[-1] != target[-1]:
        return False
    if len(word) == len(target):
        diffs = [i for i in range(len(word)) if word[i] != target[i]]
        if len(diffs) == 1:
            return True
        return (
            len(diffs) == 2
            and diffs[1] == diffs[0] + 1
            and word[diffs[0]] == target[diffs[1]]
            and word[diffs[1]] == target[diffs[0]]
        )
    if abs(len(word) - len(target)) != 1:
        return False
    short, long = (word, target) if len(word) < len(target) else (target, word)
    i = 0
    while i < len(short) and short[i] == long[i]:
        i += 1
    return short[i:] == long[i + 1 :]


def _deletions(word: str) -> list[str]:
    return [word[:i] + word[i + 1 :] for i in range(len(word))]


class _Speller:
    """Maps a token to the phrase word it is a one-interior-edit typo of (deletion index)."""

    def __init__(self, vocabulary: Iterable[str], protected: Iterable[str]) -> None:
        self.words = frozenset(vocabulary)
        self.known = self.words | frozenset(protected)
        self.index: dict[str, set[str]] = {}
        for word in vocabulary:
            if len(word) >= MIN_TYPO_LEN and word.isalpha():
                for key in [word, *_deletions(word)]:
                    self.index.setdefault(key, set()).add(word)
        self.cache: dict[str, str | None] = {}

    def eligible(self, token: str) -> bool:
        return MIN_TYPO_LEN <= len(token) <= MAX_TYPO_LEN and token not in self.known and token.isalpha()

    def correct(self, token: str) -> str | None:
        if token in self.cache:
            return self.cache[token]
        found = _unstretched(token, self.words)
        if found is None:
            candidates: set[str] = set()
            for key in [token, *_deletions(token)]:
                candidates |= self.index.get(key, set())
            found = min((c for c in candidates if interior_one_edit(token, c)), default=None)
        if len(self.cache) > 50_000:
            self.cache.clear()
        self.cache[token] = found
        return found


def _unstretched(token: str, words: frozenset[str]) -> str | None:
    """The phrase word ``token`` stretches ("youuu" → you, "offfff" → off, "reeeallly" → really):
    each run of three or more of one letter, which no English word has, read as two letters or one
    (at most MAX_STRETCHED_RUNS runs, two first)."""
    if _STRETCH.search(token) is None:  # the common case, in C: no letter three times in a row
        return None
    runs = [(letter, len(list(group))) for letter, group in itertools.groupby(token)]
    stretched = [at for at, (_, length) in enumerate(runs) if length >= STRETCHED_RUN]
    if not stretched or len(stretched) > MAX_STRETCHED_RUNS:
        return None
    for keeps in itertools.product((2, 1), repeat=len(stretched)):
        kept = dict(zip(stretched, keeps, strict=True))
        word = "".join(letter * kept.get(at, length) for at, (letter, length) in enumerate(runs))
        if word in words:
            return word
    return None


# --- the matcher -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Entry:
    group: int
    phrase: str
    length: int  # tokens
    exclude: bool = False
    anchor_start: bool = False
    anchor_end: bool = False
    tail: tuple[TailPattern, ...] = ()  # words after the key: norms, "*", "*<suffix>", alternatives
    # (offset from the phrase's first token, norm) of the tail's first literal word: most hits of a
    # common key (" the ", " i can ") fail on it, so it is compared before the whole tail is
    probe: tuple[int, str] | None = None


@dataclass(slots=True)
class _Key:
    chars: int
    entries: list[_Entry] = field(default_factory=list)


def phrase_tokens(phrase: str) -> tuple[list[str], bool, bool]:
    """A phrase's token norms and its ``^``/``$`` anchors."""
    text = phrase.strip()
    anchor_start = text.startswith("^")
    anchor_end = text.endswith("$")
    text = text.removeprefix("^").removesuffix("$")
    return [t.norm for t in tokens_of(unify(text))], anchor_start, anchor_end


TailPattern = str | frozenset[str]  # a norm, "*" / "*<suffix>", or a set of one-word alternatives


def split_wildcards(phrase: str) -> tuple[str, tuple[TailPattern, ...]]:
    """``phrase`` cut at its first wildcard word or set of alternatives: (the literal head, the tail's
    patterns); anchors stay on the head (``^``) or are read from the whole phrase by the caller (``$``)."""
    words = phrase.strip().removesuffix("$").split()
    cut = next((i for i, word in enumerate(words) if word.startswith(("*", "("))), len(words))
    if cut == len(words):
        return phrase, ()
    if cut == 0:
        raise ValueError(f"phrase {phrase!r} starts with a wildcard")
    return " ".join(words[:cut]), tuple(_tail_pattern(word) for word in words[cut:])


def _tail_pattern(word: str) -> TailPattern:
    if word.startswith("*"):
        return word
    if word.startswith("(") and word.endswith(")"):
        return frozenset("".join(phrase_tokens(choice)[0]) for choice in word[1:-1].split("|"))
    return "".join(phrase_tokens(word)[0])


def _tail_fits(pattern: TailPattern, word: str) -> bool:
    if isinstance(pattern, frozenset):
        return word in pattern
    if pattern == "*":
        return True
    if pattern.startswith("*"):
        return len(word) >= MIN_WILDCARD_SUFFIX_TOKEN and word.endswith(pattern[1:])
    return word == pattern


class PhraseMatcher:
    """Finds every phrase of every group in a text in one linear pass; built once."""

    def __init__(
        self,
        groups: Iterable[PhraseGroup],
        negators: Iterable[str] = DEFAULT_NEGATORS,
        protected_words: Iterable[str] = (),
        lead_ins: Iterable[str] = (),
        trailers: Iterable[str] = (),
        wanting: Iterable[str] = (),
    ) -> None:
        self.groups: tuple[PhraseGroup, ...] = tuple(groups)
        self.negators = frozenset(word for negator in negators for word in phrase_tokens(negator)[0])
        self.wanting = frozenset(word for wish in wanting for word in phrase_tokens(wish)[0])
        self._negators_or_wanting = self.negators | self.wanting
        self.lead_ins = frozenset(word for lead in lead_ins for word in phrase_tokens(lead)[0])
        # trailers may be two words ("thank you"): kept as token tuples, longest tried first
        self.trailers = sorted(
            {tuple(phrase_tokens(trailer)[0]) for trailer in trailers} - {()}, key=len, reverse=True
        )
        self._automaton = ahocorasick.Automaton(ahocorasick.STORE_ANY, ahocorasick.KEY_STRING)
        self._whole: dict[str, list[tuple[int, str]]] = {}
        keys: dict[str, _Key] = {}
        vocabulary: set[str] = set()
        for index, group in enumerate(self.groups):
            for phrase, exclude in [(p, False) for p in group.phrases] + [(p, True) for p in group.exclude]:
                head, tail = split_wildcards(phrase)
                words, first, _ = phrase_tokens(head)
                if not words:
                    raise ValueError(f"phrase group {group.name!r}: phrase {phrase!r} has no words")
                vocabulary.update(words)
                for pattern in tail:
                    if isinstance(pattern, frozenset):
                        vocabulary.update(pattern)
                    elif not pattern.startswith("*"):
                        vocabulary.add(pattern)
                key = keys.setdefault(f" {' '.join(words)} ", _Key(len(" ".join(words)) + 2))
                last = phrase.strip().endswith("$")
                probe = next(
                    (
                        (len(words) + k, w)
                        for k, w in enumerate(tail)
                        if isinstance(w, str) and not w.startswith("*")
                    ),
                    None,
                )
                entry = _Entry(index, phrase, len(words) + len(tail), exclude, first, last, tail, probe)
                if entry not in key.entries:
                    key.entries.append(entry)
            for phrase in group.whole_message:
                words, _, _ = phrase_tokens(phrase)
                vocabulary.update(words)
                self._whole.setdefault(" ".join(words), []).append((index, phrase))
        for text, value in keys.items():
            self._automaton.add_word(text, value)
        self._automaton.make_automaton()
        self._speller = _Speller(vocabulary | self.negators, protected_words)

    def find(self, text: str) -> list[Match]:
        return self.scan(text).matches

    def scan(self, text: str) -> Scan:
        unified = unify(text)
        spans = quoted_spans(unified)
        return self._scan(text, unified, mark_quoted(tokens_of(unified), spans), spans)

    def rescan(self, scanned: Scan) -> Scan:
        """``self.scan(scanned.text)`` from another matcher's scan of it: every matcher tokenises and
        quotes a text alike, so the tokens and quoted spans are reused, not computed again."""
        return self._scan(scanned.text, unify(scanned.text), scanned.tokens, scanned.quoted_spans)

    def _scan(self, text: str, unified: str, tokens: list[Token], spans: list[tuple[int, int]]) -> Scan:
        scan = Scan(text, tokens, [], spans)
        words, fuzzy = self._correct(tokens, scan)
        scan.matches = self._phrase_hits(tokens, words, fuzzy, scan)
        scan.matches += self._whole_hits(tokens, words, fuzzy)
        scan.matches += self._prefix_hits(unified)
        scan.matches.sort(key=lambda m: (m.start, m.end, m.group))
        return scan

    def _correct(self, tokens: list[Token], scan: Scan) -> tuple[list[str], list[bool]]:
        words = [token.norm for token in tokens]
        fuzzy = [False] * len(words)
        known = self._speller.known
        stretched = _STRETCH.search(scan.text) is not None  # one look per text, in C
        for i, word in enumerate(words):
            if len(word) < MIN_TYPO_LEN:
                # too short for a typo, not for a stretched word ("sooo")
                if stretched and len(word) >= MIN_STRETCHED_LEN and word not in known and word.isalpha():
                    fixed = _unstretched(word, self._speller.words)
                    if fixed is not None:
                        words[i], fuzzy[i] = fixed, True
                continue
            if word in known or not self._speller.eligible(word):
                continue
            scan.corrections += 1
            fixed = self._speller.correct(word)
            if fixed is not None:
                words[i], fuzzy[i] = fixed, True
        return words, fuzzy

    def _phrase_hits(
        self, tokens: list[Token], words: list[str], fuzzy: list[bool], scan: Scan
    ) -> list[Match]:
        starts: dict[int, int] = {}
        position = 1
        for index, word in enumerate(words):
            starts[position] = index
            position += len(word) + 1
        hits: list[tuple[int, _Entry]] = []
        count = len(words)
        for end, key in self._automaton.iter(f" {' '.join(words)} "):
            scan.candidates += 1
            first = starts[end - key.chars + 2]
            for entry in key.entries:
                probe = entry.probe
                if probe is not None and (first + probe[0] >= count or words[first + probe[0]] != probe[1]):
                    continue  # (the cheap look first: _tail_matches would say no too)
                if (
                    self._tail_matches(words, first, entry)
                    and self._anchored(tokens, first, entry)
                    and not _crosses_a_sentence(scan.text, tokens, first, entry.length)
                ):
                    hits.append((first, entry))
        excluded = self._excluded(hits)
        any_fuzzy = any(fuzzy)
        matches: list[Match] = []
        for first, entry in hits:
            last = first + entry.length - 1
            if entry.exclude or (excluded and _overlaps(excluded, entry.group, first, last)):
                continue
            group = self.groups[entry.group]
            matches.append(
                Match(
                    group.name,
                    entry.phrase,
                    tokens[first].start,
                    tokens[last].end,
                    group.negation
                    and self._negated(
                        tokens, first, self._negators_or_wanting if group.unless_wanted else self.negators
                    ),
                    tokens[first].quoted,
                    any_fuzzy and any(fuzzy[first : last + 1]),
                )
            )
        return matches

    @staticmethod
    def _tail_matches(words: list[str], first: int, entry: _Entry) -> bool:
        end = first + entry.length
        if end > len(words):
            return False
        tail = words[end - len(entry.tail) : end]
        return all(_tail_fits(pattern, word) for pattern, word in zip(entry.tail, tail, strict=True))

    def _anchored(self, tokens: list[Token], first: int, entry: _Entry) -> bool:
        if entry.anchor_start and not self._starts_clause(tokens, first):
            return False
        return not entry.anchor_end or self._ends_clause(tokens, first + entry.length)

    def _starts_clause(self, tokens: list[Token], first: int) -> bool:
        """tokens[first] starts a clause, or only MAX_LEAD_INS lead-in words precede it in its clause."""
        at = first
        while not tokens[at].clause_start:
            if first - at >= MAX_LEAD_INS or tokens[at - 1].norm not in self.lead_ins:
                return False
            at -= 1
        return True

    def _ends_clause(self, tokens: list[Token], after: int) -> bool:
        """tokens[after] starts a clause (or the text ends), perhaps after MAX_TRAILERS trailer words."""
        skipped = 0
        while after < len(tokens) and not tokens[after].clause_start:
            size = next((len(t) for t in self.trailers if self._trailer_at(tokens, after, t)), 0)
            if not size or skipped + size > MAX_TRAILERS:
                return False
            after += size
            skipped += size
        return True

    @staticmethod
    def _trailer_at(tokens: list[Token], at: int, trailer: tuple[str, ...]) -> bool:
        words = tokens[at : at + len(trailer)]
        return (
            len(words) == len(trailer)
            and all(token.norm == word for token, word in zip(words, trailer, strict=True))
            and not any(token.clause_start for token in words[1:])
        )

    @staticmethod
    def _excluded(hits: list[tuple[int, _Entry]]) -> set[tuple[int, int]]:
        excluded: set[tuple[int, int]] = set()
        for first, entry in hits:
            if entry.exclude:
                excluded.update((entry.group, i) for i in range(first, first + entry.length))
        return excluded

    @staticmethod
    def _negated(tokens: list[Token], first: int, negators: frozenset[str]) -> bool:
        if tokens[first].clause_start:
            return False
        for before in range(first - 1, max(first - 1 - NEGATION_WINDOW, -1), -1):
            if tokens[before + 1].clause_start:
                return False
            if tokens[before].norm in negators:
                return True
        return False

    def _whole_hits(self, tokens: list[Token], words: list[str], fuzzy: list[bool]) -> list[Match]:
        if not tokens or len(tokens) > MAX_WHOLE_MESSAGE_TOKENS or not self._whole:
            return []
        found = self._whole.get(" ".join(words), [])
        return [
            Match(
                group=self.groups[index].name,
                phrase=phrase,
                start=tokens[0].start,
                end=tokens[-1].end,
                quoted=tokens[0].quoted,
                fuzzy=any(fuzzy),
                whole_message=True,
            )
            for index, phrase in found
        ]

    def _prefix_hits(self, unified: str) -> list[Match]:
        body = unified.lstrip()
        offset = len(unified) - len(body)
        head = body[:40].casefold()
        return [
            Match(group=group.name, phrase=prefix, start=offset, end=offset + len(prefix))
            for group in self.groups
            for prefix in group.starts_with
            if head.startswith(prefix.casefold())
        ]


def _overlaps(excluded: set[tuple[int, int]], group: int, first: int, last: int) -> bool:
    return any((group, i) in excluded for i in range(first, last + 1))


CLAUSE_TAIL_LIMIT = 60  # characters a phrase's snippet may run on after the match


def _crosses_a_sentence(text: str, tokens: list[Token], first: int, length: int) -> bool:
    """A phrase (or exclude) is read within one sentence: "forget it" is not in "I always forget. It
    happens", nor "i quit my" in "I quit. My patience is gone". Only a ".", "!" or "?" ends one here: a
    line break (wrapped text), an ellipsis ("Transferring… you") or a ";" does not, and an emoji goes
    with the sentence before it ("please!! 🙏" is still "please 🙏")."""
    for at in range(first + 1, first + length):
        token = tokens[at]
        if not token.sentence_start or token.norm in _EMOJI_NORMS:
            continue
        gap = text[tokens[at - 1].end : token.start]
        if any(mark in gap for mark in ".!?") and "…" not in gap and ".." not in gap:
            return True
    return False


_EMOJI_NORMS = frozenset(EMOJI_WORDS.values())


def clause_snippet(text: str, start: int, end: int) -> str:
    """The matched words ``[start, end)`` and the rest of their clause: "let me speak to" in "Let me
    speak to a human agent. Now." is "Let me speak to a human agent" (the reference's snippet is the
    matched words; a phrase that names no object would otherwise say little)."""
    right = end
    stop = min(len(text), end + CLAUSE_TAIL_LIMIT)
    while right < stop and text[right] not in ".,;:!?\n":
        right += 1
    if right == stop < len(text) and text[right].isalnum():  # cut inside a word: drop its start
        right = max(end, text.rfind(" ", end, right))
    return text[start:right].strip()


def snippet(text: str, start: int, end: int, limit: int = SNIPPET_LIMIT) -> str:
    """The sentence of ``text`` around ``[start, end)``, at most ``limit`` characters, stripped.

    Extends from the match to the nearest sentence punctuation or newline on each side, looking at
    no more than ``limit`` characters (constant work whatever the text length).
    """
    end = min(end, start + limit)
    budget = limit - (end - start)
    left = start
    floor = max(0, start - budget // 2)
    while left > floor and text[left - 1] not in ".!?\n":
        left -= 1
    budget -= start - left
    right = end
    while right < len(text) and budget > 0 and text[right] not in ".!?\n":
        right += 1
        budget -= 1
    while right < len(text) and budget > 0 and text[right] in ".!?":
        right += 1
        budget -= 1
    return text[left:right].strip()
