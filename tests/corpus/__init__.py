"""The labelled conversation corpus: realistic agent conversations with the signals a careful human marks.

The data lives next to this file, one YAML file per domain; the labelling rules are the comment block at
the top of ``support.yaml``. ``load_corpus()`` turns it into the core's plain values
(:class:`otelsignals.model.Message`, :class:`otelsignals.model.LlmCall`) so detectors and the scoring
can be measured against ``expected`` (precision / recall per leaf type).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from otelsignals.model import Conversation, LlmCall, Message, Role, ToolCall, ToolResult

CORPUS_DIR = Path(__file__).resolve().parent
# The blind held-out set: written from the rules alone, without access to the detectors (see its header).
HELDOUT_DIR = CORPUS_DIR.parent / "corpus_heldout"
# The second blind set (2026-11-23): also written from the rules alone (see its header).
BLIND_DIR = CORPUS_DIR.parent / "corpus_blind"
# The third blind set (2026-12-02): new domains, written from the rules alone (see its telecom.yaml).
BLIND3_DIR = CORPUS_DIR.parent / "corpus_blind3"
# The fourth blind set (2026-12-02): six more new domains, written from the rules alone (see its
# automotive_service.yaml).
BLIND4_DIR = CORPUS_DIR.parent / "corpus_blind4"
# The fifth blind set (2026-12-02): six more new domains, written from the rules alone (see its
# cloud_billing.yaml).
BLIND5_DIR = CORPUS_DIR.parent / "corpus_blind5"
# The sixth set (2026-12-02): six more new domains, written from the rules alone (see its
# smart_home.yaml); scored once blind, then read to develop on (bench/RESULTS.md).
BLIND6_DIR = CORPUS_DIR.parent / "corpus_blind6"
# The seventh blind set (2026-12-02): six more new domains, written from the rules alone (see its
# dental_clinic.yaml); kept blind: only its totals are read.
BLIND7_DIR = CORPUS_DIR.parent / "corpus_blind7"
# The eighth set (2026-12-02): six more new domains, written from the rules alone (see its
# airline_loyalty.yaml); scored once blind, then read to develop on (bench/RESULTS.md).
BLIND8_DIR = CORPUS_DIR.parent / "corpus_blind8"
# The ninth blind set (2026-12-02): six more new domains, written from the rules alone (see its
# gym_membership.yaml); kept blind: only its totals are read.
BLIND9_DIR = CORPUS_DIR.parent / "corpus_blind9"
# The tenth set (2026-12-03): six more new domains, written from the rules alone (see its
# hotel_reservations.yaml); scored once blind, then read to develop on (bench/RESULTS.md).
BLIND10_DIR = CORPUS_DIR.parent / "corpus_blind10"
# The eleventh blind set (2026-12-03): six more new domains, written from the rules alone (see its
# camping_reservations.yaml); kept blind: only its totals are read.
BLIND11_DIR = CORPUS_DIR.parent / "corpus_blind11"
# The twelfth blind set (2026-12-03): six more new domains, written from the rules alone (see its
# veterinary_pharmacy.yaml); kept blind: only its totals are read.
BLIND12_DIR = CORPUS_DIR.parent / "corpus_blind12"
# Every labelled set by name, in the order they were written (tests.corpus_eval --all).
ALL_SETS = {
    "main": CORPUS_DIR,
    "heldout": HELDOUT_DIR,
    "blind": BLIND_DIR,
    "blind3": BLIND3_DIR,
    "blind4": BLIND4_DIR,
    "blind5": BLIND5_DIR,
    "blind6": BLIND6_DIR,
    "blind7": BLIND7_DIR,
    "blind8": BLIND8_DIR,
    "blind9": BLIND9_DIR,
    "blind10": BLIND10_DIR,
    "blind11": BLIND11_DIR,
    "blind12": BLIND12_DIR,
}
# The sets kept blind: only their totals are read (tests.corpus_eval prints no misses for them).
KEPT_BLIND = frozenset({"blind5", "blind7", "blind9", "blind11", "blind12"})
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class NearMiss:
    """A message that looks like ``looks_like`` but is not one (documentation; never an expected label)."""

    message_index: int
    looks_like: str
    why: str


@dataclass(frozen=True, slots=True)
class CorpusConversation:
    id: str
    domain: str
    informative: bool
    messages: list[Message]
    llm_calls: list[tuple[int, LlmCall]]  # (after_message, the failed call)
    expected: list[tuple[str, int]]  # (leaf type, message_index)
    notes: str = ""
    near_misses: list[NearMiss] = field(default_factory=list)

    @property
    def user_turns(self) -> int:
        return sum(1 for m in self.messages if m.role is Role.USER)

    def conversation(self) -> Conversation:
        """The corpus entry as the pipeline's :class:`Conversation` (key = the corpus id)."""
        return Conversation(
            key=self.id,
            messages=list(self.messages),
            llm_calls=[call for _, call in self.llm_calls],
        )


def corpus_files(directory: Path = CORPUS_DIR) -> list[Path]:
    return sorted(directory.glob("*.yaml"))


def load_raw(directory: Path = CORPUS_DIR) -> dict[str, list[dict[str, Any]]]:
    """File stem → the YAML as written (for format checks), for the corpus in ``directory``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in corpus_files(directory):
        with path.open(encoding="utf-8") as fh:
            out[path.stem] = yaml.load(fh, Loader=_Loader) or []
    return out


def _span_id(conv_id: str, n: int) -> bytes:
    return hashlib.blake2b(f"{conv_id}/llm/{n}".encode(), digest_size=8).digest()


def _message(raw: dict[str, Any]) -> Message:
    role = Role(raw["role"])
    calls = [
        ToolCall(name=c["name"], arguments=c.get("arguments"), id=c.get("id"))
        for c in raw.get("tool_calls") or []
    ]
    result = None
    if (tr := raw.get("tool_result")) is not None:
        result = ToolResult(
            call_id=tr.get("call_id"),
            name=tr.get("name"),
            content=tr.get("content"),
            is_error=bool(tr.get("is_error", False)),
            error_type=tr.get("error_type"),
            error_message=tr.get("error_message"),
            status_code=tr.get("status_code"),
        )
    return Message(role=role, content=raw.get("content"), tool_calls=calls, tool_result=result)


def _conversation(raw: dict[str, Any]) -> CorpusConversation:
    conv_id = str(raw["id"])
    llm_calls = []
    for n, c in enumerate(raw.get("llm_calls") or []):
        call = LlmCall(
            span_id=_span_id(conv_id, n),
            failed=bool(c.get("failed", True)),
            error_type=c.get("error_type"),
            error_message=c.get("error_message"),
            status_code=c.get("status_code"),
        )
        llm_calls.append((int(c["after_message"]), call))
    return CorpusConversation(
        id=conv_id,
        domain=str(raw["domain"]),
        informative=bool(raw["informative"]),
        messages=[_message(m) for m in raw["messages"]],
        llm_calls=llm_calls,
        expected=[(str(e["type"]), int(e["message_index"])) for e in raw.get("expected") or []],
        notes=str(raw.get("notes") or ""),
        near_misses=[
            NearMiss(int(n["message_index"]), str(n["looks_like"]), str(n.get("why") or ""))
            for n in raw.get("near_misses") or []
        ],
    )


def load_corpus(directory: Path = CORPUS_DIR) -> list[CorpusConversation]:
    """Every conversation of every domain file in ``directory`` (default: the main corpus), in file order
    (files sorted by name); fresh objects. ``load_corpus(HELDOUT_DIR)`` loads the blind held-out set."""
    return [_conversation(raw) for convs in load_raw(directory).values() for raw in convs]
