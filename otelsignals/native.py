"""Which modules of the analysis core are compiled to C (mypyc), and when their source runs instead.

The modules below are plain, typed Python. ``setup.py`` compiles them with mypyc when it can (a C
compiler and the Python headers are there, ``OTELSIGNALS_PURE_PYTHON`` is not set at build time):
the same code then takes about a fifth less CPU per turn (bench/RESULTS.md). The ``.py`` files stay beside the
compiled ones and behave the same (tests/test_native.py compares the two on the same traffic).

Python prefers a compiled module over its source, so a compiled module built from another source
(edited or checked out since the last build) would run code that is no longer there. At import,
``otelsignals`` then loads every compiled module from its source instead (all of them: compiled
modules call each other directly, not through the import system), and the sidecar's start-up log
says so. So does ``OTELSIGNALS_PURE_PYTHON=1`` at run time (to profile line by line, or to compare).

This module is read by ``setup.py`` before the package is built: standard library only.
"""

from __future__ import annotations

import ast
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
# and what runs elsewhere than the analysis thread, but for otlp.wire: the byte walks that split a
# request into spans and encode export requests on the event loop, and read a span's head for the
# enricher.
COMPILED_MODULES: tuple[str, ...] = (
    "limits",
    "otlp.wire",
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
    "evals.glove_tokens",
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
PACKAGE_NAME = "otelsignals"
PURE_PYTHON_ENV = "OTELSIGNALS_PURE_PYTHON"
# At build time: the C compiler's optimisation level for the compiled modules (mypyc's opt_level).
# The default, 3, is for running; 0 builds in a fraction of the time, for tests of the packaging.
OPT_LEVEL_ENV = "OTELSIGNALS_NATIVE_OPT_LEVEL"
OPT_LEVELS = ("0", "1", "2", "3")
# The compiled modules are small shims around one shared library, mypyc's "group" module, which
# setup.py builds at the top level (beside the package, not in it).
GROUP_NAME = "otelsignals_native"
GROUP_MODULE = f"{GROUP_NAME}__mypyc"
# Written by setup.py beside the compiled modules: what it compiled, from which sources (manifest()).
BUILD_MANIFEST = "native_build.json"
PACKAGE_DIR = Path(__file__).resolve().parent


def source_path(module: str, package_dir: Path = PACKAGE_DIR) -> Path:
    return package_dir.joinpath(*module.split(".")).with_suffix(".py")


def compiled_modules(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """The package's modules that have a compiled extension beside their source, listed or not (a
    module taken off the list keeps the file an earlier build left). Only extensions this
    interpreter would import: another version's (``x.cpython-312-….so``) is not one of its modules."""
    found = []
    for path in package_dir.rglob("*"):
        suffix = next((s for s in importlib.machinery.EXTENSION_SUFFIXES if path.name.endswith(s)), None)
        if suffix is not None and "." not in path.name[: -len(suffix)]:
            relative = path.relative_to(package_dir).as_posix()[: -len(suffix)]
            found.append(relative.replace("/", "."))
    return sorted(found)


def build_inputs(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """The compiled modules and every module of the package they import, directly or not: compiled
    code builds in the types it uses (a class of ``model.py`` changed after the build would not be
    what compiled code expects), so a change to any of them makes the build stale."""
    seen: set[str] = set()
    pending = list(COMPILED_MODULES)
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        for node in ast.walk(ast.parse(source_path(module, package_dir).read_bytes())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            for name in names:
                inner = name.removeprefix(f"{PACKAGE_NAME}.")
                if inner == name:
                    continue
                if source_path(inner, package_dir).exists():
                    pending.append(inner)
                elif source_path(f"{inner}.__init__", package_dir).exists():
                    pending.append(f"{inner}.__init__")
    return sorted(seen)


def source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(package_dir: Path = PACKAGE_DIR) -> dict[str, object]:
    """What a build records beside the modules it compiled: their names, and the digest of each
    :func:`build_inputs` source (taken before compiling, so an edit during the build shows)."""
    inputs = {module: source_digest(source_path(module, package_dir)) for module in build_inputs(package_dir)}
    return {"modules": sorted(COMPILED_MODULES), "inputs": inputs}


def stale_modules(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """Why the compiled modules on disk are not the last build's, as module names: a build input
    whose source changed since (file times say nothing once a wheel is unpacked), or compiled
    modules other than the ones the build made (a build that failed half-way, a module taken off
    the list). Empty when they are the build's."""
    try:
        recorded = json.loads((package_dir / BUILD_MANIFEST).read_text(encoding="utf-8"))
        built, inputs = set(recorded["modules"]), dict(recorded["inputs"])
    except (OSError, ValueError, KeyError, TypeError):
        return compiled_modules(package_dir)
    on_disk = set(compiled_modules(package_dir))
    if on_disk != built:
        return sorted(on_disk ^ built)
    return [
        module
        for module, digest in inputs.items()
        if not source_path(module, package_dir).exists()
        or source_digest(source_path(module, package_dir)) != digest
    ]


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
# are none), for the sidecar's start-up log.
pure_python_reason = ""


def pure_python_asked(environ: Mapping[str, str]) -> bool:
    """Whether ``OTELSIGNALS_PURE_PYTHON`` asks for the source (at build time: setup.py; at run time)."""
    return environ.get(PURE_PYTHON_ENV, "").strip().lower() in ("1", "true", "yes")


def opt_level_asked(environ: Mapping[str, str]) -> str:
    """The optimisation level ``OTELSIGNALS_NATIVE_OPT_LEVEL`` asks setup.py for ("3" when unset).

    Raises ValueError for another value: a build silently at another level would be measured wrong."""
    level = environ.get(OPT_LEVEL_ENV, "").strip() or "3"
    if level not in OPT_LEVELS:
        raise ValueError(f"{OPT_LEVEL_ENV}={level!r}: expected one of {', '.join(OPT_LEVELS)}")
    return level


def source_reason(
    environ: Mapping[str, str] = os.environ, package_dir: Path = PACKAGE_DIR, group_module: str = GROUP_MODULE
) -> str:
    """Why the compiled modules' source must run ("" when the compiled modules can): asked to, none
    built, stale, or their shared library not found beside the package (a later build that fell back
    to pure Python leaves an editable install's earlier modules in the tree, but no longer maps the
    library beside them: importing a compiled module would fail; one found elsewhere is another
    build's)."""
    if pure_python_asked(environ):
        return f"{PURE_PYTHON_ENV} is set"
    if not compiled_modules(package_dir):
        return "not built"
    stale = stale_modules(package_dir)
    if stale:
        return f"not what the last build compiled: {', '.join(stale)}"
    library = importlib.util.find_spec(group_module)
    if (
        library is None
        or library.origin is None
        or Path(library.origin).resolve().parent != package_dir.resolve().parent
    ):
        return f"their shared library {group_module} is not beside the package"
    return ""


def choose(environ: Mapping[str, str] = os.environ) -> str:
    """Makes the compiled modules' source run when :func:`source_reason` says so; returns why ("" when
    the compiled modules run). Called once, by ``otelsignals/__init__.py``, before any of them is
    imported."""
    global pure_python_reason
    reason = source_reason(environ)
    compiled = compiled_modules() if reason else []
    if compiled:
        names = {f"{PACKAGE_NAME}.{module}" for module in compiled}
        sys.meta_path.insert(0, _SourceFirst(names, PACKAGE_DIR))
    pure_python_reason = reason
    return reason


def compiled() -> bool:
    """Whether the analysis core runs compiled (what the sidecar's start-up log says)."""
    return not pure_python_reason
