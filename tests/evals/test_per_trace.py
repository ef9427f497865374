"""The per-trace agent metrics as the pipeline computes them: each trace's input and output embedded
once, its output kept prepared (ComparableOutput) for the next traces' loop detection, and the
scores equal to the text API's (coherence, loop_detection) whatever the embedding cache holds."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from otelsignals.conversation import RecentList
from otelsignals.evals.embeddings import StaticEmbedder
from otelsignals.evals.per_trace import trace_signals
from otelsignals.evals.trace_metrics import (
    DEFAULT_LOOP_WINDOW,
    ComparableOutput,
    coherence,
    content_words,
    jaccard,
    loop_detection,
    loop_detection_between,
)
from otelsignals.model import Message, Role, ToolResult


class CountingEmbedder(StaticEmbedder):
    """The shipped model without a cache, counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__(cache_size=0)
        self.embedded: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.embedded += texts
        return super().embed(texts)


# (user turn, assistant answer): the answer of turn 4 repeats turn 2's, the others differ.
TURNS = [
    ("Where is my parcel 4471?", "Your parcel 4471 left the Leeds depot this morning."),
    ("Can you check again?", "I could not reach the carrier's tracking service; it timed out."),
    (
        "Try once more please",
        "The tracking service is down, so I cannot see the parcel's position right now.",
    ),
    ("Any news?", "Your parcel 4471 left the Leeds depot this morning."),
    ("and now?", "   "),
    ("Thanks, bye", "You're welcome, have a good day!"),
]


def test_each_output_is_embedded_once_and_scores_match_the_text_api() -> None:
    embedder = CountingEmbedder()
    reference = StaticEmbedder()
    kept: RecentList[ComparableOutput] = RecentList(DEFAULT_LOOP_WINDOW)
    answers: list[str] = []
    for number, (said, answered) in enumerate(TURNS):
        messages = [Message(Role.USER, said), Message(Role.ASSISTANT, answered)]
        before = len(embedder.embedded)
        metrics, output = trace_signals(f"t{number}", messages, [], kept, embedder)
        assert embedder.embedded[before:] == [said, answered]  # once each, both in one call
        assert metrics.coherence == coherence(said, answered, reference).score
        if answers:
            assert metrics.loop_detection == loop_detection(answered, answers, reference).score
            assert metrics.sources["loop_detection"] == "embedding"
        else:
            assert metrics.loop_detection is None  # nothing earlier in the session
        assert output is not None
        kept.append(output)
        answers.append(answered)
    scores = [loop_detection(a, answers[:i], reference).score for i, a in enumerate(answers) if i]
    assert scores[2] < 0.3  # turn 4 repeats turn 2 word for word
    assert scores[3] == 1.0  # a blank answer is not evaluated
    assert len(kept) == DEFAULT_LOOP_WINDOW


def test_no_output_is_kept_without_an_answer_or_an_embedder() -> None:
    tool_only = [
        Message(Role.USER, "Look up order 12"),
        Message(Role.TOOL, '{"status": "shipped"}', tool_result=ToolResult(call_id="c1", content="shipped")),
    ]
    metrics, output = trace_signals("t", tool_only, [], [], StaticEmbedder())
    assert output is None and metrics.coherence is not None
    metrics, output = trace_signals(
        "t", [Message(Role.USER, "hi"), Message(Role.ASSISTANT, "hello")], [], [], None
    )
    assert output is None and metrics.coherence is None and metrics.loop_detection is None


JACCARD_PAIRS = [
    ("The weather in Paris is sunny", "Sunny weather in Paris today"),
    ("The weather in Paris is sunny", "the WEATHER in paris is SUNNY"),  # case does not matter
    ("I can't open the file", "I can’t open the file"),  # curly or straight apostrophe alike
    ("the and is of", "a an the"),  # stop words only: nothing to compare, 0.0
    ("", ""),
    ("refund order 1234", "cancel subscription 99"),  # nothing shared
    ("deploy failed deploy failed deploy", "deploy failed"),  # repeats count once
]


@pytest.mark.parametrize(("first", "second"), JACCARD_PAIRS)
def test_prepared_jaccard_equals_the_word_sets_jaccard(first: str, second: str) -> None:
    empty = np.zeros(0, dtype=np.float32)
    prepared = ComparableOutput.of(first, empty).jaccard(ComparableOutput.of(second, empty))
    assert prepared == jaccard(content_words(first), content_words(second))


def test_window_and_trace_index_of_prepared_outputs() -> None:
    embedder = StaticEmbedder()
    texts = ["Checking the logs now.", "Restarting the service.", "The service is healthy again.", "Done."]
    rows = embedder.embed(texts)
    prepared = [ComparableOutput.of(text, row) for text, row in zip(texts, rows, strict=True)]
    result = loop_detection_between(prepared[0], prepared[1:], window=2, first_index=5)
    assert [c["trace_index"] for c in result.metadata["comparisons"]] == [6, 7]
    assert result.score == loop_detection(texts[0], ["x"] * 5 + texts[1:], embedder, window=2).score
    with pytest.raises(ValueError, match="window"):
        loop_detection_between(prepared[0], prepared[1:], window=0)
