"""interaction.outcome: the user reports that the problem is still there after what the agent tried.

``persists`` (not one of SPEC §3's twenty leaves, like the hand-off: the corpora label a polite "done,
still offline" neither negative stance nor correction, so it is a leaf of its own, which the §8
quality score ignores). A hit of the phrase groups in ``phrases/outcome.yaml`` ("I restarted it, but
there's still no signal", "nothing changed", "that didn't help", "the upload keeps failing"), read
from the one shared scan of the message (:func:`~otelsignals.signals.phrase_analysis.analysis_of`),
in a user message after the user's first one and an assistant turn: the first message ("still no
refund for order 55821", "my data stopped working", even after the agent's greeting) states the
task. Not a report:

- a question ("is it still down?", the groups are ``statement_only``; also a yes/no question a comma
  splits, "Is it still broken for everyone, or just me?": a sentence opening with one of the
  ``questions`` openings and closing with "?") or a negated hit ("it's not still broken");
- a hit across a clause boundary ("Still, no thanks" is no "still no");
- a readout of a good state ("the status bar still shows excellent signal": a phrase ending in one of
  the ``readouts`` verbs, one of its ``good_states`` among the two words after it);
- a hit before a success in the same message ("nothing changed on my end, but it works now": the
  message's last word on the problem is the success); a success before it does not take it back
  ("calls work now, but data is still slow").

One instance per message, its best hit, as every phrase leaf (``phrase``: the phrase as written in
the library).

**The report the user's last word leaves standing.** The triage priority weighs a report only while
it stands: the conversation ended with the user saying the problem persists, and nothing the user
said after it took it back. A later user message takes it back when it says anything more than a
closing: a success ("it works now"), a question, a new finding ("the SIM is locked with a PIN"), a
new request. A message that says nothing new leaves it standing: one made only of the ``closings``
words ("Thanks anyway.", "no.", "ok, bye then"), or a short one (at most CLOSING_MAX_TOKENS tokens,
no "?") whose only phrase hits thank, acknowledge, take leave, ask for or accept a person, give up or
complain ("Understood, I'll wait for the human agent"). The detector keeps the standing
report's library phrase in its memory (one short string, kept when the conversation goes cold: it
is no cache); :func:`standing_report` reads it for the priority (triage.priority's ``persisting``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otelsignals.model import SignalInstance
from otelsignals.signals import taxonomy as tx
from otelsignals.signals.base import DetectionContext, DetectorSpec, memory_key
from otelsignals.signals.matching import Match
from otelsignals.signals.phrase_analysis import (
    TextAnalysis,
    analysis_of,
    best_of,
    instance_of,
    sentence_closing,
    user_texts,
)
from otelsignals.signals.tokens import Token
from otelsignals.signals.word_lists import phrase_file, strings

# A later message this short, without a question, whose only phrase hits are of these leaves, is a
# closing: it leaves a standing report standing ("thanks anyway", "ok, transfer me then").
CLOSING_MAX_TOKENS = 20
CLOSING_SIGNALS = frozenset((tx.GRATITUDE, tx.CONFIRMATION, tx.ESCALATION, tx.QUIT, tx.NEGATIVE_STANCE))
# Characters that end a clause: a hit with one inside spans two clauses.
_CLAUSE_MARKS = frozenset(",;:.!?\n\u2014\u2013")

_DATA = phrase_file("outcome")  # the word lists beside the groups (the groups: phrase_analysis)
READOUT_VERBS = frozenset(strings(_DATA["readouts"]["verbs"], "outcome.yaml: readouts: verbs"))
GOOD_STATES = frozenset(strings(_DATA["readouts"]["good_states"], "outcome.yaml: readouts: good_states"))
READOUT_LOOKAHEAD = 2  # words after a readout phrase looked at for a good state
QUESTION_OPENINGS = frozenset(strings(_DATA["questions"]["openings"], "outcome.yaml: questions: openings"))
CLOSING_WORDS = frozenset(strings(_DATA["closings"]["words"], "outcome.yaml: closings: words"))

_STANDING = memory_key(tx.PERSISTS, "standing")  # the standing report's library phrase
_STATED = memory_key(tx.PERSISTS, "stated")  # the user has sent their first message (the task)


def detect_persists(ctx: DetectionContext) -> list[SignalInstance]:
    """The user's reports that the problem persists; keeps the one their last word leaves standing."""
    found: list[SignalInstance] = []
    standing: str | None = ctx.memory.get(_STANDING)
    stated = bool(ctx.memory.get(_STATED))
    for i, text, follows in user_texts(ctx):
        analysis = analysis_of(ctx, text)
        report = best_report(text, analysis) if follows and stated else None
        stated = True
        if report is not None:
            found.append(instance_of(tx.PERSISTS, ctx.absolute_index(i), text, analysis, *report))
            standing = report[1].phrase
        elif standing is not None and not is_closing(text, analysis):
            standing = None
    if stated:
        ctx.memory[_STATED] = True
    if standing is None:
        ctx.memory.pop(_STANDING, None)
    else:
        ctx.memory[_STANDING] = standing
    return found


def best_report(text: str, analysis: TextAnalysis) -> tuple[float, Match] | None:
    """(confidence, hit) of the message's best report that the problem persists, or None (the rules
    of the module docstring; the scan's own rules already dropped quoted, negated and asked hits)."""
    hits = analysis.hits.get(tx.PERSISTS)
    if not hits:
        return None
    # A success or a confirmation after it takes it back ("the flight still shows on time, perfect").
    successes = [*analysis.hits.get(tx.SUCCESS, ()), *analysis.hits.get(tx.CONFIRMATION, ())]
    last_success = max(m.start for m in successes) if successes else -1
    kept = [
        m
        for m in hits
        if m.start > last_success
        and not _CLAUSE_MARKS.intersection(text[m.start : m.end])
        and not _reads_a_good_state(analysis.scan.tokens, m)
        and not _yes_no_question(text, analysis.scan.tokens, m)
    ]
    return best_of(kept, analysis) if kept else None


def _reads_a_good_state(tokens: list[Token], match: Match) -> bool:
    """The hit is a readout ("still shows") of a good state ("excellent signal") in its clause."""
    last = next((k for k, t in enumerate(tokens) if t.end >= match.end), None)
    if last is None or tokens[last].norm not in READOUT_VERBS:
        return False
    for token in tokens[last + 1 : last + 1 + READOUT_LOOKAHEAD]:
        if token.clause_start:
            return False
        if token.norm in GOOD_STATES:
            return True
    return False


def _yes_no_question(text: str, tokens: list[Token], match: Match) -> bool:
    """The hit is in a sentence that opens with a yes/no question word and closes with "?"."""
    if "?" not in text:
        return False
    first = next((k for k, t in enumerate(tokens) if t.end > match.start), None)
    if first is None:
        return False
    start = first
    while start > 0 and not tokens[start].sentence_start:
        start -= 1
    if tokens[start].norm not in QUESTION_OPENINGS:
        return False
    end = first + 1
    while end < len(tokens) and not tokens[end].sentence_start:
        end += 1
    after = sentence_closing(text, tokens, end)
    return "?" in after


def is_closing(text: str, analysis: TextAnalysis) -> bool:
    """A message that says nothing new about the problem: made of closing words only ("Thanks
    anyway."), or short and only thanking, acknowledging, taking leave, asking for a person, giving
    up or complaining."""
    tokens = analysis.scan.tokens
    if "?" in text or len(tokens) > CLOSING_MAX_TOKENS or analysis.hits.get(tx.SUCCESS):
        return False
    said = {signal for signal, matches in analysis.hits.items() if matches}
    if not said <= CLOSING_SIGNALS:
        return False
    return bool(said) or (bool(tokens) and all(token.norm in CLOSING_WORDS for token in tokens))


def standing_report(memory: Mapping[str, Any]) -> str | None:
    """The library phrase of the report that the problem persists which the user's last word leaves
    standing in this conversation (its detector memory), or None."""
    phrase = memory.get(_STANDING)
    return phrase if isinstance(phrase, str) else None


DETECTORS: tuple[DetectorSpec, ...] = (DetectorSpec((tx.PERSISTS,), detect_persists),)
