"""The environment detectors, leaf by leaf: failed tool results and failed model calls."""

from __future__ import annotations

from typing import Any

import pytest

from otelsignals.model import Conversation, LlmCall, Message, Role, SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext
from otelsignals.signals.detect import detectors_of
from tests.signals.conversations import key, of_type
from tests.signals.tool_conversations import (
    assistant,
    call,
    exchange,
    failed,
    run,
    run_traces,
    succeeded,
    tool,
    user,
)

ENVIRONMENT_DETECTORS = detectors_of(tx.EXHAUSTION)
ALL = (*detectors_of(tx.FAILURE, tx.LOOPS), *ENVIRONMENT_DETECTORS)


def llm(
    status: int | None = None,
    error_type: str | None = None,
    message: str | None = None,
    *,
    span: bytes = b"",
    failed: bool = True,
    model: str | None = "gpt-4o",
) -> LlmCall:
    return LlmCall(
        span_id=span,
        model=model,
        failed=failed,
        error_type=error_type,
        error_message=message,
        status_code=status,
    )


CHAT = [user("What's the weather in Paris?"), Message(Role.ASSISTANT, "Let me check."), user("And tomorrow?")]

Case = tuple[list[Message], list[LlmCall], int]  # messages, failed model calls, expected message_index


def tool_case(messages: list[Message]) -> Case:
    return messages, [], 2


def llm_case(*calls: LlmCall) -> Case:
    return list(CHAT), list(calls), 2


def assert_env(case: Case, leaf: str) -> SignalInstance:
    messages, calls, index = case
    found = run(messages, ALL, calls)
    hits = of_type(found, leaf)
    assert [h.message_index for h in hits] == [index], found
    instance = hits[0]
    assert 0.0 <= instance.confidence <= 1.0
    assert instance.metadata["pattern"]
    assert instance.metadata["source"] == ("llm_call" if calls else "tool")
    assert instance.snippet is None or len(instance.snippet) <= 200
    # the outside world's fault: never also an execution failure
    assert not [i for i in found if i.type.startswith("execution.failure")], found
    return instance


def assert_not_env(case: Case, leaf: str) -> None:
    messages, calls, _ = case
    assert not of_type(run(messages, ALL, calls), leaf)


# --- rate_limit ------------------------------------------------------------------------------------------

RATE_LIMIT_POSITIVES: list[Case] = [
    tool_case(failed("search", {"q": "x"}, status_code=429)),
    tool_case(
        failed(
            "search",
            {"q": "x"},
            '{"error":{"message":"Rate limit reached for gpt-4o","code":"rate_limit_exceeded"}}',
            status_code=429,
        )
    ),
    tool_case(
        failed(
            "github_search",
            {"q": "x"},
            status_code=403,
            error_message="API rate limit exceeded for 203.0.113.7.",
        )
    ),
    tool_case(
        failed(
            "sheets",
            {},
            status_code=403,
            content='{"error":{"code":403,"message":"Quota exceeded for '
            'quota metric Queries","status":"PERMISSION_DENIED"}}',
        )
    ),
    tool_case(succeeded("slack_post", {"channel": "C1"}, '{"ok": false, "error": "ratelimited"}')),
    tool_case(failed("bedrock", {}, error_type="ThrottlingException", error_message="Too many requests")),
    llm_case(llm(429, "openai.RateLimitError", "Rate limit reached for gpt-4o on requests per min")),
    llm_case(llm(None, "anthropic.RateLimitError", None)),
    llm_case(llm(None, "google.api_core.exceptions.ResourceExhausted", "429 Resource has been exhausted")),
    llm_case(llm(None, None, "Error code: 429 - You exceeded your current quota")),
]

RATE_LIMIT_NEAR_MISSES: list[Case] = [
    tool_case(
        succeeded("docs", {"q": "429"}, "HTTP 429 Too Many Requests: the user has sent too many requests.")
    ),
    tool_case(succeeded("weather", {"city": "Paris"}, "Sunny, 21°C. No rate limit warnings today.")),
    tool_case(succeeded("gh_rate", {}, '{"rate": {"limit": 5000, "remaining": 4999}}')),
    tool_case(succeeded("logs", {"q": "rate"}, "Found 3 lines containing 'rate limit exceeded' in app.log")),
    tool_case(
        failed(
            "gh",
            {},
            status_code=401,
            error_message="Bad credentials. Authenticated requests get a higher rate limit.",
        )
    ),
    tool_case(
        failed("cfg", {"rate_limit": 0}, error_type="ValueError", error_message="rate_limit must be > 0")
    ),
    tool_case(failed("search", {}, status_code=503, error_message="Service Unavailable: retry later")),
    llm_case(llm(503, None, "overloaded, too many requests in flight")),
    llm_case(llm(429, "RateLimitError", "Rate limit", failed=False)),  # the call did not fail
]


@pytest.mark.parametrize("case", RATE_LIMIT_POSITIVES)
def test_rate_limit_fires(case: Case) -> None:
    assert_env(case, tx.RATE_LIMIT)


@pytest.mark.parametrize("case", RATE_LIMIT_NEAR_MISSES)
def test_rate_limit_near_misses(case: Case) -> None:
    assert_not_env(case, tx.RATE_LIMIT)


def test_a_429_from_a_tool_is_rate_limit_and_no_execution_failure() -> None:
    found = run(failed("search_flights", {"q": "x"}, status_code=429, error_message="Bad request"), ALL)
    assert [(i.type, i.message_index) for i in found] == [(tx.RATE_LIMIT, 2)]
    assert found[0].metadata == {
        "pattern": "http:429",
        "reason": "http_status",
        "rule": "http_status",
        "tool": "search_flights",
        "status_code": 429,
        "error_type": None,
        "source": "tool",
    }
    assert found[0].confidence == 0.95
    assert found[0].snippet == "Bad request"


# --- api_error -------------------------------------------------------------------------------------------

API_ERROR_POSITIVES: list[Case] = [
    tool_case(failed("crm", {}, status_code=503)),
    tool_case(
        failed(
            "crm",
            {},
            status_code=500,
            content='{"error":{"message":"The server had an error","type":"server_error"}}',
        )
    ),
    tool_case(failed("crm", {}, status_code=502, error_message="<html>502 Bad Gateway</html>")),
    tool_case(
        failed(
            "crm",
            {},
            error_type="requests.exceptions.HTTPError",
            error_message="500 Server Error: Internal Server Error for url: https://api.example.com/v1",
        )
    ),
    tool_case(succeeded("drive", {}, '{"error": {"code": 500, "message": "Internal error encountered."}}')),
    tool_case(failed("crm", {}, status_code=503, error_message="upstream request timeout")),
    llm_case(llm(503, None, "The engine is currently overloaded")),
    llm_case(llm(529, None, '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')),
    llm_case(llm(401, "openai.AuthenticationError", "Incorrect API key provided")),  # not a tool misuse
    llm_case(llm(None, None, None)),  # a failed call that says nothing more
    llm_case(llm(None, "_OTHER", None)),
]

API_ERROR_NEAR_MISSES: list[Case] = [
    tool_case(
        succeeded("status", {}, "All systems operational; last internal server error incident on May 2.")
    ),
    tool_case(
        succeeded("docs", {"q": "503"}, "HTTP 503 Service Unavailable indicates the server is unavailable.")
    ),
    tool_case(succeeded("deploy", {}, "Deployed v2.3.1 — fixes the 500 error on /checkout.")),
    tool_case(failed("crm", {}, status_code=429, error_message="Service temporarily unavailable")),
    tool_case(failed("crm", {}, status_code=504, error_message="Gateway Timeout")),
    tool_case(failed("crm", {})),  # a tool failure with no evidence is not guessed at
    llm_case(llm(None, "asyncio.CancelledError", None)),  # cancelled: nobody's failure
    llm_case(llm(500, None, "Internal server error", failed=False)),
    llm_case(llm(400, "BadRequestError", "This model's maximum context length is 8192 tokens")),
]


@pytest.mark.parametrize("case", API_ERROR_POSITIVES)
def test_api_error_fires(case: Case) -> None:
    assert_env(case, tx.API_ERROR)


@pytest.mark.parametrize("case", API_ERROR_NEAR_MISSES)
def test_api_error_near_misses(case: Case) -> None:
    assert_not_env(case, tx.API_ERROR)


def test_a_503_is_api_error() -> None:
    (instance,) = run(failed("crm", {"id": 1}, status_code=503, error_message="Service Unavailable"), ALL)
    assert (instance.type, instance.message_index, instance.confidence) == (tx.API_ERROR, 2, 0.95)
    assert instance.metadata["status_code"] == 503


def test_an_unexplained_model_failure_has_low_confidence() -> None:
    (instance,) = run(CHAT, ALL, [llm(None, None, None)])
    assert (instance.type, instance.confidence, instance.metadata["pattern"]) == (
        tx.API_ERROR,
        0.5,
        "failed_call",
    )


# --- timeout ---------------------------------------------------------------------------------------------

TIMEOUT_POSITIVES: list[Case] = [
    tool_case(
        failed("weather", {}, error_type="httpx.ReadTimeout", error_message="The read operation timed out")
    ),
    tool_case(failed("weather", {}, error_type="asyncio.TimeoutError")),
    tool_case(
        failed(
            "weather",
            {},
            error_type="requests.exceptions.ConnectTimeout",
            error_message="HTTPSConnectionPool(host='x', port=443): Max retries exceeded (connect timeout=5)",
        )
    ),
    tool_case(failed("weather", {}, status_code=504, error_message="Gateway Timeout")),
    tool_case(failed("weather", {}, status_code=408)),
    tool_case(
        failed(
            "sql",
            {},
            error_type="psycopg2.errors.QueryCanceled",
            error_message="canceling statement due to statement timeout",
        )
    ),
    tool_case(succeeded("browser", {}, "Error: page.goto: Timeout 30000ms exceeded.")),
    tool_case(failed("lambda", {}, error_message="Task timed out after 30.03 seconds")),
    llm_case(llm(None, "openai.APITimeoutError", "Request timed out.")),
    llm_case(llm(504, None, None)),
]

TIMEOUT_NEAR_MISSES: list[Case] = [
    tool_case(succeeded("logs", {"q": "timeout"}, "Found 3 lines containing 'timeout' in app.log")),
    tool_case(succeeded("docs", {"q": "timeout"}, "The default request timeout is 30 seconds.")),
    tool_case(succeeded("config", {}, '{"timeout_ms": 5000, "retries": 3}')),
    tool_case(succeeded("parking", {}, "Your parking session timed out at 18:00 and was renewed.")),
    tool_case(
        failed("cfg", {}, error_type="ValueError", error_message="timeout must be a non-negative number")
    ),
    tool_case(
        failed("cfg", {}, status_code=400, error_message="Invalid value for 'timeout': expected an integer")
    ),
    tool_case(failed("crm", {}, status_code=503, error_message="upstream request timeout")),
    llm_case(llm(None, "openai.APITimeoutError", "Request timed out.", failed=False)),
]


@pytest.mark.parametrize("case", TIMEOUT_POSITIVES)
def test_timeout_fires(case: Case) -> None:
    assert_env(case, tx.TIMEOUT)


@pytest.mark.parametrize("case", TIMEOUT_NEAR_MISSES)
def test_timeout_near_misses(case: Case) -> None:
    assert_not_env(case, tx.TIMEOUT)


# --- network ---------------------------------------------------------------------------------------------

NETWORK_POSITIVES: list[Case] = [
    tool_case(
        failed("api", {}, error_type="ConnectionRefusedError", error_message="[Errno 111] Connection refused")
    ),
    tool_case(
        failed(
            "api", {}, error_type="httpx.ConnectError", error_message="[Errno -2] Name or service not known"
        )
    ),
    tool_case(
        failed("api", {}, error_type="socket.gaierror", error_message="[Errno 8] nodename nor servname")
    ),
    tool_case(
        failed("api", {}, error_type="ENOTFOUND", error_message="getaddrinfo ENOTFOUND api.example.com")
    ),
    tool_case(failed("api", {}, error_type="ECONNRESET", error_message="socket hang up")),
    tool_case(succeeded("api", {}, "Error: getaddrinfo ENOTFOUND api.stripe.test")),
    tool_case(failed("api", {}, error_message="TypeError: fetch failed")),
    tool_case(
        failed(
            "db",
            {},
            error_type="psycopg2.OperationalError",
            error_message="could not connect to server: Connection refused",
        )
    ),
    llm_case(llm(None, "openai.APIConnectionError", "Connection error.")),
    llm_case(
        llm(None, "aiohttp.client_exceptions.ClientConnectorError", "Cannot connect to host api.openai.com")
    ),
]

NETWORK_NEAR_MISSES: list[Case] = [
    tool_case(succeeded("ping", {"host": "8.8.8.8"}, "4 packets transmitted, 4 received, 0% packet loss")),
    tool_case(succeeded("docs", {"q": "econnrefused"}, "Docs: ECONNREFUSED means no process is listening.")),
    tool_case(
        succeeded("incidents", {}, "Found 2 incidents mentioning 'connection refused'; both resolved.")
    ),
    tool_case(succeeded("vpn", {}, '{"status": "ok", "connections": {"active": 12, "refused": 0}}')),
    tool_case(failed("api", {}, status_code=502, error_message="Bad Gateway: connection reset by upstream")),
    tool_case(
        failed("api", {}, error_type="ValueError", error_message="connection string must start with pg://")
    ),
    tool_case(
        failed("api", {}, error_type="requests.exceptions.ReadTimeout", error_message="Read timed out.")
    ),
    llm_case(llm(None, "openai.APIConnectionError", "Connection error.", failed=False)),
]


@pytest.mark.parametrize("case", NETWORK_POSITIVES)
def test_network_fires(case: Case) -> None:
    assert_env(case, tx.NETWORK)


@pytest.mark.parametrize("case", NETWORK_NEAR_MISSES)
def test_network_near_misses(case: Case) -> None:
    assert_not_env(case, tx.NETWORK)


# --- malformed_response ----------------------------------------------------------------------------------

MALFORMED_POSITIVES: list[Case] = [
    tool_case(
        failed(
            "api",
            {},
            error_type="json.decoder.JSONDecodeError",
            error_message="Expecting value: line 1 column 1 (char 0)",
        )
    ),
    tool_case(
        failed(
            "api", {}, error_message="SyntaxError: Unexpected token '<', \"<!DOCTYPE \"... is not valid JSON"
        )
    ),
    tool_case(
        failed(
            "api",
            {},
            error_type="aiohttp.ContentTypeError",
            error_message="Attempt to decode JSON with unexpected mimetype: text/html",
        )
    ),
    tool_case(
        failed(
            "weather",
            {},
            error_type="ValidationError",
            error_message="1 validation error for WeatherResponse\ntemperature\n  Field required",
        )
    ),
    tool_case(succeeded("search", {}, "Error: the search API returned an unexpected response format")),
    tool_case(succeeded("api", {}, '{"status": "error", "message": "Invalid response from upstream"}')),
    tool_case(
        failed("parse", {}, error_type="OutputParserException", error_message="Could not parse LLM output")
    ),
    llm_case(
        llm(None, "openai.APIResponseValidationError", "Data returned by API invalid for expected schema.")
    ),
    llm_case(llm(None, "JSONDecodeError", "Expecting property name enclosed in double quotes")),
]

MALFORMED_NEAR_MISSES: list[Case] = [
    tool_case(succeeded("docs", {"q": "json"}, "JSON is a lightweight data-interchange format.")),
    tool_case(succeeded("validate", {}, "Validated 120 records: 0 malformed rows.")),
    tool_case(
        succeeded("so", {"q": "json"}, "Found 4 answers for 'Unexpected token < in JSON at position 0'.")
    ),
    tool_case(succeeded("api", {}, '{"format": "json", "valid": true}')),
    tool_case(
        failed(
            "search",
            {},
            error_type="ValidationError",
            error_message="1 validation error for SearchArgs\nquery\n  Field required",
        )
    ),
    tool_case(
        failed("api", {}, status_code=400, error_message="We could not parse the JSON body of your request.")
    ),
    tool_case(failed("api", {}, error_message="Failed to parse tool arguments as JSON: Expecting value")),
    tool_case(failed("api", {}, status_code=502, error_message="Invalid response from upstream")),
]


@pytest.mark.parametrize("case", MALFORMED_POSITIVES)
def test_malformed_response_fires(case: Case) -> None:
    assert_env(case, tx.MALFORMED_RESPONSE)


@pytest.mark.parametrize("case", MALFORMED_NEAR_MISSES)
def test_malformed_response_near_misses(case: Case) -> None:
    assert_not_env(case, tx.MALFORMED_RESPONSE)


# --- context_overflow ------------------------------------------------------------------------------------

OVERFLOW_POSITIVES: list[Case] = [
    llm_case(
        llm(
            400,
            "openai.BadRequestError",
            "This model's maximum context length is 128000 tokens. However, "
            "your messages resulted in 131072 tokens.",
        )
    ),
    llm_case(llm(None, "context_length_exceeded", None)),
    llm_case(llm(400, None, "prompt is too long: 208310 tokens > 200000 maximum")),
    llm_case(llm(413, None, "Request Entity Too Large")),
    llm_case(llm(None, "litellm.ContextWindowExceededError", "ContextWindowExceededError")),
    llm_case(llm(400, "ValidationException", "Input is too long for requested model.")),
    llm_case(llm(400, None, "The input token count (1204512) exceeds the maximum number of tokens allowed")),
    tool_case(
        failed(
            "subagent",
            {},
            status_code=400,
            content='{"error":{"message":"maximum context length is 8192","code":"context_length_exceeded"}}',
        )
    ),
    tool_case(
        succeeded("summarise", {}, "Error: tool output of 412,000 tokens exceeds the model's context window")
    ),
]

OVERFLOW_NEAR_MISSES: list[Case] = [
    tool_case(succeeded("models", {}, "GPT-4o has a 128k token context window.")),
    tool_case(
        succeeded("count", {}, "The document is 3,200 tokens, well within the maximum context length.")
    ),
    tool_case(succeeded("faq", {}, "Tip: reduce the length of the messages by summarising older turns.")),
    tool_case(succeeded("models", {}, '{"context_window": 200000, "max_output_tokens": 8192}')),
    tool_case(
        failed("x", {}, status_code=429, error_message="Request too large for gpt-4 on tokens per min (TPM)")
    ),
    tool_case(failed("x", {}, error_type="ValueError", error_message="max_tokens must be at most 4096")),
    llm_case(llm(429, None, "Request too large for gpt-4 in organization org-x on tokens per min (TPM)")),
    llm_case(llm(400, "BadRequestError", "Invalid 'messages[2].content': string too long", failed=False)),
]


@pytest.mark.parametrize("case", OVERFLOW_POSITIVES)
def test_context_overflow_fires(case: Case) -> None:
    assert_env(case, tx.CONTEXT_OVERFLOW)


@pytest.mark.parametrize("case", OVERFLOW_NEAR_MISSES)
def test_context_overflow_near_misses(case: Case) -> None:
    assert_not_env(case, tx.CONTEXT_OVERFLOW)


# --- model calls: where they land, once each -------------------------------------------------------------


def test_model_call_signal_metadata() -> None:
    (instance,) = run(
        CHAT, ALL, [llm(429, "openai.RateLimitError", "Rate limit reached", model="gpt-4o-mini")]
    )
    assert instance.type == tx.RATE_LIMIT
    assert instance.message_index == 2
    assert instance.snippet == "Rate limit reached"
    assert instance.metadata == {
        "pattern": "http:429",
        "reason": "http_status",
        "rule": "http_status",
        "source": "llm_call",
        "status_code": 429,
        "error_type": "openai.RateLimitError",
        "model": "gpt-4o-mini",
        "count": 1,
    }


def test_model_call_on_an_empty_conversation_is_at_message_0() -> None:
    (instance,) = run([], ALL, [llm(503)])
    assert (instance.type, instance.message_index) == (tx.API_ERROR, 0)


def test_model_call_lands_on_the_last_message_of_its_own_span() -> None:
    messages = [
        Message(Role.USER, "hi", span_id=b"s1"),
        Message(Role.ASSISTANT, "hello", span_id=b"s1"),
        Message(Role.USER, "book it", span_id=b"s2"),
        Message(Role.ASSISTANT, "done", span_id=b"s3"),
    ]
    (instance,) = run(messages, ALL, [llm(503, span=b"s2")])
    assert instance.message_index == 2
    (instance,) = run(messages, ALL, [llm(503, span=b"unknown")])
    assert instance.message_index == 3
    trimmed = Conversation("c", messages[2:], message_offset=2)
    (instance,) = ENVIRONMENT_DETECTORS[0](DetectionContext(trimmed, 0, [llm(503, span=b"s2")], {}))
    assert instance.message_index == 2


def test_several_failed_calls_at_one_message_make_one_instance() -> None:
    found = run(CHAT, ALL, [llm(429, span=b"a"), llm(429, span=b"b"), llm(503, span=b"c")])
    assert sorted((i.type, i.message_index) for i in found) == [(tx.API_ERROR, 2), (tx.RATE_LIMIT, 2)]
    (rate,) = of_type(found, tx.RATE_LIMIT)
    assert rate.metadata["count"] == 2


def test_a_model_call_handed_over_twice_counts_once() -> None:
    memory: dict[str, Any] = {}
    conversation = Conversation("c", list(CHAT))
    first = [
        i
        for d in ENVIRONMENT_DETECTORS
        for i in d(DetectionContext(conversation, 0, [llm(503, span=b"x")], memory))
    ]
    conversation.messages.append(Message(Role.ASSISTANT, "sorry"))
    again = [
        i
        for d in ENVIRONMENT_DETECTORS
        for i in d(DetectionContext(conversation, 3, [llm(503, span=b"x")], memory))
    ]
    assert len(first) == 1
    assert again == []


def test_a_tool_429_and_a_model_429_on_the_same_message_make_one_instance() -> None:
    messages = failed("search", {"q": "x"}, status_code=429)
    found = run(messages, ALL, [llm(429)])
    assert [(i.type, i.message_index) for i in found] == [(tx.RATE_LIMIT, 2)]


# --- incremental -----------------------------------------------------------------------------------------


def test_trace_by_trace_gives_the_same_instances_as_one_pass() -> None:
    def spanned(messages: list[Message], span: bytes) -> list[Message]:
        for m in messages:
            m.span_id = span
        return messages

    traces: list[tuple[list[Message], list[LlmCall]]] = [
        (
            spanned(
                [
                    user("weather?"),
                    *exchange("weather", {"city": "Paris"}, None, is_error=True, status_code=503),
                ],
                b"t1",
            ),
            [llm(429, span=b"t1")],
        ),
        (
            spanned([user("again"), assistant(c := call("weather", {"city": "Paris"}))], b"t2"),
            [llm(None, span=b"t2")],
        ),
        (spanned([tool(None, answers=c, is_error=True, error_type="httpx.ReadTimeout")], b"t3"), []),
        (
            spanned([user("flights?")], b"t4"),
            [llm(400, "BadRequestError", "maximum context length", span=b"t4")],
        ),
        (spanned([*exchange("search", {"q": "x"}, '{"error": {"code": "ECONNREFUSED"}}')], b"t5"), []),
        (spanned([user("ok")], b"t6"), [llm(None, "JSONDecodeError", "Expecting value", span=b"t6")]),
    ]
    pieces = run_traces(traces, ALL)
    messages = [m for chunk, _ in traces for m in chunk]
    calls = [c for _, chunk in traces for c in chunk]
    whole = run(messages, ALL, calls)
    assert sorted(map(key, pieces)) == sorted(map(key, whole))
    assert sorted((i.type, i.message_index) for i in whole) == [
        (tx.API_ERROR, 2),
        (tx.API_ERROR, 4),
        (tx.CONTEXT_OVERFLOW, 6),
        (tx.MALFORMED_RESPONSE, 9),
        (tx.NETWORK, 8),
        (tx.RATE_LIMIT, 2),
        (tx.TIMEOUT, 5),
    ]
