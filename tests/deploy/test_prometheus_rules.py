"""deploy/prometheus: promtool accepts the scrape configuration and the rules, the rule unit
tests pass, every alert has a firing and a silent case, each alert goes quiet when its
expression can no longer fire (so the firing cases really test it), and every name used is a
metric harnessx exports."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from deploy_support import (
    DEPLOY,
    DOCS,
    exported_metrics,
    github_anchor,
    load_yaml,
    metric_names_in,
    need_module,
    need_tool,
    run_tool,
)

PROMETHEUS = DEPLOY / "prometheus"
SEVERITIES = {"critical", "warning", "info"}
RUNBOOK_PREFIX = "https://github.com/example/harnessx/blob/main/docs/operations.md#"
PROMISED_ALERTS = {
    "HarnessxNoSupervisorLeader",
    "HarnessxOrphansNotRecovered",
    "HarnessxLeaseRenewalErrors",
    "HarnessxLeasesLost",
    "HarnessxFencedWritesRejected",
    "HarnessxQueueAgeGrowing",
    "HarnessxWorkersFlapping",
    "HarnessxRunsStuckAwaitingInput",
}


def alert_rules() -> list[dict[str, Any]]:
    rules = [rule for group in load_yaml(PROMETHEUS / "alerts.yml")["groups"] for rule in group["rules"]]
    assert rules
    return rules


def promtool(*args: str, cwd: Path = PROMETHEUS) -> tuple[int, str]:
    result = run_tool(need_tool("promtool"), *args, cwd=cwd)
    return result.returncode, result.stdout + result.stderr


def test_promtool_checks_the_scrape_config() -> None:
    code, output = promtool("check", "config", "prometheus.yml")
    assert code == 0, output
    assert "SUCCESS" in output


def test_promtool_checks_the_rules() -> None:
    code, output = promtool("check", "rules", "alerts.yml")
    assert code == 0, output
    assert f"SUCCESS: {len(alert_rules())} rules found" in output


def test_promtool_rule_unit_tests_pass() -> None:
    code, output = promtool("test", "rules", "alerts_test.yml")
    assert code == 0, output
    assert "SUCCESS" in output


def test_promtool_catches_a_failing_rule_test(tmp_path: Path) -> None:
    shutil.copy(PROMETHEUS / "alerts.yml", tmp_path / "alerts.yml")
    text = (PROMETHEUS / "alerts_test.yml").read_text(encoding="utf-8")
    (tmp_path / "alerts_test.yml").write_text(text.replace("severity: critical", "severity: page"))
    code, output = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert code != 0 and "FAILED" in output


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    tests = load_yaml(PROMETHEUS / "alerts_test.yml")["tests"]
    firing: set[str] = set()
    silent: set[str] = set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else silent).add(check["alertname"])
    names = {rule["alert"] for rule in alert_rules()}
    assert names >= PROMISED_ALERTS
    assert names - firing == set(), "alerts no test fires"
    assert names - silent == set(), "alerts no test shows silent"


@pytest.mark.parametrize(
    "alert", sorted(PROMISED_ALERTS | {"HarnessxRunsStuckRunning", "HarnessxMetricsDown"})
)
def test_unit_tests_fail_when_the_alert_cannot_fire(alert: str, tmp_path: Path) -> None:
    yaml = need_module("yaml")
    rules = load_yaml(PROMETHEUS / "alerts.yml")
    (rule,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == alert]
    rule["expr"] = "vector(1) > 2"
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(rules))
    shutil.copy(PROMETHEUS / "alerts_test.yml", tmp_path / "alerts_test.yml")
    code, output = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert code != 0, f"no unit test notices that {alert} never fires"
    assert f"alertname: {alert}" in output


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_has_severity_and_runbook(rule: dict[str, Any]) -> None:
    assert rule["labels"]["severity"] in SEVERITIES
    annotations = rule["annotations"]
    assert annotations["summary"] and annotations["description"]
    runbook = annotations["runbook_url"]
    assert runbook.startswith(RUNBOOK_PREFIX)
    anchor = runbook.removeprefix(RUNBOOK_PREFIX)
    assert anchor == rule["alert"].lower()
    headings = re.findall(r"^#{1,6} (.+)$", (DOCS / "operations.md").read_text(encoding="utf-8"), re.M)
    assert anchor in {github_anchor(h) for h in headings}, f"docs/operations.md has no section #{anchor}"


def test_alerts_use_exported_metric_names() -> None:
    exported = exported_metrics()
    for rule in alert_rules():
        used = metric_names_in(rule["expr"])
        assert used - set(exported) == set(), rule["alert"]
        # rate/increase only make sense on counters (and histogram buckets).
        for function, name in re.findall(r"\b(rate|increase)\((harnessx_[a-z0-9_]+)", rule["expr"]):
            assert exported[name] in ("counter", "histogram"), (rule["alert"], function, name)


def test_scrape_config_matches_the_systemd_units() -> None:
    config = load_yaml(PROMETHEUS / "prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"harnessx-worker", "harnessx-supervisor"}
    assert config["rule_files"] == ["alerts.yml"]
    units = DEPLOY / "systemd"
    supervisor_unit = (units / "harness-supervisor.service").read_text(encoding="utf-8")
    (supervisor_port,) = re.findall(r"--metrics-addr 127\.0\.0\.1:(\d+)", supervisor_unit)
    (supervisor_targets,) = [c["targets"] for c in jobs["harnessx-supervisor"]["static_configs"]]
    assert supervisor_targets == [f"127.0.0.1:{supervisor_port}"]
    # harness-worker@<port>.service: the documented instances are the scraped ports.
    (worker_targets,) = [c["targets"] for c in jobs["harnessx-worker"]["static_configs"]]
    docs = (DOCS / "operations.md").read_text(encoding="utf-8")
    (first, last) = re.findall(r"harness-worker@\{(\d+)\.\.(\d+)\}\.service", docs)[0]
    documented = range(int(first), int(last) + 1)
    for target in worker_targets:
        host, _, port = target.rpartition(":")
        assert host == "127.0.0.1"
        assert int(port) in documented, port
        assert int(port) != int(supervisor_port)
    assert len(worker_targets) == len(documented)
