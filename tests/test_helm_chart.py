"""The Helm chart deploy/helm/otelsignals, rendered by a real ``helm template``.

Every manifest of every value combination is validated against the Kubernetes API schemas of two
Kubernetes versions (kubernetes-validate ships them, strict: unknown fields fail), the ServiceMonitor
against a schema of the fields the chart uses (it is a CRD, not in those schemas), and then read for
what it means: the process's effective configuration (image ENV + ConfigMap + container env, loaded by
otelsignals' own loader) listens where the probes and Services point, the admin token and the store
URL come from Secrets, replicas, autoscaling and disruption budgets are what the values ask for.

helm comes from scripts/test-deps (Debian has none); these tests fail rather than skip without it.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from otelsignals import config as cfg
from otelsignals.config_loading import load_config
from tests.test_deploy import _container_environ, _dockerfile_env

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "otelsignals"
KUBE_VERSIONS = ("1.29", "1.31")
RELEASE = "signals"
NAMESPACE = "observability"
FULLNAME = f"{RELEASE}-otelsignals"
ADMIN_PORT = 13317
EXPORTER = "otel-backend.observability.svc.cluster.local:4317"
REDIS_URL = "redis://otelsignals-redis.observability.svc:6379/0"
POSTGRES_URL = "postgresql://otelsignals:s3cret@postgres.observability.svc:5432/otelsignals"

BASE: dict[str, Any] = {"exporter": {"endpoint": EXPORTER}}
CASES: dict[str, dict[str, Any]] = {
    "gateway-defaults": {},
    "gateway-redis": {"sharedStore": {"type": "redis", "url": REDIS_URL}},
    "gateway-postgresql": {"sharedStore": {"type": "postgresql", "url": POSTGRES_URL}},
    "gateway-existing-secrets": {
        "admin": {"existingSecret": "ops-admin", "existingSecretKey": "bearer"},
        "sharedStore": {"type": "postgresql", "existingSecret": "pg-dsn", "existingSecretKey": "dsn"},
    },
    "gateway-hpa-servicemonitor": {
        "sharedStore": {"type": "redis", "url": REDIS_URL},
        "autoscaling": {
            "enabled": True,
            "minReplicas": 2,
            "maxReplicas": 7,
            "targetMemoryUtilizationPercentage": 80,
        },
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "podDisruptionBudget": {"minAvailable": 2, "maxUnavailable": None},
    },
    "gateway-single-no-pdb": {
        "replicaCount": 1,
        "podDisruptionBudget": {"enabled": False},
        "serviceAccount": {"create": False},
        "exporter": {"endpoint": "http://otel-backend:4318", "protocol": "http/protobuf"},
    },
    "gateway-extras": {
        "extraEnv": [
            {
                "name": "OTELSIGNALS_EVALS__JUDGE_API_KEY",
                "valueFrom": {"secretKeyRef": {"name": "judge", "key": "key"}},
            }
        ],
        "extraVolumes": [{"name": "judge-ca", "secret": {"secretName": "judge-ca"}}],
        "extraVolumeMounts": [{"name": "judge-ca", "mountPath": "/etc/judge-ca", "readOnly": True}],
        "podAnnotations": {"example.com/team": "agents"},
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "observability", "effect": "NoSchedule"}
        ],
        "config": {"evals": {"judge_url": "http://judge.internal/v1"}},
    },
    "sidecar": {"mode": "sidecar", "serviceMonitor": {"enabled": True}, "autoscaling": {"enabled": True}},
}


# --------------------------------------------------------------------------------------------------
# rendering


def _helm() -> str:
    helm = shutil.which("helm")
    if helm is None:
        pytest.fail("helm is not installed: run scripts/test-deps (as root) to install it")
    return helm


def _merged(*layers: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = _merged(merged[key], value)
            else:
                merged[key] = copy.deepcopy(value)
    return merged


def _run_helm(chart: Path, values: dict[str, Any], kube_version: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="otelsignals-helm-") as tmp:
        values_file = Path(tmp) / "values.yaml"
        values_file.write_text(yaml.safe_dump(values), encoding="utf-8")
        command = [_helm(), "template", RELEASE, str(chart), "--namespace", NAMESPACE]
        command += ["--kube-version", f"{kube_version}.0", "--values", str(values_file)]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@functools.cache
def _render_text(chart: Path, values_json: str, kube_version: str) -> str:
    result = _run_helm(chart, json.loads(values_json), kube_version)
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return result.stdout


def render(values: dict[str, Any], kube_version: str = KUBE_VERSIONS[-1]) -> list[dict[str, Any]]:
    """The manifests (fresh copies) of the chart with BASE and ``values``."""
    text = _render_text(CHART, json.dumps(_merged(BASE, values), sort_keys=True), kube_version)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render_error(values: dict[str, Any]) -> str:
    result = _run_helm(CHART, _merged(BASE, values), KUBE_VERSIONS[-1])
    assert result.returncode != 0, "expected helm template to refuse these values"
    return result.stderr


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def otelsignals_container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    (container,) = [c for c in pod_spec["containers"] if c["name"] == "otelsignals"]
    return container


def env_entry(container: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((e for e in container.get("env", []) if e["name"] == name), None)


def secret_ref(container: dict[str, Any], name: str) -> tuple[str, str]:
    entry = env_entry(container, name)
    assert entry is not None, f"{name} is not set"
    assert "value" not in entry, f"{name} must come from a Secret, not a plain value"
    ref = entry["valueFrom"]["secretKeyRef"]
    assert not ref.get("optional", False), f"{name}: the pod must not start without it"
    return ref["name"], ref["key"]


def secret_value(docs: list[dict[str, Any]], name: str, key: str) -> str:
    secret = one(docs, "Secret", name)
    if key in secret.get("stringData", {}):
        return str(secret["stringData"][key])
    return base64.b64decode(secret["data"][key]).decode()


def port_number(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container["ports"] if p["name"] == port]
    return int(number)


# What the Secrets that CASES name but do not create would hold.
EXISTING_SECRETS = {
    ("ops-admin", "bearer"): "an-operator-token",
    ("pg-dsn", "dsn"): POSTGRES_URL,
    ("judge", "key"): "a-judge-key",
}


def effective_config(docs: list[dict[str, Any]], pod_spec: dict[str, Any], tmp_path: Path) -> cfg.Config:
    """What `otelsignals run` in the chart's container runs with: the image's ENV, then the --config
    file from the ConfigMap volume it mounts, then the container's env, Secrets read from the
    rendered ones (or EXISTING_SECRETS)."""
    container = otelsignals_container(pod_spec)
    config_path = Path(container["args"][container["args"].index("--config") + 1])
    (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == config_path.parent]
    (volume,) = [v for v in pod_spec["volumes"] if v["name"] == mount["name"]]
    configmap = one(docs, "ConfigMap", volume["configMap"]["name"])
    local = tmp_path / config_path.name
    local.write_text(configmap["data"][config_path.name], encoding="utf-8")
    environ = {**_dockerfile_env(), **_container_environ(container)}
    for entry in container["env"]:
        ref = entry.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None:
            rendered = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == ref["name"]]
            known = EXISTING_SECRETS.get((ref["name"], ref["key"]))
            assert rendered or known, f"{entry['name']}: Secret {ref['name']} is neither rendered nor known"
            environ[entry["name"]] = secret_value(docs, ref["name"], ref["key"]) if rendered else str(known)
    return cfg.validate(load_config(local, environ=environ))


def _port_of(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


# --------------------------------------------------------------------------------------------------
# the sidecar, as an application chart that depends on this one uses it

APP_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: chat-agent
spec:
  replicas: 2
  selector:
    matchLabels: {app: chat-agent}
  template:
    metadata:
      labels: {app: chat-agent}
    spec:
      securityContext: {runAsNonRoot: true, runAsUser: 20000}
      containers:
        - name: app
          image: example/chat-agent:1.0.0
          ports:
            - {name: admin, containerPort: 8080}
          env:
            - {name: OTEL_SERVICE_NAME, value: chat-agent}
            {{- include "otelsignals.sidecar.appEnv" . | nindent 12 }}
        {{- include "otelsignals.sidecar.container" . | nindent 8 }}
      volumes:
        - name: app-cache
          emptyDir: {}
        {{- include "otelsignals.sidecar.volumes" . | nindent 8 }}
"""


@pytest.fixture(scope="module")
def app_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An application chart with otelsignals in its charts/ directory, as `helm dependency build`
    leaves it."""
    root = tmp_path_factory.mktemp("chat-agent")
    (root / "templates").mkdir()
    (root / "Chart.yaml").write_text(
        "apiVersion: v2\nname: chat-agent\nversion: 1.0.0\n"
        "dependencies:\n  - name: otelsignals\n    version: 0.1.0\n",
        encoding="utf-8",
    )
    (root / "templates" / "deployment.yaml").write_text(APP_DEPLOYMENT, encoding="utf-8")
    shutil.copytree(CHART, root / "charts" / "otelsignals")
    return root


def render_app(
    chart: Path, values: dict[str, Any], kube_version: str = KUBE_VERSIONS[-1]
) -> list[dict[str, Any]]:
    """The application chart with otelsignals (BASE + ``values``, mode sidecar) as its dependency."""
    chart_values = {"otelsignals": _merged(BASE, {"mode": "sidecar"}, values)}
    text = _render_text(chart, json.dumps(chart_values, sort_keys=True), kube_version)
    return [doc for doc in yaml.safe_load_all(text) if doc]


# --------------------------------------------------------------------------------------------------
# schemas

# The ServiceMonitor fields this chart writes, as the Prometheus Operator's CRD defines them
# (monitoring.coreos.com/v1): anything else, or a wrong type, fails.
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 253},
                "namespace": {"type": "string"},
                "labels": _STRING_MAP,
                "annotations": _STRING_MAP,
            },
        },
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": _STRING_MAP},
                },
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                        },
                    },
                },
            },
        },
    },
}


def validate_manifest(doc: dict[str, Any], kube_version: str) -> None:
    if doc["kind"] == "ServiceMonitor":
        jsonschema.validate(doc, SERVICE_MONITOR_SCHEMA)
    else:
        kubernetes_validate.validate(doc, kube_version, strict=True)


def _all_renders() -> Iterator[tuple[str, str]]:
    for case in CASES:
        for version in KUBE_VERSIONS:
            yield case, version


# --------------------------------------------------------------------------------------------------
# schema validation


@pytest.mark.parametrize("mode", ["gateway", "sidecar"])
def test_chart_lints(mode: str) -> None:
    result = subprocess.run(
        [_helm(), "lint", str(CHART), "--strict", "--set", f"mode={mode},exporter.endpoint={EXPORTER}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("case", "kube_version"), list(_all_renders()))
def test_every_manifest_validates_against_the_kubernetes_schemas(case: str, kube_version: str) -> None:
    docs = render(CASES[case], kube_version)
    assert docs
    for doc in docs:
        try:
            validate_manifest(doc, kube_version)
        except (jsonschema.ValidationError, kubernetes_validate.utils.SchemaNotFoundError) as exc:
            pytest.fail(
                f"{case} on Kubernetes {kube_version}: {doc['kind']} {doc['metadata']['name']}: {exc}"
            )


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_sidecar_in_an_application_chart_validates(kube_version: str, app_chart: Path) -> None:
    for values in ({}, {"sharedStore": {"type": "redis", "url": REDIS_URL}}):
        for doc in render_app(app_chart, values, kube_version):
            validate_manifest(doc, kube_version)


def test_schema_validation_catches_mistakes() -> None:
    # The checks above are only worth something if a wrong manifest fails them.
    deployment = one(render({}), "Deployment")
    misspelled = copy.deepcopy(deployment)
    misspelled["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {"port": 1}
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "three"
    for broken in (misspelled, wrong_type):
        for version in KUBE_VERSIONS:
            with pytest.raises(jsonschema.ValidationError):
                validate_manifest(broken, version)
    monitor = one(render(CASES["gateway-hpa-servicemonitor"]), "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["interval"] = "half a minute"
    with pytest.raises(jsonschema.ValidationError):
        validate_manifest(monitor, KUBE_VERSIONS[-1])
    monitor["spec"]["endpoints"][0] = {"targetPortt": "admin"}
    with pytest.raises(jsonschema.ValidationError):
        validate_manifest(monitor, KUBE_VERSIONS[-1])


# --------------------------------------------------------------------------------------------------
# gateway mode


def test_gateway_renders_the_expected_objects() -> None:
    assert kinds(render({})) == [
        "ConfigMap",
        "Deployment",
        "PodDisruptionBudget",
        "Secret",
        "Service",
        "Service",
        "ServiceAccount",
    ]
    assert kinds(render(CASES["gateway-single-no-pdb"])) == [
        "ConfigMap",
        "Deployment",
        "Secret",
        "Service",
        "Service",
    ]


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("gateway")])
def test_probes_services_and_process_agree_on_ports(case: str, tmp_path: Path) -> None:
    docs = render(CASES[case])
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = otelsignals_container(pod)
    config = effective_config(docs, pod, tmp_path)

    admin = _port_of(config.admin.endpoint)
    assert admin == ADMIN_PORT
    assert config.admin.endpoint.startswith("0.0.0.0:"), "kubelet probes reach the pod IP"
    for probe, path in (
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ):
        http = container[probe]["httpGet"]
        assert http["path"] == path, probe
        assert port_number(container, http["port"]) == admin, f"{probe} is not on the admin port"

    receivers = {"otlp-grpc": config.receiver.grpc.endpoint, "otlp-http": config.receiver.http.endpoint}
    assert {name: _port_of(endpoint) for name, endpoint in receivers.items()} == {
        "otlp-grpc": 4317,
        "otlp-http": 4318,
    }
    service = one(docs, "Service", FULLNAME)
    headless = one(docs, "Service", f"{FULLNAME}-headless")
    assert headless["spec"]["clusterIP"] == "None"
    expected = {**{name: _port_of(e) for name, e in receivers.items()}, "admin": admin}
    for svc, names in (
        (service, {"otlp-grpc", "otlp-http", "admin"}),
        (headless, {"otlp-grpc", "otlp-http"}),
    ):
        ports = {p["name"]: p for p in svc["spec"]["ports"]}
        assert set(ports) == names, svc["metadata"]["name"]
        for name, port in ports.items():
            assert port["port"] == expected[name]
            assert port_number(container, port["targetPort"]) == expected[name]
        assert svc["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_configuration_comes_from_values(tmp_path: Path) -> None:
    values = {"config": {"sessions": {"ttl": "10m"}, "signals": {"snippets": False}}}
    docs = render(values)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    config = effective_config(docs, pod, tmp_path)
    assert config.sessions.ttl == 600
    assert config.signals.snippets is False
    assert config.exporter.endpoint == EXPORTER
    assert config.exporter.protocol == "grpc"
    assert config.exporter.queue.directory == "/var/lib/otelsignals/queue"
    # A changed configuration rolls the pods.
    default_pod = one(render({}), "Deployment")["spec"]["template"]
    assert (
        default_pod["metadata"]["annotations"]["checksum/config"]
        != one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    )

    http = render(CASES["gateway-single-no-pdb"])
    config = effective_config(http, one(http, "Deployment")["spec"]["template"]["spec"], tmp_path)
    assert (config.exporter.endpoint, config.exporter.protocol) == (
        "http://otel-backend:4318",
        "http/protobuf",
    )

    # Extra environment (here from a Secret of one's own) and config keys reach the process.
    extras = render(CASES["gateway-extras"])
    pod = one(extras, "Deployment")["spec"]["template"]["spec"]
    config = effective_config(extras, pod, tmp_path)
    assert (config.evals.judge_url, config.evals.judge_api_key) == ("http://judge.internal/v1", "a-judge-key")
    mounts = otelsignals_container(pod)["volumeMounts"]
    assert {"name": "judge-ca", "mountPath": "/etc/judge-ca", "readOnly": True} in mounts

    # An exporter endpoint written under config counts as well; none at all is refused.
    nested = render({"exporter": {"endpoint": ""}, "config": {"exporter": {"endpoint": "elsewhere:4317"}}})
    config = effective_config(nested, one(nested, "Deployment")["spec"]["template"]["spec"], tmp_path)
    assert config.exporter.endpoint == "elsewhere:4317"
    assert "exporter.endpoint is required" in render_error({"exporter": {"endpoint": ""}})
    # So does its protocol: it went with the top-level exporter.protocol (grpc by default), which
    # made an http/protobuf endpoint written under config be spoken to in gRPC.
    http_nested = render(
        {
            "exporter": {"endpoint": ""},
            "config": {"exporter": {"endpoint": "http://b:4318", "protocol": "http/protobuf"}},
        }
    )
    config = effective_config(
        http_nested, one(http_nested, "Deployment")["spec"]["template"]["spec"], tmp_path
    )
    assert (config.exporter.endpoint, config.exporter.protocol) == ("http://b:4318", "http/protobuf")


def test_admin_token_comes_from_a_secret(tmp_path: Path) -> None:
    docs = render({})
    container = otelsignals_container(one(docs, "Deployment")["spec"]["template"]["spec"])
    name, key = secret_ref(container, "OTELSIGNALS_ADMIN__AUTH_TOKEN")
    assert (name, key) == (f"{FULLNAME}-admin", "token")
    generated = secret_value(docs, name, key)
    assert len(generated) >= 32 and generated.isalnum()

    chosen = render({"admin": {"token": "correct-horse-battery-staple"}})
    assert secret_value(chosen, f"{FULLNAME}-admin", "token") == "correct-horse-battery-staple"

    existing = render(CASES["gateway-existing-secrets"])
    container = otelsignals_container(one(existing, "Deployment")["spec"]["template"]["spec"])
    assert secret_ref(container, "OTELSIGNALS_ADMIN__AUTH_TOKEN") == ("ops-admin", "bearer")
    assert not [d for d in existing if d["kind"] == "Secret"], "existing Secrets are used, not created"

    # Neither the token nor a store URL is ever written into the ConfigMap.
    for case in CASES.values():
        for doc in render(case):
            if doc["kind"] == "ConfigMap":
                text = json.dumps(doc["data"])
                assert "correct-horse" not in text and "s3cret" not in text and "redis://" not in text


@pytest.mark.parametrize(
    ("case", "url", "index_shared"),
    [("gateway-redis", REDIS_URL, False), ("gateway-postgresql", POSTGRES_URL, True)],
)
def test_shared_store_url_comes_from_a_secret(
    case: str, url: str, index_shared: bool, tmp_path: Path
) -> None:
    docs = render(CASES[case])
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    container = otelsignals_container(pod)
    name, key = secret_ref(container, "OTELSIGNALS_STORE__URL")
    assert secret_value(docs, name, key) == url
    if index_shared:
        assert secret_ref(container, "OTELSIGNALS_INDEX__URL") == (name, key)
    else:
        assert env_entry(container, "OTELSIGNALS_INDEX__URL") is None, "the index cannot live in Redis"
    config = effective_config(docs, pod, tmp_path)
    assert config.store.url == url
    assert config.index.url == (url if index_shared else "")
    assert config.store.directory == "/var/lib/otelsignals"


def test_shared_store_from_an_existing_secret_and_its_absence() -> None:
    container = otelsignals_container(
        one(render(CASES["gateway-existing-secrets"]), "Deployment")["spec"]["template"]["spec"]
    )
    assert secret_ref(container, "OTELSIGNALS_STORE__URL") == ("pg-dsn", "dsn")
    assert secret_ref(container, "OTELSIGNALS_INDEX__URL") == ("pg-dsn", "dsn")
    unshared = render(
        {"sharedStore": {"type": "postgresql", "existingSecret": "pg-dsn", "conversationIndex": False}}
    )
    container = otelsignals_container(one(unshared, "Deployment")["spec"]["template"]["spec"])
    assert env_entry(container, "OTELSIGNALS_INDEX__URL") is None
    container = otelsignals_container(one(render({}), "Deployment")["spec"]["template"]["spec"])
    assert env_entry(container, "OTELSIGNALS_STORE__URL") is None


def test_wrong_values_are_refused() -> None:
    assert "must be a redis URL" in render_error({"sharedStore": {"type": "redis", "url": POSTGRES_URL}})
    assert "must be a postgresql URL" in render_error(
        {"sharedStore": {"type": "postgresql", "url": REDIS_URL}}
    )
    assert "sharedStore.url" in render_error({"sharedStore": {"type": "redis"}})
    # values.schema.json: unknown modes, store types and misspelled keys stop the install (the
    # message's wording differs between Helm 3 and 4, hence the patterns).
    schema_error = "values don't meet the specifications of the schema"
    for values, pattern in (
        ({"sharedStore": {"type": "mongodb", "url": "mongodb://x"}}, r"sharedStore[./]type"),
        ({"mode": "daemonset"}, r"\bmode\b.*(gateway|one of)"),
        ({"replicas": 3}, r"(?i)propert(y|ies) '?replicas'? (is )?not allowed"),
        ({"exporter": {"endpiont": EXPORTER}}, r"(?i)propert(y|ies) '?endpiont'? (is )?not allowed"),
    ):
        error = render_error(values)
        assert schema_error in error and re.search(pattern, error), error


def test_replicas_autoscaling_and_disruption_budget() -> None:
    docs = render({"replicaCount": 5})
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 5
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert not [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()

    scaled = render(CASES["gateway-hpa-servicemonitor"])
    deployment = one(scaled, "Deployment")
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
    hpa = one(scaled, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 7)
    targets = {
        m["resource"]["name"]: m["resource"]["target"]["averageUtilization"] for m in hpa["spec"]["metrics"]
    }
    assert targets == {"cpu": 70, "memory": 80}
    pdb = one(scaled, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 2 and "maxUnavailable" not in pdb["spec"]
    # 0 is a value (no voluntary disruption at all), not "unset".
    strict = one(render({"podDisruptionBudget": {"maxUnavailable": 0}}), "PodDisruptionBudget")
    assert strict["spec"]["maxUnavailable"] == 0 and "minAvailable" not in strict["spec"]
    # Utilisation targets need requests to measure against.
    requests = otelsignals_container(deployment["spec"]["template"]["spec"])["resources"]["requests"]
    assert {"cpu", "memory"} <= requests.keys()

    assert "autoscaling needs" in render_error(
        {"autoscaling": {"enabled": True, "targetCPUUtilizationPercentage": None}}
    )


def test_service_monitor_only_when_enabled_and_scrapes_the_admin_port() -> None:
    assert not [d for d in render({}) if d["kind"] == "ServiceMonitor"]
    docs = render(CASES["gateway-hpa-servicemonitor"])
    monitor = one(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    # Exactly one Service matches the selector with that port name, and it reaches the admin port.
    selector = monitor["spec"]["selector"]["matchLabels"]
    scraped = [
        svc
        for svc in docs
        if svc["kind"] == "Service"
        and selector.items() <= svc["metadata"]["labels"].items()
        and endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]}
    ]
    assert len(scraped) == 1, "each pod must be scraped once"
    (port,) = [p for p in scraped[0]["spec"]["ports"] if p["name"] == endpoint["port"]]
    assert port["port"] == ADMIN_PORT


def test_security_context_and_writable_data_directory(tmp_path: Path) -> None:
    docs = render({})
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    container = otelsignals_container(pod)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["automountServiceAccountToken"] is False
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert context["runAsNonRoot"] is True, "also without the pod's context (sidecar)"

    # Every place the process writes is an emptyDir mount: the rest of the file system is read-only.
    config = effective_config(docs, pod, tmp_path)
    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = {
        Path(m["mountPath"])
        for m in container["volumeMounts"]
        if "emptyDir" in volumes[m["name"]] and not m.get("readOnly")
    }
    for where in (
        config.store.directory,
        config.exporter.queue.directory,
        Path(config.exporter.file_path).parent,
        "/tmp",
    ):
        assert any(Path(where).is_relative_to(mount) for mount in writable), f"{where} is not writable"
    grace = one(docs, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > config.service.shutdown_timeout, "the backlog is flushed before SIGKILL"


# --------------------------------------------------------------------------------------------------
# sidecar mode


def test_sidecar_mode_renders_only_the_pieces_for_the_application_pod() -> None:
    docs = render(CASES["sidecar"])
    assert kinds(docs) == ["ConfigMap", "Secret"], "no workload, Service, HPA or ServiceMonitor of its own"


def test_sidecar_container_in_an_application_pod(app_chart: Path, tmp_path: Path) -> None:
    docs = render_app(app_chart, {"sharedStore": {"type": "redis", "url": REDIS_URL}})
    deployment = one(docs, "Deployment", "chat-agent")
    pod = deployment["spec"]["template"]["spec"]
    container = otelsignals_container(pod)
    config = effective_config(docs, pod, tmp_path)

    # The application exports to the sidecar, which only listens on loopback for it.
    (app,) = [c for c in pod["containers"] if c["name"] == "app"]
    app_env = {e["name"]: e.get("value") for e in app["env"]}
    assert app_env["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://{config.receiver.grpc.endpoint}"
    for receiver in (config.receiver.grpc, config.receiver.http):
        assert receiver.endpoint.startswith("127.0.0.1:"), receiver

    # Probes on the admin port, which does not clash with the application's port names.
    assert _port_of(config.admin.endpoint) == ADMIN_PORT
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert port_number(container, container[probe]["httpGet"]["port"]) == ADMIN_PORT
    names = [p["name"] for c in pod["containers"] for p in c.get("ports", [])]
    assert len(names) == len(set(names)), names
    volume_names = [v["name"] for v in pod["volumes"]]
    assert len(volume_names) == len(set(volume_names)), volume_names

    # The Secrets and the ConfigMap it refers to are rendered by the same release.
    name, key = secret_ref(container, "OTELSIGNALS_ADMIN__AUTH_TOKEN")
    assert secret_value(docs, name, key)
    name, key = secret_ref(container, "OTELSIGNALS_STORE__URL")
    assert secret_value(docs, name, key) == REDIS_URL
    assert config.exporter.endpoint == EXPORTER
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
