"""The evidence rules of failure classification (otelsignals/signals/errors/rules.py), rule by rule.

Each rule has positives (the rule decides, with the leaf it gives) and near-misses: inputs that look
like the rule's evidence but must be left to a later rule, or classify to nothing at all. The rule
that decided is the signal instance's ``metadata.rule``.
"""

from __future__ import annotations

from typing import Any

import pytest

from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import redact_metadata
from otelsignals.signals.detect import detectors_of
from otelsignals.signals.errors import RULES, classify_failure
from otelsignals.signals.errors.evidence import gather
from otelsignals.signals.errors.library import library
from tests.signals.tool_conversations import failed, run

# The order the README documents ("Failure classification"): the first rule that decides wins.
DOCUMENTED_ORDER = (
    "http_status",
    "body_status",
    "exception_status",
    "text_status",
    "ambiguous_exception",
    "exception_type",
    "error_code",
    "text_phrase",
    "weak_exception_type",
    "exception_in_text",
    "unclassified",
)

TRACEBACK_KEY_ERROR = (
    "Traceback (most recent call last):\n  File \"tool.py\", line 3, in run\nKeyError: 'city'"
)
TRACEBACK_RUNTIME = "\n".join(
    (
        "Traceback (most recent call last):",
        '  File "conflict_resolver.py", line 3',
        "    timeout=5",
        "RuntimeError: boom",
    )
)

# rule → (fields of classify_failure, expected leaf, id)
POSITIVES: dict[str, list[tuple[dict[str, Any], str, str]]] = {
    "http_status": [
        ({"status_code": 429, "error_message": "Bad request"}, tx.RATE_LIMIT, "429-whatever-the-text"),
        ({"status_code": 403, "error_message": "Forbidden"}, tx.AUTH_MISUSE, "403"),
        ({"status_code": 403, "error_message": "API rate limit exceeded"}, tx.RATE_LIMIT, "403-rate-limit"),
        ({"status_code": 404, "error_message": "Order 123 not found"}, tx.BAD_QUERY, "404-record"),
        ({"status_code": 404, "error_message": "Tool get_wether not found"}, tx.TOOL_NOT_FOUND, "404-tool"),
        ({"status_code": 409, "error_message": "Insufficient funds"}, tx.STATE_ERROR, "409"),
        ({"status_code": 418}, tx.INVALID_ARGS, "other-4xx"),
        ({"status_code": 503}, tx.API_ERROR, "503"),
        ({"status_code": 413, "source": "llm_call"}, tx.CONTEXT_OVERFLOW, "413-model-call"),
    ],
    "body_status": [
        ({"content": '{"error": {"code": 403, "message": "Forbidden"}}'}, tx.AUTH_MISUSE, "code-403"),
        ({"content": '{"error": {"status": 429, "message": "slow down"}}'}, tx.RATE_LIMIT, "status-429"),
        (
            {"content": '{"statusCode": 404, "error": "Not Found", "message": "Route GET:/v1/x not found"}'},
            tx.TOOL_NOT_FOUND,
            "404-route",
        ),
        (
            {"error_type": "openai.RateLimitError", "content": '{"error": {"code": 500, "message": "boom"}}'},
            tx.API_ERROR,
            "before-the-exception-class",
        ),
    ],
    "exception_status": [
        ({"error_type": "openai.RateLimitError", "error_message": "slow down"}, tx.RATE_LIMIT, "429"),
        ({"error_type": "openai.AuthenticationError"}, tx.AUTH_MISUSE, "401"),
        ({"error_type": "anthropic.NotFoundError", "error_message": "model: x"}, tx.BAD_QUERY, "404"),
    ],
    "text_status": [
        ({"error_message": "Error code: 429 - {'error': {'message': 'quota'}}"}, tx.RATE_LIMIT, "error-code"),
        ({"error_message": "503 Server Error: Service Unavailable for url"}, tx.API_ERROR, "server-error"),
        ({"error_message": "HTTP 404: page missing"}, tx.BAD_QUERY, "http-404"),
        ({"status_code": 0, "error_message": "HTTP 429 Too Many Requests"}, tx.RATE_LIMIT, "span-status-0"),
    ],
    "ambiguous_exception": [
        (
            {
                "error_type": "pydantic.ValidationError",
                "error_message": "1 validation error for WeatherResponse\ntemp\n  field required",
            },
            tx.MALFORMED_RESPONSE,
            "response-model",
        ),
        (
            {
                "error_type": "ValidationError",
                "error_message": "1 validation error for GetWeatherArgs\ncity\n  field required",
            },
            tx.INVALID_ARGS,
            "arguments",
        ),
        (
            {"error_type": "ValidationError", "error_message": "something"},
            tx.INVALID_ARGS,
            "first-alternative",
        ),
        (
            {
                "error_type": "json.JSONDecodeError",
                "error_message": "Expecting value: line 1 column 1 (char 0)",
            },
            tx.MALFORMED_RESPONSE,
            "json",
        ),
    ],
    "exception_type": [
        ({"error_type": "httpx.ReadTimeout"}, tx.TIMEOUT, "dotted"),
        ({"error_type": "requests.exceptions.ConnectionError"}, tx.NETWORK, "network"),
        ({"error_type": "PermissionError", "error_message": "[Errno 13]"}, tx.AUTH_MISUSE, "permission"),
        (
            {"error_type": "httpx.ReadTimeout", "content": '{"error": {"code": "RESOURCE_EXHAUSTED"}}'},
            tx.TIMEOUT,
            "before-the-body-code",
        ),
    ],
    "error_code": [
        ({"content": '{"ok": false, "error": "channel_not_found"}'}, tx.BAD_QUERY, "slack"),
        (
            {"content": '{"error": {"status": "RESOURCE_EXHAUSTED", "message": "Quota"}}'},
            tx.RATE_LIMIT,
            "grpc",
        ),
        (
            {"content": '{"error": {"code": -32601, "message": "Method not found"}}'},
            tx.TOOL_NOT_FOUND,
            "json-rpc",
        ),
        ({"content": '{"error": {"type": "rate_limit_error", "message": "x"}}'}, tx.RATE_LIMIT, "type-field"),
    ],
    "text_phrase": [
        ({"error_message": "Rate limit exceeded, retry in 20s"}, tx.RATE_LIMIT, "rate-limit"),
        ({"error_message": "Tool get_wether not found"}, tx.TOOL_NOT_FOUND, "proximity"),
        ({"error_message": "Payment method 'pm_1' not found"}, tx.BAD_QUERY, "business-noun"),
        ({"error_message": "Delivery orders require delivery_info"}, tx.INVALID_ARGS, "field-name"),
        (
            {"error_type": "KeyError", "error_message": "rate limit exceeded"},
            tx.RATE_LIMIT,
            "beats-a-builtin",
        ),
    ],
    "weak_exception_type": [
        ({"error_type": "KeyError", "error_message": "'city'"}, tx.INVALID_ARGS, "key-error"),
        ({"error_type": "builtins.TypeError"}, tx.INVALID_ARGS, "dotted"),
        ({"error_type": "ValueError", "error_message": "something odd"}, tx.INVALID_ARGS, "value-error"),
        ({"content": TRACEBACK_KEY_ERROR}, tx.INVALID_ARGS, "traceback-last-line"),
    ],
    "exception_in_text": [
        ({"error_message": "Error: 'method_type'"}, tx.INVALID_ARGS, "bare-key-error"),
        ({"error_message": "Error: KeyError('city')"}, tx.INVALID_ARGS, "key-error-repr"),
        ({"error_message": "TypeError happened somewhere"}, tx.INVALID_ARGS, "type-error"),
    ],
    "unclassified": [
        ({"error_message": "Something odd happened"}, tx.INVALID_ARGS, "tool"),
        ({}, tx.INVALID_ARGS, "no-evidence"),
        ({"error_message": "weird", "source": "llm_call"}, tx.API_ERROR, "model-call"),
        ({"content": TRACEBACK_RUNTIME}, tx.INVALID_ARGS, "traceback-code-lines-are-no-evidence"),
    ],
}

# rule → (fields that look like its evidence, the rule that decides instead or None for nothing, id)
NEAR_MISSES: dict[str, list[tuple[dict[str, Any], str | None, str]]] = {
    "http_status": [
        ({"status_code": 200, "error_message": "HTTP 429 Too Many Requests"}, "text_phrase", "span-200"),
        ({"status_code": 600, "error_message": "Something odd"}, "unclassified", "not-a-status"),
        ({"status_code": 500, "error_type": "KeyboardInterrupt"}, None, "interrupted"),
    ],
    "body_status": [
        (
            {"status_code": 200, "content": '{"error": {"code": 403, "message": "denied"}}'},
            "unclassified",
            "span-status-hides-it",
        ),
        ({"content": '{"error": {"code": -32601, "message": "Method not found"}}'}, "error_code", "json-rpc"),
        ({"content": '{"error": {"code": 200, "message": "odd"}}'}, "unclassified", "not-an-error-status"),
    ],
    "exception_status": [
        (
            {"error_type": "openai.RateLimitError", "content": '{"error": {"code": 500, "message": "x"}}'},
            "body_status",
            "body-first",
        ),
        (
            {"error_type": "RateLimited", "error_message": "something"},
            "exception_type",
            "a-name-without-a-status",
        ),
        ({"status_code": 404, "error_type": "openai.RateLimitError"}, "http_status", "span-first"),
    ],
    "text_status": [
        ({"error_message": "Processed 429 records before failing"}, "unclassified", "a-count"),
        ({"error_message": "could not bind port 443"}, "unclassified", "a-port"),
        ({"status_code": 200, "error_message": "Error code: 429"}, "unclassified", "span-status-hides-it"),
    ],
    "ambiguous_exception": [
        (
            {"status_code": 422, "error_type": "ValidationError", "error_message": "x"},
            "http_status",
            "status",
        ),
        ({"error_message": "1 validation error for WeatherResponse"}, "text_phrase", "no-error-type"),
        ({"error_type": "Validation", "error_message": "something"}, "unclassified", "other-name"),
    ],
    "exception_type": [
        ({"error_type": "KeyError", "error_message": "rate limit exceeded"}, "text_phrase", "weak-builtin"),
        ({"error_type": "ReadTimeoutish"}, "unclassified", "not-the-name"),
        ({"error_type": "asyncio.CancelledError", "error_message": "timed out"}, None, "cancelled"),
    ],
    "error_code": [
        ({"content": '{"error": {"code": "E_WEIRD_THING", "message": "Weird"}}'}, "unclassified", "unknown"),
        ({"content": '{"error": {"code": 429}}'}, "body_status", "a-status-not-a-code"),
        (
            {"error_type": "httpx.ReadTimeout", "content": '{"error": {"code": "RESOURCE_EXHAUSTED"}}'},
            "exception_type",
            "error-type-first",
        ),
    ],
    "text_phrase": [
        ({"error_message": "Error: 'method_type'"}, "exception_in_text", "bare-key-error"),
        ({"error_message": "Something odd happened"}, "unclassified", "no-phrase"),
        ({"status_code": 429, "error_message": "Rate limit exceeded"}, "http_status", "status-first"),
        ({"error_message": "Exceeded 30000ms"}, "unclassified", "proximity-phrase-without-its-subject"),
    ],
    "weak_exception_type": [
        (
            {"error_type": "ValueError", "error_message": "Rate limit exceeded"},
            "text_phrase",
            "text-beats-it",
        ),
        ({"error_type": "KeyboardInterrupt"}, None, "interrupted"),
        ({"error_message": "KeyError"}, "exception_in_text", "in-the-text-only"),
    ],
    "exception_in_text": [
        ({"error_message": "Error: 'this is a quoted sentence'"}, "unclassified", "quoted-sentence"),
        ({"error_type": "KeyError", "error_message": "'city'"}, "weak_exception_type", "error-type-first"),
        ({"error_message": "key error in the cache layer"}, "unclassified", "not-the-name"),
    ],
    "unclassified": [
        ({"error_type": "asyncio.CancelledError"}, None, "cancelled"),
        ({"error_type": "KeyboardInterrupt", "source": "llm_call"}, None, "interrupted-model-call"),
        ({"error_message": "Request timed out"}, "text_phrase", "a-phrase"),
    ],
}


def _positives() -> list[Any]:
    return [
        pytest.param(rule, fields, leaf, id=f"{rule}-{name}")
        for rule, cases in POSITIVES.items()
        for fields, leaf, name in cases
    ]


def _near_misses() -> list[Any]:
    return [
        pytest.param(rule, fields, instead, id=f"{rule}-{name}")
        for rule, cases in NEAR_MISSES.items()
        for fields, instead, name in cases
    ]


def test_the_rule_order_is_the_documented_one() -> None:
    assert tuple(rule.name for rule in RULES) == DOCUMENTED_ORDER


def test_every_rule_has_positives_and_near_misses() -> None:
    for name in DOCUMENTED_ORDER:
        assert len(POSITIVES[name]) >= 3, name
        assert len(NEAR_MISSES[name]) >= 3, name
    assert set(POSITIVES) == set(NEAR_MISSES) == set(DOCUMENTED_ORDER)


@pytest.mark.parametrize(("rule", "fields", "leaf"), _positives())
def test_rule_decides(rule: str, fields: dict[str, Any], leaf: str) -> None:
    found = classify_failure(**fields)
    assert found is not None
    assert (found.rule, found.leaf_type) == (rule, leaf), found


@pytest.mark.parametrize(("rule", "fields", "instead"), _near_misses())
def test_rule_leaves_a_near_miss_to_another(rule: str, fields: dict[str, Any], instead: str | None) -> None:
    found = classify_failure(**fields)
    assert (found.rule if found is not None else None) == instead, found
    assert instead != rule


@pytest.mark.parametrize(("rule", "fields", "leaf"), _positives())
def test_no_earlier_rule_fires_on_a_positive(rule: str, fields: dict[str, Any], leaf: str) -> None:
    """The rule that decided is the first that fires: the order, not luck, picks it."""
    evidence = gather(
        library(),
        fields.get("status_code"),
        fields.get("error_type"),
        fields.get("error_message"),
        fields.get("content"),
        fields.get("source", "tool"),
        fields.get("tool_name"),
    )
    fired = [candidate.name for candidate in RULES if candidate.decide(evidence) is not None]
    assert fired[0] == rule, fired


def test_the_default_rule_decides_without_any_evidence() -> None:
    evidence = gather(library(), None, None, None, None, "tool", None)
    assert RULES[-1].decide(evidence) is not None


def test_the_deciding_rule_is_in_the_signal_metadata_and_survives_redaction() -> None:
    (instance,) = run(
        failed("transfer", {"amount": 5}, error_message="Insufficient funds in account"),
        detectors_of(tx.FAILURE, tx.LOOPS),
    )
    assert instance.type == tx.STATE_ERROR
    assert (instance.metadata["rule"], instance.metadata["reason"]) == ("text_phrase", "insufficient_funds")
    assert redact_metadata(instance.metadata)["rule"] == "text_phrase"
