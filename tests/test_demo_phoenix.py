"""`make demo-phoenix` (scripts/demo-phoenix): from a checkout to enriched spans in a real Arize
Phoenix, with each turn's verdict as an annotation, in one command."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess

import pytest

from tests.support.agent_env import ROOT
from tests.support.phoenix import PhoenixServer, wait_until
from tests.support.servers import free_port


@pytest.mark.slow
def test_the_demo_lands_enriched_spans_and_verdicts_in_a_running_phoenix(tmp_path):
    http_port, grpc_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTELSIGNALS_", "OTEL_"))}
    env |= {
        "PHOENIX_PORT": str(http_port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_DEMO_DIR": str(tmp_path / "phoenix"),
        "PYTHONPATH": str(ROOT),
    }
    result = subprocess.run(
        [str(ROOT / "scripts" / "demo-phoenix")], env=env, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stderr[-3000:]
    pid = int(re.search(r"Phoenix \(pid (\d+)\)", result.stdout).group(1))  # type: ignore[union-attr]
    try:
        phoenix = PhoenixServer(tmp_path)
        phoenix.http_port = http_port  # the server the script left running, to query
        # Phoenix stores what it received a moment later: ask until it is there. Each turn's verdict is
        # annotated on its model-call span, so every span annotated severe is a severe span.
        condition = "annotations['otelsignals'].label == 'severe'"
        annotated = wait_until(lambda: phoenix.span_ids_where(condition), bool)
        assert annotated, "no verdict reached Phoenix"
        severe = wait_until(
            lambda: phoenix.span_ids_where("signals.quality == 'severe'"), lambda found: annotated <= found
        )
        assert annotated <= severe
        assert f"http://127.0.0.1:{http_port}/projects" in result.stdout
    finally:
        os.kill(pid, signal.SIGTERM)


def test_a_port_in_use_is_one_clear_line(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        env = {**os.environ, "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(free_port())}
        result = subprocess.run(
            [str(ROOT / "scripts" / "demo-phoenix")], env=env, capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"demo-phoenix: port {port} is in use; choose others with PHOENIX_PORT=… PHOENIX_GRPC_PORT=…"
    )
