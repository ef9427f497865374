"""A text's tokens as GloVe 6B was trained on them (lowercased, PTB-style), for the static embedder.

The rules, in the order they are tried at each position of the lowercased text, ``n't`` first split
off a word ("don't" → "do", "n't"):

1. ``n't`` followed by a word boundary;
2. an apostrophe and ``s``, ``re``, ``ve``, ``ll``, ``d`` or ``m`` followed by a word boundary;
3. a run of letters and digits (``str.isalnum``);
4. any other character that is neither whitespace nor ``_``, as a token of its own.

A word character is a letter, a digit or ``_``, as for the ``re`` module's ``\\w``: these are the
matches of ``n't\\b|'(?:s|re|ve|ll|d|m)\\b|[^\\W_]+|[^\\w\\s]``, which the tests keep as the
reference. This module is the same scan written out, compiled (native.COMPILED_MODULES): the
regular expression took about 0.3 µs a token, and the trace metrics embed every turn's question
and answer (bench/RESULTS.md).

It walks the text's UTF-8 bytes, where an ASCII character is one byte read from a table, and keeps
the character position beside the byte position to cut tokens out of the text itself. A non-ASCII
character (each byte of its encoding 0x80 or more) is classified by ``str`` methods.
"""

from __future__ import annotations

from typing import Final

_OTHER: Final = 0  # rule 4: a token of its own
_WORD: Final = 1  # rule 3: letters and digits
_SKIPPED: Final = 2  # whitespace and "_": no token


def _ascii_kinds() -> bytes:
    kinds = bytearray(128)
    for code in range(128):
        char = chr(code)
        kinds[code] = _WORD if char.isalnum() else _SKIPPED if char == "_" or char.isspace() else _OTHER
    return bytes(kinds)


_ASCII_KINDS: Final = _ascii_kinds()
_APOSTROPHE: Final = ord("'")
_LETTER_N: Final = ord("n")
_LETTER_T: Final = ord("t")
_UNDERSCORE: Final = ord("_")
# What may follow an apostrophe (rule 2): its first letter → the letter after it (0: none).
_CONTRACTIONS: Final = {
    ord("s"): 0,
    ord("d"): 0,
    ord("m"): 0,
    ord("r"): ord("e"),
    ord("v"): ord("e"),
    ord("l"): ord("l"),
}


def tokenize(text: str) -> list[str]:
    """The tokens of ``text`` by the module's rules."""
    lowered = text.lower().replace("n't", " n't")
    data = lowered.encode("utf-8", "surrogatepass")
    size = len(data)
    tokens: list[str] = []
    at = 0  # byte position
    char_at = 0  # character position of the same character
    while at < size:
        code = data[at]
        ascii = code < 0x80
        kind = _ASCII_KINDS[code] if ascii else _kind_of(lowered[char_at])
        if kind == _WORD:
            if code == _LETTER_N and _is_nt(data, at):
                tokens.append("n't")
                at += 3
                char_at += 3
                continue
            start = char_at
            at, char_at = _word_end(data, lowered, at, char_at)
            tokens.append(lowered[start:char_at])
            continue
        # A contraction's characters are ASCII: as many bytes as characters.
        length = _contraction_length(data, at) if code == _APOSTROPHE else 1
        if kind == _OTHER:
            tokens.append(lowered[char_at : char_at + length])
        at += length if ascii else _utf8_length(code)
        char_at += length
    return tokens


def _kind_of(char: str) -> int:
    if char.isalnum():
        return _WORD
    return _SKIPPED if char.isspace() else _OTHER


def _utf8_length(lead: int) -> int:
    return 4 if lead >= 0xF0 else 3 if lead >= 0xE0 else 2


def _word_end(data: bytes, lowered: str, at: int, char_at: int) -> tuple[int, int]:
    """The byte and character positions just past the run of letters and digits starting here."""
    size = len(data)
    while at < size:
        code = data[at]
        if code < 0x80:
            if _ASCII_KINDS[code] != _WORD:
                break
            at += 1
        elif lowered[char_at].isalnum():
            at += _utf8_length(code)
        else:
            break
        char_at += 1
    return at, char_at


def _boundary_at(data: bytes, at: int) -> bool:
    """Whether a word character just before ``at`` ends a word there (``\\b``)."""
    if at >= len(data):
        return True
    code = data[at]
    if code >= 0x80:  # the character starting here, decoded (rare: an accented letter, a dash)
        return not data[at : at + _utf8_length(code)].decode("utf-8", "surrogatepass").isalnum()
    return code != _UNDERSCORE and _ASCII_KINDS[code] != _WORD


def _is_nt(data: bytes, at: int) -> bool:
    """Rule 1 at ``at`` (an "n")."""
    return (
        at + 2 < len(data)
        and data[at + 1] == _APOSTROPHE
        and data[at + 2] == _LETTER_T
        and _boundary_at(data, at + 3)
    )


def _contraction_length(data: bytes, at: int) -> int:
    """Characters of rule 2's token at ``at`` (an apostrophe); 1 when rule 4 takes the apostrophe alone."""
    if at + 1 >= len(data):
        return 1
    second = _CONTRACTIONS.get(data[at + 1], -1)
    if second < 0:
        return 1
    length = 2 if second == 0 else 3
    if length == 3 and (at + 2 >= len(data) or data[at + 2] != second):
        return 1
    return length if _boundary_at(data, at + length) else 1
