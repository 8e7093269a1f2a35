"""The Grafana dashboard against live data: the real Prometheus server (Debian's
``prometheus`` package) on loopback scrapes a real ``harness-supervisor`` and two real
``harness-worker`` processes on SQLite every second; pool runs are submitted, one worker is
SIGKILLed with a tool in flight so that the supervisor recovers its run, and then every query
of every panel is evaluated through Prometheus's HTTP API and must return data.

The same Prometheus loads deploy/prometheus/alerts.yml: every rule must evaluate without
error on the real series, and the alert for the killed worker's target goes pending.
The worker and supervisor logs of that activity are checked for the run context fields.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from deploy_support import BIN, DEPLOY, exported_metrics, free_port, metric_names_in, need_tool

from harnessx import AgentRef, AgentRuntime, RunStatus, SQLiteBackend

pytestmark = pytest.mark.process

ROOT = (
    Path(__file__).resolve().parent.parent.parent
)  # the checkout, where the workers import chaos.agents from
DASHBOARD = DEPLOY / "grafana" / "harnessx.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
# What Grafana would substitute, with 1 s scrapes.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "5m",
    "${job}": "harnessx-worker|harnessx-supervisor",
    "$job": "harnessx-worker|harnessx-supervisor",
}
WORKER_JOB, SUPERVISOR_JOB = "harnessx-worker", "harnessx-supervisor"
POLICIES = ["safe", "idempotent", "manual"] * 3
TOOL_SECONDS = 1.5
LEASE_SECONDS = 3.0


# ---------------------------------------------------------------------------- dashboard


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))  # panels inside collapsed rows
    return found


def queries() -> list[tuple[str, str]]:
    """(panel title / refId, PromQL) of every target, Grafana variables substituted."""
    found = []
    for panel in panels(dashboard()):
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
                expr = expr.replace(variable, value)
            found.append((f"{panel['title']} / {target['refId']}", expr))
    return found


def test_dashboard_is_well_formed() -> None:
    board = dashboard()
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    assert variables["job"]["includeAll"] is True
    for panel in panels(board):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert '{job=~"$job"}' in target["expr"], f"{panel['title']}: not filtered by $job"
    for title, expr in queries():
        assert "$" not in expr, f"{title}: unsubstituted variable in {expr}"


def test_dashboard_covers_the_operations_metrics() -> None:
    used = set().union(*(metric_names_in(expr) for _, expr in queries()))
    exported = exported_metrics()
    assert used - set(exported) == set(), "not exported by harnessx"
    for name in (
        "harnessx_lease_renewals_total", "harnessx_lease_renewal_seconds_bucket",
        "harnessx_leases_lost_total", "harnessx_fenced_writes_rejected_total",
        "harnessx_orphan_recovery_seconds_bucket",
        "harnessx_orphans_unrecovered", "harnessx_orphan_oldest_unrecovered_seconds", "harnessx_queue_depth",
        "harnessx_queue_oldest_age_seconds", "harnessx_runs_finished_total", "harnessx_tool_calls_total",
        "harnessx_workers_live", "harnessx_supervisor_leader",
    ):  # fmt: skip
        assert name in used, name


# ------------------------------------------------------------------------------ live


@dataclass
class Live:
    prometheus: str
    folder: Path
    killed_target: str
    run_ids: set[str]
    statuses: list[RunStatus]
    logs: dict[str, Path] = field(default_factory=dict)

    def query(self, expr: str) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=10)
        body = response.json()
        assert response.status_code == 200 and body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


def wait_until(what: str, check: Any, within: float, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + within
    while True:
        try:
            value = check()
            if value:
                return value
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        time.sleep(interval)


def ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def submit_and_kill(
    db: Path, ledger_path: Path, victim: subprocess.Popen[bytes]
) -> tuple[set[str], list[RunStatus]]:
    """Submit pool runs, SIGKILL ``victim`` while one of its tools runs, wait for every run."""
    async with SQLiteBackend(db, auto_migrate=False) as store:
        submitted = []
        for index, policy in enumerate(POLICIES):
            runtime = AgentRuntime(AgentRef(policy, "v1"), backend=store, execution="pool")
            await runtime.start()
            submitted.append((runtime, await runtime.submit(f"job {index}", request_id=f"job-{index}")))
        deadline = time.monotonic() + 30
        while not any(line["pid"] == victim.pid for line in ledger(ledger_path)):
            assert time.monotonic() < deadline, "the victim worker never started a tool"
            await asyncio.sleep(0.02)
        victim.send_signal(signal.SIGKILL)
        results = await asyncio.wait_for(asyncio.gather(*(handle.result() for _, handle in submitted)), 45)
        for runtime, _ in submitted:
            await runtime.stop()
    return {handle.run_id for _, handle in submitted}, [result.status for result in results]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    prometheus_bin = need_tool("prometheus")
    folder = tmp_path_factory.mktemp("live")
    db = folder / "runtime.sqlite3"
    ledger_path = folder / "ledger"
    subprocess.run([str(BIN / "harnessx"), "migrate", "--sqlite", str(db)], check=True, capture_output=True)
    ports = {name: free_port() for name in ("w1", "w2", "supervisor", "prometheus")}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HX_LEDGER": str(ledger_path),
        "HX_SLOW_TOOL": str(TOOL_SECONDS),
        "HARNESSX_LOG_FORMAT": "json",
    }
    processes: dict[str, subprocess.Popen[bytes]] = {}
    logs: dict[str, Path] = {}

    def spawn(name: str, command: list[str]) -> subprocess.Popen[bytes]:
        logs[name] = folder / f"{name}.log"
        with open(logs[name], "wb") as handle:
            processes[name] = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env)
        return processes[name]

    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {
                "job_name": WORKER_JOB,
                "static_configs": [{"targets": [f"127.0.0.1:{ports['w1']}", f"127.0.0.1:{ports['w2']}"]}],
            },
            {
                "job_name": SUPERVISOR_JOB,
                "static_configs": [{"targets": [f"127.0.0.1:{ports['supervisor']}"]}],
            },
        ],
    }
    (folder / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    base = f"http://127.0.0.1:{ports['prometheus']}"
    try:
        spawn(
            "prometheus",
            [
                prometheus_bin,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{ports['prometheus']}",
                "--log.level=warn",
            ],
        )
        spawn(
            "supervisor",
            [
                str(BIN / "harness-supervisor"), "--sqlite", str(db),
                "--metrics-addr", f"127.0.0.1:{ports['supervisor']}", "--scan-interval", "0.1",
            ],
        )  # fmt: skip
        for name in ("w1", "w2"):
            spawn(
                name,
                [
                    str(BIN / "harness-worker"), "--sqlite", str(db), "--agents", "chaos.agents:registry",
                    "--concurrency", "4", "--lease-seconds", str(LEASE_SECONDS),
                    "--metrics-addr", f"127.0.0.1:{ports[name]}",
                ],
            )  # fmt: skip
        for name in ("w1", "w2", "supervisor"):
            wait_until(
                f"{name} ready",
                lambda name=name: (
                    httpx.get(f"http://127.0.0.1:{ports[name]}/readyz", timeout=2).status_code == 200
                ),
                within=30,
            )
        wait_until("prometheus ready", lambda: httpx.get(f"{base}/-/ready", timeout=2).status_code == 200, 30)
        wait_until(
            "all three targets scraped",
            lambda: (
                len(
                    [
                        t
                        for t in httpx.get(f"{base}/api/v1/targets").json()["data"]["activeTargets"]
                        if t["health"] == "up"
                    ]
                )
                == 3
            ),
            within=30,
        )
        run_ids, statuses = asyncio.run(submit_and_kill(db, ledger_path, processes["w1"]))
        live = Live(base, folder, f"127.0.0.1:{ports['w1']}", run_ids, statuses, logs)
        # Scrapes after the last run finished have reached Prometheus.
        wait_until(
            "the recovery in Prometheus",
            lambda: (
                live.query("sum(harnessx_orphans_recovered_total) > 0")
                and live.query(f"sum(harnessx_runs_finished_total) >= {len(run_ids)}")
            ),
            within=20,
        )
        yield live
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)


def test_runs_finished_despite_the_killed_worker(live: Live) -> None:
    # A safe or idempotent run is repeated and completes; a manual tool cut off by the kill
    # waits for a person (awaiting_input).
    assert len(live.statuses) == len(POLICIES)
    assert set(live.statuses) <= {RunStatus.COMPLETED, RunStatus.AWAITING_INPUT}
    assert live.statuses.count(RunStatus.COMPLETED) >= len(POLICIES) - 4


@pytest.mark.parametrize(("title", "expr"), queries(), ids=[title for title, _ in queries()])
def test_panel_query_returns_data(live: Live, title: str, expr: str) -> None:
    def answered() -> list[dict[str, Any]]:
        result = live.query(expr)
        # A number, not an empty vector and not only NaN (a quantile over no observations).
        return [r for r in result if not math.isnan(float(r["value"][1]))]

    samples = wait_until(f"data for {title!r}: {expr}", answered, within=10, interval=0.5)
    assert samples


def test_alert_rules_evaluate_on_real_series(live: Live) -> None:
    def evaluated() -> list[dict[str, Any]]:
        response = httpx.get(f"{live.prometheus}/api/v1/rules", timeout=10).json()
        rules = [rule for group in response["data"]["groups"] for rule in group["rules"]]
        if not rules or any(rule["health"] == "unknown" for rule in rules):
            return []
        return rules

    rules = wait_until("every rule evaluated", evaluated, within=15)
    assert len(rules) == ALERTS.read_text(encoding="utf-8").count("- alert: ")
    broken = {rule["name"]: rule.get("lastError") for rule in rules if rule["health"] != "ok"}
    assert broken == {}

    def states() -> dict[str, list[dict[str, Any]]]:
        return {rule["name"]: rule["alerts"] for rule in evaluated()}

    # The killed worker's target is down: its alert is pending (it fires after 2 minutes).
    down = wait_until(
        "HarnessxMetricsDown pending",
        lambda: states()["HarnessxMetricsDown"] or None,
        within=15,
        interval=0.5,
    )
    assert [(a["labels"]["instance"], a["state"]) for a in down] == [(live.killed_target, "pending")]
    current = states()
    # A leader is there, the orphan was recovered at once, one death is not flapping.
    for quiet in ("HarnessxNoSupervisorLeader", "HarnessxOrphansNotRecovered", "HarnessxWorkersFlapping"):
        assert current[quiet] == [], quiet


def json_lines(path: Path) -> list[dict[str, Any]]:
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        if raw.startswith("{"):
            lines.append(json.loads(raw))
    return lines


def test_log_lines_about_runs_carry_their_context(live: Live) -> None:
    worker_lines = json_lines(live.logs["w2"])
    assert worker_lines, "the surviving worker logged nothing"
    assert all(line["worker_id"] for line in worker_lines)
    about_runs = [line for line in worker_lines if any(run in line["message"] for run in live.run_ids)]
    assert about_runs, "no worker line names a run"
    for line in about_runs:
        missing = {"worker_id", "session_id", "run_id", "generation"} - set(line)
        assert not missing, f"{line} lacks {missing}"
        assert line["run_id"] in line["message"]
    finished = [line for line in about_runs if line["message"].endswith((" completed", " awaiting_input"))]
    assert {line["run_id"] for line in finished} <= live.run_ids
    supervisor_lines = json_lines(live.logs["supervisor"])
    (requeued, *_) = [line for line in supervisor_lines if line["message"].startswith("requeued run ")]
    assert {"supervisor_id", "session_id", "run_id", "generation"} <= set(requeued)
    assert requeued["run_id"] in live.run_ids
