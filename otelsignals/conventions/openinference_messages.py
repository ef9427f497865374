"""OpenInference messages as instrumentations write them in raw request and response bodies
(``input.value`` / ``output.value``: OpenAI chat and Responses, Anthropic Messages, plain text), and
the roles, texts and tool-call arguments the indexed ``llm.*_messages`` attributes share with them.
"""

from __future__ import annotations

from typing import Any

from otelsignals.conventions.base import as_text, is_text_part, parse_json, text_value
from otelsignals.model import Message, Role, ToolCall, ToolResult

REDACTED = "__REDACTED__"  # openinference.instrumentation.config.REDACTED_VALUE

_ROLES: dict[str, Role] = {
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
    "user": Role.USER,
    "human": Role.USER,
    "assistant": Role.ASSISTANT,
    "ai": Role.ASSISTANT,
    "model": Role.ASSISTANT,  # Gemini / Vertex AI
    "agent": Role.ASSISTANT,
    "bot": Role.ASSISTANT,
    "chatbot": Role.ASSISTANT,  # Cohere
    "tool": Role.TOOL,
    "function": Role.TOOL,  # OpenAI legacy function results, LangChain FunctionMessage
    "ipython": Role.TOOL,
}


def request_messages(body: Any, span_id: bytes) -> list[Message]:
    """History from a request body: OpenAI chat/Responses, Anthropic Messages, or plain text."""
    if isinstance(body, str):
        return [text_message(Role.USER, body, span_id)]
    if isinstance(body, list):
        return _body_messages(body, span_id)
    if not isinstance(body, dict):
        return []
    messages: list[Message] = []
    system = _blocks_text(body.get("system")) or text_value(body.get("instructions"))
    if system:
        messages.append(text_message(Role.SYSTEM, system, span_id))
    if isinstance(body.get("messages"), list):
        messages.extend(_body_messages(body["messages"], span_id))
    elif isinstance(body.get("input"), (list, str)):  # OpenAI Responses API
        request_input = body["input"]
        if isinstance(request_input, str):
            messages.append(text_message(Role.USER, request_input, span_id))
        else:
            messages.extend(_body_messages(request_input, span_id))
    elif isinstance(prompt := body.get("prompt"), str):  # completions API
        messages.append(text_message(Role.USER, prompt, span_id))
    return messages


def response_messages(body: Any, span_id: bytes) -> list[Message]:
    """The answer from a response body: OpenAI chat/Responses, Anthropic Messages, or plain text."""
    if isinstance(body, str):
        return [text_message(Role.ASSISTANT, body, span_id)]
    if not isinstance(body, dict):
        return []
    choices = body.get("choices")
    if isinstance(choices, list):
        messages = []
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            if isinstance(choice.get("message"), dict):
                messages.extend(_body_message(choice["message"], span_id, Role.ASSISTANT))
            elif isinstance(text := choice.get("text"), str):  # completions API
                messages.append(text_message(Role.ASSISTANT, text, span_id))
        return messages
    if isinstance(body.get("output"), list):  # OpenAI Responses API
        return _body_messages(body["output"], span_id, Role.ASSISTANT)
    if body.get("role") == "assistant" and "content" in body:  # Anthropic Messages API
        return _body_message(body, span_id, Role.ASSISTANT)
    return []


def _body_messages(items: list[Any], span_id: bytes, default_role: Role = Role.USER) -> list[Message]:
    messages: list[Message] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        item_type = item.get("type")
        if item_type == "function_call":  # Responses API: a tool call item of the assistant's turn
            call = ToolCall(
                name=text_value(item.get("name")) or "",
                arguments=arguments_of(item.get("arguments")),
                id=text_value(item.get("call_id")) or text_value(item.get("id")),
            )
            if messages and messages[-1].role is Role.ASSISTANT:
                messages[-1].tool_calls = [*messages[-1].tool_calls, call]
            else:
                messages.append(Message(role=Role.ASSISTANT, tool_calls=[call], span_id=span_id))
        elif item_type == "function_call_output":  # Responses API: the tool's result
            messages.append(_tool_message(item.get("call_id"), None, item.get("output"), False, span_id))
        elif item_type not in (None, "message"):
            continue  # Responses API reasoning, web search, file search… items: not conversation text
        else:
            messages.extend(_body_message(item, span_id, default_role))
    return messages


def _body_message(item: dict[str, Any], span_id: bytes, default_role: Role) -> list[Message]:
    """One request/response message; an Anthropic user turn with tool_result blocks yields several."""
    role = role_of(item.get("role"), default_role)
    content = item.get("content")
    if role is Role.TOOL:  # OpenAI tool (or legacy function) result
        return [_tool_message(item.get("tool_call_id"), item.get("name"), content, False, span_id)]

    texts: list[str] = []
    tool_calls = _body_tool_calls(item)
    results: list[Message] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                texts.append(block)
            elif not isinstance(block, dict):
                continue
            elif is_text_part(block.get("type")) and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif block.get("type") == "tool_use":  # Anthropic
                tool_calls.append(
                    ToolCall(
                        name=text_value(block.get("name")) or "",
                        arguments=arguments_of(block.get("input")),
                        id=text_value(block.get("id")),
                    )
                )
            elif block.get("type") == "tool_result":  # Anthropic: results travel in the user turn
                failed = block.get("is_error") is True
                results.append(
                    _tool_message(block.get("tool_use_id"), None, block.get("content"), failed, span_id)
                )
    elif content is not None:
        texts.append(as_text(content) or "")

    messages = results
    if texts or tool_calls or not results:
        text = "\n".join(texts) if texts else None
        messages = [*results, Message(role=role, content=text, tool_calls=tool_calls, span_id=span_id)]
    last = messages[-1]
    if last.role is Role.ASSISTANT and isinstance(reason := item.get("stop_reason"), str):
        last.finish_reason = reason
    return messages


def _body_tool_calls(item: dict[str, Any]) -> list[ToolCall]:
    calls = []
    tool_calls = item.get("tool_calls")
    for call in tool_calls if isinstance(tool_calls, list) else ():
        if not isinstance(call, dict):
            continue
        function = raw if isinstance(raw := call.get("function"), dict) else {}
        calls.append(
            ToolCall(
                name=text_value(function.get("name")) or "",
                arguments=arguments_of(function.get("arguments")),
                id=text_value(call.get("id")),
            )
        )
    function_call = item.get("function_call")
    if not calls and isinstance(function_call, dict):
        calls.append(
            ToolCall(
                name=text_value(function_call.get("name")) or "",
                arguments=arguments_of(function_call.get("arguments")),
            )
        )
    return calls


def _tool_message(call_id: Any, name: Any, content: Any, failed: bool, span_id: bytes) -> Message:
    text = _blocks_text(content) if isinstance(content, list) else as_text(content)
    result = ToolResult(call_id=text_value(call_id), name=text_value(name), content=text, is_error=failed)
    return Message(role=Role.TOOL, content=text, tool_result=result, span_id=span_id)


def _blocks_text(value: Any) -> str | None:
    """A string, or the text blocks of an Anthropic-style content list, joined."""
    if isinstance(value, str):
        return value or None
    if not isinstance(value, list):
        return None
    texts = [
        block["text"] if isinstance(block, dict) else block
        for block in value
        if isinstance(block, str) or (isinstance(block, dict) and isinstance(block.get("text"), str))
    ]
    return "\n".join(texts) if texts else None


def role_of(value: Any, default: Role) -> Role:
    if isinstance(value, str):
        return _ROLES.get(value.strip().lower(), default)
    return default


def text_message(role: Role, text: str, span_id: bytes) -> Message:
    return Message(role=role, content=text, span_id=span_id)


def arguments_of(value: Any) -> Any:
    """Tool-call arguments: parsed JSON when they are JSON, else the raw text."""
    if value == REDACTED:
        return None
    return parse_json(value)
