"""Text as the phrase matcher sees it: unified characters, tokens with their boundaries, quoting.

The rules (what a token is, what counts as a sentence or clause boundary, what is quoted) are in
the :mod:`otelsignals.signals.matching` docstring; this module is their one implementation, shared by
the matcher and by every detector that reads words (``tokenise``).
"""

from __future__ import annotations

import bisect
import codecs
import re
from collections.abc import Sequence
from typing import NamedTuple

FAR = 1 << 62  # past any text position: (position, FAR) sorts after every span starting there

# 1:1 character unification: offsets into the unified text are offsets into the original. Each
# character becomes an ASCII one, so no replacement makes another's input.
_UNIFY = {
    **dict.fromkeys("\u2018\u2019\u201a\u201b\u02bc\u00b4\u2032", "'"),
    **dict.fromkeys("\u201c\u201d\u201e\u201f\u00ab\u00bb\u2033", '"'),
    **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
    **dict.fromkeys("\u00a0\u2007\u2009\u200a\u202f", " "),
    "\u2026": ".",
    # full-width punctuation of Chinese and Japanese text: "谢谢！", "it works now？"
    "\u3002": ".",
    "\uff01": "!",
    "\uff1f": "?",
    "\uff0c": ",",
    "\u3001": ",",
    "\uff1b": ";",
    "\uff1a": ":",
    "\uff08": "(",
    "\uff09": ")",
}
_SENTENCE_PUNCT = frozenset(".!?;")
_CLAUSE_PUNCT = frozenset(',:()[]{}"`')
_EDGE_PUNCT = ".!?;,:()[]{}\"'`*_~<>/\\|#@&%$^+=-"  # stripped around a word on the fast path
# Emoji used as a one-word reply: each is its own token, written in phrases either way ("👍" or its norm).
EMOJI_WORDS = {
    "\U0001f44d": "thumbsup",
    "\U0001f44c": "okhand",
    "\U0001f64f": "foldedhands",  # 🙏 thanks
    "\U0001f64c": "raisedhands",  # 🙌 hooray
    "\U0001f643": "upsidedownface",  # 🙃 irony (phrases/disengagement.yaml, group irony)
    # Marks that close a report ("it says verified ✅", "it work 🎉 gracias"): a clause ends there.
    "\U0001f389": "partypopper",  # 🎉
    "\U0001f973": "partyface",  # 🥳
    "\u2705": "checkmark",  # ✅
    "\u2714": "checkmark",  # ✔ (✔️ with its variation selector)
}


class Token(NamedTuple):
    norm: str  # casefolded, apostrophes dropped
    start: int  # span in the original text
    end: int
    sentence_start: bool  # a sentence boundary (or the start of the text) precedes it
    clause_start: bool  # any boundary precedes it (implied by sentence_start)
    quoted: bool = False


_new_token = tuple.__new__


def unify(text: str) -> str:
    """Curly quotes, apostrophes and dashes made plain; same length as ``text``."""
    if text.isascii():  # nothing to unify
        return text
    # A C-level search per character (and a replace for those present): str.translate looks every
    # character of a non-ASCII text up in a dict, about 20 times slower.
    for fancy, plain in _UNIFY.items():
        if fancy in text:
            text = text.replace(fancy, plain)
    return text


def normalise(text: str) -> str:
    """Tokens joined by single spaces: casefolded, punctuation-free (for comparisons and keys)."""
    return " ".join(token.norm for token in tokenise(text))


def tokenise(text: str) -> list[Token]:
    """Tokens of ``text`` with their original spans, boundary flags and quoting."""
    unified = unify(text)
    return mark_quoted(tokens_of(unified), quoted_spans(unified))


def mark_quoted(tokens: list[Token], spans: list[tuple[int, int]]) -> list[Token]:
    """Tokens whose start lies in one of the sorted, disjoint ``spans`` marked quoted (one merge pass)."""
    if not spans:
        return tokens
    marked: list[Token] = []
    at = 0
    for token in tokens:
        while at < len(spans) and spans[at][1] <= token.start:
            at += 1
        inside = at < len(spans) and spans[at][0] <= token.start
        marked.append(token._replace(quoted=True) if inside else token)
    return marked


def inside(spans: list[tuple[int, int]], position: int) -> bool:
    """``position`` lies in one of the sorted, disjoint ``spans`` (a binary search)."""
    at = bisect.bisect_right(spans, (position, FAR)) - 1
    return at >= 0 and spans[at][0] <= position < spans[at][1]


def tokens_of(unified: str) -> list[Token]:
    tokens: list[Token] = []
    offset = 0
    for line in unified.split("\n"):  # a newline is a sentence boundary
        _line_tokens(line, offset, tokens)
        offset += len(line) + 1
    return tokens


def _line_tokens(line: str, offset: int, tokens: list[Token]) -> None:
    sentence = clause = True
    position = 0
    append = tokens.append
    spaced_line = line.isascii() or not _has_unspaced(line)  # one look per line, not per word
    for word in line.split():
        start = line.find(word, position)
        position = start + len(word)
        spaced = spaced_line or not _has_unspaced(word)
        if spaced and word.isalnum():
            # Built as the tuple it is: Token(...) would run namedtuple's Python-level __new__.
            append(
                _new_token(
                    Token, (word.casefold(), offset + start, offset + position, sentence, clause, False)
                )
            )
            sentence = clause = False
            continue
        if word in ("-", "--", "---"):
            clause = True
            continue
        core = word.strip(_EDGE_PUNCT)
        if spaced and core.isalnum():
            # the common case: punctuation only around one word ("(well," "done.")
            lead = word.index(core[0])
            if lead:
                sentence, clause = _flags(word[:lead], sentence, clause)
            begin = offset + start + lead
            append(_new_token(Token, (core.casefold(), begin, begin + len(core), sentence, clause, False)))
            sentence, clause = _flags(word[lead + len(core) :], False, False)
            continue
        sentence, clause = _scan_word(word, offset + start, tokens, sentence, clause, spaced)


def _flags(punctuation: str, sentence: bool, clause: bool) -> tuple[bool, bool]:
    for char in punctuation:
        if char in _SENTENCE_PUNCT:
            sentence = clause = True
        elif char in _CLAUSE_PUNCT:
            clause = True
    return sentence, clause


def _scan_word(
    word: str, offset: int, tokens: list[Token], sentence: bool, clause: bool, spaced: bool = True
) -> tuple[bool, bool]:
    """Split one whitespace-free word with punctuation into tokens; returns the pending flags."""
    chars: list[str] = []
    begin = -1
    last = len(word) - 1
    for i, char in enumerate(word):
        emoji = EMOJI_WORDS.get(char)
        if emoji is not None:
            if begin >= 0:
                tokens.append(Token("".join(chars).casefold(), offset + begin, offset + i, sentence, clause))
                chars, begin = [], -1
            # an emoji is a reply of its own: a clause boundary on both sides ("great👍 thanks")
            tokens.append(Token(emoji, offset + i, offset + i + 1, sentence, True))
            sentence, clause = False, True
            continue
        if char.isalnum():
            if not spaced and _unspaced(char):
                # Chinese and Japanese put no spaces between words: each character is a token, so
                # "谢谢" is found inside "谢谢你的帮助" as it is inside "thank you for the help"
                if begin >= 0:
                    tokens.append(
                        Token("".join(chars).casefold(), offset + begin, offset + i, sentence, clause)
                    )
                    chars, begin = [], -1
                    sentence = clause = False
                tokens.append(_new_token(Token, (char, offset + i, offset + i + 1, sentence, clause, False)))
                sentence = clause = False
                continue
            if begin < 0:
                begin = i
            chars.append(char)
            continue
        if char == "'" and begin >= 0 and i < last and word[i + 1].isalnum():
            continue  # in-word apostrophe: "don't" → dont
        if begin >= 0:
            tokens.append(Token("".join(chars).casefold(), offset + begin, offset + i, sentence, clause))
            sentence = clause = False
            chars, begin = [], -1
        if char in _SENTENCE_PUNCT:
            sentence = clause = True
        elif char in _CLAUSE_PUNCT:
            clause = True
    if begin >= 0:
        tokens.append(Token("".join(chars).casefold(), offset + begin, offset + len(word), sentence, clause))
        sentence = clause = False
    return sentence, clause


# Scripts written without spaces between words: kana (half-width too), CJK ideographs of every block,
# the iteration mark 々 and 〇.
_UNSPACED = re.compile(
    "[\u3005-\u3007\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]"
)


def _unspaced(char: str) -> bool:
    return _UNSPACED.match(char) is not None


def _has_unspaced(text: str) -> bool:
    return _UNSPACED.search(text) is not None


def _ascii_words_table() -> bytes:
    """ASCII text as tokens_of reads it, one byte each: a letter or digit stands for itself in lower
    case (casefold, for ASCII), an apostrophe is kept (dropped inside a word, a boundary elsewhere),
    a sentence boundary becomes a newline, anything else separates words."""
    table = bytearray(b" " * 256)
    for code in range(128):
        if chr(code).isalnum():
            table[code] = ord(chr(code).lower())
    table[ord("'")] = ord("'")
    for char in ["\n", *_SENTENCE_PUNCT]:
        table[ord(char)] = ord("\n")
    return bytes(table)


_ASCII_WORDS = _ascii_words_table()


def _separators(error: UnicodeError) -> tuple[str, int]:
    """Encoding error handler: a run of characters outside ASCII that only separate words (€, °, →)
    becomes one space; a letter, digit or emoji word among them stops the encoding (the error)."""
    if not isinstance(error, UnicodeEncodeError):
        raise TypeError(f"{error!r} is no encoding error")
    run = error.object[error.start : error.end]
    if any(char.isalnum() or char in EMOJI_WORDS for char in run):
        # A new error: raising ``error``, held by this frame, would make a reference cycle
        # (error → traceback → frame → error) that only the cyclic collector frees.
        raise UnicodeEncodeError(error.encoding, error.object, error.start, error.end, "a word character")
    return " ", error.end


codecs.register_error("otelsignals.word-separators", _separators)
# The handler is a Python call per run of characters outside ASCII: past this many such characters
# the text goes to tokens_of, which costs the same whatever they are.
SEPARATORS_OUTSIDE_ASCII = 32


def sentence_norms(unified: str) -> list[str] | None:
    """The token norms of ``unified`` sentence by sentence, each sentence's joined by single spaces:
    what tokens_of and its ``sentence_start`` flags give, in C-level passes over bytes instead of a
    Token per word, for callers that need only the words and their sentences. None when a letter,
    digit or emoji word outside ASCII is in the text, or more than SEPARATORS_OUTSIDE_ASCII other
    characters outside it: tokens_of reads those."""
    if not unified.isascii() and (
        len(unified) - len(unified.encode("ascii", "ignore")) > SEPARATORS_OUTSIDE_ASCII
    ):
        return None
    try:
        text = unified.encode("ascii", "otelsignals.word-separators").translate(_ASCII_WORDS)
    except UnicodeEncodeError:
        return None
    if b"'" in text:
        # Two apostrophes in a row separate words; a single one goes ("don't" is "dont"; at a word's
        # edge it stands beside a separator anyway). An odd run leaves one beside the spaces.
        text = text.replace(b"''", b"  ").replace(b"'", b"")
    return [b" ".join(words).decode("ascii") for words in map(bytes.split, text.split(b"\n")) if words]


# --- quoting ---------------------------------------------------------------------------------------


def quoted_spans(unified: str) -> list[tuple[int, int]]:
    """Sorted, merged character spans of ``unified`` that are quoted (see the module docstring)."""
    spans, code = _line_spans(unified)
    spans += code
    spans += _pair_spans(_positions(unified, '"'), code)
    spans += _pair_spans(_same_line(unified, _positions(unified, "`")), code)
    spans += _pair_spans(_single_quote_pairs(unified), code)
    return _merge(spans)


def _line_spans(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Quoted-reply lines ("> …", after "On … wrote:") and fenced code blocks."""
    quoted: list[tuple[int, int]] = []
    code: list[tuple[int, int]] = []
    fence_start = -1
    start = 0
    length = len(text)
    while start < length:
        end = text.find("\n", start)
        end = length if end < 0 else end
        line = text[start:end].strip()
        if line.startswith("```"):
            if fence_start < 0:
                fence_start = start
            else:
                code.append((fence_start, end))
                fence_start = -1
        elif fence_start < 0 and line.startswith(">"):
            quoted.append((start, end))
        elif fence_start < 0 and _is_reply_header(line):
            quoted.append((start, length))
            break
        start = end + 1
    if fence_start >= 0:
        code.append((fence_start, length))
    return quoted, code


def _is_reply_header(line: str) -> bool:
    if len(line) > 300:
        return False
    lowered = line.casefold()
    if lowered.startswith("on ") and lowered.endswith("wrote:"):
        return True
    return lowered.startswith("---") and "original message" in lowered


def _positions(text: str, char: str) -> list[int]:
    found: list[int] = []
    at = text.find(char)
    while at >= 0:
        found.append(at)
        at = text.find(char, at + 1)
    return found


def _same_line(text: str, positions: list[int]) -> list[int]:
    """Backtick positions paired only within a line (an unpaired one is dropped)."""
    paired: list[int] = []
    i = 0
    while i + 1 < len(positions):
        a, b = positions[i], positions[i + 1]
        if text.find("\n", a, b) < 0:
            paired += [a, b]
            i += 2
        else:
            i += 1
    return paired


def _single_quote_pairs(text: str) -> list[int]:
    """Opening/closing single quotes paired in order; apostrophes inside words are skipped."""
    paired: list[int] = []
    opened = -1
    last = len(text) - 1
    for at in _positions(text, "'"):
        before = text[at - 1] if at > 0 else " "
        after = text[at + 1] if at < last else " "
        if before.isalnum() and after.isalnum():
            continue
        if opened < 0:
            if not before.isalnum() and not after.isspace():
                opened = at
        elif not before.isspace() and not after.isalnum():
            paired += [opened, at]
            opened = -1
    return paired


def _pair_spans(positions: Sequence[int], code: list[tuple[int, int]]) -> list[tuple[int, int]]:
    outside = [p for p in positions if not inside(code, p)] if code else list(positions)
    return [(outside[i], outside[i + 1] + 1) for i in range(0, len(outside) - 1, 2)]


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged
