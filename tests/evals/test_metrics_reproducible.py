"""The analysis comes out the same whatever BLAS and libm kernels the machine picks.

numpy hands ``np.dot`` and ``@`` to OpenBLAS, which chooses its kernel by CPU, and kernels add in
orders of their own: the agent metrics' last digits once differed between hosts (bench/RESULTS.md,
twenty-fourth session). ``OPENBLAS_CORETYPE`` makes a process use a kernel of one's choice, so two
processes with two kernels must print the same values. glibc likewise picks its ``exp``, ``log``
and ``pow`` by CPU (with FMA or without), which the priorities, the phrase weights and the metrics'
proxies call; its ``glibc.cpu.hwcaps`` tunable makes a process take the kernels of a CPU without FMA.
"""

from __future__ import annotations

import functools
import json
import os
import platform
from pathlib import Path

import pytest

from tests.support.analysis_digest import (
    NO_REAL_SET,
    analysis_digest,
    analysis_digest_in_child,
    real_set_dir,
    run_python,
)

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
    result: dict[str, object] = json.loads(run_python(PROGRAM, {"OPENBLAS_CORETYPE": kernel}, str(DEMO)))
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


# Many values through math.exp, math.log, math.log2 and math.pow: a digest of their bits.
LIBM_PROGRAM = r"""
import hashlib, math, random, struct
chosen = random.Random(1)
digest = hashlib.sha256()
for _ in range(200_000):
    x, y = chosen.uniform(-30.0, 30.0), chosen.uniform(1e-6, 50.0)
    digest.update(struct.pack("dddd", math.exp(x), math.log(y), math.log2(y), math.pow(y, x / 10)))
print(digest.hexdigest())
"""
# Added to any tunables already set (the hwcaps names of recent glibc: 2.36 here ignores AVX2_Usable).
NO_FMA_TUNABLE = "glibc.cpu.hwcaps=-AVX2,-FMA"
WITHOUT_FMA = {"GLIBC_TUNABLES": ":".join(filter(None, [os.environ.get("GLIBC_TUNABLES"), NO_FMA_TUNABLE]))}


@functools.cache
def _libm_kernels_differ() -> bool:
    if platform.system() != "Linux":
        return False
    return run_python(LIBM_PROGRAM, {}) != run_python(LIBM_PROGRAM, WITHOUT_FMA)


@pytest.mark.slow
@pytest.mark.parametrize("with_real_set", [False, True], ids=["fixtures", "fixtures and real set"])
def test_the_analysis_does_not_depend_on_which_libm_kernels_glibc_picks(
    tmp_path: Path, with_real_set: bool
) -> None:
    """Every signal, score, priority and per-trace metric with glibc's kernels for a CPU without FMA
    and with this CPU's (they differ on about 6 in 10,000 arguments of ``exp`` and ``pow``): the
    priorities and phrase weights round, and ``exp``/``pow`` see few distinct arguments, so a last
    bit that differs must not show."""
    if not _libm_kernels_differ():
        pytest.skip("the tunable changes no exp/log/pow result here (not a recent glibc on Linux, or no FMA)")
    # 200 of the development set's 473 conversations: the whole set, analysed twice, made this the
    # suite's second-longest test (67 s of a 15-minute run on two cores).
    real_dir = real_set_dir(tmp_path, limit=200) if with_real_set else ""
    if with_real_set and not real_dir:
        pytest.skip(NO_REAL_SET)
    assert analysis_digest_in_child(real_dir, WITHOUT_FMA) == analysis_digest(real_dir)
