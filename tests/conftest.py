from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.otlp_sink import OtlpSink
from tests.support.servers import ServerUnavailable, run_postgres, run_redis


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
