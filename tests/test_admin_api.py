"""The admin API of the real `otelsignals run`: the process's own metrics on /metrics."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.support.sidecar import SidecarProcess

TOKEN = "admin-secret"


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SidecarProcess]:
    with SidecarProcess(tmp_path_factory.mktemp("admin-api"), admin={"auth_token": TOKEN}) as running:
        yield running


def request(
    sidecar: SidecarProcess, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", sidecar.admin_port, timeout=10)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def json_body(headers: dict[str, str], body: bytes) -> Any:
    assert headers["content-type"].startswith("application/json"), headers
    return orjson.loads(body)


def test_metrics_include_the_process_own_cpu_memory_and_file_descriptors(sidecar: SidecarProcess) -> None:
    samples = sidecar.metrics()
    assert samples["process_cpu_seconds_total"] > 0
    assert samples["process_resident_memory_bytes"] > 10 * 1024**2  # a Python process with grpc loaded
    assert samples["process_open_fds"] >= 3  # stdio at least, plus the listening sockets
    assert samples["process_open_fds"] <= samples["process_max_fds"]
    assert samples["process_start_time_seconds"] > 0
    assert 'python_gc_collections_total{generation="0"}' in samples
    assert any(name.startswith("python_info{") for name in samples)
