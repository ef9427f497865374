"""execution.loops, leaf by leaf, on short conversations with tool calls.

Each table row is a conversation (user → assistant tool call → tool result …); positives assert the
exact leaf and message_index, near-misses assert that the leaf does not fire. Which argument keys
name items, and which argument words are left out, are data (phrases/loops.yaml, tool_calls.yaml), run
by tests/signals/test_word_lists.py."""

from __future__ import annotations

from typing import Any

import pytest

from otelsignals.model import Message, Role
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext
from otelsignals.signals.loops import DRIFT_LOWER_BOUND, adjusted, arguments_similarity, text_similarity
from tests.signals.conversations import of_type
from tests.signals.tool_conversations import (
    EXECUTION_DETECTORS,
    alternating,
    assert_one,
    assistant,
    call,
    exchange,
    repeated,
    run,
    run_traces,
    tool,
    user,
)

# --- loops.retry ---------------------------------------------------------------------------------------


def moved_on(messages: list[Message]) -> list[Message]:
    """``messages`` with a first user message that says the user is satisfied and moves on (a turn
    that does not complain ends the loops under way)."""
    return [user("Thanks, that's what I needed."), *messages[1:]]


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
        *moved_on(repeated("get_weather", [{"city": "Paris"}])),
    ],  # the user moved on between
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
    assert not of_type(run(messages, EXECUTION_DETECTORS), tx.RETRY)


def _inventory_checks(between: str | None, is_error: bool) -> list[Message]:
    """Two identical calls (failed, or answered well), a user message, and a third identical call."""
    args = {"sku": "DY-V15", "store": "Austin"}
    result = None if is_error else '{"qty": 3}'
    return [
        user("in stock?"),
        *exchange("check_inventory", args, result, is_error=is_error),
        *exchange("check_inventory", args, result, is_error=is_error),
        Message(Role.ASSISTANT, "Checked twice."),
        Message(Role.USER, between),
        *exchange("check_inventory", args, '{"qty": 3}'),
    ]


@pytest.mark.parametrize(
    ("between", "is_error", "fires"),
    [
        # The user's turn says the last attempt did not do it: the loop goes on through it.
        ("yes try again please", True, True),
        ("that's wrong, I said the Austin store", False, True),
        ("this is useless, same answer again", False, True),
        # After a good answer, a turn that does not complain is a request of its own, even for the
        # same call: asked again, re-checked after the user acted, or the user moved on satisfied.
        ("and now?", False, False),
        ("I restarted the router, can you check again?", False, False),
        ("I restarted the phone. Still no signal.", False, False),  # the user's own step reported
        ("great, thanks! and now?", False, False),
        # Text not captured: a good last result ends the run, a failed one does not.
        (None, False, False),
        (None, True, True),
    ],
)
def test_a_user_turn_continues_a_loop_when_the_last_attempt_did_not_do_it(between, is_error, fires) -> None:
    found = [(i.type, i.message_index) for i in of_type(run(_inventory_checks(between, is_error)), tx.RETRY)]
    assert found == ([(tx.RETRY, 7)] if fires else [])


@pytest.mark.parametrize(
    ("tool", "arguments", "fires"),
    [
        # a search whose sought list came back empty: the user asking again keeps the loop going
        ("search_notifications", {"query": "invoice"}, True),
        # an answer that the list is empty (no unread notifications): asking again is a new request
        ("get_notifications", {"unread": True}, False),
    ],
)
def test_a_list_named_for_the_tool_left_empty_continues_a_loop_only_for_a_query(
    tool: str, arguments: dict[str, object], fires: bool
) -> None:
    turns: list[Message] = []
    for _ in range(3):
        turns += [user("anything new?"), *exchange(tool, arguments, '{"notifications": []}')]
    found = of_type(run(turns), tx.RETRY)
    assert [i.message_index for i in found] == ([7] if fires else [])


def test_two_identical_calls_are_not_a_retry_three_are() -> None:
    assert not of_type(run(repeated("get_weather", [{"city": "Paris"}] * 2)), tx.RETRY)
    (instance,) = of_type(run(repeated("get_weather", [{"city": "Paris"}] * 3)), tx.RETRY)
    assert instance.metadata["tool"] == "get_weather"
    assert instance.metadata["arguments"] == '{"city":"Paris"}'
    assert instance.snippet == 'get_weather({"city":"Paris"})'


def test_a_long_retry_counts_more() -> None:
    found = of_type(run(repeated("get_weather", [{"city": "Paris"}] * 10)), tx.RETRY)
    assert [(i.message_index, i.metadata["run_length"]) for i in found] == [(5, 3), (11, 6), (17, 9)]


def test_six_parallel_identical_calls_in_one_message_give_one_instance() -> None:
    found = of_type(run([user(), assistant(*(call("ping", {}) for _ in range(6)))]), tx.RETRY)
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
        *moved_on(repeated("s", ["cheap flights to paris june"])),
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
    assert not of_type(run(messages, EXECUTION_DETECTORS), tx.PARAMETER_DRIFT)


def test_an_enumeration_of_cities_is_not_parameter_drift() -> None:
    cities = ["Paris", "Tokyo", "Lima", "Berlin", "Austin", "Boston", "Dublin", "Portland", "Portugal"]
    assert not of_type(run(repeated("get_weather", [{"city": c} for c in cities])), tx.PARAMETER_DRIFT)
    parallel = [user(), assistant(*(call("get_weather", {"city": c}) for c in cities))]
    assert not of_type(run(parallel), tx.PARAMETER_DRIFT)


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
    [*alternating("ABAB"), *moved_on(alternating("ABAB"))],  # the user moved on between
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
    assert not of_type(run(messages, EXECUTION_DETECTORS), tx.OSCILLATION)


def test_abab_is_not_oscillation_ababab_is() -> None:
    assert not of_type(run(alternating("ABAB")), tx.OSCILLATION)
    (instance,) = of_type(run(alternating("ABABAB")), tx.OSCILLATION)
    assert instance.metadata["tools"] == ["A", "B"]
    assert instance.confidence == 0.85  # the same arguments each time: flip-flopping
    (varied,) = of_type(run(alternating("ABABAB", same_args=False)), tx.OSCILLATION)
    assert varied.confidence == 0.6


def test_a_long_oscillation_counts_more() -> None:
    found = of_type(run(alternating("AB" * 9)), tx.OSCILLATION)
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
    [*lookups("121"), *moved_on(lookups("212"))],  # the user moved on between
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
    assert not of_type(run(messages, EXECUTION_DETECTORS), tx.OSCILLATION)


def test_ninety_alternating_lookups_fire_and_count_more() -> None:
    """The real case: P1001, P1002, … ninety times; one instance per three more cycles."""
    found = run(lookups("12" * 45), EXECUTION_DETECTORS)
    oscillations = of_type(found, tx.OSCILLATION)
    assert [i.metadata["run_length"] for i in oscillations] == list(range(6, 91, 6))
    assert not of_type(found, tx.RETRY) and not of_type(found, tx.PARAMETER_DRIFT)


def test_two_tools_with_new_arguments_each_time_stay_a_tool_oscillation() -> None:
    (instance,) = of_type(run(alternating("ABABAB", same_args=False)), tx.OSCILLATION)
    assert (instance.metadata["pattern"], instance.confidence) == ("alternating_tools", 0.6)
    # each tool's latest arguments are shown: A's at position 4, B's at 5
    assert instance.metadata["arguments"] == {"A": '{"k":4}', "B": '{"k":5}'}


def test_a_tool_oscillation_shows_its_tools_latest_arguments_after_many_other_tools() -> None:
    """Calls of 100 other tools before the oscillation, in earlier runs of the detector: its two
    tools' latest arguments are shown."""
    memory: dict[str, Any] = {}
    messages = [user()]
    for number in range(100):
        messages += exchange(f"tool_{number}", {"n": number}, "ok")
    assert not of_type(run(messages, EXECUTION_DETECTORS, memory=memory), tx.OSCILLATION)
    for position, name in enumerate("ABABAB"):
        messages += exchange(name, {"k": position}, "ok")
    (instance,) = of_type(run(messages, EXECUTION_DETECTORS, memory=memory), tx.OSCILLATION)
    assert instance.metadata["arguments"] == {"A": '{"k":4}', "B": '{"k":5}'}


def test_the_two_oscillation_rules_keep_one_string_of_a_call_s_arguments() -> None:
    """The tool rule and the signature rule both remember the latest call's arguments as shown (cut
    to ARGS_CHARS when long): one string object for both, not an equal copy each (issue 16)."""
    memory: dict[str, Any] = {}
    long_query = "hotels with a pool and free parking near the old town, " * 8
    run(lookups("1") + exchange("search", {"q": long_query}, "ok"), EXECUTION_DETECTORS, memory=memory)
    state = memory[f"{tx.OSCILLATION}:state"]
    latest = state["last_shown"]
    assert latest is not None and latest.endswith("…")  # cut: made anew from the arguments
    assert any(shown is latest for shown in state["signatures"]["shown"].values())


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
    assert not of_type(run(messages, EXECUTION_DETECTORS), tx.PARAMETER_DRIFT)


# A conversation at rest keeps no loop state (issue 16: half of the real development set's
# conversations held three such dicts after their tool calls had all been answered).

LOOP_STATE_KEYS = [f"{leaf}:state" for leaf in (tx.RETRY, tx.PARAMETER_DRIFT, tx.OSCILLATION)]

# A call whose arguments were not captured waits for its result, which the tool span names with
# its arguments: dropped while the call waits, the state would count the result as a call of its own.
QUERY = {"q": "status of order 1234"}
WAITING_CALLS = [user("where is my order?")] + [
    message
    for number, arguments in enumerate([None, QUERY, QUERY, QUERY], start=1)
    for message in (
        assistant(call("track", arguments, f"c{number}")),
        tool("in transit", name="track", arguments=QUERY, call_id=f"c{number}"),
    )
]


def _trace_by_trace(traces: list[list[Message]], memory: dict[str, Any]) -> list[tuple[str, int, Any]]:
    """The loop detectors run after each trace's messages, memory kept between runs, as the pipeline
    runs them on a growing conversation."""
    found = run_traces([(trace, []) for trace in traces], EXECUTION_DETECTORS, memory)
    return [(i.type, i.message_index, i.metadata) for i in found]


def _message_by_message(messages: list[Message], memory: dict[str, Any]) -> list[tuple[str, int, Any]]:
    return _trace_by_trace([[message] for message in messages], memory)


@pytest.mark.parametrize(
    "messages",
    [
        *(messages for messages, _ in RETRY_POSITIVES + OSCILLATION_POSITIVES),
        *DRIFT_POSITIVES,
        *RETRY_NEAR_MISSES,
        *DRIFT_NEAR_MISSES,
        *OSCILLATION_NEAR_MISSES,
        *(messages for messages, _ in SIGNATURE_OSCILLATION_POSITIVES),
        *SIGNATURE_OSCILLATION_NEAR_MISSES,
        *SHORT_DRIFT_POSITIVES,
        *SHORT_DRIFT_NEAR_MISSES,
        WAITING_CALLS,
    ],
)
def test_message_by_message_the_loops_find_what_one_run_finds(messages: list[Message]) -> None:
    whole = [(i.type, i.message_index, i.metadata) for i in run(messages, EXECUTION_DETECTORS)]
    assert sorted(_message_by_message(messages, {}), key=repr) == sorted(whole, key=repr)


def test_loop_state_is_kept_only_while_a_loop_may_go_on() -> None:
    args = {"sku": "DY-V15", "store": "Austin"}
    answered = [user("in stock?"), *exchange("check_inventory", args, '{"qty": 3}')]
    memory: dict[str, Any] = {}
    _message_by_message([*answered, Message(Role.ASSISTANT, "3 in stock."), user("thanks")], memory)
    assert not any(key in memory for key in LOOP_STATE_KEYS)  # at rest: the user asked anew
    # Near misses, kept: a call answered but no user message since (a run of one), a call waiting
    # for its result.
    memory = {}
    _message_by_message(answered, memory)
    assert all(key in memory for key in LOOP_STATE_KEYS)
    memory = {}
    _message_by_message(WAITING_CALLS[:2], memory)
    assert memory[f"{tx.RETRY}:state"]["pending"] and not memory[f"{tx.RETRY}:state"]["run"]


@pytest.mark.source_modules  # replaces a function of the compiled core
def test_what_the_steps_recorded_is_kept_when_one_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step that raises costs its trace the signals, not the state recorded before it."""
    import otelsignals.signals.loops as loops

    judged = loops._unsatisfying_at
    failures = iter([True])

    def fails_once(ctx: DetectionContext, index: int) -> bool:
        if next(failures, False):
            raise RuntimeError("a reader's surprise")
        return judged(ctx, index)

    monkeypatch.setattr(loops, "_unsatisfying_at", fails_once)
    messages = repeated("track", [{"id": 1}] * 3)  # the user, then three calls and their results
    # The first trace fails on its tool result, with a state the detectors had just made.
    found = _trace_by_trace([messages[:3], messages[3:5], messages[5:]], {})
    assert [(kind, index) for kind, index, _ in found if kind == tx.RETRY] == [(tx.RETRY, 5)]
