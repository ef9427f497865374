"""Decoding a span against the conversation's earlier spans (conventions/decoding.py) gives exactly
what decoding it alone gives: attributes, events, indexed groups and, through the whole analyzer,
the conversation."""

from __future__ import annotations

import random
import sys

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from bench.reassembly import traces_of
from otelsignals.config import SessionsConfig
from otelsignals.conventions import decoding
from otelsignals.conventions.decoding import key_values
from otelsignals.conventions.indexed import indexed_groups
from otelsignals.conventions.memory import ConversationMemory
from otelsignals.conventions.openllmetry import COMPLETION_PREFIXES, PROMPT_PREFIXES, _indexed_entries
from otelsignals.conventions.span_decoder import SpanDecoder
from otelsignals.demo.traffic import CONVENTIONS
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.telemetry import Telemetry

LONG = decoding.MEMO_MIN_ATTRIBUTES + 10


def attribute(key: str, value: object) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def chat_span(history: list[tuple[str, str]], answer: str, body: bool = True, n: int = 0) -> Span:
    """An OpenLLMetry-style chat span: request attributes, a request body that grows with the
    history (OpenInference writes one before its indexed messages), the indexed prompts, the answer."""
    span = Span(trace_id=bytes([n % 256]) * 16, span_id=bytes([n % 256 + 1]) * 8, name="chat")
    span.attributes.extend([attribute("gen_ai.request.model", "m"), attribute("session.id", "s1")])
    if body:
        span.attributes.append(attribute("input.value", repr(history)))
    for index, (role, content) in enumerate(history):
        span.attributes.extend(
            [
                attribute(f"gen_ai.prompt.{index}.role", role),
                attribute(f"gen_ai.prompt.{index}.content", content),
            ]
        )
    span.attributes.extend(
        [
            attribute("gen_ai.completion.0.role", "assistant"),
            attribute("gen_ai.completion.0.content", answer),
            attribute("gen_ai.usage.input_tokens", 10 * n),
        ]
    )
    for index in range(decoding.MEMO_MIN_EVENTS + 2):
        span.events.add(time_unix_nano=1000 * n + index, name=f"event.{index % 3}").attributes.append(
            attribute("k", f"value {index % 5}")
        )
    return span


def decode_all(spans: list[Span], memory: ConversationMemory | None):
    views = []
    for span in spans:
        data = span.SerializeToString()
        views.append(SpanDecoder().view(data, memory))
    return views


def entries(view):
    return _indexed_entries(view, (PROMPT_PREFIXES, COMPLETION_PREFIXES))


def assert_sizes_as_counted_anew(spans: list[Span]) -> None:
    """After each span, the sizes every kept record carries (its base's for what it shares, the
    replaced values' anew) are its keys' and values' sizes counted anew."""
    size = decoding._value_size
    memory = ConversationMemory()
    for span in spans:
        decode_all([span], memory)
        for branch in memory.spans.branches:
            assert branch.sizes.tolist() == [sys.getsizeof(key) + size(value) for key, value in branch.pairs]
        events = memory.spans.events
        if events is not None:
            anew = [
                sum(map(sys.getsizeof, view.attributes)) + sum(map(size, view.attributes.values()))
                for view in events.views
            ]
            assert events.sizes.tolist() == anew


def test_a_kept_record_counts_what_its_values_hold():
    """Values that are not plain strings (an array, a key-value list, a history kept as UTF-8
    bytes) are counted with what they hold: a kept record's held_bytes covers its deep size."""
    from bench.session_memory import deep_size

    structured = AnyValue()
    for index in range(20):
        message = structured.array_value.values.add().kvlist_value.values
        message.append(attribute("message.role", "user"))
        message.append(attribute("message.content", f"question {index} " + "q" * 3000))
    history = [{"role": "user", "parts": [{"type": "text", "content": "h" * 3000}]}] * 20
    spans = []
    for n in range(2):
        span = chat_span([("user", f"m{i} " + "x" * 200) for i in range(LONG + n)], "a", n=n)
        span.attributes.append(KeyValue(key="llm.input_messages", value=structured))
        span.attributes.append(attribute("gen_ai.input.messages", orjson.dumps(history).decode()))
        tags = AnyValue()
        tags.array_value.values.extend([AnyValue(string_value=f"tag {i} " + "t" * 500) for i in range(100)])
        span.attributes.append(KeyValue(key="tags", value=tags))
        spans.append(span)
    memory = ConversationMemory()
    decode_all(spans, memory)
    assert memory.spans.branches
    for branch in memory.spans.branches:
        held = deep_size(branch, set())
        assert held <= branch.held_bytes() <= 2 * held


def growing_conversation(turns: int, body: bool) -> list[Span]:
    history = [("system", "You are the order assistant.")]
    spans = []
    for n in range(turns):
        history.append(("user", f"question {n} " + "x" * (n % 7)))
        spans.append(chat_span(list(history), f"answer {n}", body, n))
        history.append(("assistant", f"answer {n}"))
    return spans


@pytest.mark.parametrize("body", [False, True], ids=["prefix only", "changing body before the history"])
def test_a_resent_history_decodes_as_if_alone_and_reuses_what_it_shares(body):
    spans = growing_conversation(LONG, body)
    remembered = decode_all(spans, ConversationMemory())
    alone = decode_all(spans, None)
    for with_memo, without in zip(remembered, alone, strict=True):
        assert with_memo.attributes == without.attributes
        assert list(with_memo.attributes) == list(without.attributes)  # same order too
        assert with_memo.events == without.events
        assert entries(with_memo) == entries(without)
    late = remembered[-1].attribute_origin
    assert late is not None and late.base is not None
    # Everything but the new turn, the answer and the usage is the previous span's (the same objects).
    assert late.shared == len(late.decoded.pairs) - 7  # 2 prompts (4 attributes), the answer, usage
    assert late.decoded.pairs[5] is late.base.pairs[5]
    assert (late.replaced == (2,)) is body
    # What the span shares is not even parsed: the parsed span holds only its new attributes.
    last = spans[-1].SerializeToString()
    memory = ConversationMemory()
    decode_all(spans[:-1], memory)
    parsed, attributes, _, _ = decoding.decode_span(last, memory.spans)
    assert len(parsed.attributes) == 7 and len(attributes) == len(spans[-1].attributes)
    assert parsed.name == "chat" and parsed.span_id == spans[-1].span_id


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_edit_of_a_long_span_decodes_as_if_alone(data):
    """Resent spans edited at random (values changed, attributes inserted, removed, moved, indexes
    renumbered) never make the memo give anything but a full decode's result."""
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    history = [(rng.choice(["user", "assistant"]), f"m{i}") for i in range(LONG)]
    spans = [chat_span(history, "a", rng.random() < 0.5)]
    for n in range(1, 6):
        span = Span()
        span.CopyFrom(spans[-1])
        items = list(span.attributes)
        for _ in range(data.draw(st.integers(0, 4))):
            edit = data.draw(st.sampled_from(["change", "insert", "delete", "move", "renumber", "append"]))
            at = rng.randrange(len(items))
            if edit == "change":
                items[at] = attribute(items[at].key, f"changed {rng.random()}")
            elif edit == "insert":
                items.insert(at, attribute(f"gen_ai.prompt.{rng.randrange(LONG)}.content", "inserted"))
            elif edit == "delete" and len(items) > 1:
                del items[at]
            elif edit == "move":
                items.insert(rng.randrange(len(items)), items.pop(at))
            elif edit == "renumber":
                items[at] = attribute(f"gen_ai.prompt.{rng.randrange(3)}.role", items[at].value.string_value)
            else:
                items.append(attribute(f"gen_ai.prompt.{LONG + n}.content", "new"))
        del span.attributes[:]
        span.attributes.extend(items)
        spans.append(span)
    memory = ConversationMemory()
    for with_memo, without in zip(decode_all(spans, memory), decode_all(spans, None), strict=True):
        assert with_memo.attributes == without.attributes
        assert with_memo.events == without.events
        assert entries(with_memo) == entries(without)
    assert_sizes_as_counted_anew(spans)


def event_span(events: list[tuple[str, str]], n: int) -> Span:
    """A span resending its history as deprecated GenAI events, every event stamped anew."""
    span = Span(trace_id=b"\x01" * 16, span_id=bytes([n % 250 + 1]) * 8, name="chat")
    span.attributes.append(attribute("gen_ai.system", "openai"))
    for index, (name, content) in enumerate(events):
        event = span.events.add(time_unix_nano=10**18 + 1000 * n + index, name=name)
        event.attributes.append(attribute("content", content))
    return span


def test_resent_events_stamped_anew_are_shared_and_decode_as_if_alone():
    events = [
        ("gen_ai.user.message", f"question {i} " + "x" * 250) for i in range(decoding.MEMO_MIN_EVENTS + 4)
    ]
    spans = [event_span(events[: len(events) - 3 + n], n) for n in range(4)]
    remembered = decode_all(spans, ConversationMemory())
    for with_memo, without in zip(remembered, decode_all(spans, None), strict=True):
        assert with_memo.events == without.events
    # The events the previous span had are the views made then, not decoded again.
    assert all(a is b for a, b in zip(remembered[-2].events, remembered[-1].events, strict=False))
    assert remembered[-1].events[-1] is not remembered[-2].events[-1]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_edit_of_resent_events_decodes_as_if_alone(data):
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    events = [("gen_ai.user.message", f"m{i} " + "x" * 250) for i in range(decoding.MEMO_MIN_EVENTS + 4)]
    spans = [event_span(events, 0)]
    for n in range(1, 6):
        for _ in range(data.draw(st.integers(0, 3))):
            edit = data.draw(st.sampled_from(["change", "insert", "delete", "rename", "append"]))
            at = rng.randrange(len(events))
            if edit == "change":
                events[at] = (events[at][0], f"changed {rng.random()}")
            elif edit == "insert":
                events.insert(at, ("gen_ai.assistant.message", "inserted"))
            elif edit == "delete" and len(events) > 1:
                del events[at]
            elif edit == "rename":
                events[at] = ("gen_ai.tool.message", events[at][1])
            else:
                events.append(("gen_ai.user.message", f"new {n}"))
        spans.append(event_span(list(events), n))
    memory = ConversationMemory()
    for with_memo, without in zip(decode_all(spans, memory), decode_all(spans, None), strict=True):
        assert with_memo.events == without.events
    assert_sizes_as_counted_anew(spans)


def test_a_span_whose_attributes_are_not_one_run_is_decoded_in_full():
    span = growing_conversation(LONG, False)[-1]
    data = span.SerializeToString()
    # A second run of attributes after the events: legal protobuf, not what SDKs write.
    extra = Span()
    extra.attributes.append(attribute("late.key", "late"))
    data += extra.SerializeToString()
    decoder, memory = SpanDecoder(), ConversationMemory()
    first = decoder.view(data, memory)
    again = decoder.view(data, memory)
    assert first.attributes == again.attributes == key_values(Span.FromString(data).attributes)
    assert again.attributes["late.key"] == "late"


def test_indexed_groups_keeps_readers_apart_and_never_changes_a_kept_entry():
    spans = growing_conversation(LONG, False)
    views = decode_all(spans, ConversationMemory())

    def locate(key):
        return (0, int(key.split(".")[2])) if key.startswith("gen_ai.prompt.") else None

    def fill(entry, key, value):
        entry[key.rsplit(".", 1)[1]] = value

    before = [
        dict(e)
        for e in indexed_groups("test", views[-2].attributes, views[-2].attribute_origin, 1, locate, fill)[0]
    ]
    after = indexed_groups("test", views[-1].attributes, views[-1].attribute_origin, 1, locate, fill)[0]
    earlier = indexed_groups("test", views[-2].attributes, None, 1, locate, fill)[0]
    assert earlier == before  # the kept entries were not changed by the later span
    assert after[: len(before)] == before and len(after) == len(before) + 2
    # The later span's fold took the earlier one's lists over: grouping that span again (a reader
    # asking twice) starts from scratch, and gives the same groups.
    again = indexed_groups("test", views[-1].attributes, views[-1].attribute_origin, 1, locate, fill)[0]
    assert again == after


def test_indexed_groups_sorts_indexes_written_out_of_order():
    history = [("user", f"m{i}") for i in range(LONG)]
    spans = [chat_span(history[:n], "a", False, n) for n in (LONG - 3, LONG - 2, LONG)]
    # The last span writes its two newest prompts before the older ones (legal, if unusual).
    last = spans[-1]
    items = list(last.attributes)
    newest = [
        kv for kv in items if kv.key.startswith((f"gen_ai.prompt.{LONG - 2}.", f"gen_ai.prompt.{LONG - 1}."))
    ]
    rest = [kv for kv in items if kv not in newest]
    del last.attributes[:]
    last.attributes.extend(rest[:2] + newest + rest[2:])
    for with_memo, without in zip(
        decode_all(spans, ConversationMemory()), decode_all(spans, None), strict=True
    ):
        assert entries(with_memo) == entries(without)
    prompts = entries(decode_all(spans, None)[-1])[0]
    assert [entry["content"] for entry in prompts] == [content for _, content in history]


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_the_analyzer_assembles_the_same_conversation_with_and_without_the_memo(convention, monkeypatch):
    traces = traces_of(convention, 30)

    def assemble():
        analyzer = Analyzer(Telemetry(), SessionsConfig())
        for trace in traces:
            analyzer.assemble(trace)
        (state,) = list(analyzer.sessions)
        return state

    remembered = assemble()
    monkeypatch.setattr(decoding, "MEMO_MIN_BYTES", 10**9)
    alone = assemble()
    assert remembered is not None and alone is not None
    assert remembered.conversation.messages == alone.conversation.messages
    assert len(remembered.conversation.messages) > 60


def test_log_records_joined_to_a_span_leave_the_memo_s_resent_events_unchanged():
    """Events a span shares with its conversation's decode memo are the memo's own list: content
    sent as log records is joined to the span in a new list, never into the memo's."""
    traces = traces_of("genai_events", 30)
    analyzer = Analyzer(Telemetry(), SessionsConfig())
    for trace in traces[:-1]:
        analyzer.assemble(trace)
    (state,) = list(analyzer.sessions)
    kept = state.decoder_memory.spans.events
    assert kept is not None and len(kept.views) >= decoding.MEMO_MIN_EVENTS
    views_before = list(kept.views)
    last = max(traces[-1].spans, key=lambda record: len(record.data))
    record = LogRecord(trace_id=last.trace_id, span_id=last.span_id, event_name="gen_ai.user.message")
    record.body.string_value = "sent as a log record"
    analyzer.log_events.add(
        ExportLogsServiceRequest(resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=[record])])])
    )
    analyzer.assemble(traces[-1])
    assert kept.views == views_before
    latest = state.decoder_memory.spans.events
    assert latest is not None
    assert all(view.attributes.get("body") != "sent as a log record" for view in latest.views)


HISTORY_KEYS = sorted(decoding.UTF8_TEXT_KEYS)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_a_span_with_its_long_histories_cut_out_decodes_as_its_full_parse(data):
    """A long history is cut out of the span's bytes before the parse and read from them: wherever it
    sits among the attributes, however often, whatever its length, the attributes, events and span
    fields are those of a parse of the whole span (near misses: short histories, other keys, a value
    that is not a string, a value with a field after its string, a key-value with a field after its
    value, all left to the parse)."""
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="chat m", start_time_unix_nano=5)
    span.events.add(time_unix_nano=6, name="gen_ai.choice").attributes.append(attribute("k", "v"))
    size = lambda: rng.choice([10, decoding.UTF8_TEXT_MIN_BYTES - 1, decoding.UTF8_TEXT_MIN_BYTES, 6000])  # noqa: E731
    for _ in range(data.draw(st.integers(1, 12))):
        kind = data.draw(
            st.sampled_from(["history", "history", "other key", "not a string", "odd value", "odd pair"])
        )
        text = '[{"role":"user","parts":[{"type":"text","content":"' + "é" * size() + '"}]}]'
        key = rng.choice(HISTORY_KEYS)
        if kind == "history":
            span.attributes.append(attribute(key, text))
        elif kind == "other key":
            span.attributes.append(attribute("gen_ai.output.messages", text))
        elif kind == "not a string":
            span.attributes.append(KeyValue(key=key, value=AnyValue(bytes_value=text.encode())))
        elif kind == "odd value":  # a field a newer schema may add, after the string
            value = AnyValue.FromString(AnyValue(string_value=text).SerializeToString() + b"\x98\x01\x07")
            span.attributes.append(KeyValue(key=key, value=value))
        else:  # the key-value itself carries a field this schema does not know, after its value
            pair = KeyValue(key=key, value=AnyValue(string_value=text)).SerializeToString() + b"\x98\x01\x07"
            span.attributes.append(KeyValue.FromString(pair))
        if rng.random() < 0.2:
            span.attributes.append(attribute("gen_ai.usage.input_tokens", rng.randrange(100)))
    encoded = span.SerializeToString()
    cut_span, cut_attributes, cut_events, _ = decoding.decode_span(encoded, None)
    whole_span, whole_attributes, whole_events, _ = decoding.decode_whole(Span.FromString(encoded))
    assert list(cut_attributes.items()) == list(whole_attributes.items())
    assert [type(v) for v in cut_attributes.values()] == [type(v) for v in whole_attributes.values()]
    assert cut_events == whole_events
    for field in ("trace_id", "span_id", "name", "start_time_unix_nano"):
        assert getattr(cut_span, field) == getattr(whole_span, field)
    for key, value in cut_attributes.items():
        if isinstance(value, decoding.Utf8Text):
            assert str(value) == str(whole_attributes[key]) and len(value) >= decoding.UTF8_TEXT_MIN_BYTES


def test_a_truncated_span_with_a_long_history_is_refused_as_the_parse_refuses_it():
    from google.protobuf.message import DecodeError

    span = Span(attributes=[attribute("gen_ai.input.messages", "[" + '"x",' * 2000 + '"y"]')])
    data = span.SerializeToString()
    for cut in (len(data) - 1, len(data) // 2, 3):
        with pytest.raises(DecodeError):
            decoding.decode_span(data[:cut] + b"\x00" * (decoding.CUT_MIN_BYTES - cut), None)


def _varint(value: int, width: int = 1) -> bytes:
    """``value`` as a varint of at least ``width`` bytes (wider than needed: non-minimal)."""
    out = bytearray()
    while value >= 0x80 or len(out) < width - 1:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out) + bytes((value,))


@pytest.mark.parametrize(
    ("text_width", "pair_width", "parses"),
    [(1, 1, True), (5, 1, True), (10, 1, False), (1, 11, False)],
    ids=["minimal", "5-byte text length", "10-byte text length", "11-byte key-value length"],
)
def test_lengths_written_wider_than_needed_are_judged_as_the_parse_judges_them(
    text_width: int, pair_width: int, parses: bool
):
    from google.protobuf.message import DecodeError

    key, text = b"gen_ai.input.messages", b"[" + b"1," * 1500 + b"2]"
    value = b"\x0a" + _varint(len(text), text_width) + text
    pair = b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(len(value)) + value
    data = (
        Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="chat").SerializeToString()
        + b"\x4a"
        + _varint(len(pair), pair_width)
        + pair
    )
    if not parses:
        with pytest.raises(DecodeError):
            Span.FromString(data)
        with pytest.raises(DecodeError):
            decoding.decode_span(data, None)
        return
    decoded = decoding.decode_span(data, None)[1]["gen_ai.input.messages"]
    assert isinstance(decoded, decoding.Utf8Text) and decoded.utf8 == text
