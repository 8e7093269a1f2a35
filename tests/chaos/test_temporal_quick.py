"""The chaos suite's Temporal profile, run as users run it: ``python -m chaos.temporal --quick``.

A real Temporal server and Redis, three Temporal workers (``harness-worker --temporal``, and
one of the module's own that keeps four tool completions from the server); ten workers
SIGKILLed in the middle of a tool call and the Temporal server killed and restarted once,
while 30 runs go on. Every invariant must hold: no lost run, no manual call repeated, a safe
call at most once more per fault that hit it (a lost completion is none), a manual call
killed inside its tool uncertain, a call whose completion was lost settled by its recorded
outcome, dense events.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harnessx.testing import find_redis_server, find_temporal_cli

pytestmark = [pytest.mark.process, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]


def test_quick_temporal_profile(tmp_path: Path) -> None:
    missing = [
        name
        for name, found in (("temporal", find_temporal_cli()), ("redis-server", find_redis_server()))
        if not found
    ]
    if missing:
        if (
            os.environ.get("CI", "").lower() in ("true", "1")
            or os.environ.get("HARNESSX_REQUIRE_TEMPORAL") == "1"
        ):
            pytest.fail(f"the Temporal chaos profile needs {missing}", pytrace=False)
        pytest.skip(f"the Temporal chaos profile needs {missing}")
    report_path = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "chaos.temporal",
            "--quick",
            "--dir",
            str(tmp_path / "work"),
            "--report",
            str(report_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert report_path.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert done.returncode == 0 and report["ok"], json.dumps(report["violations"], indent=1)
    # At least the profile's 30 runs: more were submitted if the kills had not all landed.
    assert report["completed"] == report["runs"] >= 30
    assert report["kills_mid_tool"] >= 10 and report["server_restarts"] >= 1
    assert report["lost_completions"] >= 1
