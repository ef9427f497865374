"""The OpenAI-compatible endpoints the evals use, on the shared HTTP client (pipeline/http_client.py):
the judge's chat completions (`ChatCompletions`, an async `Complete`) and the embeddings endpoint
(`OpenAIEmbeddingsEndpoint`, a synchronous `EmbeddingsEndpoint`). The core only sees the callables.

Both retry timeouts, connection errors, 408, 409, 429 and 5xx with the shared backoff rule,
honouring ``Retry-After`` / ``retry-after-ms`` up to the backoff's ``max_interval``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any

from otelsignals.evals.embeddings import EmbeddingError
from otelsignals.evals.judge import Attempts, Completion, CompletionError
from otelsignals.pipeline.http_client import (
    OPENAI_RETRYABLE_STATUSES,
    Backoff,
    Exchange,
    HttpClient,
    RetryPolicy,
)

__all__ = ["EMBEDDINGS_RETRY", "JUDGE_RETRY", "ChatCompletions", "OpenAIEmbeddingsEndpoint"]

# The judge runs in the background: three attempts, waits from 0.5 s doubling up to 20 s.
JUDGE_RETRY = RetryPolicy(attempts=3, backoff=Backoff(0.5, 2.0, 20.0, 0.5))
# The embedder runs on the analysis thread, which waits for it: two attempts, at most 5 s apart.
EMBEDDINGS_RETRY = RetryPolicy(attempts=2, backoff=Backoff(0.5, 2.0, 5.0, 0.5))


def _json_headers(api_key: str) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _error_message(raw: bytes) -> str:
    """The message of an OpenAI-style error body, else the start of the body."""
    with contextlib.suppress(ValueError, TypeError, LookupError):
        return str(json.loads(raw)["error"]["message"])
    return raw[:200].decode("utf-8", "replace") or "(empty body)"


class ChatCompletions:
    """``POST {base_url}/chat/completions``, for the judge. Close it (or use ``async with``) when done;
    its HTTP session is created on first use in the running loop."""

    def __init__(
        self, base_url: str, api_key: str = "", *, timeout: float = 30.0, retry: RetryPolicy = JUDGE_RETRY
    ) -> None:
        if not base_url:
            raise ValueError("judge base_url is required")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._retry = retry
        self._client = HttpClient(
            timeout=timeout, retryable_statuses=OPENAI_RETRYABLE_STATUSES, headers=_json_headers(api_key)
        )

    async def __call__(self, body: dict[str, Any]) -> Completion:
        exchange = await self._client.post(self.url, json.dumps(body).encode(), self._retry)
        attempts = Attempts(len(exchange.attempts), exchange.failed_attempts, exchange.latency_s)
        last = exchange.last
        if last.ok:
            try:
                decoded = json.loads(last.body)
            except ValueError:
                decoded = None
            return Completion(decoded if isinstance(decoded, dict) else {}, attempts)
        failure = f"{last.error}: {_error_message(last.body)}" if last.status else last.error
        if exchange.gave_up:
            raise CompletionError(
                "transport", f"{failure} (gave up after {len(exchange.attempts)} attempts)", attempts
            )
        raise CompletionError("http", failure, attempts)

    async def close(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> ChatCompletions:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def embeddings_url(base_url: str) -> str:
    """The embeddings URL from the server root, the API root (``…/v1``) or the endpoint itself."""
    base = base_url.rstrip("/")
    if base.endswith("/embeddings"):
        return base
    if base.endswith("/v1"):
        return base + "/embeddings"
    return base + "/v1/embeddings"


class OpenAIEmbeddingsEndpoint:
    """``POST /v1/embeddings`` for `OpenAIEmbedder`, which is synchronous (it runs on the analysis
    thread). The requests run on an event loop of the endpoint's own, in a daemon thread started on
    first use, so a calling thread needs no event loop of its own; `close` ends it."""

    def __init__(
        self,
        base_url: str,
        api_key: str = "",
        *,
        timeout: float = 30.0,
        retry: RetryPolicy = EMBEDDINGS_RETRY,
    ) -> None:
        self.url = embeddings_url(base_url)
        self._retry = retry
        self._client = HttpClient(
            timeout=timeout, retryable_statuses=OPENAI_RETRYABLE_STATUSES, headers=_json_headers(api_key)
        )
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def __call__(self, body: dict[str, Any]) -> bytes:
        exchange = self._run(self._client.post(self.url, json.dumps(body).encode(), self._retry)).result()
        last = exchange.last
        if last.ok:
            return last.body
        if not last.status:
            raise EmbeddingError(f"embedding endpoint {self.url} unreachable: {last.error}")
        detail = last.body[:500].decode("utf-8", "replace").strip()
        raise EmbeddingError(f"embedding endpoint {self.url} answered {last.error}: {detail}")

    def _run(self, request: Coroutine[Any, Any, Exchange]) -> Future[Exchange]:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="embeddings-http", daemon=True
                )
                self._thread.start()
            return asyncio.run_coroutine_threadsafe(request, self._loop)

    def close(self) -> None:
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._client.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    def __enter__(self) -> OpenAIEmbeddingsEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
