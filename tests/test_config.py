"""Configuration: embedded defaults vs the documented YAML, environment overrides, and errors that
name the offending key (in the library and through `otelsignals run`)."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from otelsignals.config import (
    ByteSize,
    Config,
    ConfigError,
    Duration,
    parse_byte_size,
    parse_duration,
    validate,
)
from otelsignals.config_loading import load_config

REPO = Path(__file__).resolve().parent.parent
DOCUMENTED = REPO / "config" / "otelsignals.yaml"


def write(tmp_path: Path, text: str | bytes, name: str = "otelsignals.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def config_error(path: Path | None = None, environ: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate(load_config(path, environ=environ or {}))
    return info.value


def dataclass_keys(cls: type, prefix: str = "") -> list[str]:
    """Every leaf key of a config dataclass, dotted."""
    hints = typing.get_type_hints(cls)
    keys = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            keys.extend(dataclass_keys(hint, f"{prefix}{f.name}."))
        else:
            keys.append(f"{prefix}{f.name}")
    return keys


def yaml_keys(node: Any, prefix: str = "") -> list[str]:
    keys = []
    leaves = set(dataclass_keys(Config))
    for key, value in node.items():
        # A free-form mapping (`headers: {}`, `category_weights: {...}`) is one key, not a section.
        if isinstance(value, dict) and value and f"{prefix}{key}" not in leaves:
            keys.extend(yaml_keys(value, f"{prefix}{key}."))
        else:
            keys.append(f"{prefix}{key}")
    return keys


# -- defaults ---------------------------------------------------------------------------------------
def test_documented_yaml_equals_embedded_defaults() -> None:
    documented = load_config(DOCUMENTED, environ={})
    embedded = load_config(None, environ={})
    assert documented == embedded
    assert dataclasses.asdict(documented) == dataclasses.asdict(embedded)
    # And both are what a fresh Config() holds, i.e. what the code falls back to.
    assert embedded == Config()


def test_every_config_key_is_documented_in_the_yaml() -> None:
    documented = yaml_keys(yaml.safe_load(DOCUMENTED.read_text(encoding="utf-8")))
    assert sorted(dataclass_keys(Config)) == sorted(documented)


def test_defaults_are_the_ones_the_spec_promises() -> None:
    config = validate(load_config(None, environ={}))
    assert config.receiver.grpc.endpoint == "0.0.0.0:4317"
    assert config.receiver.http.endpoint == "0.0.0.0:4318"
    assert config.admin.endpoint == "127.0.0.1:13317"
    assert config.receiver.max_message_size == 64 * 1024**2
    assert config.assembler.decision_wait == 2.0
    assert config.exporter.endpoint == ""
    assert config.exporter.file_path == "./otelsignals-data/enriched.jsonl"
    assert config.store.directory == "./otelsignals-data"


def test_empty_file_and_null_sections_mean_defaults(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, ""), environ={}) == Config()
    assert load_config(write(tmp_path, "exporter:\nlog: null\n"), environ={}) == Config()


def test_load_config_reads_os_environ_when_no_mapping_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTELSIGNALS_LOG__LEVEL", "debug")
    assert load_config().log.level == "debug"


# -- environment overrides --------------------------------------------------------------------------
def test_env_overrides_exporter_endpoint() -> None:
    config = load_config(None, environ={"OTELSIGNALS_EXPORTER__ENDPOINT": "collector:4317"})
    assert config.exporter.endpoint == "collector:4317"
    assert validate(config) is config


def test_env_overrides_nested_key() -> None:
    environ = {"OTELSIGNALS_EXPORTER__QUEUE__DIRECTORY": "/var/lib/otelsignals/queue"}
    config = load_config(None, environ=environ)
    assert config.exporter.queue.directory == "/var/lib/otelsignals/queue"
    # The rest of the section keeps its defaults.
    assert config.exporter.queue.num_consumers == 4
    assert config.exporter.queue.segment_size == 64 * 1024**2


def test_env_values_get_the_key_type() -> None:
    config = load_config(
        None,
        environ={
            "OTELSIGNALS_ASSEMBLER__MAX_TRACES": "10",
            "OTELSIGNALS_EXPORTER__TLS__INSECURE": "false",
            "OTELSIGNALS_ADMIN__ENABLED": "False",
            "OTELSIGNALS_EXPORTER__QUEUE__FSYNC": "true",
            "OTELSIGNALS_ASSEMBLER__DECISION_WAIT": "250ms",
            "OTELSIGNALS_EXPORTER__QUEUE__MAX_BYTES": "64MiB",
            "OTELSIGNALS_EXPORTER__RETRY__MULTIPLIER": "2",
            "OTELSIGNALS_EXPORTER__TIMEOUT": "3",
        },
    )
    assert config.assembler.max_traces == 10 and type(config.assembler.max_traces) is int
    assert config.exporter.tls.insecure is False
    assert config.admin.enabled is False
    assert config.exporter.queue.fsync is True
    assert config.assembler.decision_wait == pytest.approx(0.25)
    assert isinstance(config.assembler.decision_wait, Duration)
    assert config.exporter.queue.max_bytes == 64 * 1024**2
    assert isinstance(config.exporter.queue.max_bytes, ByteSize)
    assert config.exporter.retry.multiplier == 2.0 and type(config.exporter.retry.multiplier) is float
    assert config.exporter.timeout == 3.0


@pytest.mark.parametrize(
    "value",
    ["007", "on", "no", "null", "a: b", "Bearer abc #1", "12e3", "0x1F", "[x]", "!secret", "1:30"],
)
def test_env_strings_are_taken_verbatim(value: str) -> None:
    """Header values and paths are opaque: YAML must not turn them into ints, bools, None, maps."""
    config = load_config(
        None,
        environ={
            "OTELSIGNALS_EXPORTER__HEADERS__X_API_KEY": value,
            "OTELSIGNALS_EXPORTER__TLS__CA_FILE": value,
        },
    )
    assert config.exporter.headers == {"x_api_key": value}
    assert type(config.exporter.headers["x_api_key"]) is str
    assert config.exporter.tls.ca_file == value
    assert type(config.exporter.tls.ca_file) is str


def test_env_empty_string_clears_a_string_key() -> None:
    config = load_config(None, environ={"OTELSIGNALS_STORE__DIRECTORY": ""})
    assert config.store.directory == ""


def test_env_can_set_a_whole_mapping() -> None:
    config = load_config(None, environ={"OTELSIGNALS_EXPORTER__HEADERS": "{authorization: Bearer t}"})
    assert config.exporter.headers == {"authorization": "Bearer t"}


def test_env_can_set_one_key_of_a_mapping_with_the_mappings_value_type() -> None:
    """The README says any key can be set from the environment: one key of a map of numbers was
    refused ("expected a number, got '0.4'")."""
    config = load_config(
        None,
        environ={
            "OTELSIGNALS_EVALS__THRESHOLDS__COHERENCE": "0.4",
            "OTELSIGNALS_SAMPLER__CATEGORY_WEIGHTS__STAGNATION": "2",
            "OTELSIGNALS_EXPORTER__HEADERS__X_API_KEY": "007",  # a string map keeps the text
        },
    )
    assert config.evals.thresholds["coherence"] == 0.4
    assert config.sampler.category_weights["stagnation"] == 2.0
    assert config.exporter.headers["x_api_key"] == "007"
    with pytest.raises(ConfigError, match=r"evals\.thresholds\.coherence"):
        load_config(None, environ={"OTELSIGNALS_EVALS__THRESHOLDS__COHERENCE": "high"})


@pytest.mark.parametrize(
    "given",
    [
        {"environ": {"OTELSIGNALS_INDEX__REDACT_PATTERNS": r"\d{9,}"}},
        {"file": "index:\n  redact_patterns: '\\d{9,}'\n"},
        {"file": "index:\n  redact_patterns: ['\\d{9,}', '[a-z]{2,3}-\\d+']\n"},
    ],
    ids=["environment", "file-string", "file-list"],
)
def test_a_redaction_pattern_with_a_comma_stays_one_pattern(given: dict[str, Any], tmp_path: Path) -> None:
    """A string for a list was split at its commas: \\d{9,} became '\\d{9' and '}', two patterns
    that match nothing, so long numbers went into the index unmasked, and validate said OK."""
    from otelsignals.pipeline.index_writer import Redactor

    path = None
    if "file" in given:
        path = tmp_path / "config.yaml"
        path.write_text(given["file"])
    config = load_config(path, environ=given.get("environ", {}))
    assert config.index.redact_patterns[0] == r"\d{9,}"
    assert Redactor(config.index.redact_patterns)("call me on 4155550123456") == "call me on [redacted]"


def test_env_variables_without_the_prefix_or_a_level_are_ignored() -> None:
    config = load_config(
        None,
        environ={"OTELSIGNALS_CONFIG": "x", "OTHER_EXPORTER__ENDPOINT": "x:1", "OTELSIGNALS_": "x"},
    )
    assert config == Config()


def test_env_beats_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "exporter:\n  endpoint: file-collector:4317\n  queue:\n    num_consumers: 2\n"
        "assembler:\n  max_traces: 7\n",
    )
    config = load_config(
        path,
        environ={
            "OTELSIGNALS_EXPORTER__ENDPOINT": "env-collector:4317",
            "OTELSIGNALS_ASSEMBLER__MAX_TRACES": "9",
        },
    )
    assert config.exporter.endpoint == "env-collector:4317"
    assert config.assembler.max_traces == 9
    # File values that the environment does not touch still apply.
    assert config.exporter.queue.num_consumers == 2


def test_env_replaces_a_null_section_from_the_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "exporter: null\n"), environ={"OTELSIGNALS_EXPORTER__TIMEOUT": "5s"})
    assert config.exporter.timeout == 5.0


# -- value parsing ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("250ms", 0.25),
        ("2s", 2.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1.5", 1.5),
        (" 3 s ", 3.0),
        (0, 0.0),
        (7, 7.0),
    ],
)
def test_durations(text: Any, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "size"),
    [("512KiB", 512 * 1024), ("64MiB", 64 * 1024**2), ("1GB", 10**9), ("2 kb", 2000), ("10", 10), (5, 5)],
)
def test_byte_sizes(text: Any, size: int) -> None:
    assert parse_byte_size(text) == size


def test_file_values_get_their_types(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "assembler:\n  decision_wait: 500ms\n  max_bytes: 1GiB\n  tick_interval: 0.05\n"
        "exporter:\n  protocol: http/protobuf\n  endpoint: http://collector:4318\n  compression: none\n"
        "  headers:\n    api-key: 123\n",
    )
    config = validate(load_config(path, environ={}))
    assert config.assembler.decision_wait == pytest.approx(0.5)
    assert config.assembler.max_bytes == 1024**3
    assert config.assembler.tick_interval == pytest.approx(0.05)
    assert config.exporter.protocol == "http/protobuf"
    assert config.exporter.compression == "none"
    assert config.exporter.headers == {"api-key": "123"}


# -- errors name the key ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("environ", "key"),
    [
        ({"OTELSIGNALS_EXPORTER__BOGUS": "1"}, "exporter.bogus"),
        ({"OTELSIGNALS_EXPORTER__QUEUE__BOGUS": "1"}, "exporter.queue.bogus"),
        ({"OTELSIGNALS_NOSUCHSECTION__KEY": "1"}, "nosuchsection"),
        ({"OTELSIGNALS_ASSEMBLER__MAX_TRACES": "many"}, "assembler.max_traces"),
        ({"OTELSIGNALS_ASSEMBLER__MAX_TRACES": "1.5"}, "assembler.max_traces"),
        ({"OTELSIGNALS_ASSEMBLER__MAX_TRACES": "true"}, "assembler.max_traces"),
        ({"OTELSIGNALS_ASSEMBLER__MAX_TRACES": ""}, "assembler.max_traces"),
        ({"OTELSIGNALS_ASSEMBLER__MAX_TRACES": "-1"}, "assembler.max_traces"),
        ({"OTELSIGNALS_ADMIN__ENABLED": "1"}, "admin.enabled"),
        ({"OTELSIGNALS_ADMIN__ENABLED": "maybe"}, "admin.enabled"),
        ({"OTELSIGNALS_ASSEMBLER__DECISION_WAIT": "soon"}, "assembler.decision_wait"),
        ({"OTELSIGNALS_ASSEMBLER__DECISION_WAIT": "2 days"}, "assembler.decision_wait"),
        ({"OTELSIGNALS_ASSEMBLER__DECISION_WAIT": "-1"}, "assembler.decision_wait"),
        ({"OTELSIGNALS_ASSEMBLER__DECISION_WAIT": "-1s"}, "assembler.decision_wait"),
        ({"OTELSIGNALS_ASSEMBLER__DECISION_WAIT": ".nan"}, "assembler.decision_wait"),
        ({"OTELSIGNALS_ASSEMBLER__DECISION_WAIT": "true"}, "assembler.decision_wait"),
        ({"OTELSIGNALS_ASSEMBLER__MAX_BYTES": "64 parsecs"}, "assembler.max_bytes"),
        ({"OTELSIGNALS_ASSEMBLER__MAX_BYTES": "1.5GiB"}, "assembler.max_bytes"),
        ({"OTELSIGNALS_ASSEMBLER__MAX_BYTES": "-5"}, "assembler.max_bytes"),
        ({"OTELSIGNALS_EXPORTER__PROTOCOL": "carrier-pigeon"}, "exporter.protocol"),
        ({"OTELSIGNALS_EXPORTER__COMPRESSION": "zstd"}, "exporter.compression"),
        ({"OTELSIGNALS_LOG__LEVEL": "INFO"}, "log.level"),
        ({"OTELSIGNALS_EXPORTER__RETRY__MULTIPLIER": "fast"}, "exporter.retry.multiplier"),
        ({"OTELSIGNALS_EXPORTER__RETRY__MULTIPLIER": ".nan"}, "exporter.retry.multiplier"),
        ({"OTELSIGNALS_EXPORTER__HEADERS": "[a, b]"}, "exporter.headers"),
        ({"OTELSIGNALS_EXPORTER__TLS": "on"}, "exporter.tls"),
        ({"OTELSIGNALS_STORE__DIRECTORY": "[a, b]"}, None),  # a string key takes it verbatim: no error
    ],
)
def test_bad_env_values_name_the_key(environ: dict[str, str], key: str | None) -> None:
    if key is None:
        assert load_config(None, environ=environ).store.directory == "[a, b]"
        return
    error = config_error(environ=environ)
    assert error.key == key
    assert str(error).startswith(f"config key '{key}': ")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("bogus: 1\n", "bogus"),
        ("exporter:\n  retry:\n    jitter: 0.1\n", "exporter.retry.jitter"),
        ("exporter: 5\n", "exporter"),
        ("exporter:\n  tls: [a]\n", "exporter.tls"),
        ("receiver:\n  grpc:\n    enabled: yes please\n", "receiver.grpc.enabled"),
        ("receiver:\n  grpc:\n    endpoint: [a, b]\n", "receiver.grpc.endpoint"),
        ("receiver:\n  grpc:\n    endpoint: true\n", "receiver.grpc.endpoint"),
        ("assembler:\n  max_traces: '10'\n", "assembler.max_traces"),
        ("assembler:\n  decision_wait: forever\n", "assembler.decision_wait"),
        ("assembler:\n  decision_wait:\n", "assembler.decision_wait"),
        ("exporter:\n  queue:\n    num_consumers: -3\n", "exporter.queue.num_consumers"),
        ("exporter:\n  headers: bearer\n", "exporter.headers"),
        ("log:\n  format: xml\n", "log.format"),
    ],
)
def test_bad_file_values_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    error = config_error(write(tmp_path, text))
    assert error.key == key
    assert f"'{key}'" in str(error)


@pytest.mark.parametrize(
    ("environ", "key"),
    [
        ({"OTELSIGNALS_RECEIVER__GRPC__ENDPOINT": "localhost"}, "receiver.grpc.endpoint"),
        ({"OTELSIGNALS_RECEIVER__HTTP__ENDPOINT": "0.0.0.0:99999"}, "receiver.http.endpoint"),
        ({"OTELSIGNALS_ADMIN__ENDPOINT": "127.0.0.1:admin"}, "admin.endpoint"),
        (
            {
                "OTELSIGNALS_EXPORTER__PROTOCOL": "http/protobuf",
                "OTELSIGNALS_EXPORTER__ENDPOINT": "collector:4318",
            },
            "exporter.endpoint",
        ),
        ({"OTELSIGNALS_EXPORTER__BATCH__MAX_BYTES": "100"}, "exporter.batch.max_bytes"),
        ({"OTELSIGNALS_EXPORTER__QUEUE__NUM_CONSUMERS": "0"}, "exporter.queue.num_consumers"),
        ({"OTELSIGNALS_EXPORTER__RETRY__MULTIPLIER": "0.5"}, "exporter.retry.multiplier"),
        ({"OTELSIGNALS_EXPORTER__RETRY__RANDOMIZATION_FACTOR": "1.5"}, "exporter.retry.randomization_factor"),
        ({"OTELSIGNALS_RECEIVER__MAX_MESSAGE_SIZE": "10"}, "receiver.max_message_size"),
        ({"OTELSIGNALS_ASSEMBLER__TICK_INTERVAL": "0"}, "assembler.tick_interval"),
    ],
)
def test_validate_names_the_key(environ: dict[str, str], key: str) -> None:
    load_config(None, environ=environ)  # each value is fine on its own...
    assert config_error(environ=environ).key == key  # ...validate() refuses the combination


def test_validate_reports_every_problem_of_every_section_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "assembler:\n  tick_interval: 0\n"
        "exporter:\n  queue:\n    num_consumers: 0\n  retry:\n    multiplier: 0.5\n"
        "reputation:\n  window: 0\n",
    )
    error = config_error(path)
    assert [key for key, _ in error.problems] == [
        "assembler.tick_interval",
        "exporter.queue.num_consumers",
        "exporter.retry.multiplier",
        "reputation.window",
    ]
    assert error.key == "assembler.tick_interval"
    message = str(error)
    assert message.startswith(
        "4 problems: config key 'assembler.tick_interval': must be greater than 0, got 0s; "
    )
    assert "config key 'exporter.queue.num_consumers': must be at least 1, got 0" in message
    assert "config key 'exporter.retry.multiplier': must be at least 1, got 0.5" in message
    assert "config key 'reputation.window': must be at least 1, got 0" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("environ", "key"),
    [
        ({"OTELSIGNALS_REPUTATION__WINDOW": "0"}, "reputation.window"),
        ({"OTELSIGNALS_REPUTATION__CALIBRATION": "501"}, "reputation.calibration"),
        ({"OTELSIGNALS_REPUTATION__LATENCY_BAD_MS": "500"}, "reputation.latency_bad_ms"),
        ({"OTELSIGNALS_REPUTATION__LATENCY_PERCENTILE": "0"}, "reputation.latency_percentile"),
        ({"OTELSIGNALS_REPUTATION__STREAK_TARGET": "0"}, "reputation.streak_target"),
    ],
)
def test_reputation_settings_are_checked_when_reputation_is_on(environ: dict[str, str], key: str) -> None:
    assert config_error(environ=environ).key == key
    disabled = {**environ, "OTELSIGNALS_REPUTATION__ENABLED": "false"}
    if key == "reputation.window":  # the store keeps that many evaluations per agent either way
        assert config_error(environ=disabled).key == key
    else:
        validate(load_config(None, environ=disabled))


def test_loading_the_config_does_not_import_the_pipeline() -> None:
    """The stages import their config sections, never the other way round (no import cycle)."""
    probe = (
        "import sys, otelsignals.config; "
        "print(sorted(name for name in sys.modules if name.startswith('otelsignals.pipeline')))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    )
    assert result.stdout.strip() == "[]"


def test_validate_accepts_good_endpoints() -> None:
    environ = {
        "OTELSIGNALS_RECEIVER__GRPC__ENDPOINT": "[::]:4317",
        "OTELSIGNALS_RECEIVER__HTTP__ENDPOINT": ":0",
        "OTELSIGNALS_EXPORTER__PROTOCOL": "http/protobuf",
        "OTELSIGNALS_EXPORTER__ENDPOINT": "https://collector.example:4318",
    }
    validate(load_config(None, environ=environ))


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_non_mapping_yaml_is_refused(tmp_path: Path, text: str) -> None:
    error = config_error(write(tmp_path, text))
    assert error.key == "--config"
    assert "mapping" in str(error)


def test_invalid_yaml_is_one_line(tmp_path: Path) -> None:
    error = config_error(write(tmp_path, "exporter:\n  endpoint: [a\n  b: c\n"))
    assert error.key == "--config"
    assert "not valid YAML" in str(error) and "line 3" in str(error)
    assert "\n" not in str(error)


def test_unreadable_file(tmp_path: Path) -> None:
    missing = config_error(tmp_path / "nope.yaml")
    assert missing.key == "--config" and "nope.yaml" in str(missing)
    directory = config_error(tmp_path)
    assert directory.key == "--config" and "cannot read" in str(directory)
    binary = config_error(write(tmp_path, b"\xff\xfe\x00\x01 not text"))
    assert binary.key == "--config" and "UTF-8" in str(binary)


# -- the CLI contract -------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _otelsignals() -> list[str]:
    script = Path(sys.executable).parent / "otelsignals"
    return [str(script)] if script.exists() else [sys.executable, "-m", "otelsignals.cli"]


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ("exporter:\n  protocol: carrier-pigeon\n", "exporter.protocol"),
        ("assembler:\n  decision_wait: soon\n", "assembler.decision_wait"),
        ("exporter:\n  endpoint: [oops\n", "--config"),
        ("admin:\n  endpoint: nowhere\n", "admin.endpoint"),
        ("admin:\n  endpoint: nowhere\nsessions:\n  max_messages: 2\n", "sessions.max_messages"),
    ],
)
def test_cli_run_with_a_bad_config_exits_2_with_one_line(tmp_path: Path, body: str, key: str) -> None:
    # Receivers on free loopback ports: if start-up went ahead it would bind them and keep running
    # (the timeout would fire) instead of exiting at once.
    grpc_port, http_port = _free_port(), _free_port()
    path = write(
        tmp_path,
        f"receiver:\n  grpc:\n    endpoint: 127.0.0.1:{grpc_port}\n"
        f"  http:\n    endpoint: 127.0.0.1:{http_port}\n" + body,
        "bad.yaml",
    )
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTELSIGNALS_")}
    result = subprocess.run(
        [*_otelsignals(), "run", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert f"'{key}'" in lines[0]
    assert result.stdout == ""
    assert not (tmp_path / "otelsignals-data").exists()
    for port in (grpc_port, http_port):
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("endpoint", ["collector", "collector:port", "http://collector"])
def test_grpc_exporter_endpoint_needs_a_port(endpoint):
    config = load_config(None, environ={"OTELSIGNALS_EXPORTER__ENDPOINT": endpoint})
    with pytest.raises(ConfigError) as raised:
        validate(config)
    assert raised.value.key == "exporter.endpoint"


@pytest.mark.parametrize("endpoint", ["collector:4317", "https://collector.example:443", "127.0.0.1:4317"])
def test_grpc_exporter_endpoint_forms(endpoint):
    validate(load_config(None, environ={"OTELSIGNALS_EXPORTER__ENDPOINT": endpoint}))


@pytest.mark.parametrize(
    ("environ", "refused"),
    [
        ({"OTELSIGNALS_ADMIN__ENDPOINT": "0.0.0.0:13317"}, True),
        ({"OTELSIGNALS_ADMIN__ENDPOINT": "10.0.0.5:13317"}, True),
        ({"OTELSIGNALS_ADMIN__ENDPOINT": "[::]:13317"}, True),
        ({"OTELSIGNALS_ADMIN__ENDPOINT": "admin.internal:13317"}, True),  # a name is not proof of loopback
        ({"OTELSIGNALS_ADMIN__ENDPOINT": "127.0.0.1:13317"}, False),
        ({"OTELSIGNALS_ADMIN__ENDPOINT": "127.0.0.2:13317"}, False),
        ({"OTELSIGNALS_ADMIN__ENDPOINT": "localhost:13317"}, False),
        ({"OTELSIGNALS_ADMIN__ENDPOINT": "[::1]:13317"}, False),
        ({"OTELSIGNALS_ADMIN__ENDPOINT": "0.0.0.0:13317", "OTELSIGNALS_ADMIN__AUTH_TOKEN": "s3cret"}, False),
        (
            {
                "OTELSIGNALS_ADMIN__ENDPOINT": "0.0.0.0:13317",
                "OTELSIGNALS_ADMIN__ALLOW_UNAUTHENTICATED": "true",
            },
            False,
        ),
        ({"OTELSIGNALS_ADMIN__ENDPOINT": "0.0.0.0:13317", "OTELSIGNALS_ADMIN__ENABLED": "false"}, False),
    ],
)
def test_admin_api_off_loopback_needs_a_token(environ: dict[str, str], refused: bool) -> None:
    config = load_config(None, environ=environ)
    if not refused:
        validate(config)
        return
    with pytest.raises(ConfigError) as raised:
        validate(config)
    assert raised.value.key == "admin.auth_token"
    assert "allow_unauthenticated" in str(raised.value)


def test_a_metric_may_have_its_own_threshold(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("evals:\n  threshold: 0.5\n  thresholds: {agent_reliability: 0.7, coherence: 0.4}\n")
    evals = validate(load_config(path, environ={})).evals
    assert (evals.threshold_for("agent_reliability"), evals.threshold_for("coherence")) == (0.7, 0.4)
    assert evals.threshold_for("confidence") == 0.5


@pytest.mark.parametrize(
    ("thresholds", "problem"),
    [("{vibes: 0.5}", "unknown metrics ['vibes']"), ("{coherence: 1.5}", "thresholds.coherence")],
)
def test_bad_metric_thresholds_are_refused(tmp_path: Path, thresholds: str, problem: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"evals:\n  thresholds: {thresholds}\n")
    with pytest.raises(ConfigError) as refused:
        validate(load_config(path, environ={}))
    assert problem in str(refused.value)


@pytest.mark.parametrize(
    ("environ", "problem"),
    [
        ({"OTELSIGNALS_EXPORTER__FILE_PATH": ""}, "'exporter.file_path': a file to write to is needed"),
        ({"OTELSIGNALS_EXPORTER__FILE_PATH": "."}, "'exporter.file_path'"),
        (
            {
                "OTELSIGNALS_EVALS__JUDGE_URL": "http://127.0.0.1:9/v1",
                "OTELSIGNALS_EVALS__JUDGE_TRACES": "true",
            },
            "'evals.judge_model': the model to ask judge_url for",
        ),
        ({"OTELSIGNALS_STORE__URL": "mysql://x"}, "'store.url': must be sqlite"),
    ],
)
def test_settings_run_cannot_start_with_are_refused_by_validate(
    environ: dict[str, str], problem: str
) -> None:
    """validate said "config OK" and run then ended in a traceback (an empty file path, a judge
    without a model, a store URL of no known kind)."""
    with pytest.raises(ConfigError) as refused:
        validate(load_config(None, environ=environ))
    assert problem in str(refused.value)


@pytest.mark.parametrize(
    "environ",
    [
        {"OTELSIGNALS_EXPORTER__ENDPOINT": "collector:4317", "OTELSIGNALS_EXPORTER__FILE_PATH": ""},
        {"OTELSIGNALS_EVALS__JUDGE_URL": "http://127.0.0.1:9/v1"},  # eval runs name their model
        {"OTELSIGNALS_STORE__URL": "rediss://cache:6380/0"},
        {"OTELSIGNALS_STORE__URL": "postgres://u@db/x"},
    ],
)
def test_their_near_misses_are_accepted(environ: dict[str, str]) -> None:
    validate(load_config(None, environ=environ))


# -- annotations (Phoenix span annotations) ---------------------------------------------------------
@pytest.mark.parametrize(
    ("environ", "key"),
    [
        ({"OTELSIGNALS_ANNOTATIONS__PHOENIX_URL": "phoenix:6006"}, "annotations.phoenix_url"),
        ({"OTELSIGNALS_ANNOTATIONS__NAME": "note"}, "annotations.name"),
        ({"OTELSIGNALS_ANNOTATIONS__NAME": " "}, "annotations.name"),
        ({"OTELSIGNALS_ANNOTATIONS__MAX_PENDING": "0"}, "annotations.max_pending"),
        ({"OTELSIGNALS_ANNOTATIONS__BATCH_SIZE": "0"}, "annotations.batch_size"),
        ({"OTELSIGNALS_ANNOTATIONS__MAX_ATTEMPTS": "0"}, "annotations.max_attempts"),
        ({"OTELSIGNALS_ANNOTATIONS__FLUSH_INTERVAL": "0s"}, "annotations.flush_interval"),
        ({"OTELSIGNALS_ANNOTATIONS__TIMEOUT": "0"}, "annotations.timeout"),
    ],
)
def test_annotation_settings_name_the_key(environ: dict[str, str], key: str) -> None:
    assert config_error(environ=environ).key == key


def test_annotations_are_off_by_default_and_take_a_phoenix_url_with_headers() -> None:
    assert load_config(None, environ={}).annotations.phoenix_url == ""
    config = validate(
        load_config(
            None,
            environ={
                "OTELSIGNALS_ANNOTATIONS__PHOENIX_URL": "https://phoenix.example:6006/",
                "OTELSIGNALS_ANNOTATIONS__HEADERS": "{authorization: Bearer abc}",
                "OTELSIGNALS_ANNOTATIONS__FLUSH_INTERVAL": "250ms",
            },
        )
    )
    assert config.annotations.headers == {"authorization": "Bearer abc"}
    assert config.annotations.flush_interval == 0.25


@pytest.mark.parametrize(
    ("protocol", "name", "value", "says"),
    [
        ("grpc", "x-api-key", "abc\n", "control character"),  # a token file's trailing newline
        ("http/protobuf", "authorization", "Bearer a\r\nx-injected: 1", "control character"),
        ("grpc", "x-api-key", "abc\x00", "control character"),
        ("grpc", "bad key", "v", "not a valid header name"),
        ("http/protobuf", "x-api-key:", "v", "not a valid header name"),
        ("grpc", "", "v", "not a valid header name"),
        ("grpc", "x!y", "v", "not a valid gRPC metadata key"),  # an HTTP token, not a gRPC key
        ("grpc", "x~y", "v", "not a valid gRPC metadata key"),
        ("http/protobuf", "Content-Type", "application/json", "writes this header itself"),
        ("grpc", "te", "trailers", "writes this header itself"),
        ("grpc", "grpc-timeout", "1S", "writes this header itself"),
    ],
)
def test_an_export_header_that_cannot_be_sent_is_refused_at_start_up(
    protocol: str, name: str, value: str, says: str
) -> None:
    config = load_config(None, environ={})
    config.exporter.protocol = protocol  # type: ignore[assignment]
    config.exporter.headers = {name: value}
    with pytest.raises(ConfigError, match=says) as refused:
        validate(config)
    assert "exporter" in str(refused.value) and "headers" in str(refused.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("authorization", "Bearer abc"),
        ("x_api_key", "007"),
        ("x-tenant", "acme\tcorp"),  # a tab may be in a value
        ("x-name", "Zoë"),
        ("x-empty", ""),
        ("X-Honeycomb-Team", "0123456789abcdef"),
        ("authorization", "Basic dXNlcjpwYXNz=="),
        ("DD-API-KEY", "abc/def+ghi="),
        ("x-trace-context-bin", "raw bytes"),  # binary metadata: base64-encoded when sent
    ],
)
def test_export_headers_that_can_be_sent_are_taken(name: str, value: str) -> None:
    for protocol in ("grpc", "http/protobuf"):
        config = load_config(None, environ={})
        config.exporter.protocol = protocol  # type: ignore[assignment]
        config.exporter.headers = {name: value}
        assert validate(config).exporter.headers == {name: value}


def test_an_http_token_that_is_no_grpc_key_is_taken_over_http() -> None:
    config = load_config(None, environ={})
    config.exporter.protocol = "http/protobuf"
    config.exporter.headers = {"x!y": "v"}
    assert validate(config).exporter.headers == {"x!y": "v"}


def test_a_phoenix_annotation_header_that_cannot_be_sent_is_refused_at_start_up() -> None:
    config = load_config(None, environ={})
    config.annotations.headers = {"authorization": "Bearer key\n"}
    with pytest.raises(ConfigError, match="control character") as refused:
        validate(config)
    assert "annotations" in str(refused.value)
    config.annotations.headers = {"authorization": "Bearer key"}
    assert validate(config).annotations.headers == {"authorization": "Bearer key"}


def _tls_files(tmp_path: Path) -> dict[str, str]:
    import trustme

    ca = trustme.CA()
    identity = ca.issue_cert("otelsignals@example.com")
    paths = {name: tmp_path / f"{name}.pem" for name in ("ca", "cert", "key")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    identity.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    identity.private_key_pem.write_to_path(str(paths["key"]))
    return {name: str(path) for name, path in paths.items()}


def _exporter(tmp_path: Path, **exporter: Any) -> Config:
    path = tmp_path / "exporter.yaml"
    path.write_text(yaml.safe_dump({"exporter": exporter}))
    return load_config(path, environ={})


def test_exporter_tls_that_would_not_be_used_as_written_is_refused(tmp_path: Path) -> None:
    """A gRPC exporter given certificate files but left at insecure: true (the default) sent in
    plain text, silently, and validate said OK; unreadable files stopped run with no key named."""
    files = _tls_files(tmp_path)
    mtls = {"ca_file": files["ca"], "cert_file": files["cert"], "key_file": files["key"]}
    cases = [
        (
            {"endpoint": "backend:4317", "tls": mtls},
            "would not be used, the endpoint is sent to in plain text",
        ),
        (
            {"endpoint": "http://b:4318", "protocol": "http/protobuf", "tls": {"ca_file": files["ca"]}},
            "use an https:// endpoint",
        ),
        (
            {"endpoint": "backend:4317", "tls": {"insecure": False, "ca_file": "/nope.pem"}},
            "'exporter.tls.ca_file'",
        ),
        (
            {"endpoint": "backend:4317", "tls": {"insecure": False, "cert_file": files["cert"]}},
            "a client certificate needs both",
        ),
        (
            {"endpoint": "backend:4317", "tls": {"insecure": False, "insecure_skip_verify": True}},
            "OTLP/HTTP only",
        ),
        (
            {
                "endpoint": "https://b:4318",
                "protocol": "http/protobuf",
                "tls": {"cert_file": files["ca"], "key_file": files["ca"]},
            },
            "'exporter.tls.cert_file and key_file'",
        ),
    ]
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(Path(files["key"]).read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    tls = {"insecure": False, "cert_file": files["cert"], "key_file": str(encrypted)}
    cases.append(
        ({"endpoint": "backend:4317", "tls": tls}, "is encrypted: a key without passphrase is needed")
    )
    for exporter, problem in cases:
        with pytest.raises(ConfigError) as refused:
            validate(_exporter(tmp_path, **exporter))
        assert problem in str(refused.value), exporter
    # Near misses: the same files used as written; OTLP/HTTP takes a cert_file that holds the key.
    combined = tmp_path / "combined.pem"
    combined.write_text(Path(files["cert"]).read_text() + Path(files["key"]).read_text())
    validate(
        _exporter(
            tmp_path, endpoint="https://b:4318", protocol="http/protobuf", tls={"cert_file": str(combined)}
        )
    )
    validate(_exporter(tmp_path, tls=mtls))  # the file exporter sends nothing
    validate(_exporter(tmp_path, endpoint="backend:4317", tls={**mtls, "insecure": False}))
    validate(_exporter(tmp_path, endpoint="https://b:4318", protocol="http/protobuf", tls=mtls))
    validate(_exporter(tmp_path, endpoint="backend:4317"))  # plain text, no files: as configured
