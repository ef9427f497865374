"""A real OpenAI-compatible HTTP server for tests: scripted replies on 127.0.0.1.

It speaks the wire format the `openai` client (and the Vercel AI SDK's OpenAI-compatible
providers) expect: `POST /v1/chat/completions` (plain JSON, or Server-Sent Events with
`stream: true` and `stream_options.include_usage`), a minimal `POST /v1/responses`, and
`GET /v1/models`. It runs an aiohttp server on a private asyncio loop in its own thread,
like `otlp_sink.OtlpSink`, so synchronous tests, async tests and agent subprocesses can
all talk to it.

    with FakeOpenAI() as server:
        server.script(
            Reply.tool_calls([("get_order", {"order_id": "A1"})]),
            Reply.text("Your order A1 has shipped."),
            Reply.error(429, "Rate limit reached"),
        )
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        ...
        server.requests  # what it got, in order

Scripted replies are consumed in arrival order by completion requests (chat or responses);
with the script exhausted, the server answers 500 with an `error.message` saying so, so a
test whose agent makes one call too many fails loudly instead of hanging.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import string
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.support.loop_thread import start_loop_thread

__all__ = ["FakeOpenAI", "Received", "Reply"]

MODELS = ("gpt-4o-mini", "gpt-4o", "gpt-4.1-mini")
_DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")
_ALNUM = string.ascii_letters + string.digits

# Bodies real OpenAI returns for these statuses (type / code as documented for the API).
_ERROR_DEFAULTS: dict[int, tuple[str, str, str | None]] = {
    400: ("Invalid request.", "invalid_request_error", None),
    401: ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to access this resource.", "invalid_request_error", None),
    404: ("The model does not exist or you do not have access to it.", "invalid_request_error", None),
    429: ("Rate limit reached for requests", "requests", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request. Sorry about that!", "server_error", None),
    502: ("Bad gateway.", "server_error", None),
    503: ("The server is overloaded or not ready yet.", "server_error", None),
}


@dataclass(frozen=True)
class Reply:
    """One scripted answer: assistant text, tool calls, or an HTTP error."""

    kind: str  # "text" | "tool_calls" | "error"
    content: str = ""  # assistant text (may accompany tool calls)
    calls: tuple[tuple[str, str], ...] = ()  # (function name, JSON arguments)
    status: int = 200
    message: str = ""
    code: str | None = None
    error_type: str | None = None
    retry_after: float | None = None
    finish_reason: str | None = None

    @classmethod
    def text(cls, content: str, *, finish_reason: str = "stop") -> Reply:
        return cls("text", content=content, finish_reason=finish_reason)

    @classmethod
    def tool_calls(cls, calls: list[tuple[str, dict[str, Any] | str]], *, text: str = "") -> Reply:
        """Assistant message calling these functions (arguments as dict or raw JSON text)."""
        encoded = tuple(
            (name, args if isinstance(args, str) else json.dumps(args, separators=(",", ":")))
            for name, args in calls
        )
        return cls("tool_calls", content=text, calls=encoded, finish_reason="tool_calls")

    @classmethod
    def error(
        cls,
        status: int,
        message: str | None = None,
        *,
        code: str | None = None,
        error_type: str | None = None,
        retry_after: float | None = None,
    ) -> Reply:
        default_message, default_type, default_code = _ERROR_DEFAULTS.get(
            status, ("Error.", "server_error" if status >= 500 else "invalid_request_error", None)
        )
        return cls(
            "error",
            status=status,
            message=message or default_message,
            code=code if code is not None else default_code,
            error_type=error_type or default_type,
            retry_after=retry_after,
        )

    def to_json(self) -> dict[str, Any]:
        """Plain-data form (used to hand a script to another process)."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.kind == "text":
            out["text"] = self.content
        elif self.kind == "tool_calls":
            out["calls"] = [{"name": n, "arguments": json.loads(a)} for n, a in self.calls]
            if self.content:
                out["text"] = self.content
        else:
            out.update(status=self.status, message=self.message, code=self.code)
            if self.retry_after is not None:
                out["retry_after"] = self.retry_after
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reply:
        kind = data["kind"]
        if kind == "text":
            return cls.text(data["text"])
        if kind == "tool_calls":
            return cls.tool_calls(
                [(c["name"], c["arguments"]) for c in data["calls"]], text=data.get("text", "")
            )
        return cls.error(
            data["status"], data.get("message"), code=data.get("code"), retry_after=data.get("retry_after")
        )


@dataclass
class Received:
    """One HTTP request the server got."""

    method: str
    path: str
    body: dict[str, Any] | None
    headers: dict[str, str]
    received_at: float
    status: int = 0  # what it was answered with
    reply: Reply | None = None  # the scripted reply it consumed, if any

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list((self.body or {}).get("messages") or [])

    @property
    def stream(self) -> bool:
        return bool((self.body or {}).get("stream"))


@dataclass
class _Ids:
    rng: random.Random = field(default_factory=random.Random)

    def make(self, prefix: str, n: int) -> str:
        return prefix + "".join(self.rng.choice(_ALNUM) for _ in range(n))


def _tokens(text: str) -> int:
    """A stable, plausible token count (~4 characters per token)."""
    return max(1, math.ceil(len(text) / 4)) if text else 0


def _prompt_tokens(body: dict[str, Any]) -> int:
    total = 0
    for message in body.get("messages") or []:
        total += 4  # per-message overhead, as the real tokenizer adds
        content = message.get("content")
        if isinstance(content, str):
            total += _tokens(content)
        elif isinstance(content, list):
            total += sum(_tokens(str(part.get("text", ""))) for part in content if isinstance(part, dict))
        for call in message.get("tool_calls") or []:
            total += _tokens(json.dumps(call.get("function", {})))
    if isinstance(body.get("input"), str):
        total += _tokens(body["input"])
    for tool in body.get("tools") or []:
        total += _tokens(json.dumps(tool))
    return total + 3


def _response_model(requested: str | None) -> str:
    model = requested or "gpt-4o-mini"
    return model if _DATED.search(model) else f"{model}-2024-07-18"


class FakeOpenAI:
    """OpenAI-compatible HTTP server on `host` with scripted replies."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, seed: int | None = None):
        self.host = host
        self.port = port
        self._ids = _Ids(random.Random(seed))
        self._lock = threading.Lock()
        self._script: deque[Reply] = deque()
        self._by_system_prompt: dict[str, Reply] = {}
        self._received: list[Received] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        if self._runner is not None:
            return self
        loop, self._thread = start_loop_thread("fake-openai")
        self._loop = loop
        try:
            asyncio.run_coroutine_threadsafe(self._start_async(), loop).result(timeout=15)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._stop_async(), loop).result(timeout=15)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=10)
        if not loop.is_running():
            loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _start_async(self) -> None:
        app = web.Application(client_max_size=32 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_get("/v1/models", self._models)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self.port = runner.addresses[0][1]
        self._runner = runner

    async def _stop_async(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # ---- scripting / observations ----------------------------------------------------

    @property
    def base_url(self) -> str:
        """What to pass as the client's `base_url` (ends in /v1)."""
        return f"http://{self.host}:{self.port}/v1"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def answer_by_system_prompt(self, replies: dict[str, Reply]) -> None:
        """Answer each request by its system message instead of in arrival order (for requests that
        arrive concurrently): the same reply every time that system message is seen."""
        with self._lock:
            self._by_system_prompt = dict(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._script)

    @property
    def requests(self) -> list[Received]:
        """Every request received, in arrival order."""
        with self._lock:
            return list(self._received)

    @property
    def completion_requests(self) -> list[Received]:
        return [r for r in self.requests if r.path in ("/v1/chat/completions", "/v1/responses")]

    def clear(self) -> None:
        with self._lock:
            self._script.clear()
            self._by_system_prompt.clear()
            self._received.clear()

    # ---- handlers --------------------------------------------------------------------

    async def _arrive(self, request: web.Request) -> tuple[Received, dict[str, Any] | None, Reply | None]:
        body: dict[str, Any] | None = None
        raw = await request.read()
        if raw:
            try:
                decoded = json.loads(raw)
            except ValueError:
                decoded = None
            body = decoded if isinstance(decoded, dict) else None
        item = Received(
            request.method,
            request.path,
            body,
            {k.lower(): v for k, v in request.headers.items()},
            time.time(),
        )
        reply = None
        with self._lock:
            self._received.append(item)
            if body is not None and self._by_system_prompt:
                reply = self._by_system_prompt.get(_system_prompt(body))
            elif body is not None and self._script:
                reply = self._script.popleft()
        item.reply = reply
        return item, body, reply

    def _error(self, item: Received, reply: Reply) -> web.Response:
        item.status = reply.status
        headers = {"x-request-id": self._ids.make("req_", 32)}
        if reply.retry_after is not None:
            headers["retry-after"] = (
                str(int(reply.retry_after))
                if float(reply.retry_after).is_integer()
                else str(reply.retry_after)
            )
        if reply.status == 429:
            headers.update(
                {
                    "x-ratelimit-limit-requests": "500",
                    "x-ratelimit-remaining-requests": "0",
                    "x-ratelimit-reset-requests": "120ms",
                }
            )
        payload = {
            "error": {"message": reply.message, "type": reply.error_type, "param": None, "code": reply.code}
        }
        return web.json_response(payload, status=reply.status, headers=headers)

    def _missing(self, item: Received, why: str) -> web.Response:
        item.status = 500 if why == "script" else 400
        message = (
            "fake_openai: no scripted reply left for this request"
            if why == "script"
            else "fake_openai: request body is not a JSON object"
        )
        payload = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
        return web.json_response(payload, status=item.status)

    async def _models(self, request: web.Request) -> web.Response:
        item = Received(request.method, request.path, None, dict(request.headers), time.time(), 200)
        with self._lock:
            self._received.append(item)
        created = 1_721_172_741
        data = [{"id": m, "object": "model", "created": created, "owned_by": "system"} for m in MODELS]
        return web.json_response({"object": "list", "data": data})

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        item, body, reply = await self._arrive(request)
        if body is None:
            return self._missing(item, "body")
        if reply is None:
            return self._missing(item, "script")
        if reply.kind == "error":
            return self._error(item, reply)
        item.status = 200
        completion_id = self._ids.make("chatcmpl-", 29)
        created = int(time.time())
        model = _response_model(body.get("model"))
        fingerprint = "fp_" + self._ids.make("", 10).lower()
        tool_calls = [
            {"id": self._ids.make("call_", 24), "type": "function", "function": {"name": n, "arguments": a}}
            for n, a in reply.calls
        ]
        content = reply.content or None
        prompt_tokens = _prompt_tokens(body)
        completion_tokens = _tokens(reply.content) + sum(_tokens(n + a) + 3 for n, a in reply.calls)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
        headers = {"x-request-id": self._ids.make("req_", 32), "openai-processing-ms": "187"}
        if not body.get("stream"):
            message: dict[str, Any] = {
                "role": "assistant",
                "content": content,
                "refusal": None,
                "annotations": [],
            }
            if tool_calls:
                message["tool_calls"] = tool_calls
            payload = {
                "id": completion_id,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}
                ],
                "usage": usage,
                "service_tier": "default",
                "system_fingerprint": fingerprint,
            }
            return web.json_response(payload, headers=headers)

        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        response = web.StreamResponse(
            status=200, headers={**headers, "Content-Type": "text/event-stream; charset=utf-8"}
        )
        await response.prepare(request)

        def chunk(delta: dict[str, Any], finish: str | None = None, with_usage: bool = False) -> bytes:
            data: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "service_tier": "default",
                "system_fingerprint": fingerprint,
                "choices": []
                if with_usage
                else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            }
            if include_usage:
                data["usage"] = usage if with_usage else None
            return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()

        await response.write(
            chunk({"role": "assistant", "content": "" if not tool_calls else None, "refusal": None})
        )
        for piece in _split_text(reply.content):
            await response.write(chunk({"content": piece}))
        for index, call in enumerate(tool_calls):
            head = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            await response.write(chunk({"tool_calls": [head]}))
            for piece in _split_args(call["function"]["arguments"]):
                await response.write(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                )
        await response.write(chunk({}, finish=reply.finish_reason))
        if include_usage:
            await response.write(chunk({}, with_usage=True))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _responses(self, request: web.Request) -> web.Response:
        """Minimal Responses API: non-streaming text or function calls."""
        item, body, reply = await self._arrive(request)
        if body is None:
            return self._missing(item, "body")
        if reply is None:
            return self._missing(item, "script")
        if reply.kind == "error":
            return self._error(item, reply)
        item.status = 200
        output: list[dict[str, Any]] = []
        if reply.content:
            output.append(
                {
                    "type": "message",
                    "id": self._ids.make("msg_", 48),
                    "status": "completed",
                    "role": "assistant",
                    "content": [
                        {"type": "output_text", "text": reply.content, "annotations": [], "logprobs": []}
                    ],
                }
            )
        for name, arguments in reply.calls:
            output.append(
                {
                    "type": "function_call",
                    "id": self._ids.make("fc_", 48),
                    "call_id": self._ids.make("call_", 24),
                    "name": name,
                    "arguments": arguments,
                    "status": "completed",
                }
            )
        input_tokens = _prompt_tokens(body)
        output_tokens = _tokens(reply.content) + sum(_tokens(n + a) for n, a in reply.calls)
        payload = {
            "id": self._ids.make("resp_", 48),
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "model": _response_model(body.get("model")),
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"),
            "temperature": 1.0,
            "tool_choice": "auto",
            "tools": body.get("tools") or [],
            "top_p": 1.0,
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input_tokens + output_tokens,
            },
            "metadata": {},
        }
        return web.json_response(payload, headers={"x-request-id": self._ids.make("req_", 32)})


def _split_text(text: str) -> list[str]:
    """Word-sized stream deltas, as a real model streams them (joined, they give the text back)."""
    return re.findall(r"\S+\s*|\s+", text) if text else []


def _split_args(arguments: str, size: int = 8) -> list[str]:
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or [""]


def _system_prompt(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    first = messages[0] if messages and isinstance(messages[0], dict) else {}
    return str(first.get("content", "")) if first.get("role") == "system" else ""
