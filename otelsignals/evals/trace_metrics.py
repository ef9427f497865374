"""Embedding-based trace metrics of SPEC §6: ``coherence`` and ``loop_detection``.

Both take an :class:`~otelsignals.evals.embeddings.Embedder` (the shipped offline model by default,
see :func:`~otelsignals.evals.embeddings.default_embedder`) and return a
:class:`~otelsignals.evals.session_metrics.MetricResult` scored 0–1, higher is better.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from otelsignals.evals.embeddings import Embedder, cosine, default_embedder
from otelsignals.evals.session_metrics import DEFAULT_THRESHOLD, MetricResult

__all__ = [
    "DEFAULT_LOOP_WINDOW",
    "NO_PREVIOUS_REASON",
    "STOP_WORDS",
    "ComparableOutput",
    "coherence",
    "content_words",
    "jaccard",
    "loop_detection",
    "loop_detection_between",
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


def content_words(text: str) -> frozenset[str]:
    """The lowercased words of ``text`` minus :data:`STOP_WORDS` (apostrophes normalised)."""
    return frozenset(_WORD_RE.findall(text.lower().replace("’", "'"))) - STOP_WORDS


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b|; 0.0 when both are empty (no shared content is no evidence of a loop)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


_NO_VECTOR = np.dtype(np.float32)  # the type of a vector there is not (one shared object)


@dataclass(frozen=True, slots=True, eq=False)
class ComparableOutput:
    """A trace's output as loop detection compares it, prepared once: the pipeline keeps the latest
    few per session, so each output is embedded and split into words once, not again on each of the
    next traces (a global cache of texts would forget them once thousands of sessions are open).

    The content words are kept as their sorted, distinct ``hash()`` values: 8 bytes a word instead
    of a string object and a set slot (~90 bytes). Two different words share a 64-bit hash with odds
    of about 1e-15 per comparison; Python's string hash differs between processes, so these stay in
    the process that made them (as session state does). Both arrays are kept as bytes, read as
    arrays when compared: an array object takes 112 bytes besides its numbers, a bytes object 33.
    """

    blank: bool  # the text is empty or whitespace: nothing to compare
    vector_bytes: bytes | None  # its embedding row; None when it was not embedded (a blank text)
    vector_type: np.dtype[Any]
    word_hash_bytes: bytes  # int64, sorted, distinct

    @classmethod
    def of(cls, text: str, vector: np.ndarray | None) -> ComparableOutput:
        """``text`` with its embedding row ``vector`` (copied: a row of a larger array would keep
        the whole array alive)."""
        hashes = np.array(sorted({hash(word) for word in content_words(text)}), dtype=np.int64)
        row = None if vector is None else np.ascontiguousarray(vector)
        return cls(
            not text.strip(),
            None if row is None else row.tobytes(),
            _NO_VECTOR if row is None else row.dtype,
            hashes.tobytes(),
        )

    @property
    def vector(self) -> np.ndarray | None:
        if self.vector_bytes is None:
            return None
        return np.frombuffer(self.vector_bytes, dtype=self.vector_type)

    @property
    def word_hashes(self) -> np.ndarray:
        return np.frombuffer(self.word_hash_bytes, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        """The bytes of its arrays (for the session's memory estimate)."""
        return len(self.word_hash_bytes) + (0 if self.vector_bytes is None else len(self.vector_bytes))

    def cosine(self, other: ComparableOutput) -> float:
        """Cosine similarity of the two rows; 0.0 when either text was not embedded."""
        mine, theirs = self.vector, other.vector
        if mine is None or theirs is None:
            return 0.0
        return cosine(mine, theirs)

    def jaccard(self, other: ComparableOutput) -> float:
        """:func:`jaccard` of the two texts' content words."""
        mine, theirs = self.word_hashes, other.word_hashes
        shared = np.intersect1d(mine, theirs, assume_unique=True).size
        union = mine.size + theirs.size - shared
        return shared / union if union else 0.0


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
    input_text: str | None,
    output_text: str | None,
    embedder: Embedder | None = None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    vectors: tuple[np.ndarray, np.ndarray] | None = None,
) -> MetricResult:
    """1 − cosine distance between the embeddings of the trace's input and output, clamped to [0, 1].

    An empty (or whitespace-only) input or output scores 1.0 with a note: there is nothing to judge.
    ``vectors``: the two texts' embedding rows, when the caller has them already.
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
    if vectors is None:
        rows = (embedder or default_embedder()).embed([input_text, output_text])
        vectors = (rows[0], rows[1])
    # A text of no word the embedder knows (an emoji, a code in a script it does not cover) embeds
    # as the zero vector: nothing to compare either, not the worst coherence (cosine 0 gave 0, and
    # a 👍 after a good answer sank the session's agent_reliability to 0).
    unknown = [label for label, row in zip(("input", "output"), vectors, strict=True) if not np.any(row)]
    if unknown:
        return _result(
            "coherence",
            1.0,
            f"Not evaluated: the trace's {' and '.join(unknown)} {'has' if len(unknown) == 1 else 'have'} "
            "no word the embedding model knows.",
            {
                "note": "unknown_words_" + "_and_".join(unknown),
                "cosine_similarity": None,
                "coherence_gap": None,
            },
            threshold,
        )
    similarity = cosine(*vectors)
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
    start = max(0, len(previous_outputs) - window)
    texts = [output_text or "", *(text or "" for text in previous_outputs[start:])]
    rows: list[np.ndarray | None] = [None] * len(texts)
    if len(texts) > 1 and texts[0].strip():  # else there is nothing to compare
        rows = list((embedder or default_embedder()).embed(texts))
    prepared = [ComparableOutput.of(text, row) for text, row in zip(texts, rows, strict=True)]
    return loop_detection_between(prepared[0], prepared[1:], window, threshold=threshold, first_index=start)


def loop_detection_between(
    output: ComparableOutput,
    previous_outputs: Sequence[ComparableOutput],
    window: int = DEFAULT_LOOP_WINDOW,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    first_index: int = 0,
) -> MetricResult:
    """:func:`loop_detection` of outputs prepared already (:class:`ComparableOutput`), as the
    pipeline keeps them; ``first_index`` is the position of ``previous_outputs[0]`` in the session."""
    if window < 1:
        raise ValueError("window must be >= 1")
    start = max(0, len(previous_outputs) - window)
    compared = list(enumerate(previous_outputs[start:], first_index + start))
    metadata: dict[str, Any] = {
        "window_size": window,
        "traces_compared": len(compared),
        "max_hybrid": 0.0,
        "comparisons": [],
    }
    if not compared:
        return _result("loop_detection", 1.0, NO_PREVIOUS_REASON, metadata, threshold)
    if output.blank:
        metadata["note"] = "empty_output"
        return _result(
            "loop_detection", 1.0, "Not evaluated: the trace's output is empty.", metadata, threshold
        )
    comparisons = []
    for index, earlier in compared:
        similarity = output.cosine(earlier)
        overlap = output.jaccard(earlier)
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
