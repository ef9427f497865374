"""The signal taxonomy (SPEC §3): layer → category → leaf type, as dotted names.

A signal's ``type`` is ``<layer>.<category>.<leaf>``; its span event is ``signal.<type>``.
"""

from __future__ import annotations

TAXONOMY: dict[str, dict[str, tuple[str, ...]]] = {
    "interaction": {
        "misalignment": ("correction", "rephrase", "clarification"),
        "stagnation": ("dragging", "repetition"),
        "disengagement": ("escalation", "quit", "negative_stance"),
        "satisfaction": ("gratitude", "confirmation", "success"),
        # The agent handing the conversation to a person (a transfer tool call or its announcement).
        # Not part of SPEC §3's twenty leaves: it is what the agent did, neither good nor bad by
        # itself, so the §8 quality score ignores it and the triage priority weighs it (triage.py).
        "handoff": ("transfer",),
        # The user reports that the problem is still there after what the agent tried ("still no
        # service", "nothing changed", "it didn't help"). Not one of SPEC §3's twenty either: a report
        # about the task, not a stance toward the agent (a polite "still says offline" is no
        # negative_stance nor correction in the labelled corpora), so the §8 quality score ignores it;
        # the triage priority weighs the report the user's last word leaves standing (outcome.py).
        "outcome": ("persists",),
    },
    "execution": {
        "failure": ("invalid_args", "bad_query", "tool_not_found", "auth_misuse", "state_error"),
        "loops": ("retry", "parameter_drift", "oscillation"),
    },
    "environment": {
        "exhaustion": (
            "api_error",
            "timeout",
            "rate_limit",
            "network",
            "malformed_response",
            "context_overflow",
        ),
    },
}

CATEGORIES: tuple[str, ...] = tuple(
    f"{layer}.{category}" for layer, categories in TAXONOMY.items() for category in categories
)
LEAF_TYPES: tuple[str, ...] = tuple(
    f"{layer}.{category}.{leaf}"
    for layer, categories in TAXONOMY.items()
    for category, leaves in categories.items()
    for leaf in leaves
)

# The leaves the labelled corpora (tests/corpus*) annotate: SPEC §3's table. The hand-off (what the
# agent did) and the user's report that the problem persists are not among its twenty; their own
# tests cover them.
BEYOND_SPEC_CATEGORIES: tuple[str, ...] = ("interaction.handoff", "interaction.outcome")
LABELLED_LEAF_TYPES: tuple[str, ...] = tuple(
    leaf for leaf in LEAF_TYPES if leaf.rsplit(".", 1)[0] not in BEYOND_SPEC_CATEGORIES
)


def category_of(signal_type: str) -> str:
    """``interaction.disengagement.escalation`` → ``interaction.disengagement``."""
    return signal_type.rsplit(".", 1)[0]


def leaf_name(signal_type: str) -> str:
    """``interaction.disengagement.escalation`` → ``escalation``."""
    return signal_type.rsplit(".", 1)[1]


# Names used across detectors, scoring and enrichment.
CORRECTION = "interaction.misalignment.correction"
REPHRASE = "interaction.misalignment.rephrase"
CLARIFICATION = "interaction.misalignment.clarification"
DRAGGING = "interaction.stagnation.dragging"
REPETITION = "interaction.stagnation.repetition"
ESCALATION = "interaction.disengagement.escalation"
QUIT = "interaction.disengagement.quit"
NEGATIVE_STANCE = "interaction.disengagement.negative_stance"
GRATITUDE = "interaction.satisfaction.gratitude"
CONFIRMATION = "interaction.satisfaction.confirmation"
SUCCESS = "interaction.satisfaction.success"
HANDOFF = "interaction.handoff.transfer"
PERSISTS = "interaction.outcome.persists"
INVALID_ARGS = "execution.failure.invalid_args"
BAD_QUERY = "execution.failure.bad_query"
TOOL_NOT_FOUND = "execution.failure.tool_not_found"
AUTH_MISUSE = "execution.failure.auth_misuse"
STATE_ERROR = "execution.failure.state_error"
RETRY = "execution.loops.retry"
PARAMETER_DRIFT = "execution.loops.parameter_drift"
OSCILLATION = "execution.loops.oscillation"
API_ERROR = "environment.exhaustion.api_error"
TIMEOUT = "environment.exhaustion.timeout"
RATE_LIMIT = "environment.exhaustion.rate_limit"
NETWORK = "environment.exhaustion.network"
MALFORMED_RESPONSE = "environment.exhaustion.malformed_response"
CONTEXT_OVERFLOW = "environment.exhaustion.context_overflow"

MISALIGNMENT = "interaction.misalignment"
STAGNATION = "interaction.stagnation"
DISENGAGEMENT = "interaction.disengagement"
SATISFACTION = "interaction.satisfaction"
HANDOFF_CATEGORY = "interaction.handoff"
OUTCOME = "interaction.outcome"
FAILURE = "execution.failure"
LOOPS = "execution.loops"
EXHAUSTION = "environment.exhaustion"
