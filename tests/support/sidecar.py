"""Run the real `otelsignals run` as a subprocess on free loopback ports, and talk to it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import yaml
from prometheus_client.parser import text_string_to_metric_families

from otelsignals import native
from tests.support.servers import free_port


class SidecarProcess:
    def __init__(self, workdir: Path, exporter: dict[str, Any] | None = None, **sections: Any) -> None:
        self.workdir = workdir
        self.grpc_port, self.http_port, self.admin_port = free_port(), free_port(), free_port()
        self.config: dict[str, Any] = {
            "receiver": {
                "grpc": {"endpoint": f"127.0.0.1:{self.grpc_port}"},
                "http": {"endpoint": f"127.0.0.1:{self.http_port}"},
            },
            "admin": {"endpoint": f"127.0.0.1:{self.admin_port}"},
            "assembler": {"decision_wait": "300ms", "tick_interval": "20ms"},
            "exporter": {
                "file_path": str(workdir / "enriched.jsonl"),
                "batch": {"timeout": "20ms"},
                "retry": {"initial_interval": "100ms", "max_interval": "500ms"},
                **(exporter or {}),
            },
            "store": {"directory": str(workdir / "data")},
            "service": {"shutdown_timeout": "5s"},
        }
        for name, values in sections.items():
            self.config.setdefault(name, {}).update(values)
        self.config_path = workdir / "otelsignals.yaml"
        self.stderr_path = workdir / "stderr.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def start(self, timeout: float = 30.0) -> SidecarProcess:
        # free_port() only found the ports free: another process may take one before the sidecar
        # binds it (a client's ephemeral port, another test run), and keep it. Such a start is
        # tried again on other ports (the same ones failed four times in a row once).
        for _ in range(3):
            try:
                return self._start(timeout)
            except AssertionError as failure:
                if "already in use" not in str(failure):
                    raise
                self._choose_other_ports()
        return self._start(timeout)

    def _choose_other_ports(self) -> None:
        """New free ports for the endpoints this object chose (not those a test set itself)."""
        chosen = {
            ("receiver", "grpc"): "grpc_port",
            ("receiver", "http"): "http_port",
            ("admin", None): "admin_port",
        }
        for (section, protocol), attribute in chosen.items():
            settings = self.config[section] if protocol is None else self.config[section].get(protocol, {})
            if settings.get("endpoint") == f"127.0.0.1:{getattr(self, attribute)}":
                setattr(self, attribute, free_port())
                settings["endpoint"] = f"127.0.0.1:{getattr(self, attribute)}"

    def _start(self, timeout: float) -> SidecarProcess:
        self.config_path.write_text(yaml.safe_dump(self.config))
        # Configuration comes from the file only; whether the compiled core runs follows this process.
        kept = native.PURE_PYTHON_ENV
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTELSIGNALS_") or k == kept}
        with self.stderr_path.open("ab") as stderr:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "otelsignals.cli",
                    "run",
                    "--config",
                    str(self.config_path),
                    "--log-format",
                    "json",
                ],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=env,
                cwd=self.workdir,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"otelsignals exited with {self.process.returncode}:\n{self.stderr()}")
            try:
                with urllib.request.urlopen(f"{self.admin_url}/readyz", timeout=1) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.05)
        raise AssertionError(f"otelsignals not ready after {timeout}s:\n{self.stderr()}")

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait: the graceful path that drains buffers."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout)
        return self.process.returncode

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def __enter__(self) -> SidecarProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def log_records(self) -> list[dict[str, Any]]:
        records = []
        for line in self.stderr().splitlines():
            try:
                records.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
        return records

    def metrics(self) -> dict[str, float]:
        """Every sample of /metrics as ``name{label="v",...}`` (labels sorted) → value."""
        with urllib.request.urlopen(f"{self.admin_url}/metrics", timeout=5) as response:
            text = response.read().decode()
        samples = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return samples

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        total = 0.0
        for key, value in self.metrics().items():
            sample_name, _, label_text = key.partition("{")
            if sample_name != name:
                continue
            if all(f'{k}="{v}"' in label_text for k, v in labels.items()):
                total += value
        return total

    def wait_for_metric(self, name: str, at_least: float, timeout: float = 15.0, **labels: str) -> float:
        deadline = time.monotonic() + timeout
        value = 0.0
        while time.monotonic() < deadline:
            value = self.metric(name, **labels)
            if value >= at_least:
                return value
            time.sleep(0.05)
        raise AssertionError(f"{name}{labels} = {value}, expected ≥ {at_least}")
