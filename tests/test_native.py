"""The analysis core compiled with mypyc (otelsignals/native.py, setup.py): built where a compiler
is, the same results as its source, and never a build older than its source."""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from otelsignals import native
from otelsignals.offline import read_requests, traces_in_time_order
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.telemetry import Telemetry
from tests.support.analysis_digest import FIXTURES, analysis_digest, analysis_digest_in_child, real_set_dir
from tests.support.sidecar import SidecarProcess

ROOT = Path(__file__).resolve().parents[1]
EXTENSION = importlib.machinery.EXTENSION_SUFFIXES[0]


def _has_compiler() -> bool:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return shutil.which(compiler) is not None and headers.exists()


@pytest.mark.skipif(not _has_compiler(), reason="no C compiler or Python headers: the build is pure Python")
def test_the_core_is_compiled_where_a_compiler_is():
    # A build that fell back to pure Python only warns: this says so where it should not have.
    assert native.compiled(), f"the analysis core runs from source: {native.pure_python_reason}"
    for module in native.COMPILED_MODULES:
        loaded = importlib.import_module(f"otelsignals.{module}")
        assert loaded.__file__ is not None and loaded.__file__.endswith(EXTENSION), module


@pytest.mark.slow
def test_compiled_and_source_give_the_same_analysis(tmp_path):
    """The same traffic through the compiled core (this process, where it is built) and through its
    source (a process with OTELSIGNALS_PURE_PYTHON=1): every signal, score, priority and metric."""
    real_dir = real_set_dir(tmp_path, limit=150)
    here = analysis_digest(real_dir)
    assert analysis_digest_in_child(real_dir, {native.PURE_PYTHON_ENV: "1"}) == here


def _image_build_context(into: Path) -> Path:
    """What deploy/Dockerfile copies into its build stage (its COPY lines), as the image build sees
    it: without the compiled files and the manifest of a local build (Dockerfile.dockerignore)."""
    ignored = shutil.ignore_patterns(
        "*.so", "*.py[cod]", native.BUILD_MANIFEST, "__pycache__", "*.egg-info", "otelsignals-data"
    )
    into.mkdir()
    for line in (ROOT / "deploy" / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            for source in line.split()[1:-1]:
                if (ROOT / source).is_dir():
                    shutil.copytree(ROOT / source, into / source, ignore=ignored)
                else:
                    shutil.copy2(ROOT / source, into / source)
    return into


@pytest.mark.slow
@pytest.mark.skipif(not _has_compiler(), reason="no C compiler or Python headers: the build is pure Python")
def test_a_wheel_built_as_the_image_builds_it_runs_the_core_compiled(tmp_path):
    """The container image installs the package with ``pip install .`` (a wheel, not this checkout's
    editable build): the compiled modules, their shared library and the manifest must all be in it,
    and the analysis the same. (The image itself cannot be built where there is no Docker daemon.)"""
    context = _image_build_context(tmp_path / "context")
    dist, site = tmp_path / "dist", tmp_path / "site"
    # The packaging is under test, not the compiled code's speed: the C compiler's lowest level
    # builds several times faster.
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(context)],
        env={**os.environ, native.OPT_LEVEL_ENV: "0"},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(site)
    assert f"{native.GROUP_MODULE}{EXTENSION}" in names and f"otelsignals/{native.BUILD_MANIFEST}" in names
    # The wheel's package and library first (a compiled module imported before the checkout is on
    # the path: the bench modules the helpers import put it first), the tests' helpers from this checkout.
    code = (
        "import json, sys, otelsignals, otelsignals.native as n, otelsignals.scoring;"
        f"sys.path.append({str(ROOT)!r});"
        "from tests.support.analysis_digest import analysis_digest; digest = analysis_digest();"
        "library = sys.modules[n.GROUP_MODULE].__file__ if n.GROUP_MODULE in sys.modules else None;"
        "print(json.dumps([otelsignals.__file__, library, n.compiled(), n.pure_python_reason, digest]))"
    )
    env = {k: v for k, v in os.environ.items() if k != native.PURE_PYTHON_ENV}
    env["PYTHONPATH"] = str(site)
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    package_file, library, compiled, reason, digest = json.loads(result.stdout)
    assert compiled, reason
    # The wheel's own files, not this checkout's (an editable install maps its library too).
    assert Path(package_file).is_relative_to(site) and library and Path(library).is_relative_to(site)
    assert sorted(native.compiled_modules(site / "otelsignals")) == sorted(native.COMPILED_MODULES)
    assert digest == analysis_digest()


@pytest.mark.parametrize(
    ("environ", "level"),
    [
        ({}, "3"),
        ({native.OPT_LEVEL_ENV: ""}, "3"),
        ({native.OPT_LEVEL_ENV: " 0 "}, "0"),
        ({native.OPT_LEVEL_ENV: "2"}, "2"),
    ],
)
def test_the_build_takes_the_optimisation_level_asked_for(environ, level):
    assert native.opt_level_asked(environ) == level


@pytest.mark.parametrize("value", ["fast", "4", "-O0", "3.0"])
def test_an_optimisation_level_mypyc_does_not_know_stops_the_build(value):
    with pytest.raises(ValueError, match=native.OPT_LEVEL_ENV):
        native.opt_level_asked({native.OPT_LEVEL_ENV: value})


def test_the_source_runs_when_asked_to():
    code = (
        "import otelsignals.native as n, otelsignals.signals.tokens as t,"
        " otelsignals.conventions.decoding as d;"
        "import json; print(json.dumps([n.compiled(), n.pure_python_reason, t.__file__, d.__file__]))"
    )
    env = {**os.environ, native.PURE_PYTHON_ENV: "1"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    compiled, reason, *files = json.loads(result.stdout)
    assert compiled is False and native.PURE_PYTHON_ENV in reason
    assert all(file.endswith(".py") for file in files)


def _package(
    tmp_path: Path,
    sources: dict[str, str],
    compiled: list[str],
    built: tuple[list[str], dict[str, str]] | None,
) -> Path:
    """A package directory with ``sources`` (name → text), a compiled file beside each of
    ``compiled``, and a build manifest saying the build compiled ``built[0]`` from the sources
    ``built[1]`` (None: no manifest)."""
    for module, text in sources.items():
        path = native.source_path(module, tmp_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for module in compiled:
        native.source_path(module, tmp_path).with_suffix(EXTENSION).write_bytes(
            b""
        )  # only its presence is read
    if built is not None:
        modules, inputs = built
        digests = {module: hashlib.sha256(text.encode()).hexdigest() for module, text in inputs.items()}
        (tmp_path / native.BUILD_MANIFEST).write_text(json.dumps({"modules": modules, "inputs": digests}))
    return tmp_path


_SOURCES = {"a": "x = 1\n", "b.c": "y = 2\n", "model": "class M: ...\n"}


@pytest.mark.parametrize(
    ("sources", "compiled", "built", "stale"),
    [
        (_SOURCES, ["a", "b.c"], (["a", "b.c"], _SOURCES), []),
        # a compiled source edited (or checked out) after the build
        ({**_SOURCES, "b.c": "y = 3\n"}, ["a", "b.c"], (["a", "b.c"], _SOURCES), ["b.c"]),
        # a module the compiled ones import, not compiled itself: compiled code built in its types
        ({**_SOURCES, "model": "class M:\n    n: int\n"}, ["a", "b.c"], (["a", "b.c"], _SOURCES), ["model"]),
        # the same bytes again: not stale, whatever the files' times say
        (_SOURCES, ["a"], (["a"], _SOURCES), []),
        # a compiled module the build did not make (taken off the list, left by an older build)
        (_SOURCES, ["a", "b.c"], (["a"], _SOURCES), ["b.c"]),
        # one the build made that is gone (a build that failed half-way left the rest)
        (_SOURCES, ["a"], (["a", "b.c"], _SOURCES), ["b.c"]),
        # no manifest: nothing says what the files were built from
        (_SOURCES, ["a"], None, ["a"]),
    ],
)
def test_compiled_modules_are_stale_unless_they_are_what_the_build_made_from_these_sources(
    tmp_path, sources, compiled, built, stale
):
    package = _package(tmp_path, sources, compiled, built)
    assert native.stale_modules(package) == stale


_LIBRARY = "otelsignals_test_group__mypyc"  # a stand-in for the shared library, beside the package


@pytest.mark.parametrize(
    ("environ", "compiled", "built", "group_module", "reason"),
    [
        ({}, ["a"], (["a"], _SOURCES), _LIBRARY, ""),
        ({native.PURE_PYTHON_ENV: "1"}, ["a"], (["a"], _SOURCES), _LIBRARY, "is set"),
        ({native.PURE_PYTHON_ENV: "0"}, ["a"], (["a"], _SOURCES), _LIBRARY, ""),
        ({}, [], None, _LIBRARY, "not built"),
        ({}, ["a"], None, _LIBRARY, "not what the last build compiled: a"),
        # a later build fell back to pure Python: the modules it left cannot find their library
        ({}, ["a"], (["a"], _SOURCES), "otelsignals_absent__mypyc", "library otelsignals_absent__mypyc"),
        # one found elsewhere on the path is another build's ("json" stands for it)
        ({}, ["a"], (["a"], _SOURCES), "json", "library json is not beside the package"),
    ],
)
def test_the_source_runs_when_asked_to_or_when_the_compiled_modules_cannot(
    tmp_path, monkeypatch, environ, compiled, built, group_module, reason
):
    package = _package(tmp_path / "otelsignals", _SOURCES, compiled, built)
    (tmp_path / f"{_LIBRARY}.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = native.source_reason(environ, package, group_module)
    assert (reason in found) if reason else found == ""


def test_only_this_interpreter_s_extensions_are_compiled_modules(tmp_path):
    package = _package(tmp_path, {"a": "x = 1\n"}, ["a"], (["a"], {"a": "x = 1\n"}))
    native.source_path("b", package).write_text("y = 2\n")  # source only
    (package / "a.cpython-399-x86_64-linux-gnu.so").write_bytes(b"")  # another Python's build
    assert native.compiled_modules(package) == ["a"]
    assert native.stale_modules(package) == []


def test_the_build_records_the_modules_the_compiled_ones_import():
    inputs = native.build_inputs()
    assert set(native.COMPILED_MODULES) < set(inputs)
    # not compiled, but their classes are built into compiled code
    assert {"model", "compaction", "evals.session_metrics"} <= set(inputs)
    assert "pipeline.analyzer" not in inputs and "conversation" not in inputs
    assert set(native.manifest()["inputs"]) == set(inputs)  # type: ignore[arg-type]


def test_the_sidecar_says_whether_its_core_runs_compiled(tmp_path):
    with SidecarProcess(tmp_path) as sidecar:
        started = next(
            json.loads(line)
            for line in sidecar.stderr().splitlines()
            if line.startswith("{") and json.loads(line).get("message") == "otelsignals listening"
        )
    expected = "compiled" if native.compiled() else native.pure_python_reason
    assert started["analysis_core"] == expected


_ODD_VALUES = [
    AnyValue(int_value=7),
    AnyValue(bool_value=True),
    AnyValue(double_value=1.5),
    AnyValue(bytes_value=b"\x00\xff"),
    AnyValue(string_value=""),
    AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1), AnyValue(string_value="x")])),
    AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="role", value=AnyValue(int_value=3))])),
    AnyValue(string_value='{"role": 5, "content": [1, {"type": 2}]}'),
    AnyValue(string_value='[{"role": "user", "content": 5, "tool_calls": "x"}]'),
    AnyValue(),
]


_ODD_JSON: list[object] = [5, 2.5, True, None, "text", [1, "x"], {"kind": {"deeper": 1}}]


def _jumbled(value: object, chosen: random.Random) -> object:
    """``value`` (parsed JSON) with a third of the values in its objects and lists replaced by JSON
    of another kind (a message part whose "type" is an object, a "content" that is a number)."""
    if isinstance(value, dict):
        return {
            key: chosen.choice(_ODD_JSON) if chosen.random() < 0.3 else _jumbled(item, chosen)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [chosen.choice(_ODD_JSON) if chosen.random() < 0.3 else _jumbled(i, chosen) for i in value]
    return value


@pytest.mark.parametrize("seed", range(3))
def test_attribute_values_of_any_kind_never_break_the_analysis(seed):
    """Compiled code checks its annotations at run time (a value of another type raises TypeError):
    the recorded instrumentation traffic with a third of its span and event attributes replaced by
    values of other kinds (numbers, bytes, lists, maps, JSON of the wrong shape), and a third of the
    values inside its other JSON attributes too, is analysed with no exception and no reader
    failure."""

    chosen = random.Random(seed)
    paths = sorted(p for p in FIXTURES.rglob("*.binpb") if not p.name.endswith(".logs.binpb"))
    requests = []
    for path in paths:
        for request in read_requests(path):
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        attributes = [*span.attributes, *(a for e in span.events for a in e.attributes)]
                        for attribute in attributes:
                            if chosen.random() < 0.3:
                                attribute.value.CopyFrom(chosen.choice(_ODD_VALUES))
                            elif attribute.value.string_value[:1] in ("[", "{"):  # JSON: inside it
                                jumbled = _jumbled(json.loads(attribute.value.string_value), chosen)
                                attribute.value.string_value = json.dumps(jumbled)
            requests.append(request)
    analyzer = Analyzer(Telemetry())
    analysed = [analyzer.process(trace) for trace in traces_in_time_order(requests)]
    assert any(analysed)
    assert analyzer.telemetry.unreadable_spans.labels("reader_error")._value.get() == 0
