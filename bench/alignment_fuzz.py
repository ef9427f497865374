"""Differential fuzzer of conversation alignment: random agent conversations, emitted as traces the
way different instrumentations and apps record them, assembled by ``conversation.apply_trace`` and
compared with the conversation as it really went.

    PYTHONPATH=<checkout> python bench/alignment_fuzz.py [--seed 1] [--conversations 600]
        [--styles whole,window] [--examples 1] [--native]

``<checkout>`` is the source tree whose ``otelsignals`` is measured (this repository, or a git
worktree of an older commit: only public names both have are used). ``OTELSIGNALS_PURE_PYTHON=1``
is set before ``otelsignals`` is imported unless ``--native`` is given (an older worktree has no
compiled modules); the header says which ran, and from where.

Each conversation has a system prompt and 2-12 user turns; a turn is the user's message, 0-3 agent
steps (an assistant message with 1-3 tool calls, ids ``call_<n>`` unique, then their results as
tool messages) and a final text answer. Texts come from a small vocabulary with numbers, so most
are distinct, but some user messages ("yes", "thanks") and answers ("Done.") repeat word for word.
One model call per agent step and one for the answer: its input is the history so far (system
prompt first), its output the assistant message it produced. One trace per user turn (``t1``,
``t2``, ...); each call starts after the previous one ended, tools run in between, the user takes
seconds between turns; span ids are 8 bytes, unique.

Styles (how the calls are recorded; the truth is the conversation above unless said otherwise):

- ``whole``: every call resends the whole history (stateless chat APIs: the common case).
- ``new_turn_only``: each call's input holds only what is new since the previous call (the
  system prompt with the first call only): OpenAI's ``previous_response_id``, server-side threads.
- ``window``: each call resends the system prompt and only the latest 6 messages of the history.
- ``results_reordered``: whole histories, but a step with 2-3 parallel calls has its results sent
  in another (shuffled) order by the first call that carries them (the order they finished), and
  in call order by every later call. Truth: the results in the order first sent (what the
  conversation took them in); tool results are compared strictly, in order.
- ``wrapped_split``: whole histories, each model call recorded twice: an outer span (a library's
  wrapper, LangChain's ChatOpenAI over the OpenAI client's span) that is the inner span's parent,
  with the same input and output, starting before and ending after it. Each outer span, with
  probability 0.5, comes in a later part of the trace (a second ``apply_trace`` of the same trace
  id, right after the first: an exporter's next batch). Truth: each request counted once.
- ``condense``: a retrieval app (LangChain's ConversationalRetrievalChain): every turn after the
  first makes a side call whose input is ONE user message pasting the transcript (the user's own
  words and the answers) with the follow-up, and whose output is a standalone question; then the
  answering call, input [system, standalone question], output the answer. No tool steps. Truth:
  the standalone questions (the first turn: the user's message) and the answers; the side calls
  count as model calls.
- ``title``: whole histories, plus, after the first turn's trace, a trace of its own (``title``)
  with one call asking for a chat title: input ONE user message quoting the first question and
  answer, output the title. Truth: without it (but it counts as a model call).
- ``title_history``: whole histories, plus, after the first turn's trace, a trace of its own with
  one call asking for a chat title that sends the first turn's history under a system prompt of its
  own (an app's title step), output the title. Truth: without it (but it counts as a model call).
- ``guard``: whole histories, plus, in every turn, an input guardrail beside the agent's first call:
  the same history under a system prompt of its own, output a JSON verdict, ending before or after
  the agent's call. Truth: without the verdicts (but they count as model calls).

A conversation is wrong when its assembled messages differ from the truth by role, content, tool
call ids or the call id a tool result answers (the system prompt included, where it stands), or its
count of model calls differs. Prints a Markdown table per style and, for each style with a wrong
assembly, the first one found (expected vs got, from a little before the first difference).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

# Run as a command: before otelsignals is imported (its native.py), unless --native. Imported (by the
# test of it), the process's own choice stands.
if __name__ == "__main__" and "--native" not in sys.argv:
    os.environ["OTELSIGNALS_PURE_PYTHON"] = "1"

import otelsignals
import otelsignals.conversation as conversation_module
from otelsignals.conventions.base import SpanReading, SpanView
from otelsignals.conversation import ConversationState, apply_trace
from otelsignals.model import LlmCall, Message, Role, ToolCall, ToolResult

STYLES = (
    "whole",
    "new_turn_only",
    "window",
    "results_reordered",
    "wrapped_split",
    "condense",
    "title",
    "title_history",
    "guard",
)
WINDOW = 6  # messages resent by the window style (after the system prompt)
SECOND = 1_000_000_000
START_NS = 1_767_225_600 * SECOND  # 2026-01-01

CONDENSE_PROMPT = (
    "Given the following conversation and a follow up question, rephrase the follow up question to be "
    "a standalone question.\n\nChat History:\n{history}\nFollow Up Input: {question}\nStandalone question:"
)
TITLE_PROMPT = "Create a concise 3-5 word title for this chat.\n\nUSER: {question}\nASSISTANT: {answer}"


# -- the truth ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Said:
    """One message of the true conversation, turned into a fresh Message for every span that sends it
    (a convention reader reads each span's history into messages of its own)."""

    role: str
    content: str | None
    calls: tuple[tuple[str, str, str], ...] = ()  # (id, tool name, arguments as JSON)
    answers: str | None = None  # the call id a tool result answers

    def message(self) -> Message:
        role = Role(self.role)
        if self.answers is not None:
            return Message(
                role, self.content, tool_result=ToolResult(call_id=self.answers, content=self.content)
            )
        if self.calls:
            calls = [
                ToolCall(name, json.loads(arguments), call_id) for call_id, name, arguments in self.calls
            ]
            return Message(role, self.content, tool_calls=calls)
        return Message(role, self.content)

    def key(self) -> Key:
        return (self.role, self.content, tuple(c[0] for c in self.calls), self.answers)


Key = tuple[str, str | None, tuple[str | None, ...], str | None]


def key_of(message: Message) -> Key:
    result = message.tool_result.call_id if message.tool_result is not None else None
    return (message.role.value, message.content, tuple(c.id for c in message.tool_calls), result)


@dataclass(slots=True)
class Call:
    """One model call of the agent: what it answered, and the tool results that followed it."""

    output: Said
    results: list[Said] = field(default_factory=list)


@dataclass(slots=True)
class Turn:
    user: Said
    calls: list[Call]  # the agent's steps, then the final answer

    @property
    def answer(self) -> Said:
        return self.calls[-1].output


@dataclass(slots=True)
class Script:
    system: Said
    turns: list[Turn]


# -- the generator --------------------------------------------------------------------------------

ITEMS = ("rain jacket", "espresso machine", "desk lamp", "hiking boots", "blender", "backpack")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
PLACES = ("Chez Marie", "the Harbour Grill", "Sakura", "La Piazza")
STREETS = ("Rue des Lilas", "Baker Street", "Elm Avenue", "Hauptstrasse")
OPENERS = (
    "Can you check the status of order {n}? It was supposed to arrive on {day}.",
    "I was charged twice for order {n}, please refund one of the charges.",
    "Please change the delivery address of order {n} to {k} {street}.",
    "What is the return policy for the {item} I bought last week (order {n})?",
    "Do you have the {item} in size {k} in stock?",
    "Book a table for {k} at {place} on {day} evening.",
)
FOLLOW_UPS = (
    "And what about order {n}, has it shipped yet?",
    "Can you also refund the shipping fee of order {n}?",
    "Could you send the invoice for order {n} to my email?",
    "Is the {item} available in another colour?",
    "Actually make it {k} people at {place} instead.",
    "When will order {n} arrive exactly?",
    "Please cancel order {n}, I no longer need the {item}.",
)
SHORT_USER = ("yes", "ok", "thanks", "yes please", "go ahead", "no")  # said again, word for word
ANSWERS = (
    "Order {n} shipped on {day} and should arrive within {k} days.",
    "I have refunded {k}.99 EUR for order {n}; it will show in 3-5 business days.",
    "The delivery address of order {n} is now {k} {street}.",
    "You can return the {item} within 30 days; I have emailed you a label for order {n}.",
    "The {item} is in stock in size {k}; shall I reserve one for you?",
    "Your table for {k} at {place} is booked for {day} at 8 pm (reference {n}).",
    "I could not find order {n}; could you double-check the number?",
)
ANYTHING_ELSE = "Is there anything else I can help you with?"
# Answers said again word for word, by what the user said (a short reply), else by chance.
CANNED_ANSWERS = {
    "thanks": ("You're welcome!", "You're welcome!", ANYTHING_ELSE),
    "no": ("Okay.", ANYTHING_ELSE),
    "ok": ("Done.", ANYTHING_ELSE),
    "yes": ("Done.", "Done.", ANYTHING_ELSE),
    "yes please": ("Done.", ANYTHING_ELSE),
    "go ahead": ("Done.", ANYTHING_ELSE),
}
STEP_TEXTS = ("Let me look that up.", "Checking order {n} for you.")
TOOLS = (
    ("get_order", '{{"order_id": {n}}}', '{{"order_id": {n}, "status": "shipped", "eta_days": {k}}}'),
    ("refund_payment", '{{"order_id": {n}, "amount": {k}.99}}', '{{"ok": true}}'),
    ("update_address", '{{"order_id": {n}, "street": "{street}"}}', '{{"ok": true}}'),
    ("search_catalog", '{{"query": "{item}"}}', '{{"results": ["{item} {k}", "{item} pro"]}}'),
    ("check_stock", '{{"item": "{item}", "size": {k}}}', '{{"in_stock": {k}}}'),
    ("create_booking", '{{"place": "{place}", "people": {k}}}', '{{"reference": {n}}}'),
)


class Words:
    """Fills the templates: numbers drawn afresh, so that most texts are distinct."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def fill(self, template: str) -> str:
        rng = self.rng
        return template.format(
            n=rng.randint(1000, 99999),
            k=rng.randint(2, 12),
            day=rng.choice(DAYS),
            item=rng.choice(ITEMS),
            place=rng.choice(PLACES),
            street=rng.choice(STREETS),
        )


def canned_answer(rng: random.Random, said: str, acted: bool) -> str | None:
    """An answer said before word for word: most replies to a short user message ("thanks": "You're
    welcome!"), and now and then a bare "Done." after the agent acted on a request (any turn)."""
    if said in CANNED_ANSWERS and rng.random() < 0.8:
        return rng.choice(CANNED_ANSWERS[said])
    if acted and rng.random() < 0.06:
        return "Done."
    return None


def generate(rng: random.Random) -> Script:
    words = Words(rng)
    system = Said("system", f"You are the support agent of Acme (policy v{rng.randint(1, 9)}).")
    call_ids = itertools.count(1)
    turns = []
    for number in range(rng.randint(2, 12)):
        if number == 0:
            text = words.fill(rng.choice(OPENERS))
        elif rng.random() < 0.25:
            text = rng.choice(SHORT_USER)
        else:
            text = words.fill(rng.choice(FOLLOW_UPS + OPENERS))
        calls = []
        for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
            step_text = words.fill(rng.choice(STEP_TEXTS)) if rng.random() < 0.3 else None
            asked, results = [], []
            for _ in range(rng.randint(1, 3)):
                name, arguments, result = rng.choice(TOOLS)
                call_id = f"call_{next(call_ids)}"
                asked.append((call_id, name, words.fill(arguments)))
                results.append(Said("tool", words.fill(result), answers=call_id))
            calls.append(Call(Said("assistant", step_text, tuple(asked)), results))
        answer = canned_answer(rng, text, bool(calls)) or words.fill(rng.choice(ANSWERS))
        calls.append(Call(Said("assistant", answer)))
        turns.append(Turn(Said("user", text), calls))
    return Script(system, turns)


# -- spans ----------------------------------------------------------------------------------------

Reading = tuple[SpanView, SpanReading]


@dataclass(slots=True)
class Part:
    """One ``apply_trace`` call: a trace (or a later part of it) with its spans' parents."""

    trace_id: bytes
    readings: list[Reading] = field(default_factory=list)
    parents: dict[bytes, bytes] = field(default_factory=dict)

    def add(self, reading: Reading) -> None:
        self.readings.append(reading)
        self.parents[reading[0].span_id] = reading[0].parent_span_id


@dataclass(slots=True)
class Emitted:
    parts: list[Part]
    truth: list[Said]
    model_calls: int


class Clock:
    """Time moving on realistically: calls of 0.3-4 s, tools of 0.05-2 s, the user 2-40 s."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.now = START_NS

    def wait(self, low: float, high: float) -> int:
        self.now += int(self.rng.uniform(low, high) * SECOND)
        return self.now


_span_numbers = itertools.count(1)


def chat_span(
    trace_id: bytes, start: int, end: int, inputs: Sequence[Said], output: Said, parent: bytes = b""
) -> Reading:
    span_id = next(_span_numbers).to_bytes(8, "big")
    view = SpanView(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name="chat gpt-4o",
        kind=3,  # CLIENT
        start_time_unix_nano=start,
        end_time_unix_nano=end,
    )
    call = LlmCall(
        span_id, trace_id=trace_id, model="gpt-4o", start_time_unix_nano=start, end_time_unix_nano=end
    )
    reading = SpanReading("fuzz", [m.message() for m in inputs], [output.message()], llm_call=call)
    return view, reading


def trace_id_of(number: int) -> bytes:
    return f"t{number + 1}".encode()


# -- the styles -----------------------------------------------------------------------------------

# What a call sends: (system prompt, the history before it, how much of it the previous call's
# input and output covered, whether it is the conversation's first call) -> its input.
Inputs = Callable[[Said, list[Said], int, bool], list[Said]]


def whole_inputs(system: Said, history: list[Said], covered: int, first: bool) -> list[Said]:
    return [system, *history]


def new_turn_inputs(system: Said, history: list[Said], covered: int, first: bool) -> list[Said]:
    return [system, *history] if first else history[covered:]


def window_inputs(system: Said, history: list[Said], covered: int, first: bool) -> list[Said]:
    return [system, *history[-WINDOW:]]


def emit_agent(
    script: Script, rng: random.Random, inputs_of: Inputs, reorder: bool = False, wrap: bool = False
) -> Emitted:
    """The agent's calls, one trace per turn. ``reorder``: the results of a step with parallel calls
    are sent shuffled by the call right after it (the truth takes them so), in call order by every
    later one. ``wrap``: every call recorded twice, the outer span in a later part of the trace half
    the time."""
    clock = Clock(rng)
    truth: list[Said] = [script.system]
    history: list[Said] = []  # as the calls send it: results in call order
    parts: list[Part] = []
    covered, first, model_calls = 0, True, 0
    for number, turn in enumerate(script.turns):
        trace_id = trace_id_of(number)
        part, deferred = Part(trace_id), Part(trace_id)
        history.append(turn.user)
        truth.append(turn.user)
        start = clock.wait(2, 40)
        shuffled: list[Said] = []  # the previous step's results, as the next call sends them
        for call in turn.calls:
            end = clock.wait(0.3, 4)
            sent_history = history[: len(history) - len(shuffled)] + shuffled
            sent = inputs_of(script.system, sent_history, covered, first)
            inner = chat_span(trace_id, start, end, sent, call.output)
            if wrap:
                # The library's span around the client's: 2 ms before it, 3 ms after it.
                outer = chat_span(trace_id, start - 2_000_000, end + 3_000_000, sent, call.output)
                inner[0].parent_span_id = outer[0].span_id
                part.add(inner)
                (deferred if rng.random() < 0.5 else part).add(outer)
                clock.now = end + 3_000_000
            else:
                part.add(inner)
            model_calls += 1
            first = False
            history.append(call.output)
            truth.append(call.output)
            covered = len(history)
            shuffled = []
            if reorder and len(call.results) > 1:
                shuffled = list(call.results)
                while shuffled == call.results:
                    rng.shuffle(shuffled)
            history.extend(call.results)
            truth.extend(shuffled or call.results)
            start = clock.wait(0.05, 2) if call.results else clock.now  # the tools run
        parts.append(part)
        if deferred.readings:
            parts.append(deferred)
    return Emitted(parts, truth, model_calls)


def with_title_trace(emitted: Emitted, rng: random.Random, inputs: list[Said]) -> Emitted:
    """``emitted`` with a trace of its own after the first turn's: one call asking for a chat title."""
    title = Said("assistant", f"{rng.choice(ITEMS).title()} Order {rng.randint(10, 99)} Help")
    first_end = max(view.end_time_unix_nano for view, _ in emitted.parts[0].readings)
    second_start = min(view.start_time_unix_nano for view, _ in emitted.parts[1].readings)
    start = first_end + int(rng.uniform(0.05, 0.5) * SECOND)
    end = min(start + int(rng.uniform(0.3, 1.5) * SECOND), second_start - 1)
    part = Part(b"title")
    part.add(chat_span(b"title", start, end, inputs, title))
    emitted.parts.insert(1, part)
    emitted.model_calls += 1
    return emitted


def emit_title(script: Script, rng: random.Random) -> Emitted:
    """Whole histories, and a title call in a trace of its own after the first turn's, the first
    question and answer pasted into its prompt."""
    first = script.turns[0]
    prompt = TITLE_PROMPT.format(question=first.user.content, answer=first.answer.content)
    return with_title_trace(emit_agent(script, rng, whole_inputs), rng, [Said("user", prompt)])


TITLE_SYSTEM = Said("system", "Write a 3-5 word title for this chat. Answer with the title only.")
GUARD_SYSTEM = Said(
    "system", "Check whether the user's last message breaks the usage policy. Answer in JSON."
)


def turn_messages(turn: Turn) -> list[Said]:
    """A turn's messages as whole histories send them: the user's, then each call's answer and results."""
    return [turn.user, *(said for call in turn.calls for said in (call.output, *call.results))]


def emit_title_history(script: Script, rng: random.Random) -> Emitted:
    """Whole histories, and a title call in a trace of its own after the first turn's, sending the
    first turn's history under a prompt of its own."""
    inputs = [TITLE_SYSTEM, *turn_messages(script.turns[0])]
    return with_title_trace(emit_agent(script, rng, whole_inputs), rng, inputs)


def emit_guard(script: Script, rng: random.Random) -> Emitted:
    """Whole histories, and a guardrail beside each turn's first call, on the same history."""
    emitted = emit_agent(script, rng, whole_inputs)
    history: list[Said] = []
    for turn, part in zip(script.turns, emitted.parts, strict=True):
        history.append(turn.user)
        agent_view = part.readings[0][0]  # the turn's first call
        start = agent_view.start_time_unix_nano + 1_000_000
        end = start + int(rng.uniform(0.2, 3) * SECOND)
        verdict = Said("assistant", f'{{"flagged": false, "score": 0.0{rng.randint(1, 9)}}}')
        part.add(chat_span(part.trace_id, start, end, [GUARD_SYSTEM, *history], verdict))
        history.extend(turn_messages(turn)[1:])
        emitted.model_calls += 1
    return emitted


def standalone(rng: random.Random, turn: Turn, earlier: list[Turn]) -> str:
    """What the condense step makes of a follow-up: the question itself when it stands alone (now
    and then, word for word), else a rephrasing that names what it refers to."""
    question = turn.user.content or ""
    if question not in SHORT_USER and rng.random() < 0.35:
        return question
    topic = (earlier[-1].user.content or "").rstrip("?.!")
    if question in SHORT_USER:
        return f"Regarding the earlier request ({topic}): the user answers {question!r}; please proceed."
    return f"{question.rstrip('?.!')}, following up on: {topic}?"


def emit_condense(script: Script, rng: random.Random) -> Emitted:
    """A retrieval chain: a condense-question side call before every answering call but the first."""
    clock = Clock(rng)
    truth: list[Said] = [script.system]
    parts: list[Part] = []
    model_calls = 0
    for number, turn in enumerate(script.turns):
        trace_id = trace_id_of(number)
        part = Part(trace_id)
        start = clock.wait(2, 40)
        if number == 0:
            question = turn.user
        else:
            transcript = "\n".join(
                f"Human: {earlier.user.content}\nAssistant: {earlier.answer.content}"
                for earlier in script.turns[:number]
            )
            prompt = CONDENSE_PROMPT.format(history=transcript, question=turn.user.content)
            question = Said("user", standalone(rng, turn, script.turns[:number]))
            end = clock.wait(0.3, 2)
            part.add(
                chat_span(trace_id, start, end, [Said("user", prompt)], Said("assistant", question.content))
            )
            model_calls += 1
            start = clock.wait(0.05, 0.5)  # the retriever runs
        end = clock.wait(0.3, 4)
        part.add(chat_span(trace_id, start, end, [script.system, question], turn.answer))
        model_calls += 1
        truth += [question, turn.answer]
        parts.append(part)
    return Emitted(parts, truth, model_calls)


EMITTERS: dict[str, Callable[[Script, random.Random], Emitted]] = {
    "whole": lambda script, rng: emit_agent(script, rng, whole_inputs),
    "new_turn_only": lambda script, rng: emit_agent(script, rng, new_turn_inputs),
    "window": lambda script, rng: emit_agent(script, rng, window_inputs),
    "results_reordered": lambda script, rng: emit_agent(script, rng, whole_inputs, reorder=True),
    "wrapped_split": lambda script, rng: emit_agent(script, rng, whole_inputs, wrap=True),
    "condense": emit_condense,
    "title": emit_title,
    "title_history": emit_title_history,
    "guard": emit_guard,
}


# -- the comparison -------------------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    conversations: int = 0
    wrong_messages: int = 0
    wrong_calls: int = 0
    wrong_any: int = 0
    examples: list[str] = field(default_factory=list)


def assemble(emitted: Emitted, key: str) -> tuple[list[Key], int]:
    state = ConversationState.new(key)
    for part in emitted.parts:
        apply_trace(state, part.trace_id, part.readings, part.parents)
    return [key_of(m) for m in state.conversation.messages], len(state.conversation.llm_calls)


def short(key: Key, width: int = 70) -> str:
    role, content, calls, answers = key
    text = "None" if content is None else repr(content)
    if len(text) > width:
        text = text[: width - 3] + "..."
    extra = f" calls={','.join(str(c) for c in calls)}" if calls else ""
    extra += f" answers={answers}" if answers else ""
    return f"{role:9} {text}{extra}"


def describe(number: int, expected: list[Key], got: list[Key], calls: tuple[int, int]) -> str:
    lines = [
        f"conversation {number}: {len(expected)} messages expected, {len(got)} assembled; "
        f"model calls expected {calls[0]}, counted {calls[1]}"
    ]
    if expected != got:
        first = next(
            (i for i, (e, g) in enumerate(zip(expected, got, strict=False)) if e != g),
            min(len(expected), len(got)),
        )
        lines.append(f"first difference at message {first}:")
        low = max(0, first - 2)
        for index in range(low, min(max(len(expected), len(got)), first + 6)):
            e = short(expected[index]) if index < len(expected) else "-"
            g = short(got[index]) if index < len(got) else "-"
            mark = "  " if e == g else "!="
            lines.append(f"  {index:3} {mark} expected {e}")
            if e != g:
                lines.append(f"         got      {g}")
    return "\n".join(lines)


def run(seed: int, conversations: int, styles: Sequence[str], examples: int = 1) -> dict[str, Outcome]:
    outcomes = {style: Outcome() for style in styles}
    for number in range(conversations):
        script = generate(random.Random(f"{seed}:{number}"))
        for style in styles:
            emitted = EMITTERS[style](script, random.Random(f"{seed}:{number}:{style}"))
            got, counted = assemble(emitted, f"c{number}")
            expected = [said.key() for said in emitted.truth]
            outcome = outcomes[style]
            outcome.conversations += 1
            wrong_messages, wrong_calls = got != expected, counted != emitted.model_calls
            outcome.wrong_messages += wrong_messages
            outcome.wrong_calls += wrong_calls
            outcome.wrong_any += wrong_messages or wrong_calls
            if (wrong_messages or wrong_calls) and len(outcome.examples) < examples:
                outcome.examples.append(describe(number, expected, got, (emitted.model_calls, counted)))
    return outcomes


def where_from() -> Iterator[str]:
    yield f"otelsignals: {os.path.dirname(otelsignals.__file__)}"
    native = getattr(otelsignals, "native", None)
    compiled = bool(native is not None and getattr(native, "compiled", lambda: False)())
    mode = "compiled modules" if compiled else "pure Python"
    yield f"core: {mode} (OTELSIGNALS_PURE_PYTHON={os.environ.get('OTELSIGNALS_PURE_PYTHON', '')!r})"
    yield f"conversation.py: {conversation_module.__file__}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--conversations", type=int, default=600)
    parser.add_argument(
        "--styles", default=",".join(STYLES), help="comma-separated, of: " + ", ".join(STYLES)
    )
    parser.add_argument("--examples", type=int, default=1, help="wrong assemblies shown per style")
    parser.add_argument("--native", action="store_true", help="run the compiled modules where built")
    args = parser.parse_args(argv)
    styles = [style.strip() for style in args.styles.split(",") if style.strip()]
    unknown = [style for style in styles if style not in EMITTERS]
    if unknown:
        parser.error(f"unknown styles: {', '.join(unknown)}")
    began = time.perf_counter()
    outcomes = run(args.seed, args.conversations, styles, args.examples)
    elapsed = time.perf_counter() - began
    for line in where_from():
        print(line)
    print(f"seed {args.seed}, {args.conversations} conversations, {elapsed:.1f} s\n")
    print("| style | conversations | wrong messages | wrong model-call count | wrong (either) |")
    print("|---|---:|---:|---:|---:|")
    for style, outcome in outcomes.items():
        print(
            f"| {style} | {outcome.conversations} | {outcome.wrong_messages} | {outcome.wrong_calls} "
            f"| {outcome.wrong_any} |"
        )
    for style, outcome in outcomes.items():
        if outcome.examples:
            shown = "\n\n".join(outcome.examples)
            print(f"\n### {style}: first wrong assemblies\n\n```\n{shown}\n```")


if __name__ == "__main__":
    main()
