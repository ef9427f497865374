"""The deployment files under deploy/ are checked against the code and the documented component keys.

Nothing here needs Docker, Kubernetes or a Collector binary: the Kubernetes manifests must parse and
only set config keys that exist, the Dockerfile must be self-consistent with the repository, the
Collector configs may only use keys documented for their components, and the Grafana dashboard may
only query metrics that ``otelsignals.telemetry.Telemetry`` registers.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from otelsignals import config as cfg
from otelsignals.config_loading import load_config
from otelsignals.signals.taxonomy import LEAF_TYPES
from otelsignals.telemetry import Telemetry

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S_FILES = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = DEPLOY / "Dockerfile.dockerignore"
GATEWAY = DEPLOY / "collector" / "gateway.yaml"
BACKEND = DEPLOY / "collector" / "backend.yaml"
DASHBOARD = DEPLOY / "grafana" / "otelsignals-dashboard.json"
ADMIN_PORT = 13317
TURNS_HISTOGRAM = "otelsignals_conversation_turns"


# --------------------------------------------------------------------------------------------------
# helpers


def _k8s_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


def _all_k8s_docs() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, doc) for path in K8S_FILES for doc in _k8s_docs(path)]


def _pod_specs() -> Iterator[tuple[Path, dict[str, Any], dict[str, Any]]]:
    """(file, workload, pod spec) for every workload with a pod template."""
    for path, doc in _all_k8s_docs():
        template = doc.get("spec", {}).get("template")
        if doc.get("kind") in {"Deployment", "StatefulSet", "DaemonSet", "Job"} and template:
            yield path, doc, template["spec"]


def _otelsignals_containers() -> list[tuple[Path, dict[str, Any], dict[str, Any], dict[str, Any]]]:
    found = []
    for path, workload, pod in _pod_specs():
        for container in pod["containers"]:
            if container["name"] == "otelsignals":
                found.append((path, workload, pod, container))
    return found


def _config_key_path(env_name: str) -> list[str]:
    """OTELSIGNALS_EXPORTER__QUEUE__DIRECTORY -> ["exporter", "queue", "directory"], checked against
    the Config dataclasses (the same mapping as otelsignals.config._apply_environment)."""
    assert env_name.startswith(cfg.ENV_PREFIX) and "__" in env_name, env_name
    parts = env_name[len(cfg.ENV_PREFIX) :].lower().split("__")
    node: Any = cfg.Config
    for depth, part in enumerate(parts):
        if not (isinstance(node, type) and dataclasses.is_dataclass(node)):
            if typing.get_origin(node) is dict:  # a free-form mapping such as exporter.headers
                return parts
            pytest.fail(f"{env_name}: {'.'.join(parts[:depth])} is a value, not a section")
        fields = {f.name for f in dataclasses.fields(node)}
        if part not in fields:
            pytest.fail(
                f"{env_name}: no config key {'.'.join(parts[: depth + 1])!r} "
                f"(known under {'.'.join(parts[:depth]) or '<root>'}: {', '.join(sorted(fields))})"
            )
        node = typing.get_type_hints(node)[part]
    if isinstance(node, type) and dataclasses.is_dataclass(node):
        pytest.fail(f"{env_name}: {'.'.join(parts)} is a section, not a key")
    return parts


def _default_text(parts: list[str]) -> str:
    value: Any = cfg.Config()
    for part in parts:
        value = getattr(value, part)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{}"
    return str(value)


def _container_environ(container: dict[str, Any]) -> dict[str, str]:
    """The container's OTELSIGNALS_* variables; a required Secret reference gets a stand-in value (the
    pod does not start without the Secret), an optional one the key's default."""
    environ = {}
    for entry in container.get("env", []):
        name = entry["name"]
        if not name.startswith(cfg.ENV_PREFIX):
            continue
        parts = _config_key_path(name)
        secret = entry.get("valueFrom", {}).get("secretKeyRef")
        if "value" in entry:
            environ[name] = str(entry["value"])
        elif secret is not None and not secret.get("optional", False):
            environ[name] = f"secret:{secret['name']}/{secret['key']}"
        else:
            environ[name] = _default_text(parts)
    return environ


def _configmaps() -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in _all_k8s_docs() if doc.get("kind") == "ConfigMap"}


def _config_file_for(pod: dict[str, Any], container: dict[str, Any], tmp_path: Path) -> Path | None:
    """The --config file of a container, materialised from the ConfigMap volume it is mounted from."""
    args = [*container.get("command", []), *container.get("args", [])]
    if "--config" not in args:
        return None
    config_path = Path(args[args.index("--config") + 1])
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        mount_path = Path(mount["mountPath"])
        if config_path.parent != mount_path:
            continue
        volume = volumes[mount["name"]]
        assert "configMap" in volume, f"{config_path} is mounted from a volume that is not a ConfigMap"
        configmap = _configmaps().get(volume["configMap"]["name"])
        assert configmap is not None, f"ConfigMap {volume['configMap']['name']!r} is not defined in deploy/"
        assert config_path.name in configmap["data"], f"ConfigMap has no {config_path.name!r} entry"
        local = tmp_path / config_path.name
        local.write_text(configmap["data"][config_path.name], encoding="utf-8")
        return local
    pytest.fail(f"--config {config_path} is not on any volume mounted into {container['name']!r}")


def _effective_config(pod: dict[str, Any], container: dict[str, Any], tmp_path: Path) -> cfg.Config:
    """What `otelsignals run` in that container would run with: image ENV, ConfigMap file, pod env."""
    environ = {**_dockerfile_env(), **_container_environ(container)}
    return cfg.validate(load_config(_config_file_for(pod, container, tmp_path), environ=environ))


def _resolve_port(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    for declared in container.get("ports", []):
        if declared.get("name") == port:
            return int(declared["containerPort"])
    pytest.fail(f"container {container['name']!r} has no port named {port!r}")


# --------------------------------------------------------------------------------------------------
# Kubernetes


def test_kubernetes_files_exist_and_parse() -> None:
    names = {p.name for p in K8S_FILES}
    assert {"sidecar.yaml", "deployment.yaml"} <= names, names
    for path in K8S_FILES:
        docs = _k8s_docs(path)
        assert docs, f"{path.name} is empty"
        for doc in docs:
            assert {"apiVersion", "kind", "metadata"} <= doc.keys(), f"{path.name}: {doc}"


def test_every_otelsignals_env_var_is_a_real_config_key() -> None:
    seen = 0
    for path, _, pod in _pod_specs():
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            environ = _container_environ(container)  # fails naming the variable for an unknown key
            seen += len(environ)
            try:
                cfg.validate(load_config(None, environ=environ))
            except cfg.ConfigError as exc:
                pytest.fail(f"{path.name}/{container['name']}: {exc}")
    assert seen >= 10, "expected the manifests to configure otelsignals through OTELSIGNALS_* variables"


def test_env_mapping_check_rejects_unknown_keys() -> None:
    # The check above is only as good as this: an unknown key must be caught both ways.
    with pytest.raises(pytest.fail.Exception, match=r"no config key 'exporter\.endpoints'"):
        _config_key_path("OTELSIGNALS_EXPORTER__ENDPOINTS")
    with pytest.raises(cfg.ConfigError, match=r"exporter\.endpoints"):
        load_config(None, environ={"OTELSIGNALS_EXPORTER__ENDPOINTS": "x:4317"})
    assert _config_key_path("OTELSIGNALS_EXPORTER__QUEUE__DIRECTORY") == ["exporter", "queue", "directory"]


def test_probes_hit_healthz_and_readyz_on_the_admin_port(tmp_path: Path) -> None:
    containers = _otelsignals_containers()
    assert {path.name for path, *_ in containers} == {"sidecar.yaml", "deployment.yaml"}
    for path, _, pod, container in containers:
        where = f"{path.name}/{container['name']}"
        readiness = container["readinessProbe"]["httpGet"]
        liveness = container["livenessProbe"]["httpGet"]
        assert readiness["path"] == "/readyz", where
        assert liveness["path"] == "/healthz", where
        assert _resolve_port(container, readiness["port"]) == ADMIN_PORT, where
        assert _resolve_port(container, liveness["port"]) == ADMIN_PORT, where
        if "startupProbe" in container:
            assert container["startupProbe"]["httpGet"]["path"] == "/healthz", where
        # The kubelet probes the pod IP: the admin API must listen there, on that port.
        config = _effective_config(pod, container, tmp_path)
        host, port = cfg.split_host_port(config.admin.endpoint, "admin.endpoint")
        assert port == ADMIN_PORT, f"{where}: admin.endpoint is {config.admin.endpoint}"
        assert host in {"0.0.0.0", "::", ""}, (
            f"{where}: admin.endpoint {config.admin.endpoint} is not reachable"
        )
        declared = {p["containerPort"] for p in container["ports"]}
        assert {4317, 4318, ADMIN_PORT} <= declared, where


def test_configmap_otelsignals_yaml_loads_and_validates(tmp_path: Path) -> None:
    configmaps = [cm for cm in _configmaps().values() if "otelsignals.yaml" in cm.get("data", {})]
    assert configmaps, "expected a ConfigMap with an otelsignals.yaml"
    for configmap in configmaps:
        path = tmp_path / f"{configmap['metadata']['name']}.yaml"
        path.write_text(configmap["data"]["otelsignals.yaml"], encoding="utf-8")
        # The admin token comes from a Secret through the environment (checked per container below).
        secret = {"OTELSIGNALS_ADMIN__AUTH_TOKEN": "secret:otelsignals-admin/token"}
        try:
            config = cfg.validate(load_config(path, environ=secret))
        except cfg.ConfigError as exc:
            pytest.fail(f"ConfigMap {configmap['metadata']['name']}: {exc}")
        assert config.exporter.endpoint, "the sidecar example forwards to a collector"


def test_sidecar_app_exports_to_the_sidecar(tmp_path: Path) -> None:
    (_, workload, pod, container), *_ = [c for c in _otelsignals_containers() if c[0].name == "sidecar.yaml"]
    apps = [c for c in pod["containers"] if c["name"] != "otelsignals"]
    assert apps, "the sidecar pod runs an example app container next to otelsignals"
    app_env = {e["name"]: e.get("value") for e in apps[0].get("env", [])}
    endpoint = app_env["OTEL_EXPORTER_OTLP_ENDPOINT"]
    assert re.fullmatch(r"http://(localhost|127\.0\.0\.1):4317", endpoint), endpoint
    config = _effective_config(pod, container, tmp_path)
    assert cfg.split_host_port(config.receiver.grpc.endpoint, "receiver.grpc.endpoint")[1] == 4317
    assert config.exporter.endpoint, "the sidecar forwards to a collector service"
    assert workload["kind"] == "Deployment"


def test_memory_resources_cover_the_embedding_model(tmp_path: Path) -> None:
    # Measured: 100-260 MiB RSS plus ~55 MiB once the embedding model is loaded (trace metrics), ~140
    # MiB where its table cache cannot be used: the bound below keeps the larger.
    def mib(quantity: str) -> float:
        units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
        match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi)", quantity)
        assert match, f"memory quantity {quantity!r} should use Ki/Mi/Gi"
        return float(match.group(1)) * units[match.group(2)]

    for path, _, pod, container in _otelsignals_containers():
        resources = container["resources"]
        request, limit = mib(resources["requests"]["memory"]), mib(resources["limits"]["memory"])
        needed = 260 + (140 if _effective_config(pod, container, tmp_path).evals.trace_metrics else 0)
        assert request <= limit, path.name
        assert limit >= needed * 1.25, f"{path.name}: limit {limit} MiB leaves no headroom over {needed} MiB"
        assert request >= needed * 0.9, (
            f"{path.name}: request {request} MiB is below the measured {needed} MiB"
        )
        assert (
            pod.get("terminationGracePeriodSeconds", 30)
            > _effective_config(pod, container, tmp_path).service.shutdown_timeout
        ), f"{path.name}: grace period must exceed service.shutdown_timeout"


def test_scale_out_deployment_shares_redis_behind_a_headless_service(tmp_path: Path) -> None:
    docs = _k8s_docs(DEPLOY / "kubernetes" / "deployment.yaml")
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    (_, workload, pod, container), *_ = [
        c for c in _otelsignals_containers() if c[0].name == "deployment.yaml"
    ]
    assert workload["spec"]["replicas"] >= 2
    labels = workload["spec"]["template"]["metadata"]["labels"]
    headless = [s for s in services.values() if s["spec"].get("clusterIP") == "None"]
    assert len(headless) == 1, "one headless Service for the load_balancing exporter"
    assert headless[0]["spec"]["selector"].items() <= labels.items()
    assert 4317 in {p["port"] for p in headless[0]["spec"]["ports"]}

    config = _effective_config(pod, container, tmp_path)
    assert config.exporter.endpoint, "replicas forward to the backend collector"
    match = re.fullmatch(r"redis://([^:/]+):(\d+)/\d+", config.store.url)
    assert match, f"store.url should be a redis:// URL, got {config.store.url!r}"
    redis_service = services[match.group(1).split(".")[0]]
    assert int(match.group(2)) in {p["port"] for p in redis_service["spec"]["ports"]}
    redis_workloads = [
        d
        for d in docs
        if d["kind"] == "Deployment"
        and redis_service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert redis_workloads, "the Redis Service selects a Redis Deployment defined alongside"


# --------------------------------------------------------------------------------------------------
# Dockerfile


def _dockerfile_instructions() -> list[tuple[str, str]]:
    lines: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    assert not pending, "Dockerfile ends with a line continuation"
    result = []
    for line in lines:
        keyword, _, rest = line.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def _dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, rest in _dockerfile_instructions():
        if keyword == "ENV":
            for item in shlex.split(rest):
                name, sep, value = item.partition("=")
                assert sep, f"use ENV NAME=value, got {item!r}"
                env[name] = value
    return env


def _dockerignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_dockerfile_basics() -> None:
    instructions = _dockerfile_instructions()
    by_kind: dict[str, list[str]] = {}
    for keyword, rest in instructions:
        by_kind.setdefault(keyword, []).append(rest)
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", by_kind["FROM"][0].split()[0]), by_kind["FROM"]
    assert any("pip install --no-cache-dir ." in run for run in by_kind["RUN"])

    user = by_kind["USER"][-1].split(":")[0]
    assert user not in {"root", "0"}, "the image must run as a non-root user"
    assert [k for k, _ in instructions].index("USER") > max(
        i for i, (k, _) in enumerate(instructions) if k == "RUN"
    ), "USER comes after the last RUN (the process, not the build, is unprivileged)"

    exposed = {int(p.split("/")[0]) for rest in by_kind["EXPOSE"] for p in rest.split()}
    assert exposed == {4317, 4318, ADMIN_PORT}

    healthcheck = by_kind["HEALTHCHECK"][0]
    assert "CMD" in healthcheck and "urllib" in healthcheck and "/healthz" in healthcheck
    assert f":{ADMIN_PORT}/" in healthcheck
    assert "curl" not in healthcheck and "wget" not in healthcheck, "the slim image has neither"

    assert json.loads(by_kind["ENTRYPOINT"][-1]) == ["otelsignals", "run"]
    env = _dockerfile_env()
    assert env["OTELSIGNALS_ADMIN__ENDPOINT"] == f"0.0.0.0:{ADMIN_PORT}"
    store_dir = env["OTELSIGNALS_STORE__DIRECTORY"]
    assert store_dir == "/var/lib/otelsignals"
    volumes = [
        v for rest in by_kind["VOLUME"] for v in (json.loads(rest) if rest.startswith("[") else rest.split())
    ]
    assert store_dir in volumes


def test_dockerfile_env_maps_to_config_keys() -> None:
    environ = {k: v for k, v in _dockerfile_env().items() if k.startswith(cfg.ENV_PREFIX)}
    assert environ
    for name in environ:
        _config_key_path(name)
    # The image listens on every interface, so it refuses to start without the token the run
    # command gives it (never baked into the image)...
    assert "OTELSIGNALS_ADMIN__AUTH_TOKEN" not in environ
    with pytest.raises(cfg.ConfigError) as refused:
        cfg.validate(load_config(None, environ=environ))
    assert refused.value.key == "admin.auth_token"
    assert "OTELSIGNALS_ADMIN__AUTH_TOKEN" in DOCKERFILE.read_text(), "the run example passes a token"
    # ...and starts with one.
    run_time = environ | {"OTELSIGNALS_ADMIN__AUTH_TOKEN": "from-docker-run"}
    config = cfg.validate(load_config(None, environ=run_time))
    assert config.admin.endpoint == f"0.0.0.0:{ADMIN_PORT}"


def test_dockerfile_copy_sources_exist_and_are_in_the_build_context() -> None:
    ignored = _dockerignore_patterns()
    sources: list[str] = []
    for keyword, rest in _dockerfile_instructions():
        if keyword in {"COPY", "ADD"}:
            args = [a for a in shlex.split(rest) if not a.startswith("--")]
            assert len(args) >= 2, rest
            sources.extend(args[:-1])
    assert sources
    for source in sources:
        assert not any(ch in source for ch in "*?["), f"spell COPY sources out: {source}"
        assert (ROOT / source).exists(), f"COPY source {source} does not exist in the repository"
        top = source.strip("/").split("/")[0]
        for pattern in ignored:
            bare = pattern.removeprefix("**/").rstrip("/")
            assert bare != top and not Path(top).match(bare), (
                f"COPY {source} is excluded by {pattern!r} in {DOCKERIGNORE.name}"
            )
    # Whatever `pip install .` needs to build the package must be in the image.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    needed = {"pyproject.toml", "setup.py", project["project"]["readme"]}
    needed |= {pkg.rstrip("*") for pkg in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert needed <= {s.rstrip("/") for s in sources}, f"missing from COPY: {needed - set(sources)}"


def test_dockerfile_builds_the_model_cache_the_image_reads(tmp_path: Path) -> None:
    # The image's warm-up writes the embedding table and vocabulary where its environment tells the
    # process to read them from (evals.model_cache_dir). Run as the build runs it, into a temporary
    # directory.
    cache_dir = _dockerfile_env()["OTELSIGNALS_EVALS__MODEL_CACHE_DIR"]
    runs = [rest for keyword, rest in _dockerfile_instructions() if keyword == "RUN"]
    (warm_up,) = [run for run in runs if cache_dir in run]
    command = shlex.split(warm_up.replace(cache_dir, str(tmp_path / "model-cache")))
    assert command[:2] == ["python", "-c"]
    subprocess.run([sys.executable, *command[1:]], check=True, timeout=300)
    (table,) = (tmp_path / "model-cache").glob("glove-6b-50d-sif-v1-*.npy")
    assert table.stat().st_size > 80_000_000
    (vocabulary,) = (tmp_path / "model-cache").glob("glove-6b-50d-vocab-v1-*.npz")
    assert vocabulary.stat().st_size > 4_000_000  # 400,000 hashes and rows


def test_dockerignore_keeps_local_state_out() -> None:
    ignored = {p.removeprefix("**/").rstrip("/") for p in _dockerignore_patterns()}
    assert {".venv", ".git", "otelsignals-data"} <= ignored


def _docker_daemon() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _docker_daemon(), reason="no Docker daemon on this machine")
def test_dockerfile_builds() -> None:
    subprocess.run(
        ["docker", "build", "-f", str(DOCKERFILE), "-t", "otelsignals:test-deploy", str(ROOT)],
        check=True,
        timeout=1800,
    )


# --------------------------------------------------------------------------------------------------
# OpenTelemetry Collector configs
#
# Documented configuration keys of the components the configs use. `None` = a leaf (any value);
# a dict = the keys allowed below it; ANY = a free-form map (e.g. headers). Sources, all in
# open-telemetry/opentelemetry-collector(-contrib):
# - exporter/loadbalancingexporter/README.md (v0.154.0: type `load_balancing`, routing_key values
#   service, traceID, resource, metric, streamID, attributes; `routing_attributes` for `attributes`;
#   "the endpoint property should not be set" under protocol.otlp) and config.schema.yaml
#   (resolver static/dns/k8s/aws_cloud_map and their keys);
# - exporter/otlpexporter/README.md + config/configgrpc, config/configtls, exporterhelper
#   (sending_queue, retry_on_failure, timeout);
# - receiver/otlpreceiver/README.md (protocols.grpc / protocols.http server settings);
# - processor/batchprocessor/README.md; processor/groupbytraceprocessor/config.go (discard_orphans
#   and store_on_disk are declared but "not yet implemented, and an error will be returned", so
#   they are deliberately left out);
# - exporter/debugexporter/README.md.
ANY = "any"
_TLS_CLIENT = dict.fromkeys(
    [
        "insecure",
        "insecure_skip_verify",
        "ca_file",
        "ca_pem",
        "cert_file",
        "cert_pem",
        "key_file",
        "key_pem",
        "min_version",
        "max_version",
        "server_name_override",
        "reload_interval",
        "include_system_ca_certs_pool",
        "cipher_suites",
    ]
)
_TLS_SERVER = {
    **dict.fromkeys(["ca_file", "cert_file", "key_file", "min_version", "max_version"]),
    **dict.fromkeys(["client_ca_file", "client_ca_file_reload", "reload_interval", "cipher_suites"]),
}
_RETRY = dict.fromkeys(
    ["enabled", "initial_interval", "randomization_factor", "multiplier", "max_interval", "max_elapsed_time"]
)
_QUEUE = dict.fromkeys(
    [
        "enabled",
        "num_consumers",
        "queue_size",
        "storage",
        "blocking",
        "sizer",
        "block_on_overflow",
        "wait_for_result",
        "batch",
    ]
)
_OTLP_EXPORTER = {
    "endpoint": None,
    "compression": None,
    "tls": _TLS_CLIENT,
    "headers": ANY,
    "keepalive": dict.fromkeys(["time", "timeout", "permit_without_stream"]),
    "balancer_name": None,
    "auth": {"authenticator": None},
    "read_buffer_size": None,
    "write_buffer_size": None,
    "wait_for_ready": None,
    "authority": None,
    "timeout": None,
    "sending_queue": _QUEUE,
    "retry_on_failure": _RETRY,
}
_GRPC_SERVER = {
    **dict.fromkeys(["endpoint", "transport", "max_recv_msg_size_mib", "max_concurrent_streams"]),
    **dict.fromkeys(["read_buffer_size", "write_buffer_size", "include_metadata"]),
    "tls": _TLS_SERVER,
    "keepalive": ANY,
    "auth": {"authenticator": None},
}
_HTTP_SERVER = {
    **dict.fromkeys(["endpoint", "include_metadata", "max_request_body_size"]),
    **dict.fromkeys(["traces_url_path", "metrics_url_path", "logs_url_path"]),
    "tls": _TLS_SERVER,
    "cors": dict.fromkeys(["allowed_origins", "allowed_headers", "max_age"]),
    "auth": {"authenticator": None},
    "response_headers": ANY,
}
LOADBALANCING_ROUTING_KEYS = {"service", "traceID", "resource", "metric", "streamID", "attributes"}
DOCUMENTED_KEYS: dict[tuple[str, str], dict[str, Any]] = {
    ("receivers", "otlp"): {"protocols": {"grpc": _GRPC_SERVER, "http": _HTTP_SERVER}},
    ("processors", "batch"): dict.fromkeys(
        ["timeout", "send_batch_size", "send_batch_max_size", "metadata_keys", "metadata_cardinality_limit"]
    ),
    ("processors", "groupbytrace"): dict.fromkeys(["wait_duration", "num_traces", "num_workers"]),
    ("exporters", "otlp"): _OTLP_EXPORTER,
    ("exporters", "debug"): dict.fromkeys(
        ["verbosity", "sampling_initial", "sampling_thereafter", "use_internal_logger"]
    ),
    ("exporters", "load_balancing"): {
        "routing_key": None,
        "routing_attributes": None,
        "protocol": {"otlp": {k: v for k, v in _OTLP_EXPORTER.items() if k != "endpoint"}},
        "resolver": {
            "static": {"hostnames": None},
            "dns": dict.fromkeys(["hostname", "port", "interval", "timeout"]),
            "k8s": dict.fromkeys(["service", "ports", "timeout", "return_hostnames"]),
            "aws_cloud_map": dict.fromkeys(
                ["namespace", "service_name", "port", "health_status", "interval", "timeout", "owner_account"]
            ),
        },
        "timeout": None,
        "sending_queue": _QUEUE,
        "retry_on_failure": _RETRY,
    },
}


def _check_keys(value: Any, allowed: Any, where: str) -> None:
    if allowed is None or allowed == ANY:
        return
    assert isinstance(value, dict), f"{where}: expected a mapping, got {value!r}"
    for key, sub in value.items():
        assert key in allowed, f"{where}.{key} is not a documented key (documented: {sorted(allowed)})"
        if sub is not None:
            _check_keys(sub, allowed[key], f"{where}.{key}")


def _collector(path: Path) -> dict[str, Any]:
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(config, dict), path.name
    assert set(config) <= {"receivers", "processors", "exporters", "connectors", "extensions", "service"}
    for section in ("receivers", "processors", "exporters"):
        for component_id, settings in (config.get(section) or {}).items():
            kind = component_id.split("/")[0]
            assert (section, kind) in DOCUMENTED_KEYS, (
                f"{path.name}: no documented key set for {section}.{kind}"
            )
            _check_keys(
                settings or {}, DOCUMENTED_KEYS[(section, kind)], f"{path.name}:{section}.{component_id}"
            )
    pipelines = config["service"]["pipelines"]
    used: set[tuple[str, str]] = set()
    for name, pipeline in pipelines.items():
        assert name.split("/")[0] in {"traces", "metrics", "logs"}, name
        assert pipeline.get("receivers") and pipeline.get("exporters"), f"{path.name}: pipeline {name}"
        for section in ("receivers", "processors", "exporters"):
            for component_id in pipeline.get(section, []):
                assert component_id in (config.get(section) or {}), (
                    f"{path.name}: pipeline {name} uses undefined {section[:-1]} {component_id}"
                )
                used.add((section, component_id))
    for section in ("receivers", "processors", "exporters"):
        for component_id in config.get(section) or {}:
            assert (section, component_id) in used, (
                f"{path.name}: {section}.{component_id} is defined, never used"
            )
    return config


def test_key_check_rejects_undocumented_keys() -> None:
    with pytest.raises(AssertionError, match="routing_by is not a documented key"):
        _check_keys({"routing_by": "session.id"}, DOCUMENTED_KEYS[("exporters", "load_balancing")], "lb")


def test_gateway_routes_by_trace_and_by_session_to_the_headless_service() -> None:
    config = _collector(GATEWAY)
    balancers = {k: v for k, v in config["exporters"].items() if k.split("/")[0] == "load_balancing"}
    assert balancers
    keys = {}
    for component_id, settings in balancers.items():
        routing_key = settings.get("routing_key", "traceID")
        assert routing_key in LOADBALANCING_ROUTING_KEYS, f"{component_id}: routing_key {routing_key!r}"
        assert ("routing_attributes" in settings) == (routing_key == "attributes"), component_id
        assert "endpoint" not in settings["protocol"]["otlp"], "the resolver sets the endpoint"
        resolvers = settings["resolver"]
        assert len(resolvers) == 1, f"{component_id}: configure exactly one resolver"
        keys[component_id] = (routing_key, settings.get("routing_attributes", []), resolvers)

    routing = {key for key, _, _ in keys.values()}
    assert {"traceID", "attributes"} <= routing
    session_attrs = next(attrs for key, attrs, _ in keys.values() if key == "attributes")
    assert {"session.id", "gen_ai.conversation.id"} & set(session_attrs)

    # The resolvers point at the headless Service of deploy/kubernetes/deployment.yaml.
    services = [
        d
        for d in _k8s_docs(DEPLOY / "kubernetes" / "deployment.yaml")
        if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None"
    ]
    name, namespace = services[0]["metadata"]["name"], services[0]["metadata"]["namespace"]
    for _, _, resolvers in keys.values():
        if "dns" in resolvers:
            hostname = resolvers["dns"]["hostname"]
            assert hostname.startswith(f"{name}.{namespace}."), f"dns resolver {hostname} is not {name}"
            assert int(resolvers["dns"].get("port", 4317)) == 4317
        if "k8s" in resolvers:
            assert resolvers["k8s"]["service"] == f"{name}.{namespace}", resolvers["k8s"]
            assert resolvers["k8s"].get("ports", [4317]) == [4317]

    traceid_pipelines = [
        p
        for p in config["service"]["pipelines"].values()
        if any(keys.get(e, ("",))[0] == "traceID" for e in p["exporters"])
    ]
    assert traceid_pipelines, "a pipeline routes by trace id"


# routing_key values the load_balancing exporter supports in a logs pipeline (its README's table).
LOADBALANCING_LOG_ROUTING_KEYS = {"service", "traceID", "resource", "attributes"}


def test_gateway_routes_logs_with_their_traces() -> None:
    # GenAI events written as log records are joined to their span by otelsignals, so every receiver
    # whose traces go to otelsignals sends its logs there too, through the same exporter (same hash).
    config = _collector(GATEWAY)
    pipelines = config["service"]["pipelines"]
    traces = {name: p for name, p in pipelines.items() if name.split("/")[0] == "traces"}
    logs = {name: p for name, p in pipelines.items() if name.split("/")[0] == "logs"}
    assert logs, "the gateway has no logs pipeline"
    for name, pipeline in traces.items():
        balancers = [e for e in pipeline["exporters"] if e.split("/")[0] == "load_balancing"]
        for receiver in pipeline["receivers"]:
            routed = [p for p in logs.values() if receiver in p["receivers"]]
            assert routed, f"logs from {receiver} (traces in {name}) do not reach otelsignals"
            for log_pipeline in routed:
                assert set(balancers) <= set(log_pipeline["exporters"]), (
                    f"logs from {receiver} go to {log_pipeline['exporters']}, their traces to {balancers}"
                )
    for pipeline in logs.values():
        for exporter in pipeline["exporters"]:
            settings = config["exporters"][exporter]
            if exporter.split("/")[0] == "load_balancing":
                # Without routing_key, logs would be routed by service, not with their trace.
                assert "routing_key" in settings, exporter
                assert settings["routing_key"] in LOADBALANCING_LOG_ROUTING_KEYS, exporter
    by_trace = [p for p in logs.values() if "otlp" in p["receivers"]]
    assert any(config["exporters"][e]["routing_key"] == "traceID" for p in by_trace for e in p["exporters"])


def test_backend_collector_sends_to_tempo_and_debug() -> None:
    config = _collector(BACKEND)
    pipeline = config["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    assert "batch" in pipeline["processors"]
    kinds = {e.split("/")[0] for e in pipeline["exporters"]}
    assert kinds == {"otlp", "debug"}
    otlp_id = next(e for e in pipeline["exporters"] if e.split("/")[0] == "otlp")
    assert config["exporters"][otlp_id]["endpoint"]
    assert config["exporters"]["debug"].get("verbosity", "basic") in {"basic", "normal", "detailed"}
    # The replicas' exporter.endpoint port is this collector's OTLP/gRPC port.
    grpc = config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    (_, _, _, container), *_ = [c for c in _otelsignals_containers() if c[0].name == "deployment.yaml"]
    exporter_endpoint = _container_environ(container)["OTELSIGNALS_EXPORTER__ENDPOINT"]
    assert exporter_endpoint.rsplit(":", 1)[1] == grpc.rsplit(":", 1)[1]
    # otelsignals forwards the logs it receives: the backend must accept them.
    assert "otlp" in config["service"]["pipelines"]["logs"]["receivers"]


# --------------------------------------------------------------------------------------------------
# Grafana dashboard


def _exposed_metric_names() -> set[str]:
    """Sample names Prometheus scrapes from /metrics: counters get _total (and _created), histograms
    _bucket/_sum/_count, gauges their own name. Families with labels have no samples until used, so
    the names come from the family types."""
    names = set()
    for family in Telemetry().registry.collect():
        suffixes = {
            "counter": ("_total", "_created"),
            "histogram": ("_bucket", "_sum", "_count", "_created"),
            "summary": ("", "_sum", "_count", "_created"),
            "gauge": ("",),
        }.get(family.type, ("",))
        names.update(family.name + suffix for suffix in suffixes)
    return names


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _expressions(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in _panels(dashboard["panels"]) for t in p.get("targets", []) if "expr" in t]
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        if variable.get("type") == "query":
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def test_dashboard_uses_a_templated_prometheus_datasource() -> None:
    dashboard = _dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in _panels(dashboard["panels"]):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    ids = [p["id"] for p in _panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), "panel ids are unique"


def test_dashboard_queries_only_metrics_that_exist() -> None:
    exposed = _exposed_metric_names()
    exprs = _expressions(_dashboard())
    referenced = {name for expr in exprs for name in re.findall(r"\botelsignals_[a-zA-Z0-9_]+", expr)}
    if f"{TURNS_HISTOGRAM}_bucket" in referenced and f"{TURNS_HISTOGRAM}_bucket" not in exposed:
        pytest.fail(
            f"the dashboard's P95 turn count needs the histogram {TURNS_HISTOGRAM!r} "
            "(otelsignals_conversation_turns_bucket), which otelsignals/telemetry.py does not register yet"
        )
    unknown = sorted(referenced - exposed)
    assert not unknown, f"dashboard queries metrics /metrics does not expose: {unknown}"
    for expr in exprs:
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr


def test_dashboard_covers_the_issue_panels() -> None:
    exprs = _expressions(_dashboard())
    joined = "\n".join(exprs)
    assert re.search(r"sum by \(quality\) \(rate\(otelsignals_analysed_turns_total", joined)
    assert 'flagged="true"' in joined
    assert f"histogram_quantile(0.95, sum by (le) (rate({TURNS_HISTOGRAM}_bucket" in joined, (
        "P95 turn count from the turn-count histogram"
    )
    for metric in (
        "otelsignals_receiver_accepted_spans_total",
        "otelsignals_exporter_sent_spans_total",
        "otelsignals_dropped_spans_total",
        "otelsignals_exporter_queue_bytes",
        "otelsignals_exporter_retries_total",
        "otelsignals_exporter_failed_requests_total",
        "otelsignals_sessions_active",
        "otelsignals_sessions_evicted_total",
    ):
        assert metric in joined, f"pipeline health panel for {metric}"
    # The signal-type regex matchers must match real leaf types of their category, and only those.
    matchers = re.findall(r'type=~"([^"]+)"', joined)
    for category in ("interaction.disengagement", "execution.failure", "environment.exhaustion"):
        regexes = [m for m in matchers if m.startswith(category.split(".")[0])]
        hits = {
            leaf
            for rx in regexes
            for leaf in LEAF_TYPES
            if re.fullmatch(rx.encode().decode("unicode_escape"), leaf)
        }
        expected = {leaf for leaf in LEAF_TYPES if leaf.startswith(category + ".")}
        assert expected and expected <= hits, f"no panel matches every {category} type"
    for rx in matchers:
        pattern = rx.encode().decode("unicode_escape")
        matched = {leaf for leaf in LEAF_TYPES if re.fullmatch(pattern, leaf)}
        assert matched, f"type=~{rx!r} matches no leaf type"
        assert len({leaf.rsplit(".", 1)[0] for leaf in matched}) == 1, f"type=~{rx!r} spans categories"
