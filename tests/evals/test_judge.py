"""The LLM judge against a real OpenAI-compatible HTTP server on 127.0.0.1 with scripted replies,
reached through the pipeline's ChatCompletions, as the sidecar does."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from otelsignals.evals.judge import METRICS, Judge, JudgeConfig, is_errored
from otelsignals.evals.judge_prompts import load_stage, render_transcript, validate
from otelsignals.evals.proxies import proxy_confidence, proxy_tool_correctness
from otelsignals.model import Conversation, Message, Role, ToolCall, ToolResult
from otelsignals.pipeline.http_client import Backoff, RetryPolicy
from otelsignals.pipeline.llm_endpoints import ChatCompletions
from tests.support.fake_openai import FakeOpenAI, Received, Reply, _prompt_tokens, _tokens

PROMPTS = Path(__file__).resolve().parents[2] / "otelsignals" / "evals" / "prompts"


class JudgeServer(FakeOpenAI):
    """FakeOpenAI plus what these tests need: held replies (slow server) and a count of the
    chat completion requests being handled at the same time."""

    def __init__(self) -> None:
        super().__init__(seed=7)
        self.delays: dict[int, float] = {}  # arrival number (from 0) → seconds to hold the reply
        self.default_delay = 0.0
        self.active = 0
        self.max_active = 0
        self._arrivals = 0

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        number = self._arrivals
        self._arrivals += 1
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            # The scripted reply is taken on arrival, so a held (timed-out) request consumes its own.
            response = await super()._chat_completions(request)
            delay = self.delays.get(number, self.default_delay)
            if delay:
                await asyncio.sleep(delay)
            return response
        finally:
            self.active -= 1


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    with JudgeServer() as running:
        yield running


@asynccontextmanager
async def judging(
    server: FakeOpenAI,
    *,
    api_key: str = "",
    timeout: float = 5.0,
    attempts: int = 3,
    backoff: float = 0.01,
    **judge_config: Any,
) -> AsyncIterator[Judge]:
    """A Judge asking ``server``; ``backoff`` is the first retry's step (doubling, ±50 % jitter)."""
    retry = RetryPolicy(attempts, Backoff(backoff, 2.0, 20.0, 0.5))
    async with ChatCompletions(server.base_url, api_key, timeout=timeout, retry=retry) as complete:
        yield Judge(JudgeConfig(**{"model": "judge-model", **judge_config}), complete)


def js(**fields: Any) -> Reply:
    return Reply.text(json.dumps(fields))


def stage_prompt(name: str) -> str:
    return load_stage(name).prompt


# ---- conversations ---------------------------------------------------------------------------


def order_conversation() -> Conversation:
    return Conversation(
        key="c1",
        messages=[
            Message(Role.SYSTEM, "You are a support agent with order tools."),
            Message(Role.USER, "Where is my order A1?"),
            Message(Role.ASSISTANT, None, tool_calls=[ToolCall("get_order", {"order_id": "A1"}, "call_1")]),
            Message(
                Role.TOOL,
                '{"status": "shipped"}',
                tool_result=ToolResult(call_id="call_1", name="get_order", content='{"status": "shipped"}'),
            ),
            Message(Role.ASSISTANT, None, tool_calls=[ToolCall("track", {"order_id": "B2"}, "call_2")]),
            Message(
                Role.TOOL,
                "not found",
                tool_result=ToolResult(call_id="call_2", name="track", is_error=True, error_message="404"),
            ),
            Message(Role.ASSISTANT, "Your order A1 has shipped."),
            Message(Role.USER, "Thanks!"),
        ],
    )


def plain_conversation() -> Conversation:
    return Conversation(
        key="c2",
        messages=[
            Message(Role.USER, "What is the capital of France?"),
            Message(Role.ASSISTANT, "Paris."),
        ],
    )


def plan_conversation() -> Conversation:
    return Conversation(
        key="c3",
        messages=[
            Message(Role.USER, "Refund order A1."),
            Message(Role.ASSISTANT, "Plan: 1. look up A1. 2. check refund policy. 3. issue the refund."),
            Message(Role.ASSISTANT, None, tool_calls=[ToolCall("get_order", {"order_id": "A1"})]),
            Message(Role.TOOL, "ok", tool_result=ToolResult(name="get_order", content="ok")),
            Message(Role.ASSISTANT, None, tool_calls=[ToolCall("refund", {"order_id": "A1"})]),
            Message(Role.TOOL, "done", tool_result=ToolResult(name="refund", content="done")),
            Message(Role.ASSISTANT, "Refunded."),
        ],
    )


PLAN = {"has_plan": True, "plan": ["Look up A1", "Check refund policy", "Issue the refund"]}
TASK = {"task": "Refund order A1.", "outcome": "Refund issued."}
FIRST_FINDINGS = ("Task", "User input")  # the headings under which stage 1's findings are passed on


def assert_judge_request(item: Received, stage: str, model: str = "judge-model") -> None:
    body = item.body or {}
    assert item.path == "/v1/chat/completions"
    assert body["model"] == model
    assert body["response_format"] == {"type": "json_object"}
    assert body["temperature"] == 0
    assert not body.get("stream")
    assert item.messages[0] == {"role": "system", "content": stage_prompt(stage)}
    assert item.messages[1]["role"] == "user"


# ---- stages and good outputs -----------------------------------------------------------------


async def test_task_completion_two_stages_with_provider_model(server: JudgeServer) -> None:
    server.script(
        js(task="Find where order A1 is.", outcome="Told the user A1 has shipped."),
        js(verdict=0.9, reason="The status was looked up and reported."),
    )
    async with judging(
        server, model="ignored", provider_model="openai/gpt-4o-mini", api_key="sk-test"
    ) as judge:
        result = await judge.task_completion(order_conversation())

    assert result.name == "task_completion"
    assert result.score == 0.9 and result.passed
    assert result.reason == "The status was looked up and reported."
    meta = result.metadata
    assert meta["source"] == "llm_judge" and meta["status"] == "ok"
    assert meta["model"] == "gpt-4o-mini" and meta["provider"] == "openai"
    assert meta["stages"] == 2 and meta["stage_names"] == ["extract_task", "task_completion"]
    assert meta["task"] == "Find where order A1 is." and meta["verdict"] == 0.9
    assert meta["requests"] == 2 and meta["retries"] == 0 and meta["repairs"] == 0
    assert meta["latency_s"] > 0

    first, second = server.completion_requests
    assert_judge_request(first, "extract_task", "gpt-4o-mini")
    assert_judge_request(second, "task_completion", "gpt-4o-mini")
    assert first.headers["authorization"] == "Bearer sk-test"
    transcript = render_transcript(order_conversation())
    assert first.messages[1]["content"] == f"## Conversation\n{transcript}"
    assert "-> tool call get_order" in transcript and "[ERROR: 404]" in transcript
    assert "## Task\nFind where order A1 is." in second.messages[1]["content"]
    assert "## Outcome\nTold the user A1 has shipped." in second.messages[1]["content"]

    # Tokens are those the server reported in `usage`.
    prompt = sum(_prompt_tokens(r.body or {}) for r in (first, second))
    completion = sum(_tokens(r.reply.content) for r in (first, second) if r.reply)
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (prompt, completion)
    stats = judge.stats
    assert (stats.prompt_tokens, stats.completion_tokens) == (prompt, completion)
    assert stats.requests == 2 and stats.metrics == 1 and stats.errors == 0
    assert stats.total_latency_s > 0
    assert set(stats.as_dict()) >= {"requests", "retries", "errors", "prompt_tokens", "completion_tokens"}


CASES: list[tuple[str, list[Reply], list[str], float, dict[str, Any]]] = [
    (
        "tool_correctness",
        [
            js(user_input="Find where order A1 is.", needed_tools=["get_order"], reason="A lookup."),
            js(score=0.5, unnecessary_tools=["track"], missing_tools=[], reason="track was not needed."),
        ],
        ["select_tools", "tool_correctness"],
        0.5,
        {"unnecessary_tools": ["track"], "tool_calls": 2, "needed_tools": ["get_order"]},
    ),
    (
        "argument_correctness",
        [
            js(user_input="Find where order A1 is."),
            js(
                verdicts=[
                    {"index": 2, "verdict": "no", "reason": "B2 is not the user's order."},
                    {"index": 1, "verdict": "yes", "reason": ""},
                ]
            ),
            js(reason="track was called for B2, not the user's order A1."),
        ],
        ["extract_user_input", "argument_correctness", "argument_reason"],
        0.5,
        {"tool_calls": 2, "correct": 1, "user_input": "Find where order A1 is."},
    ),
    (
        "step_efficiency",
        [
            js(task="Find where order A1 is.", outcome="Reported shipped."),
            js(score=0.7, redundant_steps=[4], reason="The track call was a detour."),
        ],
        ["extract_task", "step_efficiency"],
        0.7,
        {"redundant_steps": [4], "task": "Find where order A1 is."},
    ),
    (
        "confidence",
        [js(score=0.8, concerns=["one failed tool call"], reason="Grounded answer, user thanked.")],
        ["confidence"],
        0.8,
        {"concerns": ["one failed tool call"]},
    ),
    (
        "plan_adherence",
        [
            js(**TASK),
            js(**PLAN),
            js(score=0.6, deviations=["skipped the policy check"], reason="Step 2 skipped."),
        ],
        ["extract_task", "extract_plan", "plan_adherence"],
        0.6,
        {
            "plan_found": True,
            "plan": PLAN["plan"],
            "deviations": ["skipped the policy check"],
            "task": TASK["task"],
        },
    ),
    (
        "plan_quality",
        [js(**TASK), js(**PLAN), js(score=1, issues=[], reason="Complete and ordered.")],
        ["extract_task", "extract_plan", "plan_quality"],
        1.0,
        {"plan_found": True, "plan_type": "explicit", "issues": []},
    ),
    (
        "plan_adherence",  # an implied plan ("first I'll look up your order, then…") counts too
        [
            js(**TASK),
            js(has_plan=True, plan_type="implied", plan=["Look up A1", "Report its status"]),
            js(score=1, deviations=[], reason="Followed."),
        ],
        ["extract_task", "extract_plan", "plan_adherence"],
        1.0,
        {"plan_found": True, "plan_type": "implied", "plan": ["Look up A1", "Report its status"]},
    ),
]


@pytest.mark.parametrize(
    ("metric", "replies", "stages", "score", "expected_meta"), CASES, ids=[c[0] for c in CASES]
)
async def test_metric_stages_and_scores(
    server: JudgeServer,
    metric: str,
    replies: list[Reply],
    stages: list[str],
    score: float,
    expected_meta: dict[str, Any],
) -> None:
    conversation = plan_conversation() if metric.startswith("plan_") else order_conversation()
    server.script(*replies)
    async with judging(server) as judge:
        result = await getattr(judge, metric)(conversation)

    assert result.name == metric
    assert result.score == pytest.approx(score)
    assert result.passed is (score >= 0.5)
    assert result.metadata["source"] == "llm_judge" and result.metadata["status"] == "ok"
    assert result.metadata["stage_names"] == stages and result.metadata["stages"] == len(stages)
    for key, value in expected_meta.items():
        assert result.metadata[key] == value, key
    received = server.completion_requests
    assert len(received) == len(stages)
    for item, stage in zip(received, stages, strict=True):
        assert_judge_request(item, stage)
    # Every later stage is given the first stage's findings; the plan stages also the plan.
    for later in received[1:]:
        content = later.messages[1]["content"]
        assert any(f"## {heading}\n" in content for heading in FIRST_FINDINGS), content[:200]
    if metric.startswith("plan_"):
        assert "## Plan\n1. Look up A1" in received[-1].messages[1]["content"]


async def test_argument_correctness_lists_each_call_and_reason(server: JudgeServer) -> None:
    server.script(
        js(user_input="Where is my order A1?"),
        js(verdicts=[{"index": 1, "verdict": "yes"}, {"index": 2, "verdict": "no", "reason": "wrong id"}]),
        js(reason="track used B2 instead of A1."),
    )
    async with judging(server) as judge:
        result = await judge.argument_correctness(order_conversation())
    extract, verdicts, explain = (r.messages[1]["content"] for r in server.completion_requests)
    assert extract.startswith("## Conversation\n") and "## User input" not in extract
    assert "## User input\nWhere is my order A1?" in verdicts
    assert '1. get_order({"order_id": "A1"}) (message 2)' in verdicts
    assert '2. track({"order_id": "B2"}) (message 4)' in verdicts
    # Stage 3 sees the verdicts and the score, not the transcript: it explains, it does not re-judge.
    assert "## Verdicts\n1. get_order: yes\n2. track: no (wrong id)" in explain
    assert "## Score\n0.50" in explain and "## Conversation" not in explain
    assert result.score == 0.5 and result.reason == "track used B2 instead of A1."
    assert result.metadata["user_input"] == "Where is my order A1?"
    assert [v["verdict"] for v in result.metadata["verdicts"]] == ["yes", "no"]


SELECTED = js(user_input="Weather in Paris.", needed_tools=["get_weather"], reason="It asks the weather.")


async def test_tool_correctness_sends_available_tools(server: JudgeServer) -> None:
    server.script(SELECTED, js(score=1.0, unnecessary_tools=[], missing_tools=[], reason="Right tool."))
    tools = [
        {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city"}},
        "search",
    ]
    async with judging(server) as judge:
        result = await judge.tool_correctness(plain_conversation(), available_tools=tools)
    select, judged = (r.messages[1]["content"] for r in server.completion_requests)
    for user in (select, judged):
        assert "## Available tools\n- get_weather: Weather for a city\n- search" in user
    # Stage 1 chooses the needed tools without seeing the calls; stage 2 gets its choice and the calls.
    assert "## Tool calls made" not in select
    assert "## Needed tools\n- get_weather" in judged and "## User input\nWeather in Paris." in judged
    assert "## Tool calls made\n(none)" in judged
    assert result.score == 1.0 and result.metadata["needed_tools"] == ["get_weather"]
    assert result.metadata["user_input"] == "Weather in Paris."


async def test_tool_selection_is_blind_to_the_calls_made(server: JudgeServer) -> None:
    """Stage 1 sees what the user and the assistant said, not the calls nor their results."""
    server.script(
        js(user_input="Where is A1?", needed_tools=["get_order"], reason="A lookup."),
        js(score=0.5, unnecessary_tools=["track"], missing_tools=[], reason="track was not needed."),
    )
    async with judging(server) as judge:
        await judge.tool_correctness(order_conversation(), available_tools=["get_order", "track"])
    select, judged = (r.messages[1]["content"] for r in server.completion_requests)
    assert "tool call" not in select and "tool result" not in select and "B2" not in select
    assert "Where is my order A1?" in select  # the user's words are there
    assert "-> tool call track" in judged and "## Tool calls made\n- [" in judged


async def test_tool_correctness_reads_the_tools_the_spans_listed(server: JudgeServer) -> None:
    server.script(SELECTED, js(score=1.0, unnecessary_tools=[], missing_tools=[], reason="Right tool."))
    conversation = plain_conversation()
    conversation.available_tools["get_order"] = {
        "name": "get_order",
        "description": "Look up",
        "parameters": None,
    }
    async with judging(server) as judge:
        await judge.tool_correctness(conversation)  # no list given: the conversation's own
    for request in server.completion_requests:
        user = request.messages[1]["content"]
        assert "## Available tools\n- get_order: Look up" in user and "(not known)" not in user


async def test_evaluate_runs_all_metrics(server: JudgeServer) -> None:
    # Replies are consumed in arrival order, which concurrency makes unpredictable: run one at a time.
    async with judging(server, max_concurrency=1) as judge:
        server.script(js(**TASK), js(has_plan=False, plan=[]))
        results = await judge.evaluate(plain_conversation(), ["plan_quality", "argument_correctness"])
    assert list(results) == ["plan_quality", "argument_correctness"]
    assert all(r.score == 1.0 for r in results.values())
    with pytest.raises(ValueError, match="unknown judge metrics"):
        await judge.evaluate(plain_conversation(), ["nope"])
    assert len(METRICS) == 7


# ---- shortcuts without the model ---------------------------------------------------------------


async def test_argument_correctness_without_tool_calls_makes_no_request(server: JudgeServer) -> None:
    async with judging(server) as judge:
        result = await judge.argument_correctness(plain_conversation())
    assert result.score == 1.0 and result.passed
    assert result.metadata["source"] == "llm_judge" and result.metadata["stages"] == 0
    assert result.metadata["requests"] == 0
    assert server.requests == [] and judge.stats.requests == 0


@pytest.mark.parametrize("metric", ["plan_quality", "plan_adherence"])
async def test_plan_metrics_without_a_plan_score_one(server: JudgeServer, metric: str) -> None:
    server.script(js(**TASK), js(has_plan=False, plan=[]))
    async with judging(server) as judge:
        result = await getattr(judge, metric)(plain_conversation())
    assert result.score == 1.0 and result.passed
    assert result.metadata["plan_found"] is False and result.metadata["task"] == TASK["task"]
    assert result.metadata["stage_names"] == ["extract_task", "extract_plan"]
    assert "## Task\nRefund order A1." in server.completion_requests[1].messages[1]["content"]


async def test_task_completion_without_a_task(server: JudgeServer) -> None:
    server.script(js(task="", outcome="Small talk."))
    async with judging(server) as judge:
        result = await judge.task_completion(plain_conversation())
    assert result.score == 1.0 and result.metadata["stages"] == 1


# ---- malformed output ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "complaint"),
    [
        (Reply.text("The agent did well, I'd say 0.8."), "not valid JSON"),
        (js(score=0.8, reason="missing concerns"), "$.concerns is required"),
        (js(score=1.5, concerns=[], reason="too high"), "$.score must be <= 1"),
        (js(score="0.8", concerns=[], reason="string score"), "$.score must be of type number"),
        (Reply.text("[0.8]"), "$ must be of type object"),
    ],
    ids=["not-json", "missing-field", "out-of-range", "wrong-type", "not-object"],
)
async def test_malformed_output_then_good_is_retried_once(
    server: JudgeServer, bad: Reply, complaint: str
) -> None:
    good = js(score=0.8, concerns=[], reason="Fine.")
    server.script(bad, good)
    async with judging(server) as judge:
        result = await judge.confidence(order_conversation())

    assert result.score == 0.8 and result.metadata["status"] == "ok"
    assert result.metadata["repairs"] == 1 and result.metadata["requests"] == 2
    first, second = server.completion_requests
    assert_judge_request(second, "confidence")
    assert second.messages[:2] == first.messages
    assert second.messages[2] == {"role": "assistant", "content": bad.content}
    corrective = second.messages[3]
    assert corrective["role"] == "user"
    assert corrective["content"].startswith("Your previous reply could not be used:")
    assert complaint in corrective["content"]
    assert judge.stats.repairs == 1 and judge.stats.malformed == 1 and judge.stats.errors == 0


async def test_fenced_json_is_accepted(server: JudgeServer) -> None:
    server.script(Reply.text('```json\n{"score": 0.4, "concerns": ["x"], "reason": "r"}\n```'))
    async with judging(server) as judge:
        result = await judge.confidence(order_conversation())
    assert result.score == 0.4 and result.metadata["repairs"] == 0


async def test_malformed_twice_is_errored_without_a_score(server: JudgeServer) -> None:
    server.script(
        js(task="Find order A1.", outcome="Shipped."),
        Reply.text("not json"),
        js(verdict="done", reason="bad verdict"),
    )
    async with judging(server) as judge:
        result = await judge.task_completion(order_conversation())

    assert is_errored(result)
    assert result.score is None and result.passed is False
    meta = result.metadata
    assert meta["status"] == "error" and meta["error_kind"] == "malformed"
    assert "task_completion" in meta["error"] and "$.verdict must be of type number" in meta["error"]
    assert meta["source"] == "llm_judge" and meta["stages"] == 2 and meta["requests"] == 3
    assert meta["prompt_tokens"] > 0 and "verdict" not in meta
    assert len(server.completion_requests) == 3
    assert judge.stats.errors == 1 and judge.stats.repairs == 1 and judge.stats.malformed == 2


async def test_argument_verdict_count_mismatch_is_malformed(server: JudgeServer) -> None:
    server.script(
        js(user_input="Where is A1?"),
        js(verdicts=[{"index": 1, "verdict": "yes"}]),
        js(verdicts=[{"index": 1, "verdict": "yes"}, {"index": 2, "verdict": "yes"}]),
        js(reason="Both calls used the user's identifiers."),
    )
    async with judging(server) as judge:
        result = await judge.argument_correctness(order_conversation())
    assert result.score == 1.0 and result.metadata["repairs"] == 1
    assert (
        "exactly one verdict for each tool call 1..2" in server.completion_requests[2].messages[3]["content"]
    )


# ---- transport: timeouts, 429, 5xx, concurrency --------------------------------------------------


async def test_slow_server_is_retried_then_errored(server: JudgeServer) -> None:
    server.default_delay = 2.0
    server.script(*(js(score=0.9, concerns=[], reason="late") for _ in range(2)))
    started = time.perf_counter()
    async with judging(server, timeout=0.25, attempts=2) as judge:
        result = await judge.confidence(order_conversation())
    assert time.perf_counter() - started < 1.5

    assert is_errored(result) and result.score is None
    assert result.metadata["error_kind"] == "transport"
    assert "timed out after 0.25s" in result.metadata["error"]
    assert result.metadata["requests"] == 2 and result.metadata["retries"] == 1
    assert len(server.completion_requests) == 2
    stats = judge.stats
    assert stats.requests == 2 and stats.retries == 1 and stats.http_errors == 2 and stats.errors == 1


async def test_slow_first_attempt_then_ok(server: JudgeServer) -> None:
    server.delays[0] = 2.0
    server.script(js(score=0.1, concerns=[], reason="too late"), js(score=0.9, concerns=[], reason="ok"))
    async with judging(server, timeout=0.25) as judge:
        result = await judge.confidence(order_conversation())
    assert result.score == 0.9 and result.metadata["retries"] == 1


async def test_429_with_retry_after_is_retried(server: JudgeServer) -> None:
    server.script(Reply.error(429, retry_after=0.4), js(score=0.7, concerns=[], reason="ok"))
    # The backoff step is 10 ms: a gap of 0.4 s or more is the server's Retry-After, honoured.
    async with judging(server) as judge:
        result = await judge.confidence(order_conversation())
    assert result.score == 0.7 and result.metadata["retries"] == 1
    first, second = server.completion_requests
    assert first.status == 429 and second.status == 200
    assert 0.35 <= second.received_at - first.received_at < 3.0
    assert judge.stats.retries == 1 and judge.stats.http_errors == 1


async def test_5xx_exhausts_retries_and_4xx_is_not_retried(server: JudgeServer) -> None:
    server.script(Reply.error(503), Reply.error(500), Reply.error(502))
    async with judging(server, attempts=3) as judge:
        result = await judge.confidence(order_conversation())
        assert is_errored(result) and result.metadata["requests"] == 3
        assert (
            "HTTP 502" in result.metadata["error"] and "gave up after 3 attempts" in result.metadata["error"]
        )

        server.clear()
        server.script(Reply.error(401))
        result = await judge.confidence(order_conversation())
        assert is_errored(result) and result.metadata["error_kind"] == "http"
        assert "Incorrect API key" in result.metadata["error"]
        assert len(server.completion_requests) == 1


async def test_concurrency_limit_is_respected(server: JudgeServer) -> None:
    server.default_delay = 0.15
    server.script(*(js(score=0.5, concerns=[], reason="ok") for _ in range(6)))
    async with judging(server, max_concurrency=2) as judge:
        results = await asyncio.gather(*(judge.confidence(order_conversation()) for _ in range(6)))
    assert all(r.score == 0.5 for r in results)
    assert server.max_active == 2  # never more, and the limit was actually reached
    assert judge.stats.max_in_flight == 2 and judge.stats.in_flight == 0 and judge.stats.requests == 6


# ---- configuration, prompts and the schema validator -------------------------------------------


def test_config_validation_and_provider_model() -> None:
    cfg = JudgeConfig("m", provider_model="openrouter/meta/llama-3")
    assert cfg.request_model == "meta/llama-3" and cfg.provider == "openrouter"
    assert JudgeConfig("gpt-4o").request_model == "gpt-4o"
    with pytest.raises(ValueError):
        JudgeConfig("m", provider_model="no-slash")
    with pytest.raises(ValueError):
        JudgeConfig("m", max_concurrency=0)
    with pytest.raises(ValueError, match="base_url"):
        ChatCompletions("")


def test_every_stage_has_a_prompt_and_a_supported_schema() -> None:
    stages = {p.name.removesuffix(".schema.json") for p in PROMPTS.glob("*.schema.json")}
    assert stages == {
        "extract_task",
        "task_completion",
        "select_tools",
        "tool_correctness",
        "extract_user_input",
        "argument_correctness",
        "argument_reason",
        "step_efficiency",
        "confidence",
        "extract_plan",
        "plan_adherence",
        "plan_quality",
    }
    for name in stages:
        stage = load_stage(name)  # raises on keywords the validator does not support
        assert "JSON" in stage.prompt and "$schema" not in stage.prompt
        assert json.dumps(stage.schema, indent=2) in stage.prompt
    assert (PROMPTS / "corrective.txt").is_file()


def test_validator() -> None:
    schema = load_stage("argument_correctness").schema
    assert validate({"verdicts": [{"index": 1, "verdict": "yes"}]}, schema) == []
    assert validate({"verdicts": [{"index": 0, "verdict": "maybe"}]}, schema) == [
        "$.verdicts[0].index must be >= 1, got 0",
        "$.verdicts[0].verdict must be one of ['yes', 'no'], got 'maybe'",
    ]
    assert validate({"verdicts": [{"index": True, "verdict": "yes"}]}, schema) == [
        "$.verdicts[0].index must be of type integer, got bool"
    ]
    number = {"type": "number", "minimum": 0, "maximum": 1}
    assert validate(float("nan"), number) and validate(True, number) and not validate(0, number)
    closed = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}
    assert validate({"a": "x", "b": 1}, closed) == ["$.b is not allowed"]


# ---- model-free proxies ----------------------------------------------------------------------


def test_proxy_confidence() -> None:
    clean = proxy_confidence({})
    assert clean.score == 1.0 and clean.passed and clean.metadata["source"] == "proxy"
    two = proxy_confidence({"interaction.misalignment.correction": 2, "execution.loops.retry": 5})
    assert two.score == pytest.approx(math.exp(-0.5))
    assert two.metadata["misalignment_count"] == 2 and two.metadata["counted_signals"] == {
        "interaction.misalignment.correction": 2
    }
    mixed = proxy_confidence(
        {
            "interaction.misalignment.rephrase": 1,
            "interaction.disengagement.negative_stance": 1,
            "interaction.disengagement.quit": 1,
        }
    )
    assert mixed.score == pytest.approx(math.exp(-1.75)) and not mixed.passed
    assert mixed.metadata["disengagement_count"] == 2
    assert proxy_confidence({"interaction.disengagement.escalation": 0}).score == 1.0


def test_proxy_tool_correctness() -> None:
    result = proxy_tool_correctness(order_conversation())
    assert result.score == 0.5 and result.metadata["source"] == "proxy"
    assert result.metadata["failed_tools"] == ["track"] and result.metadata["tool_results"] == 2
    none = proxy_tool_correctness(plain_conversation())
    assert none.score == 1.0 and none.passed
    ok = proxy_tool_correctness(plan_conversation())
    assert ok.score == 1.0 and ok.name == "tool_correctness"


def test_transcript_elides_the_middle_beyond_the_budget() -> None:
    messages = [Message(Role.USER, "the original request")]
    messages += [Message(Role.ASSISTANT, f"step {i} " + "x" * 50) for i in range(100)]
    conversation = Conversation(key="long", messages=messages, message_offset=10)
    text = render_transcript(conversation, max_chars=1_000, max_message_chars=20)
    assert len(text) <= 1_000
    assert text.startswith("[10] user: the original request")
    assert "messages elided" in text and text.endswith(
        "[110] assistant: step 99 xxxxxxxxxxxx… [38 more characters]"
    )
    assert render_transcript(Conversation(key="empty")) == "(no messages)"


async def test_confidence_reports_the_four_criteria(server: JudgeServer) -> None:
    criteria = {
        "decisiveness": 0.9,
        "appropriateness": 0.8,
        "consistency": 1.0,
        "low_confidence_indicators": 0.6,
    }
    server.script(js(criteria=criteria, score=0.8, concerns=["hedging"], reason="Mostly sure."))
    async with judging(server) as judge:
        result = await judge.confidence(order_conversation())
    assert result.score == 0.8 and result.metadata["criteria"] == criteria
    prompt = server.completion_requests[0].messages[0]["content"]
    assert all(name in prompt for name in criteria)


async def test_a_criterion_out_of_range_is_malformed(server: JudgeServer) -> None:
    bad = js(criteria={"decisiveness": 1.5}, score=0.8, concerns=[], reason="x")
    server.script(bad, bad)
    async with judging(server) as judge:
        result = await judge.confidence(order_conversation())
    assert is_errored(result) and "$.criteria.decisiveness must be <= 1" in result.metadata["error"]


async def test_metrics_evaluated_together_share_one_task_extraction(server: JudgeServer) -> None:
    """task_completion, step_efficiency and both plan metrics all start from the user's task: asked
    once, every metric works from the same answer; the plan, shared by the plan metrics, too."""
    answers = {
        "extract_task": js(**TASK),
        "extract_plan": js(**PLAN),
        "task_completion": js(verdict=1.0, reason="Done."),
        "step_efficiency": js(score=0.9, redundant_steps=[], reason="Direct."),
        "plan_adherence": js(score=0.8, deviations=[], reason="Followed."),
        "plan_quality": js(score=0.7, issues=[], reason="Sound."),
    }
    server.answer_by_system_prompt({stage_prompt(name): reply for name, reply in answers.items()})
    metrics = ["task_completion", "step_efficiency", "plan_adherence", "plan_quality"]
    async with judging(server) as judge:
        results = await judge.evaluate(plan_conversation(), metrics)
    asked = [r.messages[0]["content"] for r in server.completion_requests]
    assert asked.count(stage_prompt("extract_task")) == 1 and asked.count(stage_prompt("extract_plan")) == 1
    assert len(asked) == 2 + len(metrics)
    assert all(r.metadata["task"] == TASK["task"] for r in results.values())
    assert results["plan_quality"].metadata["stage_names"] == ["extract_task", "extract_plan", "plan_quality"]
    assert sum(r.metadata["requests"] for r in results.values()) == len(asked)  # each request counted once
