"""With an LLM judge configured (``evals.judge_url``), each analysed trace's ``confidence`` and
``tool_correctness`` come from the judge instead of the proxies, for the session metrics.

The judge is asked in the background, never on the pipeline's path: the trace is forwarded at once
with its proxy values, and when the judge answers, the session's record of that trace is updated
(its sources say ``llm_judge``) on the analysis thread, which owns the sessions. The judge's own
error text is not logged: it may quote the conversation. A bounded number of judgements wait at
once; beyond, the proxies stay and the skip is counted. An errored judgement leaves the proxy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

from otelsignals.analysis import Analysis
from otelsignals.config import EvalsConfig
from otelsignals.evals.judge import Judge, JudgeConfig
from otelsignals.model import Conversation, Role
from otelsignals.pipeline.llm_endpoints import ChatCompletions
from otelsignals.pipeline.sessions import SessionStore
from otelsignals.telemetry import Telemetry

logger = logging.getLogger("otelsignals.trace_judge")

MAX_PENDING = 64


class TraceJudge:
    def __init__(
        self,
        evals: EvalsConfig,
        sessions: SessionStore,
        telemetry: Telemetry,
        on_event_loop: Callable[[Callable[[], None]], None],
        on_analysis_thread: Callable[[Callable[[], None]], None],
    ) -> None:
        self.sessions = sessions
        self.telemetry = telemetry
        self._on_event_loop = on_event_loop
        self._on_analysis_thread = on_analysis_thread
        self.completions = ChatCompletions(evals.judge_url, evals.judge_api_key)
        self.judge = Judge(
            JudgeConfig(
                model=evals.judge_model, threshold=evals.threshold, thresholds=dict(evals.thresholds)
            ),
            self.completions,
        )
        self._pending: set[asyncio.Task[None]] = set()

    def submit(self, analysis: Analysis) -> None:
        """On the analysis thread: ask the judge about this trace's conversation, in the background."""
        state = self.sessions.get(analysis.conversation_id)
        if state is None:
            return
        if len(self._pending) >= MAX_PENDING:
            self.telemetry.judge_skipped.inc()
            return
        # The conversation as of this trace (later traces keep appending to the live one), with what
        # the spans said of it: the tools the agent was offered, which tool_correctness asks about.
        conversation = state.conversation
        snapshot = Conversation(
            conversation.key, list(conversation.messages), available_tools=dict(conversation.available_tools)
        )
        self._on_event_loop(lambda: self._start(analysis.conversation_id, analysis.trace_id.hex(), snapshot))

    def _start(self, session_id: str, trace_id: str, conversation: Conversation) -> None:
        if len(self._pending) >= MAX_PENDING:  # submit() counted from another thread: check again
            self.telemetry.judge_skipped.inc()
            return
        task = asyncio.create_task(self._judge(session_id, trace_id, conversation))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def stop(self) -> None:
        for task in list(self._pending):
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)
        await self.completions.close()

    async def _judge(self, session_id: str, trace_id: str, conversation: Conversation) -> None:
        used_tools = any(m.role is Role.TOOL for m in conversation.messages)
        metrics = ["confidence", "tool_correctness"] if used_tools else ["confidence"]
        try:
            verdicts = await self.judge.evaluate(conversation, metrics)
        except Exception as exc:  # the judge is outside us: keep the proxies and say so (rate-limited)
            self.telemetry.judge_errors.inc()
            self.telemetry.problems.warning(
                "judge_error", f"LLM judge failed ({getattr(exc, 'kind', type(exc).__name__)})"
            )
            return
        self.telemetry.problems.recovered("judge_error", "the LLM judge answers again")
        judged = {name: v.score for name, v in verdicts.items() if v.score is not None}
        if len(judged) < len(verdicts):
            self.telemetry.judge_errors.inc()
        if judged:
            self._on_analysis_thread(lambda: self._record(session_id, trace_id, judged))

    def _record(self, session_id: str, trace_id: str, judged: dict[str, float]) -> None:
        state = self.sessions.get(session_id)
        if state is None:
            return
        for index, signals in enumerate(state.trace_signals):
            if signals.trace_id == trace_id:
                sources = dict(signals.sources) | dict.fromkeys(judged, "llm_judge")
                state.trace_signals[index] = dataclasses.replace(signals, **judged, sources=sources)
                break


def create_trace_judge(
    evals: EvalsConfig,
    sessions: SessionStore,
    telemetry: Telemetry,
    on_event_loop: Callable[[Callable[[], None]], None],
    on_analysis_thread: Callable[[Callable[[], None]], None],
) -> TraceJudge | None:
    """The per-trace judge of the ``evals`` section: only with a judge (``judge_url``) asked to
    judge every trace (``judge_traces``)."""
    if not (evals.judge_url and evals.judge_traces):
        return None
    return TraceJudge(evals, sessions, telemetry, on_event_loop, on_analysis_thread)
