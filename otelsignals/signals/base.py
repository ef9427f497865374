"""What a detector sees and returns.

Detection is incremental: each call looks at the messages a trace added (``new_from`` onward) and
may look back over a bounded window of earlier ones, never the whole history, so analysing turn N
costs O(new messages). What a detector must remember between calls (loop trackers, previous
answers) lives in ``memory``, a dict the caller keeps per conversation and per detector module.

**Metadata and privacy** ("private by default": message content leaves the process only where the
user turned it on). Every key a detector writes into ``SignalInstance.metadata`` (at any depth) is
declared here in exactly one of four sets:

- :data:`PLAIN_METADATA_KEYS`: numbers, indices, booleans and closed vocabulary (pattern and group
  names, phrases *as written in the phrase library*, reasons, categories): never message text;
- :data:`IDENTIFIER_METADATA_KEYS`: names the application chose (``tool``, ``tools``, ``model``,
  ``error_type``): kept when they look like an identifier (:func:`looks_like_identifier`), else
  hashed;
- :data:`CONTENT_METADATA_KEYS`: words of a message or a tool call's arguments (``arguments``,
  ``rejected``, ``term``, ``shared``, ``brought_back``, ``left_out``, ``marker``…);
- :data:`NESTED_METADATA_KEYS`: lists or objects whose own keys follow these same rules
  (``signatures``).

With ``signals.snippets`` off, :func:`redact_metadata` (called where metadata leaves the process:
the span enricher and the admin API) replaces every content value, every identifier that does not
look like one, and every value of an *undeclared* key (fail closed) by :func:`content_digest`, a
stable ``"blake2b:<16 hex>"`` of its text: equal texts still compare equal (the same arguments in
three retries), lengths and counts survive as the lists' lengths. With snippets on, metadata leaves
as the detectors wrote it. A new detector key must be added to one of the sets
(``tests/test_privacy.py`` fails otherwise). The digest is unkeyed: a short or guessable value (a
one-word term, a card number) can be recovered by trying candidates, so it identifies repeats, it
does not encrypt.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from otelsignals.model import Conversation, LlmCall, Message, SignalInstance

T = TypeVar("T")

# SPEC §4/§8: efficiency is 1.0 up to this many user turns.
BASELINE_USER_TURNS = 5


@dataclass
class DetectionContext:
    conversation: Conversation
    new_from: int  # index into conversation.messages of the first message not analysed before
    new_llm_calls: list[LlmCall] = field(default_factory=list)  # model calls this trace made
    memory: dict[str, Any] = field(default_factory=dict)  # kept by the caller between calls
    baseline_user_turns: int = BASELINE_USER_TURNS
    # Instances per leaf type found by earlier calls on this conversation (read only).
    prior_counts: Mapping[str, int] = field(default_factory=dict)
    # Work shared by several detectors within one call (e.g. classifying failed tool results once
    # for the eleven failure and exhaustion leaves); not kept between calls.
    scratch: dict[Any, Any] = field(default_factory=dict)

    @property
    def messages(self) -> list[Message]:
        return self.conversation.messages

    def shared(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()``, once per call for every detector asking ``key`` (kept in ``scratch``)."""
        if key not in self.scratch:
            self.scratch[key] = compute()
        return self.scratch[key]

    def absolute_index(self, local_index: int) -> int:
        """SignalInstance.message_index for conversation.messages[local_index]."""
        return self.conversation.message_offset + local_index

    def new_messages(self) -> list[tuple[int, Message]]:
        messages = self.conversation.messages
        return list(enumerate(messages[self.new_from :], start=self.new_from))


def memory_key(leaf: str, part: str) -> str:
    """The detector-memory key ``leaf:part``, one string object for every conversation. Every open
    conversation's memory holds its keys: a key built anew on each call would be a string of its
    own per conversation (about 1.6 KB a conversation on the development set). Leaves and parts are
    a fixed set, so interning them is safe even where interned strings are never freed (3.12)."""
    return sys.intern(f"{leaf}:{part}")


# Detector-memory keys whose value the detector prepares from the conversation's messages, and
# prepares again from them when it is missing (phrase_analysis.recent_messages seeds a missing list
# from the latest messages; a cache starts empty). A conversation idle for sessions.cold_after drops
# them (conversation.ConversationState.go_cold): memory while it waits, CPU on its next trace.
REBUILT_WHEN_MISSING: set[str] = set()


def rebuilt_when_missing(key: str) -> str:
    """Declare ``key`` one of :data:`REBUILT_WHEN_MISSING`; returns it."""
    REBUILT_WHEN_MISSING.add(key)
    return key


# Detector-memory keys whose value holds message numbers (SignalInstance.message_index): a number,
# a list of numbers, or a pair whose first item is one. A key built by :func:`memory_key` is named
# by its part ("next" covers every leaf's "leaf:next"). When a late system prompt is put in front
# of the messages held, every number moves (signals.detect.renumber_memory).
HOLDS_MESSAGE_NUMBERS: set[str] = set()


def holds_message_numbers(key_or_part: str) -> str:
    """Declare ``key_or_part`` one of :data:`HOLDS_MESSAGE_NUMBERS`; returns it."""
    HOLDS_MESSAGE_NUMBERS.add(key_or_part)
    return key_or_part


def moved_numbers(value: Any, by: int) -> Any:
    """``value`` (as :data:`HOLDS_MESSAGE_NUMBERS` describes it) with each message number moved on
    by ``by``; a negative number stands for no message ("before the messages kept") and stays."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value + by if value >= 0 else value
    if isinstance(value, list):
        return [moved_numbers(item, by) for item in value]
    if isinstance(value, tuple) and value:
        return (moved_numbers(value[0], by), *value[1:])
    return value


Detector = Callable[[DetectionContext], list[SignalInstance]]


@dataclass(frozen=True)
class DetectorSpec:
    """A detector as its category module declares it (the ``DETECTORS`` tuple the registry in
    :mod:`otelsignals.signals.detect` reads): the leaf types it finds and whether it needs message text.
    Without text (OTel's default is not to record it) a content detector is reported skipped; a
    structural one (tool executions, model-call failures, turn counts) still runs."""

    leaves: tuple[str, ...]
    detect: Detector
    needs_content: bool = True


# ---------------------------------------------------------------------------------------------
# Metadata privacy (module docstring)

PLAIN_METADATA_KEYS = frozenset(
    {
        # every detector
        "pattern",  # a named pattern, or evidence from the phrase/error libraries ("phrase:…", "http:404")
        "reason",
        "rule",  # the failure classification's evidence rule that decided ("http_status", "text_phrase")
        "source",
        "status_code",
        "count",
        # loops
        "run_length",
        "threshold",
        "threshold_cycles",
        "cycles",
        "same_arguments",
        "similarity",
        "lower_bound",
        # phrase hits: the phrase as written in the library, never the user's words
        "phrase",
        "group",
        "matches",
        "fuzzy",
        "actually",
        # negative stance cues
        "pattern_type",  # the kind of pattern: the leaf for phrases, or complaint, all_caps…
        "upper_ratio",
        "letters",
        "words",
        "head",  # a rhetorical head of the library ("why would i")
        "run",  # a run of "!" and "?"
        "emoji",  # one of the library's annoyed emoji (disengagement.yaml, annoyed_emoji)
        # indices and ratios
        "similar_to",
        "ratio",
        "repeated_answer",
        "request_index",
        "user_turns",
        "baseline",
        "efficiency",
        # hand-off
        "asked_by",
        "after",
        "via",
        "unresolved",  # the library phrase that says the agent gave up
    }
)
# The metadata keys above whose value is a message number (moved with the signal's own number when a
# late system prompt is put in front: analysis._renumber).
MESSAGE_NUMBER_METADATA_KEYS = frozenset({"similar_to", "repeated_answer", "request_index"})
IDENTIFIER_METADATA_KEYS = frozenset({"tool", "tools", "model", "error_type"})
CONTENT_METADATA_KEYS = frozenset(
    {"arguments", "rejected", "term", "shared", "brought_back", "marker", "left_out"}
)
NESTED_METADATA_KEYS = frozenset({"signatures"})

_IDENTIFIER = re.compile(r"[A-Za-z_][\w.:/@+\-]{0,127}")
_EMAIL_LIKE = re.compile(r"[^@\s]+@[^@\s]+\.[A-Za-z]{2,}")
_LONG_NUMBER = re.compile(r"\d{9,}")


def content_digest(value: Any) -> str:
    """A stable stand-in for message or argument text: ``"blake2b:"`` and 16 hex digits."""
    text = value if isinstance(value, str) else str(value)
    digest = hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=8, person=b"otelsignals")
    return f"blake2b:{digest.hexdigest()}"


def looks_like_identifier(value: Any) -> bool:
    """A name a program chose (``search_orders``, ``openai.RateLimitError``, ``gpt-4o``), not text:
    no spaces, at most 128 characters, no e-mail address, no long number."""
    return (
        isinstance(value, str)
        and _IDENTIFIER.fullmatch(value) is not None
        and _EMAIL_LIKE.search(value) is None
        and _LONG_NUMBER.search(value) is None
    )


def redact_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` with no message or argument text left (module docstring); a new dict."""
    secrets: set[str] = set()
    redacted = {key: _redact(key, value, secrets) for key, value in metadata.items()}
    if not secrets:
        return redacted
    # A plain value quoting a redacted identifier ("http:404(exception:<error.type>)") loses it too.
    return {key: _scrub(value, secrets) for key, value in redacted.items()}


def redacted_metadata(signal: SignalInstance) -> dict[str, Any]:
    """:func:`redact_metadata` of ``signal.metadata``, computed once and kept on the signal (the
    very metadata dict when redaction changes nothing). Not to be modified."""
    kept = signal.redacted
    if kept is None:
        kept = redact_metadata(signal.metadata)
        if kept == signal.metadata:
            kept = signal.metadata
        signal.redacted = kept
    return kept


def _redact(key: Any, value: Any, secrets: set[str]) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if key in PLAIN_METADATA_KEYS:
        return value
    if key in NESTED_METADATA_KEYS:
        if isinstance(value, Mapping):
            return {k: _redact(k, v, secrets) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [_redact(key, item, secrets) for item in value]
    if key in IDENTIFIER_METADATA_KEYS:
        if isinstance(value, list | tuple):
            return [_redact(key, item, secrets) for item in value]
        if looks_like_identifier(value):
            return value
        if isinstance(value, str) and len(value) >= 3:
            secrets.add(value)
    return _content(value)  # content, or a key nobody declared: fail closed


def _content(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, Mapping):
        return {(k if looks_like_identifier(k) else _content(k)): _content(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_content(item) for item in value]
    return content_digest(value)


def _scrub(value: Any, secrets: set[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            if secret in value and not value.startswith("blake2b:"):
                value = value.replace(secret, content_digest(secret))
        return value
    if isinstance(value, Mapping):
        return {k: _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(item, secrets) for item in value]
    return value
