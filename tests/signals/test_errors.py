"""The failure classifier and its data (errors.yaml): precedence, confidence, the error-payload gate."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from otelsignals.model import ToolResult
from otelsignals.signals import errors
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.errors import (
    LEAF_OF_GROUP,
    classify_example,
    classify_failure,
    content_is_error,
    empty_result_of,
    error_payload_of,
    load_library,
    payload,
    tool_failure,
)
from otelsignals.signals.errors.payload import ErrorPayload

DATA = yaml.safe_load(errors.PHRASES_FILE.read_text(encoding="utf-8"))
GROUPS: dict[str, Any] = DATA["groups"]


def _examples(kind: str) -> list[Any]:
    return [
        pytest.param(group, example, id=f"{group}-{number}")
        for group, spec in GROUPS.items()
        for number, example in enumerate(spec[kind])
    ]


# --- the data's self-test ----------------------------------------------------------------------------------


def test_self_test_is_clean() -> None:
    assert errors.self_test() == []


def test_every_leaf_has_a_group_with_enough_examples() -> None:
    assert set(GROUPS) == set(LEAF_OF_GROUP)
    for group, spec in GROUPS.items():
        assert len(spec["positives"]) >= 8, group
        assert len(spec["near_misses"]) >= 8, group
        assert sum(isinstance(e, str) for e in spec["near_misses"]) >= 6, group  # successful results


@pytest.mark.parametrize(("group", "example"), _examples("positives"))
def test_positive_classifies_to_its_group(group: str, example: Any) -> None:
    found = classify_example(example, failed_by_default=True)
    expected = LEAF_OF_GROUP[group]
    if (
        isinstance(example, dict)
        and example.get("source") == "llm_call"
        and expected.startswith("execution.")
    ):
        expected = tx.API_ERROR  # a model call has no execution layer
    assert found is not None and found.leaf_type == expected, found
    assert 0.0 < found.confidence <= 1.0
    assert found.snippet is None or len(found.snippet) <= 200


@pytest.mark.parametrize(("group", "example"), _examples("near_misses"))
def test_near_miss_does_not_classify_to_its_group(group: str, example: Any) -> None:
    found = classify_example(example, failed_by_default=False)
    if isinstance(example, str):
        assert found is None  # a successful result: nothing at all
    else:
        assert found is None or found.leaf_type != LEAF_OF_GROUP[group]


def _reason_examples(kind: str) -> list[Any]:
    return [
        pytest.param(group, reason, example, id=f"{group}.{reason}-{number}")
        for group, spec in GROUPS.items()
        for reason, reason_spec in (spec.get("reasons") or {}).items()
        for number, example in enumerate(reason_spec[kind])
    ]


def test_every_reason_has_enough_examples() -> None:
    reasons = {(g, r) for g, spec in GROUPS.items() for r in (spec.get("reasons") or {})}
    assert {("state_error", r) for r in REASONS_OF_BUSINESS_RULES} <= reasons
    for group, spec in GROUPS.items():
        for reason, reason_spec in (spec.get("reasons") or {}).items():
            assert len(reason_spec["positives"]) >= 3, (group, reason)
            assert sum(isinstance(e, str) for e in reason_spec["near_misses"]) >= 2, (group, reason)


REASONS_OF_BUSINESS_RULES = ("insufficient_funds", "capacity", "wrong_state", "not_eligible", "precondition")


@pytest.mark.parametrize(("group", "reason", "example"), _reason_examples("positives"))
def test_reason_positive_classifies_with_its_reason(group: str, reason: str, example: Any) -> None:
    found = classify_example(example, failed_by_default=True)
    assert found is not None and (found.leaf_type, found.reason) == (LEAF_OF_GROUP[group], reason), found


@pytest.mark.parametrize(("group", "reason", "example"), _reason_examples("near_misses"))
def test_reason_near_miss_does_not_get_it(group: str, reason: str, example: Any) -> None:
    found = classify_example(example, failed_by_default=False)
    if isinstance(example, str):
        assert found is None  # a successful result that uses the words: nothing at all
    else:
        assert found is None or found.reason != reason, found


def test_loader_refuses_a_phrase_in_two_reasons(tmp_path: Path) -> None:
    data = yaml.safe_load(errors.PHRASES_FILE.read_text(encoding="utf-8"))
    data["groups"]["state_error"]["reasons"]["capacity"]["phrases"].append("Insufficient  funds")
    path = tmp_path / "errors.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    with pytest.raises(ValueError, match="reasons"):
        load_library(path)


@pytest.mark.parametrize("example", DATA["empty_results"]["positives"])
def test_empty_result_positives(example: str) -> None:
    assert empty_result_of(example) is not None


@pytest.mark.parametrize("example", DATA["empty_results"]["near_misses"])
def test_empty_result_near_misses(example: str) -> None:
    assert empty_result_of(example) is None


def test_loader_refuses_a_phrase_in_two_groups(tmp_path: Path) -> None:
    data = yaml.safe_load(errors.PHRASES_FILE.read_text(encoding="utf-8"))
    data["groups"]["timeout"]["phrases"].append("Too  many requests!")  # normalises to a rate_limit phrase
    path = tmp_path / "errors.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValueError, match="both"):
        load_library(path)


@pytest.mark.parametrize(("entry", "loads"), [(429, True), ("429", True), (True, False), (None, False)])
def test_loader_reads_codes_as_text_and_refuses_a_boolean(tmp_path: Path, entry: object, loads: bool) -> None:
    """An unquoted ``yes``/``off`` is a boolean to YAML: refused, where a number is a code's text."""
    data = yaml.safe_load(errors.PHRASES_FILE.read_text(encoding="utf-8"))
    data["groups"]["rate_limit"]["error_codes"].append(entry)
    path = tmp_path / "errors.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    if loads:
        load_library(path)
    else:
        with pytest.raises(ValueError, match=r"rate_limit\.error_codes must be a list of strings"):
            load_library(path)


def test_loader_refuses_a_missing_group(tmp_path: Path) -> None:
    data = yaml.safe_load(errors.PHRASES_FILE.read_text(encoding="utf-8"))
    del data["groups"]["network"]
    path = tmp_path / "errors.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValueError, match="network"):
        load_library(path)


# --- precedence: HTTP status first -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "message", "leaf"),
    [
        (429, None, tx.RATE_LIMIT),
        (
            429,
            "Invalid arguments: missing required field 'q'",
            tx.RATE_LIMIT,
        ),  # a 429 is never an execution failure
        (429, "Unauthorized", tx.RATE_LIMIT),
        (402, "Payment required: credit balance is too low", tx.RATE_LIMIT),
        (401, None, tx.AUTH_MISUSE),
        (403, "Forbidden", tx.AUTH_MISUSE),
        (403, "API rate limit exceeded for 203.0.113.7", tx.RATE_LIMIT),  # GitHub
        (403, "You have exceeded a secondary rate limit", tx.RATE_LIMIT),
        (408, None, tx.TIMEOUT),
        (504, "Bad gateway", tx.TIMEOUT),
        (500, "Request timed out", tx.API_ERROR),  # a 5xx is api_error
        (502, "connection refused", tx.API_ERROR),
        (503, None, tx.API_ERROR),
        (529, "Overloaded", tx.API_ERROR),
        (409, None, tx.STATE_ERROR),
        (412, None, tx.STATE_ERROR),
        (423, None, tx.STATE_ERROR),
        (400, None, tx.INVALID_ARGS),
        (422, "Unprocessable Entity", tx.INVALID_ARGS),
        (400, "This model's maximum context length is 8192 tokens", tx.CONTEXT_OVERFLOW),
        (400, "Unknown tool: get_wether", tx.TOOL_NOT_FOUND),
        (400, "This invoice has already been finalized", tx.STATE_ERROR),
        (400, "Request timed out", tx.INVALID_ARGS),  # a 4xx is not refined into the environment
        (404, None, tx.BAD_QUERY),
        (404, "Customer cus_123 not found", tx.BAD_QUERY),
        (404, "Unknown tool: get_wether", tx.TOOL_NOT_FOUND),
        (404, "Endpoint /v2/forecast not found", tx.TOOL_NOT_FOUND),
        (404, "Invalid arguments", tx.BAD_QUERY),  # a 404 refines only into tool_not_found or bad_query
        (413, None, tx.INVALID_ARGS),
        (418, None, tx.INVALID_ARGS),
    ],
)
def test_status_precedence_for_tools(status: int, message: str | None, leaf: str) -> None:
    found = classify_failure(status, None, message, None)
    assert found is not None and found.leaf_type == leaf
    assert found.status_code == status


@pytest.mark.parametrize(
    ("status", "message", "leaf"),
    [
        (401, "Incorrect API key provided", tx.API_ERROR),
        (403, None, tx.API_ERROR),
        (400, "Invalid 'messages[1].role'", tx.API_ERROR),
        (404, "The model `gpt-5` does not exist", tx.API_ERROR),
        (413, None, tx.CONTEXT_OVERFLOW),
        (400, "prompt is too long: 208310 tokens > 200000 maximum", tx.CONTEXT_OVERFLOW),
        (429, None, tx.RATE_LIMIT),
        (503, None, tx.API_ERROR),
        (None, None, tx.API_ERROR),
    ],
)
def test_model_calls_have_no_execution_layer(status: int | None, message: str | None, leaf: str) -> None:
    found = classify_failure(status, None, message, None, source="llm_call")
    assert found is not None and found.leaf_type == leaf


def test_status_from_the_body_the_exception_class_and_the_text() -> None:
    body = classify_failure(None, None, None, '{"error": {"code": 429, "message": "slow down"}}')
    assert (body.leaf_type, body.pattern) == (tx.RATE_LIMIT, "http:429(body)")
    sdk = classify_failure(None, "openai.NotFoundError", "Not found", None)
    assert sdk.leaf_type == tx.BAD_QUERY and sdk.status_code == 404
    text = classify_failure(
        None, "httpx.HTTPStatusError", "Client error '401 Unauthorized' for url 'x'", None
    )
    assert (text.leaf_type, text.confidence, text.pattern) == (tx.AUTH_MISUSE, 0.9, "http:401(text)")
    aiohttp = classify_failure(None, None, "Error code: 503 - {'error': 'overloaded'}", None)
    assert aiohttp.leaf_type == tx.API_ERROR


# --- precedence: exception names and codes, then text ------------------------------------------------------


@pytest.mark.parametrize(
    ("error_type", "message", "leaf"),
    [
        ("TimeoutError", None, tx.TIMEOUT),
        ("asyncio.TimeoutError", None, tx.TIMEOUT),
        ("asyncio.exceptions.TimeoutError", "", tx.TIMEOUT),
        ("httpx.ReadTimeout", "", tx.TIMEOUT),
        ("requests.exceptions.ReadTimeout", "Read timed out.", tx.TIMEOUT),
        ("<class 'httpx.ConnectTimeout'>", None, tx.TIMEOUT),
        ("ConnectionRefusedError", None, tx.NETWORK),
        ("httpx.ConnectError", "All connection attempts failed", tx.NETWORK),
        ("socket.gaierror", None, tx.NETWORK),
        ("ENOTFOUND", None, tx.NETWORK),
        ("ECONNRESET", None, tx.NETWORK),
        ("json.decoder.JSONDecodeError", "Expecting value: line 1 column 1 (char 0)", tx.MALFORMED_RESPONSE),
        ("JSONDecodeError", "Failed to parse tool arguments: Expecting value", tx.INVALID_ARGS),
        (
            "pydantic_core.ValidationError",
            "1 validation error for SearchArgs\nq\n  Field required",
            tx.INVALID_ARGS,
        ),
        (
            "pydantic.ValidationError",
            "1 validation error for SearchResponse\nitems\n  Field required",
            tx.MALFORMED_RESPONSE,
        ),
        ("KeyError", "'city'", tx.INVALID_ARGS),
        ("TypeError", "search() got an unexpected keyword argument 'town'", tx.INVALID_ARGS),
        ("TypeError", "fetch failed", tx.NETWORK),  # a weak builtin gives way to the text
        ("ValueError", "No such function: lookup_custmer", tx.TOOL_NOT_FOUND),
        ("ToolNotFoundError", None, tx.TOOL_NOT_FOUND),
        ("openai.RateLimitError", None, tx.RATE_LIMIT),
        ("anthropic.AuthenticationError", None, tx.AUTH_MISUSE),
        ("context_length_exceeded", None, tx.CONTEXT_OVERFLOW),
        ("psycopg2.errors.UndefinedColumn", 'column "emial" does not exist', tx.BAD_QUERY),
        ("psycopg2.errors.DeadlockDetected", "deadlock detected", tx.STATE_ERROR),
        ("RuntimeError", "Connection reset by peer", tx.NETWORK),
        ("RuntimeError", "Too many requests, please slow down", tx.RATE_LIMIT),
    ],
)
def test_exception_names_and_text(error_type: str, message: str | None, leaf: str) -> None:
    found = classify_failure(None, error_type, message, None)
    assert found is not None and found.leaf_type == leaf, found


def test_a_traceback_is_read_from_its_last_line() -> None:
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "/app/tools/conflict_resolver.py", line 12, in search\n'
        '    results = client.query(index="orders", timeout=5, rate_limit="too many requests")\n'
        '  File "/app/lib/client.py", line 88, in query\n'
        "    raise KeyError(key)\n"
        "KeyError: 'index'\n"
    )
    found = tool_failure(ToolResult(content=traceback))
    assert found is not None
    assert (found.leaf_type, found.pattern, found.snippet) == (
        tx.INVALID_ARGS,
        "exception:KeyError",
        "KeyError: 'index'",
    )
    timeout = tool_failure(
        ToolResult(content="Traceback (most recent call last):\n  ...\nhttpx.ReadTimeout: timed out")
    )
    assert timeout is not None and timeout.leaf_type == tx.TIMEOUT


def test_unclassifiable_and_ignored_failures() -> None:
    # A failed tool call nothing explains gets the default leaf (the call as made was refused).
    for fields in ((None, "RuntimeError", "something odd happened", None), (None, None, None, None)):
        default = classify_failure(*fields)
        assert default is not None
        assert (default.leaf_type, default.confidence) == (tx.INVALID_ARGS, 0.5)
        assert (default.pattern, default.reason) == ("unclassified", "unclassified")
    # Cancelled or interrupted calls are nobody's failure: nothing at all.
    assert classify_failure(None, "asyncio.CancelledError", None, None, source="llm_call") is None
    assert classify_failure(None, "KeyboardInterrupt", None, None) is None


def test_confidence_rule() -> None:
    assert classify_failure(429, None, None, None).confidence == 0.95  # HTTP status
    assert classify_failure(None, "httpx.ReadTimeout", None, None).confidence == 0.95  # exception type
    assert classify_failure(None, None, None, '{"error": {"code": "rate_limit_exceeded"}}').confidence == 0.95
    assert classify_failure(None, None, "Connection refused", None).confidence == 0.8  # message text
    assert (
        classify_failure(400, None, "Missing required param: amount", None).confidence == 0.9
    )  # status + text
    assert classify_failure(404, None, None, None).confidence == 0.75  # inferred: a missing record
    assert classify_failure(418, None, None, None).confidence == 0.6  # inferred: some other client error
    assert classify_failure(None, "KeyError", "'city'", None).confidence == 0.75  # a weak builtin alone
    assert classify_failure(None, None, None, None, source="llm_call").confidence == 0.5


def test_priority_most_specific_first() -> None:
    both = classify_failure(None, None, "Connection to api.x.com timed out (connect timeout=5)", None)
    assert both.leaf_type == tx.TIMEOUT
    dns = classify_failure(
        None, None, "Max retries exceeded (Caused by NameResolutionError: Failed to resolve)", None
    )
    assert dns.leaf_type == tx.NETWORK
    github = classify_failure(
        None, None, "Bad credentials. Authenticated requests get a higher rate limit.", None
    )
    assert github.leaf_type == tx.AUTH_MISUSE


def test_tool_not_found_needs_the_tool_named_as_missing() -> None:
    assert classify_failure(None, None, "Tool 'get_wether' not found", None).leaf_type == tx.TOOL_NOT_FOUND
    assert classify_failure(None, None, "Route GET:/v9/x not found", None).leaf_type == tx.TOOL_NOT_FOUND
    named = classify_failure(None, None, "get_wether is not available", None, tool_name="get_wether")
    assert named.leaf_type == tx.TOOL_NOT_FOUND
    unnamed = classify_failure(None, None, "get_wether is not available", None)
    assert unnamed is not None and (unnamed.leaf_type, unnamed.reason) == (tx.INVALID_ARGS, "unclassified")
    record = classify_failure(None, None, "Error calling tool search: order 123 not found", None)
    assert record.leaf_type == tx.BAD_QUERY


# --- reasons and the default leaf -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "leaf", "reason"),
    [
        # decided by the status, named by the text
        ((409, None, "Insufficient funds on the account", None), tx.STATE_ERROR, "insufficient_funds"),
        ((409, None, "Conflict", None), tx.STATE_ERROR, "http_status"),
        ((404, None, None, None), tx.BAD_QUERY, "http_status"),
        ((404, None, "Order 12 not found", None), tx.BAD_QUERY, "not_found"),
        ((None, "httpx.ReadTimeout", None, None), tx.TIMEOUT, "exception"),
        ((None, None, None, '{"error": {"code": "rate_limit_exceeded"}}'), tx.RATE_LIMIT, "error_code"),
        ((None, None, "Connection refused", None), tx.NETWORK, "network"),  # an ordinary phrase: the group
        ((None, "KeyError", "'city'", None), tx.INVALID_ARGS, "missing_field"),
        ((None, None, "Error: 'method_type'", None), tx.INVALID_ARGS, "missing_field"),  # a bare KeyError
        ((None, None, "Error: something odd happened", None), tx.INVALID_ARGS, "unclassified"),
    ],
)
def test_every_classification_has_a_reason(fields: tuple[Any, ...], leaf: str, reason: str) -> None:
    found = classify_failure(*fields)
    assert found is not None and (found.leaf_type, found.reason) == (leaf, reason), found


def test_the_default_leaf_of_an_unexplained_tool_failure() -> None:
    found = tool_failure(ToolResult(is_error=True, error_type="ToolError", content="Error: computer says no"))
    assert found is not None
    assert (found.leaf_type, found.confidence, found.pattern, found.reason) == (
        tx.INVALID_ARGS,
        0.5,
        "unclassified",
        "unclassified",
    )
    assert found.snippet == "Error: computer says no"
    # a model call keeps its own default
    llm = classify_failure(None, None, None, None, source="llm_call")
    assert llm is not None and (llm.leaf_type, llm.reason) == (tx.API_ERROR, "unclassified")
    # a cancelled call is the one failure that classifies to nothing
    for name in ("asyncio.CancelledError", "KeyboardInterrupt", "AbortError"):
        assert tool_failure(ToolResult(is_error=True, error_type=name, content="Error: stopped")) is None


@pytest.mark.parametrize(
    ("message", "leaf", "reason"),
    [
        # a business compound is no tool subject: the record is missing, the tool exists
        ("Error: Payment method 'pm_123' not found", tx.BAD_QUERY, "not_found"),
        ("Error: Shipping method 'EXPRESS-9' does not exist", tx.BAD_QUERY, "not_found"),
        ("Error: Image URL 'x.png' not found", tx.BAD_QUERY, "not_found"),
        ("Error: Method 'tools/cal' not found", tx.TOOL_NOT_FOUND, "tool_not_found"),
        ("Error: Tool 'transfer_to_agent' not found.", tx.TOOL_NOT_FOUND, "tool_not_found"),
        # pydantic's extra_forbidden is an argument too many, not a permission problem
        (
            "Error: 1 validation error for Address\nregion\n  Extra inputs are not permitted "
            "[type=extra_forbidden, input_value='Callao', input_type=str]",
            tx.INVALID_ARGS,
            "unexpected_field",
        ),
        ("Error: Forbidden", tx.AUTH_MISUSE, "auth_misuse"),
        # Python's own error text leaking from a tool
        ("Error: 'NoneType' object has no attribute 'strip'", tx.INVALID_ARGS, "missing_field"),
        ("Error: 'str' object has no attribute 'strip'", tx.INVALID_ARGS, "wrong_type"),
        (
            "Error: '<' not supported between instances of 'str' and 'datetime.datetime'",
            tx.INVALID_ARGS,
            "wrong_type",
        ),
        # a call to make first is a skipped step; credentials named as the problem stay auth_misuse
        ("Error: call get_order_details first", tx.STATE_ERROR, "precondition"),
        ("Error: you must call authenticate before get_account", tx.STATE_ERROR, "precondition"),
        ("Error: authentication required", tx.AUTH_MISUSE, "auth_misuse"),
        ("Error: You are not allowed to access this repository", tx.AUTH_MISUSE, "auth_misuse"),
        ("Error: Customer 'CUST-5' is not allowed to place orders", tx.STATE_ERROR, "not_eligible"),
        # a parser naming an unexpected token read a body that was not JSON
        (
            "SyntaxError: Unexpected token < in JSON at position 0",
            tx.MALFORMED_RESPONSE,
            "malformed_response",
        ),
        ("Error: SyntaxError: Unexpected token", tx.MALFORMED_RESPONSE, "malformed_response"),
        ('ERROR:  syntax error at or near "FORM"', tx.BAD_QUERY, "query_syntax"),
        # the longest phrase decides among one group's phrases
        ("Error: payment exceeds the available balance", tx.STATE_ERROR, "insufficient_funds"),
        ("Your credit balance is too low to access the API", tx.RATE_LIMIT, "rate_limit"),  # API billing
    ],
)
def test_failed_tool_messages(message: str, leaf: str, reason: str) -> None:
    found = tool_failure(ToolResult(is_error=True, error_type="ToolError", content=message))
    assert found is not None and (found.leaf_type, found.reason) == (leaf, reason), found


# --- the gate: only failed results are classified ----------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        '{"error": {"message": "Rate limit exceeded"}}',
        '{"errors": [{"message": "Field title is required"}]}',
        '{"status": "error", "message": "Invalid response"}',
        '{"status": "ERROR", "message": "x"}',
        "{'error': 'Connection refused'}",  # a Python dict printed with str()
        "Error: Connection refused",
        "error: unknown tool foo",
        "  Exception: database is locked",
        "Traceback (most recent call last):\n  File ...\nKeyError: 'city'",
    ],
)
def test_unmistakable_error_payloads(content: str) -> None:
    assert content_is_error(content)


@pytest.mark.parametrize(
    "content",
    [
        '{"error": null, "data": [1]}',
        '{"error": false}',
        '{"error": ""}',
        '{"errors": []}',
        '{"status": "ok", "message": "Rate limit exceeded warnings: none"}',
        '{"status": "failed_checks: 0"}',
        "Errors: 0",
        "Error rate is 0.1% (timeout budget fine)",
        "The error: none",
        "error: 0, warnings: 2 (build succeeded)",  # a count of errors
        "Error: none",
        "ERROR: 0",
        "error: n/a",
        '[{"error": "x"}]',
        "HTTP 429 Too Many Requests",
        None,
        "",
    ],
)
def test_not_error_payloads(content: str | None) -> None:
    assert not content_is_error(content)
    assert tool_failure(ToolResult(content=content)) is None


def test_error_payload_fields() -> None:
    payload = error_payload_of(
        '{"error":{"code":403,"message":"Quota exceeded","status":"PERMISSION_DENIED",'
        '"details":[{"reason":"rateLimitExceeded"}]}}'
    )
    assert payload is not None and payload.is_error
    assert payload.status_code == 403
    assert "PERMISSION_DENIED" in payload.codes and "rateLimitExceeded" in payload.codes
    assert "Quota exceeded" in payload.messages
    jsonrpc = error_payload_of(
        '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}'
    )
    assert jsonrpc is not None and "-32601" in jsonrpc.codes and jsonrpc.status_code is None


def test_successful_result_mentioning_errors_is_never_classified() -> None:
    for text in (
        "Found 3 lines containing 'timeout'",
        "HTTP 429 Too Many Requests: the user has sent too many requests",
        "Weather: sunny, no rate limit warnings today",
        '{"rate_limit": {"remaining": 0}, "error": null}',
    ):
        assert tool_failure(ToolResult(content=text)) is None
        assert tool_failure(ToolResult(content=text, is_error=False, status_code=200)) is None


# --- robustness ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"status_code": "429"},
        {"status_code": True},
        {"status_code": 99999},
        {"error_type": 12},
        {"error_type": ""},
        {"error_type": "...."},
        {"error_message": b"bytes"},
        {"content": ["a list"]},
        {"content": "{" * 100_000},
        {"content": "'" + "{'a': " * 10_000},
        {"content": "{'error': " * 3000 + "1" + "}" * 3000},
        {"content": "{'error': " * 1800 + "1" + "}" * 1800},  # a nested Python repr small enough to parse
        {"error_message": "x" * 100_000},
        {"error_message": "\x00\ufffd\u202e" * 1000},
    ],
)
def test_odd_inputs_never_raise(fields: dict[str, Any]) -> None:
    classify_failure(
        fields.get("status_code"),
        fields.get("error_type"),
        fields.get("error_message"),
        fields.get("content"),
    )
    classify_failure(
        fields.get("status_code"),
        fields.get("error_type"),
        fields.get("error_message"),
        fields.get("content"),
        source="llm_call",
    )


def test_100kb_payloads_are_linear_time() -> None:
    payload = '{"error": {"message": "' + ("rate limit not found timed out " * 3500) + '"}}'
    blob = "not found " * 10_000 + "Tool x not found"
    started = time.perf_counter()
    for n in range(20):
        classify_failure(None, None, f"{n} " + blob, payload)
        empty_result_of(" " * 100_000 + str(n))
    assert time.perf_counter() - started < 2.0


def test_a_result_asked_both_questions_soon_is_parsed_once_and_never_answered_for_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[str] = []
    loads = payload.orjson.loads

    def counted(text: str) -> Any:
        parsed.append(text)
        return loads(text)

    monkeypatch.setattr(payload.orjson, "loads", counted)
    monkeypatch.setattr(payload, "_recent_parses", ())
    failed = '{"error": "rate limited", "results": []}'
    assert content_is_error(failed) and empty_result_of(failed) == "empty_results"
    assert parsed == [failed]
    # Alternating texts, one of them the same length as the other: each its own answer, one parse.
    empty, twin = '{"error": null, "results": []}', '{"error":"oops","results":[1]}'
    assert len(empty) == len(twin)
    for _ in range(2):
        assert empty_result_of(empty) == "empty_results"
        assert error_payload_of(empty) == ErrorPayload(None, (), (), False)
        assert empty_result_of(twin) is None
        # stripped, the same text as just parsed
        assert error_payload_of(" " + twin) == ErrorPayload(None, ("oops",), ("oops",), True)
    assert parsed == [failed, empty, twin]
    # Not JSON: remembered as such; a text too long to ask whether it is empty is not kept at all.
    broken = '{"error": "unterminated'
    assert error_payload_of(broken) is None and empty_result_of(broken) is None
    assert parsed[-1] == broken and parsed.count(broken) == 1
    long = '{"error": "x", "pad": "' + "y" * payload.EMPTY_JSON_MAX_CHARS + '"}'
    assert content_is_error(long) and long not in dict(payload._recent_parses)
    # Only the latest few are kept.
    others = [f'{{"results": [], "n": {n}}}' for n in range(payload._RECENT_PARSES)]
    assert [empty_result_of(text) for text in [*others, empty]] == ["empty_results"] * (len(others) + 1)
    assert parsed[-len(others) - 1 :] == [*others, empty]
