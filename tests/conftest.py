from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from otelsignals import native
from tests.support.otlp_sink import OtlpSink
from tests.support.servers import ServerUnavailable, run_postgres, run_redis


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The embedding model's weighted table cached in this run's own directory, not the user's
    (evals.model_cache_dir's default follows XDG_CACHE_HOME; sidecars the tests start inherit it)."""
    previous = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if previous is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = previous


@pytest.fixture
def sink() -> Iterator[OtlpSink]:
    with OtlpSink().start() as running:
        yield running


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    try:
        with run_redis() as url:
            yield url
    except ServerUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    try:
        with run_postgres() as url:
            yield url
    except ServerUnavailable as exc:
        pytest.fail(str(exc))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with a test marked ``slow`` first, each file's tests together and in their order:
    with a file per test process at a time (the Makefile's ``--dist loadfile``), a long file left to
    the end keeps one process busy while the other has nothing left."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)  # a stable sort: the rest keep their order


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A test marked ``source_modules`` replaces functions of the analysis core to watch it work
    (monkeypatch). Where the core runs compiled (otelsignals/native.py), compiled callers call each
    other directly and would not see the replacement: the test then runs in a pytest of its own with
    the core's source (OTELSIGNALS_PURE_PYTHON=1), and passes only if it passes there."""
    if pyfuncitem.get_closest_marker("source_modules") is None or not native.compiled():
        return None
    env = {**os.environ, native.PURE_PYTHON_ENV: "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", pyfuncitem.nodeid]
    result = subprocess.run(
        command, env=env, cwd=pyfuncitem.config.rootpath, capture_output=True, text=True, timeout=900
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    if result.returncode != 0:
        pytest.fail(f"failed with the core's source:\n{result.stdout[-4000:]}{result.stderr[-2000:]}")
    if " passed" not in summary:  # skipped there: say so here rather than pass
        pytest.skip(f"with the core's source: {summary}")
    return True
