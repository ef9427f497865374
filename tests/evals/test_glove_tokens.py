"""The static embedder's tokenizer: a scan written out for speed, held to the regular expression that
states its rules (otelsignals/evals/glove_tokens.py)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelsignals.evals.glove_tokens import tokenize

# The rules as one regular expression: the reference the scan must match.
_REFERENCE = re.compile(r"n't\b|'(?:s|re|ve|ll|d|m)\b|[^\W_]+|[^\w\s]")


def reference_tokens(text: str) -> list[str]:
    return _REFERENCE.findall(text.lower().replace("n't", " n't"))


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        (
            "I don't think it's 'fine', Paris's",
            ["i", "do", "n't", "think", "it", "'s", "'", "fine", "'", ",", "paris", "'s"],
        ),
        (
            "We'll see; they've gone, you're late, I'd go, I'm here",
            [
                "we",
                "'ll",
                "see",
                ";",
                "they",
                "'ve",
                "gone",
                ",",
                "you",
                "'re",
                "late",
                ",",
                "i",
                "'d",
                "go",
                ",",
                "i",
                "'m",
                "here",
            ],
        ),
        ("DON'T SHOUT", ["do", "n't", "shout"]),
        ("snake_case and x_1", ["snake", "case", "and", "x", "1"]),
        ("3.14 + 2 = 5.14!", ["3", ".", "14", "+", "2", "=", "5", ".", "14", "!"]),
        ("Café naïve — fine…", ["café", "naïve", "—", "fine", "…"]),
        ("x²  Ⅻ ٣", ["x²", "ⅻ", "٣"]),  # digits and numerals of other scripts are word characters
        ("emoji 😀 here", ["emoji", "😀", "here"]),
        ("", []),
        ("  \t\n ", []),
        # Near misses: a contraction must end at a word boundary, else the apostrophe stands alone.
        ("it'sy", ["it", "'", "sy"]),
        ("can'tx", ["ca", "n", "'", "tx"]),  # "n't" is split off, but no boundary follows it
        ("the 'm_ark", ["the", "'", "m", "ark"]),  # "_" is a word character: no boundary after 'm
        ("'rea", ["'", "rea"]),
        ("'r e", ["'", "r", "e"]),  # a contraction's letters must follow each other
        ("'", ["'"]),
        ("o'neil", ["o", "'", "neil"]),
        ("it's_", ["it", "'", "s"]),
        ("it'sé", ["it", "'", "sé"]),  # a non-ASCII letter after it: no boundary either
        ("it's—so", ["it", "'s", "—", "so"]),  # a non-ASCII dash is a boundary
        ("rock’n’roll", ["rock", "’", "n", "’", "roll"]),  # a curly apostrophe is punctuation
    ],
)
def test_tokens(text: str, tokens: list[str]) -> None:
    assert tokenize(text) == tokens
    assert reference_tokens(text) == tokens


# Characters that meet the rules' edges: apostrophes and the contractions' letters, "_", digits,
# whitespace of several kinds, letters that change length when lowercased (İ), a lone surrogate.
_EDGES = st.sampled_from(list("abnstdmrevlNT'_ -.,\n\t1é—’😀\u00a0\u2028İßǅ\ud800٣²Ⅻ\x1c"))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.one_of(_EDGES, st.sampled_from(["n't", "N'T", "'s", "'re", "'ve", "'ll"])), max_size=16).map(
        "".join
    )
)
def test_the_scan_finds_what_the_rules_find_at_their_edges(text: str) -> None:
    assert tokenize(text) == reference_tokens(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_the_scan_finds_what_the_rules_find_in_any_text(text: str) -> None:
    assert tokenize(text) == reference_tokens(text)
