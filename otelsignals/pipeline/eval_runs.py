"""On-demand evaluation runs (``POST /v1/eval-runs``): session and judge metrics over chosen sessions.

A run is a JSON document in the shared store, written when it starts and again when it ends, so its
result survives a restart and any replica sharing the store can answer ``GET /v1/eval-runs/{id}``.
A run that was still going when its process stopped is reported ``interrupted``: its process
writes it again every RUN_HEARTBEAT_S while it goes (``heartbeat_at``), and a replica that does not
run it calls it interrupted only once that is more than RUN_STALE_S old (before, every other
replica called a running run interrupted at once).

With ``signals.snippets: false`` the judge's words (reasons, quoted tasks and plans, error texts)
are withheld before the run is stored or served: they may quote the conversation. Scores, verdicts,
counts and the judge's bookkeeping stay.

Retention: each time a run is written (it starts, it ends), runs last written more than
``evals.runs_max_age`` ago and then the oldest beyond ``evals.runs_max_count`` are removed from the
store (the same on SQLite, Redis and PostgreSQL), counted in
``otelsignals_eval_runs_removed_total{reason="age"|"count"}``. A run past its age is not served
even before the next write removes it.

    {"session_ids": ["sess-1"], "metrics": ["agent_reliability", "task_completion"],
     "signal_weights": {"tool_correctness": 1.0}, "model": "openai/gpt-4o-mini"}

A run takes one of ``session_ids``, ``filter`` (the listing's filters, evaluated on the conversation
index's matches) or ``trace_ids``: a trace-level run gives, per trace, the per-trace metrics the
sidecar recorded for it and the judge metrics of the conversation as it stood after that trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import orjson
from prometheus_client import CollectorRegistry, Counter

from otelsignals.config import EvalsConfig
from otelsignals.evals.judge import METRICS as JUDGE_METRICS
from otelsignals.evals.judge import Judge, JudgeConfig
from otelsignals.evals.session_metrics import (
    DEFAULT_WEIGHTS,
    MetricResult,
    TraceSignals,
    agent_consistency,
    agent_reliability,
)
from otelsignals.model import Conversation, Message, Role, ToolCall, ToolResult
from otelsignals.pipeline.listing import listing_request
from otelsignals.pipeline.llm_endpoints import ChatCompletions
from otelsignals.pipeline.sessions import SessionStore
from otelsignals.stores import ReputationStore
from otelsignals.stores.conversation_index import (
    ConversationFilter,
    ConversationIndex,
    IndexedConversation,
    is_trace_id,
)

logger = logging.getLogger("otelsignals.eval_runs")

KIND = "eval_run"
RUN_HEARTBEAT_S = 10.0
RUN_STALE_S = 60.0
SESSION_METRICS = {"agent_reliability": agent_reliability, "agent_consistency": agent_consistency}
# The per-trace metrics the sidecar computed as the traces arrived, reported per trace with their mean.
TRACE_METRICS = ("coherence", "loop_detection")
ALL_METRICS = (*SESSION_METRICS, *TRACE_METRICS, *JUDGE_METRICS)
TRACE_RUN_METRICS = (*TRACE_METRICS, *JUDGE_METRICS)


T = TypeVar("T")
# Judge result fields that never carry conversation text (enumerations, names of metrics and stages).
_NAMES_ONLY = frozenset(
    {
        "name",
        "source",
        "status",
        "model",
        "provider",
        "error_kind",
        "stage_names",
        "verdict",
        "tool",
    }
)


DEFAULT_FILTER_LIMIT = 100  # conversations a filtered run evaluates, the highest priority first
MAX_FILTER_LIMIT = 500
MAX_RUN_TARGETS = 500  # session or trace ids one run may name


class EvalRunError(ValueError):
    """A run request that cannot be run; the message says which field and why."""


def withhold_text(value: Any, key: str = "") -> Any:
    """``value`` with every free text replaced by its length (numbers, booleans and names stay)."""
    if isinstance(value, dict):
        return {k: withhold_text(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [withhold_text(v, key) for v in value]
    if isinstance(value, str) and key not in _NAMES_ONLY:
        return f"[{len(value)} characters withheld: signals.snippets is off]"
    return value


async def _read_directly(reader: Callable[[], T]) -> T:
    return reader()


def _id_list(body: dict[str, Any], field_name: str) -> list[str] | None:
    ids = body.get(field_name)
    if ids is not None and (
        not isinstance(ids, list) or not ids or not all(isinstance(s, str) and s for s in ids)
    ):
        raise EvalRunError(f"{field_name}: a non-empty list of ids is required")
    if ids is not None and len(ids) > MAX_RUN_TARGETS:  # each costs lookups and judge calls
        raise EvalRunError(f"{field_name}: at most {MAX_RUN_TARGETS} in one run")
    return ids


def parse_request(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise EvalRunError("the body must be a JSON object")
    sessions, traces = _id_list(body, "session_ids"), _id_list(body, "trace_ids")
    conditions = body.get("filter")
    if sum(given is not None for given in (sessions, traces, conditions)) != 1:
        raise EvalRunError("give one of session_ids (a list), filter (the listing's filters) or trace_ids")
    if traces is not None and not all(is_trace_id(t) for t in traces):
        raise EvalRunError("trace_ids: trace ids are 32 lower-case hex digits, as OTLP/JSON writes them")
    if conditions is not None:
        filter_of(conditions)  # refused now rather than when the run starts
    limit = body.get("limit", DEFAULT_FILTER_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_FILTER_LIMIT:
        raise EvalRunError(f"limit: a whole number from 1 to {MAX_FILTER_LIMIT}")
    allowed = TRACE_RUN_METRICS if traces is not None else ALL_METRICS
    metrics = body.get("metrics", list(TRACE_METRICS if traces is not None else SESSION_METRICS))
    if not isinstance(metrics, list) or not metrics or any(m not in allowed for m in metrics):
        kind = " (a trace-level run has no session metrics)" if traces is not None else ""
        raise EvalRunError(f"metrics: a non-empty list of {', '.join(allowed)}{kind}")
    weights = body.get("signal_weights", {})
    if not isinstance(weights, dict) or any(
        k not in DEFAULT_WEIGHTS or isinstance(v, bool) or not isinstance(v, int | float) or v < 0
        for k, v in weights.items()
    ):
        raise EvalRunError(f"signal_weights: non-negative numbers for {', '.join(DEFAULT_WEIGHTS)}")
    model = body.get("model")
    if model is not None and (not isinstance(model, str) or not all(model.partition("/")[::2])):
        raise EvalRunError('model: "provider/model", e.g. "openai/gpt-4o-mini"')
    request: dict[str, Any] = {
        "session_ids": sessions,
        **({"trace_ids": traces} if traces is not None else {}),
        "metrics": metrics,
        "signal_weights": weights,
        "model": model,
    }
    if conditions is not None:
        request |= {"filter": conditions, "limit": limit}
    return request


def filter_of(conditions: Any) -> ConversationFilter:
    """The listing's filters, given as a JSON object (``{"quality": ["severe", "poor"], "flagged":
    true, "signal": "execution.failure", "since": "2026-11-24T00:00:00Z", …}``)."""
    if not isinstance(conditions, dict):
        raise EvalRunError("filter: an object of the listing's filters (quality, flagged, signal, agent, …)")
    as_query = {str(key): _query_value(value) for key, value in conditions.items()}
    if {"sort", "limit", "cursor"} & as_query.keys():
        raise EvalRunError("filter: sort, limit and cursor are not filters (limit goes beside filter)")
    try:
        found, _, _, _ = listing_request(as_query)
    except ValueError as exc:
        raise EvalRunError(f"filter: {exc}") from None
    return found


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and all(_scalar(v) for v in value):
        return ",".join(str(v) for v in value)
    if _scalar(value):
        return str(value)
    raise EvalRunError(f"filter: a value is a string, number, true/false or list of strings, got {value!r}")


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


class EvalRuns:
    def __init__(
        self,
        store: ReputationStore,
        sessions: SessionStore,
        evals: EvalsConfig,
        registry: CollectorRegistry | None = None,
        show_content: bool = True,
        read_state: Callable[[Callable[[], Any]], Awaitable[Any]] = _read_directly,
        index: ConversationIndex | None = None,
    ) -> None:
        self.store = store
        self.index = index
        self.sessions = sessions
        self.evals = evals
        self.show_content = show_content
        # How to read a session safely: the pipeline's sessions are changed on its analysis thread.
        self._read_state = read_state
        self._running: dict[str, asyncio.Task[None]] = {}
        # The pipeline's registry serves it on /metrics; without one the count is still kept.
        self.removed = Counter(
            "otelsignals_eval_runs_removed",
            "Eval-run documents removed from the store by retention (evals.runs_max_age, runs_max_count).",
            ["reason"],
            registry=registry if registry is not None else CollectorRegistry(),
        )

    async def start(self, body: Any) -> dict[str, Any]:
        request = parse_request(body)
        judged = [m for m in request["metrics"] if m in JUDGE_METRICS]
        if judged and not self.evals.judge_url:
            raise EvalRunError(f"metrics {judged} need an LLM judge: set evals.judge_url")
        if "filter" in request:
            if self.index is None:
                raise EvalRunError("filter: needs the conversation index (index.enabled)")
            request["session_ids"] = await asyncio.to_thread(
                self._matching, filter_of(request["filter"]), request["limit"]
            )
        run: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "status": "running",
            "request": request,
            "created_at": time.time(),
        }
        await self._save(run)
        await self.prune()
        self._running[run["id"]] = asyncio.create_task(self._run(run), name=f"eval-run-{run['id']}")
        return run

    def _matching(self, conditions: ConversationFilter, limit: int) -> list[str]:
        assert self.index is not None
        keys: list[str] = []
        cursor = None
        while len(keys) < limit:
            page = self.index.query(conditions, "-priority", min(limit - len(keys), 200), cursor)
            keys += [item.key for item in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
        return keys

    async def list(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest runs, without their results: id, status, times, request."""
        keys = await asyncio.to_thread(self.store.document_keys, KIND, limit)
        runs = []
        for key in keys:
            run = await self.get(key)
            if run is not None:
                run.pop("results", None)
                runs.append(run)
        return runs

    async def get(self, run_id: str) -> dict[str, Any] | None:
        body = await asyncio.to_thread(self.store.load_document, KIND, run_id)
        if body is None:
            return None
        run = orjson.loads(body)
        last_written = run.get("finished_at") or run.get("created_at") or 0.0
        if run_id not in self._running and time.time() - last_written > self.evals.runs_max_age:
            await self.prune()
            return None
        if run["status"] == "running" and run_id not in self._running:
            alive_at = run.get("heartbeat_at") or run.get("created_at") or 0.0
            if time.time() - alive_at > RUN_STALE_S:
                run["status"] = "interrupted"  # its process stopped before it ended
        return run

    async def prune(self) -> tuple[int, int]:
        """Apply the retention rules now; returns (removed by age, removed by count)."""
        try:
            by_age, by_count = await asyncio.to_thread(
                self.store.prune_documents, KIND, self.evals.runs_max_age, self.evals.runs_max_count
            )
        except Exception:  # retention is housekeeping: a store hiccup must not fail the run
            logger.warning("removing old eval runs from the store failed", exc_info=True)
            return 0, 0
        if by_age:
            self.removed.labels("age").inc(by_age)
        if by_count:
            self.removed.labels("count").inc(by_count)
        return by_age, by_count

    async def stop(self) -> None:
        for task in self._running.values():
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def _run(self, run: dict[str, Any]) -> None:
        request = run["request"]
        ended = asyncio.Event()
        heartbeat = asyncio.create_task(self._heartbeat(run, ended), name=f"eval-run-heartbeat-{run['id']}")
        try:
            if "trace_ids" in request:
                results = {tid: await self._evaluate_trace(tid, request) for tid in request["trace_ids"]}
            else:
                results = {sid: await self._evaluate(sid, request) for sid in request["session_ids"]}
            run |= {"status": "done", "results": results, "finished_at": time.time()}
        except Exception as exc:  # the run fails as a whole, and says why
            logger.debug("eval run failed", exc_info=True)
            error = f"{type(exc).__name__}: {exc}" if self.show_content else type(exc).__name__
            run |= {"status": "error", "error": error, "finished_at": time.time()}
        finally:
            # Stopped, not cancelled: a beat being written finishes first, so the final write lands
            # last (a cancelled beat's write, still in its thread, could land after it: "running").
            ended.set()
            await asyncio.gather(heartbeat, return_exceptions=True)
            await self._save(run)
            self._running.pop(run["id"], None)
            await self.prune()

    async def _heartbeat(self, run: dict[str, Any], ended: asyncio.Event) -> None:
        """Writes the running run again every RUN_HEARTBEAT_S until ``ended``: other replicas tell
        it from one whose process stopped."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ended.wait(), RUN_HEARTBEAT_S)
            if ended.is_set():
                return
            try:
                await self._save({**run, "heartbeat_at": time.time()})
            except Exception:  # a store hiccup: the next beat tries again
                logger.debug("writing an eval run's heartbeat failed", exc_info=True)

    async def _evaluate(self, session_id: str, request: dict[str, Any]) -> dict[str, Any]:
        def snapshot() -> tuple[list[Any], Conversation] | None:
            state = self.sessions.get(session_id)
            if state is None:
                return None
            conversation = state.conversation
            copied = dataclasses.replace(
                conversation, messages=list(conversation.messages), llm_calls=list(conversation.llm_calls)
            )
            return list(state.trace_signals), copied

        found = await self._read_state(snapshot)
        if found is None and self.index is not None:
            indexed = await asyncio.to_thread(self.index.get, session_id)
            found = from_index(indexed) if indexed is not None else None
        if found is None:
            return {"error": f"session {session_id!r} is neither open nor indexed"}
        traces, conversation = found
        judged = [m for m in request["metrics"] if m in JUDGE_METRICS]
        if judged and not conversation.messages:
            return {
                "error": f"session {session_id!r} was closed and indexed without its text (index.content)"
            }
        results: dict[str, Any] = {}
        for name in request["metrics"]:
            if name in SESSION_METRICS:
                metric = SESSION_METRICS[name](
                    traces, request["signal_weights"], self.evals.threshold_for(name)
                )
                results[name] = metric.as_dict()
            elif name in TRACE_METRICS:
                results[name] = per_trace_result(name, traces, self.evals.threshold_for(name)).as_dict()
        if judged:
            results |= await self._judge(conversation, judged, request["model"])
        return results

    async def _judge(
        self, conversation: Conversation, metrics: Sequence[str], model: str | None
    ) -> dict[str, Any]:
        config = JudgeConfig(
            model=self.evals.judge_model,
            provider_model=model or None,
            threshold=self.evals.threshold,
            thresholds=dict(self.evals.thresholds),
        )
        async with ChatCompletions(self.evals.judge_url, self.evals.judge_api_key) as complete:
            verdicts = await Judge(config, complete).evaluate(conversation, metrics)
        results: dict[str, Any] = {}
        for name, verdict in verdicts.items():
            result = verdict.as_dict()
            results[name] = result if self.show_content else withhold_text(result)
        return results

    async def _evaluate_trace(self, trace_id: str, request: dict[str, Any]) -> dict[str, Any]:
        """One trace: the per-trace metrics recorded for it, and the judge metrics of its
        conversation as it stood after it (open conversations only: the index keeps no per-trace
        history of the messages)."""

        def open_trace() -> tuple[str, TraceSignals | None, Conversation | None] | None:
            wanted = bytes.fromhex(trace_id)  # (checked: 32 hex digits) the records key traces by their bytes
            for state in self.sessions:
                if wanted in state.trace_message_ends:
                    recorded = next((t for t in state.trace_signals if t.trace_id == trace_id), None)
                    return state.conversation.key, recorded, state.conversation_after(wanted)
            return None

        found = await self._read_state(open_trace)
        if found is None and self.index is not None:
            indexed = await asyncio.to_thread(self.index.find_trace, trace_id)
            if indexed is not None:
                traces, _ = from_index(indexed)
                found = indexed.key, next((t for t in traces if t.trace_id == trace_id), None), None
        if found is None:
            return {"error": f"trace {trace_id!r} is in no open conversation and not in the index"}
        session_id, recorded, conversation = found
        results: dict[str, Any] = {"session_id": session_id}
        for name in request["metrics"]:
            if name in TRACE_METRICS:
                results[name] = trace_result(name, trace_id, recorded, self.evals.threshold_for(name))
        judged = [m for m in request["metrics"] if m in JUDGE_METRICS]
        if judged and conversation is None:
            results["error"] = (
                f"the judge metrics need the conversation as it stood after trace {trace_id!r}, "
                "which only an open conversation keeps"
            )
        elif judged and conversation is not None:
            results |= await self._judge(conversation, judged, request["model"])
        return results

    async def _save(self, run: dict[str, Any]) -> None:
        await asyncio.to_thread(self.store.save_document, KIND, run["id"], orjson.dumps(run).decode())


def from_index(item: IndexedConversation) -> tuple[list[TraceSignals], Conversation]:
    """A closed conversation as the index kept it: its per-trace metrics, and its messages when the
    text was kept (``index.content``), else none."""
    traces = [TraceSignals(**trace) for trace in item.detail.get("trace_metrics", [])]
    messages = [_message(entry) for entry in item.detail.get("messages") or []]
    return traces, Conversation(item.key, messages=messages, agent_id=item.agent)


def _message(entry: dict[str, Any]) -> Message:
    result = entry.get("tool_result")
    return Message(
        Role(entry["role"]),
        entry.get("content"),
        tool_calls=[
            ToolCall(c["name"], c.get("arguments"), c.get("id")) for c in entry.get("tool_calls", [])
        ],
        tool_result=(
            ToolResult(
                call_id=result.get("call_id"),
                name=result.get("name"),
                content=entry.get("content"),
                is_error=bool(result.get("is_error")),
                error_type=result.get("error_type"),
            )
            if result is not None
            else None
        ),
    )


def trace_result(name: str, trace_id: str, recorded: TraceSignals | None, threshold: float) -> dict[str, Any]:
    """A per-trace metric of one trace, as the sidecar recorded it when the trace arrived."""
    value = getattr(recorded, name) if recorded is not None else None
    if recorded is None or value is None:
        return {"error": f"no {name} was recorded for trace {trace_id!r}"}
    source = recorded.sources.get(name, "embedding")
    reason = f"{name} {value:.2f}, recorded when the trace was analysed."
    metadata = {"trace_id": trace_id, "source": source}
    return MetricResult(name, value, value >= threshold, reason, metadata, threshold).as_dict()


def per_trace_result(name: str, traces: list[TraceSignals], threshold: float) -> MetricResult:
    """A per-trace metric over a session: its value per trace and their mean (the score)."""
    values = {trace.trace_id: getattr(trace, name) for trace in traces if getattr(trace, name) is not None}
    if not values:
        reason = f"No trace of the session has a {name} value."
        return MetricResult(name, 1.0, True, reason, {"per_trace": {}, "traces_evaluated": 0}, threshold)
    mean = math.fsum(values.values()) / len(values)
    worst = min(values, key=lambda trace_id: values[trace_id])
    reason = f"Mean {name} {mean:.2f} over {len(values)} traces; lowest {values[worst]:.2f} (trace {worst})."
    metadata = {"per_trace": values, "traces_evaluated": len(values)}
    return MetricResult(name, mean, mean >= threshold, reason, metadata, threshold)
