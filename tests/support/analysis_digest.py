"""One digest of everything the analysis gives for the same traffic, to compare two ways of running
it (compiled and source core, one libm kernel and another) without recording expected values."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import orjson

from bench import triage_real
from otelsignals.config import EvalsConfig
from otelsignals.offline import read_requests, traces_in_time_order
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.telemetry import Telemetry

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
NO_REAL_SET = "the development set (../shared/data/agent-trajectories) is not beside the checkout"


def analysis_digest(real_dir: str = "") -> str:
    """Every signal, score, priority and per-trace agent metric of the instrumentation fixtures
    (and of the converted real conversations in ``real_dir``), as one digest."""
    paths = sorted(p for p in FIXTURES.rglob("*.binpb") if not p.name.endswith(".logs.binpb"))
    if real_dir:
        paths += sorted(Path(real_dir).rglob("*.binpb"))
    # The default per-trace metrics too (embedding coherence and loops), which a bare Analyzer skips.
    analyzer = Analyzer(Telemetry(), evals=EvalsConfig())
    digest = hashlib.blake2b(digest_size=16)
    for trace in traces_in_time_order(request for path in paths for request in read_requests(path)):
        analysis = analyzer.process(trace)
        if analysis is None:
            continue
        fields = [
            [[s.type, s.message_index, s.confidence, s.snippet, s.metadata] for s in analysis.new_signals],
            [analysis.score.quality, analysis.score.flagged, analysis.score.turn_count],
            [analysis.priority.value, analysis.priority.terms, analysis.priority.reasons],
        ]
        digest.update(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS))
    for state in analyzer.sessions:
        for metrics in state.trace_signals:
            digest.update(orjson.dumps(metrics.as_dict(), option=orjson.OPT_SORT_KEYS))
    return digest.hexdigest()


def real_set_dir(into: Path, limit: int | None = None) -> str:
    """The development set's conversations converted to OTLP files in ``into`` (the first ``limit``
    of them), or "" where the set is not beside the checkout."""
    if not (triage_real.DEFAULT_DATA / "dev.jsonl").exists():
        return ""
    triage_real.convert(triage_real.DEFAULT_DATA, into)
    if limit is not None:
        for extra in sorted(into.rglob("*.binpb"))[limit:]:
            extra.unlink()
    return str(into)


def run_python(code: str, extra_env: dict[str, str], *args: str) -> str:
    """What ``code`` prints, run with ``args`` by this interpreter in a child process from the
    checkout's root, its environment this one's with ``extra_env`` added."""
    env = {**os.environ, **extra_env}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def analysis_digest_in_child(real_dir: str, extra_env: dict[str, str]) -> str:
    """:func:`analysis_digest` computed in a child process whose environment adds ``extra_env``."""
    code = f"from tests.support.analysis_digest import analysis_digest; print(analysis_digest({real_dir!r}))"
    return run_python(code, extra_env)
