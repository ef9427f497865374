"""One analysed conversation turn: detection on what the trace added, then scores over the whole
conversation so far. The pipeline writes this onto spans; ``otelsignals analyze`` prints it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from otelsignals.conversation import ConversationState, TraceUpdate
from otelsignals.model import Role, SignalInstance
from otelsignals.scoring import Score, score
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import (
    BASELINE_USER_TURNS,
    MESSAGE_NUMBER_METADATA_KEYS,
    DetectionContext,
    moved_numbers,
)
from otelsignals.signals.detect import detect, renumber_memory
from otelsignals.signals.outcome import standing_report
from otelsignals.triage import NO_PRIORITY, AgentBaselines, Priority, Shape, priority

SNIPPET_LIMIT = 200
CUT_OFF_TURNS_KEPT = 4  # the priority's term is 0.97 at four


@dataclass
class Analysis:
    conversation_id: str
    trace_id: bytes
    span_id: bytes | None
    agent_id: str | None
    score: Score
    new_signals: list[SignalInstance] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # detector groups not run, e.g. no content
    latency_ms: float = 0.0  # from the turn's first model call starting to its last one ending
    priority: Priority = NO_PRIORITY  # the triage priority of the conversation so far (triage.py)
    # A part of a trace analysed before (spans that came after it was released): its turn was
    # counted with the first part (session metrics, reputation), not again.
    late_part: bool = False

    def to_json(self, snippets: bool = True) -> dict[str, Any]:
        """SPEC §0's line for ``otelsignals analyze --json``."""
        s = self.score
        return {
            "conversation_id": self.conversation_id,
            "trace_id": self.trace_id.hex(),
            "span_id": self.span_id.hex() if self.span_id else None,
            "agent_id": self.agent_id,
            "turn_count": s.turn_count,
            "quality": s.quality,
            "quality_score": s.quality_score,
            "efficiency_score": s.efficiency_score,
            "flagged": s.flagged,
            "priority": self.priority.value,
            "priority_reasons": self.priority.reasons,
            "signals": [
                {
                    "type": signal.type,
                    "message_index": signal.message_index,
                    "confidence": round(signal.confidence, 4),
                    "snippet": signal.snippet if snippets else None,
                }
                for signal in self.new_signals
            ],
            "skipped": self.skipped,
        }


def analyze_update(
    state: ConversationState,
    update: TraceUpdate,
    baseline: int = BASELINE_USER_TURNS,
    agent_baselines: AgentBaselines | None = None,
    disabled: frozenset[str] = frozenset(),
) -> Analysis:
    """Detect on the messages ``update`` added to ``state``, score the conversation so far and rank
    it (``agent_baselines``: what is usual for its agent; None: the fixed scales)."""
    conversation = state.conversation
    if update.put_in_front:
        _renumber(state, update.put_in_front)
    context = DetectionContext(
        conversation,
        new_from=update.first_new_message,
        new_llm_calls=update.llm_calls,
        memory=state.detector_memory,
        baseline_user_turns=baseline,
        prior_counts=state.leaf_counts,
    )
    found, skipped = detect(context, disabled)
    for signal in found:
        if signal.snippet and len(signal.snippet) > SNIPPET_LIMIT:
            signal.snippet = signal.snippet[:SNIPPET_LIMIT]
        state.leaf_counts[signal.type] += 1
    state.recent_signals.extend(found)
    _note_cut_off_turn(state, update, found)
    state.tool_results_seen += sum(
        1 for message in conversation.messages[update.first_new_message :] if message.role is Role.TOOL
    )
    conversation_score = score(conversation, state.leaf_counts, baseline)
    return Analysis(
        conversation_id=conversation.key,
        trace_id=update.trace_id,
        span_id=update.analysed_span_id,
        agent_id=conversation.agent_id,
        score=conversation_score,
        priority=rank(state, conversation_score, agent_baselines),
        new_signals=found,
        skipped=skipped,
        latency_ms=turn_latency_ms(update),
    )


def _renumber(state: ConversationState, by: int) -> None:
    """``by`` messages were put in front of those held (a system prompt that came late): what the
    analysis remembers by message number moves with them, in the latest signals' metadata too. The
    latest signals are replaced, not edited: an earlier trace's analysis may still be on its way to
    the enricher."""
    renumber_memory(state.detector_memory, by)
    state.recent_signals[:] = [
        dataclasses.replace(
            signal,
            message_index=signal.message_index + by,
            metadata={
                key: moved_numbers(value, by) if key in MESSAGE_NUMBER_METADATA_KEYS else value
                for key, value in signal.metadata.items()
            },
        )
        for signal in state.recent_signals
    ]


def _note_cut_off_turn(state: ConversationState, update: TraceUpdate, found: list[SignalInstance]) -> None:
    """Keep the conversation's turns cut off up to date with what this trace (or part of one) says.

    A trace that holds a whole turn and was cut off (conversation.TurnEnd) is listed, unless a
    hand-off ended it on a tool on purpose (the hand-off term ranks it). Until the user speaks
    again, the latest one is provisional: a new trace whose first words are the agent's carries
    on that turn (a client that posts each step, an application that answers a failed tool in a
    new trace), so it was not the turn's end. A late part of a listed trace that brings the answer
    takes it back off; a part without the spans around it does not list anything.
    """
    end = update.turn_end
    if end is None:
        return
    turns = state.cut_off_turns
    if end.goes_on:
        turns = tuple(turn for turn in turns if turn[1])  # the provisional one was not the turn's end
    elif end.user_spoke:
        turns = tuple((trace_id, True) for trace_id, _ in turns)  # the user spoke after them
    listed = any(trace_id == update.trace_id for trace_id, _ in turns)
    if not end.cut_off or any(s.type == tx.HANDOFF for s in found):
        turns = tuple(turn for turn in turns if turn[0] != update.trace_id)
    elif end.whole_turn and not listed:
        # A late part of a trace older than the latest: the user has spoken since.
        final = state.conversation.trace_ids[-1:] != [update.trace_id]
        turns = (*turns, (update.trace_id, final))
    state.cut_off_turns = turns[-CUT_OFF_TURNS_KEPT:]


def rank(state: ConversationState, conversation_score: Score, baselines: AgentBaselines | None) -> Priority:
    """The conversation's triage priority, against its agent's usual size; then it joins that usual."""
    conversation = state.conversation
    usual = baselines.usual(conversation.agent_id) if baselines is not None else None
    shape = Shape(
        user_turns=conversation_score.user_turns,
        tool_calls=state.tool_results_seen,
        median_user_turns=usual.user_turns if usual else None,
        median_tool_calls=usual.tool_calls if usual else None,
        cut_off_turns=len(state.cut_off_turns),
        usual_cut_off_share=usual.cut_off_share if usual else None,
    )
    if baselines is not None:
        baselines.record(conversation.agent_id, conversation.key, shape)
    handoff = next((s.metadata for s in reversed(state.recent_signals) if s.type == tx.HANDOFF), None)
    state.priority = priority(conversation_score, shape, handoff, standing_report(state.detector_memory))
    return state.priority


def turn_latency_ms(update: TraceUpdate) -> float:
    calls = [c for c in update.llm_calls if c.start_time_unix_nano and c.end_time_unix_nano]
    if not calls:
        return 0.0
    span = max(c.end_time_unix_nano for c in calls) - min(c.start_time_unix_nano for c in calls)
    return max(0.0, span / 1e6)
