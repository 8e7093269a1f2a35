"""The chaos suite's CI profile, run as users run it: ``python -m chaos --quick``, per backend.

Each backend must pass every invariant with at least ten workers killed in the middle of a
tool call (between dispatch and the commit of the raw result). The PostgreSQL profile
starts its own throwaway cluster, because one scenario restarts the server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]


def quick(backend: str, folder: Path) -> dict[str, object]:
    report_dir = folder / "report"
    command = [
        sys.executable,
        "-m",
        "chaos",
        "--quick",
        "--backend",
        backend,
        "--report-dir",
        str(report_dir),
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    shown = f"exit {done.returncode}\n{done.stdout[-6000:]}\n{done.stderr[-4000:]}"
    report_file = report_dir / "chaos-report.json"
    assert report_file.exists(), shown
    report: dict[str, object] = json.loads(report_file.read_text())
    assert done.returncode == 0 and report["ok"], shown
    return report


def check_report(report: dict[str, object], scenarios: set[str]) -> None:
    totals = report["totals"]
    assert isinstance(totals, dict)
    assert totals["violations"] == 0
    assert totals["kills_mid_tool"] >= 10, totals
    assert totals["completed"] == totals["runs"] > 0, totals
    ran = report["scenarios"]
    assert isinstance(ran, list)
    assert {s["scenario"] for s in ran} == scenarios
    assert all(s["faults_total"] > 0 for s in ran), ran


@pytest.mark.timeout(420)
def test_quick_profile_on_sqlite(tmp_path: Path) -> None:
    report = quick("sqlite", tmp_path)
    check_report(report, {"kill-worker", "pause-worker", "kill-supervisor", "rolling-restart"})


@pytest.mark.timeout(420)
def test_quick_profile_on_postgres(tmp_path: Path, pg_bin_dir: Path) -> None:
    report = quick("postgres", tmp_path)
    check_report(
        report,
        {
            "kill-worker",
            "pause-worker",
            "cut-connections",
            "kill-supervisor",
            "restart-postgres",
            "rolling-restart",
        },
    )
