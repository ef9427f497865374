"""The analysis comes out the same whatever numerical kernels the machine's libraries pick.

numpy hands ``np.dot`` and ``@`` to OpenBLAS, which chooses its kernel by CPU, and kernels add in
orders of their own: the agent metrics' last digits once differed between hosts (bench/RESULTS.md,
twenty-fourth session). ``OPENBLAS_CORETYPE`` makes a process use a kernel of one's choice, so two
processes with two kernels must print the same values. glibc likewise picks its ``exp``, ``log``
and ``pow`` by CPU (with FMA or without), which the priorities and the metrics' proxies call; its
``glibc.cpu.hwcaps`` tunable makes a process take the kernels of a CPU without FMA.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from bench import triage_real
from tests.test_native import analysis_digest

DEMO = Path(__file__).resolve().parents[2] / "otelsignals" / "demo" / "conversations.json"

# Every text of the demo conversations embedded; then, text after text, coherence with the one before
# and loop detection against the ones before: their scores and each comparison's similarities.
PROGRAM = r"""
import json, sys
from otelsignals.evals.embeddings import default_embedder
from otelsignals.evals.trace_metrics import ComparableOutput, coherence, loop_detection_between

def texts(value):
    if isinstance(value, str):
        if len(value.split()) >= 4:
            yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from texts(item)

found = list(dict.fromkeys(texts(json.load(open(sys.argv[1])))))
embedder = default_embedder()
rows = embedder.embed(found)
outputs = [ComparableOutput.of(text, row) for text, row in zip(found, rows)]
values = []
for at in range(1, len(found)):
    values.append(coherence(found[at - 1], found[at], embedder, vectors=(rows[at - 1], rows[at])).score)
    loop = loop_detection_between(outputs[at], outputs[max(0, at - 5) : at])
    values.append(loop.score)
    values += [c["cosine_similarity"] for c in loop.metadata["comparisons"]]
print(json.dumps({"texts": len(found), "values": [v.hex() for v in values]}))
"""


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def _values_with_kernel(kernel: str) -> dict[str, object]:
    env = {**os.environ, "OPENBLAS_CORETYPE": kernel}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(DEMO)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or not {"avx2", "fma"} <= _cpu_flags(),
    reason="needs an x86-64 CPU that runs OpenBLAS's Haswell kernel (AVX2, FMA)",
)
def test_the_embedding_metrics_do_not_depend_on_the_blas_kernel() -> None:
    oldest = _values_with_kernel("Prescott")  # SSE3: every x86-64 CPU runs it
    recent = _values_with_kernel("Haswell")
    assert isinstance(oldest["texts"], int) and oldest["texts"] > 100  # the demo's texts were found
    assert oldest == recent


# Many values through math.exp, math.log and math.pow: a digest of their bits.
LIBM_PROGRAM = r"""
import hashlib, math, random, struct
chosen = random.Random(1)
digest = hashlib.sha256()
for _ in range(200_000):
    x, y = chosen.uniform(-30.0, 30.0), chosen.uniform(1e-6, 50.0)
    digest.update(struct.pack("ddd", math.exp(x), math.log(y), math.pow(y, x / 10)))
print(digest.hexdigest())
"""
WITHOUT_FMA = {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2,-FMA"}


def _run(code: str, extra_env: dict[str, str]) -> str:
    env = {**os.environ, **extra_env}
    root = DEMO.parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_analysis_does_not_depend_on_which_libm_kernels_glibc_picks(tmp_path: Path) -> None:
    """Every signal, score, priority and metric of the fixtures and, where the development set is
    present, of its 473 real conversations (the kernels differ on about 6 in 10,000 arguments of
    ``exp`` and ``pow``: the priorities and proxies round, so a differing last bit must not show)."""
    if platform.system() != "Linux" or _run(LIBM_PROGRAM, {}) == _run(LIBM_PROGRAM, WITHOUT_FMA):
        pytest.skip("glibc's exp/log/pow give the same bits with and without FMA here: nothing to compare")
    real_dir = ""
    if (triage_real.DEFAULT_DATA / "dev.jsonl").exists():
        triage_real.convert(triage_real.DEFAULT_DATA, tmp_path)
        real_dir = str(tmp_path)
    code = f"from tests.test_native import analysis_digest; print(analysis_digest({real_dir!r}))"
    assert _run(code, WITHOUT_FMA) == analysis_digest(real_dir)
