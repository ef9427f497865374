"""The data files of the detectors (``phrases/<name>.yaml``) and the word lists of their rules.

Besides phrase groups, a category's file has a ``rules`` section: one entry per rule of its module
(``piecemeal``, ``term_question``, ``caps_run``…) with the rule's word lists and its examples
(``positives`` and ``near_misses``, checked by one generic test per file). A module reads its lists
once, at import, through the typed readers below, so a list in the data keeps the shape the code
needs: a set of words, words in order, word sequences in order, or a table of canonical forms.

Words are written as the tokeniser leaves them (lower case, apostrophes dropped: "dont", "whats"), as
one whitespace-separated string for a set or an ordered list, and as a YAML list of such strings for
word sequences. A list entry that YAML reads as something other than a string (``no`` and ``off`` are
booleans to it) is rejected rather than silently matching nothing.
"""

from __future__ import annotations

import copy
import functools
from importlib import resources
from typing import Any

import yaml


@functools.cache
def _parsed(name: str) -> Any:
    source = resources.files("otelsignals.signals").joinpath("phrases", f"{name}.yaml")
    # The C loader when PyYAML has it: the phrase files are large and are loaded at start-up.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(source.read_text(encoding="utf-8"), Loader=loader)


def phrase_file(name: str) -> Any:
    """The parsed content of ``phrases/<name>.yaml`` (parsed once; each caller gets its own copy)."""
    return copy.deepcopy(_parsed(name))


def _rule(category: str, name: str) -> dict[str, Any]:
    """The entry of rule ``name`` in the ``rules`` section of ``phrases/<category>.yaml``."""
    rules = _parsed(category).get("rules") or {}
    if name not in rules:
        raise ValueError(f"phrases/{category}.yaml has no rule {name!r}")
    entry: dict[str, Any] = rules[name]
    return entry


def _text(category: str, name: str, key: str) -> str:
    value = _rule(category, name).get(key)
    if not isinstance(value, str):
        raise ValueError(f"phrases/{category}.yaml, rule {name!r}: {key} must be a string of words")
    return value


def word_order(category: str, name: str, key: str) -> tuple[str, ...]:
    """A rule's list of words, in the order written (for lists tried in order)."""
    return tuple(_text(category, name, key).split())


def word_set(category: str, name: str, key: str) -> frozenset[str]:
    """A rule's list of words, as a set."""
    return frozenset(word_order(category, name, key))


def word_sequences(category: str, name: str, key: str) -> tuple[tuple[str, ...], ...]:
    """A rule's list of word sequences ("you dont need to"), in the order written."""
    value = _rule(category, name).get(key)
    if not isinstance(value, list) or not all(isinstance(entry, str) and entry.split() for entry in value):
        raise ValueError(f"phrases/{category}.yaml, rule {name!r}: {key} must be a list of word strings")
    return tuple(tuple(entry.split()) for entry in value)


def strings(value: Any, where: str, *, numbers: bool = False) -> tuple[str, ...]:
    """A YAML list of phrases or words (absent: empty), every entry a string, or with ``numbers`` an
    integer read as its text (status codes). YAML reads ``yes``, ``no``, ``on`` and ``off`` written
    unquoted as booleans, and ``str()`` of one ("True") would silently stand for another word."""
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        wrong = [entry for entry in value if not (isinstance(entry, str) or (numbers and _integer(entry)))]
        if not wrong:
            return tuple(map(str, value))
    else:
        wrong = [value]
    raise ValueError(f"{where} must be a list of strings (quote yes, no, on and off); got {wrong!r}")


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # True is an int to Python


def canonical_forms(category: str, name: str, key: str) -> dict[str, str]:
    """A rule's table of words and the canonical word each stands for."""
    value = _rule(category, name).get(key)
    forms = dict(value) if isinstance(value, dict) else {}
    if not forms or not all(isinstance(word, str) and isinstance(form, str) for word, form in forms.items()):
        raise ValueError(f"phrases/{category}.yaml, rule {name!r}: {key} must map words to words")
    return forms
