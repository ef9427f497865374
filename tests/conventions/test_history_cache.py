"""A history resent with one more turn is read only for the new turn, and gives what a full read
gives: the JSON history of the GenAI conventions, and the indexed histories of OpenLLMetry,
OpenInference and the deprecated GenAI message events."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from otelsignals.analysis import analyze_update
from otelsignals.conventions.base import Reader, SpanReading, SpanView, json_or_text
from otelsignals.conventions.decoding import UTF8_TEXT_MIN_BYTES, Utf8Text, decode_span
from otelsignals.conventions.genai import (
    GENAI_READER,
    INPUT_MESSAGES,
    SYSTEM_INSTRUCTIONS,
    otel_messages,
    system_message_of,
)
from otelsignals.conventions.memory import ConversationMemory, HistoryCache
from otelsignals.conventions.openinference import OPENINFERENCE_READER
from otelsignals.conventions.openllmetry import OPENLLMETRY_READER
from otelsignals.conventions.span_decoder import SpanDecoder
from otelsignals.conversation import ConversationState, apply_trace
from otelsignals.model import Message, Role
from tests.conventions.spans import make_span


def history(turns: int) -> str:
    messages = []
    for n in range(turns):
        messages.append({"role": "user", "parts": [{"type": "text", "content": f"question {n}"}]})
        messages.append({"role": "assistant", "parts": [{"type": "text", "content": f"answer {n}"}]})
    return orjson.dumps(messages).decode()


def test_only_the_new_tail_is_parsed_and_the_result_equals_a_full_parse():
    cache = HistoryCache()
    read_lengths: list[int] = []

    def read(value: Any) -> list[Message]:
        read_lengths.append(len(value))
        return otel_messages(value, b"s", Role.USER)

    for turns in range(1, 40):
        messages = cache.messages("gen_ai.input.messages", history(turns), read)
        full = otel_messages(history(turns), b"s", Role.USER)
        assert [(m.role, m.content) for m in messages] == [(m.role, m.content) for m in full]
    # After the first call every read is of the two new messages, never of the growing history.
    assert read_lengths[0] == 2 and set(read_lengths[1:]) == {2}


def test_a_history_that_does_not_extend_the_last_one_is_parsed_whole():
    cache = HistoryCache()
    read_lengths: list[int] = []

    def read(value: Any) -> list[Message]:
        read_lengths.append(len(value))
        return otel_messages(value, b"s", Role.USER)

    cache.messages("k", history(5), read)
    edited = history(5).replace("question 0", "question zero")
    messages = cache.messages("k", edited, read)
    assert read_lengths[-1] == 10
    assert messages[0].content == "question zero"


def prompt(turns: int, tail: str = "") -> str:
    """An AI SDK outer-span prompt: ``{system, messages}``, the messages array last."""
    messages = [{"role": "user", "content": f"question {n}"} for n in range(turns)]
    return orjson.dumps({"system": "Be brief.", "messages": messages}).decode()[:-1] + tail + "}"


def read_prompt(value: Any) -> list[Message]:
    if not isinstance(value, dict):
        return []
    system = [Message(Role.SYSTEM, content=value["system"])]
    return system + [Message(Role.USER, content=m["content"]) for m in value["messages"]]


def read_items(values: list[Any]) -> list[Message]:
    return [Message(Role.USER, content=m["content"]) for m in values]


def test_an_object_whose_last_array_grows_is_read_for_its_new_items_only():
    cache = HistoryCache()
    read_lengths: list[int] = []

    def items(values: list[Any]) -> list[Message]:
        read_lengths.append(len(values))
        return read_items(values)

    for turns in range(1, 12):
        messages = cache.messages("ai.prompt", prompt(turns), read_prompt, items, closing="]}")
        assert [m.content for m in messages] == [m.content for m in read_prompt(orjson.loads(prompt(turns)))]
    assert set(read_lengths) == {1}


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda text: text.replace('"question 0"', '"question zero"'), id="earlier item edited"),
        pytest.param(lambda text: text[:-1] + ',"prompt":"and then"}', id="a key after the array"),
        pytest.param(lambda text: text[:-2] + ',{"role":"user","content":"half', id="truncated"),
        pytest.param(lambda text: text.replace("Be brief.", "Be long."), id="another system prompt"),
    ],
)
def test_an_object_changed_otherwise_is_read_whole(edit: Callable[[str], str]):
    cache = HistoryCache()
    cache.messages("ai.prompt", prompt(3), read_prompt, read_items, closing="]}")
    changed = edit(prompt(4))
    messages = cache.messages("ai.prompt", changed, read_prompt, read_items, closing="]}")
    try:
        expected = read_prompt(orjson.loads(changed))
    except orjson.JSONDecodeError:
        expected = []
    assert [m.content for m in messages] == [m.content for m in expected]


def test_text_that_is_not_json_is_read_as_text_and_never_continued():
    cache = HistoryCache()
    seen: list[Any] = []

    def read(value: Any) -> list[Message]:
        seen.append(value)
        return otel_messages(value, b"s", Role.USER)

    truncated = history(3)[:-5]
    assert [m.content for m in cache.messages("k", truncated, read)] == [truncated]
    cache.messages("k", truncated + "x", read)
    assert seen == [truncated, truncated + "x"]


# -- indexed histories: OpenLLMetry, OpenInference, deprecated GenAI message events -----------------
def chat(turns: int) -> list[dict]:
    """An OpenAI-shaped history: a system prompt, then per turn a question, every second turn a
    tool call and its result, and an answer."""
    messages: list[dict] = [{"role": "system", "content": "You are the order assistant."}]
    for n in range(turns):
        messages.append({"role": "user", "content": f"where is order {n}?"})
        if n % 2:
            call = {"id": f"call_{n}", "name": "get_order", "arguments": orjson.dumps({"id": n}).decode()}
            messages.append({"role": "assistant", "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": f"order {n}: shipped"})
        messages.append({"role": "assistant", "content": f"order {n} is on its way"})
    return messages


def openllmetry_span(history: list[dict], answer: str) -> SpanView:
    attributes: dict[str, Any] = {"llm.request.type": "chat", "gen_ai.system": "openai"}
    for i, message in enumerate(history):
        prefix = f"gen_ai.prompt.{i}"
        attributes[f"{prefix}.role"] = message["role"]
        if message.get("content") is not None:
            attributes[f"{prefix}.content"] = message["content"]
        if "tool_call_id" in message:
            attributes[f"{prefix}.tool_call_id"] = message["tool_call_id"]
        for j, call in enumerate(message.get("tool_calls", ())):
            for field in ("id", "name", "arguments"):
                attributes[f"{prefix}.tool_calls.{j}.{field}"] = call[field]
    attributes["gen_ai.completion.0.role"] = "assistant"
    attributes["gen_ai.completion.0.content"] = answer
    attributes["gen_ai.completion.0.finish_reason"] = "stop"
    return make_span(attributes)


def openinference_span(history: list[dict], answer: str) -> SpanView:
    attributes: dict[str, Any] = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o"}
    for i, message in enumerate(history):
        prefix = f"llm.input_messages.{i}.message"
        attributes[f"{prefix}.role"] = message["role"]
        if message.get("content") is not None:
            attributes[f"{prefix}.content"] = message["content"]
        if "tool_call_id" in message:
            attributes[f"{prefix}.tool_call_id"] = message["tool_call_id"]
            attributes[f"{prefix}.name"] = "get_order"
        for j, call in enumerate(message.get("tool_calls", ())):
            attributes[f"{prefix}.tool_calls.{j}.tool_call.id"] = call["id"]
            attributes[f"{prefix}.tool_calls.{j}.tool_call.function.name"] = call["name"]
            attributes[f"{prefix}.tool_calls.{j}.tool_call.function.arguments"] = call["arguments"]
    attributes["llm.output_messages.0.message.role"] = "assistant"
    attributes["llm.output_messages.0.message.content"] = answer
    return make_span(attributes)


def genai_events_span(history: list[dict], answer: str) -> SpanView:
    events: list[tuple[str, dict[str, Any]]] = []
    for message in history:
        body: dict[str, Any] = {"gen_ai.system": "openai"}
        if message.get("content") is not None:
            body["content"] = message["content"]
        if "tool_call_id" in message:
            body["id"] = message["tool_call_id"]
        if "tool_calls" in message:
            calls = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in message["tool_calls"]
            ]
            body["tool_calls"] = orjson.dumps(calls).decode()
        events.append((f"gen_ai.{message['role']}.message", body))
    choice = {"index": 0, "finish_reason": "stop", "message": orjson.dumps({"content": answer}).decode()}
    events.append(("gen_ai.choice", {"gen_ai.system": "openai", **choice}))
    return make_span({"gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o"}, events)


CONVENTIONS: dict[str, tuple[Callable[[list[dict], str], SpanView], Reader]] = {
    "openllmetry": (openllmetry_span, OPENLLMETRY_READER),
    "openinference": (openinference_span, OPENINFERENCE_READER),
    "genai_events": (genai_events_span, GENAI_READER),
}


def described(messages: list[Message]) -> list[tuple]:
    """Everything a reading says about its messages: role, text, tool calls, tool results."""
    return [
        (
            m.role,
            m.content,
            [(c.name, c.arguments, c.id) for c in m.tool_calls],
            None
            if m.tool_result is None
            else (m.tool_result.call_id, m.tool_result.name, m.tool_result.content, m.tool_result.is_error),
            m.finish_reason,
        )
        for m in messages
    ]


def read(
    convention: str, history: list[dict], answer: str, cache: HistoryCache
) -> tuple[SpanReading, SpanReading]:
    """(the reading through ``cache``, a cache-less reading) of one span."""
    make, reader = CONVENTIONS[convention]
    cached_view, plain_view = make(history, answer), make(history, answer)
    cached_view.histories = cache
    cached, plain = reader.read(cached_view), reader.read(plain_view)
    assert cached is not None and plain is not None and cached.convention == plain.convention
    return cached, plain


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_a_growing_indexed_history_reads_as_without_the_cache_and_reuses_what_was_read(convention):
    cache = HistoryCache()
    previous: list[Message] = []
    for turns in range(1, 12):
        history = chat(turns)
        cached, plain = read(convention, history, f"answer {turns}", cache)
        assert described(cached.input_messages) == described(plain.input_messages)
        assert described(cached.output_messages) == described(plain.output_messages)
        assert any(m.tool_calls for m in plain.input_messages) == (turns > 1)
        assert any(m.tool_result for m in plain.input_messages) == (turns > 1)
        # What was read before comes back as the very same objects (fingerprints computed once).
        assert len(cached.input_messages) > len(previous)
        assert all(a is b for a, b in zip(cached.input_messages, previous, strict=False))
        # The answer is this call's own: never a message of the history.
        assert not any(o is i for o in cached.output_messages for i in cached.input_messages)
        previous = cached.input_messages


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_an_indexed_history_changed_in_the_middle_is_read_again_from_the_change(convention):
    cache = HistoryCache()
    history = chat(8)
    first, _ = read(convention, history, "a", cache)
    edited = [dict(m) for m in history]
    changed = next(i for i, m in enumerate(edited) if m.get("content") == "where is order 3?")
    edited[changed]["content"] = "where is order three?"
    cached, plain = read(convention, edited, "b", cache)
    assert described(cached.input_messages) == described(plain.input_messages)
    assert cached.input_messages[changed].content == "where is order three?"
    # Before the change: the same objects; from it on: built anew, even where equal to before.
    assert all(a is b for a, b in zip(cached.input_messages[:changed], first.input_messages, strict=False))
    assert not any(
        a is b for a, b in zip(cached.input_messages[changed:], first.input_messages[changed:], strict=True)
    )
    # Both versions stay known: the original history, resent, is read from the cache again.
    again, plain = read(convention, history, "c", cache)
    assert described(again.input_messages) == described(plain.input_messages)
    assert all(a is b for a, b in zip(again.input_messages, first.input_messages, strict=True))


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_a_shorter_or_unrelated_indexed_history_does_not_disturb_the_cache(convention):
    cache = HistoryCache()
    first, _ = read(convention, chat(6), "a", cache)
    # An older snapshot (a late span) and another agent's history, read in between.
    older, plain = read(convention, chat(3), "b", cache)
    assert described(older.input_messages) == described(plain.input_messages)
    assert all(a is b for a, b in zip(older.input_messages, first.input_messages, strict=False))
    other_history = [{"role": "user", "content": "summarise the tickets"}]
    other, plain = read(convention, other_history, "c", cache)
    assert described(other.input_messages) == described(plain.input_messages)
    # The conversation's own history still extends what was read of it.
    longer, plain = read(convention, chat(7), "d", cache)
    assert described(longer.input_messages) == described(plain.input_messages)
    assert all(a is b for a, b in zip(longer.input_messages, first.input_messages, strict=False))


def test_indexed_messages_are_reused_only_at_the_same_position_after_an_equal_prefix():
    cache = HistoryCache()
    built: list[str] = []

    def build(raw: str) -> list[Message]:
        built.append(raw)
        return [Message(Role.USER, content=raw)]

    first = cache.indexed("ns", ["a", "b", "c"], build)
    assert built == ["a", "b", "c"]
    # "b" at another position after a different prefix is built again.
    shifted = cache.indexed("ns", ["x", "b", "c"], build)
    assert built[3:] == ["x", "b", "c"] and shifted[1] is not first[1]
    # Another namespace never shares messages, even for equal raw keys.
    elsewhere = cache.indexed("other", ["a", "b", "c"], build)
    assert not any(a is b for a, b in zip(elsewhere, first, strict=True))
    # A position building no message (an empty entry) keeps the positions after it in step.
    cache.indexed("gaps", ["a", "", "c"], lambda raw: [Message(Role.USER, content=raw)] if raw else [])
    again = cache.indexed("gaps", ["a", "", "c", "d"], lambda raw: [Message(Role.USER, content=raw)])
    assert [m.content for m in again] == ["a", "c", "d"]
    assert cache.indexed("ns", [], build) == []


def counting_reader(read_lengths: list[int]) -> Callable[[Any], list[Message]]:
    """``otel_messages`` as a history's reader, noting how many values each read was given."""

    def read(value: Any) -> list[Message]:
        read_lengths.append(len(value))
        return otel_messages(value, b"s", Role.USER)

    return read


def spoken(turns: int) -> str:
    """A history whose words take 1 to 4 UTF-8 bytes each."""
    return history(turns).replace("question", "café ≠ 質問 🙂").replace("answer", "réponse “quoted”")


def test_a_history_with_multibyte_text_is_continued_by_its_bytes():
    # The head is compared as UTF-8 bytes: characters of 2, 3 and 4 bytes before the new tail must
    # not shift where the tail is cut.
    cache = HistoryCache()
    read_lengths: list[int] = []
    read = counting_reader(read_lengths)
    for turns in (3, 4, 5):
        messages = cache.messages("gen_ai.input.messages", spoken(turns), read)
        assert [m.content for m in messages] == [
            m.content for m in otel_messages(spoken(turns), b"s", Role.USER)
        ]
    assert read_lengths == [6, 2, 2]
    edited = spoken(5).replace("質問 🙂 0", "質問 🙃 0")
    assert cache.messages("gen_ai.input.messages", edited, read)[0].content == "café ≠ 質問 🙃 0"
    assert read_lengths[-1] == 10


# -- a history decoded from a span as its UTF-8 bytes (decoding.Utf8Text) --------------------------
def decoded_input(text: str) -> Any:
    """``gen_ai.input.messages`` as the span decoder hands it to the readers."""
    span = Span(attributes=[KeyValue(key=INPUT_MESSAGES, value=AnyValue(string_value=text))])
    return decode_span(span.SerializeToString(), None)[1][INPUT_MESSAGES]


def test_a_long_history_comes_as_utf8_bytes_and_a_short_one_as_text():
    long, short = history(40), history(1)
    assert len(long.encode()) >= UTF8_TEXT_MIN_BYTES > len(short.encode())
    assert isinstance(decoded_input(long), Utf8Text) and str(decoded_input(long)) == long
    assert decoded_input(short) == short


def test_a_history_read_as_bytes_continues_one_read_as_text_and_reads_as_a_full_parse():
    cache = HistoryCache()
    read_lengths: list[int] = []
    read = counting_reader(read_lengths)
    for turns in range(1, 30):  # text while short, bytes once long: one cache across both
        value = decoded_input(spoken(turns))
        messages = cache.messages(INPUT_MESSAGES, value, read)
        full = otel_messages(spoken(turns), b"s", Role.USER)  # the str as it was sent, parsed whole
        assert [(m.role, m.content) for m in messages] == [(m.role, m.content) for m in full]
    assert any(isinstance(decoded_input(spoken(turns)), Utf8Text) for turns in range(1, 30))
    assert set(read_lengths) == {2}  # the cache read only the new messages, as text and as bytes


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("  \n" + history(40), id="JSON after whitespace"),
        pytest.param("not JSON " * 200, id="text"),
        pytest.param("[" + "x" * 2000, id="broken JSON"),
        pytest.param(" " * 1500, id="only whitespace"),
    ],
)
def test_long_text_as_bytes_reads_as_the_same_text_would(text: str):
    value = decoded_input(text)
    assert isinstance(value, Utf8Text)
    assert str(value) == text and len(value) == len(text.encode())
    assert json_or_text(value) == json_or_text(text)


def test_a_field_the_schema_does_not_know_is_not_read_as_part_of_the_text():
    # An AnyValue from a newer schema may carry a field this one does not define: upb keeps it and
    # serializes it after the string, which must not end up in the text.
    text = history(40)
    value = AnyValue(string_value=text).SerializeToString() + b"\x98\x01\x07"  # field 19, varint 7
    span = Span(attributes=[KeyValue(key=INPUT_MESSAGES, value=AnyValue.FromString(value))])
    decoded = decode_span(span.SerializeToString(), None)[1][INPUT_MESSAGES]
    assert isinstance(decoded, Utf8Text) and str(decoded) == text
    assert json_or_text(decoded) == orjson.loads(text)


def test_an_empty_history_is_not_continued_by_what_follows_its_bracket():
    cache = HistoryCache()
    read = lambda value: otel_messages(value, b"s", Role.USER)  # noqa: E731
    assert cache.messages(INPUT_MESSAGES, "[]", read) == []
    broken = '[,{"role":"user","parts":[{"type":"text","content":"hi"}]}]'  # not JSON
    assert [m.content for m in cache.messages(INPUT_MESSAGES, broken, read)] == [broken]


# --- A text written again with every call: the system prompt (HistoryCache.repeated) -------------


def _instructions(text: str) -> str:
    return orjson.dumps([{"type": "text", "content": text}]).decode()


def _same(message: Message) -> Message:
    return message


def decoded_instructions(text: str) -> Any:
    """``gen_ai.system_instructions`` as the span decoder hands it to the readers (a long one as the
    UTF-8 bytes it came in, like a long history)."""
    span = Span(attributes=[KeyValue(key=SYSTEM_INSTRUCTIONS, value=AnyValue(string_value=text))])
    return decode_span(span.SerializeToString(), None)[1][SYSTEM_INSTRUCTIONS]


def prompt_reader(reads: list[str]) -> Callable[[Any], Message | None]:
    """The GenAI reader's system message of a text, noting each text it reads in ``reads``."""

    def read(text: Any) -> Message | None:
        reads.append(str(text))
        return system_message_of(text, b"s")

    return read


def test_a_system_prompt_sent_again_alike_is_read_once_and_gives_the_same_message():
    cache = HistoryCache()
    reads: list[str] = []
    read = prompt_reader(reads)

    prompt = "You are the support agent of Acme. " * 60  # 2 KB: comes as bytes
    first = cache.repeated(SYSTEM_INSTRUCTIONS, decoded_instructions(_instructions(prompt)), read, _same)
    assert isinstance(decoded_instructions(_instructions(prompt)), Utf8Text)
    again = cache.repeated(SYSTEM_INSTRUCTIONS, decoded_instructions(_instructions(prompt)), read, _same)
    as_text = cache.repeated(
        SYSTEM_INSTRUCTIONS, _instructions(prompt), read, _same
    )  # a str of the same bytes
    assert first is not None and (first.role, first.content) == (Role.SYSTEM, prompt)
    assert again is first and as_text is first and len(reads) == 1
    assert cache.message_lists()[-1] == [first]  # counted by the session byte bound like a history


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda text: text.replace("Acme", "Acmf"), id="a character changed, same length"),
        pytest.param(lambda text: text + " Be brief.", id="longer"),
        pytest.param(lambda text: text[:-40], id="shorter"),
    ],
)
def test_a_system_prompt_that_changed_is_read_again(edit: Callable[[str], str]):
    cache = HistoryCache()
    reads: list[str] = []
    read = prompt_reader(reads)

    prompt = "You are the support agent of Acme. " * 60
    first = cache.repeated(SYSTEM_INSTRUCTIONS, decoded_instructions(_instructions(prompt)), read, _same)
    changed = cache.repeated(
        SYSTEM_INSTRUCTIONS, decoded_instructions(_instructions(edit(prompt))), read, _same
    )
    assert changed is not first and changed is not None and changed.content == edit(prompt)
    assert len(reads) == 2
    assert (
        cache.repeated(SYSTEM_INSTRUCTIONS, decoded_instructions(_instructions(edit(prompt))), read, _same)
        is changed
    )


def test_a_system_prompt_that_reads_as_nothing_is_not_remembered():
    cache = HistoryCache()
    reads: list[str] = []
    read = prompt_reader(reads)

    for _ in range(2):
        assert cache.repeated(SYSTEM_INSTRUCTIONS, "[]", read, _same) is None
    assert len(reads) == 2 and cache.message_lists() == []


def test_a_system_prompt_resent_with_every_call_reads_as_a_full_read():
    """The GenAI reader with a conversation's history cache and without one: the same messages, and
    the system prompt parsed once."""
    prompt = _instructions("You are the support agent of Acme. " * 60)
    cache = HistoryCache()
    seen = []
    for turns in range(1, 6):
        attributes = {
            "gen_ai.operation.name": "chat",
            SYSTEM_INSTRUCTIONS: prompt,
            INPUT_MESSAGES: history(turns),
        }
        fresh = GENAI_READER.read(make_span(attributes))
        view = make_span(attributes)
        view.histories = cache
        remembered = GENAI_READER.read(view)
        assert fresh is not None and remembered is not None
        assert [(m.role, m.content) for m in remembered.input_messages] == [
            (m.role, m.content) for m in fresh.input_messages
        ]
        assert remembered.input_messages[0].role is Role.SYSTEM
        seen.append(remembered.input_messages[0])
    assert all(message is seen[0] for message in seen)


def test_a_system_prompt_read_again_from_another_span_is_that_spans_own_message():
    """Each span gets a message of its own, as a fresh read gives it (the span that first merged its
    prompt stays the one the conversation's prompt names), holding the text read the first time."""
    prompt = _instructions("You are the support agent of Acme. " * 60)
    cache = HistoryCache()
    messages = []
    for span_id in (b"B" * 8, b"A" * 8, b"A" * 8):
        view = make_span(
            {"gen_ai.operation.name": "chat", SYSTEM_INSTRUCTIONS: prompt, INPUT_MESSAGES: history(1)}
        )
        view.span_id = span_id
        view.histories = cache
        reading = GENAI_READER.read(view)
        assert reading is not None
        messages.append(reading.input_messages[0])
    assert [m.span_id for m in messages] == [b"B" * 8, b"A" * 8, b"A" * 8]
    assert messages[1] is not messages[0] and messages[2] is messages[1]  # a span read twice: one message
    assert all(m.content is messages[0].content for m in messages)  # the text read once, held once


def _chat_span(span_id: bytes, start: int, end: int, prompt: str, failed: bool) -> bytes:
    """A model call of one conversation resending ``prompt`` and one user message; a failed one
    answers nothing (429)."""
    span = Span(
        trace_id=b"\x01" * 16,
        span_id=span_id,
        name="chat m",
        start_time_unix_nano=start,
        end_time_unix_nano=end,
    )
    attributes = {
        "gen_ai.operation.name": "chat",
        "session.id": "s1",
        SYSTEM_INSTRUCTIONS: prompt,
        INPUT_MESSAGES: orjson.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": "where is my order?"}]}]
        ).decode(),
    }
    if failed:
        span.status.code = Status.STATUS_CODE_ERROR
        span.status.message = "rate limit exceeded"
        attributes |= {"error.type": "429", "http.response.status_code": 429}
    else:
        attributes["gen_ai.output.messages"] = orjson.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "It ships today."}]}]
        ).decode()
    for key, value in attributes.items():
        kv = span.attributes.add(key=key)
        if isinstance(value, int):
            kv.value.int_value = value
        else:
            kv.value.string_value = value
    return span.SerializeToString()


def test_parallel_calls_resending_one_system_prompt_keep_the_prompt_of_the_call_merged_first():
    """Two calls in parallel: A starts first and fails, B ends first and is read first. The
    conversation's system prompt is A's, as a read without the conversation's memory gives it, and
    the rate-limit signal points at it (a reviewer's case: handing back B's message for A made the
    signal point at another message, B's answer). The user message keeps the span it was first read from, B:
    the history memory's rule for every resent message."""
    prompt = _instructions("You are the support agent of Acme. " * 60)
    spans = [_chat_span(b"B" * 8, 2, 5, prompt, False), _chat_span(b"A" * 8, 1, 10, prompt, True)]

    def analysed(memory: ConversationMemory | None) -> tuple[list[tuple[Any, ...]], list[tuple[str, int]]]:
        decoder = SpanDecoder()
        state = ConversationState.new("s1")
        if memory is not None:
            state.decoder_memory = memory
        views = [decoder.view(data, memory) for data in spans]
        readings = [(view, decoder.read(view, memory)) for view in views]
        update = apply_trace(state, b"\x01" * 16, [(v, r) for v, r in readings if r is not None])
        analysis = analyze_update(state, update)
        messages = [(m.role, m.content, m.span_id) for m in state.conversation.messages]
        return messages, sorted((s.type, s.message_index) for s in analysis.new_signals)

    (messages, signals), (fresh, _) = analysed(ConversationMemory()), analysed(None)
    assert messages[0] == fresh[0] and messages[0][2] == b"A" * 8
    assert [m[2] for m in messages] == [b"A" * 8, b"B" * 8, b"B" * 8]
    assert signals == [("environment.exhaustion.rate_limit", 0)]
