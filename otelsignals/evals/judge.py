"""LLM-judge metrics (SPEC §6) over any OpenAI-compatible chat completions endpoint.

    judge = Judge(JudgeConfig(model="gpt-4o-mini"), complete)
    result = await judge.task_completion(conversation)
    judge.stats.as_dict()  # requests, retries, errors, tokens, latency

The judge does no network I/O itself: ``complete`` (a `Complete`) sends one chat completion request
body and returns the decoded answer with what it took on the wire. The pipeline builds it on its
HTTP client (pipeline/llm_endpoints.py `ChatCompletions`).

Metrics are STAGED: each stage is one chat completion with a system prompt from
``prompts/<stage>.txt`` (``$schema`` in it is replaced by the stage's JSON schema) and a user message
holding the rendered conversation and the earlier stages' findings. Every request asks for
``response_format={"type": "json_object"}``; the reply is parsed and validated against
``prompts/<stage>.schema.json`` (a small validator for the schema subset those files use, see
`validate`).

=========================  =============================================  ==============================
metric                     stages                                         no-model shortcut
=========================  =============================================  ==============================
task_completion            extract_task → task_completion                 empty task → 1.0
tool_correctness           select_tools → tool_correctness                no calls, no tools → 1.0
argument_correctness       extract_user_input → argument_correctness      no tool calls → 1.0
                           (one verdict per call) → argument_reason
step_efficiency            extract_task → step_efficiency                 empty task → 1.0
confidence                 confidence                                     —
plan_adherence             extract_task → extract_plan → plan_adherence   no plan found → 1.0
plan_quality               extract_task → extract_plan → plan_quality     no plan found → 1.0
=========================  =============================================  ==============================

Errors. Transport failures (timeouts, connection errors, HTTP 429 and 5xx) are retried by
``complete``, which raises `CompletionError` when it gives up or the endpoint refuses. Malformed
judge output (not JSON, not matching the schema — which includes a score outside [0, 1] — or
inconsistent, e.g. a missing verdict) gets ONE corrective retry: the bad reply and a message naming
the problem (``prompts/corrective.txt``) are appended to the conversation. When that
fails too, or the transport gives up, or the endpoint answers another 4xx, the metric is ERRORED:

    result.score is None, result.passed is False,
    result.metadata["status"] == "error", result.metadata["error"] == "<what went wrong>"

(`is_errored(result)` tests it). No score is ever made up. A successful result has
``metadata["status"] == "ok"``. Every result carries ``metadata["source"] = "llm_judge"``, the model
sent, the stages run, the request count and the prompt/completion tokens and latency it used.

Without a judge, `proxy_tool_correctness` and `proxy_confidence` compute model-free stand-ins
(``metadata["source"] = "proxy"``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from string import Template
from typing import Any, Literal, Protocol

from otelsignals.evals.judge_prompts import (
    Stage,
    args_text,
    load_stage,
    parse_json_reply,
    prompts_root,
    render_tools,
    render_transcript,
    section,
    tool_calls_of,
    validate,
)
from otelsignals.evals.session_metrics import MetricResult
from otelsignals.model import Conversation

__all__ = [
    "METRICS",
    "Attempts",
    "Complete",
    "Completion",
    "CompletionError",
    "Judge",
    "JudgeConfig",
    "JudgeError",
    "JudgeStats",
    "is_errored",
]

METRICS: tuple[str, ...] = (
    "task_completion",
    "tool_correctness",
    "argument_correctness",
    "step_efficiency",
    "confidence",
    "plan_adherence",
    "plan_quality",
)

JUDGE_SOURCE = "llm_judge"


# ---- configuration and counters ------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeConfig:
    """Which judge model to ask and how to read its answers (where it lives is ``complete``'s business).

    ``provider_model`` ("openai/gpt-4o-mini") overrides ``model``: the part after the first slash is
    sent as ``model``, the part before is recorded as the provider. ``max_concurrency`` bounds
    simultaneous completions (each with its transport retries) across all metrics.
    """

    model: str
    provider_model: str | None = None
    max_concurrency: int = 4
    temperature: float = 0.0
    threshold: float = 0.5  # passed = score >= threshold...
    thresholds: dict[str, float] = field(default_factory=dict)  # ...or the metric's own
    max_transcript_chars: int = 60_000  # older messages are elided beyond this
    max_message_chars: int = 4_000  # per message
    prompts_dir: str | None = None  # override the packaged prompts/

    def __post_init__(self) -> None:
        if not (self.model or self.provider_model):
            raise ValueError("judge model (or provider_model) is required")
        if self.provider_model is not None and not self.provider_model.partition("/")[2]:
            raise ValueError(f"provider_model must look like 'provider/model', got {self.provider_model!r}")
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")

    @property
    def request_model(self) -> str:
        """The ``model`` sent on the wire."""
        if self.provider_model:
            return self.provider_model.partition("/")[2]
        return self.model

    @property
    def provider(self) -> str | None:
        return self.provider_model.partition("/")[0] if self.provider_model else None


@dataclass
class JudgeStats:
    """Cumulative counters of one Judge (all attempts, all metrics)."""

    requests: int = 0  # HTTP attempts sent
    retries: int = 0  # transport retries (attempts after the first of a completion)
    repairs: int = 0  # corrective retries after malformed output
    http_errors: int = 0  # attempts that failed (timeout, connection, non-2xx)
    malformed: int = 0  # replies that were not valid JSON for the stage's schema
    metrics: int = 0  # metric evaluations finished (ok or errored)
    errors: int = 0  # metric evaluations that ended errored
    prompt_tokens: int = 0  # from the responses' usage
    completion_tokens: int = 0
    total_latency_s: float = 0.0  # summed round-trip time of all attempts
    in_flight: int = 0  # completions under way (each holds a max_concurrency slot, retries included)
    max_in_flight: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def is_errored(result: MetricResult) -> bool:
    return result.metadata.get("status") == "error"


class JudgeError(Exception):
    """A metric could not be judged; ``kind``: "transport", "http", "malformed" or "empty"."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


# ---- what the judge is given to reach its model --------------------------------------------------


@dataclass(frozen=True)
class Attempts:
    """What one completion took on the wire: requests sent, how many of them failed (timeout,
    connection error, non-2xx), and their summed round-trip time."""

    sent: int
    failed: int
    latency_s: float


@dataclass(frozen=True)
class Completion:
    """A chat completion's answer: the decoded response body ({} when it was not a JSON object)."""

    payload: dict[str, Any]
    attempts: Attempts


class CompletionError(JudgeError):
    """No completion: kind "transport" when the retries ran out, "http" when the endpoint refused."""

    def __init__(self, kind: Literal["transport", "http"], message: str, attempts: Attempts):
        super().__init__(kind, message)
        self.attempts = attempts


class Complete(Protocol):
    """Sends one chat completion request body, retrying transport failures; raises `CompletionError`."""

    async def __call__(self, body: dict[str, Any]) -> Completion: ...


# ---- the judge -----------------------------------------------------------------------------------


@dataclass
class _Run:
    """What one metric evaluation used."""

    stages: list[str] = field(default_factory=list)
    requests: int = 0
    retries: int = 0
    repairs: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0


_Outcome = tuple[float, str, dict[str, Any]]

# Stages that only extract facts from the transcript (no verdict): within one `Judge.evaluate`, the
# metrics that need the same one with the same input share its answer, so that they work from one
# task and one plan, and pay for them once.
EXTRACTION_STAGES = frozenset({"extract_task", "extract_plan", "extract_user_input"})
_SHARED_STAGES: contextvars.ContextVar[dict[tuple[str, str], asyncio.Future[dict[str, Any]]] | None] = (
    contextvars.ContextVar("otelsignals_judge_shared_stages", default=None)
)


class Judge:
    """LLM-judge metrics, asking the model through ``complete``."""

    def __init__(self, config: JudgeConfig, complete: Complete):
        self.config = config
        self._complete = complete
        self._stats = JudgeStats()
        self._semaphore = asyncio.Semaphore(config.max_concurrency)
        self._stages: dict[str, Stage] = {}
        root = prompts_root(config.prompts_dir)
        self._corrective = Template((root / "corrective.txt").read_text(encoding="utf-8"))

    @property
    def stats(self) -> JudgeStats:
        return self._stats

    def stage(self, name: str) -> Stage:
        if name not in self._stages:
            self._stages[name] = load_stage(name, self.config.prompts_dir)
        return self._stages[name]

    # ---- transport -------------------------------------------------------------------------------

    async def _post(self, body: dict[str, Any], run: _Run) -> dict[str, Any]:
        """One completion (with the transport's retries); returns the decoded response body."""
        stats = self._stats
        async with self._semaphore:
            stats.in_flight += 1
            stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
            try:
                completion = await self._complete(body)
            except CompletionError as exc:
                self._count(exc.attempts, run)
                raise
            finally:
                stats.in_flight -= 1
        self._count(completion.attempts, run)
        usage = completion.payload.get("usage") or {}
        prompt, completion_tokens = _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
        stats.prompt_tokens += prompt
        stats.completion_tokens += completion_tokens
        run.prompt_tokens += prompt
        run.completion_tokens += completion_tokens
        return completion.payload

    def _count(self, attempts: Attempts, run: _Run) -> None:
        stats = self._stats
        retries = max(0, attempts.sent - 1)
        stats.requests += attempts.sent
        stats.retries += retries
        stats.http_errors += attempts.failed
        stats.total_latency_s += attempts.latency_s
        run.requests += attempts.sent
        run.retries += retries
        run.latency_s += attempts.latency_s

    # ---- stages ----------------------------------------------------------------------------------

    async def _run_stage(
        self,
        name: str,
        user: str,
        run: _Run,
        check: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> dict[str, Any]:
        """One stage; an extraction stage that several metrics of one `evaluate` ask with the same
        input is asked once, and they all work from its one answer."""
        run.stages.append(name)
        shared = _SHARED_STAGES.get()
        if shared is None or name not in EXTRACTION_STAGES:
            return await self._ask_stage(name, user, run, check)
        answer = shared.get((name, user))
        if answer is None:  # the first metric to need it asks, counting the request in its own run
            answer = shared[name, user] = asyncio.ensure_future(self._ask_stage(name, user, run, check))
        return dict(await asyncio.shield(answer))

    async def _ask_stage(
        self,
        name: str,
        user: str,
        run: _Run,
        check: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> dict[str, Any]:
        """One stage: request, parse, validate; one corrective retry on malformed output."""
        stage = self.stage(name)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": stage.prompt},
            {"role": "user", "content": user},
        ]
        for attempt in range(2):
            body = {
                "model": self.config.request_model,
                "messages": messages,
                "temperature": self.config.temperature,
                "response_format": {"type": "json_object"},
            }
            payload = await self._post(body, run)
            content = _content(payload)
            try:
                parsed = parse_json_reply(content)
                errors = validate(parsed, stage.schema)
                if errors:
                    raise ValueError("it does not match the schema: " + "; ".join(errors[:5]))
                problem = check(parsed) if check else None
                if problem:
                    raise ValueError(problem)
                return parsed
            except ValueError as exc:
                self._stats.malformed += 1
                if attempt == 1:
                    raise JudgeError(
                        "malformed", f"stage {name}: {exc} (after one corrective retry)"
                    ) from None
                self._stats.repairs += 1
                run.repairs += 1
                messages = [
                    *messages,
                    {"role": "assistant", "content": content if isinstance(content, str) else ""},
                    {
                        "role": "user",
                        "content": self._corrective.substitute(
                            error=str(exc), schema=json.dumps(stage.schema, indent=2)
                        ),
                    },
                ]
        raise AssertionError("unreachable")  # pragma: no cover

    async def _evaluate(self, name: str, body: Callable[[_Run], Awaitable[_Outcome]]) -> MetricResult:
        run = _Run()
        started = time.perf_counter()
        try:
            score, reason, extra = await body(run)
            error: JudgeError | None = None
        except JudgeError as exc:
            error = exc
        metadata: dict[str, Any] = {
            "source": JUDGE_SOURCE,
            "status": "ok" if error is None else "error",
            "model": self.config.request_model,
            "provider": self.config.provider,
            "stages": len(run.stages),
            "stage_names": list(run.stages),
            "requests": run.requests,
            "retries": run.retries,
            "repairs": run.repairs,
            "prompt_tokens": run.prompt_tokens,
            "completion_tokens": run.completion_tokens,
            "latency_s": round(run.latency_s, 6),
            "elapsed_s": round(time.perf_counter() - started, 6),
        }
        self._stats.metrics += 1
        if error is not None:
            self._stats.errors += 1
            metadata.update(error=str(error), error_kind=error.kind)
            threshold = self.config.thresholds.get(name, self.config.threshold)
            return MetricResult(name, None, False, f"Judge error: {error}", metadata, threshold)  # type: ignore[arg-type]
        score = min(1.0, max(0.0, float(score)))
        metadata.update(extra)
        threshold = self.config.thresholds.get(name, self.config.threshold)
        return MetricResult(name, score, score >= threshold, reason, metadata, threshold)

    def _transcript(self, conversation: Conversation, *, without_tools: bool = False) -> str:
        return render_transcript(
            conversation,
            self.config.max_transcript_chars,
            self.config.max_message_chars,
            without_tools=without_tools,
        )

    async def _task(self, conversation: Conversation, run: _Run) -> dict[str, Any]:
        return await self._run_stage(
            "extract_task", section("Conversation", self._transcript(conversation)), run
        )

    async def _plan(self, conversation: Conversation, task: str, run: _Run) -> tuple[list[str], str] | None:
        """(the plan's steps, "explicit" or "implied"), or None when the agent followed none."""
        user = "\n\n".join(
            [
                section("Conversation", self._transcript(conversation)),
                section("Task", task or "(none stated)"),
            ]
        )
        found = await self._run_stage("extract_plan", user, run)
        steps = [s.strip() for s in found["plan"] if s.strip()]
        return (steps, found.get("plan_type", "explicit")) if found["has_plan"] and steps else None

    # ---- metrics ---------------------------------------------------------------------------------

    async def task_completion(self, conversation: Conversation) -> MetricResult:
        """Stage 1 extracts the user's task and the outcome; stage 2 gives the verdict and score."""

        async def body(run: _Run) -> _Outcome:
            if not conversation.messages:
                return 1.0, "No messages, so no task to complete.", {"task": ""}
            found = await self._task(conversation, run)
            task = found["task"].strip()
            if not task:
                return 1.0, "No task found in the conversation.", {"task": "", "outcome": found["outcome"]}
            user = "\n\n".join(
                [
                    section("Conversation", self._transcript(conversation)),
                    section("Task", task),
                    section("Outcome", found["outcome"]),
                ]
            )
            verdict = await self._run_stage("task_completion", user, run)
            # The reference's shape: the verdict is the score, a number in [0, 1], with its reason.
            meta = {"task": task, "outcome": found["outcome"], "verdict": verdict["verdict"]}
            return verdict["verdict"], verdict["reason"], meta

        return await self._evaluate("task_completion", body)

    async def tool_correctness(
        self, conversation: Conversation, available_tools: Iterable[Any] | Mapping[str, str] | None = None
    ) -> MetricResult:
        """Were the right tools chosen? ``available_tools``: names, OpenAI tool dicts or {name: text}."""
        if available_tools is None and conversation.available_tools:
            available_tools = list(conversation.available_tools.values())  # as the spans listed them
        tools = render_tools(available_tools) if available_tools is not None else []

        async def body(run: _Run) -> _Outcome:
            calls = tool_calls_of(conversation)
            if not calls and not tools:
                return 1.0, "No tool calls and no tools available.", {"tool_calls": 0}
            transcript = section("Conversation", self._transcript(conversation))
            available = section("Available tools", "\n".join(tools) if tools else "(not known)")
            # Stage 1 decides what the request needed without seeing the calls (nor their results),
            # so that stage 2 compares the calls against an expectation rather than rationalising them.
            said = section("Conversation", self._transcript(conversation, without_tools=True))
            selection = await self._run_stage("select_tools", "\n\n".join([said, available]), run)
            needed = [name.strip() for name in selection["needed_tools"] if name.strip()]
            listed = "\n".join(f"- [{n}] {c.name}({args_text(c.arguments)})" for n, c in calls)
            user = "\n\n".join(
                [
                    transcript,
                    available,
                    section("User input", selection["user_input"].strip() or "(none stated)"),
                    section("Needed tools", "\n".join(f"- {name}" for name in needed) or "(none)"),
                    section("Tool calls made", listed or "(none)"),
                ]
            )
            verdict = await self._run_stage("tool_correctness", user, run)
            meta = {
                "tool_calls": len(calls),
                "user_input": selection["user_input"],
                "needed_tools": needed,
                "unnecessary_tools": verdict["unnecessary_tools"],
                "missing_tools": verdict["missing_tools"],
            }
            return verdict["score"], verdict["reason"], meta

        return await self._evaluate("tool_correctness", body)

    async def argument_correctness(self, conversation: Conversation) -> MetricResult:
        """Stage 1 states the user's request; stage 2 gives one verdict per tool call; stage 3 explains
        the score (correct verdicts / tool calls; 1.0, no request, with no calls)."""

        async def body(run: _Run) -> _Outcome:
            calls = tool_calls_of(conversation)
            if not calls:
                return 1.0, "No tool calls to judge.", {"tool_calls": 0, "verdicts": [], "user_input": ""}
            transcript = section("Conversation", self._transcript(conversation))
            user_input = (await self._run_stage("extract_user_input", transcript, run))["user_input"]
            listed = "\n".join(
                f"{i}. {call.name}({args_text(call.arguments)}) (message {n})"
                for i, (n, call) in enumerate(calls, 1)
            )

            def check(reply: dict[str, Any]) -> str | None:
                indices = sorted(int(v["index"]) for v in reply["verdicts"])
                if indices != list(range(1, len(calls) + 1)):
                    return (
                        f"expected exactly one verdict for each tool call 1..{len(calls)}, "
                        f"got indices {indices}"
                    )
                return None

            request = section("User input", user_input.strip() or "(none stated)")
            user = "\n\n".join([transcript, request, section("Tool calls to judge", listed)])
            reply = await self._run_stage("argument_correctness", user, run, check)
            verdicts = [
                {
                    "index": int(v["index"]),
                    "tool": calls[int(v["index"]) - 1][1].name,
                    "verdict": v["verdict"],
                    "reason": v.get("reason", ""),
                }
                for v in sorted(reply["verdicts"], key=lambda v: int(v["index"]))
            ]
            correct = sum(1 for v in verdicts if v["verdict"] == "yes")
            judged = "\n".join(
                f"{v['index']}. {v['tool']}: {v['verdict']}" + (f" ({v['reason']})" if v["reason"] else "")
                for v in verdicts
            )
            explained = await self._run_stage(
                "argument_reason",
                "\n\n".join(
                    [request, section("Verdicts", judged), section("Score", f"{correct / len(calls):.2f}")]
                ),
                run,
            )
            meta = {
                "tool_calls": len(calls),
                "correct": correct,
                "user_input": user_input,
                "verdicts": verdicts,
            }
            return correct / len(calls), explained["reason"], meta

        return await self._evaluate("argument_correctness", body)

    async def step_efficiency(self, conversation: Conversation) -> MetricResult:
        """Stage 1 extracts the task; stage 2 judges how economically the steps pursued it."""

        async def body(run: _Run) -> _Outcome:
            if not conversation.messages:
                return 1.0, "No messages, so no steps to judge.", {"task": ""}
            found = await self._task(conversation, run)
            task = found["task"].strip()
            if not task:
                return 1.0, "No task found in the conversation.", {"task": ""}
            user = "\n\n".join(
                [section("Conversation", self._transcript(conversation)), section("Task", task)]
            )
            verdict = await self._run_stage("step_efficiency", user, run)
            meta = {"task": task, "redundant_steps": verdict["redundant_steps"]}
            return verdict["score"], verdict["reason"], meta

        return await self._evaluate("step_efficiency", body)

    async def confidence(self, conversation: Conversation) -> MetricResult:
        """How sure one can be that the final answer is right and accepted (single stage)."""

        async def body(run: _Run) -> _Outcome:
            if not conversation.messages:
                raise JudgeError("empty", "the conversation has no messages to judge")
            user = section("Conversation", self._transcript(conversation))
            verdict = await self._run_stage("confidence", user, run)
            meta: dict[str, Any] = {"concerns": verdict["concerns"]}
            if "criteria" in verdict:  # the reference's four: decisiveness, appropriateness, consistency,
                meta["criteria"] = verdict["criteria"]  # low-confidence indicators
            return verdict["score"], verdict["reason"], meta

        return await self._evaluate("confidence", body)

    async def _plan_metric(self, name: str, conversation: Conversation) -> MetricResult:
        async def body(run: _Run) -> _Outcome:
            if not conversation.messages:
                return 1.0, "No plan found in the conversation.", {"plan_found": False, "plan": []}
            # The task first, as the reference does: a plan is found, and judged, for that task.
            task = (await self._task(conversation, run))["task"].strip()
            found = await self._plan(conversation, task, run)
            if found is None:
                reason = "No plan found in the conversation."
                return 1.0, reason, {"plan_found": False, "plan": [], "task": task}
            plan, plan_type = found
            steps = "\n".join(f"{i}. {step}" for i, step in enumerate(plan, 1))
            user = "\n\n".join(
                [
                    section("Conversation", self._transcript(conversation)),
                    section("Task", task or "(none stated)"),
                    section("Plan", steps),
                ]
            )
            verdict = await self._run_stage(name, user, run)
            key = "deviations" if name == "plan_adherence" else "issues"
            meta = {"plan_found": True, "plan_type": plan_type, "plan": plan, "task": task, key: verdict[key]}
            return verdict["score"], verdict["reason"], meta

        return await self._evaluate(name, body)

    async def plan_adherence(self, conversation: Conversation) -> MetricResult:
        """Task, then the plan followed for it, then adherence (1.0 when there is no plan)."""
        return await self._plan_metric("plan_adherence", conversation)

    async def plan_quality(self, conversation: Conversation) -> MetricResult:
        """Task, then the plan followed for it, then its quality (1.0 when there is no plan)."""
        return await self._plan_metric("plan_quality", conversation)

    async def evaluate(
        self, conversation: Conversation, metrics: Iterable[str] = METRICS, **kwargs: Any
    ) -> dict[str, MetricResult]:
        """Several metrics concurrently (the semaphore still bounds the requests); the extraction
        stages they share (the task, the plan) are asked once."""
        names = list(metrics)
        unknown = [n for n in names if n not in METRICS]
        if unknown:
            raise ValueError(f"unknown judge metrics {unknown}; known: {', '.join(METRICS)}")
        calls = []
        for name in names:
            if name == "tool_correctness":
                calls.append(self.tool_correctness(conversation, kwargs.get("available_tools")))
            else:
                calls.append(getattr(self, name)(conversation))
        shared = _SHARED_STAGES.set({})  # the metrics' tasks, made by gather, inherit it
        try:
            return dict(zip(names, await asyncio.gather(*calls), strict=True))
        finally:
            _SHARED_STAGES.reset(shared)


def _content(payload: Mapping[str, Any]) -> Any:
    with contextlib.suppress(LookupError, TypeError, AttributeError):
        return payload["choices"][0]["message"]["content"]
    return None


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0
