"""deploy/kubernetes/temporal, the Temporal variant: every manifest validates strictly against
the Kubernetes OpenAPI schemas (and the ServiceMonitor against the Prometheus Operator's
fields), kustomize renders what the files hold, and what the schemas cannot see lines up:
the worker runs ``harness-worker`` in its Temporal mode with real options only, the Redis
URL comes from a Secret, probes, the drain and the grace period, locked-down pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deploy_support import DEPLOY, load_yaml, load_yaml_all, need_module, need_tool, run_tool
from test_kubernetes_manifests import IMAGE, KUBERNETES_VERSIONS, NAMESPACE, validate

from harness_workers.cli import main as worker_main

K8S = DEPLOY / "kubernetes" / "temporal"
WORKER = "harnessx-temporal-worker"


def manifest_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def documents() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, doc) for path in manifest_files() for doc in load_yaml_all(path)]


def resource(kind: str, name: str) -> dict[str, Any]:
    (found,) = [doc for _, doc in documents() if doc["kind"] == kind and doc["metadata"]["name"] == name]
    return found


def kustomization() -> dict[str, Any]:
    data = load_yaml(K8S / "kustomization.yaml")
    assert isinstance(data, dict)
    return data


def worker_container() -> dict[str, Any]:
    (container,) = resource("Deployment", WORKER)["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: p.name)
def test_manifest_validates(path: Path, version: str) -> None:
    docs = load_yaml_all(path)
    assert docs, f"{path.name} is empty"
    for doc in docs:
        validate(doc, version)


def test_kustomization_lists_every_manifest_but_the_secret() -> None:
    listed = kustomization()["resources"]
    assert set(listed) == {p.name for p in manifest_files()} - {"secret.example.yaml"}
    assert kustomization()["namespace"] == NAMESPACE
    assert [f"{i['name']}:{i['newTag']}" for i in kustomization()["images"]] == [IMAGE]


def test_kustomize_renders_what_the_files_hold() -> None:
    result = run_tool(need_tool("kubectl"), "kustomize", str(K8S))
    assert result.returncode == 0, result.stderr
    yaml = need_module("yaml")
    rendered = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    listed = set(kustomization()["resources"])
    expected = {(d["kind"], d["metadata"]["name"]) for name, d in documents() if name in listed}
    assert {(d["kind"], d["metadata"]["name"]) for d in rendered} == expected
    for doc in rendered:
        for version in KUBERNETES_VERSIONS:
            validate(doc, version)


def test_the_worker_serves_temporal_with_real_options() -> None:
    container = worker_container()
    assert container["command"] == ["harness-worker"]
    assert container["image"] == IMAGE
    known = {p.envvar for p in worker_main.params if isinstance(getattr(p, "envvar", None), str)}
    config = resource("ConfigMap", "harnessx-temporal-config")["data"]
    assert set(config) <= known, set(config) - known
    assert config["HARNESSX_TEMPORAL"].count(":") == 1, "the frontend as host:port"
    assert "HARNESSX_DSN" not in config and all(e["name"] != "HARNESSX_DSN" for e in container["env"])
    (source,) = container["envFrom"]
    assert source["configMapRef"]["name"] == "harnessx-temporal-config"
    # The Redis URL may carry a password: from the Secret, never a value in the manifest.
    (events,) = [e for e in container["env"] if e["name"] == "HARNESSX_EVENTS_URL"]
    ref = events["valueFrom"]["secretKeyRef"]
    secret = resource("Secret", "harnessx-events")
    assert ref["name"] == "harnessx-events" and ref["key"] in secret["stringData"]
    assert "HARNESSX_EVENTS_URL" in known


def test_probes_drain_and_grace_period() -> None:
    deployment = resource("Deployment", WORKER)
    container = worker_container()
    (metrics,) = [e["value"] for e in container["env"] if e["name"] == "HARNESSX_METRICS_ADDR"]
    host, _, port = metrics.rpartition(":")
    assert host == "0.0.0.0"
    (named,) = container["ports"]
    assert named["name"] == "metrics" and named["containerPort"] == int(port)
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    drain = float(resource("ConfigMap", "harnessx-temporal-config")["data"]["HARNESSX_DRAIN_TIMEOUT"])
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace >= float(pre_stop[1]) + drain + 10
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_pods_are_locked_down() -> None:
    spec = resource("Deployment", WORKER)["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 10001
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == resource("ServiceAccount", "harnessx")["metadata"]["name"]
    security = worker_container()["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}


def test_service_budget_and_monitor_select_the_workers() -> None:
    labels = resource("Deployment", WORKER)["spec"]["template"]["metadata"]["labels"]

    def selects(selector: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in selector.items())

    assert selects(resource("Service", WORKER)["spec"]["selector"])
    assert selects(resource("PodDisruptionBudget", WORKER)["spec"]["selector"]["matchLabels"])
    monitor = resource("ServiceMonitor", "harnessx-temporal")
    assert selects(monitor["spec"]["selector"]["matchLabels"])
    service_labels = resource("Service", WORKER)["metadata"]["labels"]
    assert all(service_labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
