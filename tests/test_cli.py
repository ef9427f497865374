"""The user-facing commands behave as the README says."""

from __future__ import annotations

import importlib.metadata
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from otelsignals.demo.traffic import load_conversations
from otelsignals.otlp.json_decode import decode_trace_request

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str, cwd, env_extra: dict[str, str] | None = None, timeout: float = 120):
    # A bare environment (no OTELSIGNALS_* overrides), but this checkout's code, not whichever one the
    # interpreter has installed.
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "otelsignals.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


README = Path(__file__).resolve().parent.parent / "README.md"


def readme_demo_output() -> str:
    """The README's sample of what `otelsignals demo` prints (the fenced block it starts)."""
    match = re.search(r"^```\n(otelsignals demo\n.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL)
    assert match, "README.md shows the demo's output"
    return match.group(1)


def without_elapsed_time(output: str) -> str:
    return re.sub(r"^(  elapsed +)\S+ s$", r"\1… s", output, flags=re.MULTILINE)


def test_demo_sends_the_bundled_traffic_through_the_sidecar_and_summarises(tmp_path):
    # A previous demo's output: the demo's file holds its own run only; and what `otelsignals run`
    # wrote (its default file) is left alone.
    output = tmp_path / "otelsignals-data" / "demo-enriched.jsonl"
    output.parent.mkdir()
    output.write_text("left over from an earlier demo\n")
    run_output = tmp_path / "otelsignals-data" / "enriched.jsonl"
    run_output.write_text("what otelsignals run wrote\n")
    result = run_cli("demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert without_elapsed_time(result.stdout) == without_elapsed_time(readme_demo_output()), (
        "README.md's sample of the demo's output is out of date: paste what `otelsignals demo` prints"
    )
    table = dict(
        line.strip().rsplit("  ", 1) for line in result.stdout.splitlines()[1:] if "  " in line.strip()
    )
    table = {k.strip(): v.strip() for k, v in table.items()}
    assert int(table["conversations sent"]) == len(load_conversations())
    sent = int(table["spans sent (OTel SDK, gRPC + HTTP)"])
    assert int(table["spans received"]) == sent == int(table["spans forwarded"])
    assert int(table["spans dropped"]) == 0
    assert 0 < int(table["of which GenAI spans"]) < sent
    assert table["enriched output"] == "./otelsignals-data/demo-enriched.jsonl"
    assert run_output.read_text() == "what otelsignals run wrote\n"
    written = sum(
        len(ss.spans)
        for line in output.read_bytes().splitlines()
        for rs in decode_trace_request(line).resource_spans
        for ss in rs.scope_spans
    )
    assert written == sent
    # The conversations most worth a look come last, ranked, each with why.
    ranking = result.stdout.split("most worth a look (triage priority)\n", 1)[1].splitlines()[:5]
    priorities = [float(line.split()[1]) for line in ranking]
    assert len(ranking) == 5 and priorities == sorted(priorities, reverse=True) and priorities[0] > 0


def test_bad_config_stops_start_up_with_one_line_naming_the_key(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("exporter:\n  queue:\n    max_bytes: lots\n")
    result = run_cli("run", "--config", str(config), cwd=tmp_path, timeout=30)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "exporter.queue.max_bytes" in lines[0]


def test_environment_overrides_are_validated_too(tmp_path):
    result = run_cli(
        "run", cwd=tmp_path, env_extra={"OTELSIGNALS_ASSEMBLER__DECISION_WAIT": "soon"}, timeout=30
    )
    assert result.returncode == 2
    assert "assembler.decision_wait" in result.stderr


def test_an_exposed_admin_api_without_a_token_refuses_to_start(tmp_path):
    result = run_cli("run", cwd=tmp_path, env_extra={"OTELSIGNALS_ADMIN__ENDPOINT": "0.0.0.0:0"}, timeout=30)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "admin.auth_token" in lines[0] and "0.0.0.0:0" in lines[0]


def test_unknown_command_is_a_usage_error(tmp_path):
    assert run_cli("frobnicate", cwd=tmp_path, timeout=30).returncode == 2


def test_unreachable_store_stops_start_up_with_a_clear_error(tmp_path):
    result = run_cli(
        "run", cwd=tmp_path, env_extra={"OTELSIGNALS_STORE__URL": "redis://127.0.0.1:1/0"}, timeout=30
    )
    assert result.returncode == 1
    assert "cannot open the store redis://127.0.0.1:1/0 (store.url)" in result.stderr


def test_version_prints_the_installed_package_version(tmp_path):
    result = run_cli("--version", cwd=tmp_path, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"otelsignals {importlib.metadata.version('otelsignals')}"


def test_validate_says_config_ok_for_the_documented_config(tmp_path):
    result = run_cli(
        "validate", "--config", str(REPO / "config" / "otelsignals.yaml"), cwd=tmp_path, timeout=30
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "config OK\n", "")


def test_validate_lists_every_problem_one_per_line(tmp_path):
    """Rule problems of several sections, and an environment override's, each on its own line."""
    config = tmp_path / "bad.yaml"
    config.write_text("assembler:\n  tick_interval: 0\nreputation:\n  window: 0\n")
    result = run_cli(
        "validate",
        "--config",
        str(config),
        cwd=tmp_path,
        env_extra={"OTELSIGNALS_SIGNALS__BASELINE_USER_TURNS": "0"},
        timeout=30,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert sorted(result.stderr.splitlines()) == [
        "assembler.tick_interval: must be greater than 0, got 0s",
        "reputation.window: must be at least 1, got 0",
        "signals.baseline_user_turns: must be at least 1, got 0",
    ]


def test_validate_lists_every_wrongly_typed_or_unknown_key(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text(
        "assembler:\n  decision_wait: soon\nexporter:\n  bogus: 1\n  queue:\n    max_bytes: lots\n"
    )
    result = run_cli("validate", "--config", str(config), cwd=tmp_path, timeout=30)
    assert result.returncode == 2
    keys = [line.split(": ", 1)[0] for line in result.stderr.splitlines()]
    assert keys == ["assembler.decision_wait", "exporter.bogus", "exporter.queue.max_bytes"]


def test_validate_reports_a_missing_or_unreadable_file(tmp_path):
    missing = run_cli("validate", "--config", str(tmp_path / "nope.yaml"), cwd=tmp_path, timeout=30)
    assert missing.returncode == 2
    assert missing.stderr.splitlines() == [
        f"--config: cannot read {tmp_path / 'nope.yaml'}: No such file or directory"
    ]
    directory = run_cli("validate", "--config", str(tmp_path), cwd=tmp_path, timeout=30)
    assert directory.returncode == 2
    assert directory.stderr.startswith(f"--config: cannot read {tmp_path}: ")
    assert len(directory.stderr.splitlines()) == 1


def test_validate_reports_yaml_that_does_not_parse(tmp_path):
    config = tmp_path / "broken.yaml"
    config.write_text("exporter:\n  endpoint: [unclosed\n")
    result = run_cli("validate", "--config", str(config), cwd=tmp_path, timeout=30)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"--config: {config} is not valid YAML: line ")


@pytest.mark.parametrize(
    ("listener", "config_key"),
    [
        ("OTLP/gRPC receiver", "receiver.grpc.endpoint"),
        ("OTLP/HTTP receiver", "receiver.http.endpoint"),
        ("admin API", "admin.endpoint"),
    ],
)
def test_a_port_already_in_use_stops_run_with_one_line_naming_the_listener_and_its_setting(
    tmp_path, listener: str, config_key: str
):
    environment_variable = "OTELSIGNALS_" + config_key.upper().replace(".", "__")
    free = {
        "OTELSIGNALS_RECEIVER__GRPC__ENDPOINT": "127.0.0.1:0",
        "OTELSIGNALS_RECEIVER__HTTP__ENDPOINT": "127.0.0.1:0",
        "OTELSIGNALS_ADMIN__ENDPOINT": "127.0.0.1:0",
    }
    with socket.socket() as holder:  # another process's listener, as far as otelsignals can tell
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = f"127.0.0.1:{holder.getsockname()[1]}"
        result = run_cli("run", cwd=tmp_path, env_extra={**free, environment_variable: taken}, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"otelsignals: the {listener} cannot listen on {taken}: the address is already in use (another "
        f"process holds it); set {config_key} (or {environment_variable}) to a free address, or stop that "
        "process"
    ]
