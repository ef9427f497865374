"""The triage priority (otelsignals/triage.py): each term, the satisfaction rule, the agent baseline."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otelsignals.model import Conversation, Message, Role
from otelsignals.scoring import score
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext
from otelsignals.signals.detect import DETECTORS
from otelsignals.signals.outcome import standing_report
from otelsignals.triage import (
    ABSOLUTE_TOOL_CALLS_BASE,
    ABSOLUTE_TOOL_CALLS_FULL,
    AgentBaselines,
    Shape,
    Usual,
    priority,
    tool_volume,
    turn_volume,
)

QUIET = Shape(user_turns=3, tool_calls=2, median_user_turns=4, median_tool_calls=3)


def scored(**leaf_counts: int):
    """A Score with the given leaf counts (leaf names without layer/category) on a 3-turn conversation."""
    by_name = {leaf.rsplit(".", 1)[1]: leaf for leaf in tx.LEAF_TYPES}
    conversation = Conversation("c", [Message(Role.USER, "hi"), Message(Role.ASSISTANT, "hello")] * 3)
    return score(conversation, {by_name[name]: n for name, n in leaf_counts.items()})


def test_a_quiet_conversation_has_no_priority() -> None:
    result = priority(scored(), QUIET)
    assert result.value == 0.0 and result.terms == {} and result.reasons == []


@pytest.mark.parametrize(
    ("leaves", "term"),
    [
        ({"state_error": 1}, "execution_failures"),
        ({"oscillation": 1}, "execution_loops"),
        ({"timeout": 1}, "environment_exhaustion"),
        ({"escalation": 1}, "escalation_or_quit"),
        ({"quit": 1}, "escalation_or_quit"),
        ({"transfer": 1}, "handoff"),
        ({"negative_stance": 1}, "negative_stance"),
        ({"rephrase": 1}, "misalignment"),
        ({"repetition": 1}, "repetition"),
    ],
)
def test_each_kind_of_trouble_raises_the_priority_and_is_named(leaves: dict, term: str) -> None:
    result = priority(scored(**leaves), QUIET)
    assert result.value > 0 and set(result.terms) == {term}
    assert result.reasons, "every term above the reporting floor is explained"


def test_a_handoff_that_gave_up_outranks_one_that_routed_a_case() -> None:
    routed = priority(scored(transfer=1), QUIET, {"asked_by": "agent", "after": []})
    gave_up = priority(scored(transfer=1), QUIET, {"asked_by": "agent", "after": [], "unresolved": "despite"})
    assert routed.terms == {"handoff": 0.3} and gave_up.terms == {"handoff": 0.5}
    assert "unresolved ('despite')" in gave_up.reasons[0] and "unresolved" not in routed.reasons[0]


@pytest.mark.parametrize(
    ("leaves", "persisting", "term"),
    [
        ({"persists": 1}, "still no", 0.5),  # the user's last word: the problem persists
        ({"persists": 3}, None, None),  # reported, but a later message took it back
        ({}, "still no", None),  # no report counted (the leaf switched off): nothing to stand
        ({"persists": 2, "gratitude": 3, "success": 1}, "still slow", 0.5),  # thanks do not damp it
    ],
)
def test_the_problem_persisting_counts_only_while_the_users_last_word_leaves_it_standing(
    leaves: dict, persisting: str | None, term: float | None
) -> None:
    result = priority(scored(**leaves), QUIET, None, persisting)
    assert result.terms.get("problem_persists") == term
    if term:
        assert result.value == 50.0 and result.reasons == [
            f"the user's last word: the problem persists ({persisting!r})"
        ]


def _analysed(turns: list[tuple[str, str]]):
    """(score, standing report) of ``turns`` run trace by trace (one per user message) through every
    registered detector, as the pipeline does."""
    conversation, memory, counts = Conversation("c"), {}, {}
    starts = [i for i, (role, _) in enumerate(turns) if role == "user"] + [len(turns)]
    for start, end in zip([0, *starts[1:-1]], starts[1:], strict=True):
        conversation.messages.extend(Message(Role(role), text) for role, text in turns[start:end])
        ctx = DetectionContext(conversation, new_from=start, memory=memory, prior_counts=dict(counts))
        for entry in DETECTORS:
            for signal in entry.detector(ctx):
                counts[signal.type] = counts.get(signal.type, 0) + 1
    return score(conversation, counts), standing_report(memory)


TROUBLESHOOTING = [
    ("assistant", "Hi! How can I help?"),
    ("user", "My phone has no service since this morning."),
    ("assistant", "Please turn airplane mode off and on, then tell me what the status bar shows."),
    ("user", "Done, but it still says no service."),
    ("assistant", "Let's reset the network settings. Tell me once it has restarted."),
]


@pytest.mark.parametrize(
    ("last_word", "raised"),
    [
        ("Restarted. The status bar still shows no service, what should I try next?", True),
        ("Restarted. Nothing changed.", True),
        ("That didn't help either. Thanks anyway.", True),
        ("Restarted, and it works now! Thank you.", False),  # the report earlier was taken back
        ("Restarted. It says the SIM card is locked with a PIN.", False),  # a new finding, not the report
    ],
)
def test_the_term_raises_the_priority_only_when_the_report_is_the_users_last_word(
    last_word: str, raised: bool
) -> None:
    conversation_score, persisting = _analysed([*TROUBLESHOOTING, ("user", last_word)])
    assert conversation_score.leaf_counts.get(tx.PERSISTS, 0) >= 1  # "it still says no service"
    with_it = priority(conversation_score, QUIET, None, persisting)
    without = priority(conversation_score, QUIET)
    assert ("problem_persists" in with_it.terms) is raised
    assert (with_it.value > without.value) is raised
    assert with_it.value >= without.value


def test_more_instances_rank_higher_but_saturate_below_100() -> None:
    values = [priority(scored(state_error=n), QUIET).value for n in (1, 2, 4, 8)]
    assert values == sorted(values) and len(set(values)) == 4
    assert values[-1] < 100


def test_hard_evidence_outranks_soft_evidence_of_the_same_count() -> None:
    assert priority(scored(state_error=1), QUIET).value > priority(scored(rephrase=1), QUIET).value
    assert priority(scored(escalation=1), QUIET).value > priority(scored(negative_stance=1), QUIET).value


def test_satisfaction_never_cancels_a_failure() -> None:
    failed = priority(scored(state_error=2, retry=1), QUIET).value
    thanked = priority(scored(state_error=2, retry=1, gratitude=5, success=3, confirmation=2), QUIET).value
    assert thanked == failed


def test_satisfaction_damps_soft_evidence_at_most_by_a_third() -> None:
    long_and_busy = Shape(user_turns=12, tool_calls=30, median_user_turns=4, median_tool_calls=3)
    plain = priority(scored(rephrase=2), long_and_busy).value
    satisfied = priority(scored(rephrase=2, success=2), long_and_busy).value
    thanked = priority(scored(rephrase=2, gratitude=2), long_and_busy).value
    assert satisfied < thanked < plain
    assert satisfied >= 0.69 * plain  # damping 0.3 on the soft part only


def test_tool_volume_counts_against_the_agents_own_median() -> None:
    support = Shape(user_turns=4, tool_calls=12, median_user_turns=4, median_tool_calls=3)
    coding = Shape(user_turns=4, tool_calls=12, median_user_turns=4, median_tool_calls=40)
    assert 0.0 < tool_volume(coding) < tool_volume(support) < 1.0  # the same 12 calls: only the
    assert tool_volume(Shape(4, 18, 4, 3)) == pytest.approx(1.0)  # support agent is at 4× its median
    assert priority(scored(), support).value > priority(scored(), coding).value
    assert any(
        "12 tool calls (4.0× this agent's median of 3)" in r for r in priority(scored(), support).reasons
    )
    assert priority(scored(), coding).reasons == ["12 tool calls"]  # below its median: absolute only


def test_tool_volume_counts_in_absolute_terms_whatever_the_agent() -> None:
    """A conversation of 30 tool calls is a hard task even for an agent that usually makes 30."""
    busy_agent = Shape(user_turns=4, tool_calls=30, median_user_turns=4, median_tool_calls=30)
    assert tool_volume(busy_agent) > 0.5
    assert tool_volume(Shape(4, 3, 4, 3)) == 0.0  # a few calls are what any task may need
    assert turn_volume(Shape(12, 3, 12, 3)) > 0.5  # 12 user turns, the agent's median: still long


def test_before_an_agent_has_a_baseline_the_fixed_scales_alone_count() -> None:
    assert tool_volume(Shape(3, 0)) == 0.0
    assert tool_volume(Shape(3, int(ABSOLUTE_TOOL_CALLS_BASE))) == 0.0
    assert 0.0 < tool_volume(Shape(3, 10)) < 1.0
    assert tool_volume(Shape(3, int(ABSOLUTE_TOOL_CALLS_FULL))) == pytest.approx(1.0)
    assert turn_volume(Shape(5, 0)) == 0.0 and turn_volume(Shape(15, 0)) == pytest.approx(1.0)


@given(
    st.dictionaries(
        st.sampled_from(["state_error", "retry", "timeout", "escalation", "rephrase"]), st.integers(0, 6)
    ),
    st.sampled_from(["state_error", "retry", "timeout", "escalation", "rephrase", "transfer"]),
    st.integers(0, 60),
    st.integers(1, 30),
)
def test_more_trouble_never_lowers_the_priority(leaves: dict, extra: str, calls: int, turns: int) -> None:
    shape = Shape(turns, calls, 5, 5)
    before = priority(scored(**leaves), shape).value
    after = priority(scored(**{**leaves, extra: leaves.get(extra, 0) + 1}), shape).value
    assert 0.0 <= before <= after <= 100.0


def test_agent_baselines_need_enough_conversations_and_stay_bounded() -> None:
    baselines = AgentBaselines(window=20, min_conversations=5, max_agents=2, refresh=1)
    for n in range(4):
        baselines.record("support", f"c{n}", Shape(4, n))
    assert baselines.usual("support") is None
    baselines.record("support", "c4", Shape(6, 10, cut_off_turns=1))
    assert baselines.usual("support") == Usual(4.0, 2.0, 0.2)  # 1 of 5 had a turn cut off
    baselines.record("support", "c4", Shape(8, 12))  # the same conversation grew
    assert baselines.usual("support") == Usual(4.0, 2.0, 0.0)  # updated, not added
    for n in range(50):
        baselines.record("support", f"d{n}", Shape(3, 1))
    assert baselines.usual("support") == Usual(3.0, 1.0, 0.0)  # only the 20 latest conversations count
    baselines.record("coding", "x", Shape(1, 1))
    baselines.record("data", "y", Shape(1, 1))
    assert len(baselines) == 2 and baselines.usual("support") is None  # least recently seen forgotten


def test_a_turn_cut_off_is_hard_evidence_and_named() -> None:
    cut_off = priority(scored(), Shape(3, 2, 4, 3, cut_off_turns=1))
    assert set(cut_off.terms) == {"cut_off_turns"} and cut_off.reasons == [
        "agent's turn ended on a tool step, unanswered"
    ]
    assert cut_off.value > priority(scored(escalation=1), QUIET).value  # no answer at all
    twice = priority(scored(gratitude=3, success=2), Shape(3, 2, 4, 3, cut_off_turns=2))
    assert twice.value > cut_off.value and "(2×)" in twice.reasons[0]  # satisfaction does not damp it


@pytest.mark.parametrize(
    ("usual_share", "counted"),
    [
        (None, True),  # no baseline yet for the agent: every cut-off turn counts
        (0.0, True),
        (0.49, True),  # a struggling agent: often cut off, but not in half of its conversations
        (0.5, False),  # half of the agent's conversations end turns on tools: its design
        (1.0, False),
    ],
)
def test_an_agent_whose_turns_usually_end_on_tools_gets_no_cut_off_term(
    usual_share: float | None, counted: bool
) -> None:
    shape = Shape(3, 2, 4, 3, cut_off_turns=1, usual_cut_off_share=usual_share)
    assert ("cut_off_turns" in priority(scored(), shape).terms) is counted


@pytest.mark.parametrize(
    ("last_word", "raised"),
    [("Restarted. Nothing changed.", True), ("Restarted, and it works now! Thank you.", False)],
)
def test_the_pipeline_ranks_with_the_report_the_users_last_word_leaves_standing(last_word, raised) -> None:
    """Through the analyzer, as the sidecar runs it: one trace per turn, each model call resending
    the history (analysis.rank hands the standing report to the priority)."""
    import json

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from otelsignals.offline import traces_in_time_order
    from otelsignals.pipeline.analyzer import Analyzer
    from otelsignals.telemetry import Telemetry
    from tests.pipeline.test_conversation_key import _span

    said = [*TROUBLESHOOTING, ("user", last_word)]
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    user_turns = [index for index, (role, _) in enumerate(said) if role == "user"]
    for trace, at in enumerate(user_turns, start=1):
        history = [
            {"role": role, "parts": [{"type": "text", "content": text}]} for role, text in said[: at + 1]
        ]
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.conversation.id": "phone-1",
            "gen_ai.input.messages": json.dumps(history),
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "Let me look into it."}]}]
            ),
        }
        spans.append(_span(trace, trace * 100, "chat", attributes))
    analyzer = Analyzer(Telemetry(60))
    for trace in traces_in_time_order([request]):
        analyzer.process(trace)
    (state,) = list(analyzer.sessions)
    assert ("problem_persists" in state.priority.terms) is raised
