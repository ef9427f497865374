"""The execution detectors (failures and loops), leaf by leaf, on short conversations with tool calls.

Each table row is a conversation (user → assistant tool call → tool result …); positives assert the
exact leaf and message_index, near-misses assert that the leaf does not fire (and, for successful
results that merely talk about errors, that nothing at all fires).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from otelsignals.model import Conversation, LlmCall, Message, Role, SignalInstance, ToolCall, ToolResult
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext
from otelsignals.signals.detect import detectors_of
from otelsignals.signals.failure import is_query_call
from otelsignals.signals.loops import DRIFT_LOWER_BOUND, adjusted, arguments_similarity, text_similarity

EXECUTION_DETECTORS = detectors_of(tx.FAILURE, tx.LOOPS)
ALL = (*EXECUTION_DETECTORS, *detectors_of(tx.EXHAUSTION))
_ids = itertools.count(1)


# --- builders ----------------------------------------------------------------------------------------


def user(text: str = "Please help.") -> Message:
    return Message(Role.USER, text)


def call(name: str, arguments: Any = None, call_id: str | None = "auto") -> ToolCall:
    return ToolCall(name, arguments, f"call_{next(_ids)}" if call_id == "auto" else call_id)


def assistant(*calls: ToolCall, text: str | None = None) -> Message:
    return Message(Role.ASSISTANT, text, tool_calls=list(calls))


def tool(content: str | None = None, *, answers: ToolCall | None = None, **fields: Any) -> Message:
    """A TOOL message; ``answers`` gives its call id and name, ``fields`` the ToolResult's others."""
    if answers is not None:
        fields.setdefault("call_id", answers.id)
        fields.setdefault("name", answers.name)
    result = ToolResult(content=content, **fields)
    return Message(Role.TOOL, content, tool_result=result)


def exchange(name: str, arguments: Any, content: str | None = None, **fields: Any) -> list[Message]:
    """An assistant call and its result."""
    c = call(name, arguments)
    return [assistant(c), tool(content, answers=c, **fields)]


def failed(name: str, arguments: Any, content: str | None = None, **fields: Any) -> list[Message]:
    """user → assistant call → failed tool result (message 2)."""
    return [user(), *exchange(name, arguments, content, is_error=True, **fields)]


def succeeded(name: str, arguments: Any, content: str) -> list[Message]:
    """user → assistant call → successful tool result (message 2)."""
    return [user(), *exchange(name, arguments, content)]


def run(
    messages: list[Message],
    detectors: tuple = ALL,
    llm_calls: list[LlmCall] | None = None,
    memory: dict[str, Any] | None = None,
) -> list[SignalInstance]:
    ctx = DetectionContext(
        Conversation("c", list(messages)), 0, list(llm_calls or []), {} if memory is None else memory
    )
    found: list[SignalInstance] = []
    for detector in detectors:
        found += detector(ctx)
    return found


def run_traces(
    traces: list[tuple[list[Message], list[LlmCall]]], detectors: tuple = ALL
) -> list[SignalInstance]:
    """Feed a conversation trace by trace: the messages grow, ``new_from`` moves, memory is kept."""
    conversation = Conversation("c")
    memory: dict[str, Any] = {}
    found: list[SignalInstance] = []
    for messages, llm_calls in traces:
        start = len(conversation.messages)
        conversation.messages.extend(messages)
        ctx = DetectionContext(conversation, start, list(llm_calls), memory)
        for detector in detectors:
            found += detector(ctx)
    return found


def of(instances: list[SignalInstance], leaf: str) -> list[SignalInstance]:
    return [i for i in instances if i.type == leaf]


def identity(instance: SignalInstance) -> tuple[Any, ...]:
    return (
        instance.type,
        instance.message_index,
        instance.confidence,
        instance.snippet,
        repr(instance.metadata),
    )


def assert_one(messages: list[Message], leaf: str, index: int, **kwargs: Any) -> SignalInstance:
    found = run(messages, **kwargs)
    hits = of(found, leaf)
    assert [h.message_index for h in hits] == [index], found
    instance = hits[0]
    assert 0.0 <= instance.confidence <= 1.0
    assert instance.metadata["pattern"]
    assert instance.snippet is None or len(instance.snippet) <= 200
    # A leaf of one layer never comes with an execution failure on the same message unless it is it.
    same_message_failures = [
        i
        for i in found
        if i.message_index == index and i.type.startswith("execution.failure") and i.type != leaf
    ]
    assert not same_message_failures, found
    return instance


def assert_none(messages: list[Message], leaf: str) -> None:
    found = run(messages)
    assert not of(found, leaf), found


def assert_silent(messages: list[Message]) -> None:
    assert run(messages) == []


# --- failure.invalid_args ------------------------------------------------------------------------------

INVALID_ARGS_POSITIVES = [
    failed(
        "get_weather",
        {"town": "Paris"},
        error_type="pydantic_core._pydantic_core.ValidationError",
        error_message="1 validation error for GetWeatherArgs\ncity\n  Field required [type=missing]",
    ),
    failed(
        "get_weather",
        {"town": "Paris"},
        error_type="TypeError",
        error_message="get_weather() got an unexpected keyword argument 'town'",
    ),
    failed(
        "search",
        {},
        "Traceback (most recent call last):\n  ...\nTypeError: search() missing 1 required "
        "positional argument: 'query'",
    ),
    failed(
        "create_charge",
        {"currency": "usd"},
        '{"error":{"code":"parameter_missing","message":"Missing required param: amount.","param":"amount",'
        '"type":"invalid_request_error"}}',
        status_code=400,
    ),
    failed(
        "create_issue",
        {"body": "x"},
        '{"message":"Validation Failed",'
        '"errors":[{"resource":"Issue","code":"missing_field","field":"title"}]}',
        status_code=422,
    ),
    # MCP: an error result without span status, recognised from the JSON-RPC error payload.
    succeeded(
        "read_file",
        {"path": 3},
        '{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Invalid params"}}',
    ),
    # LangGraph ToolNode's error text, recognised from its "Error:" prefix.
    succeeded(
        "search_flights",
        {"date": "next friday"},
        "Error: 1 validation error for search_flights\ndate\n  Input should be a valid date\n"
        " Please fix your mistakes.",
    ),
    failed("lookup", {"id": "x"}, error_type="KeyError", error_message="'customer_id'"),
    failed("sheets_update", {"values": "abc"}, status_code=400, error_message="Bad Request"),
    [
        user(),
        assistant(call("s3_put", "{not json")),
        tool(
            None,
            is_error=True,
            name="s3_put",
            error_type="botocore.exceptions.ParamValidationError",
            error_message='Missing required parameter in input: "Bucket"',
        ),
    ],
]

INVALID_ARGS_NEAR_MISSES = [
    succeeded("lint", {"path": "app.py"}, "Validated 3 arguments: all OK."),
    succeeded("docs", {"q": "400"}, "Docs: 400 Bad Request means the server cannot process the request."),
    succeeded(
        "so_search",
        {"q": "unexpected keyword"},
        "Found 2 answers for 'TypeError: unexpected keyword argument'",
    ),
    succeeded("validate", {"doc": 1}, '{"valid": true, "errors": []}'),
    succeeded("validate", {"doc": 1}, '{"status": "ok", "error": null, "missing_required": []}'),
    failed("search", {"q": "x"}, status_code=429, error_message="Invalid request: too many requests"),
    failed(
        "weather",
        {"city": "Paris"},
        error_type="ValidationError",
        error_message="1 validation error for WeatherResponse\ntemperature\n  Field required",
    ),
    failed("crm", {"id": 1}, status_code=401, error_message="Invalid authentication credentials"),
    failed("crm", {"id": 1}, status_code=500, error_message="Invalid argument passed to backend"),
    # A cancelled call is nobody's failure (the one failed result that fires nothing).
    failed("crm", {"id": 1}, error_type="asyncio.CancelledError"),
]


@pytest.mark.parametrize("messages", INVALID_ARGS_POSITIVES)
def test_invalid_args_fires(messages: list[Message]) -> None:
    instance = assert_one(messages, tx.INVALID_ARGS, 2)
    assert instance.metadata["source"] == "tool"
    assert instance.metadata["tool"] == messages[1].tool_calls[0].name


@pytest.mark.parametrize("messages", INVALID_ARGS_NEAR_MISSES)
def test_invalid_args_near_misses(messages: list[Message]) -> None:
    assert_none(messages, tx.INVALID_ARGS)


# --- failure.bad_query ---------------------------------------------------------------------------------

BAD_QUERY_POSITIVES = [
    succeeded("search_products", {"query": "wireless headphones under $5"}, "[]"),
    succeeded("search_orders", {"status": "open", "customer_email": "a@b.c"}, '{"results": []}'),
    succeeded("kb_lookup", {"q": "refund policy 2031"}, "No results found for 'refund policy 2031'."),
    succeeded("find_flights", {"origin": "SFO", "destination": "XYZ"}, "No flights found from SFO to XYZ."),
    succeeded(
        "es", {"index": "orders", "filter": {"sku": "ZZ-1"}}, '{"hits": {"total": {"value": 0}, "hits": []}}'
    ),
    succeeded("run_sql", {"sql": "SELECT * FROM users WHERE name = 'Jon Smyth'"}, "(0 rows)"),
    succeeded(
        "github_search_issues", {"q": "label:bug is:open author:nobody"}, '{"total_count": 0, "items": []}'
    ),
    succeeded("web_search", "acme corp invoice 2019 Q7", "0 results"),
    failed(
        "run_sql",
        {"sql": "SELECT * FROM customers"},
        error_type="psycopg2.errors.UndefinedTable",
        error_message='relation "customers" does not exist',
    ),
    failed(
        "get_customer",
        {"id": "cus_Q8x2"},
        '{"error":{"code":"resource_missing","message":"No such customer"}}',
        status_code=404,
    ),
    failed("get_repo", {"repo": "octocat/helo-world"}, '{"message":"Not Found"}', status_code=404),
    succeeded("search", {"query": "x"}, "null"),
    # the agent added a constraint the user never asked for
    [
        user("a hotel in paris with a bathtub"),
        *exchange(
            "search_hotels",
            {"city": "Paris", "amenities": ["bathtub", "balcony"], "checkin": "2024-11-14"},
            '{"results": [], "total": 0}',
        ),
    ],
    succeeded(
        "run_sql",
        {"query": "SELECT region FROM customers WHERE status = 'Active'"},
        '{"columns": ["region", "count"], "rows": []}',
    ),
]

BAD_QUERY_NEAR_MISSES = [
    succeeded("list_todos", {}, "[]"),  # no query: an empty list is an answer
    succeeded("get_notifications", None, "[]"),
    succeeded("search_products", {"query": "headphones"}, '[{"id": 1, "name": "AirPods"}]'),
    succeeded("search", {"query": "x"}, "Found 3 results: Alpha, Beta, Gamma. No results were hidden."),
    succeeded("search", {"query": "x"}, '{"items": [], "recommended": [{"id": 7}]}'),
    succeeded(
        "docs", {"q": "404"}, "Docs: 404 Not Found means the server can't find the requested resource."
    ),
    succeeded("so_search", {"q": "no such table"}, "Found 12 results for 'no such table' on Stack Overflow."),
    succeeded("delete_file", {"path": "tmp.txt"}, ""),  # no query: an empty answer to a command
    failed("search", {"query": "x"}, status_code=404, error_message="Unknown tool: serch"),
    failed("search", {"query": "x"}, status_code=503, error_message="No healthy upstream: backend not found"),
    # content not captured: not "empty"
    [user(), *exchange("search", {"query": "x"}, None)],
    # the user's own constraints found nothing: the agent did not narrow the query
    [
        user("I need a blue linen shirt, size M, slim fit"),
        *exchange("filter_results", {"result_set": "rs_1", "fit": "slim"}, '{"results": [], "total": 0}'),
    ],
    [
        user("search for blue suede shoes size 14"),
        *exchange("search_products", {"query": "Blue suede shoes", "size": 14}, "[]"),
    ],
]


@pytest.mark.parametrize("messages", BAD_QUERY_POSITIVES)
def test_bad_query_fires(messages: list[Message]) -> None:
    instance = assert_one(messages, tx.BAD_QUERY, 2)
    assert instance.metadata["tool"] == messages[1].tool_calls[0].name


@pytest.mark.parametrize("messages", BAD_QUERY_NEAR_MISSES)
def test_bad_query_near_misses(messages: list[Message]) -> None:
    assert_none(messages, tx.BAD_QUERY)


def test_empty_result_metadata_and_confidence() -> None:
    (instance,) = run(succeeded("search_products", {"query": "headphones under $5"}, "[]"))
    assert instance.type == tx.BAD_QUERY
    assert instance.confidence == 0.6
    assert instance.metadata["pattern"] == "empty_result:empty"
    assert instance.metadata["tool"] == "search_products"
    assert instance.metadata["arguments"] == '{"query":"headphones under $5"}'


def test_query_rule() -> None:
    assert is_query_call("anything", {"query": "x"})
    assert is_query_call("anything", '{"search_term": "x"}')
    assert is_query_call("anything", {"params": {"filter": "a=1"}})
    assert is_query_call("search_web", "plain text arguments")
    assert is_query_call("find_user", {"email": "a@b.c"})
    assert not is_query_call("anything", {"query": ""})
    assert not is_query_call("list_todos", {})
    assert not is_query_call("get_weather", {"city": "Paris"})
    assert not is_query_call("search_web", None)
    assert is_query_call("anything", {"searchTerm": "x"})
    assert is_query_call("findUser", {"email": "a@b.c"})
    assert is_query_call("anything", {"filters": {"status": "open"}})
    assert not is_query_call("anything", {"terminal_id": "T1"})
    assert not is_query_call("select_option", {"value": "red"})
    assert not is_query_call("anything", {"determine": "x", "matchday": 3})


# --- failure.tool_not_found ----------------------------------------------------------------------------

TOOL_NOT_FOUND_POSITIVES = [
    failed(
        "get_wether",
        {"city": "Paris"},
        error_message="Unknown tool name: 'get_wether'. Available tools: 'get_weather'",
    ),
    succeeded(
        "get_wether", {"city": "Paris"}, "Error: get_wether is not a valid tool, try one of [get_weather]."
    ),
    failed("get_wether", {"city": "Paris"}, error_message="Tool get_wether not found in agent Assistant"),
    succeeded(
        "tools/cal", {}, '{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"Method not found"}}'
    ),
    failed("read_fiel", {"path": "a"}, error_message="Unknown tool: read_fiel"),
    failed("shell", {"cmd": "jq ."}, error_message="bash: line 1: jq: command not found"),
    failed(
        "http_post",
        {"url": "/v1/chat/completion"},
        '{"error":{"message":"Invalid URL (POST /v1/chat/completion)"}}',
        status_code=404,
    ),
    failed(
        "tickets_api",
        {"path": "/v1/tickets/serch"},
        status_code=404,
        content='{"message": "Route POST:/v1/'
        'tickets/serch not found", "error": "Not Found", "statusCode": 404}',
    ),
    failed(
        "calendar.create", {}, error_type="ToolNotFoundError", error_message="No tool named 'calendar.create'"
    ),
    failed("lookup_custmer", {"id": 1}, error_message="lookup_custmer is not available in this workspace"),
    failed(
        "lookup_custmer", {"id": 1}, error_type="ValueError", error_message="No such function: lookup_custmer"
    ),
]

TOOL_NOT_FOUND_NEAR_MISSES = [
    succeeded("list_tools", {}, "Available tools: search_web, get_weather, send_email."),
    succeeded(
        "docs",
        {"q": "tool_not_found"},
        "Docs: the tool_not_found error code means the tool was not declared.",
    ),
    succeeded("grep", {"q": "parse"}, "Found 2 functions matching 'parse': parse_date, parse_json."),
    succeeded("shell", {"cmd": "ls"}, "The command completed successfully (exit code 0)."),
    failed("get_customer", {"id": "cus_123"}, status_code=404, error_message="Customer cus_123 not found"),
    failed(
        "get_repo", {"repo": "octocat/x"}, status_code=404, error_message="Repository octocat/x not found"
    ),
    failed("run", {}, error_message="Function timed out after 30s"),
    # "Error calling tool X: <the tool's own not-found>" names a record, not the tool
    failed(
        "search_orders", {"id": 123}, error_message="Error calling tool search_orders: Order 123 not found"
    ),
    failed("get_weather", {"city": "Atlantis"}, error_message="City 'Atlantis' not found"),
]


@pytest.mark.parametrize("messages", TOOL_NOT_FOUND_POSITIVES)
def test_tool_not_found_fires(messages: list[Message]) -> None:
    assert_one(messages, tx.TOOL_NOT_FOUND, 2)


@pytest.mark.parametrize("messages", TOOL_NOT_FOUND_NEAR_MISSES)
def test_tool_not_found_near_misses(messages: list[Message]) -> None:
    assert_none(messages, tx.TOOL_NOT_FOUND)


# --- failure.auth_misuse -------------------------------------------------------------------------------

AUTH_POSITIVES = [
    failed(
        "openai_embed",
        {"input": "x"},
        '{"error":{"message":"Incorrect API key provided","code":"invalid_api_key"}}',
        status_code=401,
    ),
    failed("github_get", {"path": "/user"}, '{"message":"Bad credentials"}', status_code=401),
    failed(
        "github_issue",
        {"title": "x"},
        '{"message":"Resource not accessible by integration"}',
        status_code=403,
    ),
    failed("drive_list", {}, status_code=403, error_message="Forbidden"),
    failed(
        "s3_list",
        {},
        error_type="botocore.exceptions.NoCredentialsError",
        error_message="Unable to locate credentials",
    ),
    succeeded("slack_post", {"channel": "C1"}, '{"ok": false, "error": "invalid_auth"}'),
    failed(
        "db_query",
        {"sql": "select 1"},
        error_type="psycopg2.OperationalError",
        error_message='FATAL:  password authentication failed for user "app"',
    ),
    failed(
        "read_file",
        {"path": "/etc/shadow"},
        error_type="PermissionError",
        error_message="[Errno 13] Permission denied: '/etc/shadow'",
    ),
    succeeded("crm", {"id": 1}, "Error: Request failed with status code 401: Unauthorized"),
    failed(
        "maps",
        {"q": "x"},
        '{"error":{"code":400,"message":"API key not valid.","status":"INVALID_ARGUMENT",'
        '"details":[{"reason":"API_KEY_INVALID"}]}}',
        status_code=400,
    ),
]

AUTH_NEAR_MISSES = [
    succeeded(
        "docs", {"q": "401"}, "Docs: a 401 Unauthorized response means the request lacks valid credentials."
    ),
    succeeded("login", {"user": "alice"}, "User alice@example.com logged in successfully (2FA verified)."),
    succeeded("me", {}, '{"authenticated": true, "scopes": ["repo", "read:org"]}'),
    succeeded(
        "log_search", {"q": "denied"}, "Found 4 log lines with 'permission denied' in /var/log/auth.log"
    ),
    succeeded("travel", {"city": "Beijing"}, "The Forbidden City tour starts at 9:00; tickets are 60 CNY."),
    failed(
        "github_search",
        {"q": "x"},
        status_code=403,
        error_message="You have exceeded a secondary rate limit.",
    ),
    failed("github_search", {"q": "x"}, status_code=429, error_message="Unauthorized clients are limited"),
    failed(
        "keys",
        {"name": "x" * 80},
        status_code=400,
        error_message="Invalid value for 'api_key_name': too long",
    ),
    failed("crm", {}, status_code=503, error_message="Auth service unavailable"),
]


@pytest.mark.parametrize("messages", AUTH_POSITIVES)
def test_auth_misuse_fires(messages: list[Message]) -> None:
    assert_one(messages, tx.AUTH_MISUSE, 2)


@pytest.mark.parametrize("messages", AUTH_NEAR_MISSES)
def test_auth_misuse_near_misses(messages: list[Message]) -> None:
    assert_none(messages, tx.AUTH_MISUSE)


@pytest.mark.parametrize("status", [401, 403])
def test_401_403_from_a_tool_is_auth_misuse(status: int) -> None:
    instance = assert_one(failed("crm", {"id": 1}, status_code=status), tx.AUTH_MISUSE, 2)
    assert instance.confidence == 0.95
    assert instance.metadata["status_code"] == status
    assert instance.metadata["pattern"] == f"http:{status}"


# --- failure.state_error -------------------------------------------------------------------------------

STATE_POSITIVES = [
    failed(
        "confirm_payment",
        {"id": "pi_1"},
        '{"error":{"code":"payment_intent_unexpected_state","message":"You '
        'cannot confirm this PaymentIntent because it has a status of succeeded."}}',
        status_code=400,
    ),
    failed("create_ref", {"ref": "main"}, '{"message":"Git Repository is empty."}', status_code=409),
    failed("merge_pr", {"number": 42}, '{"message":"Pull Request is not mergeable"}', status_code=405),
    failed(
        "insert_user",
        {"email": "a@b.c"},
        error_type="psycopg2.errors.UniqueViolation",
        error_message='duplicate key value violates unique constraint "users_email_key"',
    ),
    failed(
        "sqlite", {"sql": "insert"}, error_type="sqlite3.OperationalError", error_message="database is locked"
    ),
    succeeded(
        "browser_click",
        {"selector": "#buy"},
        "Error: page.click: Target page, context or browser has been closed",
    ),
    failed(
        "git_branch",
        {"name": "feature/login"},
        error_message="fatal: a branch named 'feature/login' already exists",
    ),
    succeeded("slack_post", {"channel": "C1"}, '{"ok": false, "error": "is_archived"}'),
    failed("put_item", {"id": 1}, status_code=412, error_message="Precondition Failed"),
    failed("update_doc", {"id": 1}, status_code=423),
]

STATE_NEAR_MISSES = [
    succeeded("order_status", {"id": 1234}, "Order #1234 state: shipped."),
    succeeded("docs", {"q": "409"}, "Docs: HTTP 409 Conflict indicates a conflict with the current state."),
    succeeded("merge_pr", {"number": 42}, "Merged PR #42 cleanly (no conflicts)."),
    succeeded("museum", {"city": "Paris"}, "The museum is closed on Mondays; open 9:00–18:00 otherwise."),
    succeeded("repo", {}, '{"state": "open", "locked": false, "mergeable": true}'),
    succeeded("git_branch", {"name": "x"}, "Created branch 'feature/login' from main."),
    failed(
        "put_item",
        {"id": 1},
        status_code=429,
        error_message="Too many concurrent requests; resource is locked",
    ),
    failed("db", {"sql": "x"}, status_code=503, error_message="Service unavailable: database is locked"),
    failed("crm", {}, status_code=401, error_message="Session has been closed; authentication required"),
]


@pytest.mark.parametrize("messages", STATE_POSITIVES)
def test_state_error_fires(messages: list[Message]) -> None:
    assert_one(messages, tx.STATE_ERROR, 2)


@pytest.mark.parametrize("messages", STATE_NEAR_MISSES)
def test_state_error_near_misses(messages: list[Message]) -> None:
    assert_none(messages, tx.STATE_ERROR)


# --- the spec's rules ----------------------------------------------------------------------------------


def test_429_from_a_tool_is_rate_limit_and_never_an_execution_failure() -> None:
    for messages in (
        failed("search", {"q": "x"}, status_code=429),
        failed("search", {"q": "x"}, status_code=429, error_message="Invalid arguments: too many requests"),
        failed("search", {"q": "x"}, '{"error": {"code": "parameter_missing"}}', status_code=429),
    ):
        found = run(messages)
        assert [i.type for i in found] == [tx.RATE_LIMIT], found
        assert found[0].message_index == 2


SUCCESSFUL_RESULTS_ABOUT_ERRORS = [
    "Found 3 log lines containing 'error': disk error on sda at 12:00, error count 3, error budget ok",
    "Found 3 lines containing 'timeout' in app.log",
    "HTTP 429 Too Many Requests is returned when the client exceeds the rate limit.",
    "No rate limit warnings today. 0 errors, 0 timeouts.",
    "Weather in Paris: 21°C, sunny. No rate limit warnings today.",
    '{"error_rate": 0.01, "timeouts": 0, "last_status": 429, "rate_limit": {"remaining": 10}}',
    '{"status": "ok", "error": null, "errors": []}',
    "error: 0, warnings: 2 (build succeeded)",
    "The error was fixed in v2; the 503 and timeout issues are resolved.",
    '{"logs": ["ERROR connection refused", "ERROR rate limit exceeded", "Traceback (most recent call)"]}',
]


@pytest.mark.parametrize("content", SUCCESSFUL_RESULTS_ABOUT_ERRORS)
def test_successful_result_mentioning_errors_fires_nothing(content: str) -> None:
    assert_silent(succeeded("log_search", {"pattern": "error"}, content))
    assert_silent(succeeded("get_weather", {"city": "Paris"}, content))


@pytest.mark.parametrize(
    "content",
    [
        None,
        "",
        "not json {",
        "{" * 5000,
        '{"error": ' * 2000,
        "[" * 100_000,
        "x" * 100_000,
        '{"a": "' + "é" * 100_000 + '"}',
        "Error: " + "timeout " * 12_000,
        '{"error": {"message": "' + "rate limit " * 10_000 + '"}}',
    ],
)
@pytest.mark.parametrize("is_error", [False, True])
def test_odd_results_never_raise(content: str | None, is_error: bool) -> None:
    odd_calls = [call("t", "not json"), call("t", 12), call("t", ["a"]), call("t", None), call("", {"a": {}})]
    messages = [user(), assistant(*odd_calls), tool(content, is_error=is_error, status_code=None, name=None)]
    messages.append(Message(Role.TOOL, None, tool_result=None))
    messages.append(Message(Role.TOOL, "Error: x", tool_result=None))
    started = time.perf_counter()
    found = run(messages)
    assert time.perf_counter() - started < 2.0
    assert all(0.0 <= i.confidence <= 1.0 for i in found)


def test_a_status_or_error_type_without_is_error_still_counts_as_failed() -> None:
    messages = [user(), *exchange("crm", {"id": 1}, None, status_code=401)]
    assert [(i.type, i.message_index) for i in run(messages)] == [(tx.AUTH_MISUSE, 2)]
    messages = [user(), *exchange("crm", {"id": 1}, None, error_type="httpx.ReadTimeout")]
    assert [(i.type, i.message_index) for i in run(messages)] == [(tx.TIMEOUT, 2)]


def test_tool_message_without_tool_result_is_read_from_its_content() -> None:
    messages = [user(), assistant(call("crm", {"id": 1})), Message(Role.TOOL, "Error: Unknown tool: crm")]
    (instance,) = run(messages)
    assert (instance.type, instance.message_index) == (tx.TOOL_NOT_FOUND, 2)
    assert instance.metadata["tool"] == "crm"


def test_one_instance_per_leaf_and_message_and_no_repeat_on_reanalysis() -> None:
    messages = failed("crm", {"id": 1}, status_code=401)
    memory: dict[str, Any] = {}
    assert len(run(messages, memory=memory)) == 1
    assert run(messages, memory=memory) == []  # the same trace handed over again


# --- loops.retry ---------------------------------------------------------------------------------------


def repeated(name: str, arguments: list[Any], result: str = '{"ok": true}') -> list[Message]:
    """user, then one assistant call + result per arguments value (calls at 1, 3, 5, …)."""
    messages = [user()]
    for args in arguments:
        messages += exchange(name, args, result)
    return messages


RETRY_POSITIVES: list[tuple[list[Message], int]] = [
    (repeated("get_weather", [{"city": "Paris"}] * 3), 5),
    (
        repeated(
            "get_weather",
            [
                {"city": "Paris", "units": "C"},
                '{"units": "C", "city": "Paris"}',
                {"units": "C", "city": "Paris"},
            ],
        ),
        5,
    ),
    (repeated("get_time", [{}] * 3), 5),
    (repeated("search", ["plain text query"] * 3), 5),
    (repeated("search", [{"q": "x"}] * 3, result='{"error": "upstream failed"}'), 5),
    ([user(), assistant(*(call("ping", {"host": "a"}) for _ in range(3)))], 1),  # parallel, one message
    (
        [
            user(),
            *exchange("lookup", {"id": 1}, "x"),
            *exchange("other", {}, "y"),
            *repeated("lookup", [{"id": 2}] * 3)[1:],
        ],
        9,
    ),
    # Content not captured on the chat spans: the calls are known from the tool spans only.
    (
        [
            user(),
            *(tool("ok", name="fetch", arguments={"url": "https://x"}, call_id=f"t{i}") for i in range(3)),
        ],
        3,
    ),
    ([Message(Role.SYSTEM, "You are an agent."), *repeated("get_weather", [{"city": "Paris"}] * 3)], 6),
]

RETRY_NEAR_MISSES: list[list[Message]] = [
    repeated("get_weather", [{"city": "Paris"}] * 2),  # two identical calls are not a retry
    repeated("get_weather", [{"city": "Paris"}, {"city": "Paris"}, {"city": "Lyon"}]),
    repeated("get_weather", [{"city": "Paris"}, {"city": "Paris"}, {"city": "Paris", "units": "F"}]),
    [
        *repeated("get_weather", [{"city": "Paris"}] * 2),
        *repeated("get_weather", [{"city": "Paris"}]),
    ],  # user between
    [*repeated("a", [{"x": 1}] * 2), *exchange("b", {"x": 1}, "ok"), *exchange("a", {"x": 1}, "ok")],
    repeated("get_weather", [None] * 3),  # arguments not captured: unknown is not identical
    [user(), *(tool("ok", name="fetch", arguments=None, call_id=f"t{i}") for i in range(3))],
    # Calls and their results: two calls must count as two, whatever the result ids look like.
    [
        user(),
        assistant(c := call("get", {"id": 1})),
        tool("x", answers=c),
        assistant(d := call("get", {"id": 1})),
        tool("x", call_id="other-id", name="get"),
    ],
    [
        user(),
        assistant(call("get", {"id": 1}, call_id=None)),
        tool("x", name="get"),
        assistant(call("get", {"id": 1}, call_id=None)),
        tool("x"),
    ],
    repeated("get_weather", [{"city": "Paris"}, {"city": "Tokyo"}, {"city": "Paris"}]),
]


@pytest.mark.parametrize(("messages", "index"), RETRY_POSITIVES)
def test_retry_fires(messages: list[Message], index: int) -> None:
    instance = assert_one(messages, tx.RETRY, index, detectors=EXECUTION_DETECTORS)
    assert instance.metadata["run_length"] == 3
    assert instance.confidence == 0.9


@pytest.mark.parametrize("messages", RETRY_NEAR_MISSES)
def test_retry_near_misses(messages: list[Message]) -> None:
    assert not of(run(messages, EXECUTION_DETECTORS), tx.RETRY)


def test_a_retry_continues_across_try_again_after_failures_but_not_after_success() -> None:
    args = {"sku": "DY-V15", "store": "Austin"}
    failing = [
        user("in stock?"),
        *exchange("check_inventory", args, None, is_error=True, error_type="JSONDecodeError"),
        *exchange("check_inventory", args, None, is_error=True, error_type="TimeoutError"),
        Message(Role.ASSISTANT, "The inventory system is having trouble. Try again?"),
        user("yes try again please"),
        *exchange("check_inventory", args, '{"qty": 3}'),
    ]
    assert [(i.type, i.message_index) for i in of(run(failing), tx.RETRY)] == [(tx.RETRY, 7)]
    succeeding = [
        user("in stock?"),
        *exchange("check_inventory", args, '{"qty": 3}'),
        *exchange("check_inventory", args, '{"qty": 3}'),
        Message(Role.ASSISTANT, "3 in stock."),
        user("and now?"),
        *exchange("check_inventory", args, '{"qty": 2}'),
    ]
    assert not of(run(succeeding), tx.RETRY)


def test_two_identical_calls_are_not_a_retry_three_are() -> None:
    assert not of(run(repeated("get_weather", [{"city": "Paris"}] * 2)), tx.RETRY)
    (instance,) = of(run(repeated("get_weather", [{"city": "Paris"}] * 3)), tx.RETRY)
    assert instance.metadata["tool"] == "get_weather"
    assert instance.metadata["arguments"] == '{"city":"Paris"}'
    assert instance.snippet == 'get_weather({"city":"Paris"})'


def test_a_long_retry_counts_more() -> None:
    found = of(run(repeated("get_weather", [{"city": "Paris"}] * 10)), tx.RETRY)
    assert [(i.message_index, i.metadata["run_length"]) for i in found] == [(5, 3), (11, 6), (17, 9)]


def test_six_parallel_identical_calls_in_one_message_give_one_instance() -> None:
    found = of(run([user(), assistant(*(call("ping", {}) for _ in range(6)))]), tx.RETRY)
    assert [(i.message_index, i.metadata["run_length"]) for i in found] == [(1, 6)]


# --- loops.parameter_drift -----------------------------------------------------------------------------

DRIFT_POSITIVES: list[list[Message]] = [
    repeated(
        "search_flights",
        [
            {"q": "cheap flights paris"},
            {"q": "cheap flights to paris"},
            {"q": "cheap flights to paris in june"},
        ],
    ),
    repeated(
        "web_search",
        [
            "python asyncio timeout",
            "python asyncio wait_for timeout",
            "python asyncio wait_for timeout error",
        ],
    ),
    repeated("get_weather", [{"city": "Pariss"}, {"city": "Paris"}, {"city": "Paris, France"}]),
    repeated("find_customer", [{"name": "jon smith"}, {"name": "john smith"}, {"name": "John Smith (ACME)"}]),
    repeated(
        "search_products",
        [
            {"q": "laptop"},
            {"q": "laptop", "brand": "dell"},
            {"q": "laptop", "brand": "dell", "max_price": 800},
        ],
    ),
    repeated(
        "run_sql",
        [
            {"sql": "SELECT * FROM users WHERE name = 'john'"},
            {"sql": "SELECT * FROM users WHERE name ILIKE 'john'"},
            {"sql": "SELECT * FROM users WHERE name ILIKE '%john%'"},
        ],
    ),
    repeated(
        "kb",
        [
            {"query": "reset password"},
            {"query": "how to reset my password"},
            {"query": "how to reset my password steps"},
        ],
    ),
    repeated(
        "search_restaurants",
        [
            {"query": "best italian restaurant downtown"},
            {"query": "italian restaurants downtown"},
            {"query": "top rated italian restaurants downtown"},
        ],
    ),
    # an identical repeat in the middle neither extends nor breaks the drift
    repeated(
        "web_search",
        [
            "rust error handling",
            "rust error handling",
            "error handling in rust",
            "rust error handling best practices",
        ],
    ),
]


def _results(name: str, calls: list[tuple[Any, str]]) -> list[Message]:
    """user, then one assistant call + its result per (arguments, result content)."""
    messages = [user()]
    for args, content in calls:
        messages += exchange(name, args, content)
    return messages


EMPTY = '{"results": [], "total": 0}'
FOUND = '{"results": [{"id": 1}], "total": 1}'
HOTEL = {"city": "Paris", "near": "Eiffel Tower", "adults": 2}

# The agent adjusting a request after a failed or empty result: not near-duplicates, still a drift.
DRIFT_POSITIVES += [
    # a query reformulated after an empty result and a timeout
    [
        user(),
        *exchange(
            "search_kb", {"query": "map SMB share fs01 projects on macOS Sonoma Finder login item"}, EMPTY
        ),
        *exchange(
            "search_kb",
            {"query": "map network drive mac smb fs01"},
            None,
            is_error=True,
            error_type="TimeoutError",
        ),
        *exchange("search_kb", {"query": "mac network drive"}, FOUND),
    ],
    # filters dropped and a distance threshold widened after empty results
    _results(
        "search_hotels",
        [
            ({**HOTEL, "max_distance_m": 300, "amenities": ["bathtub", "balcony", "view"]}, EMPTY),
            ({**HOTEL, "max_distance_m": 500, "amenities": ["bathtub", "view"]}, EMPTY),
            ({**HOTEL, "max_distance_m": 1000, "amenities": ["bathtub"]}, FOUND),
        ],
    ),
    # a SQL query fixed after an empty result, then reworked inside the running drift
    _results(
        "run_sql",
        [
            (
                {
                    "query": "SELECT region, COUNT(*) FROM customers WHERE status = 'Active' AND created_at "
                    "BETWEEN '2024-01-01' AND '2024-03-31' GROUP BY region"
                },
                EMPTY,
            ),
            (
                {
                    "query": "SELECT region, COUNT(*) FROM customers WHERE status = 'active' AND created_at "
                    "BETWEEN '2024-01-01' AND '2024-03-31' GROUP BY region"
                },
                FOUND,
            ),
            (
                {
                    "query": "SELECT region, COUNT(DISTINCT customer_id) FROM customers WHERE status = "
                    "'active' GROUP BY region"
                },
                FOUND,
            ),
        ],
    ),
    # a price limit raised after empty results
    _results(
        "search_products",
        [
            ({"q": "standing desk", "max_price": 200}, EMPTY),
            ({"q": "standing desk", "max_price": 300}, EMPTY),
            ({"q": "standing desk", "max_price": 450}, FOUND),
        ],
    ),
]

DRIFT_NEAR_MISSES: list[list[Message]] = [
    repeated("get_weather", [{"city": "Paris"}, {"city": "Tokyo"}, {"city": "Lima"}]),  # an enumeration
    repeated("get_order", [{"id": "ORD-10023"}, {"id": "ORD-10024"}, {"id": "ORD-10025"}]),
    repeated("list_issues", [{"repo": "x", "page": 1}, {"repo": "x", "page": 2}, {"repo": "x", "page": 3}]),
    repeated("web_search", ["weather in Paris", "weather in London", "weather in Berlin"]),
    repeated(
        "stats", [{"q": "population of france"}, {"q": "population of germany"}, {"q": "population of italy"}]
    ),
    repeated(
        "report", [{"q": "sales report january"}, {"q": "sales report february"}, {"q": "sales report march"}]
    ),
    repeated("get_weather", [{"city": "Paris"}] * 3),  # identical: a retry, not a drift
    repeated("web_search", ["cheap flights paris", "cheap flights to paris"]),  # only two
    [
        *repeated("s", ["cheap flights paris", "cheap flights to paris"]),
        *repeated("s", ["cheap flights to paris june"]),
    ],
    repeated("web_search", ["how to reset password", "how to change email", "how to delete account"]),
    repeated("lookup", [{"email": "alice@x.com"}, {"email": "bob@x.com"}, {"email": "carol@x.com"}]),
    # other items after failures are still an enumeration
    _results(
        "get_weather",
        [
            ({"city": "Paris", "units": "metric"}, '{"error": "timeout"}'),
            ({"city": "Tokyo", "units": "metric"}, '{"error": "timeout"}'),
            ({"city": "Lima", "units": "metric"}, FOUND),
        ],
    ),
    _results(
        "get_order", [({"order_id": 1001}, EMPTY), ({"order_id": 1002}, EMPTY), ({"order_id": 1003}, FOUND)]
    ),
    _results(
        "list_issues",
        [
            ({"repo": "x", "page": 1}, EMPTY),
            ({"repo": "x", "page": 2}, EMPTY),
            ({"repo": "x", "page": 3}, EMPTY),
        ],
    ),
    # one slot of a long query changed: another item, however alike the rest
    repeated(
        "run_sql",
        [
            {
                "sql": f"SELECT id, name, email FROM customers WHERE country = '{c}' AND created_at > "
                "'2024-01-01' ORDER BY name"
            }
            for c in ("FR", "DE", "IT")
        ],
    ),
    # reformulations after good answers do not start a drift
    _results(
        "web_search",
        [
            ({"query": "best hiking boots 2024"}, FOUND),
            ({"query": "hiking boots waterproof review"}, FOUND),
            ({"query": "hiking boots wide feet"}, FOUND),
        ],
    ),
]


@pytest.mark.parametrize("messages", DRIFT_POSITIVES)
def test_parameter_drift_fires(messages: list[Message]) -> None:
    index = len(messages) - 2  # the third varied call
    instance = assert_one(messages, tx.PARAMETER_DRIFT, index, detectors=EXECUTION_DETECTORS)
    assert instance.metadata["run_length"] == 3
    if instance.metadata["pattern"] == "near_duplicate_arguments":
        assert instance.metadata["similarity"] >= DRIFT_LOWER_BOUND
        assert instance.confidence == 0.7
    else:
        assert instance.metadata["pattern"] == "adjusted_arguments"
        assert instance.confidence == 0.6
    assert len(instance.metadata["arguments"]) == 3


@pytest.mark.parametrize("messages", DRIFT_NEAR_MISSES)
def test_parameter_drift_near_misses(messages: list[Message]) -> None:
    assert not of(run(messages, EXECUTION_DETECTORS), tx.PARAMETER_DRIFT)


def test_an_enumeration_of_cities_is_not_parameter_drift() -> None:
    cities = ["Paris", "Tokyo", "Lima", "Berlin", "Austin", "Boston", "Dublin", "Portland", "Portugal"]
    assert not of(run(repeated("get_weather", [{"city": c} for c in cities])), tx.PARAMETER_DRIFT)
    parallel = [user(), assistant(*(call("get_weather", {"city": c}) for c in cities))]
    assert not of(run(parallel), tx.PARAMETER_DRIFT)


# Calibration of DRIFT_LOWER_BOUND: near-duplicate reformulations score at or above it, distinct items
# (enumerations) below it. Plain fuzz.ratio on canonical JSON fails both ways ('{"q":"population of
# france"}' vs germany scores 89, '{"city":"Paris"}' vs '{"city":"Paris, France"}' 78), hence the
# word-diff score of text_similarity.
DRIFT_PAIRS = [
    ("cheap flights paris", "cheap flights to paris"),
    ("cheap flights to paris", "cheap flights to paris june"),
    ("python asyncio timeout", "python asyncio wait_for timeout"),
    ("best italian restaurant downtown", "italian restaurants downtown"),
    ("Paris", "Paris, France"),
    ("Sweden", "Swedan"),
    ("jon smith", "john smith"),
    ("john smith", "John Smith"),
    ("wireless headphones noise cancelling", "noise cancelling wireless headphones under 200"),
    ("error handling in rust", "rust error handling best practices"),
    ("how to reset my password", "reset password"),
    ("latest news on nvidia earnings", "nvidia earnings news"),
    ("refund policy", "refund policy for damaged items"),
    ("Marseille", "Marseilles"),
]
ENUMERATION_PAIRS = [
    ("Paris", "Tokyo"),
    ("Berlin", "Dublin"),
    ("Austin", "Boston"),
    ("Portland", "Portugal"),
    ("New York", "New Delhi"),
    ("weather paris", "weather tokyo"),
    ("weather in Paris", "weather in London"),
    ("how to reset password", "how to change email"),
    ("red shoes", "blue shoes"),
    ("AAPL", "MSFT"),
    ("machine learning", "deep learning"),
    ("John Smith", "Jane Smith"),
    ("population of france", "population of germany"),
    ("capital of spain", "capital of italy"),
    ("news about apple", "news about google"),
    ("sales report january", "sales report february"),
    ("ORD-10023", "ORD-10024"),
    ("2024-05-01", "2024-05-02"),
    ("austria", "australia"),
]


@pytest.mark.parametrize(("a", "b"), DRIFT_PAIRS)
def test_drift_pairs_score_at_or_above_the_bound(a: str, b: str) -> None:
    assert text_similarity(a, b) >= DRIFT_LOWER_BOUND


@pytest.mark.parametrize(("a", "b"), ENUMERATION_PAIRS)
def test_enumeration_pairs_score_below_the_bound(a: str, b: str) -> None:
    assert text_similarity(a, b) < DRIFT_LOWER_BOUND


def test_adjusted_arguments() -> None:
    assert adjusted('{"max_price":200,"q":"desk"}', '{"max_price":300,"q":"desk"}')  # a threshold moved
    assert adjusted('{"a":["x","y"],"q":"d"}', '{"a":["x"],"q":"d"}')  # a filter dropped
    assert adjusted('"map smb share fs01 on macos"', '"map network drive mac smb fs01"')  # reformulated
    assert not adjusted('{"page":1,"q":"d"}', '{"page":2,"q":"d"}')  # another page
    assert not adjusted('{"order_id":1001}', '{"order_id":1002}')  # another item
    assert not adjusted('{"city":"Paris","units":"C"}', '{"city":"Tokyo","units":"C"}')  # another city
    assert not adjusted('{"a":["x","y"]}', '{"a":["x","z"]}')  # a filter swapped for another
    assert not adjusted('{"a":1}', '{"b":1}')  # nothing in common
    assert not adjusted('"how to reset password"', '"how to change email"')  # another question


def test_arguments_similarity_on_structures() -> None:
    assert arguments_similarity('{"q":"laptop"}', '{"brand":"dell","q":"laptop"}') == 90.0
    assert arguments_similarity('{"page":1,"q":"x"}', '{"page":2,"q":"x"}') == 0.0
    assert arguments_similarity('{"a":1}', '{"b":1}') == 0.0
    assert arguments_similarity(None, '{"a":1}') == 0.0
    assert arguments_similarity('"x"', '"x"') == 100.0


# --- loops.oscillation ---------------------------------------------------------------------------------


def alternating(names: str, same_args: bool = True) -> list[Message]:
    messages = [user()]
    for position, name in enumerate(names):
        messages += exchange(name, {"k": "v"} if same_args else {"k": position}, "ok")
    return messages


OSCILLATION_POSITIVES: list[tuple[list[Message], int]] = [
    (alternating("ABABAB"), 11),
    (alternating("BABABA"), 11),
    (alternating("ABABAB", same_args=False), 11),
    (alternating("CABABAB"), 13),
    (alternating("AABABAB"), 13),
    ([user(), assistant(*(call(n, {}) for n in "ABABAB"))], 1),  # parallel in one message
    ([user(), *(tool("ok", name=n, arguments={}, call_id=f"t{i}") for i, n in enumerate("ABABAB"))], 6),
    # assistant calls of A mixed with B calls known only from their tool spans
    (
        [
            user(),
            *(m for _ in range(3) for m in [*exchange("A", {}, "ok"), tool("ok", name="B", call_id=None)]),
        ],
        9,
    ),
    (alternating("ABABABC"), 11),
]

OSCILLATION_NEAR_MISSES: list[list[Message]] = [
    alternating("ABAB"),  # two cycles
    alternating("ABABA"),
    alternating("AABBAABB"),
    alternating("ABCABC"),
    alternating("AAAAAA"),
    alternating("ABACAB"),
    [*alternating("ABAB"), *alternating("ABAB")],  # a user message between
    alternating("ABABCBCB"),
    [user(), *(tool("ok", name=None, call_id=f"t{i}") for i in range(6))],
]


@pytest.mark.parametrize(("messages", "index"), OSCILLATION_POSITIVES)
def test_oscillation_fires(messages: list[Message], index: int) -> None:
    instance = assert_one(messages, tx.OSCILLATION, index, detectors=EXECUTION_DETECTORS)
    assert instance.metadata["run_length"] == 6
    assert instance.metadata["cycles"] == 3
    assert sorted(instance.metadata["tools"]) == ["A", "B"]


@pytest.mark.parametrize("messages", OSCILLATION_NEAR_MISSES)
def test_oscillation_near_misses(messages: list[Message]) -> None:
    assert not of(run(messages, EXECUTION_DETECTORS), tx.OSCILLATION)


def test_abab_is_not_oscillation_ababab_is() -> None:
    assert not of(run(alternating("ABAB")), tx.OSCILLATION)
    (instance,) = of(run(alternating("ABABAB")), tx.OSCILLATION)
    assert instance.metadata["tools"] == ["A", "B"]
    assert instance.confidence == 0.85  # the same arguments each time: flip-flopping
    (varied,) = of(run(alternating("ABABAB", same_args=False)), tx.OSCILLATION)
    assert varied.confidence == 0.6


def test_a_long_oscillation_counts_more() -> None:
    found = of(run(alternating("AB" * 9)), tx.OSCILLATION)
    assert [i.metadata["run_length"] for i in found] == [6, 12, 18]


# One tool, two call signatures in turn: neither a retry (the arguments change every call), nor a
# drift (ids are items, not reformulations), nor two tools alternating.


def lookups(ids: str, *, tool_name: str = "get_details_by_id", result: str = '{"ok": true}') -> list[Message]:
    """user, then one call of ``tool_name`` per character of ``ids`` ("1212" → P1, P2, P1, P2)."""
    messages = [user()]
    for item in ids:
        messages += exchange(tool_name, {"id": f"P100{item}"}, result)
    return messages


SIGNATURE_OSCILLATION_POSITIVES: list[tuple[list[Message], int]] = [
    (lookups("121212"), 11),
    (lookups("212121"), 11),
    (lookups("121212", result="Error: Plan with ID P1001 not found"), 11),  # failing each time
    ([user(), *exchange("get_customer", {"id": "C1"}, "ok"), *lookups("121212")[1:]], 13),
    (lookups("1121212"), 13),  # a retry first, then the flip-flop
    (lookups("3121212"), 13),  # a third id first
    ([user(), assistant(*(call("get_details_by_id", {"id": f"P100{i}"}) for i in "121212"))], 1),  # parallel
]

SIGNATURE_OSCILLATION_NEAR_MISSES: list[list[Message]] = [
    lookups("12345678"),  # enumerating ids
    lookups("1212"),  # two cycles
    lookups("12121"),
    lookups("123123"),  # three signatures in turn
    lookups("112233"),
    lookups("111111"),  # identical: a retry
    [*lookups("121"), *lookups("212")],  # a user message between
    # known only from tool spans without arguments: unknown arguments are never alike
    [user(), *(tool("ok", name="get_details_by_id", call_id=f"t{i}") for i in range(6))],
]


@pytest.mark.parametrize(("messages", "index"), SIGNATURE_OSCILLATION_POSITIVES)
def test_one_tool_alternating_between_two_signatures_oscillates(messages: list[Message], index: int) -> None:
    instance = assert_one(messages, tx.OSCILLATION, index, detectors=EXECUTION_DETECTORS)
    assert instance.metadata["pattern"] == "alternating_arguments"
    assert instance.metadata["tools"] == ["get_details_by_id"]
    assert (instance.metadata["run_length"], instance.metadata["cycles"]) == (6, 3)
    assert instance.confidence == 0.85
    signatures = instance.metadata["signatures"]
    assert [s["tool"] for s in signatures] == ["get_details_by_id"] * 2
    assert sorted(s["arguments"] for s in signatures) == ['{"id":"P1001"}', '{"id":"P1002"}']
    assert instance.snippet is not None and "⇄" in instance.snippet


@pytest.mark.parametrize("messages", SIGNATURE_OSCILLATION_NEAR_MISSES)
def test_signature_oscillation_near_misses(messages: list[Message]) -> None:
    assert not of(run(messages, EXECUTION_DETECTORS), tx.OSCILLATION)


def test_ninety_alternating_lookups_fire_and_count_more() -> None:
    """The real case: P1001, P1002, … ninety times; one instance per three more cycles."""
    found = run(lookups("12" * 45), EXECUTION_DETECTORS)
    oscillations = of(found, tx.OSCILLATION)
    assert [i.metadata["run_length"] for i in oscillations] == list(range(6, 91, 6))
    assert not of(found, tx.RETRY) and not of(found, tx.PARAMETER_DRIFT)


def test_two_tools_with_new_arguments_each_time_stay_a_tool_oscillation() -> None:
    (instance,) = of(run(alternating("ABABAB", same_args=False)), tx.OSCILLATION)
    assert (instance.metadata["pattern"], instance.confidence) == ("alternating_tools", 0.6)


# Parameter drift over very short argument values (a reference suite's case): typos, plurals and
# reordered words of a two-word query drift; different short ids or month names do not.

SHORT_DRIFT_POSITIVES = [
    repeated("search", [{"q": "nyc hotel"}, {"q": "nyc hotels"}, {"q": "hotel nyc"}]),
    repeated("search", [{"q": "hotel"}, {"q": "hotels"}, {"q": "Hotel"}]),
    repeated("search", ["cafe paris", "cafes paris", "paris cafe"]),
]
SHORT_DRIFT_NEAR_MISSES = [
    repeated("get", [{"id": "ab"}, {"id": "ac"}, {"id": "ad"}]),
    repeated("get", [{"sku": "X1"}, {"sku": "X2"}, {"sku": "X3"}]),
    repeated("report", [{"q": "jan"}, {"q": "jun"}, {"q": "jul"}]),
    repeated("search", [{"q": "red"}, {"q": "bed"}, {"q": "bad"}]),
]


@pytest.mark.parametrize("messages", SHORT_DRIFT_POSITIVES)
def test_drift_over_very_short_arguments(messages: list[Message]) -> None:
    instance = assert_one(messages, tx.PARAMETER_DRIFT, len(messages) - 2, detectors=EXECUTION_DETECTORS)
    assert instance.metadata["pattern"] == "near_duplicate_arguments"


@pytest.mark.parametrize("messages", SHORT_DRIFT_NEAR_MISSES)
def test_short_different_values_do_not_drift(messages: list[Message]) -> None:
    assert not of(run(messages, EXECUTION_DETECTORS), tx.PARAMETER_DRIFT)


# --- incremental -----------------------------------------------------------------------------------------


def _long_conversation() -> list[Message]:
    messages: list[Message] = [Message(Role.SYSTEM, "You are a travel agent.")]
    messages += repeated("get_weather", [{"city": "Paris"}] * 4)
    messages += [user("flights?")]
    messages += repeated(
        "search_flights",
        [{"q": "cheap flights paris"}, {"q": "cheap flights to paris"}, {"q": "cheap flights to paris june"}],
    )[1:]
    messages += alternating("ABABABAB")
    messages += failed("book", {"id": 1}, status_code=401)
    messages += failed("book", {"id": 1}, status_code=429)
    messages += failed("get_wether", {}, error_message="Unknown tool: get_wether")
    messages += succeeded("search_hotels", {"query": "5 star under $10"}, "[]")
    messages += [user(), *(tool("ok", name="fetch", arguments={"u": 1}, call_id=f"f{i}") for i in range(3))]
    return messages


@pytest.mark.parametrize("step", [1, 2, 3, 5, 7])
def test_trace_by_trace_gives_the_same_instances_as_one_pass(step: int) -> None:
    messages = _long_conversation()
    whole = run(messages)
    traces = [(messages[i : i + step], []) for i in range(0, len(messages), step)]
    pieces = run_traces(traces)
    assert sorted(map(identity, pieces)) == sorted(map(identity, whole))
    leaves = {i.type for i in whole}
    assert {
        tx.RETRY,
        tx.PARAMETER_DRIFT,
        tx.OSCILLATION,
        tx.AUTH_MISUSE,
        tx.RATE_LIMIT,
        tx.TOOL_NOT_FOUND,
        tx.BAD_QUERY,
    } <= leaves


def test_memory_stays_bounded() -> None:
    memory: dict[str, Any] = {}
    conversation = Conversation("c")
    for turn in range(300):
        start = len(conversation.messages)
        conversation.messages += exchange("t", {"i": turn % 7}, "ok")
        ctx = DetectionContext(conversation, start, [], memory)
        for detector in EXECUTION_DETECTORS:
            detector(ctx)
    for value in memory.values():
        if isinstance(value, dict):
            assert len(value.get("calls", [])) <= 64


def test_trimmed_conversation_keeps_absolute_indices() -> None:
    messages = repeated("get_weather", [{"city": "Paris"}] * 3)
    conversation = Conversation("c", messages[2:], message_offset=2)
    ctx = DetectionContext(conversation, 0, [], {})
    found = [i for d in EXECUTION_DETECTORS for i in d(ctx)]
    # the first call was trimmed away: two calls remain, no retry; indices stay absolute
    assert not of(found, tx.RETRY)
    start = len(conversation.messages)
    conversation.messages += exchange("get_weather", {"city": "Paris"}, "ok")
    ctx = DetectionContext(conversation, start, [], ctx.memory)
    found = [i for d in EXECUTION_DETECTORS for i in d(ctx)]
    assert [(i.type, i.message_index) for i in found] == [(tx.RETRY, 7)]


# --- failure metadata: why the call was refused ---------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "leaf", "reason"),
    [
        ("Error: Line must be suspended to resume", tx.STATE_ERROR, "wrong_state"),
        (
            "Error: Payment exceeds outstanding amount. Outstanding: 1507.5",
            tx.INVALID_ARGS,
            "amount_mismatch",
        ),
        ("Error: Not enough seats left on this flight", tx.STATE_ERROR, "capacity"),
        ("Error: Cliente con DNI '99999999' no registrado en ENOSA", tx.BAD_QUERY, "not_found"),
        ("Error: the request was declined", tx.INVALID_ARGS, "unclassified"),  # the documented default
    ],
)
def test_a_failed_result_always_fires_with_a_reason(content: str, leaf: str, reason: str) -> None:
    messages = failed("tool_x", {"id": "A-1"}, content, error_type="ToolError")
    instance = assert_one(messages, leaf, 2)
    assert instance.metadata["reason"] == reason
    assert instance.confidence == (0.5 if reason == "unclassified" else 0.8)


def test_a_cancelled_call_is_the_one_silent_failure() -> None:
    assert run(failed("tool_x", {"id": 1}, "Error: stopped", error_type="asyncio.CancelledError")) == []
