"""Embedding-based trace metrics of SPEC §6: ``coherence`` and ``loop_detection``.

Both take an :class:`~otelsignals.evals.embeddings.Embedder` (the shipped offline model by default,
see :func:`~otelsignals.evals.embeddings.default_embedder`) and return a
:class:`~otelsignals.evals.session_metrics.MetricResult` scored 0–1, higher is better.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from otelsignals.evals.embeddings import Embedder, cosine, default_embedder
from otelsignals.evals.session_metrics import DEFAULT_THRESHOLD, MetricResult

__all__ = [
    "DEFAULT_LOOP_WINDOW",
    "NO_PREVIOUS_REASON",
    "STOP_WORDS",
    "coherence",
    "content_words",
    "jaccard",
    "loop_detection",
]

DEFAULT_LOOP_WINDOW = 3
NO_PREVIOUS_REASON = "No previous traces in the session."

# English function words left out of the word sets that loop detection's Jaccard compares
# (kept as data: one whitespace-separated list, lowercase, straight apostrophes).
_STOP_WORDS_TEXT = """
    a about above after again against all am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't doing
    don't down during each few for from further had hadn't has hasn't have haven't having he he'd
    he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into
    is isn't it it's its itself just let's me more most mustn't my myself no nor not now of off on
    once only or other ought our ours ourselves out over own same shan't she she'd she'll she's
    should shouldn't so some such than that that's the their theirs them themselves then there
    there's these they they'd they'll they're they've this those through to too under until up very
    was wasn't we we'd we'll we're we've were weren't what what's when when's where where's which
    while who who's whom why why's will with won't would wouldn't you you'd you'll you're you've
    your yours yourself yourselves also may might must shall s t d ll m re ve
"""
STOP_WORDS: frozenset[str] = frozenset(_STOP_WORDS_TEXT.split())

_WORD_RE = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


@functools.lru_cache(maxsize=4096)  # the previous outputs come back on the next traces
def content_words(text: str) -> frozenset[str]:
    """The lowercased words of ``text`` minus :data:`STOP_WORDS` (apostrophes normalised)."""
    return frozenset(_WORD_RE.findall(text.lower().replace("’", "'"))) - STOP_WORDS


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b|; 0.0 when both are empty (no shared content is no evidence of a loop)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def _result(name: str, score: float, reason: str, metadata: dict[str, Any], threshold: float) -> MetricResult:
    score = min(1.0, max(0.0, float(score)))
    return MetricResult(
        name=name,
        score=score,
        passed=score >= threshold,
        reason=reason,
        metadata=metadata,
        threshold=threshold,
    )


def coherence(
    input_text: str,
    output_text: str,
    embedder: Embedder | None = None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
) -> MetricResult:
    """1 − cosine distance between the embeddings of the trace's input and output, clamped to [0, 1].

    An empty (or whitespace-only) input or output scores 1.0 with a note: there is nothing to judge.
    """
    input_text = input_text or ""
    output_text = output_text or ""
    empty = [label for label, text in (("input", input_text), ("output", output_text)) if not text.strip()]
    if empty:
        return _result(
            "coherence",
            1.0,
            f"Not evaluated: the trace's {' and '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty.",
            {"note": "empty_" + "_and_".join(empty), "cosine_similarity": None, "coherence_gap": None},
            threshold,
        )
    embedder = embedder or default_embedder()
    vectors = embedder.embed([input_text, output_text])
    similarity = cosine(vectors[0], vectors[1])
    score = min(1.0, max(0.0, similarity))  # 1 − (1 − cos)
    verdict = "on topic" if score >= threshold else "drifts from the input"
    return _result(
        "coherence",
        score,
        f"The output {verdict}: cosine similarity to the input {similarity:.3f}.",
        {"cosine_similarity": similarity, "coherence_gap": 1.0 - similarity},
        threshold,
    )


def loop_detection(
    output_text: str,
    previous_outputs: Sequence[str],
    embedder: Embedder | None = None,
    window: int = DEFAULT_LOOP_WINDOW,
    *,
    threshold: float = DEFAULT_THRESHOLD,
) -> MetricResult:
    """Is this trace's output a repeat of one of the last ``window`` outputs of its session?

    ``previous_outputs`` are the session's earlier outputs, oldest first; the last ``window`` are
    compared. Per comparison hybrid = max(cosine, 0) × Jaccard(content words), so both the meaning
    and the wording must repeat; score = 1 − max hybrid. ``trace_index`` in the metadata is the
    position in ``previous_outputs``. Session context only: with no previous output, 1.0.
    """
    if window < 1:
        raise ValueError("window must be >= 1")
    if isinstance(previous_outputs, str):
        raise TypeError("previous_outputs must be a sequence of strings, not a string")
    output_text = output_text or ""
    start = max(0, len(previous_outputs) - window)
    compared = [(index, previous_outputs[index] or "") for index in range(start, len(previous_outputs))]
    metadata: dict[str, Any] = {
        "window_size": window,
        "traces_compared": len(compared),
        "max_hybrid": 0.0,
        "comparisons": [],
    }
    if not compared:
        return _result("loop_detection", 1.0, NO_PREVIOUS_REASON, metadata, threshold)
    if not output_text.strip():
        metadata["note"] = "empty_output"
        return _result(
            "loop_detection", 1.0, "Not evaluated: the trace's output is empty.", metadata, threshold
        )

    embedder = embedder or default_embedder()
    vectors = embedder.embed([output_text] + [text for _, text in compared])
    words = content_words(output_text)
    comparisons = []
    for (index, text), vector in zip(compared, vectors[1:], strict=True):
        similarity = cosine(vectors[0], vector)
        overlap = jaccard(words, content_words(text))
        comparisons.append(
            {
                "trace_index": index,
                "cosine_similarity": similarity,
                "jaccard_similarity": overlap,
                # A negative cosine (opposed texts) counts as no similarity, not as a negative product.
                "hybrid_score": max(similarity, 0.0) * overlap,
            }
        )
    worst = max(comparisons, key=lambda c: c["hybrid_score"])
    metadata["max_hybrid"] = worst["hybrid_score"]
    metadata["comparisons"] = comparisons
    score = 1.0 - worst["hybrid_score"]
    if score >= threshold:
        reason = (
            f"No loop: the closest of the last {len(compared)} output(s) (trace {worst['trace_index']}) "
            f"has hybrid similarity {worst['hybrid_score']:.3f}."
        )
    else:
        reason = (
            f"Loop suspected: the output repeats trace {worst['trace_index']} "
            f"(cosine {worst['cosine_similarity']:.3f} × Jaccard {worst['jaccard_similarity']:.3f} "
            f"= {worst['hybrid_score']:.3f})."
        )
    return _result("loop_detection", score, reason, metadata, threshold)
