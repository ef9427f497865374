"""Triage on real agent conversations: does the priority rank failed conversations first?

    python bench/triage_real.py [--data ../shared/data/agent-trajectories] [--keep DIR]

Method
- ``dev.jsonl`` (473 real, public tool-using agent conversations with simulated customers, each with
  the benchmark's own success/failure outcome; read its README) is converted to OTLP protobuf with
  the converter beside it (``to_otlp.py``: OTel GenAI spans, one trace per user turn), into a
  temporary directory (``--keep DIR`` keeps it).
- Every converted trace goes through the pipeline's own analysis (``Analyzer.process``: readers,
  assembly, detectors, scores, priority), all conversations in one run in the order their traces
  started, as a sidecar would see them, so each agent's running baseline builds up as it would live.
- A conversation's score is its last analysed turn's. Rankings compared, each against the outcome
  "failure": the triage priority; the old §8 quality score (lower first); and two trivial
  heuristics read from the data set itself, the number of tool calls and the number of user turns.
- Split by ``task_id`` (sha256 of it, even first byte → half A, the development half; odd → half B,
  held out: never looked at while the priority was designed). Reported per half, per domain group
  (τ²-bench telecom; the 15 student-built domains pooled as "custom") and pooled.
- Figures: AUROC for failure (ties count half), and for the top 10/20/30 % of the ranking the share
  of failures divided by the base rate (random sampling's expectation is 1.00×), with ties at the
  cut counted by their expected share (random tie-breaking, computed exactly).
- Within one agent: a deployment ranks one agent's conversations, and the agents here fail at very
  different rates (gpt-4o on telecom 76 %, the student-built domains 9 %), so a pooled AUROC also
  rewards telling agents apart. ``within one agent`` is the AUROC over the pairs of a failed and a
  successful conversation of the same domain and agent model only (pooled over those groups, each
  pair counted once).
- Also: every failed tool result (the converter marks τ²-bench's tool errors with span status ERROR
  and ``error.type``) must carry an execution failure or environment exhaustion signal.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from otelsignals.analysis import Analysis
from otelsignals.config import Config
from otelsignals.model import Role
from otelsignals.offline import read_requests, traces_in_time_order
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.telemetry import Telemetry

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "agent-trajectories"
FRACTIONS = (0.1, 0.2, 0.3)
FAILURE_LAYERS = ("execution.failure.", "environment.exhaustion.")


@dataclass
class Outcome:
    id: str
    domain: str
    task_id: str
    failed: bool
    tool_calls: int
    user_turns: int
    messages: int
    agent: str  # the domain and the agent model: one deployment's conversations
    last: Analysis | None = None
    failed_results: list[int] = field(default_factory=list)  # message indices of failed tool results
    failure_signal_at: set[int] = field(default_factory=set)

    @property
    def half(self) -> str:
        return "A" if hashlib.sha256(self.task_id.encode()).digest()[0] % 2 == 0 else "B"

    @property
    def group(self) -> str:
        return "telecom" if self.domain == "telecom" else "custom"


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Probability that a failed conversation outranks a successful one (ties count half)."""
    positives = [s for s, y in zip(scores, labels, strict=True) if y]
    negatives = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not positives or not negatives:
        return float("nan")
    ordered = sorted(negatives)
    wins = 0.0
    for score in positives:
        below = bisect.bisect_left(ordered, score)
        ties = bisect.bisect_right(ordered, score) - below
        wins += below + ties / 2
    return wins / (len(positives) * len(negatives))


def within_groups_auroc(scores: Sequence[float], labels: Sequence[bool], groups: Sequence[str]) -> float:
    """AUROC over the pairs of a positive and a negative of the same group only (ties count half)."""
    members: dict[str, tuple[list[float], list[bool]]] = defaultdict(lambda: ([], []))
    for score, label, group in zip(scores, labels, groups, strict=True):
        members[group][0].append(score)
        members[group][1].append(label)
    wins = pairs = 0.0
    for group_scores, group_labels in members.values():
        positives = sum(group_labels)
        negatives = len(group_labels) - positives
        if positives and negatives:
            wins += auroc(group_scores, group_labels) * positives * negatives
            pairs += positives * negatives
    return wins / pairs if pairs else float("nan")


def lift_at(scores: Sequence[float], labels: Sequence[bool], fraction: float) -> float:
    """Share of failures in the top ``fraction`` ÷ the base rate, ties at the cut in expectation."""
    n = len(scores)
    base = sum(labels) / n if n else 0.0
    if not base:
        return float("nan")
    k = max(1, round(fraction * n))
    groups: dict[float, list[bool]] = defaultdict(list)
    for score, label in zip(scores, labels, strict=True):
        groups[score].append(label)
    taken = failures = 0.0
    for score in sorted(groups, reverse=True):
        members = groups[score]
        room = k - taken
        if room <= 0:
            break
        share = min(1.0, room / len(members))
        failures += share * sum(members)
        taken += share * len(members)
    return (failures / k) / base


def load_outcomes(data: Path) -> dict[str, Outcome]:
    outcomes = {}
    with (data / "dev.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            counts = record["counts"]
            outcomes[record["id"]] = Outcome(
                record["id"],
                record["domain"],
                record["task_id"],
                record["outcome"] == "failure",
                counts["tool_calls"],
                counts["user_messages"],
                len(record["messages"]),
                f"{record['domain']} / {record['agent_model']}",
            )
    return outcomes


def convert(data: Path, out: Path) -> None:
    subprocess.run(
        [sys.executable, str(data / "to_otlp.py"), "--input", str(data / "dev.jsonl"), "--out", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def analyse(out: Path, outcomes: dict[str, Outcome]) -> float:
    """Runs the analysis stage over every converted trace; returns the seconds it took."""
    manifest = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    requests = [request for entry in manifest for request in read_requests(out / entry["file"])]
    config = Config()
    analyzer = Analyzer(Telemetry(), config.sessions, config.signals, limits=config.analyzer)
    started = time.process_time()
    for trace in traces_in_time_order(requests):
        analysis = analyzer.process(trace)
        if analysis is None or analysis.conversation_id not in outcomes:
            continue
        outcome = outcomes[analysis.conversation_id]
        outcome.last = analysis
        outcome.failure_signal_at.update(
            s.message_index for s in analysis.new_signals if s.type.startswith(FAILURE_LAYERS)
        )
    seconds = time.process_time() - started
    for outcome in outcomes.values():
        state = analyzer.sessions.get(outcome.id)
        if state is None:
            continue
        conversation = state.conversation
        outcome.failed_results = [
            conversation.message_offset + i
            for i, m in enumerate(conversation.messages)
            if m.role is Role.TOOL and m.tool_result is not None and m.tool_result.is_error
        ]
    return seconds


RANKINGS: dict[str, Callable[[Outcome], float]] = {
    "priority": lambda o: o.last.priority.value if o.last else 0.0,
    "quality score (low first)": lambda o: -o.last.score.quality_score if o.last else 0.0,
    "tool calls": lambda o: float(o.tool_calls),
    "user turns": lambda o: float(o.user_turns),
    "messages": lambda o: float(o.messages),
}


def report(title: str, members: list[Outcome]) -> None:
    labels = [o.failed for o in members]
    agents = [o.agent for o in members]
    print(f"\n{title}: {len(members)} conversations, {sum(labels)} failed ({sum(labels) / len(members):.0%})")
    tops = "  ".join(f"top {int(f * 100)}%" for f in FRACTIONS)
    print(f"  {'ranking':28s} {'AUROC':>6s}  {tops}  within one agent")
    for name, key in RANKINGS.items():
        scores = [key(o) for o in members]
        lifts = "  ".join(f"{lift_at(scores, labels, f):6.2f}×" for f in FRACTIONS)
        within = within_groups_auroc(scores, labels, agents)
        print(f"  {name:28s} {auroc(scores, labels):6.3f}  {lifts}  {within:6.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the agent-trajectories folder")
    parser.add_argument("--keep", type=Path, help="convert into this folder and keep it")
    args = parser.parse_args()
    outcomes = load_outcomes(args.data)
    with tempfile.TemporaryDirectory() as scratch:
        out = args.keep or Path(scratch)
        convert(args.data, out)
        seconds = analyse(out, outcomes)
    analysed = [o for o in outcomes.values() if o.last is not None]
    print(f"analysed {len(analysed)} of {len(outcomes)} conversations in {seconds:.1f} CPU-s")
    for half, name in (("A", "half A (development)"), ("B", "half B (held out)")):
        members = [o for o in analysed if o.half == half]
        for group in ("telecom", "custom"):
            report(f"{name}, {group}", [o for o in members if o.group == group])
        report(f"{name}, pooled", members)
    report("both halves, pooled", analysed)
    failed = sum(len(o.failed_results) for o in analysed)
    covered = sum(len(set(o.failed_results) & o.failure_signal_at) for o in analysed)
    print(f"\nfailed tool results with an execution failure / exhaustion signal: {covered} of {failed}")


if __name__ == "__main__":
    main()
