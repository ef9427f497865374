"""The admin HTTP API: health, readiness, Prometheus metrics, tracked conversations, agent reputation.

``GET /v1/sessions/{id}`` shows a conversation as otelsignals reassembled it (messages, tool
results with their failures, signals so far, current score): the first thing to look at when a
span's enrichment surprises you. Message text is included only when ``signals.snippets`` is on;
with it off, messages, tool arguments, error messages and snippets are ``null`` and each signal's
``metadata`` is redacted as on spans (:func:`~otelsignals.signals.base.redact_metadata`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from otelsignals.config import EvalsConfig, SignalsConfig, UiConfig
from otelsignals.conversation import ConversationState
from otelsignals.evals.session_metrics import agent_consistency, agent_reliability
from otelsignals.model import Message
from otelsignals.pipeline.eval_runs import EvalRunError, EvalRuns
from otelsignals.pipeline.listing import listing_request, query_int, query_time
from otelsignals.pipeline.reputation_recorder import ReputationRecorder
from otelsignals.pipeline.sessions import SessionStore
from otelsignals.scoring import BASELINE_USER_TURNS, score
from otelsignals.signals.base import redact_metadata, redacted_metadata
from otelsignals.stores.conversation_index import MAX_BUCKETS, ConversationIndex
from otelsignals.telemetry import Telemetry


def admin_app(
    telemetry: Telemetry,
    is_ready: Callable[[], bool],
    sessions: SessionStore | None = None,
    show_content: bool = True,
    reputation: ReputationRecorder | None = None,
    auth_token: str = "",
    eval_runs: EvalRuns | None = None,
    read_state: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None,
    index: ConversationIndex | None = None,
    ui: UiConfig | None = None,
    signals: SignalsConfig | None = None,
    evals: EvalsConfig | None = None,
) -> web.Application:
    """``read_state`` runs a reader of the sessions where that is safe (the pipeline's analysis
    thread changes them); without it they are read directly. ``signals`` and ``evals``: the
    settings an open session is scored and its session metrics judged by, as on its spans."""
    api = AdminApi(
        telemetry,
        is_ready,
        sessions,
        show_content,
        reputation,
        auth_token,
        eval_runs,
        read_state,
        index,
        ui,
        signals or SignalsConfig(),
        evals or EvalsConfig(),
    )
    app = web.Application(middlewares=[json_routing_errors, api.bearer_token])
    app.router.add_post("/v1/eval-runs", api.start_eval_run)
    app.router.add_get("/v1/eval-runs", api.list_eval_runs)
    app.router.add_get("/v1/eval-runs/{run_id}", api.get_eval_run)
    app.router.add_get("/v1/reputation", api.reputation_list)
    app.router.add_get("/v1/reputation/{agent_id}", api.reputation_of)
    app.router.add_get("/healthz", api.healthz)
    app.router.add_get("/readyz", api.readyz)
    app.router.add_get("/metrics", api.metrics)
    app.router.add_get("/v1/sessions", api.list_sessions)
    app.router.add_get("/v1/timeline", api.timeline)
    if ui is not None and ui.enabled:
        app.router.add_get("/v1/ui", api.ui_settings)
        app.router.add_get("/ui", api.ui_page)
        app.router.add_get("/ui/{asset}", api.ui_asset)
    app.router.add_get("/v1/sessions/{session_id}", api.session)
    return app


@dataclasses.dataclass
class AdminApi:
    """The admin API's handlers over the pipeline's parts (any of them may be absent)."""

    telemetry: Telemetry
    is_ready: Callable[[], bool]
    sessions: SessionStore | None
    show_content: bool
    reputation: ReputationRecorder | None
    auth_token: str
    eval_runs: EvalRuns | None
    read_state: Callable[[Callable[[], Any]], Awaitable[Any]] | None
    index: ConversationIndex | None = None
    ui: UiConfig | None = None
    signals: SignalsConfig = dataclasses.field(default_factory=SignalsConfig)
    evals: EvalsConfig = dataclasses.field(default_factory=EvalsConfig)

    async def healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, _: web.Request) -> web.Response:
        if self.is_ready():
            return web.json_response({"status": "ready"})
        return web.json_response({"status": "not ready"}, status=503)

    async def metrics(self, _: web.Request) -> web.Response:
        # Off the event loop: collecting reads /proc and the allocator's free lists (milliseconds).
        body = await asyncio.to_thread(generate_latest, self.telemetry.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def session(self, request: web.Request) -> web.Response:
        key = request.match_info["session_id"]
        sessions = self.sessions

        def read() -> dict[str, Any] | None:
            state = sessions.get(key) if sessions is not None else None
            if state is None:
                return None
            return session_json(state, self.show_content, self.signals.baseline_user_turns, self.evals)

        found = await self.read_state(read) if self.read_state is not None else read()
        if found is None and self.index is not None:
            indexed = await asyncio.to_thread(self.index.get, key)
            if indexed is not None:
                row = indexed.to_json()
                found = {**(row if self.show_content else indexed_without_content(row)), "source": "index"}
        if found is None:
            return web.json_response({"error": f"no session {key!r} is open or indexed"}, status=404)
        return web.json_response(found)

    async def timeline(self, request: web.Request) -> web.Response:
        """Per time bucket, indexed conversations by quality and by category (the page's plots):
        ``since`` / ``until`` as in the listing (default: the last 24 hours), ``buckets`` (24)."""
        if self.index is None:
            return web.json_response(
                {"error": "the conversation index is disabled (index.enabled)"}, status=404
            )
        try:
            until = query_time(request.query, "until")
            until = time.time() if until is None else until
            since = query_time(request.query, "since")
            since = until - 86400.0 if since is None else since
            buckets = query_int(request.query, "buckets", 1, MAX_BUCKETS, default=24)
            found = await asyncio.to_thread(self.index.timeline, since, until, buckets)
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(found)

    async def ui_settings(self, _: web.Request) -> web.Response:
        return web.json_response({"trace_url": self.ui.trace_url if self.ui is not None else ""})

    async def ui_page(self, _: web.Request) -> web.Response:
        return _ui_file("index.html")

    async def ui_asset(self, request: web.Request) -> web.Response:
        return _ui_file(request.match_info["asset"])

    async def list_sessions(self, request: web.Request) -> web.Response:
        """The indexed conversations matching the query's filters, a page at a time."""
        if self.index is None:
            return web.json_response(
                {"error": "the conversation index is disabled (index.enabled)"}, status=404
            )
        try:
            conditions, sort, limit, cursor = listing_request(request.query)
            page = await asyncio.to_thread(self.index.query, conditions, sort, limit, cursor)
        except ValueError as exc:  # CursorError included
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(
            {"sessions": [item.summary_json() for item in page.items], "next_cursor": page.next_cursor}
        )

    async def reputation_of(self, request: web.Request) -> web.Response:
        agent_id = request.match_info["agent_id"]
        if self.reputation is None:
            return web.json_response({"error": "reputation is disabled (reputation.enabled)"}, status=404)
        current = await asyncio.to_thread(self.reputation.lookup, agent_id)
        if current is None:
            return web.json_response({"error": f"no evaluations of agent {agent_id!r}"}, status=404)
        return web.json_response(current.to_json())

    async def reputation_list(self, _: web.Request) -> web.Response:
        reputation = self.reputation
        if reputation is None:
            return web.json_response({"agents": []})

        def everyone() -> list[dict[str, object]]:
            found = (reputation.lookup(agent) for agent in reputation.agents())
            return [r.to_json() for r in found if r is not None]

        return web.json_response({"agents": await asyncio.to_thread(everyone)})

    async def start_eval_run(self, request: web.Request) -> web.Response:
        if self.eval_runs is None:
            return web.json_response({"error": "eval runs are not available"}, status=404)
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            return web.json_response({"error": f"the body is not JSON: {exc}"}, status=400)
        try:
            run = await self.eval_runs.start(body)
        except EvalRunError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"id": run["id"], "status": run["status"]}, status=202)

    async def list_eval_runs(self, request: web.Request) -> web.Response:
        """The newest runs (``limit``, default 100), without their results."""
        if self.eval_runs is None:
            return web.json_response({"runs": []})
        try:
            limit = query_int(request.query, "limit", 1, 500, default=100)
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"runs": await self.eval_runs.list(limit)})

    async def get_eval_run(self, request: web.Request) -> web.Response:
        run_id = request.match_info["run_id"]
        run = await self.eval_runs.get(run_id) if self.eval_runs is not None else None
        if run is None:
            return web.json_response({"error": f"no eval run {run_id!r}"}, status=404)
        return web.json_response(run)

    @web.middleware
    async def bearer_token(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        if self.auth_token and request.path.startswith("/v1/"):
            given = request.headers.get("Authorization", "")
            # Constant-time comparison: the token must not leak through response timing.
            if not hmac.compare_digest(given.encode(), f"Bearer {self.auth_token}".encode()):
                return web.json_response(
                    {"error": "missing or wrong bearer token"},
                    status=401,
                    headers={"WWW-Authenticate": 'Bearer realm="otelsignals"'},
                )
        return await handler(request)


@web.middleware
async def json_routing_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """An unknown path or a wrong method answered in JSON like every other admin answer (aiohttp's
    own are text/plain), so scripts and the triage page read one error shape."""
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as exc:
        allowed = sorted(exc.allowed_methods)
        return web.json_response(
            {"error": "method not allowed", "method": exc.method, "path": request.path, "allowed": allowed},
            status=405,
            headers={"Allow": ", ".join(allowed)},
        )
    except web.HTTPNotFound:
        return web.json_response({"error": "not found", "path": request.path}, status=404)


# The triage page: a small page and its assets, shipped in the wheel (no build step, no CDN).
_UI_TYPES = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}


def _ui_file(name: str) -> web.Response:
    content_type = _UI_TYPES.get(name)
    if content_type is None:
        return web.json_response({"error": f"no page asset {name!r}"}, status=404)
    body = resources.files("otelsignals.ui").joinpath(name).read_bytes()
    # The page holds no data (it asks /v1/* for it, with the API token): a browser may cache it briefly.
    headers = {
        "Cache-Control": "max-age=60",
        "X-Content-Type-Options": "nosniff",
        # Only its own assets and the admin API: no inline script, no other origin.
        "Content-Security-Policy": (
            "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'"
        ),
    }
    return web.Response(body=body, content_type=content_type, charset="utf-8", headers=headers)


def indexed_without_content(row: dict[str, Any]) -> dict[str, Any]:
    """An index row as :func:`session_json` shows a conversation with ``show_content`` off: no
    message text, arguments or snippets, each signal's metadata redacted. A row written while
    snippets were on keeps them in the index; they are not served once snippets are off."""
    signals = row.get("signals")
    return {
        **row,
        "messages": None,
        "signals": [
            {
                **signal,
                "snippet": None,
                "metadata": redact_metadata(signal["metadata"])
                if isinstance(signal.get("metadata"), dict)
                else None,
            }
            for signal in signals
            if isinstance(signal, dict)
        ]
        if isinstance(signals, list)
        else signals,
    }


def session_json(
    state: ConversationState,
    show_content: bool,
    baseline_user_turns: int = BASELINE_USER_TURNS,
    evals: EvalsConfig | None = None,
) -> dict[str, Any]:
    """An open session as the API shows it, scored and judged by the settings its spans were
    (``signals.baseline_user_turns``, ``evals.threshold[s]``: the API showed the defaults')."""
    conversation = state.conversation
    current = score(conversation, state.leaf_counts, baseline_user_turns)
    evals = evals or EvalsConfig()
    traces = list(state.trace_signals)
    return {
        "session_id": conversation.key,
        "agent_id": conversation.agent_id,
        "trace_ids": [trace_id.hex() for trace_id in conversation.trace_ids],
        "content_captured": conversation.content_captured,
        "message_offset": conversation.message_offset,
        "messages": [
            _message_json(conversation.message_offset + i, m, show_content)
            for i, m in enumerate(conversation.messages)
        ],
        "model_calls": [
            {
                "span_id": call.span_id.hex(),
                "model": call.model,
                "failed": call.failed,
                "error_type": call.error_type,
                "status_code": call.status_code,
                "input_tokens": call.input_tokens,
                "output_tokens": call.output_tokens,
            }
            for call in conversation.llm_calls[-100:]
        ],
        "signal_counts": dict(state.leaf_counts),
        "signals": [
            {
                "type": signal.type,
                "message_index": signal.message_index,
                "confidence": signal.confidence,
                "snippet": signal.snippet if show_content else None,
                "metadata": signal.metadata if show_content else redacted_metadata(signal),
            }
            for signal in state.recent_signals
        ],
        "quality": current.quality,
        "quality_score": current.quality_score,
        "efficiency_score": current.efficiency_score,
        "turn_count": current.turn_count,
        "flagged": current.flagged,
        "priority": state.priority.value,  # as of the latest analysed trace
        "priority_reasons": state.priority.reasons,
        "trace_signals": [signals.as_dict() for signals in traces],
        "session_metrics": [
            agent_reliability(traces, threshold=evals.threshold_for("agent_reliability")).as_dict(),
            agent_consistency(traces, threshold=evals.threshold_for("agent_consistency")).as_dict(),
        ],
    }


def _message_json(index: int, message: Message, show_content: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "index": index,
        "role": message.role.value,
        "content": message.content if show_content else None,
        "span_id": message.span_id.hex(),
    }
    if message.tool_calls:
        entry["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments if show_content else None}
            for c in message.tool_calls
        ]
    result = message.tool_result
    if result is not None:
        entry["tool_result"] = {
            "call_id": result.call_id,
            "name": result.name,
            "is_error": result.is_error,
            "error_type": result.error_type,
            "error_message": result.error_message if show_content else None,
            "status_code": result.status_code,
        }
    if message.finish_reason:
        entry["finish_reason"] = message.finish_reason
    return entry
