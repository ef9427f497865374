from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

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
