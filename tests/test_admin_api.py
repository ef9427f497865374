"""The admin API of the real `otelsignals run`: the process's own metrics on /metrics, and JSON
answers for unknown paths and wrong methods."""

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


@pytest.mark.parametrize("path", ["/nope", "/v2/sessions", "/metrics/extra", "/healthz/"])
def test_an_unknown_path_is_a_json_404_naming_it(sidecar: SidecarProcess, path: str) -> None:
    status, headers, body = request(sidecar, "GET", path)
    assert status == 404
    assert json_body(headers, body) == {"error": "not found", "path": path}


def test_an_unknown_path_under_v1_needs_the_token_first(sidecar: SidecarProcess) -> None:
    """The bearer check runs before routing: without the token nothing says which /v1 paths exist."""
    assert request(sidecar, "GET", "/v1/nope")[0] == 401
    status, headers, body = request(sidecar, "GET", "/v1/nope", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 404
    assert json_body(headers, body) == {"error": "not found", "path": "/v1/nope"}


@pytest.mark.parametrize(
    ("method", "path"), [("POST", "/healthz"), ("DELETE", "/metrics"), ("PUT", "/readyz")]
)
def test_a_wrong_method_is_a_json_405_with_the_allowed_ones(
    sidecar: SidecarProcess, method: str, path: str
) -> None:
    status, headers, body = request(sidecar, method, path)
    assert status == 405
    answer = json_body(headers, body)
    assert answer == {
        "error": "method not allowed",
        "method": method,
        "path": path,
        "allowed": answer["allowed"],
    }
    assert "GET" in answer["allowed"] and method not in answer["allowed"]
    assert headers["allow"] == ", ".join(answer["allowed"])


def test_known_paths_still_answer_as_before(sidecar: SidecarProcess) -> None:
    status, headers, body = request(sidecar, "GET", "/healthz")
    assert (status, json_body(headers, body)) == (200, {"status": "ok"})
    status, headers, body = request(
        sidecar, "GET", "/v1/sessions/no-such-session", {"Authorization": f"Bearer {TOKEN}"}
    )
    assert status == 404  # a handler's own 404 keeps its own message
    assert json_body(headers, body) == {"error": "no session 'no-such-session' is open or indexed"}
