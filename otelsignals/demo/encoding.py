"""The demo's neutral messages written as each convention's span attributes and events.

Neutral messages: {"role": "system"|"user", "content": str}
                  {"role": "assistant", "content": str|None, "tool_calls": [{"id", "name", "arguments"}]}
                  {"role": "tool", "tool_call_id": str, "name": str, "content": <any JSON>}

The conventions, and where each puts the conversation key, are described in
:mod:`otelsignals.demo.traffic`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

PROVIDER = "openai"
RESPONSE_MODELS = {
    "gpt-4o": "gpt-4o-2024-08-06",
    "gpt-4o-mini": "gpt-4o-mini-2024-07-18",
    "gpt-4.1": "gpt-4.1-2025-04-14",
    "gpt-4.1-mini": "gpt-4.1-mini-2025-04-14",
}


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else dumps(value)


def _openai_message(msg: dict) -> dict:
    role = msg["role"]
    if role == "tool":
        return {"role": "tool", "tool_call_id": msg["tool_call_id"], "content": _as_text(msg["content"])}
    out: dict[str, Any] = {"role": role, "content": msg.get("content")}
    if msg.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": tc["id"],
                "type": "function",
                "function": {"name": tc["name"], "arguments": dumps(tc["arguments"])},
            }
            for tc in msg["tool_calls"]
        ]
    return out


def _genai_message(msg: dict) -> dict:
    role = msg["role"]
    if role == "tool":
        part = {"type": "tool_call_response", "id": msg["tool_call_id"], "response": msg["content"]}
        return {"role": "tool", "parts": [part]}
    parts: list[dict] = []
    if msg.get("content"):
        parts.append({"type": "text", "content": msg["content"]})
    for tc in msg.get("tool_calls") or ():
        parts.append({"type": "tool_call", "id": tc["id"], "name": tc["name"], "arguments": tc["arguments"]})
    return {"role": role, "parts": parts}


def vercel_message(msg: dict) -> dict:
    role = msg["role"]
    if role == "system":
        return {"role": "system", "content": msg["content"]}
    if role == "tool":
        part: dict[str, Any] = {
            "type": "tool-result",
            "toolCallId": msg["tool_call_id"],
            "toolName": msg["name"],
            "result": msg["content"],
        }
        if msg.get("is_error"):
            part["isError"] = True
        return {"role": "tool", "content": [part]}
    parts: list[dict] = []
    if msg.get("content"):
        parts.append({"type": "text", "text": msg["content"]})
    for tc in msg.get("tool_calls") or ():
        parts.append(
            {"type": "tool-call", "toolCallId": tc["id"], "toolName": tc["name"], "args": tc["arguments"]}
        )
    return {"role": role, "content": parts}


def _vercel_tool_calls(msg: dict) -> str:
    return dumps(
        [
            {
                "toolCallType": "function",
                "toolCallId": tc["id"],
                "toolName": tc["name"],
                "args": dumps(tc["arguments"]),
            }
            for tc in msg.get("tool_calls") or ()
        ]
    )


_Event = tuple[str, dict[str, Any], bool]  # (name, attributes, at span end)


def encode_llm(
    convention: str,
    system: str,
    history: list[dict],
    output: dict | None,
    finish: str | None,
    model: str,
) -> tuple[dict[str, Any], list[_Event]]:
    """Attributes and events of an LLM span: the request `history` and the `output` (None: failed)."""
    encoder = _LLM_ENCODERS.get(convention)
    if encoder is None:  # pragma: no cover - validated on load
        raise ValueError(f"unknown convention {convention!r}")
    return encoder(_LlmCall(system, history, output, finish, model))


@dataclass(frozen=True)
class _LlmCall:
    system: str
    history: list[dict]
    output: dict | None  # None: the call failed
    finish: str | None
    model: str

    @property
    def with_system(self) -> list[dict]:
        return [{"role": "system", "content": self.system}, *self.history]


def _genai_llm(call: _LlmCall) -> tuple[dict[str, Any], list[_Event]]:
    attrs: dict[str, Any] = {
        "gen_ai.system_instructions": dumps([{"type": "text", "content": call.system}]),
        "gen_ai.input.messages": dumps([_genai_message(m) for m in call.history]),
    }
    if call.output is not None:
        message = _genai_message(call.output)
        message["finish_reason"] = "tool_call" if call.finish == "tool_calls" else "stop"
        attrs["gen_ai.output.messages"] = dumps([message])
    return attrs, []


def _genai_events_llm(call: _LlmCall) -> tuple[dict[str, Any], list[_Event]]:
    events: list[_Event] = []
    for msg in call.with_system:
        role = msg["role"]
        ev: dict[str, Any] = {"gen_ai.system": PROVIDER, "role": role}
        if role == "tool":
            ev["content"] = _as_text(msg["content"])
            ev["id"] = msg["tool_call_id"]
        elif msg.get("content"):
            ev["content"] = msg["content"]
        if msg.get("tool_calls"):
            ev["tool_calls"] = dumps(_openai_message(msg)["tool_calls"])
        events.append((f"gen_ai.{role}.message", ev, False))
    if call.output is not None:
        body = _openai_message(call.output)
        body.pop("role")
        choice = {"gen_ai.system": PROVIDER, "index": 0, "finish_reason": call.finish, "message": dumps(body)}
        events.append(("gen_ai.choice", choice, True))
    return {"gen_ai.system": PROVIDER}, events


def _openllmetry_llm(call: _LlmCall) -> tuple[dict[str, Any], list[_Event]]:
    attrs: dict[str, Any] = {"llm.request.type": "chat", "gen_ai.system": PROVIDER, "llm.is_streaming": False}
    for i, msg in enumerate(call.with_system):
        _openllmetry_message(attrs, f"gen_ai.prompt.{i}", msg)
    if call.output is not None:
        _openllmetry_message(attrs, "gen_ai.completion.0", call.output)
        attrs["gen_ai.completion.0.finish_reason"] = call.finish
    return attrs, []


def _openinference_llm(call: _LlmCall) -> tuple[dict[str, Any], list[_Event]]:
    model, output = call.model, call.output
    attrs: dict[str, Any] = {
        "openinference.span.kind": "LLM",
        "llm.system": PROVIDER,
        "llm.provider": PROVIDER,
        "llm.model_name": RESPONSE_MODELS.get(model, model) if output is not None else model,
        "llm.invocation_parameters": dumps({"model": model, "temperature": 0.2}),
        "input.value": dumps(
            {"model": model, "temperature": 0.2, "messages": [_openai_message(m) for m in call.with_system]}
        ),
        "input.mime_type": "application/json",
    }
    for i, msg in enumerate(call.with_system):
        _openinference_message(attrs, f"llm.input_messages.{i}.message", msg)
    if output is not None:
        _openinference_message(attrs, "llm.output_messages.0.message", output)
        choice = {"index": 0, "finish_reason": call.finish, "message": _openai_message(output)}
        attrs["output.value"] = dumps({"choices": [choice]})
        attrs["output.mime_type"] = "application/json"
    return attrs, []


def _vercel_ai_llm(call: _LlmCall) -> tuple[dict[str, Any], list[_Event]]:
    attrs: dict[str, Any] = {
        "ai.prompt.format": "messages",
        "ai.prompt.messages": dumps([vercel_message(m) for m in call.with_system]),
    }
    output = call.output
    if output is not None:
        attrs["ai.response.finishReason"] = "tool-calls" if call.finish == "tool_calls" else "stop"
        if output.get("content"):
            attrs["ai.response.text"] = output["content"]
        if output.get("tool_calls"):
            attrs["ai.response.toolCalls"] = _vercel_tool_calls(output)
    return attrs, []


_LLM_ENCODERS: dict[str, Callable[[_LlmCall], tuple[dict[str, Any], list[_Event]]]] = {
    "genai": _genai_llm,
    "genai_events": _genai_events_llm,
    "openllmetry": _openllmetry_llm,
    "openinference": _openinference_llm,
    "vercel_ai": _vercel_ai_llm,
}


def _openllmetry_message(attrs: dict[str, Any], prefix: str, msg: dict) -> None:
    attrs[f"{prefix}.role"] = msg["role"]
    if msg["role"] == "tool":
        attrs[f"{prefix}.content"] = _as_text(msg["content"])
        attrs[f"{prefix}.tool_call_id"] = msg["tool_call_id"]
        return
    if msg.get("content"):
        attrs[f"{prefix}.content"] = msg["content"]
    for j, tc in enumerate(msg.get("tool_calls") or ()):
        attrs[f"{prefix}.tool_calls.{j}.id"] = tc["id"]
        attrs[f"{prefix}.tool_calls.{j}.name"] = tc["name"]
        attrs[f"{prefix}.tool_calls.{j}.arguments"] = dumps(tc["arguments"])


def _openinference_message(attrs: dict[str, Any], prefix: str, msg: dict) -> None:
    attrs[f"{prefix}.role"] = msg["role"]
    if msg["role"] == "tool":
        attrs[f"{prefix}.content"] = _as_text(msg["content"])
        attrs[f"{prefix}.tool_call_id"] = msg["tool_call_id"]
        attrs[f"{prefix}.name"] = msg["name"]
        return
    if msg.get("content"):
        attrs[f"{prefix}.content"] = msg["content"]
    for j, tc in enumerate(msg.get("tool_calls") or ()):
        call = f"{prefix}.tool_calls.{j}.tool_call"
        attrs[f"{call}.id"] = tc["id"]
        attrs[f"{call}.function.name"] = tc["name"]
        attrs[f"{call}.function.arguments"] = dumps(tc["arguments"])


def session_attrs(convention: str, session_id: str | None) -> dict[str, Any]:
    if session_id is None:
        return {}
    key = {
        "genai": "gen_ai.conversation.id",
        "genai_events": "gen_ai.conversation.id",
        "openllmetry": "traceloop.association.properties.session_id",
        "openinference": "session.id",
        "vercel_ai": "ai.telemetry.metadata.sessionId",
    }[convention]
    return {key: session_id}


def tokens(value: Any) -> int:
    """A rough token count (~4 characters per token), deterministic."""
    return max(1, len(_as_text(value)) // 4)
