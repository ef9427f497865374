"""A tool-using agent workload through the real sidecar, beside a bare forwarder in the same run.

    python bench/agent_workload.py [--conversations 300] [--quick] [--json PATH] [--profile]

Workload (deterministic, ``--seed``): conversations of 5–40 user turns, one trace per user turn,
shaped as OTel GenAI instrumentations write it (attributes as in tests/fixtures/openai_v2)::

    invoke_agent {agent}            root: the turn's user message in, the final answer out
    ├── SELECT agent_messages       db client span (load the history)
    ├── chat {model}  × 2–4         each resends the WHOLE history so far (gen_ai.input.messages)
    ├── execute_tool {tool} × 1–3   0.5–5 KB JSON result; about half call an HTTP API (child span)
    └── INSERT agent_messages       db client span (save the turn)

Every span carries ``gen_ai.conversation.id``. Message text (50–2,000 characters, log-uniform) is
mixed from sentences of the repository's corpora (WORKLOAD_CORPORA, otelsignals/demo/), tool calls
and results from theirs. Conversations are interleaved: round-robin, in shuffled order, over
``--active`` open conversations, a new one starting when one ends. Every request (one whole trace,
spans in the order an SDK exports them: children first, root last) is encoded before any timing,
so every trace is complete on arrival and the sidecar releases it at once.

Each target is an OTLP/gRPC server in its own process forwarding to the same kind of downstream (a
gRPC sink in another process that notes when each trace's last span arrives):

- ``sidecar``: ``otelsignals run`` with the embedded defaults (trace metrics on, gzip towards the
  downstream, no disk queue); only ports, the downstream endpoint and the store directory are set;
  its analysis core compiled where the package was built so (``OTELSIGNALS_PURE_PYTHON=1`` in this
  command's environment runs the core's source, there and in ``--profile``: README, "The compiled core");
- ``bare``: ``python bench/agent_workload.py --bare-forwarder PORT DOWNSTREAM``, a grpc.aio server
  that parses each request, serializes it again and forwards it (same compression) before answering.

Two phases per target, each with half of the conversations (same mix of lengths in both):
1. unpaced: ``--concurrency`` requests in flight, as fast as the target takes them (UNAVAILABLE
   answers are retried after 50 ms): maximum throughput and CPU per turn (the target process's own
   utime + stime from /proc, every thread included, first request sent → last span at the sink);
2. paced: open loop at 50 % of the sidecar's unpaced throughput in turns/s (the same rate for
   both targets): added latency = first send of a trace's request → its last span at the sink
   (so it includes the sidecar's export batching: up to ``exporter.batch.timeout``, 20 ms by default),
   and the export requests the downstream received per turn (what that batching saves it: the bare
   forwarder sends one per request it takes).

Memory: the target's VmHWM, and for the sidecar the RSS growth from ready to the end of the run
divided by ``otelsignals_sessions_active`` (every conversation is still held: ``sessions.ttl`` 30 m).

``--profile`` runs the sidecar's stages in this process on the same requests (receiver parse and span marks,
trace assembly, convention readers, detectors, scoring, trace metrics, enrichment, export encoding
and the exporter's own gzip, none with ``--compression none``; 100 conversations unless
--conversations) and prints µs of CPU (the thread's time) per turn per stage, then the top functions
under cProfile. ``--profile --cold``: every conversation goes cold before each turn, as when each
user turn comes after a pause of ``sessions.cold_after`` (the worst case of that setting).
``--set SECTION.KEY=VALUE`` (repeatable; VALUE read as YAML) changes the sidecar's configuration, to
measure what a part costs with it off: ``--set evals.trace_metrics=false``, ``--set
reputation.enabled=false``, ``--set index.enabled=false``.
Markdown to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import functools
import io
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import pstats
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import orjson
import yaml
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from otelsignals.config_loading import load_config  # noqa: E402
from otelsignals.pipeline.enricher import write_attribute  # noqa: E402

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
TRACES_METHOD = f"/{SERVICE}/Export"
GRPC_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
BASE_TIME_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z: timestamps are part of the seed
MS = 1_000_000
KIND_INTERNAL, KIND_SERVER, KIND_CLIENT = 1, 2, 3
# 1,000 conversations (the figure) make ~23,000 turns and 7 GiB of OTLP: about 25 minutes on
# 2 cores (400 took 10). 300 keep a full run under 8 minutes; --conversations 1000 for the full set.
DEFAULT_CONVERSATIONS = 300


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# Text sources: the repository's conversation corpora
# ----------------------------------------------------------------------------------------------
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


# The corpora the workload's text is drawn from, named: a corpus added later must not change the
# workload (its figures compare across sessions, and tests/pipeline/test_cold_sessions.py's byte
# bounds are set on it; the fourth blind corpus, taken in by a glob, changed both).
WORKLOAD_CORPORA = ("tests/corpus", "tests/corpus_blind", "tests/corpus_blind3", "tests/corpus_heldout")


@dataclass
class TextPool:
    user: list[str] = field(default_factory=list)
    assistant: list[str] = field(default_factory=list)
    system: list[str] = field(default_factory=list)
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)  # (name, arguments)
    results: list[Any] = field(default_factory=list)  # parsed tool results
    result_sizes: list[int] = field(default_factory=list)

    @classmethod
    def load(cls) -> TextPool:
        pool = cls()
        user: list[str] = []
        assistant: list[str] = []
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        for path in sorted(path for corpus in WORKLOAD_CORPORA for path in (ROOT / corpus).glob("*.yaml")):
            for conversation in yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or []:
                for message in conversation.get("messages") or []:
                    role, content = message.get("role"), message.get("content")
                    if role == "user" and content:
                        user.append(content)
                    elif role == "assistant":
                        if content:
                            assistant.append(content)
                        for call in message.get("tool_calls") or []:
                            pool.tool_calls.append((call["name"], call.get("arguments") or {}))
                    elif role == "system" and content:
                        pool.system.append(content)
                    elif role == "tool" and message.get("tool_result"):
                        pool.results.append(_as_json(message["tool_result"].get("content")))
        demo = json.loads((ROOT / "otelsignals/demo/conversations.json").read_text(encoding="utf-8"))
        for conversation in demo:
            pool.system.append(conversation["system_prompt"])
            for turn in conversation["turns"]:
                user.append(turn["user"])
                for step in turn["steps"]:
                    if step.get("text"):
                        assistant.append(step["text"])
                    for call in step.get("tool_calls") or []:
                        pool.tool_calls.append((call["name"], call.get("arguments") or {}))
                        if "result" in call:
                            pool.results.append(call["result"])
        pool.user = [s for text in user for s in _SENTENCE_END.split(text.strip()) if s]
        pool.assistant = [s for text in assistant for s in _SENTENCE_END.split(text.strip()) if s]
        pool.result_sizes = [len(orjson.dumps(r)) for r in pool.results]
        return pool

    def text(self, rng: random.Random, role: str, length: int) -> str:
        """About ``length`` characters of sentences of ``role``'s messages, in random order."""
        sentences = self.user if role == "user" else self.assistant
        pieces: list[str] = []
        total = 0
        while total < length:
            sentence = rng.choice(sentences)
            pieces.append(sentence)
            total += len(sentence) + 1
        text = " ".join(pieces)
        if len(text) > length:
            cut = text.rfind(" ", 0, length)
            text = text[: cut if cut >= 50 else length]
        return text

    def tool_result(self, rng: random.Random, name: str, size: int) -> str:
        """A JSON result of about ``size`` bytes: records drawn from the corpora's tool results."""
        records: list[Any] = []
        total = 80
        while total < size:
            index = rng.randrange(len(self.results))
            records.append(self.results[index])
            total += self.result_sizes[index] + 1
        result = {"tool": name, "status": "ok", "request_id": rng.randbytes(6).hex(), "records": records}
        return orjson.dumps(result).decode()


def _as_json(content: Any) -> Any:
    if isinstance(content, str):
        try:
            return orjson.loads(content)
        except orjson.JSONDecodeError:
            return {"text": content}
    return content


def log_uniform(rng: random.Random, low: float, high: float) -> int:
    return int(math.exp(rng.uniform(math.log(low), math.log(high))))


# ----------------------------------------------------------------------------------------------
# The workload
# ----------------------------------------------------------------------------------------------
AGENTS = (
    ("support-agent", "support-gateway", "gpt-4o-mini"),
    ("travel-agent", "travel-desk", "gpt-4o"),
    ("coding-assistant", "dev-copilot", "gpt-4.1"),
    ("shop-assistant", "storefront-ai", "gpt-4o-mini"),
    ("it-helpdesk", "helpdesk-bot", "gpt-4.1-mini"),
    ("bank-assistant", "banking-chat", "gpt-4o"),
)
RESPONSE_MODELS = {
    "gpt-4o-mini": "gpt-4o-mini-2024-07-18",
    "gpt-4o": "gpt-4o-2024-08-06",
    "gpt-4.1": "gpt-4.1-2025-04-14",
    "gpt-4.1-mini": "gpt-4.1-mini-2025-04-14",
}
LOAD_QUERY = "SELECT role, content FROM agent_messages WHERE conversation_id = $1 ORDER BY seq"
SAVE_QUERY = "INSERT INTO agent_messages (conversation_id, seq, role, content) VALUES ($1, $2, $3, $4)"
HTTP_APIS = (
    ("GET", "orders.internal", "/v2/orders/{id}"),
    ("GET", "catalog.internal", "/v1/products/{id}"),
    ("POST", "search.internal", "/v1/search"),
    ("GET", "crm.internal", "/api/customers/{id}"),
    ("POST", "tickets.internal", "/api/tickets"),
)


@dataclass
class Turn:
    conversation: int
    index: int  # 0-based user turn
    trace_id: bytes
    spans: int
    body: bytes  # ExportTraceServiceRequest carrying this whole trace


@dataclass
class ConversationPlan:
    number: int
    key: str
    turns: int
    agent: tuple[str, str, str]
    system: str
    tools: list[tuple[str, Any]]
    history: list[bytes] = field(default_factory=list)  # encoded messages, system prompt first
    done: int = 0
    clock_ns: int = 0


class Generator:
    def __init__(self, seed: int) -> None:
        self.pool = TextPool.load()
        self.rng = random.Random(seed)
        tool_names = sorted({name for name, _ in self.pool.tool_calls})
        self.tools_by_name = {
            name: [args for n, args in self.pool.tool_calls if n == name] for name in tool_names
        }
        self.resources: dict[str, bytes] = {}

    def conversation(self, number: int) -> ConversationPlan:
        rng = self.rng
        agent = AGENTS[rng.randrange(len(AGENTS))]
        names = rng.sample(sorted(self.tools_by_name), 6)
        tools = [(name, rng.choice(self.tools_by_name[name])) for name in names]
        system = rng.choice(self.pool.system)
        plan = ConversationPlan(
            number,
            f"conv-{rng.randbytes(8).hex()}",
            rng.randint(5, 40),
            agent,
            system,
            tools,
            clock_ns=BASE_TIME_NS + rng.randrange(3_600) * 1_000_000_000,
        )
        plan.history.append(_message("system", [{"type": "text", "content": system}]))
        return plan

    def schedule(self, conversations: list[int], active: int) -> Iterator[ConversationPlan]:
        """Turns in arrival order: round-robin (shuffled each round) over ``active`` open ones."""
        waiting = deque(conversations)
        open_ = [self.conversation(waiting.popleft()) for _ in range(min(active, len(waiting)))]
        while open_:
            order = open_[:]
            self.rng.shuffle(order)
            for plan in order:
                yield plan
                if plan.done == plan.turns:
                    open_.remove(plan)
                    if waiting:
                        open_.append(self.conversation(waiting.popleft()))

    def turn(self, plan: ConversationPlan) -> Turn:
        rng, pool = self.rng, self.pool
        agent_name, service, model = plan.agent
        key = plan.key
        trace_id = rng.randbytes(16)
        plan.clock_ns += rng.randint(5, 120) * 1_000_000_000  # the user's think time
        t = plan.clock_ns
        spans: list[tuple[str, Span]] = []  # (scope, span) in end order

        def new_span(name: str, kind: int, parent: bytes, start: int, end: int, attrs: list) -> Span:
            span = Span(
                trace_id=trace_id,
                span_id=rng.randbytes(8),
                parent_span_id=parent,
                name=name,
                kind=kind,  # type: ignore[arg-type]
                start_time_unix_nano=start,
                end_time_unix_nano=end,
            )
            span.status.code = 1  # type: ignore[assignment]
            _set_attributes(span, [*attrs, ("gen_ai.conversation.id", key)])
            return span

        root_id = rng.randbytes(8)
        user_text = pool.text(rng, "user", log_uniform(rng, 50, 2000))
        user_message = _message("user", [{"type": "text", "content": user_text}])
        plan.history.append(user_message)

        def db_span(operation: str, table: str, query: str, start: int, end: int) -> Span:
            attributes = [
                ("db.system.name", "postgresql"),
                ("db.system", "postgresql"),
                ("db.namespace", "agents"),
                ("db.operation.name", operation),
                ("db.collection.name", table),
                ("db.query.text", query),
                ("server.address", "pg.internal"),
                ("server.port", 5432),
            ]
            return new_span(f"{operation} {table}", KIND_CLIENT, root_id, start, end, attributes)

        t += 2 * MS
        load_start, t = t, t + rng.randint(1, 6) * MS
        spans.append(("db", db_span("SELECT", "agent_messages", LOAD_QUERY, load_start, t)))

        # How many model calls, and which of them ask for which tools (every call but the last).
        chats = rng.randint(2, 4)
        tool_steps = chats - 1
        n_tools = max(tool_steps, rng.randint(1, 3))
        calls_per_step = [1] * tool_steps
        for _ in range(n_tools - tool_steps):
            calls_per_step[rng.randrange(tool_steps)] += 1
        final_output = ""
        for step in range(chats):
            final = step == chats - 1
            input_json = _join(plan.history)
            start = t
            if final:
                answer = pool.text(rng, "assistant", log_uniform(rng, 50, 2000))
                out = _message("assistant", [{"type": "text", "content": answer}], "stop")
                finish = "stop"
            else:
                parts: list[dict[str, Any]] = []
                if rng.random() < 0.3:
                    parts.append({"type": "text", "content": pool.text(rng, "assistant", 60)})
                calls = []
                for _ in range(calls_per_step[step]):
                    name, arguments = rng.choice(plan.tools)
                    call_id = "call_" + rng.randbytes(12).hex()
                    calls.append((name, arguments, call_id))
                    parts.append({"type": "tool_call", "id": call_id, "name": name, "arguments": arguments})
                out = _message("assistant", parts, "tool_calls")
                finish = "tool_calls"
            output_json = b"[" + out + b"]"
            if final:
                final_output = output_json.decode()
            t += rng.randint(300, 3000) * MS
            spans.append(
                (
                    "genai",
                    new_span(
                        f"chat {model}",
                        KIND_CLIENT,
                        root_id,
                        start,
                        t,
                        [
                            ("gen_ai.operation.name", "chat"),
                            ("gen_ai.provider.name", "openai"),
                            ("gen_ai.system", "openai"),
                            ("gen_ai.request.model", model),
                            ("gen_ai.agent.name", agent_name),
                            ("server.address", "api.openai.com"),
                            ("server.port", 443),
                            ("gen_ai.response.model", RESPONSE_MODELS[model]),
                            ("gen_ai.response.id", "chatcmpl-" + rng.randbytes(15).hex()),
                            ("gen_ai.response.finish_reasons", [finish]),
                            ("gen_ai.usage.input_tokens", len(input_json) // 4),
                            ("gen_ai.usage.output_tokens", len(output_json) // 4),
                            ("gen_ai.input.messages", input_json.decode()),
                            ("gen_ai.output.messages", output_json.decode()),
                        ],
                    ),
                )
            )
            plan.history.append(out)
            if final:
                break
            for name, arguments, call_id in calls:
                tool_start = t
                t += rng.randint(50, 800) * MS
                result = pool.tool_result(rng, name, log_uniform(rng, 512, 5120))
                tool = new_span(
                    f"execute_tool {name}",
                    KIND_INTERNAL,
                    root_id,
                    tool_start,
                    t,
                    [
                        ("gen_ai.operation.name", "execute_tool"),
                        ("gen_ai.tool.name", name),
                        ("gen_ai.tool.call.id", call_id),
                        ("gen_ai.tool.type", "function"),
                        ("gen_ai.agent.name", agent_name),
                        ("gen_ai.tool.call.arguments", orjson.dumps(arguments).decode()),
                        ("gen_ai.tool.call.result", result),
                    ],
                )
                if rng.random() < 0.5:
                    method, host, route = rng.choice(HTTP_APIS)
                    path = route.replace("{id}", str(rng.randrange(10**6)))
                    spans.append(
                        (
                            "http",
                            new_span(
                                method,
                                KIND_CLIENT,
                                tool.span_id,
                                tool_start + MS,
                                t - MS,
                                [
                                    ("http.request.method", method),
                                    ("url.full", f"https://{host}{path}"),
                                    ("server.address", host),
                                    ("server.port", 443),
                                    ("http.response.status_code", 200),
                                    ("network.protocol.version", "1.1"),
                                ],
                            ),
                        )
                    )
                spans.append(("genai", tool))
                plan.history.append(
                    _message("tool", [{"type": "tool_call_response", "id": call_id, "response": result}])
                )
                t += 1 * MS

        save_start, t = t, t + rng.randint(1, 6) * MS
        spans.append(("db", db_span("INSERT", "agent_messages", SAVE_QUERY, save_start, t)))
        root = new_span(
            f"invoke_agent {agent_name}",
            KIND_INTERNAL,
            b"",
            plan.clock_ns,
            t + MS,
            [
                ("gen_ai.operation.name", "invoke_agent"),
                ("gen_ai.agent.name", agent_name),
                ("gen_ai.provider.name", "openai"),
                ("gen_ai.request.model", model),
                ("gen_ai.input.messages", "[" + user_message.decode() + "]"),
                ("gen_ai.output.messages", final_output),
            ],
        )
        root.span_id = root_id
        spans.append(("genai", root))
        plan.clock_ns = t + MS
        plan.done += 1
        return Turn(plan.number, plan.done - 1, trace_id, len(spans), self._request(service, spans))

    def _request(self, service: str, spans: list[tuple[str, Span]]) -> bytes:
        resource_spans = ResourceSpans.FromString(self._resource(service))
        by_scope: dict[str, Any] = {}
        for scope, span in spans:
            scope_spans = by_scope.get(scope)
            if scope_spans is None:
                scope_spans = by_scope[scope] = resource_spans.scope_spans.add()
                scope_spans.scope.name, scope_spans.scope.version = SCOPES[scope]
            scope_spans.spans.append(span)
        return ExportTraceServiceRequest(resource_spans=[resource_spans]).SerializeToString()

    def _resource(self, service: str) -> bytes:
        cached = self.resources.get(service)
        if cached is None:
            resource_spans = ResourceSpans()
            _set_attributes(
                resource_spans.resource,
                [
                    ("service.name", service),
                    ("service.version", "2.3.1"),
                    ("deployment.environment.name", "production"),
                    ("host.name", f"{service}-7d9f8b6c4-x2k9p"),
                    ("telemetry.sdk.language", "python"),
                    ("telemetry.sdk.name", "opentelemetry"),
                    ("telemetry.sdk.version", "1.45.2"),
                ],
            )
            cached = self.resources[service] = resource_spans.SerializeToString()
        return cached


SCOPES = {
    "genai": ("opentelemetry.util.genai.handler", "1.1b0"),
    "http": ("opentelemetry.instrumentation.httpx", "0.58b0"),
    "db": ("opentelemetry.instrumentation.asyncpg", "0.58b0"),
}


def _message(role: str, parts: list[dict[str, Any]], finish_reason: str | None = None) -> bytes:
    message: dict[str, Any] = {"role": role, "parts": parts}
    if finish_reason is not None:
        message["finish_reason"] = finish_reason
    return orjson.dumps(message)


def _join(messages: list[bytes]) -> bytes:
    return b"[" + b",".join(messages) + b"]"


def _set_attributes(target: Any, items: list[tuple[str, Any]]) -> None:
    for key, value in items:
        write_attribute(target.attributes.add(), key, list(value) if isinstance(value, tuple) else value)


@dataclass
class Workload:
    phases: list[list[Turn]]  # the conversations of each phase, in arrival order

    @property
    def turns(self) -> list[Turn]:
        return [turn for phase in self.phases for turn in phase]


def build_workload(conversations: int, active: int, seed: int) -> Workload:
    """Two phases, each with half of the conversations (same distribution of lengths)."""
    generator = Generator(seed)
    numbers = list(range(conversations))
    half = conversations // 2
    phases = []
    for part in (numbers[:half], numbers[half:]):
        phases.append([generator.turn(plan) for plan in generator.schedule(part, active)])
    return Workload(phases)


# ----------------------------------------------------------------------------------------------
# The downstream sink (a subprocess): when did each trace's last span arrive
# ----------------------------------------------------------------------------------------------
SESSION_SPAN = "otelsignals.session"


def run_sink(conn: multiprocessing.connection.Connection) -> None:
    from concurrent import futures

    lock = threading.Lock()
    arrivals: dict[bytes, list[float]] = {}  # trace id -> [spans, monotonic time of the last]
    counts = [0, 0]  # spans, requests

    def export(body: bytes, context: grpc.ServicerContext) -> bytes:
        now = time.monotonic()
        request = ExportTraceServiceRequest.FromString(body)
        seen: dict[bytes, int] = {}
        total = 0
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    if span.name == SESSION_SPAN:
                        continue  # the sidecar's own summary of a closed session, not a sent span
                    seen[span.trace_id] = seen.get(span.trace_id, 0) + 1
                    total += 1
        with lock:
            for trace_id, n in seen.items():
                entry = arrivals.get(trace_id)
                if entry is None:
                    arrivals[trace_id] = [n, now]
                else:
                    entry[0] += n
                    entry[1] = max(entry[1], now)
            counts[0] += total
            counts[1] += 1
        return b""

    server = grpc.server(futures.ThreadPoolExecutor(8), options=GRPC_OPTIONS)
    handler = grpc.unary_unary_rpc_method_handler(export, request_deserializer=None, response_serializer=None)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    conn.send(port)
    while True:
        command = conn.recv()
        if command == "count":
            with lock:
                conn.send(counts[0])
        elif command == "take":
            with lock:
                taken = {trace_id: (n, at) for trace_id, (n, at) in arrivals.items()}
                requests = counts[1]
                arrivals.clear()
                counts[0] = counts[1] = 0
            conn.send((taken, requests))
        else:
            server.stop(None)
            return


class Sink:
    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=run_sink, args=(child,), daemon=True)
        self._process.start()
        self.port: int = self._conn.recv()
        self.endpoint = f"127.0.0.1:{self.port}"

    def count(self) -> int:
        self._conn.send("count")
        return int(self._conn.recv())

    def take(self) -> tuple[dict[bytes, tuple[int, float]], int]:
        """(trace id → (spans, time of the last), the export requests received) since the last take."""
        self._conn.send("take")
        arrivals, requests = self._conn.recv()
        return dict(arrivals), int(requests)

    def wait_for(self, spans: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (count := self.count()) < spans:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sink has {count:,} of {spans:,} spans after {timeout:.0f} s")
            time.sleep(0.02)

    def stop(self) -> None:
        with contextlib.suppress(OSError, EOFError):
            self._conn.send("stop")
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()


# ----------------------------------------------------------------------------------------------
# The bare forwarder: parse, serialize, forward (the cost of any OTLP hop in Python)
# ----------------------------------------------------------------------------------------------
async def bare_forwarder(port: int, downstream: str, compression: str) -> None:
    channel = grpc.aio.insecure_channel(downstream, options=GRPC_OPTIONS)
    call = channel.unary_unary(TRACES_METHOD, request_serializer=None, response_deserializer=None)
    gzip = grpc.Compression.Gzip if compression == "gzip" else grpc.Compression.NoCompression
    answer = ExportTraceServiceResponse().SerializeToString()

    async def export(body: bytes, context: grpc.aio.ServicerContext) -> bytes:
        request = ExportTraceServiceRequest.FromString(body)
        await call(request.SerializeToString(), timeout=30, compression=gzip)
        return answer

    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 * 1024**2)])
    handler = grpc.unary_unary_rpc_method_handler(export, request_deserializer=None, response_serializer=None)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


class BareForwarder:
    def __init__(self, downstream: str, compression: str) -> None:
        from tests.support.sidecar import free_port

        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--bare-forwarder",
                str(self.port),
                downstream,
                "--compression",
                compression,
            ],
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != b"ready":
            raise RuntimeError("the bare forwarder did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


# ----------------------------------------------------------------------------------------------
# The client
# ----------------------------------------------------------------------------------------------
@dataclass
class Sent:
    first_send: list[float]  # monotonic time of each request's first attempt
    rpc: list[float]  # seconds from the first attempt to the successful answer
    overloaded: int = 0  # UNAVAILABLE answers (retried)


async def drive(endpoint: str, bodies: list[bytes], concurrency: int, rate: float | None) -> Sent:
    """Send ``bodies``: ``concurrency`` in flight as fast as possible, or (``rate`` requests/s) in
    an open loop at that rate."""
    sent = Sent([0.0] * len(bodies), [0.0] * len(bodies))
    async with grpc.aio.insecure_channel(endpoint, options=GRPC_OPTIONS) as channel:
        call = channel.unary_unary(TRACES_METHOD, request_serializer=None, response_deserializer=None)

        async def send(i: int) -> None:
            sent.first_send[i] = started = time.monotonic()
            while True:
                try:
                    await call(bodies[i], timeout=60)
                    break
                except grpc.aio.AioRpcError as err:
                    if err.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
                    sent.overloaded += 1
                    await asyncio.sleep(0.05)  # the target is full: back off, as an SDK would
            sent.rpc[i] = time.monotonic() - started

        if rate is None:
            queue = iter(range(len(bodies)))

            async def worker() -> None:
                for i in queue:
                    await send(i)

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        else:
            tasks = []
            start = time.monotonic()
            for i in range(len(bodies)):
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(send(i)))
            await asyncio.gather(*tasks)
    return sent


# ----------------------------------------------------------------------------------------------
# Measuring a target
# ----------------------------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


@dataclass
class PhaseResult:
    turns: int
    spans: int
    wall: float
    cpu: float
    overloaded: int
    latencies_ms: list[float] = field(default_factory=list)
    rpc_ms: list[float] = field(default_factory=list)
    thread_cpu: dict[str, float] = field(default_factory=dict)  # seconds by thread (the sidecar's)
    downstream_requests: int = 0  # export requests the sink received in the phase

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.wall


def run_phase(
    name: str,
    endpoint: str,
    pid: int,
    sink: Sink,
    turns: list[Turn],
    concurrency: int,
    rate: float | None,
    threads: Callable[[], dict[str, float]] | None = None,
) -> PhaseResult:
    spans = sum(turn.spans for turn in turns)
    bodies = [turn.body for turn in turns]
    pace = f"paced at {rate:,.1f} turns/s" if rate else f"unpaced, {concurrency} in flight"
    log(f"{name}: {len(turns):,} turns, {spans:,} spans, {pace}...")
    threads_before = threads() if threads else {}
    cpu_before = cpu_seconds(pid)
    started = time.monotonic()
    sent = asyncio.run(drive(endpoint, bodies, concurrency, rate))
    sink.wait_for(spans, timeout=600)
    wall = time.monotonic() - started
    cpu = cpu_seconds(pid) - cpu_before
    threads_after = threads() if threads else {}
    thread_cpu = {name: spent - threads_before.get(name, 0.0) for name, spent in threads_after.items()}
    arrivals, downstream_requests = sink.take()
    latencies = []
    for turn, first in zip(turns, sent.first_send, strict=True):
        n, at = arrivals[turn.trace_id]
        assert n == turn.spans, f"trace {turn.trace_id.hex()}: {n} spans at the sink, sent {turn.spans}"
        latencies.append((at - first) * 1000)
    result = PhaseResult(
        len(turns),
        spans,
        wall,
        cpu,
        sent.overloaded,
        latencies,
        [s * 1000 for s in sent.rpc],
        thread_cpu,
        downstream_requests,
    )
    log(
        f"{name}: {wall:.1f} s, {result.turns_per_s:,.1f} turns/s, CPU {cpu:.1f} s "
        f"({cpu / len(turns) * 1000:.2f} ms/turn), {sent.overloaded:,} overload answers, latency p50 "
        f"{percentile(latencies, 50):.0f} ms p99 {percentile(latencies, 99):.0f} ms"
    )
    return result


@dataclass
class TargetResult:
    unpaced: PhaseResult
    paced: PhaseResult
    peak_rss_kib: int
    rss_growth_kib: int = 0
    sessions: float = 0.0
    sessions_cold: float = 0.0  # of them, cold at the end (idle for sessions.cold_after, or over max_bytes)
    sessions_estimated_bytes: float = 0.0
    gc_worst_pause_ms: float = 0.0
    stage_latencies_ms: dict[str, float] = field(default_factory=dict)  # paced phase, bucket bounds
    # otelsignals_malloc_bytes{state} (glibc only) when ready and at the end, bytes by state.
    malloc_ready: dict[str, float] = field(default_factory=dict)
    malloc_end: dict[str, float] = field(default_factory=dict)


Buckets = dict[str, list[tuple[float, float]]]  # label value -> [(upper bound, cumulative count)]


def histogram(sidecar: Any, name: str, label: str) -> Buckets:
    """The sidecar's histogram ``name`` as it stands, by the value of its ``label``."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{sidecar.admin_url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found: Buckets = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                found.setdefault(sample.labels[label], []).append((float(sample.labels["le"]), sample.value))
    return {key: sorted(buckets) for key, buckets in found.items()}


def bucket_quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """The upper bound (ms) of the bucket that holds the ``q``-quantile; 0 when empty."""
    total = buckets[-1][1] if buckets else 0.0
    if not total:
        return 0.0
    return next(bound for bound, count in buckets if count >= q * total) * 1000


def since(now: Buckets, before: Buckets) -> Buckets:
    """What was observed between two readings of a histogram."""
    return {
        key: [(bound, count - dict(before.get(key, [])).get(bound, 0.0)) for bound, count in buckets]
        for key, buckets in now.items()
    }


MALLOC_STATES = ("in_use", "free", "mmapped")


def thread_seconds(sidecar: Any) -> dict[str, float]:
    """otelsignals_thread_cpu_seconds_total by thread, as it stands."""
    prefix = 'otelsignals_thread_cpu_seconds_total{thread="'
    return {
        key[len(prefix) : -2]: value for key, value in sidecar.metrics().items() if key.startswith(prefix)
    }


def malloc_bytes(sidecar: Any) -> dict[str, float]:
    """The sidecar's otelsignals_malloc_bytes by state (empty where glibc is not the allocator)."""
    figures = {state: sidecar.metric("otelsignals_malloc_bytes", state=state) for state in MALLOC_STATES}
    return figures if any(figures.values()) else {}


def gc_worst_pause_ms(sidecar: Any) -> float:
    """The upper bound of the highest otelsignals_gc_pause_seconds bucket that holds a pause."""
    by_generation = histogram(sidecar, "otelsignals_gc_pause_seconds", "generation")
    log(
        "GC pauses by generation (count, worst bucket bound ms): "
        + ", ".join(
            f"{generation}: {int(buckets[-1][1])}, {bucket_quantile(buckets, 1.0):.0f}"
            for generation, buckets in sorted(by_generation.items())
        )
    )
    return max((bucket_quantile(buckets, 1.0) for buckets in by_generation.values()), default=0.0)


def stage_latencies(sidecar: Any) -> tuple[Buckets, Buckets]:
    """The sidecar's stage latency histograms: the analysis stage's phases, the exporter's delivery."""
    return (
        histogram(sidecar, "otelsignals_analysis_seconds", "phase"),
        histogram(sidecar, "otelsignals_exporter_delivery_seconds", "signal"),
    )


def config_overrides(settings: list[str]) -> dict[str, Any]:
    """``--set SECTION.KEY[.KEY…]=VALUE`` settings as nested sections (each VALUE read as YAML)."""
    sections: dict[str, Any] = {}
    for setting in settings:
        path, equals, value = setting.partition("=")
        keys = path.split(".")
        if not equals or len(keys) < 2 or not all(keys):
            raise SystemExit(f"--set {setting!r}: expected SECTION.KEY=VALUE")
        node = sections
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = yaml.safe_load(value)
    return sections


def merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes`` laid over it, nested sections merged key by key."""
    result = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def run_sidecar(
    workload: Workload,
    sink: Sink,
    concurrency: int,
    compression: str,
    load: float,
    overrides: dict[str, Any] | None = None,
) -> TargetResult:
    from tests.support.sidecar import SidecarProcess

    workdir = Path(tempfile.mkdtemp(prefix="otelsignals-agent-bench-"))
    # SidecarProcess sets short test timings: put the embedded defaults back.
    defaults = load_config(None, environ={})
    retry = defaults.exporter.retry
    sidecar = SidecarProcess(
        workdir,
        {
            "endpoint": sink.endpoint,
            "compression": compression,
            "batch": {"timeout": f"{defaults.exporter.batch.timeout}s"},
            "retry": {
                "initial_interval": f"{retry.initial_interval}s",
                "max_interval": f"{retry.max_interval}s",
            },
        },
        assembler={
            "decision_wait": f"{defaults.assembler.decision_wait}s",
            "tick_interval": f"{defaults.assembler.tick_interval}s",
        },
        service={"shutdown_timeout": f"{defaults.service.shutdown_timeout}s"},
    )
    sidecar.config = merged(sidecar.config, overrides or {})
    log("starting the sidecar (loads the embedding model)...")
    sidecar.start(timeout=180)
    try:
        assert sidecar.process is not None
        pid = sidecar.process.pid
        time.sleep(1.0)
        rss_ready = status_kib(pid, "VmRSS")
        malloc_ready = malloc_bytes(sidecar)
        threads = functools.partial(thread_seconds, sidecar)
        unpaced = run_phase(
            "sidecar unpaced",
            sidecar.grpc_endpoint,
            pid,
            sink,
            workload.phases[0],
            concurrency,
            None,
            threads,
        )
        time.sleep(0.5)
        analysis_before, export_before = stage_latencies(sidecar)
        paced = run_phase(
            "sidecar paced",
            sidecar.grpc_endpoint,
            pid,
            sink,
            workload.phases[1],
            concurrency,
            unpaced.turns_per_s * load,
            threads,
        )
        time.sleep(0.5)
        analysis_after, export_after = stage_latencies(sidecar)
        # The paced phase's share of each stage's latency, as bucket bounds (ms).
        stages: dict[str, float] = {}
        for phase, buckets in since(analysis_after, analysis_before).items():
            stages[f"analysis_{phase}_p50_ms"] = bucket_quantile(buckets, 0.5)
            stages[f"analysis_{phase}_p99_ms"] = bucket_quantile(buckets, 0.99)
        traces = since(export_after, export_before).get("traces", [])
        stages["export_delivery_p50_ms"] = bucket_quantile(traces, 0.5)
        stages["export_delivery_p99_ms"] = bucket_quantile(traces, 0.99)
        sessions = sidecar.metric("otelsignals_sessions_active")
        cold = sidecar.metric("otelsignals_sessions_cold")
        estimated = sidecar.metric("otelsignals_sessions_bytes")
        worst_gc = gc_worst_pause_ms(sidecar)
        dropped = sidecar.metric("otelsignals_dropped_spans_total")
        evicted = sidecar.metric("otelsignals_assembler_evicted_traces_total")
        released = sidecar.metric("otelsignals_assembler_released_traces_total", reason="complete")
        analysed = sidecar.metric("otelsignals_analysed_turns_total")
        compacted = sidecar.metric("otelsignals_sessions_compacted_messages_total")
        expanded = sidecar.metric("otelsignals_sessions_compacted_reads_total")
        log(
            f"sidecar: {released:,.0f} traces released complete, {analysed:,.0f} turns analysed, "
            f"{evicted:,.0f} evicted, {dropped:,.0f} spans dropped, {sessions:,.0f} sessions held "
            f"({cold:,.0f} cold), "
            f"{compacted:,.0f} messages compacted, {expanded:,.0f} compacted texts read back"
        )
        return TargetResult(
            unpaced,
            paced,
            status_kib(pid, "VmHWM"),
            status_kib(pid, "VmRSS") - rss_ready,
            sessions,
            cold,
            estimated,
            worst_gc,
            stages,
            malloc_ready,
            malloc_bytes(sidecar),
        )
    finally:
        with contextlib.suppress(Exception):
            sidecar.stop()
        if sidecar.process is not None and sidecar.process.poll() is None:
            sidecar.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def run_bare(workload: Workload, sink: Sink, concurrency: int, compression: str, rate: float) -> TargetResult:
    forwarder = BareForwarder(sink.endpoint, compression)
    try:
        pid = forwarder.process.pid
        unpaced = run_phase(
            "bare unpaced", forwarder.endpoint, pid, sink, workload.phases[0], concurrency, None
        )
        paced = run_phase("bare paced", forwarder.endpoint, pid, sink, workload.phases[1], concurrency, rate)
        return TargetResult(unpaced, paced, status_kib(pid, "VmHWM"))
    finally:
        forwarder.stop()


# ----------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------
def summary(target: TargetResult) -> dict[str, float]:
    u, p = target.unpaced, target.paced
    out = {
        "max_turns_per_s": u.turns_per_s,
        "max_spans_per_s": u.spans / u.wall,
        "cpu_ms_per_turn": u.cpu / u.turns * 1000,
        "cpu_ms_per_turn_paced": p.cpu / p.turns * 1000,
        "turns_per_cpu_s": u.turns / u.cpu,
        "spans_per_cpu_s": u.spans / u.cpu,
        "paced_turns_per_s": p.turns_per_s,
        "latency_p50_ms": percentile(p.latencies_ms, 50),
        "latency_p99_ms": percentile(p.latencies_ms, 99),
        "latency_max_ms": max(p.latencies_ms),
        "rpc_p50_ms": percentile(p.rpc_ms, 50),
        "rpc_p99_ms": percentile(p.rpc_ms, 99),
        "export_requests_per_turn_paced": p.downstream_requests / p.turns,
        "overload_answers": u.overloaded + p.overloaded,
        "peak_rss_mib": target.peak_rss_kib / 1024,
    }
    if target.sessions:
        out["rss_growth_mib"] = target.rss_growth_kib / 1024
        out["sessions_held"] = target.sessions
        out["sessions_cold"] = target.sessions_cold
        out["rss_kib_per_conversation"] = target.rss_growth_kib / target.sessions
        out["estimated_kib_per_conversation"] = target.sessions_estimated_bytes / 1024 / target.sessions
    if target.malloc_end:
        ready, end = target.malloc_ready, target.malloc_end
        out["malloc_in_use_growth_mib"] = (end["in_use"] - ready["in_use"]) / 2**20
        out["malloc_free_growth_mib"] = (end["free"] - ready["free"]) / 2**20
        out["malloc_mmapped_growth_mib"] = (end["mmapped"] - ready["mmapped"]) / 2**20
    if target.gc_worst_pause_ms:
        out["gc_worst_pause_ms"] = target.gc_worst_pause_ms
    out.update(target.stage_latencies_ms)
    for phase_name, phase in (("unpaced", u), ("paced", p)):
        for thread, seconds in phase.thread_cpu.items():
            out[f"{THREAD_KEY}{phase_name}:{thread}"] = seconds / phase.turns * 1000
    return out


THREAD_KEY = "cpu_ms_per_turn_by_thread:"


def print_threads(sidecar: dict[str, float]) -> None:
    """The sidecar's CPU per turn by thread (otelsignals_thread_cpu_seconds_total), both phases."""
    by_thread: dict[str, dict[str, float]] = {}
    for key, value in sidecar.items():
        if key.startswith(THREAD_KEY):
            phase, thread = key[len(THREAD_KEY) :].split(":", 1)
            by_thread.setdefault(thread, {})[phase] = value
    shown = [(t, v) for t, v in by_thread.items() if max(v.values()) >= 0.005]
    if not shown:
        return
    print()
    print("| sidecar thread | CPU per turn, unpaced (ms) | CPU per turn, paced (ms) |")
    print("|---|---|---|")
    for thread, values in sorted(shown, key=lambda item: -item[1].get("paced", 0.0)):
        print(f"| {thread} | {values.get('unpaced', 0.0):.2f} | {values.get('paced', 0.0):.2f} |")


ROWS = (
    ("max_turns_per_s", "max throughput, unpaced (turns/s, wall)", "{:,.0f}"),
    ("max_spans_per_s", "max throughput, unpaced (spans/s, wall)", "{:,.0f}"),
    ("cpu_ms_per_turn", "CPU per turn, unpaced (ms)", "{:.2f}"),
    ("cpu_ms_per_turn_paced", "CPU per turn, paced (ms)", "{:.2f}"),
    ("turns_per_cpu_s", "turns per CPU-second", "{:,.0f}"),
    ("spans_per_cpu_s", "spans per CPU-second", "{:,.0f}"),
    ("paced_turns_per_s", "paced load (turns/s)", "{:,.1f}"),
    ("latency_p50_ms", "added latency p50 (ms): send → last span at the sink", "{:,.1f}"),
    ("latency_p99_ms", "added latency p99 (ms)", "{:,.1f}"),
    ("latency_max_ms", "added latency max (ms)", "{:,.1f}"),
    ("rpc_p50_ms", "export RPC p50 (ms)", "{:,.2f}"),
    ("rpc_p99_ms", "export RPC p99 (ms)", "{:,.2f}"),
    ("export_requests_per_turn_paced", "paced phase: requests the downstream received per turn", "{:.2f}"),
    ("overload_answers", "UNAVAILABLE answers (retried)", "{:,.0f}"),
    ("peak_rss_mib", "peak RSS, VmHWM (MiB)", "{:,.0f}"),
    ("rss_growth_mib", "RSS growth, ready → end (MiB)", "{:,.0f}"),
    ("sessions_held", "conversations held (otelsignals_sessions_active)", "{:,.0f}"),
    ("sessions_cold", "of them, cold at the end (otelsignals_sessions_cold)", "{:,.0f}"),
    ("rss_kib_per_conversation", "RSS per open conversation (KiB)", "{:,.0f}"),
    ("estimated_kib_per_conversation", "estimated per conversation, sessions_bytes (KiB)", "{:,.0f}"),
    ("malloc_in_use_growth_mib", "C allocator, in use: growth ready → end (MiB)", "{:,.0f}"),
    ("malloc_free_growth_mib", "C allocator, freed and kept: growth ready → end (MiB)", "{:,.0f}"),
    ("malloc_mmapped_growth_mib", "C allocator, mapped blocks: growth ready → end (MiB)", "{:,.0f}"),
    ("gc_worst_pause_ms", "worst GC pause, histogram bucket bound (ms)", "{:,.0f}"),
    (
        "analysis_queued_p50_ms",
        "paced phase: waiting for the analysis thread, p50 (ms, histogram bucket bound)",
        "{:,.1f}",
    ),
    (
        "analysis_queued_p99_ms",
        "paced phase: waiting for the analysis thread, p99 (ms, histogram bucket bound)",
        "{:,.1f}",
    ),
    (
        "analysis_running_p50_ms",
        "paced phase: analysing a trace (wall), p50 (ms, histogram bucket bound)",
        "{:,.1f}",
    ),
    (
        "analysis_running_p99_ms",
        "paced phase: analysing a trace (wall), p99 (ms, histogram bucket bound)",
        "{:,.1f}",
    ),
    (
        "analysis_total_p50_ms",
        "paced phase: in the analysis stage in all, p50 (ms, histogram bucket bound)",
        "{:,.1f}",
    ),
    (
        "analysis_total_p99_ms",
        "paced phase: in the analysis stage in all, p99 (ms, histogram bucket bound)",
        "{:,.1f}",
    ),
    (
        "export_delivery_p50_ms",
        "paced phase: export queue → the downstream's answer, p50 (ms, histogram bucket bound)",
        "{:,.1f}",
    ),
    (
        "export_delivery_p99_ms",
        "paced phase: export queue → the downstream's answer, p99 (ms, histogram bucket bound)",
        "{:,.1f}",
    ),
)


def print_report(
    workload_line: str, sidecar: dict[str, float], bare: dict[str, float], compression: str
) -> None:
    print(workload_line)
    print()
    print("| metric | sidecar | bare forwarder | sidecar / bare |")
    print("|---|---|---|---|")
    for key, label, fmt in ROWS:
        if key not in sidecar and key not in bare:
            continue
        s = fmt.format(sidecar[key]) if key in sidecar else "–"
        b = fmt.format(bare[key]) if key in bare else "–"
        ratio = f"{sidecar[key] / bare[key]:.2f}" if key in sidecar and key in bare and bare[key] else "–"
        print(f"| {label} | {s} | {b} | {ratio} |")
    print_threads(sidecar)
    print()
    batch_timeout_ms = load_config(None, environ={}).exporter.batch.timeout * 1000
    print(
        f"Compression towards the sink: {compression} (both). CPU: the target process's utime + stime "
        "(all threads, grpc's included) from the first request sent to the last span at the sink. "
        "Latency: paced phase (open loop, the same rate for both), a trace's first send → its last "
        "span received by the sink; the sidecar's includes its export batching (up to "
        f"exporter.batch.timeout, {batch_timeout_ms:g} ms by default). RSS per conversation: RSS "
        "growth from ready to the end (allocator slack and the last requests' buffers included) / "
        "conversations held."
    )


def describe(workload: Workload, conversations: int, active: int) -> str:
    turns = workload.turns
    spans = sum(t.spans for t in turns)
    size = sum(len(t.body) for t in turns)
    largest = max(len(t.body) for t in turns)
    return (
        f"Workload: {conversations:,} conversations ({active} open at once per phase), {len(turns):,} "
        f"turns, {spans:,} spans ({spans / len(turns):.1f} per turn), {size / 2**20:,.0f} MiB of OTLP "
        f"({size / len(turns) / 1024:,.0f} KiB per turn, largest {largest / 1024:,.0f} KiB); "
        f"{os.cpu_count()} cores."
    )


# ----------------------------------------------------------------------------------------------
# --profile: the sidecar's stages in this process
# ----------------------------------------------------------------------------------------------
INDEX_FLUSH_TURNS = 50  # --profile: turns between two index writes
STAGES = (
    "parse",
    "assemble",
    "read",
    "detect",
    "score + rank",
    "trace metrics",
    "analyzer other",
    "enrich",
    "index",
    "encode",
    "gzip",
)


def profile(
    workload: Workload, top: int, compression: str, cold: bool = False, sort: str = "cumulative"
) -> dict[str, Any]:
    """``cold``: every conversation goes cold before each turn (sessions.cold_after: each turn comes
    after an idle pause), the sweep timed as the stage "cool"."""
    import otelsignals.analysis as analysis_module
    from otelsignals.otlp.wire import SpanRecord, encode_request, split_by_size, split_request
    from otelsignals.pipeline.analyzer import Analyzer
    from otelsignals.pipeline.assembler import Assembler, ReleasedTrace
    from otelsignals.pipeline.enricher import Enricher
    from otelsignals.pipeline.index_writer import IndexWriter
    from otelsignals.pipeline.senders import gzip_fast
    from otelsignals.signals.detect import warm_up
    from otelsignals.stores.conversation_index import open_index
    from otelsignals.telemetry import Telemetry

    config = load_config(None, environ={})
    turns = workload.turns
    timers = dict.fromkeys((*STAGES, "cool") if cold else STAGES, 0.0)
    # CPU time of this thread: on shared cores, wall time moves with the other jobs' load.
    clock = time.thread_time

    def timed(stage: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return function(*args, **kwargs)
            finally:
                timers[stage] += clock() - started

        return wrapper

    # The analysis' inner stages, timed where the pipeline calls them (module globals and methods).
    patches: list[tuple[Any, str, str]] = [
        (analysis_module, "detect", "detect"),
        (analysis_module, "score", "score + rank"),
        (analysis_module, "rank", "score + rank"),
        (Analyzer, "assemble", "read"),
        (Analyzer, "_record_trace", "trace metrics"),
    ]
    originals = [getattr(owner, name) for owner, name, _ in patches]

    def run(profiler: cProfile.Profile | None) -> float:
        """The pipeline's path for every turn; returns the seconds it took."""
        analyzer = Analyzer(Telemetry(), config.sessions, config.signals, config.evals, config.analyzer)
        enricher = Enricher(config.signals)
        # The conversation index as the sidecar writes it: a row per analysed turn, a batch per
        # flush (about one a second at this workload's ~50 turns/s), an SQLite file.
        index_dir = tempfile.mkdtemp(prefix="otelsignals-profile-index-")
        from prometheus_client import CollectorRegistry

        index_writer = IndexWriter(
            config.index, open_index(f"sqlite:///{index_dir}/index.db"), CollectorRegistry(), False
        )
        released: list[ReleasedTrace] = []
        assembler = Assembler(released.append, lambda record: None, decision_wait=2.0)
        pending: list[SpanRecord] = []
        pending_bytes = 0
        batch = config.exporter.batch
        warm_up()
        if analyzer.embedder is not None:
            analyzer.embedder.embed(["warm up"])
        for key in timers:
            timers[key] = 0.0

        def export(records: list[SpanRecord]) -> None:
            """The exporter's batch encoding, and its gzip (the exporter's own function, on either
            transport) unless ``--compression none``."""
            for chunk in split_by_size(records, batch.max_bytes):
                body = encode_request(chunk)
                if compression == "gzip":
                    started = clock()
                    gzip_fast(body)
                    timers["gzip"] += clock() - started

        indexed_turns = 0
        if profiler is not None:
            profiler.enable()
        started = clock()
        for turn in turns:
            if cold:
                t0 = clock()
                analyzer.sessions.cool_idle(now=math.inf)
                timers["cool"] += clock() - t0
            t0 = clock()
            split = split_request(ExportTraceServiceRequest.FromString(turn.body), raw=turn.body)
            analyzer.mark_spans(split, turn.body)  # as the sidecar's intake does
            t1 = clock()
            assembler.add(split.records)
            t2 = clock()
            timers["parse"] += t1 - t0
            timers["assemble"] += t2 - t1
            for trace in released:
                t3 = clock()
                result = analyzer.process(trace)
                t4 = clock()
                timers["analyzer other"] += t4 - t3
                if result is not None:
                    enricher.enrich(trace, result)
                t5 = clock()
                timers["enrich"] += t5 - t4
                if result is not None:
                    state = analyzer.sessions.get(result.conversation_id)
                    if state is not None:
                        index_writer.record(state, current=result.score)
                    indexed_turns += 1
                    if indexed_turns % INDEX_FLUSH_TURNS == 0:
                        index_writer.flush()
                t5b = clock()
                timers["index"] += t5b - t5
                t5 = t5b
                pending.extend(trace.spans)
                pending_bytes += trace.size
                if len(pending) >= batch.max_spans or pending_bytes >= batch.max_bytes:
                    export(pending)
                    pending, pending_bytes = [], 0
                timers["encode"] += clock() - t5
            released.clear()
        t6 = clock()
        export(pending)  # the last batch: its encoding counted as the others' (its gzip is taken off below)
        timers["encode"] += clock() - t6
        index_writer.flush()
        index_writer.index.close()
        shutil.rmtree(index_dir, ignore_errors=True)
        elapsed = clock() - started
        if profiler is not None:
            profiler.disable()
        timers["encode"] -= timers["gzip"]
        inner = timers["read"] + timers["detect"] + timers["score + rank"] + timers["trace metrics"]
        timers["analyzer other"] -= inner
        return elapsed

    for (owner, name, stage), original in zip(patches, originals, strict=True):
        setattr(owner, name, timed(stage, original))
    try:
        log(f"profile: {len(turns):,} turns through the stages, timed...")
        elapsed = run(None)
    finally:
        for (owner, name, _), original in zip(patches, originals, strict=True):
            setattr(owner, name, original)
    per_turn = {stage: seconds / len(turns) * 1e6 for stage, seconds in timers.items()}
    log("profile: again under cProfile...")
    profiler = cProfile.Profile()
    run(profiler)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats(sort).print_stats(top)
    return {"turns": len(turns), "elapsed_s": elapsed, "us_per_turn": per_turn, "cprofile": text.getvalue()}


def print_profile(result: dict[str, Any], workload_line: str) -> None:
    print(workload_line)
    print()
    total = sum(result["us_per_turn"].values())
    print(
        f"In-process, one thread, {result['turns']:,} turns: {result['elapsed_s']:.1f} s of CPU, "
        f"{result['elapsed_s'] / result['turns'] * 1e6:,.0f} µs per turn."
    )
    print()
    print("| stage | µs of CPU per turn | share |")
    print("|---|---|---|")
    for stage, us in result["us_per_turn"].items():
        print(f"| {stage} | {us:,.0f} | {us / total:.0%} |")
    print(f"| total | {total:,.0f} | |")
    print()
    print("```")
    lines = result["cprofile"].strip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    print("\n".join(lines[start:]))
    print("```")


# ----------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--conversations",
        type=int,
        help=f"default {DEFAULT_CONVERSATIONS} (a run of about 7 minutes on 2 cores); --profile: 100",
    )
    parser.add_argument("--quick", action="store_true", help="100 conversations: a smoke run")
    parser.add_argument("--active", type=int, default=200, help="conversations open at once (per phase)")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight when unpaced")
    parser.add_argument("--load", type=float, default=0.5, help="paced load, share of the sidecar's max")
    parser.add_argument(
        "--compression",
        choices=["gzip", "none"],
        default="gzip",
        help="towards the downstream, for both targets (gzip: the sidecar's default)",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--profile", action="store_true", help="the sidecar's stages in-process instead")
    parser.add_argument("--top", type=int, default=25, help="--profile: functions listed")
    parser.add_argument(
        "--sort",
        choices=("cumulative", "tottime"),
        default="cumulative",
        help="--profile: the functions' order (tottime: by their own time)",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="--profile: every conversation goes cold before each turn (sessions.cold_after)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="the sidecar's configuration changed (repeatable), e.g. evals.trace_metrics=false",
    )
    parser.add_argument("--bare-forwarder", nargs=2, metavar=("PORT", "DOWNSTREAM"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.bare_forwarder:
        port, downstream = args.bare_forwarder
        asyncio.run(bare_forwarder(int(port), downstream, args.compression))
        return
    conversations = args.conversations or (100 if args.quick or args.profile else DEFAULT_CONVERSATIONS)
    active = min(args.active, max(1, conversations // 2))

    log(f"generating {conversations:,} conversations (seed {args.seed})...")
    started = time.monotonic()
    workload = build_workload(conversations, active, args.seed)
    line = describe(workload, conversations, active)
    log(f"{line} Generated in {time.monotonic() - started:.1f} s.")

    overrides = config_overrides(args.set)
    if args.profile and overrides:
        parser.error("--set changes the running sidecar; --profile runs the stages with the defaults")
    if args.profile:
        result = profile(workload, args.top, args.compression, args.cold, args.sort)
        print_profile(result, line)
        if args.json:
            args.json.write_text(json.dumps({"workload": line, **result}, indent=2))
        return

    sink = Sink()
    try:
        sidecar = run_sidecar(workload, sink, args.concurrency, args.compression, args.load, overrides)
        rate = sidecar.unpaced.turns_per_s * args.load
        bare = run_bare(workload, sink, args.concurrency, args.compression, rate)
    finally:
        sink.stop()
    s, b = summary(sidecar), summary(bare)
    if args.set:
        line += f" Sidecar configuration changed: {', '.join(args.set)}."
    print_report(line, s, b, args.compression)
    if args.json:
        settings = {
            "conversations": conversations,
            "active": active,
            "seed": args.seed,
            "concurrency": args.concurrency,
            "load": args.load,
            "compression": args.compression,
            "set": args.set,
        }
        report = {"workload": line, "settings": settings, "sidecar": s, "bare": b}
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
