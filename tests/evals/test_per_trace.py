"""The per-trace agent metrics as the pipeline computes them: each trace's input and output embedded
once, its output kept prepared (ComparableOutput) for the next traces' loop detection, and the
scores equal to the text API's (coherence, loop_detection) whatever the embedding cache holds."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from otelsignals.evals.embeddings import EmbeddingError, StaticEmbedder
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
from otelsignals.model import Message, RecentList, Role, ToolResult


class CountingEmbedder(StaticEmbedder):
    """The shipped model without a cache, counting the texts it embeds; like an embeddings API, it
    refuses a blank text."""

    def __init__(self) -> None:
        super().__init__(cache_size=0)
        self.embedded: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if any(not text.strip() for text in texts):
            raise EmbeddingError("'$.input' is invalid: a blank text")
        self.embedded += texts
        return super().embed(texts)


def expected_loop_score(answer: str, earlier: Sequence[str], embedder: StaticEmbedder) -> float:
    """Loop detection as SPEC §6 defines it, written out here: 1 − max over the last 3 earlier
    answers of max(cosine, 0) × Jaccard of the content words."""
    rows = embedder.embed([answer, *earlier[-3:]])
    hybrids = [  # rows are unit vectors: their dot product is the cosine (up to float32 rounding)
        min(max(float(np.dot(rows[0], row)), 0.0), 1.0) * jaccard(content_words(answer), content_words(text))
        for row, text in zip(rows[1:], earlier[-3:], strict=True)
    ]
    return 1.0 - max(hybrids)


# (user turn, assistant answer): the answer of turn 4 repeats turn 2's; turn 5 answers with blanks,
# turn 6 says nothing and is answered, turn 7 only speaks.
TURNS = [
    ("Where is my parcel 4471?", "Your parcel 4471 left the Leeds depot this morning."),
    ("Can you check again?", "I could not reach the carrier's tracking service; it timed out."),
    (
        "Try once more please",
        "The tracking service is down, so I cannot see the parcel's position right now.",
    ),
    ("Any news?", "Your parcel 4471 left the Leeds depot this morning."),
    ("and now?", "   "),
    ("", "Your parcel 4471 is out for delivery."),
    ("Thanks, bye", ""),
]


def test_each_text_is_embedded_once_and_scores_follow_the_definition() -> None:
    embedder = CountingEmbedder()
    reference = StaticEmbedder()
    kept: RecentList[ComparableOutput] = RecentList(DEFAULT_LOOP_WINDOW)
    answers: list[str] = []
    for number, (said, answered) in enumerate(TURNS):
        messages = [Message(Role.USER, said), Message(Role.ASSISTANT, answered)]
        before = len(embedder.embedded)
        metrics, output = trace_signals(f"t{number}", messages, [], kept, embedder)
        # Once each, in one call, blanks never sent; earlier answers are not embedded again.
        assert embedder.embedded[before:] == [text for text in (said, answered) if text.strip()]
        assert metrics.coherence == coherence(said, answered, reference).score
        if not answered:
            assert output is None and metrics.loop_detection is None
            continue
        if not answers:
            assert metrics.loop_detection is None  # nothing earlier in the session
        elif not answered.strip():
            assert metrics.loop_detection == 1.0  # a blank answer is not evaluated
        else:
            assert metrics.loop_detection == pytest.approx(
                expected_loop_score(answered, answers, reference), abs=1e-6
            )
            assert metrics.sources["loop_detection"] == "embedding"
        assert output is not None
        kept.append(output)
        answers.append(answered)
    assert expected_loop_score(TURNS[3][1], answers[:3], reference) < 0.3  # the repeat is seen as one


def test_no_output_is_kept_without_an_answer_or_an_embedder() -> None:
    tool_only = [
        Message(Role.USER, "Look up order 12"),
        Message(Role.TOOL, '{"status": "shipped"}', tool_result=ToolResult(call_id="c1", content="shipped")),
    ]
    metrics, output = trace_signals("t", tool_only, [], [], CountingEmbedder())
    assert output is None and metrics.coherence == 1.0  # nothing answered: nothing to judge
    metrics, output = trace_signals(
        "t", [Message(Role.USER, "hi"), Message(Role.ASSISTANT, "hello")], [], [], None
    )
    assert output is None and metrics.coherence is None and metrics.loop_detection is None


def test_a_kept_output_holds_only_its_own_row() -> None:
    embedder = StaticEmbedder()
    rows = embedder.embed(["first answer here", "second answer here"])
    kept = ComparableOutput.of("second answer here", rows[1])
    assert kept.vector is not None and len(kept.vector_bytes or b"") == rows[1].nbytes  # its row only
    assert np.array_equal(kept.vector, rows[1])
    assert kept.nbytes == kept.vector.nbytes + 8 * len(content_words("second answer here"))
    assert ComparableOutput.of("   ", None).cosine(kept) == 0.0


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
    assert result.score == pytest.approx(expected_loop_score(texts[0], texts[2:], embedder), abs=1e-6)
    from_texts = loop_detection(texts[0], ["x"] * 5 + texts[1:], embedder, window=2)
    assert (from_texts.score, from_texts.metadata["comparisons"]) == (
        result.score,
        result.metadata["comparisons"],
    )
    with pytest.raises(ValueError, match="window"):
        loop_detection_between(prepared[0], prepared[1:], window=0)


def test_traces_with_the_same_sources_share_one_dict() -> None:
    embedder = CountingEmbedder()
    turn = [Message(Role.USER, "Where is my parcel?"), Message(Role.ASSISTANT, "It left the depot.")]
    first, output = trace_signals("t1", turn, [], [], embedder)
    second, _ = trace_signals("t2", turn, [], [output] if output else [], embedder)
    third, _ = trace_signals("t3", turn, [], [], embedder)
    assert first.sources is third.sources  # the same signals from the same sources: one dict
    assert first.sources == {"confidence": "proxy", "coherence": "embedding"}
    # Near-miss: one more signal (loop detection against the first answer) is another dict.
    assert second.sources is not first.sources and second.sources["loop_detection"] == "embedding"
    assert first.sources == {"confidence": "proxy", "coherence": "embedding"}  # left as it was
