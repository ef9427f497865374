"""What the LLM judge sends and checks: its stages (prompt and JSON schema, from ``prompts/``), the
JSON-schema subset its replies are validated against, and conversations rendered as transcripts. Pure:
no I/O beyond reading the packaged prompt files."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from otelsignals.model import Conversation, Message, Role

# ---- prompts and schemas -------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    name: str
    prompt: str  # the system message, $schema substituted
    schema: dict[str, Any]


def prompts_root(prompts_dir: str | None) -> Any:
    return Path(prompts_dir) if prompts_dir else resources.files("otelsignals.evals") / "prompts"


def load_stage(name: str, prompts_dir: str | None = None) -> Stage:
    root = prompts_root(prompts_dir)
    schema = json.loads((root / f"{name}.schema.json").read_text(encoding="utf-8"))
    unsupported = _unsupported_keywords(schema)
    if unsupported:
        raise ValueError(f"schema {name}: unsupported keywords {sorted(unsupported)}")
    template = Template((root / f"{name}.txt").read_text(encoding="utf-8"))
    return Stage(name, template.substitute(schema=json.dumps(schema, indent=2)), schema)


_SUPPORTED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "minLength",
        "description",
        "title",
        "$schema",
    }
)


def _unsupported_keywords(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    found = set(schema) - _SUPPORTED
    for sub in (schema.get("properties") or {}).values():
        found |= _unsupported_keywords(sub)
    for key in ("items", "additionalProperties"):
        found |= _unsupported_keywords(schema.get(key))
    return found


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v),
}


def validate(instance: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Errors of `instance` against a JSON-schema subset (see _SUPPORTED); [] when valid."""
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_TYPES[n](instance) for n in names):
            return [f"{path} must be of type {' or '.join(names)}, got {type(instance).__name__}"]
    errors: list[str] = []
    if "enum" in schema and instance not in schema["enum"]:
        errors.append(f"{path} must be one of {schema['enum']}, got {instance!r}")
    if _TYPES["number"](instance):
        errors += _number_errors(instance, schema, path)
    if isinstance(instance, str) and len(instance) < schema.get("minLength", 0):
        errors.append(f"{path} must have at least {schema['minLength']} characters")
    if isinstance(instance, list):
        errors += _array_errors(instance, schema, path)
    if isinstance(instance, dict):
        errors += _object_errors(instance, schema, path)
    return errors


def _number_errors(instance: float, schema: Mapping[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    if "minimum" in schema and instance < schema["minimum"]:
        errors.append(f"{path} must be >= {schema['minimum']}, got {instance}")
    if "maximum" in schema and instance > schema["maximum"]:
        errors.append(f"{path} must be <= {schema['maximum']}, got {instance}")
    return errors


def _array_errors(instance: list[Any], schema: Mapping[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    if len(instance) < schema.get("minItems", 0):
        errors.append(f"{path} must have at least {schema['minItems']} items")
    if "maxItems" in schema and len(instance) > schema["maxItems"]:
        errors.append(f"{path} must have at most {schema['maxItems']} items")
    if isinstance(schema.get("items"), dict):
        for i, item in enumerate(instance):
            errors += validate(item, schema["items"], f"{path}[{i}]")
    return errors


def _object_errors(instance: dict[str, Any], schema: Mapping[str, Any], path: str) -> list[str]:
    props: dict[str, Any] = schema.get("properties") or {}
    errors = [f"{path}.{key} is required" for key in schema.get("required", ()) if key not in instance]
    for key, value in instance.items():
        if key in props:
            errors += validate(value, props[key], f"{path}.{key}")
        elif schema.get("additionalProperties") is False:
            errors.append(f"{path}.{key} is not allowed")
    return errors


def parse_json_reply(content: Any) -> Any:
    """The reply's JSON object; tolerates one surrounding ``` fence. Raises ValueError."""
    if not isinstance(content, str) or not content.strip():
        raise ValueError("the reply was empty")
    text = content.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL)
    if fenced:
        text = fenced.group(1)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the reply was not valid JSON ({exc.msg} at position {exc.pos})") from None


# ---- rendering conversations ---------------------------------------------------------------------


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more characters]"


def args_text(arguments: Any) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True)


def _render_message(number: int, message: Message, limit: int) -> str:
    content = "(content not captured)" if message.content is None else _clip(message.content, limit)
    if message.role is Role.TOOL:
        result = message.tool_result
        name = (result.name if result else None) or "tool"
        status = ""
        if result is not None and result.is_error:
            detail = result.error_message or result.error_type or (result.status_code or "")
            status = f" [ERROR{': ' + str(detail) if detail else ''}]"
        return f"[{number}] tool result ({name}){status}: {content}"
    lines = []
    if message.content is not None or not message.tool_calls:
        lines.append(f"[{number}] {message.role.value}: {content}")
    else:
        lines.append(f"[{number}] {message.role.value}:")
    for call in message.tool_calls:
        lines.append(f"    -> tool call {call.name}({_clip(args_text(call.arguments), limit)})")
    return "\n".join(lines)


def render_transcript(
    conversation: Conversation,
    max_chars: int = 60_000,
    max_message_chars: int = 4_000,
    *,
    without_tools: bool = False,
) -> str:
    """Numbered messages (absolute numbers); the oldest are elided beyond `max_chars`, the first kept.
    ``without_tools``: only what the user and the assistant said, no tool calls and no results (for
    a stage that must judge what a request needs before seeing what the agent did)."""
    offset = conversation.message_offset
    if without_tools:
        rendered = [
            f"[{offset + i}] {m.role.value}: {_clip(m.content, max_message_chars)}"
            for i, m in enumerate(conversation.messages)
            if m.role is not Role.TOOL and m.content
        ]
    else:
        rendered = [
            _render_message(offset + i, m, max_message_chars) for i, m in enumerate(conversation.messages)
        ]
    if not rendered:
        return "(no messages)"
    total = sum(len(r) + 1 for r in rendered)
    if total <= max_chars:
        return "\n".join(rendered)
    head, tail, size = rendered[0], [], len(rendered[0]) + 60
    for line in reversed(rendered[1:]):
        if size + len(line) + 1 > max_chars:
            break
        tail.append(line)
        size += len(line) + 1
    elided = len(rendered) - 1 - len(tail)
    return "\n".join([head, f"[… {elided} messages elided …]", *reversed(tail)])


def tool_calls_of(conversation: Conversation) -> list[tuple[int, Any]]:
    """(message number, ToolCall) for every call the assistant made, in order."""
    offset = conversation.message_offset
    return [
        (offset + i, call)
        for i, message in enumerate(conversation.messages)
        if message.role is Role.ASSISTANT
        for call in message.tool_calls
    ]


def _tool_line(tool: Any) -> str:
    if isinstance(tool, str):
        return f"- {tool}"
    if isinstance(tool, Mapping):
        spec = raw if isinstance(raw := tool.get("function"), Mapping) else tool
        name = spec.get("name", "?")
        description = spec.get("description") or ""
        params = spec.get("parameters") or spec.get("input_schema")
        line = f"- {name}" + (f": {description}" if description else "")
        if params:
            line += f"\n  parameters: {json.dumps(params, sort_keys=True)}"
        return line
    return f"- {tool}"


def render_tools(available_tools: Any) -> list[str]:
    if isinstance(available_tools, Mapping):  # {name: description}
        return [f"- {name}: {desc}" if desc else f"- {name}" for name, desc in available_tools.items()]
    return [_tool_line(tool) for tool in available_tools]


def section(title: str, body: str) -> str:
    return f"## {title}\n{body}"
