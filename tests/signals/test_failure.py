"""execution.failure, leaf by leaf, on short conversations with tool calls.

Each table row is a conversation (user → assistant tool call → tool result …); positives assert the
exact leaf and message_index, near-misses assert that the leaf does not fire (and, for successful
results that merely talk about errors, that nothing at all fires). Which calls are queries is data
(phrases/failure.yaml), run by tests/signals/test_word_lists.py."""

from __future__ import annotations

import time
from typing import Any

import pytest

from otelsignals.model import Message, Role
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.failure import detect_bad_query
from tests.signals.tool_conversations import (
    assert_none,
    assert_one,
    assert_silent,
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
    # a number the user never said, as a filter of the agent's own
    [
        user("I'd like the same Halden wardrobe in oak instead of walnut"),
        *exchange(
            "search_catalog",
            {"query": "Halden wardrobe oak", "filters": {"finish": "oak", "width_cm": 98}},
            '{"results": []}',
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
    # the user's own numbers, however written
    [
        user("find oak desks under £49.50"),
        *exchange("search_catalog", {"query": "oak desks", "max_price": 49.5}, '{"results": []}'),
    ],
    [
        user("oak desks under 1,000 pounds or a 2k sofa"),
        *exchange("search_catalog", {"query": "oak desks", "max_price": 1000, "sofa_max": 2000}, "[]"),
    ],
    [
        user("freezers that reach -18 degrees"),
        *exchange("search_catalog", {"query": "freezers", "min_temp": -18}, "[]"),
    ],
    # numbers that name an item or a page, or size the answer, narrow nothing
    [
        user("find my invoices about the oak desk"),
        *exchange(
            "search_invoices", {"query": "oak desk", "customer_id": 5521, "page": 2, "limit": 20}, "[]"
        ),
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


def test_an_adjustment_in_a_later_trace_marks_the_empty_result_once() -> None:
    """The empty result ends one trace and the adjusted call opens the next: the instance lands on
    the empty result when the call arrives, and analysing more traces never repeats it."""
    first = [user(), *exchange("get_transactions", {"account": "A1", "days": 1}, "[]")]
    second = exchange("get_transactions", {"account": "A1", "days": 7}, '[{"id": "t1"}]')
    third = exchange("get_transactions", {"account": "A1", "days": 30}, '[{"id": "t1"}]')
    found = run_traces([(first, []), (second, []), (third, [])], detectors=(detect_bad_query,))
    assert [(i.message_index, i.metadata["pattern"]) for i in found] == [(2, "adjusted_after_empty:empty")]


def test_a_call_whose_result_was_not_captured_ends_the_look_back() -> None:
    """days=1 → [], days=7 (its result never recorded), then days=30 in the next trace: the empty
    result is judged once, by the call right after it, however the traces are cut."""
    seven = call("get_transactions", {"account": "A1", "days": 7})
    first = [*succeeded("get_transactions", {"account": "A1", "days": 1}, "[]"), assistant(seven)]
    second = exchange("get_transactions", {"account": "A1", "days": 30}, '[{"id": "t1"}]')
    found = run_traces([(first, []), (second, [])], detectors=(detect_bad_query,))
    assert [i.message_index for i in found] == [2]


def test_an_adjustment_after_the_user_spoke_is_the_users_request() -> None:
    messages = [
        *succeeded("get_transactions", {"account": "A1", "days": 1}, "[]"),
        assistant(text="Nothing in the last day."),
        user("try the whole week"),
        *exchange("get_transactions", {"account": "A1", "days": 7}, '[{"id": "t1"}]'),
    ]
    assert_none(messages, tx.BAD_QUERY)


def test_parallel_adjustments_of_one_empty_result_give_one_instance() -> None:
    week, month = (
        call("get_transactions", {"account": "A1", "days": 7}),
        call("get_transactions", {"account": "A1", "days": 30}),
    )
    messages = [
        *succeeded("get_transactions", {"account": "A1", "days": 1}, "[]"),
        assistant(week, month),
        tool('[{"id": "t1"}]', answers=week),
        tool('[{"id": "t1"}]', answers=month),
    ]
    assert_one(messages, tx.BAD_QUERY, 2)


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
