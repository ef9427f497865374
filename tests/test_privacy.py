"""Private by default: with ``signals.snippets: false`` no message or tool-argument text leaves the
sidecar in anything it adds: span attributes and events, ``signal.metadata``, the session summary
span, its log lines, the admin API's session view.

PII markers (an e-mail address, a card-like number, a person's name, a made-up word) go through every
detector: user messages that fire each interaction leaf, tool calls carrying them in their arguments
that fire each loop, failed tool results with them in the error text for every failure and exhaustion
leaf, a failed model call with them in its exception, a hand-off. The unit tests check the redaction
itself and that every metadata key any detector writes is declared in ``otelsignals.signals.base``.
"""

from __future__ import annotations

import itertools
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from otelsignals.analysis import analyze_update
from otelsignals.config import SignalsConfig
from otelsignals.conventions.decoding import any_value
from otelsignals.conventions.genai import otel_message
from otelsignals.conversation import ConversationState, TraceUpdate
from otelsignals.model import LlmCall, Role, SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import (
    CONTENT_METADATA_KEYS,
    IDENTIFIER_METADATA_KEYS,
    NESTED_METADATA_KEYS,
    PLAIN_METADATA_KEYS,
    content_digest,
    looks_like_identifier,
    redact_metadata,
    redacted_metadata,
)
from tests.corpus import BLIND_DIR, HELDOUT_DIR, load_corpus
from tests.support.clients import export_grpc
from tests.support.otlp_sink import OtlpSink
from tests.support.sidecar import SidecarProcess

EMAIL = "zq.marlow-7731@privmail.example"
CARD = "4929 1837 6650 2291"
NAME = "Ottilie Brennagh"
WORD = "glimmerwort"
PII = f"{NAME} {EMAIL} card {CARD} {WORD}"
# What must not appear, in any case and in the forms detectors make of words (stems, lower case).
FRAGMENTS = ("ottili", "brennagh", "glimmerwort", "marlow", "privmail", "1837 6650", "18376650", "66502291")


def leaks(text: str) -> list[str]:
    lowered = text.lower()
    return [fragment for fragment in FRAGMENTS if fragment in lowered]


# ---------------------------------------------------------------------------------------------
# The conversations (OTel GenAI message form, as an app sends them in gen_ai.input.messages)


def say(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


_call_ids = itertools.count(1)


def call(name: str, arguments: Any, response: str) -> list[dict[str, Any]]:
    call_id = f"call_{next(_call_ids)}"
    return [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": response}]},
    ]


def error(status: int, message: str) -> str:
    return orjson.dumps({"error": {"status": status, "message": message}}).decode()


SAME_ANSWER = f"I could not find a {WORD} report for {NAME} in our records right now, sorry."
INTERACTION = [
    say("user", f"Hi, I am {NAME}, {EMAIL}. I need the {WORD} report for card {CARD}."),
    say("assistant", f"Sure. I found the {WORD} report for Brennagh in the archive."),
    say("user", f"It is the {WORD} file for Ottilie actually, not Brennagh."),  # correction: contrast
    say("assistant", f"Here is the quarterly summary. The {WORD} index is 4."),
    say("user", f"what do you mean by {WORD}?"),  # clarification: phrase
    say("assistant", f"It is the {WORD} index of your account."),
    say("user", f"you don't need to check them {WORD} by {WORD}, just send everything."),  # piecemeal
    say("assistant", "Okay, sending everything."),
    say("user", f"I need the {WORD} report for {NAME} for card {CARD}"),
    say("assistant", "Could you tell me which quarter?"),
    say("user", f"I said I need the {WORD} report for {NAME} for card {CARD}!"),  # rephrase: near duplicate
    say("assistant", SAME_ANSWER),
    say("user", f"{WORD} report for {NAME} please, card {CARD}?"),
    say("assistant", SAME_ANSWER),  # repetition
    say("user", f"WHY IS THE {WORD.upper()} REPORT STILL MISSING FOR {NAME.upper()}"),  # caps; asked again
    say("assistant", SAME_ANSWER),
    say("user", f"This is ridiculous. Let me speak to a human agent about {EMAIL} and {WORD}."),  # escalation
    say("assistant", "I can connect you, but first let me try once more."),
    say(
        "user",
        f"it works now, the {WORD} report for {NAME} went through. thanks, perfect, that's exactly "
        "what I needed",
    ),  # success, gratitude, confirmation
    say("assistant", "Glad to help."),
    say("user", f"forget it, I'll cancel {WORD} and go elsewhere, {NAME}"),  # quit
    say("assistant", "Sorry to see you go."),
]
INTERACTION_2 = [
    say("user", f"Hi, I want to cancel my {WORD} membership, I am {NAME}"),
    say("assistant", "We can freeze it for three months instead."),
    say("user", f"I don't want a freeze. how do I cancel the {WORD} membership"),  # rephrase: insistence
    say("assistant", f"Here is the summary. The {WORD} index is 4."),
    say("user", f"what is {WORD}?"),  # clarification: term question
    say("assistant", f"Before disputing, have you tried contacting {NAME}'s bank?"),
    say("user", f"why would I contact {WORD} bank. I want to dispute the {WORD} charge"),  # rhetorical
    say("assistant", "Understood."),
]
OK = orjson.dumps({"status": "ok", "note": "done"}).decode()
FAILURES = [  # (tool, failed result): one per failure and exhaustion leaf, the markers in the text
    (
        "update_profile",
        error(422, f"Validation failed: email {EMAIL} is not allowed for {NAME}, card {CARD}"),
    ),
    ("lookup_customer_v9", f"Error: Unknown tool lookup for {PII}"),
    ("charge_card", error(401, f"Unauthorized: invalid API key for {PII}")),
    ("create_order", error(409, f"Order for {PII} already exists")),
    ("get_order", error(404, f"No order found for {PII}")),
    ("billing_api", error(503, f"Service unavailable while processing {PII}")),
    ("billing_gateway", error(504, f"Gateway timeout for {PII}")),
    ("billing_quota", error(429, f"Too many requests for {PII}")),
    ("billing_socket", f"Error: connection refused by {WORD}.example while sending {PII}"),
    ("billing_parser", f"Error: invalid JSON in response: unexpected token near {PII}"),
    ("summarise", f"Error: context_length_exceeded: the prompt about {PII} is too long"),
]


def tool_conversation() -> list[dict[str, Any]]:
    messages = [say("user", f"Please sort out my account, {PII}")]
    for _ in range(3):  # retry
        messages += call("get_customer", {"email": EMAIL, "name": NAME}, OK)
    messages.append(say("user", "next"))
    for query in (f"{WORD} report {NAME}", f"{WORD} reports {NAME}", f"{WORD} report for {NAME}"):
        messages += call("search_documents", {"query": query, "card": CARD}, "[]")  # drift, empty queries
    messages.append(say("user", "next"))
    for i in range(6):  # oscillation between two argument sets
        email = EMAIL if i % 2 else f"{WORD}@{WORD}.example"
        messages += call("get_details", {"email": email, "name": NAME}, OK)
    messages.append(say("user", "next"))
    for i in range(6):  # oscillation between two tools
        messages += call("open_page" if i % 2 else "find_page", {"q": f"{WORD} {NAME} {CARD}"}, OK)
    messages.append(say("user", "next"))
    for name, response in FAILURES:
        messages += call(name, {"email": EMAIL, "card": CARD, "note": f"{NAME} {WORD}"}, response)
        messages.append(say("user", "ok and now?"))
    messages += call("search_orders", {"customer": EMAIL, "filters": {"name": NAME, "tag": WORD}}, "[]")
    messages.append(say("assistant", "Nothing was found."))
    return messages


TOOLS = tool_conversation()
HANDOFF = [
    say("user", f"I am {NAME} ({EMAIL}), please transfer me to a human about card {CARD}."),
    *call("transfer_to_human_agents", {"summary": f"{PII} wants a person; the card error persists"}, OK),
    say("assistant", f"You are being transferred to a human agent now, {NAME}."),
]
# The model call that fails before the hand-off's answer (environment layer, source llm_call).
LLM_FAILURE = ("openai.BadRequestError", f"context_length_exceeded: the prompt about {PII} is too long")

SESSIONS = {
    "priv-interaction": INTERACTION,
    "priv-interaction-2": INTERACTION_2,
    "priv-tools": TOOLS,
    "priv-handoff": HANDOFF,
}


def analysed(session: str) -> list[SignalInstance]:
    """Every signal the core finds in a session, analysed in one trace as the sidecar will."""
    messages = [m for item in SESSIONS[session] for m in otel_message(item, b"\x01" * 8, Role.USER)]
    state = ConversationState.new(session)
    for message in messages:
        state.append(message)
    calls = []
    if session == "priv-handoff":
        calls = [LlmCall(b"\x02" * 8, failed=True, error_type=LLM_FAILURE[0], error_message=LLM_FAILURE[1])]
        state.conversation.llm_calls.extend(calls)
    update = TraceUpdate(session, b"\x03" * 16, 0, len(messages), calls, None, True)
    return analyze_update(state, update).new_signals


@pytest.fixture(scope="module")
def found() -> list[SignalInstance]:
    return [signal for session in SESSIONS for signal in analysed(session)]


def corpus_signals() -> Iterator[SignalInstance]:
    from tests import corpus_eval

    original = corpus_eval.analyze_update
    collected: list[SignalInstance] = []

    def collecting(state: ConversationState, update: TraceUpdate) -> Any:
        analysis = original(state, update)
        collected.extend(analysis.new_signals)
        return analysis

    corpus_eval.analyze_update = collecting  # type: ignore[assignment]
    try:
        for directory in (None, HELDOUT_DIR, BLIND_DIR):
            for entry in load_corpus(directory) if directory else load_corpus():
                corpus_eval.detect_incrementally(entry)
    finally:
        corpus_eval.analyze_update = original  # type: ignore[assignment]
    yield from collected


# ---------------------------------------------------------------------------------------------
# Unit: the scenario fires every detector, and its metadata carries the markers until redacted


ALL_LEAVES = {
    tx.CORRECTION, tx.REPHRASE, tx.CLARIFICATION, tx.DRAGGING, tx.REPETITION, tx.ESCALATION, tx.QUIT,
    tx.NEGATIVE_STANCE, tx.GRATITUDE, tx.CONFIRMATION, tx.SUCCESS, tx.HANDOFF,
    tx.INVALID_ARGS, tx.BAD_QUERY, tx.TOOL_NOT_FOUND, tx.AUTH_MISUSE, tx.STATE_ERROR,
    tx.RETRY, tx.PARAMETER_DRIFT, tx.OSCILLATION,
    tx.API_ERROR, tx.TIMEOUT, tx.RATE_LIMIT, tx.NETWORK, tx.MALFORMED_RESPONSE, tx.CONTEXT_OVERFLOW,
}  # fmt: skip


def test_the_scenario_fires_every_detector(found):
    assert {signal.type for signal in found} >= ALL_LEAVES
    patterns = {(signal.type, signal.metadata.get("pattern")) for signal in found}
    for expected in [
        (tx.CORRECTION, "contrast"), (tx.CORRECTION, "piecemeal"), (tx.CLARIFICATION, "term_question"),
        (tx.REPHRASE, "insistence"), (tx.REPHRASE, "asked_again"), (tx.REPHRASE, "near_duplicate"),
        (tx.OSCILLATION, "alternating_arguments"), (tx.OSCILLATION, "alternating_tools"),
        (tx.NEGATIVE_STANCE, "all_caps"), (tx.NEGATIVE_STANCE, "rhetorical_question"),
    ]:  # fmt: skip
        assert expected in patterns
    sources = {signal.metadata.get("source") for signal in found if signal.type == tx.CONTEXT_OVERFLOW}
    assert sources == {"tool", "llm_call"}


def test_metadata_carries_the_markers_and_redaction_removes_them(found):
    raw = orjson.dumps([signal.metadata for signal in found]).decode()
    assert {"ottili", "brennagh", "glimmerwort", "marlow", "privmail", "1837 6650"} <= set(leaks(raw))
    for signal in found:
        redacted = redact_metadata(signal.metadata)
        assert leaks(orjson.dumps(redacted, default=str).decode()) == [], (signal.type, redacted)
        assert redacted.keys() == signal.metadata.keys()
        for key, value in signal.metadata.items():  # what is not content stays as it was
            if key in PLAIN_METADATA_KEYS:
                assert redacted[key] == value


def test_a_signals_redaction_is_kept_on_it(found):
    # The conversation index redacts every recent signal again for each turn's row: once is enough.
    for signal in found:
        first = redacted_metadata(signal)
        assert first == redact_metadata(signal.metadata)
        assert redacted_metadata(signal) is first
        assert leaks(orjson.dumps(first, default=str).decode()) == []
        if first == signal.metadata:  # nothing to hide: no copy kept
            assert first is signal.metadata
    assert any(redacted_metadata(s) is not s.metadata for s in found)


def test_no_signal_changes_after_its_redaction_was_kept():
    # The kept redaction is the metadata dict itself when it hides nothing: a change after the
    # first redaction (as the index writes each turn's row) would leave the process unredacted.
    # Every corpus conversation analysed trace by trace, every recent signal redacted after each.
    from tests import corpus_eval

    original = corpus_eval.analyze_update
    states: list[ConversationState] = []

    def redacting(state: ConversationState, update: TraceUpdate) -> Any:
        analysis = original(state, update)
        for signal in state.recent_signals:
            redacted_metadata(signal)
        states.append(state)
        return analysis

    corpus_eval.analyze_update = redacting  # type: ignore[assignment]
    try:
        for entry in load_corpus():
            corpus_eval.detect_incrementally(entry)
    finally:
        corpus_eval.analyze_update = original  # type: ignore[assignment]
    signals = [signal for state in {id(s): s for s in states}.values() for signal in state.recent_signals]
    assert len(signals) > 100
    for signal in signals:
        assert redacted_metadata(signal) == redact_metadata(signal.metadata), signal


def test_redaction_keeps_equal_texts_equal_and_counts():
    metadata = {
        "pattern": "alternating_arguments",
        "tool": "get_details",
        "tools": ["get_details", f"{NAME} tool"],
        "run_length": 6,
        "arguments": [EMAIL, EMAIL, CARD],
        "signatures": [
            {"tool": "get_details", "arguments": EMAIL},
            {"tool": "get_details", "arguments": None},
        ],
        "error_type": f"ValueError: {EMAIL}",
        "model": "claude-3-5-sonnet@20240620",
        "someone_added_this": f"{WORD}",
    }
    redacted = redact_metadata(metadata)
    assert redacted["pattern"] == "alternating_arguments" and redacted["run_length"] == 6
    assert redacted["tool"] == "get_details" and redacted["model"] == "claude-3-5-sonnet@20240620"
    assert redacted["tools"] == ["get_details", content_digest(f"{NAME} tool")]
    assert redacted["arguments"] == [content_digest(EMAIL)] * 2 + [content_digest(CARD)]
    assert redacted["signatures"] == [
        {"tool": "get_details", "arguments": content_digest(EMAIL)},
        {"tool": "get_details", "arguments": None},
    ]
    assert redacted["error_type"] == content_digest(f"ValueError: {EMAIL}")
    assert redacted["someone_added_this"] == content_digest(WORD), "an undeclared key is redacted"
    assert content_digest(WORD).startswith("blake2b:") and len(content_digest(WORD)) == len("blake2b:") + 16
    # A plain value quoting a redacted identifier loses it too.
    quoted = redact_metadata({"pattern": f"http:404(exception:{EMAIL} x)", "error_type": f"{EMAIL} x"})
    assert leaks(orjson.dumps(quoted).decode()) == []
    # Dict keys under a content key: identifiers stay, text goes.
    assert redact_metadata({"arguments": {"find_page": CARD, f"{NAME}": "x"}}) == {
        "arguments": {"find_page": content_digest(CARD), content_digest(NAME): content_digest("x")}
    }


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("search_orders", True), ("openai.RateLimitError", True), ("gpt-4o-mini", True),
        ("mcp/github:create_issue", True), ("claude-3-5-sonnet@20240620", True),
        (EMAIL, False), ("4929183766502291", False), ("card_4929183766502291", False), (NAME, False),
        ("x" * 129, False), ("", False), (None, False), (42, False),
    ],
)  # fmt: skip
def test_identifier_rule(value, kept):
    assert looks_like_identifier(value) is kept


# The declared class of every metadata key. A detector that writes a new key fails
# test_every_metadata_key_is_declared until the key is declared in otelsignals.signals.base (and
# here): content keys are redacted with snippets off, plain keys are not.
KEY_TABLE = {
    "plain": {
        "pattern", "reason", "rule", "source", "status_code", "count", "run_length", "threshold",
        "threshold_cycles", "cycles", "same_arguments", "similarity", "lower_bound", "phrase", "group",
        "matches", "fuzzy", "pattern_type", "actually", "upper_ratio", "letters", "words", "head", "run",
        "similar_to", "ratio", "repeated_answer", "request_index", "user_turns", "baseline", "efficiency",
        "asked_by", "after", "via", "unresolved", "emoji",
    },
    "identifier": {"tool", "tools", "model", "error_type"},
    "content": {"arguments", "rejected", "term", "shared", "brought_back", "marker", "left_out"},
    "nested": {"signatures"},
}  # fmt: skip


def test_key_table_matches_the_declaration():
    assert KEY_TABLE["plain"] == PLAIN_METADATA_KEYS
    assert KEY_TABLE["identifier"] == IDENTIFIER_METADATA_KEYS
    assert KEY_TABLE["content"] == CONTENT_METADATA_KEYS
    assert KEY_TABLE["nested"] == NESTED_METADATA_KEYS
    sets = list(KEY_TABLE.values())
    assert sum(len(s) for s in sets) == len(set().union(*sets)), "a key is declared once"


def _keys(metadata: dict[str, Any]) -> Iterator[str]:
    for key, value in metadata.items():
        yield key
        if key in NESTED_METADATA_KEYS:
            items = value if isinstance(value, list) else [value]
            for item in items:
                if isinstance(item, dict):
                    yield from _keys(item)


def test_every_metadata_key_is_declared(found):
    declared = set().union(*KEY_TABLE.values())
    seen: dict[str, set[str]] = {}
    for signal in itertools.chain(found, corpus_signals()):
        for key in _keys(signal.metadata):
            seen.setdefault(key, set()).add(signal.type)
    undeclared = {key: sorted(types) for key, types in seen.items() if key not in declared}
    assert not undeclared, f"declare these metadata keys in otelsignals.signals.base: {undeclared}"
    assert set(seen) == declared, f"declared but never written: {declared - set(seen)}"


def test_plain_keys_never_carry_message_words(found):
    """A plain key's value is never made of the conversation's own words (the markers)."""
    for signal in found:
        plain = {k: v for k, v in signal.metadata.items() if k in PLAIN_METADATA_KEYS}
        assert leaks(orjson.dumps(plain).decode()) == [], (signal.type, plain)


def test_enricher_keeps_metadata_with_snippets_on_and_redacts_it_off():
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    from otelsignals.pipeline.enricher import Enricher

    signal = SignalInstance(tx.RETRY, 3, 0.9, f"get({EMAIL})", {"tool": "get", "arguments": EMAIL})
    written = {}
    for snippets in (True, False):
        span = Span()
        Enricher(SignalsConfig(snippets=snippets))._write(span, {}, [signal], 0)
        written[snippets] = {kv.key: any_value(kv.value) for kv in span.events[0].attributes}
    assert orjson.loads(written[True]["signal.metadata"]) == signal.metadata
    assert written[True]["signal.snippet"] == signal.snippet
    assert "signal.snippet" not in written[False]
    assert orjson.loads(written[False]["signal.metadata"]) == {
        "tool": "get",
        "arguments": content_digest(EMAIL),
    }


# ---------------------------------------------------------------------------------------------
# End to end: the real sidecar with snippets off


def build_spans() -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "privacy-app"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("tests.privacy")
    for session, messages in SESSIONS.items():
        with tracer.start_as_current_span("POST /chat", kind=SpanKind.SERVER) as root:
            root.set_attribute("session.id", session)
            if session == "priv-handoff":
                with tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as failed:
                    failed.set_attribute("gen_ai.operation.name", "chat")
                    failed.set_attribute("gen_ai.request.model", "gpt-4o")
                    failed.set_attribute("gen_ai.input.messages", orjson.dumps(messages[:1]).decode())
                    failed.set_attribute("error.type", LLM_FAILURE[0])
                    failed.add_event(
                        "exception", {"exception.type": LLM_FAILURE[0], "exception.message": LLM_FAILURE[1]}
                    )
                    failed.set_status(Status(StatusCode.ERROR, LLM_FAILURE[1]))
            with tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as chat:
                chat.set_attribute("gen_ai.operation.name", "chat")
                chat.set_attribute("gen_ai.request.model", "gpt-4o")
                chat.set_attribute("gen_ai.agent.name", "privacy-agent")
                chat.set_attribute("gen_ai.input.messages", orjson.dumps(messages[:-1]).decode())
                chat.set_attribute("gen_ai.output.messages", orjson.dumps(messages[-1:]).decode())
    provider.shutdown()
    return list(memory.get_finished_spans())


def _session_spans(sink: OtlpSink) -> list[Any]:
    return [span for span in sink.decoded_spans() if span.name == "otelsignals.session"]


def _value_text(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def run_sidecar(tmp_path, sink: OtlpSink, snippets: bool) -> dict[str, Any]:
    """Send the sessions through the real sidecar; what it added to spans, its session spans, its
    stderr and its admin API answers."""
    spans = build_spans()
    sent = {span.context.span_id.to_bytes(8, "big"): span for span in spans}
    exporter = {"endpoint": sink.grpc_endpoint}
    signals = {"snippets": snippets}
    with SidecarProcess(tmp_path, exporter, signals=signals, sessions={"ttl": "2s"}) as sidecar:
        export_grpc(sidecar.grpc_endpoint, spans)
        sink.wait_for_spans(len(spans), timeout=15)
        answers = {}
        for session in SESSIONS:
            url = f"{sidecar.admin_url}/v1/sessions/{session}"
            with urllib.request.urlopen(url, timeout=5) as answer:
                answers[session] = answer.read().decode()
        deadline = time.monotonic() + 20
        while len(_session_spans(sink)) < len(SESSIONS) and time.monotonic() < deadline:
            time.sleep(0.1)
        stderr = sidecar.stderr()
    by_id = {span.span_id: span for span in sink.decoded_spans() if span.name != "otelsignals.session"}
    assert set(by_id) == set(sent)
    added_attributes, events = [], []
    for span_id, span in by_id.items():
        original = sent[span_id]
        app_keys = set(original.attributes or {})
        added_attributes.append(
            {kv.key: any_value(kv.value) for kv in span.attributes if kv.key not in app_keys}
        )
        app_events = len(original.events)
        assert [e.name for e in span.events[:app_events]] == [e.name for e in original.events]
        for event in span.events[app_events:]:
            events.append((event.name, {kv.key: any_value(kv.value) for kv in event.attributes}))
        # The app's own attributes still carry what it sent: those are the app's, not ours.
        if "gen_ai.input.messages" in app_keys:
            kept = {kv.key: any_value(kv.value) for kv in span.attributes}["gen_ai.input.messages"]
            assert kept == original.attributes["gen_ai.input.messages"] and leaks(kept)
    summaries = [
        (span.name, {kv.key: any_value(kv.value) for kv in span.attributes}) for span in _session_spans(sink)
    ]
    assert len(summaries) == len(SESSIONS)
    names = [span.name for span in by_id.values()]
    return {
        "names": names,
        "attributes": added_attributes,
        "events": events,
        "summaries": summaries,
        "stderr": stderr,
        "answers": answers,
    }


def test_no_marker_leaves_the_sidecar_with_snippets_off(tmp_path, sink: OtlpSink):
    out = run_sidecar(tmp_path, sink, snippets=False)
    fired = {name.removeprefix("signal.") for name, _ in out["events"]}
    assert fired >= ALL_LEAVES, f"not fired through the sidecar: {ALL_LEAVES - fired}"
    for name in out["names"]:
        assert leaks(name) == []
    for added in out["attributes"]:
        assert leaks(_value_text(added)) == [], added
    for name, attributes in out["events"]:
        assert "signal.snippet" not in attributes
        assert leaks(name + _value_text(attributes)) == [], (name, attributes)
    for name, attributes in out["summaries"]:
        assert leaks(name + _value_text(attributes)) == [], attributes
    assert leaks(out["stderr"]) == [], out["stderr"]
    for session, answer in out["answers"].items():
        assert leaks(answer) == [], (session, answer)
        shown = orjson.loads(answer)
        assert shown["signals"] and all(signal["snippet"] is None for signal in shown["signals"])
        assert all("metadata" in signal for signal in shown["signals"])


def test_with_snippets_on_the_markers_do_show(tmp_path, sink: OtlpSink):
    """The control: the same traffic with snippets on carries the markers in snippets and metadata
    (so the test above would see a leak), and today's metadata is kept for debugging."""
    out = run_sidecar(tmp_path, sink, snippets=True)
    metadata = _value_text([attributes["signal.metadata"] for _, attributes in out["events"]])
    assert {"ottili", "brennagh", "glimmerwort", "marlow", "1837 6650"} <= set(leaks(metadata))
    assert leaks(_value_text([attributes.get("signal.snippet") for _, attributes in out["events"]]))
    assert all(leaks(answer) for answer in out["answers"].values())
    assert leaks(out["stderr"]) == [], "logs never carry content"


SECRET = "SECRET-alice@example.com card 4111111111111111"
_JSON_SPAN = {
    "traceId": "0af7651916cd43dd8448eb211c80319c",
    "spanId": "b7ad6b7169203331",
    "name": "chat",
    "startTimeUnixNano": "1",
    "endTimeUnixNano": "2",
}


@pytest.mark.parametrize(
    "span",
    [
        {**_JSON_SPAN, "attributes": [{"key": "gen_ai.input.messages", "value": {"bytesValue": SECRET}}]},
        {**_JSON_SPAN, "attributes": [{"key": "gen_ai.input.messages", "value": {"intValue": SECRET}}]},
        {**_JSON_SPAN, "traceId": SECRET},
        {**_JSON_SPAN, "kind": SECRET},
        {**_JSON_SPAN, "startTimeUnixNano": SECRET},
        {**_JSON_SPAN, "attributes": [{"key": "k", "value": {"doubleValue": SECRET}}]},
    ],
    ids=["bytes", "int", "trace-id", "kind", "time", "double"],
)
def test_a_refused_json_request_quotes_its_values_to_its_client_not_to_the_log(span: dict[str, Any]) -> None:
    """The OTLP/JSON decoder's errors quote the offending value (up to 40 characters), and the
    rejection was logged as it was: a message's text reached the log with snippets off."""
    import asyncio
    import logging

    from otelsignals.config_loading import load_config
    from otelsignals.pipeline.intake import Intake, RequestRejected
    from otelsignals.pipeline.service import Pipeline

    body = orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})
    config = load_config(None, environ={})
    config.signals.snippets = False

    async def refused() -> RequestRejected:
        pipeline = Pipeline(config)
        pipeline.ready = True
        try:
            await Intake(config.receiver, pipeline).handle("traces", body, True, "http")
        except RequestRejected as rejected:
            return rejected
        finally:
            pipeline.store.close()
        raise AssertionError("accepted")

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    try:
        rejected = asyncio.run(refused())
    finally:
        logging.getLogger().removeHandler(handler)
    assert rejected.reason == "bad_json"
    logged = " ".join(record.getMessage() for record in records)
    assert "refused a http traces request" in logged
    assert "SECRET" not in logged and "4111111111" not in logged
    if span["traceId"] != SECRET:  # (a wrong id's message gives its length only)
        assert "SECRET" in rejected.message  # the client sent it: told what was wrong with it
        assert "(value left out)" in logged


def test_an_indexed_conversation_is_served_without_its_text_once_snippets_are_off(tmp_path) -> None:
    """The index keeps what was written while snippets (and index.content) were on; with snippets
    off, GET /v1/sessions/{id} of such a conversation served its messages and snippets from the
    index as stored."""
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer
    from prometheus_client import CollectorRegistry

    from otelsignals.admin import admin_app
    from otelsignals.config import IndexConfig
    from otelsignals.model import Message
    from otelsignals.pipeline.index_writer import IndexWriter
    from otelsignals.stores.conversation_index import open_index
    from otelsignals.telemetry import Telemetry

    url = f"sqlite:///{tmp_path}/index.db"
    writer = IndexWriter(IndexConfig(), open_index(url), CollectorRegistry(), keep_text=True)
    state = ConversationState.new("c1")
    state.append(Message(Role.USER, "please cancel, my diagnosis is type 2 diabetes", span_id=b"\x01" * 8))
    state.leaf_counts["interaction.disengagement.quit"] += 1
    state.recent_signals.append(
        SignalInstance(
            "interaction.disengagement.quit",
            0,
            0.8,
            "type 2 diabetes",
            {"pattern": "quit", "tool": "type 2 diabetes"},
        )
    )
    writer.record(state)
    writer.flush()
    writer.index.close()

    async def served(show_content: bool) -> dict[str, Any]:
        index = open_index(url)
        app = admin_app(
            Telemetry(), lambda: True, sessions=None, show_content=show_content, auth_token="t", index=index
        )
        try:
            async with TestClient(TestServer(app)) as client:
                answer = await client.get("/v1/sessions/c1", headers={"Authorization": "Bearer t"})
                assert answer.status == 200
                return await answer.json()
        finally:
            index.close()

    shown = asyncio.run(served(True))
    assert shown["source"] == "index" and "diabetes" in orjson.dumps(shown).decode()
    hidden = asyncio.run(served(False))
    assert hidden["source"] == "index" and hidden["messages"] is None
    assert "diabetes" not in orjson.dumps(hidden).decode()
    (signal,) = hidden["signals"]
    assert signal["snippet"] is None and signal["metadata"]["pattern"] == "quit"  # vocabulary stays


def test_a_number_out_of_range_is_not_quoted_in_the_log_either() -> None:
    from otelsignals.otlp.json_decode import OtlpJsonError, decode_trace_request

    number = "41111111111111111111111"  # a card-like number as an intValue: beyond int64
    span = {**_JSON_SPAN, "attributes": [{"key": "k", "value": {"intValue": number}}]}
    with pytest.raises(OtlpJsonError) as refused:
        decode_trace_request(orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}))
    assert number in str(refused.value) and number not in refused.value.without_values
