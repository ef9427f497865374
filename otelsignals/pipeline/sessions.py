"""Conversation state kept between traces, bounded by age, count and estimated bytes; every
eviction is counted."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from sys import getsizeof

import orjson

from otelsignals.compaction import stored_message_text, stored_result_text
from otelsignals.conversation import ConversationState
from otelsignals.model import Message, Role
from otelsignals.signals.detect import REBUILT_WHEN_MISSING

# What one open conversation's messages cost in memory, as a function of what they hold: least
# squares of the measured deep sizes of conversation states (bench/session_memory.py: the 473 real
# agent conversations of the development set and the tool-using agent workload), less their
# records (records_bytes), on the bytes its texts take as Python strings (1, 2 or 4 bytes per
# character, whichever their widest character needs), the tool-call arguments as JSON characters,
# its messages, and the conversation itself, rounded up (the fit of 2026-11-29: 1.08, 9.9, 171 and
# 17,360). The messages, the detectors' prepared text and the history cache grow with these.
# Arguments cost far more than their JSON text: they are kept parsed (a dict, its keys, its values).
# A conversation's system prompt is left out: the store counts each such string once, whatever
# number of conversations hold it (SessionStore.resize).
BYTES_PER_TEXT_BYTE = 1.12
BYTES_PER_ARGUMENT_CHARACTER = 22
BYTES_PER_MESSAGE = 400
BYTES_PER_CONVERSATION = 22_000
# The same for a cold conversation (sessions.cold_after: ConversationState.go_cold), which no longer
# holds the detectors' prepared texts, the history cache, the latest split history, the history
# index's positions nor the recent texts kept for sharing. With room above as for a warm one: 1.53
# and 1.40 times the measured cold states of the real set and the workload, none under (the lowest
# 1.03 and 1.16; bench/session_memory.py --cold, 2026-12-01; the least-squares fit there: 0.99 x
# text storage, 8.1 x argument characters, -15 a message and 9.9 KB).
BYTES_PER_COLD_MESSAGE = 200
BYTES_PER_COLD_CONVERSATION = 12_000
# The records a conversation keeps of its latest traces, signals, model calls and tool calls
# (RECENT_SIGNALS, RECENT_MODEL_CALLS, TOOL_NAMES_KEPT), whatever number of messages it keeps: a
# conversation trimmed to sessions.max_messages still holds them (records_bytes). Measured on the
# real set and the workload: 523-539 bytes a trace (its metrics, analysed span, latency, where its
# messages end, its id), 435-447 a signal (snippet and metadata; 684 with a snippet of 200
# characters that Python keeps at 4 bytes each), 83-98 a model call, ~130 a tool call's id and name.
BYTES_PER_TRACE = 600
BYTES_PER_SIGNAL = 700
BYTES_PER_MODEL_CALL = 100
BYTES_PER_TOOL_NAME = 150
# A message the span decoder's history cache holds and the conversation does not (_copies_bytes),
# besides its text and arguments: the message and its tool result (~180 bytes), its tool-call list
# and calls, its fingerprint, and its places in the cache's histories and the latest split.
BYTES_PER_HELD_COPY = 400
# A position of an indexed history in the cache (OpenLLMetry, OpenInference, GenAI events): its raw
# key (the entry or event read for it, built anew, its values the decoder's) and its end. Measured
# beyond everything else counted, on the demo conversations of those conventions trimmed to 10
# messages or not: 63-457 bytes, whatever the texts' length.
BYTES_PER_INDEXED_POSITION = 500
# A character of the conversation's tool definitions as JSON (ConversationState.
# tool_definition_characters): kept parsed, as dicts, lists and strings, 3.5 bytes a character for
# 24 OpenAI-style function schemas (28 KB of JSON); counted for every conversation that keeps them,
# though conversations sent the same definitions share one set of objects (conventions.base.
# tool_definitions), so the estimate errs high there.
BYTES_PER_TOOL_DEFINITION_CHARACTER = 4


def estimated_bytes(messages: Sequence[Message]) -> int:
    """The memory ``messages`` hold in a conversation's state, estimated (see above), but for the
    text of its system prompt (:func:`system_prompt`)."""
    return _estimate(
        text_storage_bytes(messages[_leading_prompts(messages) :]),
        argument_characters(messages),
        len(messages),
    )


def records_bytes(state: ConversationState) -> int:
    """The memory of ``state``'s records of traces, signals, model calls and tool calls, estimated."""
    return (
        BYTES_PER_TRACE * len(state.trace_spans)
        + BYTES_PER_SIGNAL * len(state.recent_signals)
        + BYTES_PER_MODEL_CALL * len(state.conversation.llm_calls)
        + BYTES_PER_TOOL_NAME * len(state.tool_names)
    )


def _bytes_beside_messages(state: ConversationState) -> int:
    """What ``state`` holds that does not follow its messages, counted anew on each resize: its
    records, its tool definitions, the latest answers' embeddings and the span decoder's records of
    the latest long spans (with the indexed conventions, OpenLLMetry, OpenInference and GenAI
    events, their values are the history's text again)."""
    return (
        records_bytes(state)
        + sum(output.nbytes for output in state.previous_outputs)
        + state.decoder_memory.spans.held_bytes()
        + BYTES_PER_TOOL_DEFINITION_CHARACTER * state.tool_definition_characters
    )


def system_prompt(messages: Sequence[Message]) -> str | None:
    """The text of the conversation's system prompt, kept first (conversation.py): one string that
    every conversation of an agent may share (conversation.SHARED_SYSTEM_PROMPTS)."""
    if not _leading_prompts(messages):
        return None
    text = stored_message_text(messages[0])  # never compacted: a system prompt is left plain
    return text if isinstance(text, str) else None


def _leading_prompts(messages: Sequence[Message]) -> int:
    """1 when the first message is the system prompt, whose text the store counts (once), else 0."""
    return 1 if messages and messages[0].role is Role.SYSTEM else 0


def _estimate(text_bytes: int, argument_characters: int, messages: int, cold: bool = False) -> int:
    return int(
        BYTES_PER_TEXT_BYTE * text_bytes
        + BYTES_PER_ARGUMENT_CHARACTER * argument_characters
        + (BYTES_PER_COLD_MESSAGE if cold else BYTES_PER_MESSAGE) * messages
        + (BYTES_PER_COLD_CONVERSATION if cold else BYTES_PER_CONVERSATION)
    )


def text_storage_bytes(messages: Sequence[Message]) -> int:
    """The bytes message and tool-result texts take (``sys.getsizeof``: the string's own size, read
    without looking at its characters). Filled in later for some messages (a tool output joins its
    call's result), so counted again on every resize."""
    size = 0
    for message in messages:
        content = stored_message_text(message)  # compacted text counted as kept, not expanded
        if content is not None:
            size += getsizeof(content)
        result = message.tool_result
        if result is not None:
            result_content = stored_result_text(result)
            if result_content is not None and result_content is not content:
                size += getsizeof(result_content)
    return size


def argument_characters(messages: Sequence[Message]) -> int:
    """Tool-call arguments as JSON text: set once when a call is read, so counted once."""
    return sum(_length(call.arguments) for message in messages for call in message.tool_calls)


def _length(arguments: object) -> int:
    if arguments is None:
        return 0
    if isinstance(arguments, str):
        return len(arguments)
    try:
        return len(orjson.dumps(arguments))
    except TypeError:  # not JSON after all
        return len(str(arguments))


# Text storage is counted again over the latest messages only: they are the ones whose text still
# changes (a tool output joining its call's result, compaction once they leave the detectors'
# plain window, analyzer.PLAIN_MESSAGES). The older ones are counted once, as they leave this tail,
# and all of them again every FULL_RECOUNT_EVERY resizes of the state (a held message compacted
# late, a result filled in far back: the count is high or low by those for at most that many
# traces) and whenever the messages counted before are no longer where they were (trimmed, a
# system prompt put in front). Counting every message on every trace cost a long conversation's
# turn time in proportion to its length (73 µs at 258 messages).
RECOUNTED_TAIL = 64
FULL_RECOUNT_EVERY = 16
# The history cache is counted again (_copies_bytes) once it has built that many more messages (or
# a quarter more than it held): a few long texts can weigh more than all the messages counted
# before.
COPIES_RECOUNT_GROWTH = 16


@dataclass(slots=True)
class _Size:
    """What was counted of a state's messages, from ``offset`` on: the arguments of the first
    ``counted`` (the last of them ``last_counted``), the text storage of the first ``settled``
    (``settled_bytes``), and the estimate then."""

    offset: int = 0
    counted: int = 0
    last_counted: Message | None = None
    argument_characters: int = 0
    settled: int = 0
    settled_bytes: int = 0
    since_full_count: int = 0
    bytes: int = 0
    system_prompt: str | None = None  # the one counted once by the store (_count_system_prompt)
    copies: int = 0  # _copies_bytes, as last counted
    copies_counted_at: int = 0  # the distinct messages and raw keys the history cache held then
    copies_built: int = 0  # the number it had built by then (HistoryCache.built)
    copies_age: int = FULL_RECOUNT_EVERY  # resizes since (the first resize counts them)

    def count(self, messages: Sequence[Message], offset: int) -> int:
        """Bring the counts up to date with ``messages``; their text storage (see RECOUNTED_TAIL)."""
        self.since_full_count += 1
        counted = self.counted
        grown = (
            offset == self.offset
            and len(messages) >= counted
            and (counted == 0 or messages[counted - 1] is self.last_counted)
        )
        if not grown or self.since_full_count >= FULL_RECOUNT_EVERY:
            # Trimmed, a message put in front (a system prompt), or time for a full count.
            counted = self.settled = self.settled_bytes = self.since_full_count = self.argument_characters = 0
        self.argument_characters += argument_characters(messages[counted:])
        first = _leading_prompts(messages)  # (a prompt put in front makes a full count: above)
        tail_start = max(0, len(messages) - RECOUNTED_TAIL)
        if tail_start > self.settled:
            self.settled_bytes += text_storage_bytes(messages[max(first, self.settled) : tail_start])
            self.settled = tail_start
        self.offset, self.counted = offset, len(messages)
        self.last_counted = messages[-1] if messages else None
        return self.settled_bytes + text_storage_bytes(messages[max(first, self.settled) :])


@dataclass(slots=True)
class _HeldPrompt:
    """A system prompt string counted once: how many sizes count it, and the bytes it added (a
    string's getsizeof grows once its UTF-8 form is asked for: the same bytes leave as came)."""

    text: str
    holders: int
    counted: int


def _copies_bytes(state: ConversationState) -> tuple[int, int]:
    """(What the span decoder's history cache and the conversation's recent texts hold that the
    conversation does not, the number of distinct messages and of raw keys the cache holds). Messages: copies
    never adopted (the Vercel AI SDK's outer span resends the caller's messages in a form of its
    own) and messages trimmed from the conversation since, their texts and tool calls only when
    the conversation does not hold those objects too; raw keys of indexed histories, with the
    texts they hold apart (a history resent from another start, a client's latest messages only,
    is read anew: its keys hold texts of their own); the recent texts kept to share a text read
    again, which may outlive their messages."""
    memory = state.decoder_memory
    # A history the analysis measured may outlive the cache's hold on it (limits.py).
    histories = memory.histories.message_lists() + [measured.body for measured in memory.measured]
    raw_keys = memory.histories.raw_keys()
    shared_texts = state.shared.texts()
    if not (histories or raw_keys or shared_texts):
        return 0, 0  # nothing beside the conversation (a cold one): no pass over its messages
    messages = state.conversation.messages
    held = set(map(id, messages))
    held.update(id(stored_message_text(message)) for message in messages)
    held.update(id(message.tool_calls) for message in messages)
    copies = 0
    distinct: set[int] = set()  # the cache's messages, each once (its histories share most)
    for history in histories:
        distinct.update(map(id, history))
        for message in history:
            if id(message) in held:
                continue
            held.add(id(message))
            copies += BYTES_PER_HELD_COPY + _text_bytes(stored_message_text(message), held)
            result = message.tool_result
            if result is not None:
                copies += _text_bytes(stored_result_text(result), held)
            calls = message.tool_calls
            if calls and id(calls) not in held:
                held.add(id(calls))
                copies += BYTES_PER_ARGUMENT_CHARACTER * sum(_length(call.arguments) for call in calls)
    counted = len(distinct)
    distinct.clear()  # now the raw keys, each once (a fork holds the keys it shares)
    for raws, text_bytes in raw_keys:
        for raw, size in zip(raws, text_bytes, strict=True):
            if id(raw) not in distinct:
                distinct.add(id(raw))
                copies += BYTES_PER_INDEXED_POSITION + size
    counted += len(distinct)
    for text in shared_texts:
        copies += _text_bytes(text, held)
    return copies, counted


def _text_bytes(text: object, held: set[int]) -> int:
    """A text's size when nothing counted holds it yet (then it is)."""
    if text is None or id(text) in held:
        return 0
    held.add(id(text))
    return getsizeof(text)


class SessionStore:
    def __init__(
        self,
        ttl: float,
        max_sessions: int,
        on_evict: Callable[[ConversationState, str], None] = lambda state, reason: None,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = 0,
        cold_after: float = 0.0,
    ) -> None:
        self.ttl = ttl
        self.max_sessions = max_sessions
        # 0: no bound in bytes (only max_sessions).
        self.max_bytes = max_bytes
        # Idle this long, a conversation drops what its next trace rebuilds (cool_idle); 0: never.
        self.cold_after = cold_after
        # The keys of the conversations not cold, least recently active first (a conversation gone
        # cold leaves; its next trace brings it back at the end).
        self._warm: dict[str, None] = {}
        self._on_evict = on_evict
        self._clock = clock
        # Least recently active first, so both expiry and eviction pop from the front.
        self._states: OrderedDict[str, ConversationState] = OrderedDict()
        self._sizes: dict[str, _Size] = {}
        # Each system prompt string once, whatever number of conversations hold it, by its id (by
        # identity: equal strings apart are memory apart; the entry holds the string, so the id stays).
        self._prompts: dict[int, _HeldPrompt] = {}
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._states)

    @property
    def cold(self) -> int:
        """The conversations gone cold (idle, or over max_bytes) and not active since."""
        return len(self._states) - len(self._warm) if self.cold_after else 0

    def __iter__(self) -> Iterator[ConversationState]:
        return iter(list(self._states.values()))

    def get(self, key: str) -> ConversationState | None:
        return self._states.get(key)

    def touch(self, key: str) -> ConversationState:
        """The state for ``key`` (created if new), marked as active now."""
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = ConversationState.new(key)
        else:
            self._states.move_to_end(key)
        state.last_seen = self._clock()
        if self.cold_after:
            self._warm.pop(key, None)
            self._warm[key] = None
        while len(self._states) > self.max_sessions:
            self._evict_oldest("capacity")
        return state

    def resize(self, key: str) -> int:
        """Account for what ``key``'s state holds now (after a trace changed it); while the total is
        over ``max_bytes``, the least recently active other conversation goes cold if it is not,
        else is evicted. Returns how many went cold and stay (not evicted in the same call).

        Cold before evicted: a cold conversation's next turn costs more CPU (its history read
        whole), an evicted one's next trace starts a state that knows nothing of what was said. Only
        the least recently active goes cold, so a more recent one is never made to pay for one that
        ended long ago (the conversations idle for cold_after are cold already: they are evicted)."""
        state = self._states.get(key)
        if state is None:
            return 0
        self._count(state, self._sizes.setdefault(key, _Size()))
        # The state just changed is the last one evicted (it may alone be over the bound).
        self._states.move_to_end(key)
        cooled: set[str] = set()
        while self.max_bytes and self.bytes > self.max_bytes and len(self._states) > 1:
            oldest = next(iter(self._states))
            if oldest in self._warm:
                self._cool(oldest)
                cooled.add(oldest)
            else:
                cooled.discard(oldest)
                self._evict_oldest("bytes")
        return len(cooled)

    def cool_idle(self, now: float | None = None) -> int:
        """Let every conversation idle for ``cold_after`` (at ``now``, by default the clock's now)
        drop what its next trace rebuilds (ConversationState.go_cold), and count it anew; returns
        how many did."""
        if not self.cold_after:
            return 0
        deadline = (self._clock() if now is None else now) - self.cold_after
        warm = self._warm
        cooled = 0
        while warm:
            key = next(iter(warm))
            if self._states[key].last_seen > deadline:
                break
            self._cool(key)
            cooled += 1
        return cooled

    def _cool(self, key: str) -> None:
        """``key``'s conversation drops what its next trace rebuilds, and is counted anew."""
        del self._warm[key]
        state = self._states[key]
        state.go_cold(REBUILT_WHEN_MISSING)
        size = self._sizes.get(key)
        if size is not None:
            self._count(state, size, copies=True)

    def _count(self, state: ConversationState, size: _Size, copies: bool = False) -> None:
        """Estimate what ``state`` holds now into ``size`` and the total; ``copies``: count what its
        history cache and recent texts hold anew, whatever the rules below say."""
        messages = state.conversation.messages
        before = size.bytes
        text_bytes = size.count(messages, state.conversation.message_offset)
        cache = state.decoder_memory.histories
        built = cache.built - size.copies_built
        size.copies_age += 1
        if (
            copies
            or len(messages) + size.copies_counted_at + built <= 2 * RECOUNTED_TAIL
            or size.copies_age >= FULL_RECOUNT_EVERY
            or built >= max(COPIES_RECOUNT_GROWTH, size.copies_counted_at // 4)
            or built < 0  # a cache of its own again (the conversation resumed)
        ):
            # A pass over the history cache and the conversation: on every resize while both are
            # short, then every FULL_RECOUNT_EVERY resizes and whenever the cache has built 16 (or
            # a quarter) more messages than it held at the last pass. Not by the conversation's
            # length nor with its full counts: one trimmed to sessions.max_messages stays short,
            # and is counted in full on every trace, while the histories the client resends grow;
            # and not by the cache's size, which stays level while a client that resends its
            # latest messages only replaces them.
            size.copies, size.copies_counted_at = _copies_bytes(state)
            size.copies_built, size.copies_age, built = cache.built, 0, 0
        held_copies = size.copies
        if built and size.copies_counted_at >= COPIES_RECOUNT_GROWTH:
            # Between passes the messages built since are taken to be copies like those counted.
            held_copies += held_copies * built // size.copies_counted_at
        size.bytes = (
            _estimate(text_bytes, size.argument_characters, len(messages), state.cold)
            + _bytes_beside_messages(state)
            + held_copies
        )
        self.bytes += size.bytes - before
        self._count_system_prompt(size, system_prompt(messages))

    def expire(self) -> int:
        deadline = self._clock() - self.ttl
        expired = 0
        while self._states:
            state = next(iter(self._states.values()))
            if state.last_seen > deadline:
                break
            self._evict_oldest("ttl")
            expired += 1
        return expired

    def _evict_oldest(self, reason: str) -> None:
        key, evicted = self._states.popitem(last=False)
        self._warm.pop(key, None)
        size = self._sizes.pop(key, None)
        if size is not None:
            self.bytes -= size.bytes
            self._count_system_prompt(size, None)
        self._on_evict(evicted, reason)

    def _count_system_prompt(self, size: _Size, prompt: str | None) -> None:
        """Let ``size`` count ``prompt`` instead of the prompt it counted: a string's bytes are in
        ``self.bytes`` while at least one conversation's size counts it."""
        previous = size.system_prompt
        if prompt is previous:
            return
        if previous is not None:
            released = self._prompts[id(previous)]
            released.holders -= 1
            if not released.holders:
                del self._prompts[id(previous)]
                self.bytes -= released.counted
        if prompt is not None:
            held = self._prompts.get(id(prompt))
            if held is None:
                held = self._prompts[id(prompt)] = _HeldPrompt(prompt, 0, getsizeof(prompt))
                self.bytes += held.counted
            held.holders += 1
        size.system_prompt = prompt
