"""OTel GenAI semantic conventions: the current message attributes, their event form, and the
deprecated per-message span events.

Sources checked (open-telemetry/semantic-conventions ``docs/gen-ai/``): ``gen-ai-input-messages.json``,
``gen-ai-output-messages.json``, ``gen-ai-system-instructions.json``, ``gen-ai-events.md``; and
opentelemetry-python-contrib ``util/opentelemetry-util-genai`` (``types.py``, ``span_utils.py``).

- ``gen_ai.input.messages`` / ``gen_ai.output.messages``: lists of ``{role, parts[, finish_reason]}``
  where a part is ``{type: "text", content}``, ``{type: "tool_call", id, name, arguments}``,
  ``{type: "tool_call_response", id, response}`` (``result`` in older schema drafts and in Pydantic
  AI, which also adds ``name``), ``{type: "reasoning", content}`` (``thinking`` in Pydantic AI), or
  media parts. On spans they are usually JSON strings, on events structured values.
- ``gen_ai.system_instructions``: a list of text parts (an early draft used ``{role, message}``).
- The ``gen_ai.client.inference.operation.details`` event carries the same three attributes.
- Deprecated events ``gen_ai.{system,user,assistant,tool}.message`` and ``gen_ai.choice`` carry
  OpenAI-shaped bodies (``content``, ``tool_calls: [{id, type, function: {name, arguments}}]``,
  ``id``/``tool_call_id``, ``message``, ``finish_reason``, ``index``), either spread over the event
  attributes or as JSON in one attribute (``gen_ai.event.content`` in the Azure AI Inference SDK).
  Strands Agents (strands-agents/sdk-python ``telemetry/tracer.py``, without the
  ``gen_ai_latest_experimental`` opt-in) writes these events' ``content`` and the choice's ``message``
  as the JSON of a list of Bedrock Converse content blocks (``[{"text": ...}, {"toolUse": {toolUseId,
  name, input}}, {"toolResult": {toolUseId, status, content}}]``), and names a message holding tool
  results ``gen_ai.tool.message``; its event loop cycle's choice adds the tool results as ``tool.result``.

The helpers below (roles, text, tool calls, :class:`MessageBuilder`) are shared by the OpenLLMetry
and Pydantic AI readers, which reuse parts of these shapes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from itertools import compress
from typing import Any

from otelsignals.compaction import stored_message_text
from otelsignals.conventions.base import (
    EVENT_NAME,
    READ_IN_FULL,
    EventView,
    Histories,
    ReadAgain,
    SpanReading,
    SpanView,
    as_text,
    is_text_part,
    last_event,
    link_tool_names,
    llm_call_of,
    parse_json,
    text_value,
    tool_definitions,
)
from otelsignals.conventions.decoding import Utf8Text
from otelsignals.model import NO_TOOL_CALLS, Message, Role, ToolCall, ToolResult

# The tools a model call was offered (OTel GenAI semantic conventions), a JSON list.
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
OPERATION = "gen_ai.operation.name"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
CHOICE_EVENT = "gen_ai.choice"
_is_choice = CHOICE_EVENT.__eq__
DEPRECATED_MESSAGE_EVENTS: dict[str, Role] = {
    "gen_ai.system.message": Role.SYSTEM,
    "gen_ai.user.message": Role.USER,
    "gen_ai.assistant.message": Role.ASSISTANT,
    "gen_ai.tool.message": Role.TOOL,
}
# The history namespace (base.Histories) of the history sent as deprecated message events.
DEPRECATED_EVENTS_HISTORY = "genai:deprecated-message-events"
# Attributes in which emitters put a deprecated event's whole body instead of spreading it.
EVENT_BODY_KEYS = ("gen_ai.event.content", "event.body", "body", "gen_ai.event.body")

MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
# Spans that belong to another reader (tool executions) or carry no conversation (embeddings).
NOT_OURS_OPERATIONS = frozenset({"execute_tool", "embeddings"})
# Agent and workflow spans may repeat the conversation, but they are not model calls.
AGENT_OPERATIONS = frozenset({"invoke_agent", "create_agent", "invoke_workflow"})

# Conversation attributes of other conventions. A span that names a model operation but carries
# none of our messages is left to the reader of these (returning a content-less reading would
# hide their content, since the first reader that recognises a span wins).
OTHER_CONTENT_KEYS = frozenset({"pydantic_ai.all_messages", "all_messages_events", "events"})
OTHER_CONTENT_PREFIXES = (
    "gen_ai.prompt.",
    "gen_ai.completion.",
    "llm.prompts.",
    "llm.completions.",
    "llm.input_messages",
    "llm.output_messages",
    "ai.prompt",
    "ai.response",
)

_ROLES: dict[str, Role] = {
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
    "user": Role.USER,
    "human": Role.USER,
    "assistant": Role.ASSISTANT,
    "model": Role.ASSISTANT,  # Gemini
    "ai": Role.ASSISTANT,
    "tool": Role.TOOL,
    "function": Role.TOOL,  # OpenAI's pre-tools function results
    "ipython": Role.TOOL,
}


# -- shared helpers ---------------------------------------------------------------------------
def role_of(value: Any) -> Role | None:
    return _ROLES.get(value.strip().lower()) if isinstance(value, str) else None


id_of = text_value  # a tool-call id as text


def name_of(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def arguments_of(value: Any) -> Any:
    """Tool-call arguments: parsed when they are a JSON object or array, else the value as given."""
    parsed = parse_json(value)
    return parsed if isinstance(parsed, dict | list) else value


def part_text(part: Any) -> str | None:
    """The visible text of one content part (OpenAI ``{type: text, text}``, OTel ``{type: text,
    content}``, Pydantic AI ``{kind: text, text|content}``, or a bare string); None for anything
    else (media, tool blocks, reasoning)."""
    if isinstance(part, str):
        return part
    if not isinstance(part, Mapping):
        return None if part is None else as_text(part)
    kind = part.get("type", part.get("kind"))
    if kind is not None and not is_text_part(kind):
        return None
    text = part.get("text", part.get("content"))
    if text is None or isinstance(text, str):
        return text
    return as_text(text)


def text_of(value: Any, *, json_parts: bool = False) -> str | None:
    """Message content as display text: a string as it is, a list of content parts joined with
    "\\n" (reasoning and media left out), anything else as compact JSON. With ``json_parts``, a
    string holding a JSON list of content parts (as OpenLLMetry and some event bodies write
    list-valued content) is read as that list."""
    if value is None:
        return None
    if isinstance(value, str):
        blocks = content_blocks(value) if json_parts else None
        return value if blocks is None else join_text(blocks)
    if isinstance(value, list):
        return join_text(value)
    if isinstance(value, Mapping):
        # A typed part is a part (a lone reasoning part has no visible text); an object with no
        # text of its own is data, shown as JSON.
        text = part_text(value)
        typed = isinstance(value.get("type", value.get("kind")), str)
        return text if text is not None or typed else as_text(value)
    return as_text(value)


def join_text(parts: Iterable[Any]) -> str | None:
    pieces = [text for part in parts if (text := part_text(part)) is not None]
    return "\n".join(pieces) if pieces else None


def content_blocks(value: Any) -> list[Mapping[str, Any]] | None:
    """The content-part list a message content holds (structured, or a JSON string of one), or None
    when the content is plain text. Only lists whose items all name a part type count, so that text
    which merely looks like JSON stays text."""
    parsed = parse_json(value) if isinstance(value, str) and value.lstrip()[:1] == "[" else value
    if not isinstance(parsed, list) or not parsed:
        return None
    if all(
        isinstance(item, Mapping) and isinstance(item.get("type", item.get("kind")), str) for item in parsed
    ):
        return parsed
    return None


def tool_call_of(item: Mapping[str, Any]) -> ToolCall:
    """One tool call in any common shape: OTel ``{id, name, arguments}``, OpenAI ``{id, type,
    function: {name, arguments}}``, Anthropic ``{id, name, input}``, Pydantic AI ``{tool_call_id,
    tool_name, args}``. The name may be missing when content capture removed it."""
    function = item.get("function")
    source: Mapping[str, Any] = function if isinstance(function, Mapping) else item
    name = name_of(source.get("name")) or name_of(item.get("tool_name")) or ""
    arguments = None
    for key in ("arguments", "input", "args"):
        if source.get(key) is not None:
            arguments = arguments_of(source[key])
            break
    return ToolCall(name=name, arguments=arguments, id=id_of(item.get("id", item.get("tool_call_id"))))


def tool_calls_of(value: Any) -> list[ToolCall]:
    """Tool calls from a list (or JSON string of a list) of call objects."""
    parsed = parse_json(value)
    if isinstance(parsed, Mapping):
        parsed = [parsed]
    if not isinstance(parsed, list):
        return []
    return [tool_call_of(item) for item in parsed if isinstance(item, Mapping)]


def tool_message(
    span_id: bytes,
    call_id: str | None,
    name: str | None,
    content: Any,
    *,
    is_error: bool = False,
    error_type: str | None = None,
) -> Message:
    """A tool result as a TOOL message; ``content`` as text (structured results as compact JSON)."""
    text = content if content is None or isinstance(content, str) else as_text(content)
    result = ToolResult(
        call_id=call_id,
        name=name,
        content=text,
        is_error=is_error,
        error_type=error_type,
        error_message=text if is_error else None,
    )
    return Message(Role.TOOL, content=text, tool_result=result, span_id=span_id)


def has_content(messages: Iterable[Message]) -> bool:
    """Whether any message text, tool-call arguments or tool result was recorded."""
    return any(
        stored_message_text(m) is not None or any(call.arguments is not None for call in m.tool_calls)
        for m in messages
    )


class MessageBuilder:
    """Turns a sequence of parts into messages, in order: consecutive text and tool-call parts of one
    role make one message; each tool result is a TOOL message of its own (Pydantic AI, for one, sends
    tool results inside ``user`` messages, next to the user's text)."""

    def __init__(self, span_id: bytes, finish_reason: str | None = None) -> None:
        self.span_id = span_id
        self.finish_reason = finish_reason
        self.messages: list[Message] = []
        self._role: Role | None = None
        self._texts: list[str] = []
        self._calls: list[ToolCall] = []

    def text(self, role: Role, text: str | None) -> None:
        # A text part without text (content not captured) still opens a message: the turn happened.
        self._switch(role)
        if text is not None:
            self._texts.append(text)

    def call(self, role: Role, call: ToolCall) -> None:
        self._switch(role)
        self._calls.append(call)

    def add(self, message: Message) -> None:
        self._flush()
        self.messages.append(message)

    def done(self) -> list[Message]:
        self._flush()
        if self.finish_reason is not None:
            for message in reversed(self.messages):
                if message.role is Role.ASSISTANT:
                    message.finish_reason = self.finish_reason
                    break
        return self.messages

    def _switch(self, role: Role) -> None:
        if self._role is not None and role is not self._role:
            self._flush()
        self._role = role

    def _flush(self) -> None:
        if self._role is None:
            return
        content = "\n".join(self._texts) if self._texts else None
        self.messages.append(
            Message(
                self._role, content=content, tool_calls=self._calls or NO_TOOL_CALLS, span_id=self.span_id
            )
        )
        self._role, self._texts, self._calls = None, [], []


# -- the current OTel message shapes ----------------------------------------------------------
def otel_messages(value: Any, span_id: bytes, default_role: Role, *, output: bool = False) -> list[Message]:
    """``gen_ai.input.messages`` / ``gen_ai.output.messages`` (JSON string or structured) as messages.
    Text that is not JSON (a truncated attribute, a plain prompt) is taken as one message's text."""
    parsed = parse_json(value)
    if isinstance(parsed, str):
        return [Message(default_role, content=parsed, span_id=span_id)] if parsed.strip() else []
    if isinstance(parsed, Mapping):
        parsed = [parsed]
    if not isinstance(parsed, list):
        return []
    messages: list[Message] = []
    for item in parsed:
        if isinstance(item, Mapping):
            messages.extend(otel_message(item, span_id, default_role, output=output))
    return messages


def otel_message(
    item: Mapping[str, Any], span_id: bytes, default_role: Role, *, output: bool = False
) -> list[Message]:
    role = role_of(item.get("role")) or default_role
    finish = name_of(item.get("finish_reason")) if output else None
    parts = item.get("parts")
    if not isinstance(parts, list):
        # Not the parts form: an OpenAI-style {role, content, tool_calls} as some SDKs write it.
        return plain_message(item, role, span_id, finish)
    builder = MessageBuilder(span_id, finish)
    for part in parts:
        if not isinstance(part, Mapping):
            builder.text(role, part_text(part))
            continue
        kind = part.get("type")
        if kind == "text" or kind == "refusal":  # a refusal is what the user sees (OpenLLMetry writes it so)
            text = part.get("content", part.get("text", part.get("refusal")))
            if role is Role.ASSISTANT and echoes_tool_call(text, parts):
                continue  # the call is read from its tool_call part
            builder.text(role, text if text is None or isinstance(text, str) else as_text(text))
        elif kind == "tool_call":
            builder.call(role, tool_call_of(part))
        elif kind == "tool_call_response":
            # "response" in the spec; "result" in an earlier draft and in Pydantic AI.
            result = tool_response_of(part["response"] if "response" in part else part.get("result"))
            builder.add(tool_message(span_id, id_of(part.get("id")), name_of(part.get("name")), result))
        # reasoning/thinking, media and unknown part types carry no visible text: skipped.
    messages = builder.done()
    if not messages:
        # Still a message, with no text we can read: an image alone, reasoning alone, or the
        # "parts": [] opentelemetry-instrumentation-openai-v2 writes for content given as a list.
        # Dropped, every such user turn vanished from the conversation.
        messages.append(Message(role, content=None, span_id=span_id, finish_reason=finish))
    return messages


# Content blocks a tool result may hold besides text (Anthropic tool_result content: images,
# documents, search results; the OTel GenAI media parts): named in the result's text, their data
# left out.
NON_TEXT_RESULT_BLOCKS = frozenset(
    {"image", "document", "search_result", "audio", "file", "blob", "uri", "image_url", "input_image"}
)


def tool_response_of(response: Any) -> Any:
    """A ``tool_call_response`` part's response as the tool result to show. A list of content blocks
    (Anthropic tool_result content, which OpenLLMetry passes on as the response) is the text of its
    text blocks joined with "\\n", each other block named ("[image]"); anything else is given back,
    to be shown as it is (text) or as JSON. A list counts as content blocks only when every item is
    a text block with its text or a known non-text block, and one is text: a tool's own records (a
    list of objects with a "type" of their own, or none with text) are data and stay JSON."""
    if not isinstance(response, list) or not response:
        return response
    pieces: list[str] = []
    has_text = False
    for block in response:
        if not isinstance(block, Mapping):
            return response
        kind = block.get("type")
        if is_text_part(kind):
            text = block.get("text", block.get("content"))
            if not isinstance(text, str):
                return response
            pieces.append(text)
            has_text = True
        elif isinstance(kind, str) and kind in NON_TEXT_RESULT_BLOCKS:
            pieces.append(f"[{kind}]")
        else:
            return response
    return "\n".join(pieces) if has_text else response


# How the JSON of an Anthropic tool_use block names its type (json.dumps and orjson alike).
_TOOL_USE_TYPE = '"tool_use"'


def echoes_tool_call(text: Any, parts: list[Any]) -> bool:
    """Whether a text part is the JSON of an Anthropic ``tool_use`` block that a ``tool_call`` part
    of the same message gives too (the same id). OpenLLMetry's LangChain instrumentation writes a
    content block it has no part type for as its JSON in a text part, and the message's tool calls
    as tool_call parts as well: read as text, the block is words the assistant never said, and the
    history no longer matches the answer it resends. JSON the assistant wrote itself has no such
    part beside it. Texts that cannot be such JSON are told apart without parsing them."""
    if not isinstance(text, str) or text[:1] != "{" or _TOOL_USE_TYPE not in text:
        return False
    block = parse_json(text)
    if not isinstance(block, Mapping) or block.get("type") != "tool_use":
        return False
    block_id = id_of(block.get("id"))
    return block_id is not None and any(
        isinstance(part, Mapping) and part.get("type") == "tool_call" and id_of(part.get("id")) == block_id
        for part in parts
    )


# -- Bedrock Converse content blocks -----------------------------------------------------------
# A message's content as the Bedrock Converse API (and Strands Agents, which follows it) gives it: a
# list of blocks, each an object with exactly one key, the block's kind, holding a value of this type.
# The types tell such blocks from records a user or a tool wrote that happen to share a key name.
BEDROCK_BLOCKS: dict[str, type] = {
    "text": str,
    "toolUse": dict,
    "toolResult": dict,
    "image": dict,
    "document": dict,
    "video": dict,
    "audio": dict,
    "searchResult": dict,
    "reasoningContent": dict,
    "citationsContent": dict,
    "guardContent": dict,
    "cachePoint": dict,
}
# The blocks of a toolResult's content (a json block holds any JSON value).
BEDROCK_RESULT_BLOCKS: dict[str, type] = {
    "text": str,
    "json": object,
    "image": dict,
    "document": dict,
    "video": dict,
    "searchResult": dict,
}
# Blocks whose data is not text: named in a tool result's text ("[image]"), as tool_response_of does.
BEDROCK_MEDIA_BLOCKS = frozenset({"image", "document", "video", "audio", "searchResult"})
# Strands' event loop cycle span: its choice gives the tool results sent back after the answer.
CYCLE_TOOL_RESULT = "tool.result"


def _block_opening(kinds: Iterable[str]) -> re.Pattern[str]:
    """How the JSON text of a list of such blocks starts (as JSON encoders write it): tested before
    parsing, so that text merely starting with "[" is not parsed."""
    return re.compile(r'\[\s*\{\s*"(?:' + "|".join(map(re.escape, kinds)) + r')"\s*:')


_BEDROCK_OPENING = _block_opening(BEDROCK_BLOCKS)
_BEDROCK_RESULT_OPENING = _block_opening(BEDROCK_RESULT_BLOCKS)


def bedrock_blocks(
    value: Any, kinds: Mapping[str, type] = BEDROCK_BLOCKS, opening: re.Pattern[str] = _BEDROCK_OPENING
) -> list[dict[str, Any]] | None:
    """The Bedrock content blocks ``value`` holds (a list, or the JSON text of one), or None. Only a
    list whose every item is an object with one key, a block kind of ``kinds`` holding a value of
    its type, counts: a JSON list a user typed ([{"text": "a"}, 3], records of their own, an object
    with a block kind among other keys) stays text."""
    if isinstance(value, str):
        if value[:1] != "[" or opening.match(value) is None:
            return None
        value = parse_json(value)
    if not isinstance(value, list) or not value:
        return None
    for block in value:
        if not isinstance(block, dict) or len(block) != 1:
            return None
        for kind, inner in block.items():
            expected = kinds.get(kind)
            if expected is None or not isinstance(inner, expected):
                return None
    return value


def bedrock_result_content(value: Any) -> Any:
    """A tool result's content: its Bedrock blocks (a list, or the JSON text of one) as text, else
    ``value`` as given (shown as it is, or as JSON)."""
    blocks = bedrock_blocks(value, BEDROCK_RESULT_BLOCKS, _BEDROCK_RESULT_OPENING)
    return value if blocks is None else _result_text(blocks)


def _result_text(blocks: list[dict[str, Any]]) -> str:
    """Text blocks as they are and json blocks as compact JSON, joined with "\\n"; media named."""
    pieces: list[str] = []
    for block in blocks:
        for kind, inner in block.items():
            if kind == "text":
                pieces.append(inner)
            elif kind == "json":
                pieces.append(as_text(inner) or "null")
            elif kind in BEDROCK_MEDIA_BLOCKS:
                pieces.append(f"[{kind}]")
    return "\n".join(pieces)


def _bedrock_text(kind: str, inner: Any) -> str | None:
    """The visible text of a message block: a text block's; the generated text of a citations block;
    the text a guardrail was to check (sent to the model too). Media, reasoning and cache points
    have none."""
    if kind == "text":
        return inner if isinstance(inner, str) else None
    if kind == "citationsContent":
        generated = inner.get("content")
        return join_text(generated) if isinstance(generated, list) else None
    if kind == "guardContent":
        text = inner.get("text")
        return text.get("text") if isinstance(text, dict) else None
    return None


def bedrock_tool_call(use: Mapping[str, Any]) -> ToolCall:
    return ToolCall(
        name=name_of(use.get("name")) or "",
        arguments=arguments_of(use.get("input")),
        id=id_of(use.get("toolUseId")),
    )


def bedrock_tool_result(result: Mapping[str, Any], span_id: bytes) -> Message:
    content = result.get("content")
    return tool_message(
        span_id,
        id_of(result.get("toolUseId")),
        None,
        None if content is None else bedrock_result_content(content),
        is_error=result.get("status") == "error",
    )


def bedrock_messages(
    blocks: list[dict[str, Any]],
    role: Role,
    span_id: bytes,
    finish_reason: str | None = None,
    call_id: str | None = None,
) -> list[Message]:
    """A message given as Bedrock content blocks: its text blocks' text joined with "\\n", its toolUse
    blocks its tool calls, each toolResult block a TOOL message of its own (Bedrock sends tool
    results in user messages, and Strands names such a message's event ``gen_ai.tool.message``). A
    TOOL message without toolResult blocks is one result, the blocks its content and ``call_id``
    the call it answers."""
    if role is Role.TOOL:
        if not any("toolResult" in block for block in blocks):
            return [tool_message(span_id, call_id, None, _result_text(blocks))]
        role = Role.USER  # any text beside the results is the user's
    builder = MessageBuilder(span_id, finish_reason)
    for block in blocks:
        for kind, inner in block.items():
            if kind == "toolUse":
                builder.call(role, bedrock_tool_call(inner))
            elif kind == "toolResult":
                builder.add(bedrock_tool_result(inner, span_id))
            else:
                text = _bedrock_text(kind, inner)
                if text is not None:
                    builder.text(role, text)
    messages = builder.done()
    if not messages:
        # An image or reasoning alone is still a turn (as otel_message keeps such messages).
        messages.append(Message(role, content=None, span_id=span_id, finish_reason=finish_reason))
    return messages


def plain_message(
    body: Mapping[str, Any], role: Role, span_id: bytes, finish_reason: str | None = None
) -> list[Message]:
    """An OpenAI-shaped message ``{content, tool_calls, id | tool_call_id, name}``; content given as
    Bedrock blocks is read as those blocks say (:func:`bedrock_messages`)."""
    blocks = bedrock_blocks(body.get("content"))
    if blocks is not None:
        call_id = id_of(body.get("tool_call_id", body.get("id"))) if role is Role.TOOL else None
        return bedrock_messages(blocks, role, span_id, finish_reason, call_id)
    content = text_of(body.get("content"), json_parts=True)
    if role is Role.TOOL:
        call_id = id_of(body.get("tool_call_id", body.get("id")))
        return [tool_message(span_id, call_id, name_of(body.get("name")), content)]
    calls = tool_calls_of(body.get("tool_calls"))
    return [Message(role, content=content, tool_calls=calls, span_id=span_id, finish_reason=finish_reason)]


def system_message_of(value: Any, span_id: bytes) -> Message | None:
    """``gen_ai.system_instructions`` as one SYSTEM message."""
    parsed = parse_json(value)
    if isinstance(parsed, Mapping) and "type" not in parsed:
        # The early draft wrapped the part: {"role": "system", "message": {"type": "text", ...}}.
        parsed = parsed.get("message", parsed.get("parts", parsed.get("content")))
    if parsed is None or parsed == "" or parsed == []:
        return None
    return Message(Role.SYSTEM, content=text_of(parsed), span_id=span_id)


def _own(span_id: bytes) -> ReadAgain:
    """A system message read from another span, as this span's own (the same text): what a read of
    this span would give."""

    def own(message: Message) -> Message:
        if message.span_id == span_id:
            return message
        return Message(Role.SYSTEM, content=message.content, span_id=span_id)

    return own


def messages_of_attributes(
    attributes: Mapping[str, Any], span_id: bytes, histories: Histories
) -> tuple[list[Message], list[Message], bool]:
    """(inputs, outputs, whether any of the three attributes was there) from span or event attributes."""
    inputs: list[Message] = []
    outputs: list[Message] = []
    present = False
    if SYSTEM_INSTRUCTIONS in attributes:
        present = True
        instructions = attributes[SYSTEM_INSTRUCTIONS]
        if isinstance(instructions, str | Utf8Text):
            read_prompt = lambda text: system_message_of(text, span_id)  # noqa: E731
            system = histories.repeated(SYSTEM_INSTRUCTIONS, instructions, read_prompt, _own(span_id))
        else:
            system = system_message_of(instructions, span_id)
        if system is not None:
            inputs.append(system)
    if INPUT_MESSAGES in attributes:
        present = True
        value = attributes[INPUT_MESSAGES]
        if isinstance(value, str | Utf8Text):
            read = lambda parsed: otel_messages(parsed, span_id, Role.USER)  # noqa: E731
            inputs.extend(histories.messages(INPUT_MESSAGES, value, read))
        else:
            inputs.extend(otel_messages(value, span_id, Role.USER))
    if OUTPUT_MESSAGES in attributes:
        present = True
        outputs = otel_messages(attributes[OUTPUT_MESSAGES], span_id, Role.ASSISTANT, output=True)
    return inputs, outputs, present


# -- deprecated per-message events ------------------------------------------------------------
def event_body(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """A deprecated event's body: spread over its attributes, or JSON in one of them."""
    body = dict(attributes)
    for key in EVENT_BODY_KEYS:
        if key in attributes:
            parsed = parse_json(attributes[key])
            if isinstance(parsed, Mapping):
                body.update(parsed)
            else:
                body["content"] = parsed
            break
    return body


def messages_of_events(
    events: Iterable[tuple[str, Mapping[str, Any]]], span_id: bytes
) -> tuple[list[Message], list[Message]]:
    """(inputs, outputs) from (event name, body) pairs: message events are the history sent, each
    ``gen_ai.choice`` one answer (ordered by its ``index``)."""
    inputs: list[Message] = []
    choices: list[tuple[int, list[Message]]] = []
    for name, body in events:
        role = DEPRECATED_MESSAGE_EVENTS.get(name)
        if role is not None:
            inputs.extend(plain_message(body, role, span_id))
        elif name == CHOICE_EVENT:
            choices.append(_choice(body, span_id))
    choices.sort(key=lambda choice: choice[0])
    return inputs, [message for _, messages in choices for message in messages]


def _choice(body: Mapping[str, Any], span_id: bytes) -> tuple[int, list[Message]]:
    index = body.get("index")
    order = index if isinstance(index, int) and not isinstance(index, bool) else 0
    blocks = bedrock_blocks(body.get("message"))
    if blocks is not None:
        # Strands: the answer's content blocks; an event loop cycle's choice adds the tool results.
        answer = bedrock_messages(blocks, Role.ASSISTANT, span_id, name_of(body.get("finish_reason")))
        results = bedrock_blocks(body.get(CYCLE_TOOL_RESULT))
        return order, answer if results is None else answer + bedrock_messages(results, Role.USER, span_id)
    message = parse_json(body.get("message")) if "message" in body else body
    if isinstance(message, str):
        message = {"content": message}
    elif isinstance(message, list):
        # The answer's content given as a list (of parts, or an answer that is a JSON array): read
        # as content, so that text which is no parts stays the text it came as.
        message = {"content": body["message"]}
    if not isinstance(message, Mapping):
        message = {}
    if "tool_calls" not in message and "tool_calls" in body:
        # OpenLLMetry's choice event puts the tool calls beside the message, not in it.
        message = {**message, "tool_calls": body["tool_calls"]}
    role = role_of(message.get("role")) or Role.ASSISTANT
    return order, plain_message(message, role, span_id, name_of(body.get("finish_reason")))


def _messages_of_span_events(
    events: list[EventView], span_id: bytes, histories: Histories
) -> tuple[list[Message], list[Message], bool]:
    # The opt-in details event, when present, holds the whole call; else the deprecated events.
    # A resent history has one event per message: they are sorted by name at C level (map, compress),
    # so that a turn costs what its own events cost.
    names = list(map(EVENT_NAME, events))
    details = last_event(events, DETAILS_EVENT) if DETAILS_EVENT in names else None
    if details is not None:
        return messages_of_attributes(details.attributes, span_id, READ_IN_FULL)
    sent = list(compress(events, map(DEPRECATED_MESSAGE_EVENTS.__contains__, names)))
    choices = [(CHOICE_EVENT, event_body(e.attributes)) for e in compress(events, map(_is_choice, names))]
    # One event per history message, so the history is indexed by event (equal views at the same
    # position; a resent history's are the same objects, see decoding.py). Choices are this call's
    # answer: always read, never part of the history.
    inputs = histories.indexed(
        DEPRECATED_EVENTS_HISTORY,
        sent,
        lambda e: plain_message(event_body(e.attributes), DEPRECATED_MESSAGE_EVENTS[e.name], span_id),
    )
    _, outputs = messages_of_events(choices, span_id)
    return inputs, outputs, bool(sent or choices)


def _carries_other_convention(attributes: Mapping[str, Any]) -> bool:
    return any(key in OTHER_CONTENT_KEYS or key.startswith(OTHER_CONTENT_PREFIXES) for key in attributes)


class GenAiReader:
    name = "genai"
    key_prefixes: tuple[str, ...] = ("gen_ai.",)

    def read(self, span: SpanView) -> SpanReading | None:
        operation = span.attribute_str(OPERATION)
        if operation in NOT_OURS_OPERATIONS:
            return None
        inputs, outputs, present = messages_of_attributes(span.attributes, span.span_id, span.histories)
        if not inputs and not outputs:
            inputs, outputs, on_events = _messages_of_span_events(span.events, span.span_id, span.histories)
            present = present or on_events
        if not present and operation not in MODEL_OPERATIONS:
            return None
        conversation = bool(outputs) or any(m.role is not Role.SYSTEM for m in inputs)
        if not conversation and _carries_other_convention(span.attributes):
            return None
        link_tool_names(inputs + outputs)
        return SpanReading(
            convention=self.name,
            input_messages=inputs,
            output_messages=outputs,
            llm_call=llm_call_of(span) if _is_model_call(span, operation) else None,
            content_captured=has_content(inputs) or has_content(outputs),
            tool_definitions=tool_definitions(span.attributes.get(TOOL_DEFINITIONS)),
        )


def _is_model_call(span: SpanView, operation: str | None) -> bool:
    """A span with messages is a model call unless it is an agent's, or it names neither an
    operation nor a model: a record of the conversation (Strands Agents' event-loop cycle spans
    carry its messages and enclose its chat spans, which arrive in another part of the trace when
    the cycle ran tools for seconds)."""
    if operation in AGENT_OPERATIONS:
        return False
    return operation is not None or any(span.attributes.get(key) is not None for key in _MODEL_EVIDENCE)


_MODEL_EVIDENCE = (
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
)


GENAI_READER = GenAiReader()
