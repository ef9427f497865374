"""Tool execution spans (OTel GenAI execute_tool)."""

from __future__ import annotations

import json

import pytest

from otelsignals.conventions.base import SpanView, http_status_of
from otelsignals.conventions.span_decoder import SpanDecoder
from otelsignals.conventions.tools import TOOLS_READER
from tests.conventions.spans import ERROR, make_span

# open-telemetry/semantic-conventions docs/gen-ai/gen-ai-spans.md, "Execute tool span".
TOOL = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "get_weather",
    "gen_ai.tool.call.id": "call_mszuSIzqtI65i1wAUOE8w5H4",
    "gen_ai.tool.type": "function",
}


def test_successful_tool_call() -> None:
    span = make_span(
        {
            **TOOL,
            "gen_ai.tool.call.arguments": '{"location": "Paris"}',
            "gen_ai.tool.call.result": "rainy, 57°F",
        },
        name="execute_tool get_weather",
    )
    reading = TOOLS_READER.read(span)
    assert reading is not None
    assert reading.convention == "tools"
    assert reading.content_captured
    assert reading.llm_call is None and reading.input_messages == []
    execution = reading.tool_execution
    assert execution is not None
    assert (execution.name, execution.call_id, execution.arguments) == (
        "get_weather",
        "call_mszuSIzqtI65i1wAUOE8w5H4",
        {"location": "Paris"},
    )
    result = execution.result
    assert (result.call_id, result.name, result.content) == (
        "call_mszuSIzqtI65i1wAUOE8w5H4",
        "get_weather",
        "rainy, 57°F",
    )
    assert not result.is_error and result.error_type is None and result.status_code is None


def test_structured_arguments_and_result() -> None:
    span = make_span(
        {**TOOL, "gen_ai.tool.call.arguments": {"q": "x", "n": 3}, "gen_ai.tool.call.result": {"items": []}}
    )
    reading = TOOLS_READER.read(span)
    assert reading is not None and reading.tool_execution is not None
    assert reading.tool_execution.arguments == {"q": "x", "n": 3}
    assert reading.tool_execution.result.content == '{"items":[]}'


def test_failed_tool_call_unauthorized() -> None:
    span = make_span(
        {
            **TOOL,
            "gen_ai.tool.name": "crm_lookup",
            "gen_ai.tool.call.arguments": json.dumps({"customer_id": "C-17"}),
            "error.type": "httpx.HTTPStatusError",
            "http.response.status_code": 401,
        },
        [
            (
                "exception",
                {
                    "exception.type": "httpx.HTTPStatusError",
                    "exception.message": "Client error '401 Unauthorized' for url 'https://crm/api/customers/C-17'",
                },
            )
        ],
        name="execute_tool crm_lookup",
        status=ERROR,
        status_message="HTTPStatusError",
    )
    reading = TOOLS_READER.read(span)
    assert reading is not None and reading.tool_execution is not None
    result = reading.tool_execution.result
    assert result.is_error
    assert result.error_type == "httpx.HTTPStatusError"
    assert result.status_code == 401
    assert result.error_message == "Client error '401 Unauthorized' for url 'https://crm/api/customers/C-17'"
    assert result.content is None
    assert reading.tool_execution.arguments == {"customer_id": "C-17"}
    assert reading.content_captured  # the arguments were recorded


def test_failure_from_error_type_alone_and_from_status_alone() -> None:
    typed = TOOLS_READER.read(make_span({**TOOL, "error.type": "timeout"}))
    assert typed is not None and typed.tool_execution is not None
    assert typed.tool_execution.result.is_error and typed.tool_execution.result.error_type == "timeout"
    status_only = TOOLS_READER.read(make_span(TOOL, status=ERROR, status_message="tool crashed"))
    assert status_only is not None and status_only.tool_execution is not None
    assert status_only.tool_execution.result.is_error
    assert status_only.tool_execution.result.error_message == "tool crashed"


def test_content_not_captured() -> None:
    reading = TOOLS_READER.read(make_span(TOOL))
    assert reading is not None and reading.tool_execution is not None
    assert not reading.content_captured
    assert reading.tool_execution.arguments is None and reading.tool_execution.result.content is None
    assert reading.tool_execution.name == "get_weather"


def test_pydantic_ai_v3_tool_span_without_operation_name() -> None:
    # pydantic/pydantic-ai _tool_manager.py + _instrumentation.py (version 3+): span
    # "execute_tool {name}", gen_ai.tool.call.arguments/result, logfire.msg; no gen_ai.operation.name.
    span = make_span(
        {
            "gen_ai.tool.name": "roll_die",
            "gen_ai.tool.call.id": "pyd_ai_tool_call_id_1",
            "gen_ai.tool.call.arguments": "{}",
            "gen_ai.tool.call.result": "4",
            "logfire.msg": "running tool: roll_die",
            "logfire.json_schema": "{}",
        },
        name="execute_tool roll_die",
    )
    reading = TOOLS_READER.read(span)
    assert reading is not None and reading.tool_execution is not None
    assert reading.tool_execution.name == "roll_die"
    assert reading.tool_execution.arguments == {}
    assert reading.tool_execution.result.content == "4"


def test_name_from_span_name_when_attribute_missing() -> None:
    reading = TOOLS_READER.read(
        make_span({"gen_ai.operation.name": "execute_tool"}, name="execute_tool search_docs")
    )
    assert reading is not None and reading.tool_execution is not None
    assert reading.tool_execution.name == "search_docs"


def test_not_tool_spans() -> None:
    assert TOOLS_READER.read(make_span({"gen_ai.operation.name": "chat", "gen_ai.tool.name": "x"})) is None
    assert TOOLS_READER.read(make_span({"http.request.method": "GET"}, name="GET /")) is None
    # Pydantic AI version 2 ("running tool", tool_arguments): pydantic_ai.py reads those.
    assert (
        TOOLS_READER.read(make_span({"gen_ai.tool.name": "x", "tool_arguments": "{}"}, name="running tool"))
        is None
    )


def test_malformed_values_never_raise() -> None:
    cases = [
        {"gen_ai.tool.call.arguments": "{broken", "gen_ai.tool.call.result": 12},
        {"gen_ai.tool.name": 5, "gen_ai.tool.call.id": 77, "gen_ai.tool.call.arguments": ["a", 1]},
        {"gen_ai.tool.call.result": "r" * 100_000, "http.response.status_code": "not a number"},
        {"gen_ai.tool.call.id": {"nested": 1}, "error.type": 3},
    ]
    for attributes in cases:
        reading = TOOLS_READER.read(make_span({**TOOL, **attributes}))
        assert reading is not None and reading.tool_execution is not None
    bad = TOOLS_READER.read(make_span({**TOOL, **cases[0]}))
    assert bad is not None and bad.tool_execution is not None
    assert bad.tool_execution.arguments == "{broken"  # kept as the raw text
    assert bad.tool_execution.result.content == "12"
    numeric_id = TOOLS_READER.read(make_span({**TOOL, **cases[1]}))
    assert numeric_id is not None and numeric_id.tool_execution is not None
    assert numeric_id.tool_execution.call_id == "77"
    assert numeric_id.tool_execution.name is None


@pytest.mark.parametrize(
    ("attributes", "status"),
    [
        ({"http.response.status_code": "503"}, 503),
        # isdigit() takes a superscript two, which int() refuses: not a status, and no reader failure
        ({"http.response.status_code": "5²3"}, None),
        ({"error.type": "4²9"}, None),
        ({"error.type": "429"}, 429),
    ],
)
def test_a_status_written_with_digits_int_refuses_is_none(attributes, status):
    assert http_status_of(SpanView(b"t" * 16, b"s" * 8, attributes=attributes)) == status


# opentelemetry-python-contrib instrumentation-genai/opentelemetry-instrumentation-google-genai,
# tool_call_wrapper.py: a wrapped Python tool's span. The wrapper records each argument's Python type
# name and, with content capture on, its value: a primitive or a list of primitives of one type as
# the attribute itself, anything else as json.dumps text ("null" for None), an object it cannot turn
# into a dict as its repr. The return value likewise. No gen_ai.tool.call.* attributes.
GOOGLE_GENAI_TOOL = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "get_weather",
    "gen_ai.tool.description": "Returns the weather.",
    "code.function.name": "get_weather",
    "code.module": "app.tools",
    "code.args.positional.count": 0,
    "code.args.keyword.count": 1,
}


def _parameter(name: str, type_name: str, value: object = None, *, recorded: bool = True) -> dict:
    prefix = f"code.function.parameters.{name}"
    return {f"{prefix}.type": type_name, **({f"{prefix}.value": value} if recorded else {})}


def _returned(type_name: str, value: object = None, *, recorded: bool = True) -> dict:
    return {
        "code.function.return.type": type_name,
        **({"code.function.return.value": value} if recorded else {}),
    }


@pytest.mark.parametrize(
    ("call", "arguments", "result", "captured"),
    [
        pytest.param(
            {
                **_parameter("city", "str", "Paris"),
                **_returned("dict", json.dumps({"weather": "sunny", "temp_c": 21})),
            },
            {"city": "Paris"},
            '{"weather": "sunny", "temp_c": 21}',  # the result text as the wrapper wrote it
            True,
            id="string-argument-dict-result",
        ),
        pytest.param(
            {
                **_parameter("days", "int", 3),
                **_parameter("threshold", "float", 0.5),
                **_parameter("metric", "bool", True),
                **_parameter("cities", "list", ["Paris", "Lyon"]),  # one primitive type: an array attribute
                **_parameter("mixed", "list", json.dumps([1, "a"])),  # JSON text: read back
                **_parameter("filters", "dict", json.dumps({"rain": True})),
                **_parameter("query", "WeatherQuery", json.dumps({"city": "Nice"})),  # model_dump()
                **_parameter("unit", "NoneType", "null"),
                **_returned("list", ["sunny", "rainy"]),
            },
            {
                "days": 3,
                "threshold": 0.5,
                "metric": True,
                "cities": ["Paris", "Lyon"],
                "mixed": [1, "a"],
                "filters": {"rain": True},
                "query": {"city": "Nice"},
                "unit": None,
            },
            '["sunny","rainy"]',
            True,
            id="typed-arguments",
        ),
        pytest.param(
            # Near-misses: a str argument holding JSON (or "null") was given text; a repr and a JSON
            # text cut by an attribute length limit are not JSON to read back.
            {
                **_parameter("payload", "str", '{"city": "Paris"}'),
                **_parameter("word", "str", "null"),
                **_parameter("day", "date", "datetime.date(2025, 6, 1)"),
                **_parameter("filters", "dict", '{"rain": tr'),
                **_returned("int", 21),
            },
            {
                "payload": '{"city": "Paris"}',
                "word": "null",
                "day": "datetime.date(2025, 6, 1)",
                "filters": '{"rain": tr',
            },
            "21",
            True,
            id="text-that-stays-text",
        ),
        pytest.param(
            # Parameters literally called "value" and "type": the name ends at the last suffix.
            {
                **_parameter("value", "str", "v"),
                **_parameter("type", "str", "t"),
                **_parameter("args[0]", "int", 7),  # a positional argument beyond the signature
                **_returned("str", "ok"),
            },
            {"value": "v", "type": "t", "args[0]": 7},
            "ok",
            True,
            id="parameters-named-value-and-type",
        ),
        pytest.param(
            # Content capture off: the types only.
            {**_parameter("city", "str", recorded=False), **_returned("dict", recorded=False)},
            None,
            None,
            False,
            id="content-not-captured",
        ),
        pytest.param(
            # The tool returned None: no result text, and not "null" (nor "None").
            {**_parameter("city", "str", "Paris"), **_returned("NoneType", "null")},
            {"city": "Paris"},
            None,
            True,
            id="returned-none",
        ),
        pytest.param(
            # Near-miss: a tool that returned the text "null" did return text.
            {**_returned("str", "null")},
            None,
            "null",
            True,
            id="returned-the-text-null",
        ),
        pytest.param(
            # The tool raised: arguments recorded, no return value, so no result text.
            {**_parameter("city", "str", "Paris")},
            {"city": "Paris"},
            None,
            True,
            id="no-return-value",
        ),
    ],
)
def test_google_genai_tool_span_reads_the_code_attributes(call, arguments, result, captured) -> None:
    span = make_span({**GOOGLE_GENAI_TOOL, **call}, name="execute_tool get_weather")
    reading = TOOLS_READER.read(span)
    assert reading is not None and reading.tool_execution is not None
    execution = reading.tool_execution
    assert (execution.name, execution.call_id) == ("get_weather", None)
    assert execution.arguments == arguments
    assert execution.result.content == result
    assert reading.content_captured is captured
    assert not execution.result.is_error


@pytest.mark.parametrize(
    ("genai", "arguments", "result"),
    [
        pytest.param(
            {"gen_ai.tool.call.arguments": '{"location": "Paris, FR"}', "gen_ai.tool.call.result": "rainy"},
            {"location": "Paris, FR"},
            "rainy",
            id="both-genai",
        ),
        pytest.param({"gen_ai.tool.call.arguments": "{}"}, {}, '"sunny"', id="genai-arguments-only"),
        pytest.param(
            {"gen_ai.tool.call.result": "rainy"}, {"city": "Paris"}, "rainy", id="genai-result-only"
        ),
    ],
)
def test_the_genai_call_attributes_win_over_the_code_attributes(genai, arguments, result) -> None:
    # Each GenAI attribute wins over its code counterpart; the other is read from the code one.
    code = {**_parameter("city", "str", "Paris"), **_returned("str", '"sunny"')}
    reading = TOOLS_READER.read(
        make_span({**GOOGLE_GENAI_TOOL, **code, **genai}, name="execute_tool get_weather")
    )
    assert reading is not None and reading.tool_execution is not None
    assert reading.tool_execution.arguments == arguments
    assert reading.tool_execution.result.content == result


@pytest.mark.parametrize(
    ("attributes", "span_name"),
    [
        # A traced function (code attributes, as any code instrumentation writes them), no GenAI.
        ({"code.function.name": "get_weather", **_parameter("city", "str", "Paris")}, "get_weather"),
        ({"code.function.name": "get_weather", **_returned("str", "sunny")}, "execute_tool get_weather"),
        # A model call whose span happens to carry code attributes.
        (
            {"gen_ai.operation.name": "chat", "gen_ai.tool.name": "x", **_parameter("city", "str", "Paris")},
            "chat",
        ),
    ],
)
def test_code_attributes_alone_make_no_tool_execution(attributes, span_name) -> None:
    span = make_span(attributes, name=span_name)
    assert TOOLS_READER.read(span) is None
    reading = SpanDecoder().read(span)
    assert reading is None or reading.tool_execution is None
