"""What a detector sees and returns.

Detection is incremental: each call looks at the messages a trace added (``new_from`` onward) and
may look back over a bounded window of earlier ones, never the whole history, so analysing turn N
costs O(new messages). What a detector must remember between calls (loop trackers, previous
answers) lives in ``memory``, a dict the caller keeps per conversation and per detector module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from otelsignals.model import Conversation, LlmCall, Message, SignalInstance

# SPEC §4/§8: efficiency is 1.0 up to this many user turns.
BASELINE_USER_TURNS = 5


@dataclass
class DetectionContext:
    conversation: Conversation
    new_from: int  # index into conversation.messages of the first message not analysed before
    new_llm_calls: list[LlmCall] = field(default_factory=list)  # model calls this trace made
    memory: dict[str, Any] = field(default_factory=dict)  # kept by the caller between calls
    baseline_user_turns: int = BASELINE_USER_TURNS
    # Instances per leaf type found by earlier calls on this conversation (read only).
    prior_counts: Mapping[str, int] = field(default_factory=dict)
    # Work shared by several detectors within one call (e.g. classifying failed tool results once
    # for the eleven failure and exhaustion leaves); not kept between calls.
    scratch: dict[Any, Any] = field(default_factory=dict)

    @property
    def messages(self) -> list[Message]:
        return self.conversation.messages

    def absolute_index(self, local_index: int) -> int:
        """SignalInstance.message_index for conversation.messages[local_index]."""
        return self.conversation.message_offset + local_index

    def new_messages(self) -> list[tuple[int, Message]]:
        messages = self.conversation.messages
        return list(enumerate(messages[self.new_from :], start=self.new_from))


Detector = Callable[[DetectionContext], list[SignalInstance]]
