"""The ``harnessx`` command as a user runs it: a real process, real files, real kills."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process


def harnessx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harnessx", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_demo_on_sqlite_kills_resumes_and_runs_the_tool_once(tmp_path: Path) -> None:
    done = harnessx("demo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "Process killed (exit -9)" in done.stdout
    assert "Tool invocations: 1" in done.stdout
    report = tmp_path / ".agent_sessions/demo/reports/q3-emea.md"
    assert report.exists() and "4.2M EUR" in report.read_text()
    assert "Headline: revenue 4.2M EUR" in done.stdout

    db = ".agent_sessions/demo/runtime.sqlite3"
    listing = harnessx("status", "--sqlite", db, cwd=tmp_path)
    assert listing.returncode == 0 and "completed" in listing.stdout and "sales-demo@v1" in listing.stdout
    session_id = json.loads((tmp_path / ".agent_sessions/demo/session.json").read_text())["session_id"]
    detail = harnessx("status", session_id, "--sqlite", db, cwd=tmp_path)
    result = json.loads(detail.stdout.split("\n", 1)[1])
    assert result["status"] == "completed"

    events = harnessx("events", result["run_id"], "--sqlite", db, cwd=tmp_path)
    lines = [json.loads(line) for line in events.stdout.splitlines()]
    assert [line["cursor"] for line in lines] == [str(i) for i in range(1, len(lines) + 1)]
    assert lines[-1]["type"] == "run_result"
    tail = harnessx("events", result["run_id"], "--after", lines[-3]["cursor"], "--sqlite", db, cwd=tmp_path)
    assert [json.loads(line)["cursor"] for line in tail.stdout.splitlines()] == [
        lines[-2]["cursor"],
        lines[-1]["cursor"],
    ]

    again = harnessx("resume", session_id, "--sqlite", db, cwd=tmp_path)
    assert again.returncode == 0 and "nothing to resume" in again.stderr


def test_cli_errors_are_clear(tmp_path: Path) -> None:
    missing = harnessx("status", "nope", "--sqlite", "x.sqlite3", cwd=tmp_path)
    assert missing.returncode != 0 and "harnessx migrate" in missing.stderr
    assert harnessx("migrate", "--sqlite", "x.sqlite3", cwd=tmp_path).returncode == 0
    unknown = harnessx("status", "nope", "--sqlite", "x.sqlite3", cwd=tmp_path)
    assert unknown.returncode != 0 and "no session 'nope'" in unknown.stderr
    no_dsn = harnessx("demo", "--backend", "postgres", cwd=tmp_path)
    assert no_dsn.returncode != 0 and "--dsn" in no_dsn.stderr


def test_pool_demo_kills_a_worker_and_every_report_is_written_once(tmp_path: Path) -> None:
    done = harnessx("demo", "--pool", "--runs", "6", "--tool-seconds", "0.5", cwd=tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "killed with SIGKILL in the middle of a tool call" in done.stdout
    assert "each report was written once: yes" in done.stdout
    assert len(list((tmp_path / ".agent_sessions/demo/reports").glob("*.md"))) == 6


def test_demo_on_postgres(pg_database: str, tmp_path: Path) -> None:
    done = harnessx("demo", "--backend", "postgres", "--dsn", pg_database, cwd=tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "on PostgreSQL" in done.stdout and "Tool invocations: 1" in done.stdout
