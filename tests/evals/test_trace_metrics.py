"""coherence and loop_detection (SPEC §6) on real text with the shipped offline model.

Calibration (GloVe 6B 50-d, SIF-weighted; measured when these tests were written):
- coherence: on-topic answers score 0.68–0.93, off-topic ones 0.29–0.65 for the same question;
  the margin per pair is 0.2–0.5, so the tests assert "on-topic > off-topic + 0.15".
- loop_detection: a verbatim repeat scores ~0.0 (cosine 1 × Jaccard 1); a near-verbatim
  rephrasing with the same content words ~0.17; the "Paris/Tokyo/Lima weather" enumeration
  ~0.83 (cosine ~0.85 but Jaccard 0.2: only "weather" is shared). The tests assert < 0.3 and > 0.5.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from otelsignals.evals.embeddings import StaticEmbedder, default_embedder
from otelsignals.evals.session_metrics import MetricResult
from otelsignals.evals.trace_metrics import (
    NO_PREVIOUS_REASON,
    STOP_WORDS,
    coherence,
    content_words,
    jaccard,
    loop_detection,
)


@pytest.fixture(scope="module")
def embedder() -> StaticEmbedder:
    return default_embedder()


# (question, on-topic answer, off-topic answer)
COHERENCE_CASES = [
    (
        "How do I reset my password?",
        "Click 'Forgot password' on the login page and follow the emailed link to set a new password.",
        "The Eiffel Tower was completed in 1889 for the World's Fair.",
    ),
    (
        "What is the capital of France?",
        "The capital of France is Paris.",
        "I recommend a balanced diet with vegetables and protein.",
    ),
    (
        "Summarise the quarterly sales report",
        "Sales grew 12% this quarter, led by strong revenue in Europe.",
        "My cat likes to sleep on the sofa all afternoon.",
    ),
    (
        "Can you refund my order #1234?",
        "I have issued a full refund for order #1234; the money will be back on your card in 5 days.",
        "Photosynthesis converts light energy into chemical energy in plants.",
    ),
    (
        "Write a Python function that sorts a list of numbers",
        "def sort_numbers(values): return sorted(values)  # returns a new sorted list of the numbers",
        "The football match ended in a draw after extra time.",
    ),
]


@pytest.mark.parametrize(("question", "on_topic", "off_topic"), COHERENCE_CASES)
def test_on_topic_answer_is_more_coherent_than_off_topic(
    embedder: StaticEmbedder, question: str, on_topic: str, off_topic: str
) -> None:
    good = coherence(question, on_topic, embedder)
    bad = coherence(question, off_topic, embedder)
    assert good.score > bad.score + 0.15, (good, bad)
    assert good.passed and good.score >= 0.5
    assert good.name == "coherence"
    assert isinstance(good, MetricResult)
    assert "on topic" in good.reason
    assert 0.0 <= bad.score <= 1.0
    assert good.metadata["cosine_similarity"] == pytest.approx(good.score)
    assert good.metadata["coherence_gap"] == pytest.approx(1.0 - good.score)


def test_coherence_of_identical_text_is_one(embedder: StaticEmbedder) -> None:
    result = coherence("Where is my parcel?", "Where is my parcel?", embedder)
    assert result.score == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize(
    ("input_text", "output_text", "note"),
    [
        ("", "Paris.", "empty_input"),
        ("What is the capital of France?", "", "empty_output"),
        ("   ", "\n", "empty_input_and_output"),
        (None, "x", "empty_input"),
    ],
)
def test_coherence_with_empty_side_is_one_with_a_note(input_text: str, output_text: str, note: str) -> None:
    class Exploding:
        dimension = 1

        def embed(self, texts: object) -> np.ndarray:
            raise AssertionError("must not embed an empty trace")

    result = coherence(input_text, output_text, Exploding())  # type: ignore[arg-type]
    assert result.score == 1.0 and result.passed
    assert result.metadata["note"] == note
    assert "empty" in result.reason


@pytest.mark.parametrize(
    ("input_text", "output_text", "note"),
    [
        ("👍", "Glad I could help!", "unknown_words_input"),
        ("Thanks for the refund of my order", "🙏🙏", "unknown_words_output"),
        ("👍", "🎉", "unknown_words_input_and_output"),
    ],
)
def test_coherence_of_a_text_without_a_known_word_is_not_evaluated(
    embedder: StaticEmbedder, input_text: str, output_text: str, note: str
) -> None:
    """A text of no word the embedding model knows embeds as the zero vector: its cosine 0 gave
    coherence 0 ("drifts from the input"), and one 👍 sank the session's agent_reliability to 0."""
    result = coherence(input_text, output_text, embedder)
    assert result.score == 1.0 and result.passed and result.metadata["note"] == note
    assert result.metadata["cosine_similarity"] is None
    # Near miss: a short text with a known word is compared as before.
    assert coherence("thanks!", "Glad I could help!", embedder).metadata["cosine_similarity"] is not None


def test_coherence_is_clamped_to_zero(embedder: StaticEmbedder) -> None:
    class Opposite:
        dimension = 2

        def embed(self, texts: list[str]) -> np.ndarray:
            return np.array([[1.0, 0.0], [-1.0, 0.0]])

    result = coherence("a", "b", Opposite())
    assert result.score == 0.0 and not result.passed
    assert result.metadata["cosine_similarity"] == pytest.approx(-1.0)
    assert "drifts" in result.reason


def test_coherence_uses_the_default_embedder_when_none_is_given() -> None:
    assert coherence("refund my order", "I refunded your order").score > 0.5


# ---------------------------------------------------------------------------------------------
# loop detection

WEATHER = ["Paris weather is sunny", "Tokyo weather is rainy", "Lima weather is cloudy"]


def test_verbatim_repeat_is_caught(embedder: StaticEmbedder) -> None:
    previous = [
        "I could not find order 1234. Could you double-check the order number?",
        "Let me look that up in the order database.",
    ]
    result = loop_detection(previous[0], previous, embedder)
    assert result.score < 0.3 and not result.passed
    assert result.score == pytest.approx(0.0, abs=1e-5)
    assert result.metadata["max_hybrid"] == pytest.approx(1.0, abs=1e-5)
    assert "Loop suspected" in result.reason and "trace 0" in result.reason


def test_near_verbatim_repeat_is_caught(embedder: StaticEmbedder) -> None:
    previous = ["I'm sorry, I cannot find that order. Could you check the order number?"]
    result = loop_detection(
        "Sorry, I cannot find that order. Could you please check the order number again?", previous, embedder
    )
    assert result.score < 0.3, result


def test_enumeration_of_related_items_is_not_a_loop(embedder: StaticEmbedder) -> None:
    result = loop_detection(WEATHER[2], WEATHER[:2], embedder)
    assert result.score > 0.5 and result.passed, result
    assert result.score > 0.75  # calibrated ~0.83 (see the module docstring)
    for comparison in result.metadata["comparisons"]:
        assert comparison["cosine_similarity"] > 0.6  # the meaning is close...
        assert comparison["jaccard_similarity"] == pytest.approx(0.2)  # ...but only "weather" is shared
    assert "No loop" in result.reason


def test_different_topics_are_not_a_loop(embedder: StaticEmbedder) -> None:
    previous = ["Your refund was issued.", "The invoice is attached to this email."]
    result = loop_detection("Photosynthesis converts light into chemical energy.", previous, embedder)
    assert result.score == pytest.approx(1.0)


def test_metadata_fields(embedder: StaticEmbedder) -> None:
    result = loop_detection(WEATHER[1], WEATHER[:1], embedder)
    meta = result.metadata
    assert meta["window_size"] == 3
    assert meta["traces_compared"] == 1
    assert set(meta) >= {"window_size", "max_hybrid", "comparisons"}
    [comparison] = meta["comparisons"]
    assert set(comparison) == {"trace_index", "cosine_similarity", "jaccard_similarity", "hybrid_score"}
    assert comparison["trace_index"] == 0
    assert comparison["hybrid_score"] == pytest.approx(
        comparison["cosine_similarity"] * comparison["jaccard_similarity"]
    )
    assert meta["max_hybrid"] == pytest.approx(comparison["hybrid_score"])
    assert result.score == pytest.approx(1.0 - meta["max_hybrid"])
    assert result.name == "loop_detection"


def test_only_the_last_three_outputs_are_compared(embedder: StaticEmbedder) -> None:
    repeated = "The deployment failed because the database migration timed out."
    previous = [
        repeated,
        "Checking the logs now.",
        "Restarting the service.",
        "The service is healthy again.",
    ]
    result = loop_detection(repeated, previous, embedder)
    assert [c["trace_index"] for c in result.metadata["comparisons"]] == [1, 2, 3]
    assert result.score > 0.5  # the repeat of trace 0 is out of the window
    result = loop_detection(repeated, previous, embedder, window=4)
    assert [c["trace_index"] for c in result.metadata["comparisons"]] == [0, 1, 2, 3]
    assert result.metadata["window_size"] == 4
    assert result.score < 0.3
    with pytest.raises(ValueError, match="window"):
        loop_detection(repeated, previous, embedder, window=0)


def test_no_previous_traces() -> None:
    result = loop_detection("anything at all", [], None)
    assert result.score == 1.0 and result.passed
    assert result.reason == NO_PREVIOUS_REASON == "No previous traces in the session."
    assert result.metadata == {
        "window_size": 3,
        "traces_compared": 0,
        "max_hybrid": 0.0,
        "comparisons": [],
        "threshold": 0.5,
        "success": True,
    }


def test_empty_output_and_empty_previous_outputs(embedder: StaticEmbedder) -> None:
    result = loop_detection("   ", ["Paris weather is sunny"], embedder)
    assert result.score == 1.0 and result.metadata["note"] == "empty_output"
    result = loop_detection("Paris weather is sunny", ["", "   "], embedder)
    assert result.score == 1.0
    assert [c["hybrid_score"] for c in result.metadata["comparisons"]] == [0.0, 0.0]
    with pytest.raises(TypeError, match="not a string"):
        loop_detection("x", "a previous output", embedder)


def test_negative_cosine_does_not_lift_the_score_above_one() -> None:
    class Opposite:
        dimension = 2

        def embed(self, texts: list[str]) -> np.ndarray:
            return np.array([[1.0, 0.0]] + [[-1.0, 0.0]] * (len(texts) - 1))

    result = loop_detection("same words here", ["same words here"], Opposite())
    assert result.score == 1.0
    assert result.metadata["comparisons"][0]["cosine_similarity"] == pytest.approx(-1.0)
    assert result.metadata["comparisons"][0]["hybrid_score"] == 0.0


def test_content_words_and_jaccard() -> None:
    assert content_words("The weather in Paris is sunny, isn't it?") == {"weather", "paris", "sunny"}
    assert content_words("I’m here and it's") == frozenset()
    assert {"the", "and", "is", "isn't"} <= STOP_WORDS
    assert jaccard(frozenset({"a", "b"}), frozenset({"b", "c"})) == pytest.approx(1 / 3)
    assert jaccard(frozenset(), frozenset()) == 0.0


def test_scores_stay_finite_on_long_real_text(embedder: StaticEmbedder) -> None:
    text = " ".join(["The agent called the search tool, read the results and summarised them."] * 30)
    result = loop_detection(text, [text.upper()], embedder)
    assert math.isfinite(result.score) and result.score < 0.3
