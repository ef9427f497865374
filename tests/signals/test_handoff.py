"""The agent handing over to a person (interaction.handoff.transfer), and how it settles escalations."""

from __future__ import annotations

import copy
import re._constants as re_constants  # type: ignore[import-not-found]  # the parser re uses
import re._parser as re_parser  # type: ignore[import-not-found]

import pytest

from otelsignals.model import Conversation, Message, Role, SignalInstance, ToolCall, ToolResult
from otelsignals.signals import handoff
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext
from otelsignals.signals.detect import detect
from tests.signals.conversations import of_type

LIB = handoff.library()
DATA = LIB.data


@pytest.mark.parametrize("name", DATA["tool_names"]["positives"])
def test_handoff_tool_names(name: str) -> None:
    assert LIB.is_handoff_tool(name)


@pytest.mark.parametrize("name", DATA["tool_names"]["near_misses"])
def test_tool_names_that_are_not_a_handoff(name: str) -> None:
    assert not LIB.is_handoff_tool(name)


@pytest.mark.parametrize("text", DATA["announcements"]["positives"])
def test_announcements(text: str) -> None:
    assert LIB.announcement(text) is not None


@pytest.mark.parametrize("text", DATA["announcements"]["near_misses"])
def test_offers_negations_and_money_transfers_are_not_a_handoff(text: str) -> None:
    assert LIB.announcement(text) is None


@pytest.mark.parametrize("text", DATA["unresolved"]["positives"])
def test_a_handoff_that_gives_up_says_so(text: str) -> None:
    assert LIB.unresolved_phrase([text]) is not None


@pytest.mark.parametrize("text", DATA["unresolved"]["near_misses"])
def test_a_case_routed_by_its_reason_is_not_unresolved(text: str) -> None:
    assert LIB.unresolved_phrase([text]) is None


@pytest.mark.parametrize(
    ("arguments", "announcement", "unresolved"),
    [
        ({"summary": "No service despite an APN reset and a reboot."}, None, "despite"),
        ({"case": {"notes": "The outage persists."}}, None, "persists"),  # an object among the arguments
        ({"summary": "SIM is PIN-locked; needs unlocking."}, None, None),
        ({"summary": "refund"}, "I couldn't resolve the error, transferring you now.", "couldn't resolve"),
        ("reboot done, still fails", None, "still fails"),  # arguments that were not JSON: their text
    ],
)
def test_the_handoff_carries_whether_the_agent_gave_up(
    arguments: object, announcement: str | None, unresolved: str | None
) -> None:
    call = Message(Role.ASSISTANT, announcement, [ToolCall("transfer_to_human_agents", arguments, "t1")])
    (signal,) = of_type(run([Message(Role.USER, "My internet is down again."), call]), tx.HANDOFF)
    assert signal.metadata.get("unresolved") == unresolved


def run(messages: list[Message], prior: dict[str, int] | None = None) -> list[SignalInstance]:
    found, _ = detect(DetectionContext(Conversation("c", messages), new_from=0, prior_counts=prior or {}))
    return found


def transfer_call() -> list[Message]:
    return [
        Message(Role.ASSISTANT, None, [ToolCall("transfer_to_human_agents", {"summary": "refund"}, "t1")]),
        Message(Role.TOOL, "Transfer successful", tool_result=ToolResult("t1", "transfer_to_human_agents")),
        Message(Role.ASSISTANT, "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."),
    ]


def test_a_tool_call_and_its_announcement_are_one_handoff_by_the_agent() -> None:
    found = run([Message(Role.USER, "My internet is down again."), *transfer_call()])
    (signal,) = of_type(found, tx.HANDOFF)
    assert signal.message_index == 1
    assert signal.metadata == {
        "asked_by": "agent",
        "via": "tool",
        "tool": "transfer_to_human_agents",
        "after": [],
    }


def test_a_frictionless_request_the_agent_honours_is_the_handoffs_not_an_escalation() -> None:
    found = run(
        [
            Message(Role.USER, "I'd like to change the name on my booking."),
            Message(Role.ASSISTANT, "I'm sorry, name changes are not allowed under our policy."),
            Message(Role.USER, "I understand. Could you transfer me to a human agent, please?"),
            *transfer_call(),
        ]
    )
    assert not of_type(found, tx.ESCALATION)
    (signal,) = of_type(found, tx.HANDOFF)
    assert signal.metadata["asked_by"] == "user" and signal.metadata["request_index"] == 2
    assert signal.metadata["after"] == []


def test_after_friction_the_users_demand_stays_an_escalation() -> None:
    messages = [
        Message(Role.USER, "My refund still hasn't arrived."),
        Message(Role.ASSISTANT, "Refunds take 5-7 days."),
        Message(Role.USER, "Get me a human agent now."),
        *transfer_call(),
    ]
    found = run(messages, prior={tx.NEGATIVE_STANCE: 1})
    assert of_type(found, tx.ESCALATION)
    (signal,) = of_type(found, tx.HANDOFF)
    assert signal.metadata["asked_by"] == "user"
    assert signal.metadata["after"] == [tx.DISENGAGEMENT]


def test_the_tool_span_alone_says_it_without_content() -> None:
    result = ToolResult("t9", "escalate_to_human")
    found = run([Message(Role.USER, None), Message(Role.TOOL, None, tool_result=result)])
    assert [signal.metadata["via"] for signal in of_type(found, tx.HANDOFF)] == ["tool"]


def test_one_handoff_per_user_turn_and_none_twice_for_the_same_messages() -> None:
    messages = [Message(Role.USER, "help"), *transfer_call(), Message(Role.USER, "hello?"), *transfer_call()]
    conversation = Conversation("c", messages)
    context = DetectionContext(conversation, new_from=0)
    assert [s.message_index for s in handoff.detect_handoff(context)] == [1, 5]
    assert handoff.detect_handoff(DetectionContext(conversation, new_from=0, memory=context.memory)) == []


def test_every_announcement_phrase_contains_a_required_stem() -> None:
    # The stems are a pre-filter: a phrase without one of them could never be found.
    stems = LIB.announcement_stems
    assert stems is not None
    missing = [p for p in DATA["announcements"]["phrases"] if not stems.search(p.casefold())]
    assert missing == []


@pytest.mark.parametrize(
    "text",
    [
        "I'm transferring\nyou to a human agent now.",  # a line break inside the phrase
        "You are being  transferred to a specialist.",  # two spaces
        "A Human Agent Will call you back today.",
    ],
)
def test_the_pre_filter_reads_whitespace_and_case_as_the_scan_does(text: str) -> None:
    assert LIB.announcement(text) is not None


@pytest.mark.parametrize(
    "text",
    [
        "The transfer of $50 to your savings account is complete.",
        "Your connection was restored after the outage.",
        "I'll handle the refund for you.",
        "Our agents are available from 9 to 5.",
    ],
)
def test_the_pre_filter_lets_everyday_uses_of_the_verbs_pass_unscanned(text: str) -> None:
    assert LIB.announcement_stems is not None and not LIB.announcement_stems.search(text.casefold())


_GAPS = ["**", "\u2026 ", " \u2014 ", "\u200b", ", ", "-", "\u00a0"]


def _variants(text: str) -> list[str]:
    """``text`` with each gap between its first words written as the tokeniser would still read it."""
    words = text.split(" ")
    return [" ".join(words[:1]) + gap + " ".join(words[1:]) for gap in _GAPS] + [
        f"**{words[0]}** " + " ".join(words[1:])
    ]


@pytest.mark.parametrize("text", DATA["announcements"]["positives"] + DATA["announcements"]["phrases"])
def test_the_pre_filter_never_hides_what_the_scan_finds(text: str) -> None:
    for variant in _variants(text):
        found = any(not m.negated and not m.quoted for m in LIB.announcements.find(variant))
        assert LIB.announcement(variant) is not None or not found, variant


def test_every_pre_filter_pattern_starts_at_a_word_start() -> None:
    # Without the look-behind a pattern is tried inside every repeat of its stem ("handhandhand…"):
    # quadratic in a long word, where the scan it guards is linear.
    assert all(p.startswith("(?<![^\\W_])") for p in DATA["announcements"]["requires"])


def _mandatory_literals(pattern: str) -> list[str]:
    """The runs of plain characters at the top level of ``pattern``: every match holds each of them
    (a run inside a group, an alternation or a repeat is left out: a match may not hold it)."""
    runs, run = [], ""
    for opcode, argument in re_parser.parse(pattern):
        if opcode is re_constants.LITERAL:
            run += chr(argument)
        else:
            runs.append(run)
            run = ""
    return [*runs, run]


def test_every_pre_filter_pattern_holds_one_of_the_pre_filter_words() -> None:
    # The words are tested first: a pattern whose every match did not hold one of them could match a
    # message they turned away.
    words = DATA["announcements"]["requires_words"]
    for pattern in DATA["announcements"]["requires"]:
        literals = _mandatory_literals(pattern)
        assert any(word in literal for word in words for literal in literals), pattern
    # The check itself: a word only inside an alternation is not mandatory.
    assert not any("transfer" in run for run in _mandatory_literals(r"(transfer|mov)\w*\W+you"))
    assert "transfer" in _mandatory_literals(r"(?:be|being)\W+transfer")


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("tool_names", "verbs"),
        ("tool_names", "people"),
        ("announcements", "phrases"),
        ("announcements", "exclude"),
        ("announcements", "requires"),
        ("announcements", "requires_words"),
    ],
)
def test_a_list_entry_yaml_reads_as_a_boolean_is_refused(section: str, key: str) -> None:
    data = copy.deepcopy(handoff.library().data)
    data[section][key] = [*(data[section].get(key) or []), True]  # an unquoted "yes" or "on"
    with pytest.raises(ValueError, match=f"{section}: {key} must be a list of strings"):
        handoff.parse_library(data)
