"""The chaos suite's CI profile, run as users run it: ``python -m chaos --quick``, per backend.

Each backend must pass every invariant with at least ten workers killed in the middle of a
tool call (between dispatch and the commit of the raw result). The profile's kill-worker
scenario goes on until that many landed, however slow the machine (bounded by count, with a
time bound only as a safety net), so the threshold does not depend on machine speed. The
PostgreSQL profile starts its own throwaway cluster, because one scenario restarts the
server. A failing run's report, logs, ledgers and databases are kept under
``chaos-report/ci-failures/`` at the repository root (or ``$HARNESSX_CHAOS_KEEP``), and the
failure message says where.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
KILLS_MID_TOOL = 10  # what --quick asks of kill-worker, per backend


def keep(folder: Path, backend: str) -> Path:
    """Copy a failing run's report and work folder where it outlives the test's temp dir."""
    base = Path(os.environ.get("HARNESSX_CHAOS_KEEP") or ROOT / "chaos-report" / "ci-failures")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    kept = base / f"{backend}-{stamp}-{os.getpid()}"
    shutil.copytree(folder, kept, dirs_exist_ok=True)
    return kept


def problems_of(report: dict[str, Any], scenarios: set[str], *, retention: bool = False) -> list[str]:
    totals = report["totals"]
    found = []
    if retention and not totals.get("pruned_sessions"):
        found.append("retention pruned no session, so the profile did not check any pruned one")
    if not report["ok"] or totals["violations"]:
        found.append(f"the chaos run failed ({totals['violations']} violations)")
    if "kill-worker" in scenarios and totals["kills_mid_tool"] < KILLS_MID_TOOL:
        found.append(f"only {totals['kills_mid_tool']} kills mid-tool (want >= {KILLS_MID_TOOL})")
    if not totals["completed"] == totals["runs"] > 0:
        found.append(f"{totals['completed']} of {totals['runs']} runs completed")
    ran = {s["scenario"] for s in report["scenarios"]}
    if ran != scenarios:
        found.append(f"scenarios run: {sorted(ran)}, expected {sorted(scenarios)}")
    idle = [s["scenario"] for s in report["scenarios"] if s["faults_total"] == 0]
    if idle:
        found.append(f"no fault injected in {idle}")
    return found


def quick(backend: str, folder: Path, scenarios: set[str], *, retention: str | None = None) -> None:
    report_dir, work_dir = folder / "report", folder / "work"
    command = [
        sys.executable, "-m", "chaos", "--quick", "--backend", backend,
        "--report-dir", str(report_dir), "--work-dir", str(work_dir),
    ]  # fmt: skip
    if retention is not None:
        command += ["--retention", retention, "--scenario", ",".join(sorted(scenarios))]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        output = f"exit {done.returncode}\n{done.stdout[-6000:]}\n{done.stderr[-4000:]}"
    except subprocess.TimeoutExpired as exc:
        done, output = (
            None,
            f"timed out after {exc.timeout:.0f} s\n{exc.stdout!r:.6000}\n{exc.stderr!r:.4000}",
        )
    report_file = report_dir / "chaos-report.json"
    if done is None or not report_file.exists():
        problems = ["the chaos run wrote no report"]
    else:
        problems = problems_of(
            json.loads(report_file.read_text()), scenarios, retention=retention is not None
        )
        if done.returncode != 0:
            problems.insert(0, f"python -m chaos exited {done.returncode}")
    if problems:
        kept = keep(folder, backend)
        pytest.fail(
            f"{'; '.join(problems)}\nthe chaos report, logs, ledgers and databases are kept in {kept} "
            f"(report: {kept / 'report' / 'chaos-report.md'})\n{output}",
            pytrace=False,
        )


def test_a_failing_profile_is_kept_and_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "chaos-report.md").write_text("the table\n")
    monkeypatch.setenv("HARNESSX_CHAOS_KEEP", str(tmp_path / "kept"))
    kept = keep(tmp_path, "sqlite")
    assert (kept / "report" / "chaos-report.md").read_text() == "the table\n"
    report = {
        "ok": True,
        "totals": {"violations": 0, "kills_mid_tool": 7, "completed": 150, "runs": 150},
        "scenarios": [{"scenario": "kill-worker", "faults_total": 3}],
    }
    assert problems_of(report, {"kill-worker"}) == ["only 7 kills mid-tool (want >= 10)"]


@pytest.mark.timeout(660)
def test_quick_profile_on_sqlite(tmp_path: Path) -> None:
    quick("sqlite", tmp_path, {"kill-worker", "pause-worker", "kill-supervisor", "rolling-restart"})


@pytest.mark.timeout(660)
def test_quick_profile_on_postgres(tmp_path: Path, pg_bin_dir: Path) -> None:
    scenarios = {
        "kill-worker",
        "pause-worker",
        "cut-connections",
        "kill-supervisor",
        "restart-postgres",
        "rolling-restart",
    }
    quick("postgres", tmp_path, scenarios)


@pytest.mark.timeout(660)
def test_quick_profile_with_retention_on_sqlite(tmp_path: Path) -> None:
    """The supervisors prune finished sessions idle for 3 s while workers are killed mid-tool:
    still no violation and no run lost, the pruned sessions checked from their archive."""
    quick("sqlite", tmp_path, {"kill-worker"}, retention="3s")


@pytest.mark.timeout(660)
def test_quick_profile_with_retention_on_postgres(tmp_path: Path, pg_bin_dir: Path) -> None:
    """The same through server restarts, where a prune batch can be cut off after it archived
    its sessions (they stay in the database, and the database is what is checked)."""
    quick("postgres", tmp_path, {"kill-worker", "restart-postgres"}, retention="3s")
