"""A real Arize Phoenix server (`phoenix serve`) on free loopback ports, and its REST API.

Phoenix runs from its own virtualenv, `.venv-phoenix`, which `scripts/test-deps` makes from
`tests/support/phoenix-requirements.txt` (Phoenix pins versions of OpenTelemetry, SQLAlchemy, FastAPI…
that the project's environment does not share). Each server gets a fresh working directory, so its
SQLite database starts empty.

The queries use Phoenix's REST API as a user's script would: the span list with its
``attribute=key:value`` filters, the span query language (``signals.quality == 'severe'``, what the
Phoenix UI's filter box takes) and the span annotations.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tests.support.agent_env import ROOT
from tests.support.servers import ServerUnavailable, free_port

PHOENIX_BIN = ROOT / ".venv-phoenix" / "bin" / "phoenix"
PROJECT = "default"  # where Phoenix puts spans whose resource names no project

T = TypeVar("T")


class PhoenixServer:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.http_port, self.grpc_port = free_port(), free_port()
        self.log_path = workdir / "phoenix.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The web UI and REST API; OTLP/HTTP is ``/v1/traces`` under it."""
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, timeout: float = 90.0) -> PhoenixServer:
        if not PHOENIX_BIN.exists():
            raise ServerUnavailable(f"{PHOENIX_BIN} is missing: run scripts/test-deps to install Phoenix")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))}
        env |= {
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.http_port),
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
            "PHOENIX_WORKING_DIR": str(self.workdir / "phoenix-home"),
            # Offline and quiet: no usage telemetry, none of the agent features that reach out.
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_AGENTS_DISABLE_WEB_ACCESS": "true",
            "PHOENIX_AGENTS_DISABLE_BASH": "true",
            "PHOENIX_AGENTS_DISABLE_GITHUB": "true",
        }
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [str(PHOENIX_BIN), "serve"], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.workdir
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerUnavailable(f"phoenix exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/healthz", timeout=1) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise ServerUnavailable(f"phoenix not ready after {timeout}s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    # -- the REST API ---------------------------------------------------------------------------
    def _get(self, path: str, params: Sequence[tuple[str, str]]) -> Any:
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())

    def spans(self, trace_ids: Sequence[str], attributes: Sequence[str] = ()) -> list[dict[str, Any]]:
        """The spans of ``trace_ids``, filtered by ``attributes`` (``key:value``, all must match)."""
        params = [("limit", "1000"), *(("trace_id", t) for t in trace_ids)]
        params += [("attribute", a) for a in attributes]
        return list(self._get(f"/v1/projects/{PROJECT}/spans", params)["data"])

    def span_ids_where(self, condition: str) -> set[str]:
        """The ids of the spans matching ``condition`` in Phoenix's span query language."""
        body = json.dumps({"queries": [{"filter": {"condition": condition}}], "limit": 10_000}).encode()
        request = urllib.request.Request(
            f"{self.base_url}/v1/spans?project_name={PROJECT}",
            data=body,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            content_type = response.headers.get("Content-Type", "")
            raw = response.read()
        # One JSON part per query (pandas' table orient), as multipart/mixed; none when nothing matched.
        boundary = content_type.partition("boundary=")[2].strip('"')
        ids: set[str] = set()
        for part in raw.split(b"--" + boundary.encode()) if boundary else [raw]:
            _, _, payload = part.partition(b"\r\n\r\n")
            if payload.strip().startswith(b"{"):
                for row in json.loads(payload)["data"]:
                    ids |= {str(v) for k, v in row.items() if k.endswith("context.span_id")}
        return ids

    def span_annotations(self, span_ids: Sequence[str]) -> list[dict[str, Any]]:
        params = [("limit", "1000"), *(("span_ids", s) for s in span_ids)]
        return list(self._get(f"/v1/projects/{PROJECT}/span_annotations", params)["data"])

    def __enter__(self) -> PhoenixServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(read: Callable[[], T], done: Callable[[T], bool], timeout: float = 20.0) -> T:
    """``read()`` again until ``done`` accepts its value (Phoenix stores what it receives in the
    background); the last value once ``timeout`` has passed, for the caller's assertion to show."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.1)
