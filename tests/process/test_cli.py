"""The ``harnessx`` command as a user runs it: a real process, real files, real kills."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from durable_support import BackendTarget

from harnessx import Agent, AgentRef, AgentRegistry, AgentRuntime, ScriptedProvider

pytestmark = pytest.mark.process

BIN = Path(sys.executable).parent


def harnessx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harnessx", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def run_env(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / command[0]), *command[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """Until ``text`` shows in the log; fails at once if the process exits first."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, f"exited {process.returncode}: {log.read_text()}"
        assert time.monotonic() < deadline, f"no {text!r} within {timeout} s: {log.read_text()}"
        time.sleep(0.05)


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
    assert {line["session_id"] for line in lines} == {session_id}
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
    assert missing.returncode != 0 and "harnessx migrate --sqlite x.sqlite3" in missing.stderr
    created = harnessx("migrate", "--sqlite", "x.sqlite3", cwd=tmp_path)
    assert created.returncode == 0 and "created the harnessx schema" in created.stdout
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
    # A DSN on the command line implies --backend postgres.
    done = harnessx("demo", "--dsn", pg_database, cwd=tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "on PostgreSQL" in done.stdout and "Tool invocations: 1" in done.stdout
    contradictory = harnessx("demo", "--backend", "sqlite", "--dsn", pg_database, cwd=tmp_path)
    assert contradictory.returncode == 2 and "--backend postgres" in contradictory.stderr


def command_lines() -> dict[int, str]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:  # gone already
                continue
    return found


def test_demo_children_get_the_dsn_from_the_environment(pg_database: str, tmp_path: Path) -> None:
    seen: dict[int, str] = {}
    env = {**os.environ, "HARNESSX_DSN": pg_database}
    log = tmp_path / "demo.log"
    with open(log, "wb") as out:
        demo = subprocess.Popen(
            [sys.executable, "-m", "harnessx", "demo", "--backend", "postgres"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    while demo.poll() is None:  # every process's command line while the walkthrough runs
        seen |= {pid: line for pid, line in command_lines().items() if "_demo-" in line}
        time.sleep(0.005)
    assert demo.returncode == 0, log.read_text()
    assert {"_demo-drive", "_demo-resume"} <= {w for line in seen.values() for w in line.split()}, seen
    database = pg_database.rsplit("/", 1)[1]
    assert not [line for line in seen.values() if database in line], seen


# ------------------------------------------------------------ nothing deleted


def test_demo_refuses_the_current_directory_and_folders_it_did_not_create(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine too")
    for args in (["--dir", "."], ["--dir", tmp_path.parent.as_posix()], ["--dir", "mine"]):
        for mode in ([], ["--pool"]):
            refused = harnessx("demo", *args, *mode, cwd=tmp_path)
            assert refused.returncode == 2, refused.stdout + refused.stderr
            assert "Traceback" not in refused.stderr and "pass a new" in refused.stderr
    assert (tmp_path / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt", "mine"]


def test_demo_run_again_clears_only_its_own_files(tmp_path: Path) -> None:
    first = harnessx("demo", "--dir", "demo", cwd=tmp_path)
    assert first.returncode == 0, first.stderr + first.stdout
    folder = tmp_path / "demo"
    (folder / "user.txt").write_text("mine")
    (folder / "reports" / "summary.md").write_text("mine")
    again = harnessx("demo", "--dir", "demo", cwd=tmp_path)
    assert again.returncode == 0, again.stderr + again.stdout
    # A fresh walkthrough (its old database and counter were cleared: one invocation, one session)...
    assert "Tool invocations: 1" in again.stdout
    listing = harnessx("status", "--sqlite", "demo/runtime.sqlite3", cwd=tmp_path)
    assert len(listing.stdout.splitlines()) == 2, listing.stdout  # the header and one session
    # ... and the user's files are still there.
    assert (folder / "user.txt").read_text() == "mine"
    assert (folder / "reports" / "summary.md").read_text() == "mine"
    # An empty folder the user made is adopted.
    (tmp_path / "empty").mkdir()
    assert harnessx("demo", "--dir", "empty", cwd=tmp_path).returncode == 0


# ------------------------------------------------ flags beat the environment


UNREACHABLE_DSN = "postgresql://nobody:hunter2@127.0.0.1:1/none"


def test_an_explicit_sqlite_flag_wins_over_harnessx_dsn(tmp_path: Path) -> None:
    env = {**os.environ, "HARNESSX_DSN": UNREACHABLE_DSN}
    done = run_env(["harnessx", "migrate", "--sqlite", "pool.sqlite3"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "pool.sqlite3").exists()
    both = run_env(
        ["harnessx", "status", "--sqlite", "pool.sqlite3", "--dsn", UNREACHABLE_DSN], env, tmp_path
    )
    assert both.returncode == 2 and "not both" in both.stderr
    for command, ready in (
        (["harness-worker", "--agents", "harnessx._demo:pool_registry"], "registered"),
        (["harness-supervisor"], "now the leader"),
    ):
        log = tmp_path / f"{command[0]}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [str(BIN / command[0]), *command[1:], "--sqlite", "pool.sqlite3", "--metrics-addr", "off"],
                cwd=tmp_path,
                env={**env, "HARNESSX_LOG_FORMAT": "text"},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_for_line(log, ready, process)
        finally:
            process.terminate()
            process.wait(timeout=60)
        assert "hunter2" not in log.read_text()


def test_harnessx_dsn_may_name_a_sqlite_file_for_every_command(tmp_path: Path) -> None:
    env = {**os.environ, "HARNESSX_DSN": "sqlite:///pool.sqlite3", "HARNESSX_LOG_FORMAT": "text"}
    done = run_env(["harnessx", "migrate"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "pool.sqlite3").exists()
    assert run_env(["harnessx", "status"], env, tmp_path).stdout == "no sessions\n"
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [
                str(BIN / "harness-worker"),
                "--agents",
                "harnessx._demo:pool_registry",
                "--metrics-addr",
                "off",
            ],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_line(log, "registered", worker)
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    assert (tmp_path / "pool.sqlite3.owners").is_dir()  # the worker's store was that file
    refused = run_env(
        ["harnessx", "status"], {**env, "HARNESSX_DSN": "mysql://root:Hunter2@db/app"}, tmp_path
    )
    assert refused.returncode == 1 and "no store for mysql://" in refused.stderr
    assert "Hunter2" not in refused.stderr and "Traceback" not in refused.stderr


# ------------------------------------------------- inspecting creates nothing


def test_read_only_commands_create_nothing(tmp_path: Path) -> None:
    for args in (["status"], ["status", "some-session"], ["events", "some-run"], ["resume", "some-session"]):
        typo = harnessx(*args, "--sqlite", "tpyo/deeper/runtime.sqlite3", cwd=tmp_path)
        assert typo.returncode == 1, typo.stderr
        assert "no SQLite database at tpyo/deeper/runtime.sqlite3" in typo.stderr
        assert "harnessx migrate --sqlite tpyo/deeper/runtime.sqlite3" in typo.stderr
    assert list(tmp_path.iterdir()) == []
    # On a real database, inspecting takes no liveness lock (SQLite may keep its WAL files).
    assert harnessx("migrate", "--sqlite", "db/runtime.sqlite3", cwd=tmp_path).returncode == 0
    assert harnessx("status", "--sqlite", "db/runtime.sqlite3", cwd=tmp_path).stdout == "no sessions\n"
    assert not (tmp_path / "db/runtime.sqlite3.owners").exists()


def test_status_and_events_read_a_read_only_file_system(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not Path("/usr/bin/unshare").exists():
        pytest.skip("mounting a read-only file system needs root and unshare(1)")
    done = harnessx("demo", "--dir", "demo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    readonly = tmp_path / "ro"
    readonly.mkdir()
    (readonly / "runtime.sqlite3").write_bytes((tmp_path / "demo/runtime.sqlite3").read_bytes())
    session_id = json.loads((tmp_path / "demo/session.json").read_text())["session_id"]
    hx = f"{sys.executable} -m harnessx"
    script = (
        f"mount --bind {readonly} {readonly} && mount -o remount,ro,bind {readonly} {readonly} && "
        f"! touch {readonly}/probe 2>/dev/null && {hx} status --sqlite {readonly}/runtime.sqlite3 && "
        f"{hx} status {session_id} --sqlite {readonly}/runtime.sqlite3"
    )
    inside = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120
    )
    assert inside.returncode == 0, inside.stderr
    assert f"{session_id}  completed" in inside.stdout
    assert json.loads(inside.stdout.split("\n", 3)[3])["status"] == "completed"  # after the listing


def test_events_refuses_a_bad_cursor(tmp_path: Path) -> None:
    assert harnessx("migrate", "--sqlite", "db.sqlite3", cwd=tmp_path).returncode == 0
    for cursor, advice in (("abc", "pass a cursor from an event"), ("-3", "cursors are not negative")):
        bad = harnessx("events", "some-run", "--after", cursor, "--sqlite", "db.sqlite3", cwd=tmp_path)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr
        assert "Invalid value for '--after'" in bad.stderr and advice in bad.stderr


def store_args(target: BackendTarget) -> list[str]:
    return ["--sqlite" if target.kind == "sqlite" else "--dsn", target.location]


def test_migrate_says_what_it_did(target: BackendTarget, tmp_path: Path) -> None:
    first = harnessx("migrate", *store_args(target), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "created the harnessx schema (version" in first.stdout and "0001_initial" in first.stdout
    again = harnessx("migrate", *store_args(target), cwd=tmp_path)
    assert "is already at schema version" in again.stdout and "nothing to apply" in again.stdout


def elsewhere_registry() -> AgentRegistry:
    """An agent registered only in this process, as a pool's agents are only in its workers."""
    registry = AgentRegistry()
    registry.register("elsewhere", lambda: Agent(provider=ScriptedProvider(["done"])), version="v1")
    return registry


async def test_status_shows_a_queued_run_as_queued(target: BackendTarget, tmp_path: Path) -> None:
    async with target.open() as store:
        waiting = AgentRuntime(AgentRef("elsewhere", "v1"), backend=store, execution="pool")
        queued_session = await waiting.start()
        await waiting.submit("for a worker", not_before=dt.timedelta(hours=1), priority=4)
        await waiting.stop()
    listing = harnessx("status", *store_args(target), cwd=tmp_path)
    assert f"{queued_session}  queued " in listing.stdout, listing.stdout
    detail = harnessx("status", queued_session, *store_args(target), cwd=tmp_path)
    header = detail.stdout.splitlines()[0]
    assert "latest run queued: no pool worker has claimed it yet; queued since " in header, header
    assert ", not before " in header and "(priority 4)" in header, header
    # The header is one line: the run follows as JSON.
    assert json.loads(detail.stdout.split("\n", 1)[1])["status"] == "running"


async def test_resume_of_a_finished_run_needs_no_agent(target: BackendTarget, tmp_path: Path) -> None:
    async with target.open() as store:
        finished = AgentRuntime(AgentRef("elsewhere", "v1"), backend=store, registry=elsewhere_registry())
        done_session = await finished.start()
        assert (await finished.run("hi")).ok
        await finished.stop()
    listing = harnessx("status", *store_args(target), cwd=tmp_path)
    assert f"{done_session}  completed " in listing.stdout
    again = harnessx("resume", done_session, *store_args(target), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "nothing to resume" in again.stderr and "not registered" not in again.stderr


# ------------------------------------------------------------- DSN secrets


BAD_DSN = "postgresql://app:Sup3r/Secret@127.0.0.1:1/app"  # a raw '/' in the password


@pytest.mark.parametrize(
    "command",
    [
        ["harnessx", "status"],
        ["harnessx", "migrate"],
        ["harness-worker", "--agents", "harnessx._demo:pool_registry", "--metrics-addr", "off"],
        ["harness-supervisor", "--metrics-addr", "off"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
@pytest.mark.parametrize("via", ["flag", "env"])
def test_a_dsn_asyncpg_would_misread_is_refused_without_showing_the_password(
    command: list[str], via: str, tmp_path: Path
) -> None:
    env = {**os.environ, "HARNESSX_LOG_FORMAT": "text"}
    if via == "env":
        env["HARNESSX_DSN"] = BAD_DSN
        args = command
    else:
        args = [*command, "--dsn", BAD_DSN]
    refused = run_env(args, env, tmp_path)
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0, output
    assert "Traceback" not in output and "Sup3r" not in output and "Secret" not in output
    assert "postgresql://app:***@127.0.0.1:1/app" in output and "%2F" in output


def test_a_server_that_never_answers_fails_after_one_timeout_and_says_what_it_waits_for(
    tmp_path: Path,
) -> None:
    import socket

    with socket.socket() as silent:  # the kernel accepts connections; nothing ever answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        dsn = f"postgresql://app:hunter2@127.0.0.1:{silent.getsockname()[1]}/app"
        for command in (["status"], ["migrate"], ["events", "r1"]):
            waited = harnessx(*command, "--dsn", dsn, "--connect-timeout", "1.5", cwd=tmp_path)
            assert waited.returncode == 1, waited.stderr
            assert "waiting for PostgreSQL at postgresql://app:***@127.0.0.1:" in waited.stderr
            assert "(for up to 1.5 s: --connect-timeout)" in waited.stderr
            # One attempt that timed out, not one timeout per retry; and a reason, not "TimeoutError: ;".
            assert "TimeoutError: no answer within 1.5 s; gave up after 1 attempt in" in waited.stderr
            assert "hunter2" not in waited.stderr and "Traceback" not in waited.stderr


# ------------------------------------------------ schema advice that works


async def execute(target: BackendTarget, statement: str) -> None:
    if target.kind == "sqlite":
        import sqlite3

        with sqlite3.connect(target.location) as conn:
            conn.execute(statement)
        return
    import asyncpg  # type: ignore[import-untyped]

    conn = await asyncpg.connect(target.location)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def start_over(target: BackendTarget) -> str:
    """What the advice says to do to start over, done."""
    if target.kind == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(target.location + suffix).unlink(missing_ok=True)
        return ""
    return 'DROP SCHEMA "harness_x" CASCADE'


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE harnessx_migrations SET checksum = 'altered' WHERE version = 1",
        "DROP TABLE tool_calls",
    ],
    ids=["altered-checksum", "dropped-table"],
)
async def test_a_damaged_schema_is_not_sent_round_in_circles(
    target: BackendTarget, damage: str, tmp_path: Path
) -> None:
    assert harnessx("migrate", *store_args(target), cwd=tmp_path).returncode == 0
    qualified = damage.replace("harnessx_migrations", "harness_x.harnessx_migrations")
    await execute(
        target, damage if target.kind == "sqlite" else qualified.replace("tool_calls", "harness_x.tool_calls")
    )
    recreate = 'DROP SCHEMA "harness_x" CASCADE' if target.kind == "postgres" else "aside, then run"
    for command in ("status", "migrate"):
        refused = harnessx(command, *store_args(target), cwd=tmp_path)
        assert refused.returncode == 1, refused.stdout
        # Not "run harnessx migrate" (which repeats the error): the two ways out that work.
        assert "migrating cannot repair: restore the database from a backup" in refused.stderr
        assert "start over, losing every session in it" in refused.stderr and recreate in refused.stderr
    # Follow the advice: it works.
    statement = start_over(target)
    if statement:
        await execute(target, statement)
    again = harnessx("migrate", *store_args(target), cwd=tmp_path)
    assert again.returncode == 0 and "created the harnessx schema" in again.stdout, again.stderr
    assert harnessx("status", *store_args(target), cwd=tmp_path).stdout == "no sessions\n"


async def test_a_table_dropped_under_an_opened_store_leads_to_migrate_then_the_repair(
    target: BackendTarget, tmp_path: Path
) -> None:
    from harnessx import SchemaError

    async with target.open() as store:
        await execute(
            target, "DROP TABLE events" if target.kind == "sqlite" else "DROP TABLE harness_x.events"
        )
        with pytest.raises(SchemaError) as missing:
            await store.read_events("r1", 0)
        assert "is missing part of the harnessx schema" in str(missing.value)
        assert "harnessx migrate" in str(missing.value)
    told = harnessx("migrate", *store_args(target), cwd=tmp_path)
    assert told.returncode == 1 and "lacks events (dropped by hand?)" in told.stderr


def test_a_system_schema_is_refused_without_a_grant_to_run(pg_database: str, tmp_path: Path) -> None:
    for schema in ("pg_catalog", "information_schema", "pg_toast"):
        refused = harnessx("migrate", "--dsn", pg_database, "--schema", schema, cwd=tmp_path)
        assert refused.returncode == 1 and "is one of PostgreSQL's own" in refused.stderr
        assert "GRANT" not in refused.stderr and "Traceback" not in refused.stderr
