"""``harness-supervisor --retention`` as an operator starts it: flags and environment variables,
their usage errors, and a real supervisor process pruning old finished sessions on both backends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from durable_support import BackendTarget, make_agent
from lifecycle_support import age, rows_of

from harnessx import AgentRuntime

pytestmark = pytest.mark.process

BIN = Path(sys.executable).parent


def store_env(target: BackendTarget, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESSX_")}
    env["HARNESSX_LOG_FORMAT"] = "json"
    if target.kind == "sqlite":
        env["HARNESSX_SQLITE"] = target.location
    else:
        env["HARNESSX_DSN"] = target.location
    return {**env, **extra}


async def sessions_to_prune(target: BackendTarget) -> tuple[list[str], list[str]]:
    """Three finished sessions idle for 40 days (to go), and two to keep: one awaiting approval
    as long, one finished just now."""
    async with target.open() as store:
        old = []
        for _ in range(3):
            async with AgentRuntime(make_agent(policy="safe"), backend=store) as runtime:
                old.append((await runtime.run("Write the report.")).session_id)
        async with AgentRuntime(make_agent(policy="safe", permission="ask"), backend=store) as runtime:
            waiting = (await runtime.run("Write the report.")).session_id
        for session_id in [*old, waiting]:
            await age(store, session_id, 40)
        async with AgentRuntime(make_agent(policy="safe"), backend=store) as runtime:
            recent = (await runtime.run("Write the report.")).session_id
    return old, [waiting, recent]


def supervise_until(args: list[str], env: dict[str, str], log: Path, wanted: str) -> list[dict[str, object]]:
    """Run a supervisor until it logs ``wanted`` (SIGTERM then), returning its log records."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(BIN / "harness-supervisor"), "--metrics-addr", "off", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 60
        while wanted not in log.read_text(errors="replace"):
            assert process.poll() is None, f"the supervisor exited {process.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"no {wanted!r} in the log:\n{log.read_text()}"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


async def check_pruned(target: BackendTarget, old: list[str], kept: list[str]) -> None:
    async with target.open() as store:
        for session_id in old:
            assert set((await rows_of(store, session_id)).values()) == {0}, session_id
        for session_id in kept:
            assert (await rows_of(store, session_id))["sessions"] == 1, session_id


async def test_the_supervisor_prunes_with_the_retention_flags(target: BackendTarget, tmp_path: Path) -> None:
    old, kept = await sessions_to_prune(target)
    archive = tmp_path / "archive"
    records = supervise_until(
        [
            "--retention",
            "30d",
            "--retention-interval",
            "1",
            "--retention-batch",
            "1",
            "--archive",
            str(archive),
        ],
        store_env(target),
        tmp_path / "supervisor.log",
        "pruned 3 finished session(s)",
    )
    (passed,) = [r for r in records if str(r.get("message", "")).startswith("pruned ")]
    # --retention-batch 1: one candidate per transaction (4 old ones, then the empty last
    # batch); --archive: written there first.
    assert "idle for more than 30d (4 looked at, 5 batch(es)" in str(passed["message"])
    (written,) = archive.glob("*.jsonl")
    assert sorted(json.loads(line)["session"]["id"] for line in written.read_text().splitlines()) == sorted(
        old
    )
    await check_pruned(target, old, kept)


async def test_the_supervisor_reads_retention_from_the_environment(tmp_path: Path) -> None:
    target = BackendTarget("sqlite", str(tmp_path / "store.sqlite3"))
    old, kept = await sessions_to_prune(target)
    env = store_env(
        target,
        HARNESSX_RETENTION="30d",
        HARNESSX_RETENTION_INTERVAL="1",
        HARNESSX_RETENTION_BATCH="2",
        HARNESSX_ARCHIVE_DIR=str(tmp_path / "archive"),
    )
    records = supervise_until([], env, tmp_path / "supervisor.log", "pruned 3 finished session(s)")
    assert any("(4 looked at, 3 batch(es)" in str(r.get("message", "")) for r in records), records
    assert len(list((tmp_path / "archive").glob("*.jsonl"))) == 1
    await check_pruned(target, old, kept)


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--retention", "0s"], {}, "is no time at all"),
        (["--retention", "30x"], {}, "is not a duration"),
        ([], {"HARNESSX_RETENTION": "soon"}, "is not a duration"),
        (["--retention-interval", "0.5", "--retention", "30d"], {}, "--retention-interval"),
        (["--retention-batch", "0", "--retention", "30d"], {}, "--retention-batch"),
        (["--archive", "somewhere"], {}, "give --retention too"),
    ],
)
def test_a_wrong_retention_setting_is_a_usage_error(
    tmp_path: Path, args: list[str], env: dict[str, str], says: str
) -> None:
    target = BackendTarget("sqlite", str(tmp_path / "store.sqlite3"))
    subprocess.run(
        [sys.executable, "-m", "harnessx", "migrate"], env=store_env(target), check=True, timeout=60
    )
    done = subprocess.run(
        [str(BIN / "harness-supervisor"), "--metrics-addr", "off", *args],
        env=store_env(target, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert says in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "somewhere").exists()
