"""interaction.stagnation (SPEC §3): the conversation does not move forward.

- ``dragging``: the user turns exceed the agent's baseline until efficiency (SPEC §4,
  :func:`efficiency`) drops below DRAGGING_EFFICIENCY; fires once per conversation. Counts turns only,
  so it runs without message text.
- ``repetition``: a new assistant answer nearly duplicates one of its last REPETITION_WINDOW answers:
  as a whole (rapidfuzz ratio ≥ REPETITION_SIMILARITY over normalised text), contained in it (or
  containing it), or sentence by sentence behind a new opening.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import NamedTuple

from rapidfuzz import fuzz, process
from rapidfuzz.distance import LCSseq

from otelsignals.model import Role, SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext, DetectorSpec, rebuilt_when_missing
from otelsignals.signals.phrase_analysis import COMPARE_CHARS, MAX_SENTENCES, recent_messages, sentence_spans
from otelsignals.signals.tokens import Token, sentence_norms, tokens_of, unify

# Repetition, over normalised text: repeated answers scored ratio ≥ 93.5; templated answers with other
# data ("added milk" / "added eggs to your shopping list") ≤ 88.9.

REPETITION_WINDOW = 5  # previous assistant messages compared with a new one
REPETITION_SIMILARITY = 91.0  # rapidfuzz ratio over normalised text, 0–100
REPETITION_MIN_CHARS = 20
# A repeated answer wrapped in a new sentence ("I couldn't find X. How about <the same two gifts>?"): the
# shorter text appears almost verbatim inside the longer one (rapidfuzz partial_ratio). Repeats in the
# corpus scored 98–100; the templated answers of REPETITION_PAIRS ≤ 89. The shorter text must be long
# (a shared stock sentence is not a repeated answer) and at least half the longer one.
REPETITION_CONTAINED_SIMILARITY = 95.0
REPETITION_CONTAINED_MIN_CHARS = 60
REPETITION_CONTAINED_MIN_SHARE = 0.5
# A repeated answer behind a new opening ("I understand your concern. <the same two sentences>"): most of
# the new answer is sentences that nearly duplicate sentences of one earlier answer (rapidfuzz ratio per
# sentence, as for whole answers). The repeated sentences must carry most of the new text (a stock
# "I'm sorry for the inconvenience." among new content is not a repeated answer) and be long enough
# to mean something.
REPETITION_SENTENCE_SIMILARITY = 90.0
REPETITION_SENTENCE_SHARE = 0.66  # of the new answer's characters in repeated sentences
REPETITION_SENTENCE_MIN_CHARS = 60  # characters of repeated sentences, at least

DRAGGING_EFFICIENCY = 0.5  # SPEC §8: dragging fires when efficiency drops below this
DRAGGING_CONFIDENCE = 0.8


def efficiency(user_turns: int, baseline: int) -> float:
    """SPEC §4: 1.0 up to the baseline, then ``1 / (1 + 0.3 × (turns − baseline))``."""
    if user_turns <= baseline:
        return 1.0
    return 1.0 / (1.0 + 0.3 * (user_turns - baseline))


# --- stagnation ------------------------------------------------------------------------------------


def detect_dragging(ctx: DetectionContext) -> list[SignalInstance]:
    """Once per conversation, at the user turn where efficiency first drops below 0.5 (SPEC §4/§8)."""
    if ctx.memory.get("dragging.fired"):
        return []
    turns = ctx.memory.get("dragging.user_turns")
    if turns is None:  # new memory: count the turns analysed before (once)
        turns = sum(1 for m in ctx.messages[: ctx.new_from] if m.role is Role.USER)
    found: list[SignalInstance] = []
    for i in range(ctx.new_from, len(ctx.messages)):
        if ctx.messages[i].role is not Role.USER:
            continue
        turns += 1
        score = efficiency(turns, ctx.baseline_user_turns)
        if score < DRAGGING_EFFICIENCY:
            metadata = {
                "pattern": "turn_count",
                "user_turns": turns,
                "baseline": ctx.baseline_user_turns,
                "efficiency": round(score, 4),
            }
            found.append(
                SignalInstance(tx.DRAGGING, ctx.absolute_index(i), DRAGGING_CONFIDENCE, None, metadata)
            )
            ctx.memory["dragging.fired"] = True
            break
    ctx.memory["dragging.user_turns"] = turns
    return found


class Answer(NamedTuple):
    """An assistant message as the repetition rule compares it."""

    text: str  # its words, normalised, joined by single spaces
    # Where each of its first MAX_SENTENCES sentences ends in ``text`` (each starts one space after
    # the previous one's end): slices made when compared, rather than a second copy of the words
    # kept for each of a conversation's latest answers.
    sentence_ends: tuple[int, ...]

    @property
    def sentences(self) -> list[str]:
        text, start, sentences = self.text, 0, []
        for end in self.sentence_ends:
            sentences.append(text[start:end])
            start = end + 1
        return sentences


def comparable_answer(text: str) -> Answer:
    """The first COMPARE_CHARS characters of an assistant message as the repetition rule compares them."""
    # Only the words and their sentences: no phrase scan, spelling correction or quoting (which only
    # marks tokens quoted: the norms and sentence starts are tokenise()'s).
    unified = unify(text[:COMPARE_CHARS])
    sentences = sentence_norms(unified)
    if sentences is None:
        return _answer_of_tokens(tokens_of(unified))
    # each sentence ends one character (a space) before the next one starts
    ends = [
        end - 1 for end in itertools.accumulate(len(sentence) + 1 for sentence in sentences[:MAX_SENTENCES])
    ]
    return Answer(" ".join(sentences), tuple(ends))


def _answer_of_tokens(tokens: list[Token]) -> Answer:
    norms = [t.norm for t in tokens]
    ends: list[int] = []
    end = -1  # where the previous sentence ended: the next one starts one space after
    for first, last in sentence_spans(tokens):  # consecutive, from the first word
        end += 1 + sum(map(len, norms[first:last])) + (last - first - 1)
        ends.append(end)
    return Answer(" ".join(norms), tuple(ends))


KEPT_ANSWERS = REPETITION_WINDOW + 1  # the latest answer and the window it is compared with
_PREPARED = rebuilt_when_missing("repetition.prepared")  # a cache
_RECENT_ANSWERS = rebuilt_when_missing("repetition.recent")


class PreparedAnswers:
    """The comparable form of a conversation's latest KEPT_ANSWERS assistant messages, kept in its
    detector memory: each answer is tokenised once, by the first detector that reads it (repetition,
    or rephrase's asked-again rule), and the memory goes with the conversation. Keyed by message
    index, checked against the message's text (messages can be inserted in front)."""

    __slots__ = ("_by_index",)

    def __init__(self) -> None:
        self._by_index: dict[int, tuple[str, Answer]] = {}

    def of(self, index: int, content: str) -> Answer:
        kept = self._by_index.get(index)
        if kept is not None and kept[0] == content:  # usually the same str object: compared by identity
            return kept[1]
        answer = comparable_answer(content)
        self._by_index[index] = (content, answer)
        if len(self._by_index) > KEPT_ANSWERS:
            del self._by_index[min(self._by_index)]
        return answer


def prepared_answer(ctx: DetectionContext, local_index: int, content: str) -> Answer:
    """comparable_answer of ``ctx.messages[local_index]``, whose text is ``content``, prepared once per
    conversation (PreparedAnswers)."""
    prepared: PreparedAnswers | None = ctx.memory.get(_PREPARED)
    if prepared is None:
        prepared = ctx.memory[_PREPARED] = PreparedAnswers()
    return prepared.of(ctx.absolute_index(local_index), content)


def detect_repetition(ctx: DetectionContext) -> list[SignalInstance]:
    """A new assistant message nearly duplicates one of the previous 5 assistant messages: as a whole,
    contained in it (or containing it), or sentence by sentence behind a new opening."""
    recent = recent_messages(ctx, _RECENT_ANSWERS, Role.ASSISTANT, REPETITION_WINDOW, comparable_answer)
    found: list[SignalInstance] = []
    for i in range(ctx.new_from, len(ctx.messages)):
        message = ctx.messages[i]
        if message.role is not Role.ASSISTANT or not message.content:
            continue
        answer = prepared_answer(ctx, i, message.content)
        best = most_similar(answer, recent)
        if best is not None:
            found.append(_repetition_instance(ctx.absolute_index(i), message.content, *best))
        recent.append((ctx.absolute_index(i), answer))
    return found


def most_similar(answer: Answer, recent: Sequence[tuple[int, Answer]]) -> tuple[int, float, str] | None:
    """(index, ratio, pattern) of the earlier answer the new one repeats best, if any."""
    text = answer.text
    if len(text) < REPETITION_MIN_CHARS:
        return None
    best: tuple[int, float, str] | None = None
    # One sentence: the whole-answer comparisons decide.
    sentences = answer.sentences if len(answer.sentence_ends) >= 2 else None
    for index, earlier in recent:
        if len(earlier.text) < REPETITION_MIN_CHARS:
            continue
        found = _whole_or_contained(text, earlier.text) or (
            _repeated_sentences(sentences, earlier) if sentences else None
        )
        if found and (best is None or found[0] > best[1]):
            best = (index, *found)
    return best


def _whole_or_contained(text: str, earlier: str) -> tuple[float, str] | None:
    ratio = fuzz.ratio(text, earlier, score_cutoff=REPETITION_SIMILARITY)
    if ratio:
        return ratio, "near_duplicate"
    ratio = _contained(text, earlier)
    return (ratio, "contained") if ratio else None


def _repeated_sentences(sentences: list[str], earlier: Answer) -> tuple[float, str] | None:
    """(mean ratio of the repeated sentences, "repeated_sentences") when repeated ``sentences`` (of
    the new answer) make up REPETITION_SENTENCE_SHARE of it and REPETITION_SENTENCE_MIN_CHARS
    characters."""
    earlier_sentences: list[str] | None = None  # sliced when first needed
    total = sum(map(len, sentences))
    needed = max(REPETITION_SENTENCE_MIN_CHARS, REPETITION_SENTENCE_SHARE * total)
    repeated, weighted, left = 0, 0.0, total
    for sentence in sentences:
        if repeated + left < needed:
            return None  # the rest cannot make up the share any more
        left -= len(sentence)
        if len(sentence) < REPETITION_MIN_CHARS:
            continue  # a short stock sentence never counts as repeated content
        if earlier_sentences is None:
            earlier_sentences = earlier.sentences
        match = process.extractOne(
            sentence, earlier_sentences, scorer=fuzz.ratio, score_cutoff=REPETITION_SENTENCE_SIMILARITY
        )
        if match is not None:
            ratio = match[1]
            repeated += len(sentence)
            weighted += ratio * len(sentence)
    if repeated < needed:
        return None
    return weighted / repeated, "repeated_sentences"


def _contained(text: str, earlier: str) -> float:
    """partial_ratio when one answer nearly contains the other (see REPETITION_CONTAINED_*), else 0."""
    short, long = sorted((text, earlier), key=len)
    if len(short) < REPETITION_CONTAINED_MIN_CHARS or len(short) < REPETITION_CONTAINED_MIN_SHARE * len(long):
        return 0.0
    if partial_ratio_bound(short, long) < REPETITION_CONTAINED_SIMILARITY:
        return 0.0  # proven below the threshold: the costly alignment search is skipped
    ratio = fuzz.partial_ratio(short, long, score_cutoff=REPETITION_CONTAINED_SIMILARITY)
    return min(ratio, 100.0)


def partial_ratio_bound(short: str, long: str) -> float:
    """An upper bound of ``fuzz.partial_ratio(short, long)`` (``len(short) <= len(long)``), at the cost
    of one bit-parallel LCS (on the agent workload's answers ~8 µs, against ~450 µs for partial_ratio).

    Every alignment partial_ratio scores is a substring ``w`` of ``long`` no longer than ``short`` (of
    ``short`` against ``long`` when both are as long), scored ``ratio = 200·LCS(short, w) / (len(short)
    + len(w))``. A common subsequence with ``w`` is one with ``long``, and it is no longer than ``w``:
    with ``c = LCS(short, long)``, ``LCS(short, w) <= min(len(w), c)``, so no alignment scores above
    ``200·c / (len(short) + c)`` (the maximum over ``len(w)``, reached at ``len(w) = c``)."""
    common = LCSseq.similarity(short, long)
    return 200 * common / (len(short) + common) if common else 0.0


def _repetition_instance(
    index: int, content: str, earlier: int, ratio: float, pattern: str
) -> SignalInstance:
    confidence = round(0.6 + 0.35 * max(ratio - REPETITION_SIMILARITY, 0) / (100 - REPETITION_SIMILARITY), 3)
    metadata = {
        "pattern": pattern,
        "similar_to": earlier,
        "ratio": round(ratio / 100, 3),
        "threshold": REPETITION_SIMILARITY / 100,
    }
    return SignalInstance(tx.REPETITION, index, confidence, content[:200].strip(), metadata)


DETECTORS: tuple[DetectorSpec, ...] = (
    DetectorSpec(
        (tx.DRAGGING,), detect_dragging, needs_content=False
    ),  # counts user turns: known without their text
    DetectorSpec((tx.REPETITION,), detect_repetition),
)
