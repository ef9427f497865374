"""Builds otelsignals; the analysis core's modules compiled to C with mypyc where that works.

Metadata and dependencies are in pyproject.toml. What is compiled is listed in
otelsignals/native.py (read here without importing the package). The build stays pure Python, with
a warning, when ``OTELSIGNALS_PURE_PYTHON`` is set, when mypyc is missing, or when compiling fails
(no C compiler, no Python headers): the same code then runs from its source, only slower.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("_otelsignals_native", ROOT / "otelsignals" / "native.py")
assert _spec is not None and _spec.loader is not None
native = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(native)


def _warn(message: str) -> None:
    print(f"otelsignals build: {message}; the analysis core stays pure Python", file=sys.stderr)


class BuildNativeOrPure(build_ext):
    """Builds the compiled modules, then records what it built from which sources beside them
    (native.BUILD_MANIFEST). Any failure leaves none of this build's modules (they call each other
    directly, so a part of them cannot run) and the build goes on pure Python."""

    def run(self) -> None:
        package = (ROOT if self.inplace else Path(self.build_lib)) / "otelsignals"
        _forget_unlisted(package)  # also where a wheel is built: build/ keeps earlier builds' files
        try:
            with _parallel_compile():
                super().run()
        except Exception as error:  # CompileError, LinkError, a missing compiler or header
            self._forget_built(package)
            _warn(f"compiling failed ({error})")
            return
        if self.extensions:
            (package / native.BUILD_MANIFEST).write_text(json.dumps(BUILT, indent=1) + "\n")

    def _forget_built(self, package: Path) -> None:
        # Only what this build wrote: a wheel built from a tree leaves the tree's own build alone.
        for extension in self.extensions:
            (package.parent / self.get_ext_filename(extension.name)).unlink(missing_ok=True)
        (package / native.BUILD_MANIFEST).unlink(missing_ok=True)
        self.extensions = []


# The manifest of the modules compiled (native.manifest), taken before compiling them: an edit made
# during the build then shows as a change.
BUILT: dict[str, object] = {}
# Each compiler at -O3 on the larger modules holds a few hundred MB: more at once than this gains
# little and risks a small builder's memory.
MAX_COMPILE_JOBS = 8
# The commands that build; the others (egg_info, dist_info) only ask for metadata: no type check.
_BUILDING = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}


def _parallel_compile() -> contextlib.AbstractContextManager[object]:
    """The compiled modules' C files compiled side by side, a compiler per core (at most
    ``MAX_COMPILE_JOBS``; ``OTELSIGNALS_BUILD_JOBS`` sets the count): setuptools compiles the files
    of one extension one after another, and the core is one extension of some sixty files."""
    try:
        from pybind11.setup_helpers import ParallelCompile
    except ImportError:  # a build without the build-system's requirements (setup.py run by hand)
        return contextlib.nullcontext()
    return ParallelCompile("OTELSIGNALS_BUILD_JOBS", max=MAX_COMPILE_JOBS)


def _forget_unlisted(package: Path) -> None:
    """Compiled files an earlier build left for modules no longer listed, and its manifest (until
    this build writes its own, the files there are not what it records)."""
    for module in set(native.compiled_modules(package)) - set(native.COMPILED_MODULES):
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            native.source_path(module, package).with_suffix(suffix).unlink(missing_ok=True)
    (package / native.BUILD_MANIFEST).unlink(missing_ok=True)


def native_extensions() -> list[Any]:
    if _BUILDING.isdisjoint(sys.argv[1:]):
        return []
    if native.pure_python_asked(os.environ):
        _warn(f"{native.PURE_PYTHON_ENV} is set")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _warn("mypyc is not installed")
        return []
    opt_level = native.opt_level_asked(os.environ)  # a wrong value stops the build: it is asked for
    package = ROOT / "otelsignals"
    BUILT.update(native.manifest(package))
    # Third-party packages are not installed in an isolated build: their types are then Any, and
    # ignores written for their stubs are unused. Neither changes what the compiled code does.
    options = ["--ignore-missing-imports", "--no-warn-unused-ignores", "--no-warn-unused-configs"]
    sources = [str(native.source_path(m, package).relative_to(ROOT)) for m in native.COMPILED_MODULES]
    try:
        extensions = mypycify(
            sources + options,
            group_name=native.GROUP_NAME,
            opt_level=opt_level,
            multi_file=True,  # a C file per module: less of the compiler's memory at once
        )
    except (Exception, SystemExit) as error:  # mypyc exits (SystemExit) when type checking fails
        _warn(f"mypyc could not compile the core ({error!r})")
        return []
    return list(extensions)


setup(ext_modules=native_extensions(), cmdclass={"build_ext": BuildNativeOrPure})
