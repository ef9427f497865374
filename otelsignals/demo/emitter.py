"""Emits one demo conversation as OpenTelemetry spans, one trace per turn, with explicit timestamps
(the trace shape is described in :mod:`otelsignals.demo.traffic`)."""

from __future__ import annotations

import hashlib
import random
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from otelsignals.demo.encoding import (
    PROVIDER,
    RESPONSE_MODELS,
    dumps,
    encode_llm,
    session_attrs,
    tokens,
    vercel_message,
)

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
NS_PER_MIN = 60 * NS_PER_S

# Instrumentation scopes, as the real libraries name them.
_SCOPE_WEB = ("opentelemetry.instrumentation.fastapi", "0.54b1")
_SCOPE_DB = ("opentelemetry.instrumentation.asyncpg", "0.54b1")
_SCOPE_HTTPX = ("opentelemetry.instrumentation.httpx", "0.54b1")
_SCOPE_LLM = {
    "genai": ("opentelemetry.instrumentation.openai_v2", "2.1b0"),
    "genai_events": ("opentelemetry.instrumentation.openai_v2", "2.0b0"),
    "openllmetry": ("opentelemetry.instrumentation.openai.v1", "0.40.14"),
    "openinference": ("openinference.instrumentation.openai", "0.1.30"),
    "vercel_ai": ("ai", None),
}
_SCOPE_AGENT = {
    "openllmetry": ("traceloop.tracer", None),
    "vercel_ai": ("app.agent", None),
}
_SCOPE_AGENT_DEFAULT = ("app.agent", None)


class ConversationEmitter:
    """Emits one conversation (one trace per turn) into a provider, with explicit timestamps."""

    def __init__(
        self,
        conv: dict,
        provider: TracerProvider,
        tracers: dict[tuple[str, str | None], Tracer],
        round_no: int,
        start_ns: int,
    ) -> None:
        self.conv = conv
        self.convention: str = conv["convention"]
        self.provider = provider
        self.round_no = round_no
        self.clock = start_ns
        session = conv["session_id"]
        self.session_id: str | None = (
            f"{session}-r{round_no}" if session is not None and round_no > 0 else session
        )
        self.model: str = conv["model"]
        self.response_model = RESPONSE_MODELS.get(self.model, self.model)
        self.agent_name: str = conv["agent_name"]
        self.agent_id = "agt_" + _digest(conv["service_name"], self.agent_name)[:12]
        self.system: str = conv.get("system_prompt") or f"You are {self.agent_name}, a helpful assistant."
        self.rng = random.Random(f"{conv['id']}:{round_no}")
        self.user_id = "u_" + _digest(conv["id"], "user")[:8]
        octets = bytes.fromhex(_digest(conv["id"], "client")[:6])
        self.client_address = f"10.{octets[0] % 64 + 16}.{octets[1]}.{octets[2] % 254 + 1}"
        self.history: list[dict] = []
        self.session = session_attrs(self.convention, self.session_id)
        self._tracers = tracers
        self._seq = 0

    # -- helpers

    def _tracer(self, scope: tuple[str, str | None]) -> Tracer:
        tracer = self._tracers.get(scope)
        if tracer is None:
            tracer = self._tracers[scope] = self.provider.get_tracer(scope[0], scope[1])
        return tracer

    def _id(self, prefix: str, size: int = 24) -> str:
        self._seq += 1
        return prefix + _digest(self.conv["id"], str(self.round_no), str(self._seq))[:size]

    def _start(
        self,
        scope: tuple[str, str | None],
        name: str,
        parent: Span | None,
        kind: SpanKind,
        start_ns: int,
        attrs: dict[str, Any],
    ) -> Span:
        ctx = trace.set_span_in_context(parent) if parent is not None else Context()
        return self._tracer(scope).start_span(
            name, context=ctx, kind=kind, attributes=attrs, start_time=start_ns
        )

    def _ms(self, low: float, high: float) -> int:
        return int(self.rng.uniform(low, high) * NS_PER_MS)

    @staticmethod
    def _fail(span: Span, err: dict, at_ns: int) -> None:
        span.set_status(Status(StatusCode.ERROR, err["message"]))
        span.set_attribute("error.type", err["type"])
        if err.get("http_status") is not None:
            span.set_attribute("http.response.status_code", err["http_status"])
        span.add_event(
            "exception",
            {"exception.type": err.get("exception_type", err["type"]), "exception.message": err["message"]},
            timestamp=at_ns,
        )

    # -- conversation

    def emit(self) -> int:
        for index, turn in enumerate(self.conv["turns"]):
            turn_start = self.clock
            turn_end = self._emit_turn(index, turn, turn_start)
            gap = int(self.rng.uniform(1.5, 4.0) * NS_PER_MIN)
            self.clock = max(turn_end + 15 * NS_PER_S, turn_start + gap)
        return len(self.conv["turns"])

    def _emit_turn(self, index: int, turn: dict, t0: int) -> int:
        conv, convention = self.conv, self.convention
        failed = "llm_error" in turn["steps"][-1]
        status_code = 500 if failed else 200
        root = self._start(
            _SCOPE_WEB,
            "POST /chat",
            None,
            SpanKind.SERVER,
            t0,
            {
                "http.request.method": "POST",
                "http.route": "/chat",
                "url.path": "/chat",
                "url.scheme": "https",
                "server.address": f"{conv['service_name']}.example.com",
                "server.port": 443,
                "client.address": self.client_address,
                "user_agent.original": "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15",
                "http.response.status_code": status_code,
                "otelsignals.demo.conversation_id": conv["id"],
            },
        )
        if failed:
            root.set_status(Status(StatusCode.ERROR))
            root.set_attribute("error.type", str(status_code))

        # The web handler loads the stored history before calling the agent.
        t = t0 + self._ms(1, 3)
        db_end = t + self._ms(2, 14)
        db = self._start(
            _SCOPE_DB,
            "SELECT chat_history",
            root,
            SpanKind.CLIENT,
            t,
            {
                "db.system.name": "postgresql",
                "db.namespace": "agents",
                "db.collection.name": "chat_history",
                "db.operation.name": "SELECT",
                "db.query.text": "SELECT role, body, created_at FROM chat_history WHERE session_key = $1 "
                "ORDER BY created_at",
                "server.address": "pg-primary.internal",
                "server.port": 5432,
            },
        )
        db.end(end_time=db_end)

        t = db_end + self._ms(1, 3)
        agent = self._start(
            _SCOPE_AGENT.get(convention, _SCOPE_AGENT_DEFAULT),
            f"invoke_agent {self.agent_name}",
            root,
            SpanKind.INTERNAL,
            t,
            self._agent_attributes(turn),
        )

        # The agent fetches the user's preferences from an internal service.
        t += self._ms(1, 4)
        get_end = t + self._ms(12, 70)
        profile = self._start(
            _SCOPE_HTTPX,
            "GET",
            agent,
            SpanKind.CLIENT,
            t,
            {
                "http.request.method": "GET",
                "url.full": f"http://profile-svc.internal:8080/v1/users/{self.user_id}/preferences",
                "server.address": "profile-svc.internal",
                "server.port": 8080,
                "network.protocol.version": "1.1",
                "http.response.status_code": 200,
            },
        )
        profile.end(end_time=get_end)
        t = get_end + self._ms(1, 4)

        self.history.append({"role": "user", "content": turn["user"]})
        step_parent = agent
        generate: Span | None = None
        if convention == "vercel_ai":
            generate = self._start(
                _SCOPE_LLM["vercel_ai"],
                "ai.generateText",
                agent,
                SpanKind.INTERNAL,
                t,
                {
                    **self._vercel_common("ai.generateText"),
                    "ai.model.id": self.model,
                    "ai.model.provider": "openai.chat",
                    "ai.settings.maxSteps": 8,
                    "ai.prompt": dumps(
                        {"system": self.system, "messages": [vercel_message(m) for m in self.history]}
                    ),
                },
            )
            step_parent = generate
            t += self._ms(1, 3)

        final_text: str | None = None
        finish: str | None = None
        usage_in = usage_out = 0
        last_error: dict | None = None
        for step in turn["steps"]:
            if "llm_error" in step:
                last_error = step["llm_error"]
                t = self._emit_llm(step_parent, t, None, None, last_error)
                # The client backs off before the next attempt.
                t += self._ms(800, 2600)
                continue
            last_error = None
            calls = step.get("tool_calls") or []
            output: dict[str, Any] = {"role": "assistant", "content": step.get("text")}
            if calls:
                output["tool_calls"] = [
                    {"id": self._id("call_"), "name": c["name"], "arguments": c["arguments"]} for c in calls
                ]
            finish = "tool_calls" if calls else "stop"
            usage_in += tokens(self.history) + tokens(self.system)
            usage_out += tokens(output)
            t = self._emit_llm(step_parent, t, output, finish, None)
            self.history.append(output)
            if step.get("text") and not calls:
                final_text = step["text"]
            for call, tool_call in zip(calls, output.get("tool_calls", []), strict=True):
                t = self._emit_tool(step_parent, t, call, tool_call["id"])

        if generate is not None:
            t = self._end_generate(generate, t, last_error, finish, (usage_in, usage_out), final_text)

        if final_text is not None:
            agent.set_attributes(self._final_answer_attributes(final_text))
        if last_error is not None:
            self._fail(agent, last_error, t)
        t += self._ms(1, 5)
        agent.end(end_time=t)
        t += self._ms(1, 4)
        root.end(end_time=t)
        return t

    def _agent_attributes(self, turn: dict) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": self.agent_name,
            "gen_ai.agent.id": self.agent_id,
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": self.model,
        }
        convention = self.convention
        if convention != "vercel_ai":
            attrs.update(self.session)
        if convention == "openinference":
            attrs.update(
                {
                    "openinference.span.kind": "AGENT",
                    "input.value": turn["user"],
                    "input.mime_type": "text/plain",
                }
            )
        elif convention == "openllmetry":
            attrs.update(
                {
                    "traceloop.span.kind": "agent",
                    "traceloop.entity.name": self.agent_name,
                    "traceloop.workflow.name": self.agent_name,
                    "traceloop.entity.input": dumps({"args": [turn["user"]], "kwargs": {}}),
                }
            )
        return attrs

    def _end_generate(
        self,
        generate: Span,
        t: int,
        last_error: dict | None,
        finish: str | None,
        usage: tuple[int, int],
        final_text: str | None,
    ) -> int:
        """Ends the Vercel AI SDK's ai.generateText span with its outcome; returns the time after it."""
        if last_error is not None:
            self._fail(generate, last_error, t)
        else:
            generate.set_attributes(
                {
                    "ai.response.finishReason": "tool-calls" if finish == "tool_calls" else "stop",
                    "ai.usage.promptTokens": usage[0],
                    "ai.usage.completionTokens": usage[1],
                }
            )
            if final_text is not None:
                generate.set_attribute("ai.response.text", final_text)
        t += self._ms(1, 3)
        generate.end(end_time=t)
        return t

    def _final_answer_attributes(self, final_text: str) -> dict[str, Any]:
        if self.convention == "openinference":
            return {"output.value": final_text, "output.mime_type": "text/plain"}
        if self.convention == "openllmetry":
            return {"traceloop.entity.output": dumps(final_text)}
        return {}

    def _vercel_common(self, operation: str) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            "operation.name": f"{operation} {self.agent_name}",
            "ai.operationId": operation,
            "ai.telemetry.functionId": self.agent_name,
        }
        attrs.update(self.session)
        return attrs

    def _emit_llm(
        self, parent: Span, t: int, output: dict | None, finish: str | None, error: dict | None
    ) -> int:
        convention = self.convention
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": self.model,
            "gen_ai.request.temperature": 0.2,
            "server.address": "api.openai.com",
            "server.port": 443,
        }
        if convention in ("genai", "genai_events", "openllmetry", "openinference"):
            attrs.update(self.session)
        if convention == "openllmetry":
            attrs["traceloop.workflow.name"] = self.agent_name
        if convention == "vercel_ai":
            attrs.update(self._vercel_common("ai.generateText.doGenerate"))
            attrs.update(
                {
                    "ai.model.id": self.model,
                    "ai.model.provider": "openai.chat",
                    "gen_ai.system": "openai.chat",
                }
            )
        encoded, events = encode_llm(convention, self.system, self.history, output, finish, self.model)
        attrs.update(encoded)

        input_tokens = tokens(self.history) + tokens(self.system) + 12
        if error is not None:
            if error.get("input_tokens"):
                attrs["gen_ai.usage.input_tokens"] = int(error["input_tokens"])
            status = error.get("http_status")
            duration = error.get("duration_ms") or (
                self.rng.uniform(2000, 3500)
                if status is not None and status >= 500
                else self.rng.uniform(120, 420)
            )
        else:
            assert output is not None and finish is not None
            output_tokens = tokens(output) + 3
            attrs.update(
                {
                    "gen_ai.response.model": self.response_model,
                    "gen_ai.response.id": self._id("chatcmpl-", 29),
                    "gen_ai.response.finish_reasons": [finish],
                    "gen_ai.usage.input_tokens": input_tokens,
                    "gen_ai.usage.output_tokens": output_tokens,
                }
            )
            if convention == "openllmetry":
                attrs["llm.usage.total_tokens"] = input_tokens + output_tokens
            elif convention == "openinference":
                attrs.update(
                    {
                        "llm.token_count.prompt": input_tokens,
                        "llm.token_count.completion": output_tokens,
                        "llm.token_count.total": input_tokens + output_tokens,
                    }
                )
            elif convention == "vercel_ai":
                attrs.update(
                    {
                        "ai.response.id": attrs["gen_ai.response.id"],
                        "ai.response.model": self.response_model,
                        "ai.usage.promptTokens": input_tokens,
                        "ai.usage.completionTokens": output_tokens,
                    }
                )
            duration = min(12_000.0, 280 + output_tokens * 16 + self.rng.uniform(0, 450))

        name = "ai.generateText.doGenerate" if convention == "vercel_ai" else f"chat {self.model}"
        span = self._start(_SCOPE_LLM[convention], name, parent, SpanKind.CLIENT, t, attrs)
        end = t + int(duration * NS_PER_MS)
        for event_name, event_attrs, at_end in events:
            span.add_event(event_name, event_attrs, timestamp=end if at_end else t)
        if error is not None:
            self._fail(span, error, end)
        span.end(end_time=end)
        return end + self._ms(2, 12)

    def _emit_tool(self, parent: Span, t: int, call: dict, call_id: str) -> int:
        convention = self.convention
        name, arguments = call["name"], call["arguments"]
        error: dict | None = call.get("error")
        result = call.get("result")
        if convention == "vercel_ai":
            span_name = "ai.toolCall"
            attrs: dict[str, Any] = {
                **self._vercel_common("ai.toolCall"),
                "ai.toolCall.name": name,
                "ai.toolCall.id": call_id,
                "ai.toolCall.args": dumps(arguments),
            }
            if error is None:
                attrs["ai.toolCall.result"] = dumps(result)
            scope = _SCOPE_LLM["vercel_ai"]
        else:
            span_name = f"execute_tool {name}"
            attrs = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.type": "function",
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.call.arguments": dumps(arguments),
            }
            if error is None:
                attrs["gen_ai.tool.call.result"] = dumps(result)
            attrs.update(self.session)
            if convention == "openinference":
                attrs.update(
                    {
                        "openinference.span.kind": "TOOL",
                        "tool.name": name,
                        "tool.parameters": dumps(arguments),
                        "input.value": dumps(arguments),
                        "input.mime_type": "application/json",
                    }
                )
                if error is None:
                    attrs.update({"output.value": dumps(result), "output.mime_type": "application/json"})
            elif convention == "openllmetry":
                attrs.update(
                    {
                        "traceloop.span.kind": "tool",
                        "traceloop.entity.name": name,
                        "traceloop.workflow.name": self.agent_name,
                        "traceloop.entity.input": dumps({"args": [], "kwargs": arguments}),
                    }
                )
                if error is None:
                    attrs["traceloop.entity.output"] = dumps(result)
            scope = _SCOPE_AGENT.get(convention, _SCOPE_AGENT_DEFAULT)

        if call.get("duration_ms") is not None:
            duration = float(call["duration_ms"])
        elif error is not None and error.get("duration_ms") is not None:
            duration = float(error["duration_ms"])
        elif error is not None:
            duration = self.rng.uniform(15, 260)
        else:
            duration = self.rng.uniform(60, 900)
        span = self._start(scope, span_name, parent, SpanKind.INTERNAL, t, attrs)
        end = t + int(duration * NS_PER_MS)
        if error is not None:
            self._fail(span, error, end)
        span.end(end_time=end)

        if error is None:
            content: Any = result
        else:
            content = {"error": error["type"], "message": error["message"]}
            if error.get("http_status") is not None:
                content["status"] = error["http_status"]
        message: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}
        if error is not None:
            message["is_error"] = True
        self.history.append(message)
        return end + self._ms(1, 6)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
