"""Which modules of the analysis core are compiled to C (mypyc), and when their source runs instead.

The modules below are plain, typed Python. ``setup.py`` compiles them with mypyc when it can (a C
compiler and the Python headers are there, ``OTELSIGNALS_PURE_PYTHON`` is not set at build time):
the same code then runs 1.2-1.5× faster (bench/RESULTS.md). The ``.py`` files stay beside the
compiled ones and behave the same (tests/test_native.py compares the two on the same traffic).

Python prefers a compiled module over its source, so a compiled module built from another source
(edited or checked out since the last build) would run code that is no longer there. At import,
``otelsignals`` then loads every compiled module from its source instead (all of them: compiled
modules call each other directly, not through the import system), and the sidecar's start-up log
says so. So does ``OTELSIGNALS_PURE_PYTHON=1`` at run time (to profile line by line, or to compare).

This module is read by ``setup.py`` before the package is built: standard library only.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

# Modules (dotted, under otelsignals) compiled by setup.py. Not compiled: modules whose functions
# tests or benchmarks replace at run time (analysis, conventions.span_decoder: a compiled caller
# calls a compiled function directly, not through its module's attribute), classes subclassed
# outside the list (model, compaction), conversation (compiled code boxes its shared integers anew:
# more memory), evals.session_metrics (the judge gives MetricResult a None score its annotation
# does not allow), reputation (its Evaluation takes the stores' rows as they come: 1 for True),
# and what runs elsewhere than the analysis thread.
COMPILED_MODULES: tuple[str, ...] = (
    "limits",
    "scoring",
    "triage",
    "conventions.base",
    "conventions.decoding",
    "conventions.genai",
    "conventions.indexed",
    "conventions.markers",
    "conventions.memory",
    "conventions.openinference",
    "conventions.openinference_messages",
    "conventions.openllmetry",
    "conventions.pydantic_ai",
    "conventions.tools",
    "conventions.vercel_ai",
    "evals.per_trace",
    "evals.proxies",
    "evals.trace_metrics",
    "signals.base",
    "signals.detect",
    "signals.disengagement",
    "signals.errors.classify",
    "signals.errors.evidence",
    "signals.errors.library",
    "signals.errors.payload",
    "signals.errors.rules",
    "signals.errors.selftest",
    "signals.exhaustion",
    "signals.failure",
    "signals.handoff",
    "signals.loops",
    "signals.matching",
    "signals.misalignment",
    "signals.phrase_analysis",
    "signals.rephrase",
    "signals.satisfaction",
    "signals.stagnation",
    "signals.taxonomy",
    "signals.tokens",
    "signals.tool_calls",
    "signals.word_lists",
)
PURE_PYTHON_ENV = "OTELSIGNALS_PURE_PYTHON"
# Written by setup.py beside the compiled modules: the digest of each source it compiled.
BUILD_MANIFEST = "native_build.json"
PACKAGE_DIR = Path(__file__).resolve().parent


def source_path(module: str, package_dir: Path = PACKAGE_DIR) -> Path:
    return package_dir.joinpath(*module.split(".")).with_suffix(".py")


def compiled_modules(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """The package's modules that have a compiled extension beside their source, listed or not (a
    module taken off the list keeps the file an earlier build left)."""
    found = []
    for path in package_dir.rglob("*"):
        suffix = next((s for s in importlib.machinery.EXTENSION_SUFFIXES if path.name.endswith(s)), None)
        if suffix is not None:
            relative = path.relative_to(package_dir).as_posix()[: -len(suffix)]
            found.append(relative.replace("/", "."))
    return sorted(found)


def source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stale_modules(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """The compiled modules whose source is not the one the last build compiled: the build's
    manifest records each source's digest (file times say nothing once a wheel is unpacked)."""
    try:
        built = json.loads((package_dir / BUILD_MANIFEST).read_text(encoding="utf-8"))["sources"]
    except (OSError, ValueError, KeyError, TypeError):
        built = {}
    stale = []
    for module in compiled_modules(package_dir):
        source = source_path(module, package_dir)
        if not source.exists() or built.get(module) != source_digest(source):
            stale.append(module)
    return stale


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Finds the listed modules' ``.py`` files, ahead of the compiled extensions beside them."""

    def __init__(self, names: set[str], package_dir: Path) -> None:
        self.names = names
        self.package_dir = package_dir

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        module = fullname.split(".", 1)[1]
        return importlib.util.spec_from_file_location(fullname, source_path(module, self.package_dir))


# Why the source runs rather than the compiled modules ("" when they run; "not built" when there
# are none), for the start-up log and the build-info metric.
pure_python_reason = ""


def choose(environ: Mapping[str, str] = os.environ) -> str:
    """Makes the compiled modules' source run when asked to, or when any is stale; returns why
    ("" when the compiled modules run). Called once, by ``otelsignals/__init__.py``, before any of
    them is imported."""
    global pure_python_reason
    compiled = compiled_modules()
    if environ.get(PURE_PYTHON_ENV, "").strip().lower() in ("1", "true", "yes"):
        reason = f"{PURE_PYTHON_ENV} is set"
    elif not compiled:
        reason = "not built"
    else:
        stale = stale_modules()
        reason = f"source changed since the build: {', '.join(stale)}" if stale else ""
    if reason and compiled:
        names = {f"{__package__}.{module}" for module in compiled}
        sys.meta_path.insert(0, _SourceFirst(names, PACKAGE_DIR))
    pure_python_reason = reason
    return reason


def compiled() -> bool:
    """Whether the analysis core runs compiled (what the start-up log and build-info metric say)."""
    return not pure_python_reason
