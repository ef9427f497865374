"""Conversations from span readings: order, de-duplicate resent history, pair tool results.

Chat APIs are stateless, so each model call usually carries the whole history so far plus its new
answer: a *snapshot*. Snapshots are merged into the conversation by alignment, not by position: the
part of a snapshot the conversation already holds is skipped and only the rest is appended. That
one rule covers history resent on every call, APIs that send only the new turn
(``previous_response_id``), sliding windows that drop old turns, late and out-of-order spans (an
older snapshot is found inside the conversation and adds nothing) and spans delivered twice.

Messages are compared by fingerprint: role, normalised text, tool calls (by id when there is one,
else by name and canonical arguments) and, for tool results, the call id they answer.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import re
import threading
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from otelsignals.compaction import Outcome, compact, content_length, stored_message_text
from otelsignals.conventions.base import SpanReading, SpanView, ToolExecution
from otelsignals.conventions.memory import ConversationMemory, HistoryCache, adopt_in
from otelsignals.evals.trace_metrics import DEFAULT_LOOP_WINDOW, ComparableOutput
from otelsignals.model import (
    NO_TOOL_CALLS,
    Conversation,
    LlmCall,
    Message,
    RecentIds,
    RecentList,
    RecentModelCalls,
    Role,
    SignalInstance,
    ToolCall,
    ToolResult,
    leading_system_prompts,
)
from otelsignals.triage import NO_PRIORITY, Priority

# SPEC §2: the first of these set on any span of a trace names the conversation; else the trace id.
CONVERSATION_KEY_ATTRIBUTES = (
    "gen_ai.conversation.id",
    "session.id",
    "langfuse.session.id",
    "traceloop.association.properties.session_id",
    "ai.telemetry.metadata.sessionId",
    # Beyond the spec's list: where the Vercel AI SDK v7 puts a session id given as runtime context.
    "ai.settings.context.sessionId",
)
# Signal instances kept per conversation (counts are kept in full; the instances are for the
# session metrics and the admin API).
RECENT_SIGNALS = 500
# Messages whose text another object held when they were offered to compaction, offered again on
# later calls (the latest this many): a recent-text cache lets go of a text some turns later.
COMPACTION_RETRIES = 64
MAX_TOOLS_KEPT = 256  # tool definitions kept per conversation (the first ones seen)
# What grows with every trace rather than with the messages kept, bounded: the latest model calls (the
# admin API shows the last 100), the latest trace ids (as far back as a trace-level eval run reaches:
# trace_message_ends), and the span ids already merged, remembered to drop a span delivered again (an
# exporter's retry comes within seconds; at least this many ids, at most twice as many: a span
# delivered again after that many newer ones is merged again, its model call counted twice). A
# conversation of thousands of turns kept them all before, and no message trimming gave them back.
RECENT_MODEL_CALLS = 500
MODEL_CALL_PARENT_TRACES = 4  # traces whose model calls' parents are kept (their later parts may wrap them)
MODEL_CALL_PARENTS_KEPT = 64
RECENT_TRACE_IDS = RECENT_SIGNALS
SEEN_SPANS_KEPT = 1024
# Tool call ids and their tools' names, to name a result that gives only the call id: the latest this
# many calls (a result comes within a few calls of its call).
TOOL_NAMES_KEPT = 512
# SPEC §7: who the agent is.
AGENT_ID_ATTRIBUTES = ("gen_ai.agent.id", "gen_ai.agent.name")
# The agent of a conversation none of whose spans names one (no agent attribute, no service.name):
# its reputation, its index rows and its spans' signals.agent.id all go by this one name.
UNKNOWN_AGENT = "unknown"


def conversation_key(
    spans: Iterable[SpanView], trace_id: bytes, attributes: Sequence[str] = CONVERSATION_KEY_ATTRIBUTES
) -> str:
    """The value of the first of ``attributes`` set on any of ``spans``; else the trace id."""
    spans = list(spans)
    for attribute in attributes:
        for span in spans:
            value = span.attributes.get(attribute)
            if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
                return str(value).strip()
    return trace_id.hex()


def agent_id_of(spans: Iterable[SpanView]) -> str | None:
    spans = list(spans)
    for attribute in AGENT_ID_ATTRIBUTES:
        for span in spans:
            value = span.attribute_str(attribute)
            if value:
                return value
    for span in spans:
        service = span.resource.get("service.name")
        if isinstance(service, str) and service:
            return service
    return None


def _canonical(value: Any) -> str:
    if isinstance(value, str):
        return value.strip()
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return repr(value)


def fingerprint(message: Message) -> int:
    """Computed once per message object: the history cache hands back the same objects for the
    part of a resent history already read, so comparing a long history costs little."""
    if message.fingerprint is None:
        message.fingerprint = _fingerprint(message)
    return message.fingerprint


def fingerprints(messages: list[Message]) -> list[int]:
    """:func:`fingerprint` of each message; a resent history's messages mostly have theirs already."""
    known = [message.fingerprint for message in messages]
    if None in known:
        # The messages without one are usually the new ones, at the end.
        first = known.index(None)
        known[first:] = [fingerprint(message) for message in messages[first:]]
    return known  # type: ignore[return-value]  # every one is set now


def _fingerprint(message: Message) -> int:
    if message.role is Role.TOOL:
        result = message.tool_result
        if result is not None and result.call_id:
            return hash((Role.TOOL, result.call_id))  # its text (kilobytes of JSON) is not read
    text = " ".join((message.content or "").split())
    if message.role is Role.TOOL:
        return hash((Role.TOOL, text))
    calls = tuple(call.id or (call.name, _canonical(call.arguments)) for call in message.tool_calls)
    return hash((message.role, text, calls))


# Texts this long or longer are shared within their conversation: the latest SHARED_VALUES texts and
# tool-call lists are remembered per conversation (a resent system prompt, the previous answers and
# tool results are among them when a history resends them). Shorter texts, and the keys and short
# values of tool-call arguments, are shared by every conversation through a table of the latest
# SHARED_SHORT_TEXTS (_shared_short_text): a canned greeting or an id passed to tool after tool.
SHARED_TEXT_MIN_CHARACTERS = 64
SHARED_VALUES = 16
REPEATS_SEARCHED = 16  # calls of a message, and of each recent list, that a repeated call is looked for in
SHARED_SHORT_TEXTS = 8192
_SHORT_TEXTS: dict[str, str] = {}
_SHARED_ARGUMENT_KEYS_AT_MOST = 32  # arguments with more keys (a payload, not parameters) are left as read
# System prompts are shared between conversations too: every conversation of an agent holds the same
# one (the development set's 473 conversations held 473 copies of 18 prompts, 11.9 MiB). The latest
# this many are remembered by the process, whatever conversation read them.
SHARED_SYSTEM_PROMPTS = 64
_SYSTEM_PROMPTS: dict[str, str] = {}
_SYSTEM_PROMPTS_LOCK = threading.Lock()  # conversations may be read on several threads


class SharedValues:
    """One conversation's recent message texts and tool-call lists, so that what is read again is
    kept once: a system prompt resent with every model call, an answer read from its call's output
    and again from the next call's history, a tool result read from its tool span and from the
    history, the same tool output returned twice; short texts and tool-call arguments through the
    process's table. Only equal values are shared: replacing a copy by the original changes no value,
    only the memory held."""

    __slots__ = ("_calls", "_texts")

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}  # the latest used last
        self._calls: dict[int, list[ToolCall]] = {}  # by the message's fingerprint

    def texts(self) -> list[str]:
        """The texts kept (the session byte bound counts those the conversation no longer holds)."""
        return list(self._texts.values())

    def share(self, messages: Iterable[Message]) -> None:
        for message in messages:
            content = stored_message_text(message)  # compacted text is not shared: it is no string
            if isinstance(content, str) and content:
                if len(content) < SHARED_TEXT_MIN_CHARACTERS:
                    kept = _shared_short_text(content)  # a greeting, "Transfer successful"
                elif message.role is Role.SYSTEM:
                    with _SYSTEM_PROMPTS_LOCK:
                        kept = _latest(_SYSTEM_PROMPTS, content, content, SHARED_SYSTEM_PROMPTS)
                else:
                    kept = _latest(self._texts, content, content)
                if kept is not content:
                    result = message.tool_result
                    if result is not None and result.content is content:
                        result.content = kept
                    message.content = kept
            calls = message.tool_calls
            if calls:
                for call in calls:
                    _share_arguments(call.arguments)
                kept_calls = _latest(self._calls, fingerprint(message), calls)
                if kept_calls is calls:
                    self._share_repeated_arguments(calls)
                elif _same_calls(kept_calls, calls):
                    message.tool_calls = kept_calls
            elif calls is not NO_TOOL_CALLS:  # a reader's empty list: the one all messages share
                message.tool_calls = NO_TOOL_CALLS

    def _share_repeated_arguments(self, calls: list[ToolCall]) -> None:
        """A new call with the same tool and arguments as one of the recent calls kept here takes
        that call's arguments object: agents repeat calls (a retry, a status polled, the same lookup
        in a later turn), and on the real development set 3,474 of 5,334 argument dicts repeated
        one of their conversation's (a dict of one key is 184 bytes before its key and value). The
        first REPEATS_SEARCHED calls of a message look at the first REPEATS_SEARCHED of each recent
        list: a message of a thousand calls must not cost a million comparisons."""
        for call in itertools.islice(calls, REPEATS_SEARCHED):
            arguments = call.arguments
            if arguments and isinstance(arguments, dict | list):
                call.arguments = self._recent_arguments(call.name, arguments)

    def _recent_arguments(self, name: str, arguments: Any) -> Any:
        """The arguments object of a recent call of tool ``name`` written like ``arguments``, else
        ``arguments``."""
        for recent in self._calls.values():
            for other in itertools.islice(recent, REPEATS_SEARCHED):
                kept = other.arguments
                # == first: cheap, and false for most; then written alike (1 is not true)
                if (
                    kept is not arguments
                    and other.name == name
                    and kept == arguments
                    and _same_arguments(kept, arguments)
                ):
                    return kept
        return arguments


def _shared_short_text(value: Any) -> Any:
    """One string object per short text (under SHARED_TEXT_MIN_CHARACTERS) for every conversation,
    as long as it is among the latest SHARED_SHORT_TEXTS met (the table is emptied when full: what
    was shared stays shared); anything else as it is. Not ``sys.intern``: interned strings are never
    freed on Python 3.12, and these are user text."""
    if value.__class__ is not str or len(value) >= SHARED_TEXT_MIN_CHARACTERS:
        return value
    kept = _SHORT_TEXTS.get(value)
    if kept is None:
        if len(_SHORT_TEXTS) >= SHARED_SHORT_TEXTS:
            _SHORT_TEXTS.clear()  # (each step is one atomic dict operation: no lock needed)
        _SHORT_TEXTS[value] = kept = value
    return kept


def _share_arguments(arguments: Any) -> None:
    """Tool-call arguments with their keys and short string values shared (:func:`_shared_short_text`):
    an id such as "L1002" is passed to call after call, in conversation after conversation (the real
    development set held 937 copies of it). Equal values, so nothing reading them can tell; a nested
    value is left as it is. Changed in place: the dict stays the one its call's tool result shares
    (a new dict, made whenever another conversation's equal string has taken the table's place,
    would hold the arguments twice)."""
    if not isinstance(arguments, dict) or len(arguments) > _SHARED_ARGUMENT_KEYS_AT_MOST:
        return
    shared = [(_shared_short_text(key), _shared_short_text(value)) for key, value in arguments.items()]
    if any(
        key is not shared_key or value is not shared_value
        for (key, value), (shared_key, shared_value) in zip(arguments.items(), shared, strict=True)
    ):
        arguments.clear()  # (the order kept: the pairs are put back as they came)
        arguments.update(shared)


def _same_calls(kept: list[ToolCall], calls: list[ToolCall]) -> bool:
    """The same calls, arguments written alike (:func:`_same_arguments`)."""
    if len(kept) != len(calls):
        return False
    for old, new in zip(kept, calls, strict=True):
        if old.name != new.name or old.id != new.id or not _same_arguments(old.arguments, new.arguments):
            return False
    return True


def _same_arguments(kept: Any, arguments: Any) -> bool:
    """Arguments written alike: ``==`` would take ``{"a": 1, "b": 2}`` for ``{"b": 2, "a": 1}`` and
    ``true`` for ``1``, which a reader of the arguments can tell apart."""
    if kept is arguments:
        return True
    if isinstance(kept, dict | list) or isinstance(arguments, dict | list):
        try:
            return orjson.dumps(kept) == orjson.dumps(arguments)
        except TypeError:  # not JSON: not shared
            return False
    return type(kept) is type(arguments) and kept == arguments


def _share_with_call(result: ToolResult, call: ToolCall) -> None:
    """A tool result keeps its call's id, name and arguments objects where it holds equal ones (the
    tool span and the history wrote them again): one copy per call."""
    if result.call_id == call.id:
        result.call_id = call.id
    if result.name == call.name:
        result.name = call.name
    if result.arguments is not None and _same_arguments(call.arguments, result.arguments):
        result.arguments = call.arguments


def _latest(kept: dict[Any, Any], key: Any, value: Any, bound: int = SHARED_VALUES) -> Any:
    """The value kept under ``key``, else ``value`` (then kept, the oldest forgotten beyond
    ``bound``); either way now the latest used. A text kept under itself (``key is value``) stays
    its own key: put back under the equal copy just read, the dict would keep that copy too."""
    found = kept.pop(key, None)
    if found is None:
        found = value
        if len(kept) >= bound:
            del kept[next(iter(kept))]
    kept[found if key is value else key] = found
    return found


@dataclass(slots=True)
class ConversationState:
    """One conversation as the assembler keeps it between traces.

    Alignment works on the *history index*: the fingerprints of the body (every message but the
    system prompt) in the order the snapshots tell it. It is kept apart from ``messages`` because a
    tool span can arrive before the history that mentions its result: such a result is shown at
    once (provisional) but enters the index only when a snapshot puts it in its place, so that
    later snapshots still align and the result is never shown twice.
    """

    conversation: Conversation
    body_fingerprints: list[int] = field(default_factory=list)
    # fingerprint -> its body index, or its indices when it repeats (a list per message would take 64
    # bytes more, and most messages are said once)
    body_positions: dict[int, int | list[int]] = field(default_factory=dict)
    body_trimmed: int = 0  # body messages dropped from the front by trim()
    first_body_fingerprint: int | None = None  # of the conversation's very first body message
    seen_spans: RecentIds = field(default_factory=lambda: RecentIds(SEEN_SPANS_KEPT))
    tool_names: dict[str, str] = field(default_factory=dict)  # tool call id -> name (TOOL_NAMES_KEPT)
    provisional: list[Message] = field(default_factory=list)  # tool results no snapshot has placed yet
    unanswered: RecentList[ToolCall] = field(default_factory=lambda: RecentList(64))  # calls awaiting results
    # What the span decoder remembers of the conversation (decoded spans, histories read).
    decoder_memory: ConversationMemory = field(default_factory=ConversationMemory)
    last_inputs: _SnapshotInputs | None = None  # the latest merged history, split (see _split_inputs)
    shared: SharedValues = field(default_factory=SharedValues)
    has_content: bool = False
    # The fingerprint of the conversation's system prompt (the first one merged), kept when the
    # messages are trimmed: it tells the agent's calls from side calls under prompts of their own.
    system_prompt: int | None = None
    last_spoken: int = -1  # index-position of the latest user message or assistant answer with text
    last_seen: float = 0.0
    # Analysis kept between traces: detector memory, instance counts, and the latest instances.
    detector_memory: dict[str, Any] = field(default_factory=dict)
    leaf_counts: Counter[str] = field(default_factory=Counter)
    tool_results_seen: int = 0  # tool executions analysed so far (kept when messages are trimmed)
    priority: Priority = NO_PRIORITY  # the triage priority after the latest analysed trace
    # Its latest turns cut off (analysis.py): (trace id, final) each, final once the user spoke
    # after it; a tuple, shared while empty, as most conversations never have one.
    cut_off_turns: tuple[tuple[bytes, bool], ...] = ()
    recent_signals: RecentList[SignalInstance] = field(default_factory=lambda: RecentList(RECENT_SIGNALS))
    # Per analysed trace, for the session metrics and the session span (evals.TraceSignals; the
    # trace's analysed span; the assistant's latest answers, prepared for loop detection).
    trace_signals: RecentList[Any] = field(default_factory=lambda: RecentList(RECENT_SIGNALS))
    trace_spans: RecentList[tuple[bytes, bytes]] = field(default_factory=lambda: RecentList(RECENT_SIGNALS))
    # Per analysed trace, where its messages ended, counted from the conversation's start (trimmed
    # messages included): a trace-level eval run judges the conversation as it stood after it.
    # (Keyed by the trace id's bytes, the object the trace's other records hold: its hex would be
    # a string of 81 bytes per trace, up to RECENT_SIGNALS of them.)
    trace_message_ends: dict[bytes, int] = field(default_factory=dict)
    previous_outputs: RecentList[ComparableOutput] = field(
        default_factory=lambda: RecentList(DEFAULT_LOOP_WINDOW)
    )
    turn_latencies_ms: RecentList[float] = field(default_factory=lambda: RecentList(RECENT_SIGNALS))
    first_seen_ns: int = 0
    # The conversation index's row for this key before this state began (read once by the index
    # writer; an earlier row means the conversation was resumed: evicted, or the process restarted).
    index_base: object | None = None
    index_base_read: bool = False
    # Counted from the conversation's start: messages before compacted_upto were offered to
    # compaction; those at compaction_held were held elsewhere then (offered again).
    compacted_upto: int = 0
    compaction_held: list[int] = field(default_factory=list)
    cold: bool = False  # what the next trace rebuilds was dropped while the conversation waited (go_cold)
    # The JSON characters of conversation.available_tools' definitions (the store's estimate).
    tool_definition_characters: int = 0
    # Since it went cold, no history has been merged: the next one is read whole (its copies are
    # paired with the held messages by value). Kept past a trace that merges no history.
    resume_pending: bool = False
    # Held assistant messages a history resent as a run of several (one per part), by position in
    # the history index counted from the conversation's start: the run's messages, from the history
    # cache, so that the next history's same run is not joined again (_walk_joining_runs). None
    # until a conversation has one.
    joined_runs: dict[int, tuple[Message, ...]] | None = None
    # Where the latest such walk ended: (history index position from the conversation's start,
    # history position, the history's message before it).
    walk_resume: tuple[int, int, Message] | None = None
    # When the latest span whose messages were merged ended (its end time, ns): see _merge_snapshot.
    merged_until: int = 0
    # Per trace of the latest MODEL_CALL_PARENT_TRACES, the parents of the model calls read in it (at
    # most MODEL_CALL_PARENTS_KEPT): a later part of that trace (an exporter's next batch) may bring a
    # span that wraps one of them (_wrapping_calls). None until a conversation has a model call.
    model_call_parents: dict[bytes, tuple[bytes, ...]] | None = None

    @classmethod
    def new(cls, key: str) -> ConversationState:
        return cls(Conversation(key, llm_calls=RecentModelCalls()))

    def go_cold(self, detector_keys: Collection[str]) -> None:
        """Drop what the next trace rebuilds from the messages, while the conversation waits for it
        (sessions.cold_after): the span decoder's memory (so the next history is read whole), the
        latest split history, the recent texts kept to share copies, the history index's positions
        (rebuilt from its fingerprints by :meth:`warm_up`) and the detector memory under
        ``detector_keys`` (signals.detect.REBUILT_WHEN_MISSING). What is analysed stays the same;
        the next trace takes longer."""
        self.decoder_memory = ConversationMemory()
        self.last_inputs = None
        self.shared = SharedValues()
        self.body_positions = {}
        self.joined_runs = self.walk_resume = None
        # A dict keeps its table's size when keys are deleted: a new one holds only what is left.
        self.detector_memory = {
            key: value for key, value in self.detector_memory.items() if key not in detector_keys
        }
        self.cold = True
        self.resume_pending = True

    def warm_up(self) -> None:
        """Before a cold conversation's next trace is merged: its history index's positions again."""
        self._reindex(self.body_fingerprints)
        self.cold = False

    def record_trace_end(self, trace_id: bytes) -> None:
        """Remember where ``trace_id``'s messages end (the latest RECENT_SIGNALS traces)."""
        conversation = self.conversation
        self.trace_message_ends[trace_id] = conversation.message_offset + len(conversation.messages)
        if len(self.trace_message_ends) > RECENT_SIGNALS:
            del self.trace_message_ends[next(iter(self.trace_message_ends))]

    def conversation_after(self, trace_id: bytes) -> Conversation | None:
        """A copy of the conversation as it stood after ``trace_id``; None when that trace is not
        among the remembered ones or its messages were trimmed away."""
        end = self.trace_message_ends.get(trace_id)
        conversation = self.conversation
        if end is None or end - conversation.message_offset <= 0:
            return None
        ids = conversation.trace_ids
        upto = ids.index(trace_id) + 1 if trace_id in ids else len(ids)
        traces_up_to = set(conversation.trace_ids[:upto])
        return dataclasses.replace(  # what the spans said of it (offered tools…) comes along
            conversation,
            messages=conversation.messages[: end - conversation.message_offset],
            llm_calls=[call for call in conversation.llm_calls if call.trace_id in traces_up_to],
            trace_ids=conversation.trace_ids[:upto],
            available_tools=dict(conversation.available_tools),
        )

    def append(self, message: Message, indexed: bool = True) -> None:
        """Show ``message``; ``indexed`` also records it in the history index (snapshot messages)."""
        tool_names = self.tool_names
        for call in message.tool_calls:
            call.name = _shared_name(call.name)
            if call.id:
                tool_names[call.id] = call.name
                if len(tool_names) > TOOL_NAMES_KEPT:
                    del tool_names[next(iter(tool_names))]
        self.unanswered.extend(message.tool_calls)
        if message.finish_reason:  # "stop", "tool_calls": one object each, not one per message
            message.finish_reason = _shared_name(message.finish_reason)
        result = message.tool_result
        if result is not None and result.name:
            result.name = _shared_name(result.name)
        if result is not None and message.role is Role.TOOL:
            self._pair(result)
        if message.content and message.role in (Role.USER, Role.ASSISTANT):
            # Tool results are recorded by tool spans even when message capture is off; what the
            # content detectors need is what the user and the assistant said.
            self.has_content = True
        self.conversation.messages.append(message)
        if indexed and message.role is not Role.SYSTEM:
            self._index(fingerprint(message), _spoken(message))

    def _pair(self, result: ToolResult) -> None:
        """Pair a tool result with the call it answers: by call id, or by order when the
        convention records no id (the oldest call not answered yet)."""
        if result.call_id:
            # OpenAI-style history names only the call id; the assistant's call names the tool.
            result.name = result.name or self.tool_names.get(result.call_id)
            match = next((c for c in self.unanswered if c.id == result.call_id), None)
        else:
            same_tool = [c for c in self.unanswered if result.name in (None, c.name)]
            match = same_tool[0] if same_tool else None
            if match is not None:
                result.name = result.name or match.name
        if match is not None:
            self.unanswered.remove(match)
            _share_with_call(result, match)

    def place(self, message: Message) -> Message:
        """A snapshot's message: shown and indexed, unless it is a provisional tool result already
        shown, which then only enters the index (and gains the snapshot's text if it had none).
        Returns the message shown for it."""
        shown = self._provisional_for(message)
        if shown is None:
            self.append(message)
            return message
        self.provisional.remove(shown)
        if shown.content is None and message.content is not None:
            shown.content = message.content
            self.decoder_memory.text_given()
            if shown.tool_result is not None:
                shown.tool_result.content = message.content
        self._index(fingerprint(message))
        return shown

    def _provisional_for(self, message: Message) -> Message | None:
        result = message.tool_result
        if message.role is not Role.TOOL or result is None or not self.provisional:
            return None
        name = result.name or (self.tool_names.get(result.call_id) if result.call_id else None)
        for shown in self.provisional:
            shown_result = shown.tool_result
            assert shown_result is not None
            if result.call_id and shown_result.call_id == result.call_id:
                return shown
            if not shown_result.call_id and name and shown_result.name == name:
                return shown
        return None

    def compact(self, end: int) -> int:
        """Compact the text of the messages before local index ``end`` (compaction.compact): the
        detectors look back over a bounded number of messages, the rest is read on request. Each
        message is offered once; one whose text another object still held is offered again on
        later calls while it is among the latest COMPACTION_RETRIES such messages. Returns how many
        messages were compacted."""
        conversation = self.conversation
        messages = conversation.messages
        offset = conversation.message_offset
        end = min(end, len(messages))
        first_new = max(0, self.compacted_upto - offset)
        if end <= first_new:
            return 0
        held: list[int] = []
        offered = [position - offset for position in self.compaction_held if position >= offset]
        compacted = 0
        for index in itertools.chain(offered, range(first_new, end)):
            outcome = compact(messages[index])
            if outcome is Outcome.COMPACTED:
                compacted += 1
            elif outcome is Outcome.HELD_ELSEWHERE:
                held.append(offset + index)
        self.compacted_upto = offset + end
        self.compaction_held = held[-COMPACTION_RETRIES:]
        return compacted

    def moved_by_one(self) -> None:
        """A message was put in front of the conversation: every position counted here moves on."""
        if self.compacted_upto:
            self.compacted_upto += 1
        self.compaction_held = [position + 1 for position in self.compaction_held]
        self.trace_message_ends = {trace: end + 1 for trace, end in self.trace_message_ends.items()}

    def _index(self, fp: int, spoken: bool = False) -> None:
        if spoken:
            self.last_spoken = len(self.body_fingerprints)
        if self.first_body_fingerprint is None:
            self.first_body_fingerprint = fp
        position = len(self.body_fingerprints)
        known = self.body_positions.get(fp)
        if known is None:
            self.body_positions[fp] = position
        elif isinstance(known, int):
            self.body_positions[fp] = [known, position]
        else:
            known.append(position)
        self.body_fingerprints.append(fp)

    def trim(self, max_messages: int) -> int:
        """Bound the messages kept to ``max_messages``; returns how many were dropped.

        Trims to 90 % of the bound so that the re-indexing is paid once per many traces.
        """
        messages = self.conversation.messages
        if len(messages) <= max_messages:
            return 0
        excess = len(messages) - max(1, max_messages * 9 // 10)
        dropped = messages[:excess]
        self.conversation.trimmed_user_turns += sum(1 for m in dropped if m.role is Role.USER)
        self.conversation.trimmed_assistant_turns += sum(
            1 for m in dropped if m.role is Role.ASSISTANT and content_length(m)
        )
        self.conversation.messages = messages[excess:]
        self.conversation.message_offset += excess
        # The index may hold a few more entries than the body (provisional results are shown
        # before they are indexed); it is cut to the same length as what is kept.
        kept = self.body_fingerprints[-(len(self.conversation.messages)) :]
        dropped_fingerprints = len(self.body_fingerprints) - len(kept)
        self.body_trimmed += dropped_fingerprints
        self.last_spoken = max(-1, self.last_spoken - dropped_fingerprints)
        self.provisional = [m for m in self.provisional if any(m is k for k in self.conversation.messages)]
        self._reindex(kept)
        return excess

    def _reindex(self, fingerprints: list[int]) -> None:
        """The history index made anew of ``fingerprints``, in order."""
        self.body_fingerprints, self.body_positions = [], {}
        first, last_spoken = self.first_body_fingerprint, self.last_spoken
        for fp in fingerprints:
            self._index(fp)
        self.first_body_fingerprint, self.last_spoken = first, last_spoken


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """How the messages one trace added end (analysis.py counts the turns cut off from it).

    ``cut_off``: the last assistant message the trace added asked for tools, they ran (their
    results follow it), and no model call came after them: the agent's loop stopped after running
    them (a step limit, a timeout, a crash). Not a cut: a call for tools left last, not run (an
    agent that waits for a person's approval ends so); a model call after the tools whose answer
    was not recorded (a stream the instrumentation did not capture; a failed call has signals of
    its own); a tool span after the answer that no call of the last assistant message asked for.
    An answer earlier in the trace does not make a later tool loop answered: a trace may hold
    several exchanges (the development set's do).

    ``whole_turn``: the trace's model calls sit under another of its spans (an agent, workflow or
    request span), so it holds a turn's end, not one lone model call. ``user_spoke``: the trace
    added a user message: a new turn began. ``goes_on``: a new trace that added none carries on a
    turn an earlier trace began (a client that posts each step, a retry).
    """

    cut_off: bool
    whole_turn: bool
    goes_on: bool
    user_spoke: bool


@dataclass
class TraceUpdate:
    """What one trace added to its conversation."""

    key: str
    trace_id: bytes
    first_new_message: int  # index into conversation.messages of the first message this trace added
    new_messages: int
    llm_calls: list[LlmCall]
    analysed_span_id: bytes | None  # the span that carries this trace's part of the conversation
    content_captured: bool
    turn_end: TurnEnd | None = None  # how its messages end; None: it added no assistant message
    # Messages put in front of those held before (a system prompt that came late): every message
    # number counted before this trace moved on by as many.
    put_in_front: int = 0


def _ordered(readings: Sequence[tuple[SpanView, SpanReading]]) -> list[tuple[SpanView, SpanReading]]:
    return sorted(readings, key=lambda pair: (pair[0].start_time_unix_nano, pair[0].end_time_unix_nano))


def apply_trace(
    state: ConversationState,
    trace_id: bytes,
    readings: Sequence[tuple[SpanView, SpanReading]],
    parents: Mapping[bytes, bytes] | None = None,
) -> TraceUpdate:
    """Merge one trace's span readings into ``state``. ``parents`` maps span id to parent span id
    for every span of the trace (GenAI or not), to tell enclosing spans from the calls they wrap."""
    if state.cold:
        state.warm_up()
    # Whether the first history merged is the first since the conversation went cold, read whole:
    # not only in the trace right after (which may hold no history: a tool span of its own).
    resumed = state.resume_pending and bool(state.conversation.messages)
    conversation = state.conversation
    start = len(conversation.messages)
    ordered = _ordered(readings)
    new = state.seen_spans.admit(view.span_id for view, _ in ordered)
    fresh = [pair for pair, is_new in zip(ordered, new, strict=True) if is_new]
    first_part = trace_id not in conversation.trace_ids
    if first_part:
        # (a late part of a trace older than the latest RECENT_TRACE_IDS comes back in as the latest)
        conversation.trace_ids.append(trace_id)
        del conversation.trace_ids[:-RECENT_TRACE_IDS]

    model_calls = [(v, r) for v, r in fresh if r.llm_call is not None]
    wrappers, wrapping_earlier = _wrapping_calls(state, trace_id, model_calls)
    speaking = [(v, r) for v, r in fresh if r.input_messages or r.output_messages]
    # An agent or workflow span that encloses model calls repeats what they said, in fewer words
    # (its output is the last call's answer): the innermost speaking spans are the conversation.
    # One exception: an enclosing span that reports only an answer (no history) goes last, through
    # alignment: some libraries attach a streamed answer to the enclosing span instead of the call.
    enclosing = _ancestors([v for v, _ in speaking], parents) | wrapping_earlier
    inserted_front = 0
    merged = [
        (view, reading)
        for view, reading in sorted(speaking, key=lambda pair: pair[0].span_id in enclosing)
        if not (view.span_id in enclosing and reading.input_messages)
    ]
    merged = _without_side_calls(state, merged, first_part)
    # Read before the earlier calls were merged, each history holds their copies too.
    adopted = _TraceAdoptions(
        [reading.input_messages for _, reading in merged], state.decoder_memory.histories
    )
    for number, (view, reading) in enumerate(merged):
        adopted.catch_up(number)
        has_history = bool(reading.input_messages)
        # A call that starts after the latest merged one ended is a new call, whatever it repeats
        # (one that overlaps it, or started before, may be a copy or a late one).
        new_call = 0 < state.merged_until <= view.start_time_unix_nano
        inserted_front += _merge_snapshot(
            state, reading.input_messages, reading.output_messages, adopted, resumed and has_history, new_call
        )
        state.merged_until = max(state.merged_until, view.end_time_unix_nano)
        if has_history:  # read with the history cache from now on
            resumed = state.resume_pending = False
    start += inserted_front
    with_content = [(v, r) for v, r in model_calls if r.input_messages or r.output_messages]

    tool_results = _ToolResults(state)
    for view, reading in fresh:
        if reading.tool_execution is not None:
            _attach_tool_execution(state, view, reading.tool_execution, tool_results)
        for tool in reading.tool_definitions:
            held = conversation.available_tools.get(tool["name"])
            if held is tool:  # (the same text read again gives the same objects: tool_definitions)
                continue
            if held is not None or len(conversation.available_tools) < MAX_TOOLS_KEPT:
                conversation.available_tools[tool["name"]] = tool
                state.tool_definition_characters += definition_characters(tool) - (
                    0 if held is None else definition_characters(held)
                )

    llm_calls = [r.llm_call for v, r in model_calls if r.llm_call is not None and v.span_id not in wrappers]
    for call in llm_calls:
        # Kept as long as the conversation: the trace's id and the model's name held once, not once
        # per call (each span read them into objects of its own).
        if call.trace_id == trace_id:
            call.trace_id = trace_id
        if call.model is not None:
            call.model = _shared_name(call.model)
    conversation.llm_calls.extend(llm_calls)
    del conversation.llm_calls[:-RECENT_MODEL_CALLS]
    if fresh:
        conversation.content_captured = state.has_content
    # The span that carries this trace's conversation: its latest model call that had content,
    # else its latest model call, else whatever span spoke last.
    carriers = with_content or model_calls or fresh
    return TraceUpdate(
        key=conversation.key,
        trace_id=trace_id,
        first_new_message=start,
        new_messages=len(conversation.messages) - start,
        llm_calls=llm_calls,
        analysed_span_id=carriers[-1][0].span_id if carriers else None,
        content_captured=conversation.content_captured,
        turn_end=_turn_end(conversation.messages, start, model_calls, with_content, parents, first_part),
        put_in_front=inserted_front,
    )


def _wrapping_calls(
    state: ConversationState, trace_id: bytes, model_calls: Sequence[tuple[SpanView, SpanReading]]
) -> tuple[frozenset[bytes], frozenset[bytes]]:
    """(The span ids of ``model_calls`` that wrap another model call, those of them whose inner
    call came in an earlier part of the trace.) A model-call span that is the parent of another is
    a library's view of the same request (LangChain's ChatOpenAI span over the OpenAI client's,
    both instrumented): the inner one is the call. The inner one ends first, so an exporter's batch
    may carry it alone and the wrapper in the trace's next part: the parents of the calls read in
    the trace's earlier parts are kept (``state.model_call_parents``)."""
    kept = state.model_call_parents
    wrapped_before = kept.get(trace_id, ()) if kept is not None else ()
    call_parents = frozenset(view.parent_span_id for view, _ in model_calls)
    wrapping_earlier = frozenset(view.span_id for view, _ in model_calls if view.span_id in wrapped_before)
    if model_calls:
        if kept is None:
            kept = state.model_call_parents = {}
        parents = call_parents.union(wrapped_before)
        # A trace that stays open for a whole session keeps its latest part's parents only: the
        # wrapper of a call comes in the part right after it, not hundreds of parts later.
        kept.pop(trace_id, None)
        # Kept as a tuple: a frozenset of one or two ids takes 216 bytes, the tuple 48 or 56.
        kept[trace_id] = tuple(parents if len(parents) <= MODEL_CALL_PARENTS_KEPT else call_parents)
        while len(kept) > MODEL_CALL_PARENT_TRACES:
            del kept[next(iter(kept))]
    return (call_parents if len(model_calls) > 1 else frozenset()) | wrapping_earlier, wrapping_earlier


def _turn_end(
    messages: Sequence[Message],
    first_new: int,
    model_calls: Sequence[tuple[SpanView, SpanReading]],
    with_content: Sequence[tuple[SpanView, SpanReading]],
    parents: Mapping[bytes, bytes] | None,
    first_part: bool,
) -> TurnEnd | None:
    """How the messages from ``first_new`` on end (:class:`TurnEnd`); None without an assistant one.
    ``model_calls``: the trace's, in the order they started, ``with_content`` those that recorded
    messages; ``first_part``: the trace was not seen before."""
    added = messages[first_new:]
    last = next((i for i in range(len(added) - 1, -1, -1) if added[i].role is Role.ASSISTANT), None)
    if last is None:
        return None
    asked = added[last]
    results = [m.tool_result for m in added[last + 1 :] if m.role is Role.TOOL]
    ran = any(result is None or _answers(result, asked.tool_calls) for result in results)
    # The trace's last model call asked for the tools: none came after them. (A part with no model
    # call, log records read late, says only what its messages say.)
    final_call = model_calls[-1][1] if model_calls else None
    nothing_after = final_call is None or any(m.tool_calls for m in final_call.output_messages)
    user_spoke = any(m.role is Role.USER for m in added)
    return TurnEnd(
        cut_off=bool(asked.tool_calls) and ran and nothing_after,
        whole_turn=parents is not None and any(view.parent_span_id in parents for view, _ in with_content),
        goes_on=first_part and not user_spoke,
        user_spoke=user_spoke,
    )


def _answers(result: ToolResult, calls: Sequence[ToolCall]) -> bool:
    """Whether ``result`` is the result of one of ``calls``: by id, or, where the tool span wrote
    no id (OpenLLMetry's and OpenInference's tool spans), by name."""
    if result.call_id is not None:
        return any(call.id == result.call_id for call in calls) or not any(call.id for call in calls)
    return result.name is None or any(call.name == result.name for call in calls)


def _ancestors(views: list[SpanView], parents: Mapping[bytes, bytes] | None) -> set[bytes]:
    """Span ids among ``views`` that enclose another of them."""
    parent_of = dict(parents or {})
    for view in views:
        parent_of.setdefault(view.span_id, view.parent_span_id)
    ids = {view.span_id for view in views}
    enclosing: set[bytes] = set()
    for view in views:
        parent = parent_of.get(view.span_id, b"")
        hops = 0
        while parent and hops < 256:  # bounded: a malformed trace may have a parent cycle
            if parent in ids:
                enclosing.add(parent)
            parent = parent_of.get(parent, b"")
            hops += 1
    return enclosing


@dataclass(slots=True)
class _SnapshotInputs:
    """A history as merged: its messages, its system prompt, and its body with the fingerprints."""

    messages: list[Message]
    system: Message | None
    body: list[Message]
    fingerprints: list[int]


def _split_inputs(
    state: ConversationState, inputs: list[Message], share: bool = True
) -> tuple[_SnapshotInputs, int]:
    """``inputs`` split into system prompt and body, and where in the body the messages new to this
    call start (the ones before end the previous call's history). A history that resends the previous one (the
    same message objects, from the history cache, then more; the leading system prompt may be read
    anew from its own attribute) is split for its new part only. ``share``: the new part's texts are
    shared (SharedValues); without, only the system prompt's."""
    last = state.last_inputs
    skip = leading_system_prompts(inputs)
    new, system, body, fps = inputs, None, [], []
    if last is not None:
        skip_last = leading_system_prompts(last.messages)
        held = len(last.messages) - skip_last
        if (
            held
            and len(inputs) - skip >= held
            and _may_equal(inputs[skip], last.messages[skip_last])
            and inputs[skip : skip + held] == last.messages[skip_last:]
        ):
            # The previous split is replaced by this one: its lists are extended rather than copied.
            new, body, fps = inputs[skip + held :], last.body, last.fingerprints
            system = inputs[0] if skip else last.system
    if skip and (new is not inputs or not share):
        state.shared.share(inputs[:skip])  # a system prompt, read anew with every call
    if share:
        # The latest first: a long history read whole must not push the previous answer's text out
        # of the recent texts before its copy (near the end) is shared with it.
        state.shared.share(reversed(new))
    new_body = [m for m in new if m.role is not Role.SYSTEM]
    if system is None and len(new_body) < len(new):
        system = next(m for m in new if m.role is Role.SYSTEM)
    body += new_body
    fps += fingerprints(new_body)
    state.last_inputs = _SnapshotInputs(list(inputs), system, body, fps)
    return state.last_inputs, len(body) - len(new_body)


def _may_equal(read: Message, held: Message) -> bool:
    """Whether two messages are worth comparing by value: the same object, or neither compacted (a
    history cut to its latest messages starts elsewhere, and comparing it with a compacted message
    would expand that message's text to find out)."""
    return read is held or (read.__class__ is Message and held.__class__ is Message)


# One string per model or tool name and finish reason for every conversation: bounded, since names
# come from the spans (sys.intern would do, but interned strings are never freed on Python 3.12).
_NAMES: dict[str, str] = {}
_NAMES_KEPT = 1024
_NAME_CHARACTERS = 256


def definition_characters(tool: dict[str, Any]) -> int:
    """The characters of a tool definition as JSON: what the session store counts it by."""
    return len(orjson.dumps(tool, default=str))


def _shared_name(name: str) -> str:
    kept = _NAMES.get(name)
    if kept is not None:
        return kept
    if len(_NAMES) < _NAMES_KEPT and len(name) <= _NAME_CHARACTERS:
        _NAMES[name] = name
    return name


def _merge_snapshot(
    state: ConversationState,
    inputs: list[Message],
    outputs: list[Message],
    adopted: _TraceAdoptions,
    resumed: bool = False,
    new_call: bool = False,
) -> int:
    """Append the part of a snapshot (a call's history and answer) the conversation does not hold
    yet; ``adopted`` gathers the trace's adoptions for the histories merged after it. ``resumed``:
    the first merge since the conversation went cold, whose history was read whole. ``new_call``:
    the call started after the conversation's latest one ended, so its turn is new even when the
    conversation holds its every message already (a user's "yes" answered "Done." again, in an API
    that sends only the new turn). Returns 1 when a system prompt was put in front of messages
    already held (their indices moved by one), else 0."""
    # Resumed, the history was read whole: the copies of what the conversation holds are paired by
    # value below and give way, so only what is new to it is shared (once its start is known).
    split, read_from = _split_inputs(state, inputs, share=not resumed)
    system = split.system or next((m for m in outputs if m.role is Role.SYSTEM), None)
    answer = [m for m in outputs if m.role is not Role.SYSTEM]
    state.shared.share(answer)
    body = split.body + answer
    inserted_front = 0
    if system is not None and state.system_prompt is None:
        # One system prompt per conversation, kept first; later ones usually repeat it.
        state.system_prompt = fingerprint(system)
        if state.conversation.messages:
            state.conversation.messages.insert(0, system)
            state.moved_by_one()
            inserted_front = 1
        else:
            state.append(system)
    if body:
        first = _first_new_of_call(state, split.body, split.fingerprints + fingerprints(answer), new_call)
        if resumed:
            state.shared.share(reversed(split.body[first:]))
        messages = state.conversation.messages
        window = messages[-_COUNTERPART_WINDOW:]  # before this call's messages are placed
        present: set[int] | None = None  # the conversation's messages, when one may come again
        counterparts: dict[int, Message] = {}
        adopted_from = len(split.body)  # the body's earliest message replaced by the conversation's
        for index in range(first, len(body)):
            message = body[index]
            if read_from == 0 and message.fingerprint in state.body_positions:
                # Said before, in a history that does not continue the previous one: it may give back
                # the conversation's own message (the history cache hands those out), to be shown anew
                # as a message of its own. (A continued history's new messages were read for this call.)
                if present is None:
                    present = {id(held) for held in messages}
                if id(message) in present:
                    message = _copy_of(message)
            shown = state.place(message)
            if index < len(split.body) and _same_reading(shown, message):
                counterparts[id(message)] = shown
                adopted_from = min(adopted_from, index)
        # The body's messages new to this call that the conversation held already.
        if resumed:
            earliest = _find_counterparts_by_value(messages, split.body[read_from:first], counterparts)
            if earliest is not None:
                adopted_from = min(adopted_from, read_from + earliest)
        else:
            held_from = max(read_from, first - _COUNTERPART_WINDOW)
            if held_from < first:
                earliest = _find_counterparts(window, split.body[held_from:first], counterparts)
                if earliest is not None:
                    adopted_from = min(adopted_from, held_from + earliest)
        if counterparts:
            _adopt(state, counterparts, inputs, adopted_from, adopted)
    return inserted_front


def _first_new_of_call(
    state: ConversationState, body: list[Message], snapshot: list[int], new_call: bool
) -> int:
    """:func:`_first_new_in`; but a new call whose every message the conversation holds already
    says its turn again: from the history's latest user message (the user said it again), else from
    its answer."""
    first = _first_new_in(state, body, snapshot)
    if new_call and first >= len(snapshot):
        return next((i for i in range(len(body) - 1, -1, -1) if body[i].role is Role.USER), len(body))
    return first


def _without_side_calls(
    state: ConversationState, merged: list[tuple[SpanView, SpanReading]], new_trace: bool
) -> list[tuple[SpanView, SpanReading]]:
    """The trace's speaking spans without its side calls: those that quote the conversation in a
    history of their own (:func:`_pasted_transcript_turn`), those of a new trace that name or sort
    the conversation after its answer (:func:`_without_afterword_calls`), and those that send the
    same history as another (:func:`_without_beside_calls`)."""
    every_call = merged  # what they all resend tells the agent's call (_without_beside_calls)
    if state.body_positions:
        kept = []
        for view, reading in merged:
            new_turn = _pasted_transcript_turn(state, reading.input_messages)
            if new_turn is None:
                kept.append((view, reading))
            elif len(merged) == 1 and new_turn:
                # The trace's only call: an app that keeps the history as text in its prompt
                # (LangChain's ConversationBufferMemory: "...Human: {input}\nAI:"). What comes after
                # the pasted part is the user's new turn, and the call's answer the agent's.
                asked = [Message(Role.USER, new_turn)]
                kept.append((view, dataclasses.replace(reading, input_messages=asked)))
            # else a side call beside the agent's (a condense step), or a title: no turn of its own
        merged = kept
    if new_trace:
        merged = _without_afterword_calls(state, merged)
    return _without_beside_calls(state, merged, every_call) if len(merged) > 1 else merged


# A side task's answer: a JSON value (a guardrail's verdict), or a title or a label ("Math homework
# help", "billing"): at most SIDE_ANSWER_MAX_WORDS words on one line, no sentence closed. An agent's
# answer to a person is mostly prose ("Sure! What is the problem?"), but not always ("Paris", "42").
SIDE_ANSWER_MAX_WORDS = 8
SIDE_ANSWER_MAX_CHARACTERS = 160  # (checked first: an answer may run to megabytes)
_SENTENCE_CLOSE = re.compile(r"[.!?。！？]")


def _answer_text(outputs: list[Message]) -> str | None:
    """The call's answer when it is one text and no tool call, stripped; else None."""
    if len(outputs) != 1 or outputs[0].tool_calls or not outputs[0].content:
        return None
    return outputs[0].content.strip() or None


def _json_shaped(outputs: list[Message]) -> bool:
    """The call answered a JSON object or array: a verdict, a classification."""
    text = _answer_text(outputs)
    return text is not None and text[0] in "{[" and text[-1] in "}]"


def _label_shaped(outputs: list[Message]) -> bool:
    """The call answered as a side task does: JSON, or a title or a label."""
    if _json_shaped(outputs):
        return True
    text = _answer_text(outputs)
    return (
        text is not None
        and len(text) <= SIDE_ANSWER_MAX_CHARACTERS
        and (
            "\n" not in text
            and len(text.split()) <= SIDE_ANSWER_MAX_WORDS
            and not _SENTENCE_CLOSE.search(text)
        )
    )


def _without_afterword_calls(
    state: ConversationState, merged: list[tuple[SpanView, SpanReading]]
) -> list[tuple[SpanView, SpanReading]]:
    """A new trace's speaking spans without the calls that continue the conversation under a system
    prompt of their own to name or sort it (a chat title, tags: "Write a 3-word title for this
    chat."): the history ends with the answer the conversation ended on, the system prompt is neither
    the conversation's nor another call's of the trace, and the call answers as a side task does
    (:func:`_label_shaped`). It still counts as a model call. A call under the conversation's own
    prompt (an agent that continues its answer), one answering in prose (a hand-off agent greeting
    the user, a summary), and one after an answer of its own trace (a hand-off agent answering
    briefly after the first agent's "let me transfer you") join the conversation as before."""
    messages = state.conversation.messages
    if not messages or messages[-1].role is not Role.ASSISTANT:
        return merged
    held_answer = fingerprint(messages[-1])
    candidates = [
        number
        for number, (_, reading) in enumerate(merged)
        if (inputs := reading.input_messages)
        and inputs[-1].role is Role.ASSISTANT
        and fingerprint(inputs[-1]) == held_answer
        and _label_shaped(reading.output_messages)
    ]
    if not candidates:  # (the usual case: read no system prompt)
        return merged
    prompts = [_prompt_of(reading.input_messages) for _, reading in merged]
    prompt_counts = Counter(prompts)
    dropped = {
        number
        for number in candidates
        if prompts[number] is not None
        and prompts[number] != state.system_prompt
        and prompt_counts[prompts[number]] == 1
    }
    return [pair for number, pair in enumerate(merged) if number not in dropped]


def _prompt_of(messages: Sequence[Message]) -> int | None:
    """The fingerprint of the system prompt a history starts with (the one a conversation keeps)."""
    return fingerprint(messages[0]) if messages and messages[0].role is Role.SYSTEM else None


def _without_beside_calls(
    state: ConversationState,
    merged: list[tuple[SpanView, SpanReading]],
    every_call: list[tuple[SpanView, SpanReading]],
) -> list[tuple[SpanView, SpanReading]]:
    """The trace's speaking spans without the calls that send the same history as another under
    another system prompt (an input guardrail, an intent classifier: "Check if the
    user is asking you to do their homework. Answer JSON.") answer beside the conversation, not in
    it, when the agent's call among them is known: the one whose answer another call of the trace
    resends (its tool step, the next call of its loop). Otherwise all are merged: which call ends
    last, or which prompt came first, tells nothing (guardrails run beside the agent's call)."""
    # Grouped by the history's length and its first and last messages (each call of an agent's loop
    # sends a longer history), then compared whole where a group has calls under two system prompts.
    by_history: dict[tuple[int, int, int], list[int]] = {}
    for number, (_, reading) in enumerate(merged):
        inputs = reading.input_messages
        skip = leading_system_prompts(inputs)
        if len(inputs) > skip and reading.output_messages:
            key = (len(inputs) - skip, fingerprint(inputs[skip]), fingerprint(inputs[-1]))
            by_history.setdefault(key, []).append(number)
    dropped: set[int] = set()
    resent: set[int] | None = None
    for numbers in by_history.values():
        if len(numbers) < 2 or len({_system_text(merged[n][1].input_messages) for n in numbers}) < 2:
            continue  # one call, or the same call again (a retry): not a side call
        bodies = {tuple(fingerprints(_body_of(merged[n][1].input_messages))) for n in numbers}
        if len(bodies) > 1:
            continue
        if resent is None:  # read once, from every call of the trace (a title set aside resends too)
            resent = {fp for _, reading in every_call for fp in fingerprints(reading.input_messages)}
        answered = [n for n in numbers if fingerprints(merged[n][1].output_messages)[0] in resent]
        if not answered:
            answered = _agent_by_answer(state, merged, numbers)
        if len(answered) == 1:  # else nothing tells which is the agent's: all are merged, as read
            dropped.update(n for n in numbers if n != answered[0])
    return [pair for number, pair in enumerate(merged) if number not in dropped] if dropped else merged


def _agent_by_answer(
    state: ConversationState, merged: list[tuple[SpanView, SpanReading]], numbers: list[int]
) -> list[int]:
    """In a turn answered in text (no call resends an answer), the calls that may be the agent's.
    The one under the conversation's own system prompt (known from its earlier turns) when it
    answers in prose and the others answer as side tasks do (a title, a label, a verdict). Else,
    when one call answers in prose and the others JSON (a guardrail's verdict), the prose one,
    unless the agent answered JSON before (structured output: the shared history ends so). Else
    all: a short answer ("Paris", "42") beside a call rewriting the question, or a label beside a
    JSON answer, tells nothing by its shape."""
    outputs = {n: merged[n][1].output_messages for n in numbers}
    prose = [n for n in numbers if not _label_shaped(outputs[n])]
    if len(prose) != 1:
        return numbers
    (agent,) = prose
    if state.system_prompt is not None and _prompt_of(merged[agent][1].input_messages) == state.system_prompt:
        return prose
    history = merged[agent][1].input_messages
    answered_json_before = next(
        (_json_shaped([m]) for m in reversed(history) if m.role is Role.ASSISTANT and not m.tool_calls), False
    )
    if answered_json_before or not all(_json_shaped(outputs[n]) for n in numbers if n != agent):
        return numbers
    return prose


# A history pasted as text: a prompt that quotes a user message and an answer among the conversation's
# latest QUOTED_LOOKBACK and its first user message, one of them at least QUOTED_MIN_CHARACTERS long,
# the other at least QUOTED_SHORTEST (an answer "Done."), at least one after a speaker's label.
QUOTED_LOOKBACK = 8
QUOTED_MIN_CHARACTERS = 16
QUOTED_SHORTEST = 4
_SPEAKER_LABEL = re.compile(
    r"(?:human|user|assistant|ai|bot|agent|customer|model|system)\s*:\s*$", re.IGNORECASE
)
_LEADING_LABEL = re.compile(r"^\W*(?:(?:human|user|customer|follow up input)\s*:)?\s*", re.IGNORECASE)
_TRAILING_LABEL = re.compile(
    r"\s*(?:assistant|ai|bot|agent|model|standalone question)\s*:\s*$", re.IGNORECASE
)
NEW_TURN_MIN_WORDS = 2  # what a pasted transcript's prompt says after it, to be the user's new turn


def _pasted_transcript_turn(state: ConversationState, inputs: list[Message]) -> str | None:
    """None unless ``inputs`` is a history of its own that pastes the conversation as a transcript
    (speaker labels, both what the user said and what the agent answered); then what the prompt says
    after the pasted part, its labels stripped ("" when that is no new turn: a chat title's prompt).

    Such a call is a side call beside the agent's (LangChain's condense-question step: "Given the
    following conversation and a follow up question, rephrase ..."), a chat title, or an app that
    keeps its history as text in one prompt. Read as it was sent, its prompt would be a user turn
    holding the transcript: every complaint in it counted again. Only a history that holds none of
    the conversation's messages, only with a speaker's label before a quoted message ("Human: …",
    "USER: …"): a user who quotes the agent back, or quotes themself too ("I said X and you said
    Y"), is heard. The first user message is looked for however long ago it was: the condense step
    pastes the user's own words, while the conversation holds the standalone questions written from
    them."""
    # A history resent whole starts with a message the conversation holds: told at its first message,
    # without a pass over the history.
    first = next((message for message in inputs if message.role is not Role.SYSTEM), None)
    if first is None or fingerprint(first) in state.body_positions:
        return None
    body = _body_of(inputs)
    if any(fingerprint(message) in state.body_positions for message in body):
        return None
    prompt = " ".join(" ".join(m.content.split()) for m in body if m.role is Role.USER and m.content)
    if not prompt:
        return None
    messages = state.conversation.messages
    latest = itertools.islice((m for m in reversed(messages) if _spoken(m) and m.content), QUOTED_LOOKBACK)
    first_user = next((m for m in messages if m.role is Role.USER and m.content), None)
    longest: dict[Role, int] = {}
    labelled = False
    pasted_end = 0
    for message in itertools.chain(latest, (first_user,) if first_user is not None else ()):
        text = " ".join((message.content or "").split())
        at = _quoted_at(text, prompt)
        if at < 0:
            continue
        labelled = labelled or bool(_SPEAKER_LABEL.search(prompt[max(0, at - 24) : at]))
        pasted_end = max(pasted_end, at + len(text))
        longest[message.role] = max(longest.get(message.role, 0), len(text))
    if not (labelled and len(longest) == 2 and max(longest.values()) >= QUOTED_MIN_CHARACTERS):
        return None
    rest = _TRAILING_LABEL.sub("", _LEADING_LABEL.sub("", prompt[pasted_end:], count=1)).strip()
    return rest if len(re.findall(r"\w+", rest)) >= NEW_TURN_MIN_WORDS else ""


def _quoted_at(text: str, prompt: str) -> int:
    """Where ``text`` (QUOTED_SHORTEST characters or more) stands last in ``prompt`` as words of its
    own, not as part of a longer word ("Done." is not in "Undone."); -1 when it does not."""
    if len(text) < QUOTED_SHORTEST:
        return -1
    at = prompt.rfind(text)
    while at >= 0:
        end = at + len(text)
        if (at == 0 or not prompt[at - 1].isalnum()) and (end == len(prompt) or not prompt[end].isalnum()):
            return at
        at = prompt.rfind(text, 0, at)
    return -1


def _body_of(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.role is not Role.SYSTEM]


def _system_text(messages: list[Message]) -> str | None:
    system = next((m for m in messages if m.role is Role.SYSTEM), None)
    return None if system is None else " ".join((system.content or "").split())


def _copy_of(message: Message) -> Message:
    """A message of its own with ``message``'s values. Its text is a string of its own (one text held
    by two messages would keep both from being compacted), shared with its tool result as before."""
    text = message.content
    own_text = (
        None if text is None else text.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")
    )
    result = message.tool_result
    copied_result = None
    if result is not None:
        result_text = result.content
        copied_result = dataclasses.replace(result, content=own_text if result_text == text else result_text)
    calls = message.tool_calls
    return dataclasses.replace(
        message,
        content=own_text,
        tool_calls=list(calls) if calls else NO_TOOL_CALLS,
        tool_result=copied_result,
    )


# How far back from the conversation's end a resent message's counterpart is looked for: what a call
# resends anew is the previous answer and the tool results since, a few messages back.
_COUNTERPART_WINDOW = 64
_FEW_READS = 4  # up to this many, the window is scanned for each; beyond, its texts are tabled first


def _same_reading(held: Message, read: Message) -> bool:
    """Whether ``held`` (shown in the conversation) reads as ``read`` (a history's copy of it): the
    same role, the very same text object and tool-call list (SharedValues made them one), the same
    tool call answered. Only their span, the finish reason and what a tool span said of the result
    may differ, which no history reader uses."""
    text = stored_message_text(read)
    if held is read or held.role is not read.role or stored_message_text(held) is not text:
        return False
    calls = read.tool_calls
    if held.tool_calls is not calls and (held.tool_calls or calls):
        return False
    if text is None and not calls:
        return False  # nothing says they are one message
    held_result, read_result = held.tool_result, read.tool_result
    if held_result is None or read_result is None:
        return held_result is read_result
    return held_result.call_id == read_result.call_id


def _find_counterparts(window: list[Message], reads: list[Message], found: dict[int, Message]) -> int | None:
    """Into ``found``: for ``reads`` (a history's messages the conversation holds, in order; copies,
    or the conversation's own messages already) the messages of ``window`` (the conversation's
    latest) that read as the copies, in the same order: each read, from the last, is looked for
    before the message the next one paired with (or was). Returns the index in ``reads`` of the
    earliest copy paired."""
    below = len(window)
    earliest = None
    # Many reads (a history read whole): only those whose very text a window message holds are looked for.
    texts = {id(stored_message_text(shown)) for shown in window} if len(reads) > _FEW_READS else None
    for index in range(len(reads) - 1, -1, -1):
        read = reads[index]
        text = stored_message_text(read)
        if (text is None and not read.tool_calls) or (
            text is not None and len(text) < SHARED_TEXT_MIN_CHARACTERS
        ):
            continue  # never shared, so no other message holds this very text
        if texts is not None and id(text) not in texts:
            continue
        for position in range(below - 1, -1, -1):
            shown = window[position]
            if shown is read:
                below = position  # the conversation's own message already
                break
            if stored_message_text(shown) is text and _same_reading(shown, read):
                found[id(read)] = shown
                below, earliest = position, index
                break
    return earliest


def _find_counterparts_by_value(
    held: list[Message], reads: list[Message], found: dict[int, Message]
) -> int | None:
    """:func:`_find_counterparts` for a history read whole after the conversation went cold: its
    texts are strings of their own (the recent texts that made copies share one were dropped), so
    each copy is paired with a message of the conversation of the same fingerprint that reads as
    it by value (compacted text expanded to compare), each message once, anywhere in the
    conversation. Otherwise the history cache would keep a copy of every earlier message until the
    conversation went cold again. Returns the index in ``reads`` of the earliest copy paired."""
    by_fingerprint: dict[int, list[Message]] = {}
    for message in held:
        if message.fingerprint is not None:
            by_fingerprint.setdefault(message.fingerprint, []).append(message)
    earliest = None
    for index, read in enumerate(reads):
        candidates = by_fingerprint.get(fingerprint(read))
        if not candidates or id(read) in found:
            continue
        for position, shown in enumerate(candidates):
            if shown is read:
                del candidates[position]  # the conversation's own message already
                break
            if _reads_as(shown, read):
                found[id(read)] = shown
                del candidates[position]
                earliest = index if earliest is None else earliest
                break
    return earliest


def _reads_as(held: Message, read: Message) -> bool:
    """:func:`_same_reading` by value: the same role, text, tool calls and tool call answered."""
    if held.role is not read.role or content_length(held) != content_length(read):
        return False
    text = held.content  # (expanded once)
    if text != read.content or held.tool_calls != read.tool_calls:
        return False
    if text is None and not read.tool_calls:
        return False  # nothing says they are one message
    held_result, read_result = held.tool_result, read.tool_result
    if held_result is None or read_result is None:
        return held_result is read_result
    return held_result.call_id == read_result.call_id


def _adopt(
    state: ConversationState,
    counterparts: dict[int, Message],
    inputs: list[Message],
    adopted_from: int,
    adopted: _TraceAdoptions,
) -> None:
    """Replace a history's copies by the conversation's own messages (``counterparts``: by the
    copy's id) wherever the next histories are read from or compared with: the history cache, the
    latest split, and (through ``adopted``) the histories of this trace's later calls. A copy would
    otherwise keep the text alive, and the conversation's message could never be compacted.

    The copies are the split body's messages from ``adopted_from`` on; in a list of messages they sit
    after its leading system prompts (a reader may read those from an attribute of their own, into the
    inputs only), or, in the history cache, as many from its end when the inputs were cut to their
    latest messages (limits.py). Replacing only the objects named by id, a position looked at in vain
    changes nothing."""
    lead = leading_system_prompts(inputs)
    end = len(inputs)
    state.decoder_memory.histories.adopt(counterparts, adopted_from, end)
    adopted.add(counterparts, adopted_from, end)
    last = state.last_inputs
    if last is not None:
        adopt_in(last.messages, counterparts, adopted_from + lead, end)
        _adopt_in_body(last, counterparts, adopted_from)


def _adopt_in_body(split: _SnapshotInputs, counterparts: dict[int, Message], start: int) -> None:
    """:func:`adopt_in` for the split's body from ``start`` on, and its fingerprints with it: the
    copy's fingerprint, an equal integer object of its own, would otherwise stay in the list (36
    bytes a message of the latest history, 0.3 MiB of the real development set's state)."""
    body, fingerprints = split.body, split.fingerprints
    for index in range(max(0, start), len(body)):
        replacement = counterparts.get(id(body[index]))
        if replacement is not None:
            body[index] = replacement
            if replacement.fingerprint == fingerprints[index]:
                fingerprints[index] = replacement.fingerprint


class _TraceAdoptions:
    """What one trace's merges replaced so far, for the histories of its later calls. Those were read
    before any merge and hold the same copies, so each merge used to replace them in every later
    history: N²/2 passes for N model calls, and agents make hundreds of calls in one trace. Now each
    later history catches up once, just before its own merge, with exactly what every earlier merge
    would have done to it: at each position a merge spanned, that merge's replacement, in merge order
    (a merge may replace a message an earlier one put there). Only positions some merge spanned are
    looked at, and only a message some merge replaced is followed further.

    Each catch-up also remembers its window of positions, as read and as caught up. The next history
    usually holds the very same copies there (the history cache hands out one history's messages to
    the next), and then takes the caught-up window over in one slice (its positions are compared by
    identity, in C) and replays only the merges made since: a catch-up costs a few passes in C over
    the window and a lookup per position those merges spanned, not a lookup per position every
    earlier merge spanned (bench/reassembly.py --calls-in-one-trace).

    A history that something else also changes meanwhile (the history cache remembers it, or another
    call's reading is the same list) is still adopted at each merge, as before, so that the two
    kinds of change keep their order. Messages are known by id, and a key's message may be gone by a
    later catch-up (the history cache's adoption frees copies), its id then free for another object.
    That cannot mislead the replay: a merge's keys are compared only with a history's messages as
    read or as put there by earlier merges, all alive together with the keys during that merge, so
    no two of them share an id. (The latest window keeps its messages alive until the next catch-up
    or the end of the trace's merge.)"""

    __slots__ = (
        "_current",
        "_eager",
        "_eager_numbers",
        "_histories",
        "_merges",
        "_merges_of",
        "_spans",
        "_window",
    )

    def __init__(self, histories: list[list[Message]], cache: HistoryCache) -> None:
        self._histories = histories  # the trace's calls' histories, in merge order
        counted = Counter(map(id, histories))
        self._eager = [counted[id(history)] > 1 or cache.holds(history) for history in histories]
        self._eager_numbers = [number for number, eager in enumerate(self._eager) if eager]  # few, if any
        self._current = 0  # the history being merged
        self._merges: list[tuple[int, int, dict[int, Message]]] = []  # (start, end, counterparts)
        self._merges_of: dict[int, list[int]] = {}  # a message's id -> the merges that replaced it
        self._spans: list[tuple[int, int]] = []  # the positions the merges spanned: sorted, disjoint
        self._window: _CaughtUpWindow | None = None  # the latest catch-up's

    def add(self, counterparts: dict[int, Message], start: int, end: int) -> None:
        """One merge's replacements (by the copy's id), at the positions ``start`` to ``end`` of a
        history (and its own leading system prompts): what :func:`adopt_in` would be given."""
        for later in self._eager_numbers:
            if later > self._current:
                history = self._histories[later]
                adopt_in(history, counterparts, start, end + leading_system_prompts(history))
        number = len(self._merges)
        self._merges.append((start, end, counterparts))
        self._spans = _united(self._spans, max(0, start), end)
        for key in counterparts:
            self._merges_of.setdefault(key, []).append(number)

    def catch_up(self, current: int) -> None:
        """The history of the ``current`` call (in merge order), about to be merged, caught up."""
        self._current = current
        if not self._merges or self._eager[current]:
            return
        history = self._histories[current]
        lead, size = leading_system_prompts(history), len(history)
        low = self._spans[0][0]
        high = max(low, min(self._spans[-1][1] + lead, size))
        as_read = history[low:high] if high - low >= _WINDOW_WORTH_KEEPING else None
        window = self._window  # taken over, or None
        if (
            window is not None
            and not (
                window.lead == lead  # a merge reaches as far past its end as the history's lead
                # (map stops at the shorter list: a history shorter than the window would pass)
                and window.high <= size
                and all(map(operator.is_, history[window.low : window.high], window.as_read))
            )
        ):
            window = None
        if window is not None:
            history[window.low : window.high] = window.caught_up
        looked = 0  # positions below were looked at
        for start, end in self._spans:
            first, stop = max(start, looked), min(end + lead, size)
            if window is None:
                outside_window: Iterable[int] = range(first, stop)  # (cheaper than a chain of two)
            else:
                before, after = range(first, min(stop, window.low)), range(max(first, window.high), stop)
                outside_window = itertools.chain(before, after)
            for position in outside_window:
                history[position] = self._replayed(history[position], position, lead, 0)
            looked = max(looked, end + lead)
        if window is not None:
            # The window holds what the merges before window.merges did: only those since can change it.
            newly_spanned = {
                position
                for start, end, _ in self._merges[window.merges :]
                for position in range(max(start, window.low), min(end + lead, window.high))
            }
            for position in newly_spanned:  # each once: a replay starts from the window's message
                history[position] = self._replayed(history[position], position, lead, window.merges)
        self._window = (
            None
            if as_read is None
            else _CaughtUpWindow(low, high, lead, len(self._merges), as_read, history[low:high])
        )

    def _replayed(self, message: Message, position: int, lead: int, since: int) -> Message:
        """What the merges numbered ``since`` and later make of ``message`` at ``position`` of a
        history with ``lead`` leading system prompts: each merge that spans the position and
        replaced the message there, in merge order."""
        merges, merges_of = self._merges, self._merges_of
        after = since - 1  # the latest merge that replaced the message here
        numbers = merges_of.get(id(message))
        while numbers is not None:
            for number in numbers:
                if number > after and merges[number][0] <= position < merges[number][1] + lead:
                    message, after = merges[number][2][id(message)], number
                    break
            else:
                break  # no later merge spanning this position replaced this message
            numbers = merges_of.get(id(message))
        return message


# A catch-up over fewer positions is not remembered: copying and comparing its window would cost
# more than looking them up again (the agent workload's traces of 2-4 calls span 4-6 positions).
_WINDOW_WORTH_KEEPING = 16


@dataclass(slots=True)
class _CaughtUpWindow:
    """Positions ``low`` to ``high`` of a history with ``lead`` leading system prompts: as read, and
    as caught up with the trace's first ``merges`` merges."""

    low: int
    high: int
    lead: int
    merges: int
    as_read: list[Message]
    caught_up: list[Message]


def _united(spans: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """The sorted, disjoint ``spans`` and [start, end), as sorted, disjoint spans."""
    kept = [(a, b) for a, b in spans if b < start or a > end]  # neither overlapping nor touching
    joined = [(a, b) for a, b in spans if not (b < start or a > end)]
    start = min([start, *(a for a, _ in joined)])
    end = max([end, *(b for _, b in joined)])
    return sorted([*kept, (start, end)])


def _first_new_in(state: ConversationState, body: list[Message], snapshot: list[int]) -> int:
    """Index of the first snapshot message the conversation does not hold yet; ``snapshot`` holds
    the fingerprints of the history's ``body`` and then of the answer.

    An answer recorded as one message with its text and several tool calls may come back in the
    next history as one assistant message per part (OpenAI's Responses API resends each output
    item; openai-agents and others write one message per parallel call). When the history does not
    line up with the conversation as read, it is walked again beside the conversation, where a run
    of consecutive assistant messages may stand for one held message (:func:`_walk_joining_runs`),
    and that reading is taken when it reaches the conversation's end."""
    resumed = _resumed_walk(state, body, snapshot)
    if resumed is not None:
        return resumed
    first, aligned = _first_new(state, snapshot, body)
    if aligned or not body:
        return first
    starts_with_calls = body[0].role is Role.ASSISTANT and bool(body[0].tool_calls)
    if not (starts_with_calls or _has_assistant_run(body)):
        return first
    for index, position in _walk_starts(state, body, snapshot, starts_with_calls):
        walked = _walk_joining_runs(state, body, snapshot, index, position)
        if walked is not None:
            return walked
    return first


def _walk_starts(
    state: ConversationState, body: list[Message], snapshot: list[int], starts_with_calls: bool
) -> Iterator[tuple[int, int]]:
    """Where to walk a history beside the history index from, (history index, held position), in
    order: the start, for a whole history; where the first message kept comes, for a conversation
    trimmed; after a run's last parts a window kept; from where a message the conversation holds
    comes again (the history's earlier messages being part of a run a window cut)."""
    held = state.body_fingerprints
    if not state.body_trimmed and snapshot[0] == state.first_body_fingerprint:
        yield 0, 0
    if state.body_trimmed:
        # A whole history of a conversation trimmed to its latest messages: where the kept part starts.
        start = _start_of_kept(body, snapshot, held[0])
        if start is not None:
            yield start, 0
    if starts_with_calls:
        after_tail = _after_tail_of_held_answer(state, body)
        if after_tail is not None:
            yield after_tail
    tried = 0
    for index in range(min(len(body), _JOINED_START_SCAN)):
        for position in _held_positions_of(state, body, snapshot, index):
            if (position == 0 and state.body_trimmed > 0) or all(
                message.role is Role.ASSISTANT for message in body[:index]
            ):
                yield index, position
            tried += 1
            if tried >= _JOINED_STARTS_TRIED:
                return


def _resumed_walk(state: ConversationState, body: list[Message], snapshot: list[int]) -> int | None:
    """The previous walk's end, when this history resends the same messages up to it (the history
    cache hands back the same objects for a resent prefix only): the rest walked from there. Tried
    before the other rules, which would fail on a history resent per part after a linear search."""
    resume = state.walk_resume
    if resume is None:
        return None
    position, index, last = resume[0] - state.body_trimmed, resume[1], resume[2]
    if 0 <= position <= len(state.body_fingerprints) and 0 < index <= len(body) and body[index - 1] is last:
        return _walk_joining_runs(state, body, snapshot, index, position)
    return None


def _start_of_kept(body: list[Message], snapshot: list[int], first_kept: int) -> int | None:
    """Where in the history the conversation's first kept message comes (trim() dropped the ones
    before): by its fingerprint, else as the start of a run of assistant messages read as one."""
    try:
        return snapshot.index(first_kept, 0, len(body))
    except ValueError:
        pass
    for index, message in enumerate(body):
        if (
            message.role is Role.ASSISTANT
            and (index == 0 or body[index - 1].role is not Role.ASSISTANT)
            and _run_matching(body, index, first_kept) is not None
        ):
            return index
    return None


def _after_tail_of_held_answer(state: ConversationState, body: list[Message]) -> tuple[int, int] | None:
    """A history cut inside the run that stands for a held answer starts with that run's last parts:
    calls without text, the last calls of one of the conversation's latest answers. Where the
    history and the history index go on after them; None when the history starts otherwise."""
    end = 1
    while end < len(body) and body[end].role is Role.ASSISTANT:
        end += 1
    if any(message.content for message in body[:end]):
        return None
    tail = [_call_key(call) for message in body[:end] for call in message.tool_calls]
    if not tail:
        return None
    for held in reversed(state.conversation.messages[-_COUNTERPART_WINDOW:]):
        keys = [_call_key(call) for call in held.tool_calls]
        # not a part: the window holds it all (the stored text: a compacted one is not expanded)
        whole = len(keys) == len(tail) and not stored_message_text(held)
        if (
            held.role is Role.ASSISTANT
            and len(keys) >= len(tail)
            and keys[-len(tail) :] == tail
            and not whole
        ):
            known = state.body_positions.get(fingerprint(held))
            if known is None:
                return None
            return end, (known if isinstance(known, int) else known[-1]) + 1
    return None


def _call_key(call: ToolCall) -> object:
    return call.id or (call.name, _canonical(call.arguments))


def _held_positions_of(
    state: ConversationState, body: list[Message], snapshot: list[int], index: int
) -> list[int]:
    """Where the history index holds ``body[index]``, latest first; for the first message of a run of
    assistant messages, where it holds the run (or its start) read as one."""
    positions = state.body_positions
    if body[index].role is Role.ASSISTANT:
        if index and body[index - 1].role is Role.ASSISTANT:
            return []  # inside a run: the run is looked for from its first message
        found: list[int] = []
        end = index + 1
        while end < len(body) and body[end].role is Role.ASSISTANT:
            end += 1
            known = positions.get(_fingerprint(_joined(body[index:end])))
            if known is not None:
                found += reversed((known,) if isinstance(known, int) else known)
        return found
    known = positions.get(snapshot[index])
    if known is None:
        return []
    return list(reversed((known,) if isinstance(known, int) else known))


_JOINED_START_SCAN = 32  # the history's first messages looked at for one the conversation holds
_JOINED_STARTS_TRIED = 2  # where a windowed history may start again with a held message


def _walk_joining_runs(
    state: ConversationState, body: list[Message], snapshot: list[int], index: int, position: int
) -> int | None:
    """Walk ``snapshot`` from ``index`` beside the conversation's history index from ``position``:
    equal fingerprints advance both; a held assistant message may also match a run of the body's
    consecutive assistant messages read as one. The snapshot index where the conversation ends,
    or None where they part (or the snapshot ends first: an older snapshot, left to the rules
    before)."""
    held = state.body_fingerprints
    joined = state.joined_runs
    while position < len(held):
        if index >= len(snapshot):
            return None
        if snapshot[index] == held[position]:
            index, position = index + 1, position + 1
            continue
        if index >= len(body) or body[index].role is not Role.ASSISTANT:
            return None
        # Matched before: the history cache hands back the same messages for the part resent.
        run = joined.get(state.body_trimmed + position) if joined is not None else None
        if run is not None and all(
            offset + index < len(body) and body[index + offset] is member for offset, member in enumerate(run)
        ):
            index, position = index + len(run), position + 1
            continue
        end = _run_matching(body, index, held[position])
        if end is None:
            return None
        if joined is None:
            joined = state.joined_runs = {}
        joined[state.body_trimmed + position] = tuple(body[index:end])
        if len(joined) > _JOINED_RUNS_KEPT:
            del joined[next(iter(joined))]
        index, position = end, position + 1
    if 0 < index <= len(body):
        state.walk_resume = (state.body_trimmed + position, index, body[index - 1])
    return index


_JOINED_RUNS_KEPT = 512  # runs remembered per conversation (their messages are the history cache's)


def _run_matching(body: list[Message], start: int, held_fingerprint: int) -> int | None:
    """The end of the run of assistant messages from ``start`` that, read as one message, has
    ``held_fingerprint``; None when no prefix of at least two of them does."""
    end = start + 1
    while end < len(body) and body[end].role is Role.ASSISTANT:
        end += 1
        if _fingerprint(_joined(body[start:end])) == held_fingerprint:
            return end
    return None


def _has_assistant_run(body: list[Message]) -> bool:
    return any(
        earlier.role is Role.ASSISTANT and later.role is Role.ASSISTANT
        for earlier, later in itertools.pairwise(body)
    )


def _joined(run: list[Message]) -> Message:
    """One assistant message with the texts and tool calls of ``run``, in order (compared, never shown)."""
    texts = [message.content for message in run if message.content]
    calls = [call for message in run for call in message.tool_calls]
    return Message(Role.ASSISTANT, " ".join(texts) if texts else None, tool_calls=calls)


def _first_new(state: ConversationState, snapshot: list[int], body: list[Message]) -> tuple[int, bool]:
    """Index of the first snapshot message the conversation does not hold yet, and whether the
    snapshot lined up with the conversation as it was read (whole, as an older snapshot, or as a
    window of its latest messages) rather than by a looser reading (a condensed history) or not
    at all."""
    held = state.body_fingerprints
    if not held:
        return 0, True
    total = state.body_trimmed + len(held)
    # The whole history resent from its start (stateless chat APIs): the common case. Parallel
    # calls' results may come back in another order than the conversation took them in (the order
    # they finished, then the order they were asked in): the same history still.
    if snapshot[0] == state.first_body_fingerprint and len(snapshot) >= total:
        offset = total - len(held)
        if snapshot[offset:total] == held or _same_but_results_reordered(snapshot, body, held, offset):
            return total, True
    # An older snapshot, seen late: it is already inside the conversation.
    known = state.body_positions.get(snapshot[0], ())
    for start in reversed((known,) if isinstance(known, int) else known):
        if held[start : start + len(snapshot)] == snapshot:
            return len(snapshot), True
    # A window of recent history (or the latest messages again) followed by new ones: where the
    # snapshot repeats the most of the conversation's latest messages (the earliest such place). A
    # window that starts with a copy of the latest answer ("Done.") repeats one message there, and
    # the whole tail further on.
    latest = held[-1]
    best, best_overlap = -1, 0
    for index, fp in enumerate(snapshot):
        if fp == latest:
            overlap = min(len(held), index + 1)
            if (
                overlap > best_overlap
                and snapshot[index + 1 - overlap : index + 1] == held[len(held) - overlap :]
            ):
                best, best_overlap = index + 1, overlap
    if best >= 0:
        return best, True
    # The app resends a condensed history: earlier turns without their tool steps (many agent
    # frameworks keep only the final answers). The snapshot then repeats, in order, a subset of the
    # conversation that ends with its latest user message or answer.
    spoken = state.last_spoken
    if spoken >= 0:
        found = _resent_as_subset(held, snapshot, spoken)
        if found is not None:
            return found, False
    # The same, the history leaving out the conversation's latest messages: a side call's answer the
    # conversation took in (a title, a summary), which the agent's next history does not carry.
    # Only the history before its latest user message is looked in, and at least one earlier message
    # must come with the one found: the new turn (a repeated "yes", an answer that repeats an earlier
    # failure) is new, whatever it repeats.
    resent = snapshot[: max((i for i, m in enumerate(body) if m.role is Role.USER), default=0)]
    for position in range(len(held) - 2, max(-1, len(held) - 1 - _OMITTED_LATEST), -1):
        if position != spoken:
            found = _resent_as_subset(held, resent, position, with_earlier=True)
            if found is not None:
                return found, False
    # Nothing in common: an API that sends only the new turn.
    return 0, False


def _same_but_results_reordered(
    snapshot: list[int], body: list[Message], held: list[int], offset: int
) -> bool:
    """Whether ``snapshot[offset:]`` begins with ``held`` but for the order of tool results within
    runs of consecutive ones (``body``: the snapshot's history, its messages' roles)."""
    end = offset + len(held)
    index = offset
    while index < end:
        if index < len(body) and body[index].role is Role.TOOL:
            run_end = index + 1
            while run_end < min(end, len(body)) and body[run_end].role is Role.TOOL:
                run_end += 1
            if sorted(snapshot[index:run_end]) != sorted(held[index - offset : run_end - offset]):
                return False
            index = run_end
        elif snapshot[index] != held[index - offset]:
            return False
        else:
            index += 1
    return True


_OMITTED_LATEST = 4  # of the conversation's latest messages, how many a resent history may leave out


def _resent_as_subset(
    held: list[int], snapshot: list[int], position: int, with_earlier: bool = False
) -> int | None:
    """Where the snapshot's new messages start when it repeats, in order, a subset of the
    conversation up to ``held[position]`` ending with that message (``with_earlier``: and at least
    one message before it); None when it does not."""
    for index in range(len(snapshot) - 1, 0 if with_earlier else -1, -1):
        if snapshot[index] == held[position] and _is_subsequence(snapshot[:index], held[:position]):
            # What follows that message may be held too (the tool steps of this turn).
            matched, position = index + 1, position + 1
            while matched < len(snapshot) and position < len(held) and snapshot[matched] == held[position]:
                matched, position = matched + 1, position + 1
            return matched
    return None


def _spoken(message: Message) -> bool:
    return message.role is Role.USER or (message.role is Role.ASSISTANT and bool(message.content))


def _is_subsequence(needle: list[int], haystack: list[int]) -> bool:
    remaining = iter(haystack)
    return all(any(fp == candidate for candidate in remaining) for fp in needle)


def _attach_tool_execution(
    state: ConversationState, view: SpanView, execution: ToolExecution, tool_results: _ToolResults
) -> None:
    """Give the tool result message its failure details, or add it when no history carried it."""
    result = execution.result
    messages = state.conversation.messages
    at = tool_results.find(execution)
    if at is None:
        result.arguments = execution.arguments
        message = Message(Role.TOOL, content=result.content, tool_result=result, span_id=view.span_id)
        state.shared.share((message,))  # the next call's history resends this result
        state.append(message, indexed=False)
        state.provisional.append(message)
        return
    target = messages[at]
    existing = target.tool_result or ToolResult(call_id=execution.call_id, name=execution.name)
    target.tool_result = existing
    existing.name = existing.name or execution.name
    if existing.arguments is None and execution.arguments is not None:
        existing.arguments = execution.arguments
        call = _call_answered_by(messages, at, existing)
        if call is not None:
            _share_with_call(existing, call)
    if result.is_error:
        existing.is_error = True
        existing.error_type = existing.error_type or result.error_type
        existing.error_message = existing.error_message or result.error_message
        existing.status_code = existing.status_code or result.status_code
    if target.content is None and result.content is not None:
        target.content = result.content
        existing.content = result.content
        state.decoder_memory.text_given()


def _call_answered_by(messages: list[Message], at: int, result: ToolResult) -> ToolCall | None:
    """The tool call ``result`` (of the message at index ``at``) answers, by its id, among the
    _COUNTERPART_WINDOW messages before it."""
    if result.call_id:
        for index in range(at - 1, max(-1, at - 1 - _COUNTERPART_WINDOW), -1):
            for call in messages[index].tool_calls:
                if call.id == result.call_id:
                    return call
    return None


# A tool span's result is looked for among the conversation's latest messages first: read with
# the trace's model calls, it is usually a few messages back.
TOOL_RESULT_WINDOW = 64


class _ToolResults:
    """The tool result message each of one trace's tool spans gives its details to (apply_trace).

    A trace whose model calls resend their tool results before its tool spans are read (the agent
    ran many tools in one turn) finds each result far back, and a search from the end for each tool
    span went over the whole history every time: on the real agent trajectories, 2,440 of 5,334
    tool spans looked past their latest 64 messages. A span now looks at the latest
    :data:`TOOL_RESULT_WINDOW` messages; the first with a call id to find nothing there builds a
    table of the latest result of each call id, and the trace's later spans with a call id look it
    up there (those without one search on by tool name). The answer is the one the search from the
    end gives: the latest result with that call id that is not a tool span's own (provisional)
    message. While a trace's tool spans are read, only provisional messages are added (at the end)
    and none leaves the conversation, so the table stays right for the rest of the trace."""

    __slots__ = ("_by_call_id", "_state")

    def __init__(self, state: ConversationState) -> None:
        self._state = state
        self._by_call_id: dict[str, int] | None = None

    def find(self, execution: ToolExecution) -> int | None:
        """Index of the tool result message ``execution`` gives its details to."""
        call_id = execution.call_id
        if call_id and self._by_call_id is not None:
            return self._by_call_id.get(call_id)
        messages = self._state.conversation.messages
        # A provisional result is another tool span's own execution: never the target of this one.
        provisional_ids = {id(message) for message in self._state.provisional}
        window_start = max(0, len(messages) - TOOL_RESULT_WINDOW)
        at = _search_back(messages, execution, provisional_ids, len(messages), window_start)
        if at is not None or window_start == 0:
            return at
        if not call_id:  # by tool name (some conventions omit the id): rare, searched on
            return _search_back(messages, execution, provisional_ids, window_start, 0)
        self._by_call_id = _latest_results(messages, provisional_ids)
        return self._by_call_id.get(call_id)


def _search_back(
    messages: list[Message], execution: ToolExecution, provisional_ids: set[int], end: int, start: int
) -> int | None:
    """The latest index in [start, end) of a result ``execution`` gives its details to: by its call
    id, or without one the latest result of that tool not yet given them."""
    call_id = execution.call_id
    for index in range(end - 1, start - 1, -1):
        message = messages[index]
        result = message.tool_result
        if message.role is not Role.TOOL or result is None or id(message) in provisional_ids:
            continue
        if call_id:
            if result.call_id == call_id:
                return index
        elif result.name == execution.name and result.arguments is None:
            return index
    return None


def _latest_results(messages: list[Message], provisional_ids: set[int]) -> dict[str, int]:
    """Call id → index of its latest tool result message, provisional ones left out."""
    latest: dict[str, int] = {}
    for index, message in enumerate(messages):
        result = message.tool_result
        if (
            message.role is Role.TOOL
            and result is not None
            and result.call_id
            and id(message) not in provisional_ids
        ):
            latest[result.call_id] = index
    return latest
