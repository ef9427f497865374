"""Schema and label-placement checks shared by the corpus format tests.

tests/test_corpus_format.py runs them over the main corpus (tests/corpus/) and
tests/test_corpus_blind_format.py over the two blind sets (tests/corpus_heldout/, tests/corpus_blind/).
Each check raises ``AssertionError`` naming the conversation and message at fault. The labelling rules
they enforce are the comment block at the top of tests/corpus/support.yaml.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from otelsignals.model import LlmCall, Message, Role, ToolResult
from otelsignals.signals.taxonomy import LABELLED_LEAF_TYPES, category_of
from tests.corpus import CorpusConversation

CONV_KEYS = {"id", "domain", "informative", "notes", "messages", "llm_calls", "expected", "near_misses"}
REQUIRED_CONV_KEYS = {"id", "domain", "informative", "notes", "messages", "expected"}
ROLES = {r.value for r in Role}
RESULT_KEYS = {"call_id", "name", "content", "is_error", "status_code", "error_type", "error_message"}
LLM_CALL_KEYS = {"after_message", "failed", "status_code", "error_type", "error_message"}

USER_LEAVES = {
    leaf
    for leaf in LABELLED_LEAF_TYPES
    if leaf.startswith("interaction.")
    and leaf not in ("interaction.stagnation.dragging", "interaction.stagnation.repetition")
}
DRAGGING = "interaction.stagnation.dragging"
REPETITION = "interaction.stagnation.repetition"
RETRY = "execution.loops.retry"
DRIFT = "execution.loops.parameter_drift"
OSCILLATION = "execution.loops.oscillation"
RATE_LIMIT = "environment.exhaustion.rate_limit"
BAD_QUERY = "execution.failure.bad_query"
AUTH_MISUSE = "execution.failure.auth_misuse"
API_ERROR = "environment.exhaustion.api_error"

DRAG_AT_USER_TURN = 9  # SPEC §8: baseline 5, efficiency 1/(1+0.3×(n−5)) < 0.5 from n = 9


def user_positions(messages: list[Message]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.role is Role.USER]


def call_sequence(conv: CorpusConversation) -> list[tuple[int, str, Any]]:
    """(index of the carrying assistant message, tool name, arguments) for every call, in order."""
    return [(i, call.name, call.arguments) for i, m in enumerate(conv.messages) for call in m.tool_calls]


# ---------------------------------------------------------------- files and schema


def check_domain_files(raw_by_stem: dict[str, list[dict[str, Any]]]) -> None:
    """Every file is a non-empty list of conversations whose domain is the file's stem."""
    for stem, convs in raw_by_stem.items():
        assert isinstance(convs, list) and convs, f"{stem}.yaml must be a non-empty list"
        for conv in convs:
            assert conv["domain"] == stem, f"{conv['id']}: domain {conv['domain']!r} in {stem}.yaml"


def duplicate_ids(all_raw: list[dict[str, Any]]) -> list[str]:
    return [i for i, n in Counter(conv["id"] for conv in all_raw).items() if n > 1]


def check_conversation_schema(raw: dict[str, Any]) -> None:
    cid = raw["id"]
    assert set(raw) <= CONV_KEYS, f"{cid}: unknown keys {set(raw) - CONV_KEYS}"
    assert set(raw) >= REQUIRED_CONV_KEYS, f"{cid}: missing {REQUIRED_CONV_KEYS - set(raw)}"
    assert isinstance(raw["informative"], bool)
    assert isinstance(raw["notes"], str) and raw["notes"].strip()
    assert isinstance(raw["messages"], list) and raw["messages"]

    calls_seen: dict[str, str] = {}  # call id → tool name
    answered: set[str] = set()
    for i, m in enumerate(raw["messages"]):
        where = f"{cid}[{i}]"
        assert m["role"] in ROLES, where
        if m["role"] == "system":
            assert i == 0, f"{where}: system prompt only at index 0"
        if m["role"] == "tool":
            assert set(m) == {"role", "tool_result"}, f"{where}: a tool message carries only tool_result"
            tr = m["tool_result"]
            assert set(tr) == RESULT_KEYS, f"{where}: tool_result keys {sorted(tr)}"
            assert tr["call_id"] in calls_seen, f"{where}: call_id {tr['call_id']!r} matches no earlier call"
            assert tr["call_id"] not in answered, f"{where}: call {tr['call_id']} answered twice"
            answered.add(tr["call_id"])
            assert tr["name"] == calls_seen[tr["call_id"]], f"{where}: result name differs from the call's"
            assert isinstance(tr["is_error"], bool)
            if tr["is_error"]:
                assert tr["error_type"] or tr["status_code"], f"{where}: an error needs error_type or status"
            else:
                assert tr["error_type"] is None and tr["error_message"] is None and tr["status_code"] is None
                assert isinstance(tr["content"], str), f"{where}: a successful result has content"
            continue
        assert "tool_result" not in m, where
        assert set(m) <= {"role", "content", "tool_calls"}, f"{where}: keys {sorted(m)}"
        if m.get("tool_calls"):
            assert m["role"] == "assistant", f"{where}: only assistants call tools"
            for call in m["tool_calls"]:
                assert set(call) == {"id", "name", "arguments"}, where
                assert call["id"] not in calls_seen, f"{where}: duplicate call id {call['id']}"
                assert isinstance(call["name"], str) and call["name"], where
                assert isinstance(call["arguments"], dict), where
                calls_seen[call["id"]] = call["name"]
        else:
            assert isinstance(m.get("content"), str) and m["content"].strip(), f"{where}: empty message"
    assert answered == set(calls_seen), f"{cid}: calls without a result: {set(calls_seen) - answered}"

    for c in raw.get("llm_calls") or []:
        assert set(c) == LLM_CALL_KEYS, f"{cid}: llm_call keys {sorted(c)}"
        assert c["failed"] is True, f"{cid}: only failed model calls are listed"
        assert 0 <= c["after_message"] < len(raw["messages"]), f"{cid}: after_message out of range"
        assert c["error_type"] and c["error_message"], cid

    for e in raw["expected"]:
        assert set(e) == {"type", "message_index"}, cid
    for n in raw.get("near_misses") or []:
        assert set(n) == {"message_index", "looks_like", "why"}, cid


def check_user_turns(conv: CorpusConversation, lo: int, hi: int) -> None:
    assert lo <= conv.user_turns <= hi, f"{conv.id}: {conv.user_turns} user turns, want {lo}..{hi}"


# ---------------------------------------------------------------- label placement


def check_expected_labels(conv: CorpusConversation) -> None:
    """Every expected label sits where the labelling rules put it."""
    n = len(conv.messages)
    assert len(set(conv.expected)) == len(conv.expected), f"{conv.id}: duplicate label"
    llm_after = Counter(after for after, _ in conv.llm_calls)
    users = user_positions(conv.messages)
    for leaf, idx in conv.expected:
        where = f"{conv.id}: {leaf} @ {idx}"
        assert leaf in LABELLED_LEAF_TYPES, where
        assert 0 <= idx < n, where
        m = conv.messages[idx]
        if leaf in USER_LEAVES:
            assert m.role is Role.USER, f"{where}: interaction leaves go on user messages"
        elif leaf == DRAGGING:
            assert len(users) >= DRAG_AT_USER_TURN, (
                f"{where}: dragging needs ≥ {DRAG_AT_USER_TURN} user turns"
            )
            assert idx == users[DRAG_AT_USER_TURN - 1], f"{where}: dragging goes on the 9th user message"
        elif leaf == REPETITION:
            assert m.role is Role.ASSISTANT and m.text.strip(), f"{where}: repetition is an assistant text"
            earlier = [x for x in conv.messages[:idx] if x.role is Role.ASSISTANT][-5:]
            assert any(x.text.strip() for x in earlier), f"{where}: nothing earlier to repeat"
        elif category_of(leaf) == "execution.failure":
            assert m.role is Role.TOOL and m.tool_result is not None, f"{where}: failures go on tool messages"
            if leaf == BAD_QUERY:
                assert not m.tool_result.is_error, f"{where}: bad_query is an empty result, not an error"
            else:
                assert m.tool_result.is_error, f"{where}: the tool result must show the failure"
            assert m.tool_result.status_code != 429, f"{where}: a 429 is never an execution failure"
            if leaf == AUTH_MISUSE:
                assert m.tool_result.status_code in (401, 403), where
        elif category_of(leaf) == "execution.loops":
            assert m.role is Role.ASSISTANT and m.tool_calls, f"{where}: loops go on the calling message"
        else:  # environment.exhaustion
            assert category_of(leaf) == "environment.exhaustion", where
            if llm_after[idx]:
                pass  # a failed model call placed after this message
            elif m.role is Role.TOOL:
                assert m.tool_result is not None and m.tool_result.is_error, f"{where}: tool did not fail"
                if leaf == RATE_LIMIT:
                    assert m.tool_result.status_code in (429, None), where
                if leaf == API_ERROR:
                    assert (m.tool_result.status_code or 0) >= 500, f"{where}: api_error is a 5xx"
            else:
                raise AssertionError(f"{where}: exhaustion off a tool message needs a failed model call")

    if len(users) >= DRAG_AT_USER_TURN:
        assert sum(1 for leaf, _ in conv.expected if leaf == DRAGGING) == 1, f"{conv.id}: dragging once"

    exhaustion_at = Counter(
        idx for leaf, idx in conv.expected if category_of(leaf) == "environment.exhaustion"
    )
    for after, _ in conv.llm_calls:
        assert exhaustion_at[after] > 0, f"{conv.id}: failed model call after {after} is not labelled"


def check_loop_labels(conv: CorpusConversation) -> None:
    """Loop labels agree with the conversation's sequence of tool calls."""
    seq = call_sequence(conv)
    labels = {(leaf, idx) for leaf, idx in conv.expected}

    # retry: the 3rd, 6th, 9th… call of a run of identical calls, and every such call is labelled
    want_retry: set[int] = set()
    run = 0
    for k, (idx, name, args) in enumerate(seq):
        run = run + 1 if k and seq[k - 1][1:] == (name, args) else 1
        if run % 3 == 0:
            want_retry.add(idx)
    got_retry = {idx for leaf, idx in labels if leaf == RETRY}
    assert got_retry == want_retry, (
        f"{conv.id}: retry labels {sorted(got_retry)} vs runs at {sorted(want_retry)}"
    )

    # oscillation: within a maximal run of two alternating tools (A,B,A,B,…), the 6th call (again at the
    # 12th…) is labelled, and every such call is
    want_osc: set[int] = set()
    run = 0
    for k, (idx, name, _) in enumerate(seq):
        if k >= 2 and name == seq[k - 2][1] and name != seq[k - 1][1]:
            run += 1
        else:
            run = 2 if k >= 1 and name != seq[k - 1][1] else 1
        if run >= 6 and run % 6 == 0:
            want_osc.add(idx)
    got_osc = {idx for leaf, idx in labels if leaf == OSCILLATION}
    assert got_osc == want_osc, (
        f"{conv.id}: oscillation labels {sorted(got_osc)} vs patterns at {sorted(want_osc)}"
    )

    # parameter drift: the labelled call is the 3rd of a run of the same tool with differing arguments
    for leaf, idx in labels:
        if leaf != DRIFT:
            continue
        ks = [k for k, (i, _, _) in enumerate(seq) if i == idx]
        assert len(ks) == 1, f"{conv.id}: drift label on a message with {len(ks)} calls"
        k = ks[0]
        assert k >= 2, conv.id
        window = seq[k - 2 : k + 1]
        assert len({name for _, name, _ in window}) == 1, f"{conv.id}: drift needs the same tool 3 times"
        args = [a for _, _, a in window]
        assert args[0] != args[1] != args[2] != args[0], f"{conv.id}: drift needs varied arguments"


def check_near_misses(conv: CorpusConversation) -> None:
    expected = set(conv.expected)
    for nm in conv.near_misses:
        assert nm.looks_like in LABELLED_LEAF_TYPES, conv.id
        assert 0 <= nm.message_index < len(conv.messages), conv.id
        assert (nm.looks_like, nm.message_index) not in expected, f"{conv.id}: {nm} is also expected"
        assert nm.why.strip(), conv.id


# ---------------------------------------------------------------- loader


def check_loader(
    corpus: list[CorpusConversation],
    all_raw: list[dict[str, Any]],
    reload: Callable[[], list[CorpusConversation]],
) -> None:
    """The loader turns every raw conversation into the core's values, fresh on every call."""
    assert len(corpus) == len(all_raw)
    for conv, raw in zip(corpus, all_raw, strict=True):
        assert conv.id == raw["id"] and conv.domain == raw["domain"]
        assert len(conv.messages) == len(raw["messages"])
        assert all(isinstance(m, Message) and isinstance(m.role, Role) for m in conv.messages)
        for m in conv.messages:
            assert (m.tool_result is not None) == (m.role is Role.TOOL)
            if m.tool_result is not None:
                assert isinstance(m.tool_result, ToolResult)
        for after, call in conv.llm_calls:
            assert isinstance(after, int) and isinstance(call, LlmCall) and call.failed
            assert len(call.span_id) == 8
        assert all(isinstance(t, str) and isinstance(i, int) for t, i in conv.expected)
        assert conv.conversation().user_turns == conv.user_turns
    # fresh objects on every call: a test mutating one cannot leak into another
    again = reload()
    assert again[0].messages[0] is not corpus[0].messages[0]
