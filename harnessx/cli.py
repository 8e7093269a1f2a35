"""The ``harnessx`` command: the crash demo, and inspecting or driving sessions from a shell.

Every command is a thin layer over the library; backends are chosen with ``--sqlite PATH``
(the default) or ``--dsn DSN`` (``HARNESSX_DSN``) plus ``--schema``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from harnessx._agent import Agent
from harnessx._cli_common import format_time, opened_store, run_command, to_stderr
from harnessx._cli_lifecycle import COMMANDS as LIFECYCLE_COMMANDS
from harnessx._cli_limits import limits
from harnessx._cli_operate import COMMANDS, actor_option, operate
from harnessx._demo import DEMO_AGENT, DEMO_PROMPT, CrashAfterRawResult, invocation_count, registry
from harnessx._demo_dir import prepare_demo_dir
from harnessx._errors import CorruptStateError, HarnessError
from harnessx._observe import follow_events, stored_events
from harnessx._processes import open_store, store_options, waiting_notice
from harnessx._registry import AgentRef, AgentRegistry, agents
from harnessx._results import CLOSED_STATUSES, RunResult
from harnessx._runlog import parse_cursor
from harnessx._runtime import AgentRuntime
from harnessx.console._command import console
from harnessx.store._migrations import MigrationReport
from harnessx.store._protocol import SessionSummary, Store
from harnessx.store._scheduling import RunSchedule

__all__ = ["main"]

T = TypeVar("T")
DEFAULT_SQLITE = ".agent_sessions/runtime.sqlite3"


@click.group()
@click.version_option(package_name="harnessx-durable")
def main() -> None:
    """harnessx: durable LLM-agent runs."""


# ------------------------------------------------------------------------ demo


@main.command()
@click.option(
    "--backend",
    type=click.Choice(["sqlite", "postgres"]),
    help="Store for the walkthrough [default: sqlite; postgres when --dsn is given].",
)
@click.option(
    "--dsn",
    envvar="HARNESSX_DSN",
    help="PostgreSQL DSN [env HARNESSX_DSN]; on the command line it implies --backend postgres.",
)
@click.option("--schema", default="harnessx_demo", show_default=True, help="PostgreSQL schema for the demo.")
@click.option(
    "--dir",
    "workdir",
    default=".agent_sessions/demo",
    show_default=True,
    type=click.Path(file_okay=False),
    help="A new or empty folder (or one an earlier demo made); only the demo's own files are ever deleted.",
)
@click.option(
    "--pool", is_flag=True, help="The worker-pool walkthrough: a supervisor and two workers on SQLite."
)
@click.option(
    "--runs", default=8, show_default=True, type=click.IntRange(1, 12), help="Runs to submit (--pool)."
)
@click.option(
    "--tool-seconds", default=1.0, show_default=True, help="How long each tool call takes (--pool)."
)
@click.pass_context
def demo(
    ctx: click.Context,
    backend: str | None,
    dsn: str | None,
    schema: str,
    workdir: str,
    pool: bool,
    runs: int,
    tool_seconds: float,
) -> None:
    """Crash a run right after its tool's result commits, then resume it in a fresh process.

    With --pool: submit runs to two workers, SIGKILL one mid-tool, and watch every run finish."""
    dsn_given = ctx.get_parameter_source("dsn") is ParameterSource.COMMANDLINE
    if backend is None:
        backend = "postgres" if dsn_given else "sqlite"
    elif backend == "sqlite" and dsn_given:
        raise click.UsageError("--dsn is for --backend postgres; leave it out to run the demo on SQLite")
    if pool:
        if backend == "postgres":
            raise click.UsageError("the pool walkthrough runs on SQLite: leave out --dsn and --backend")
        _pool_demo(_demo_dir(workdir), runs, tool_seconds)
        return
    if backend == "postgres" and not dsn:
        raise click.UsageError("--backend postgres needs --dsn (or HARNESSX_DSN)")
    folder = _demo_dir(workdir)
    # The children find their store in the environment: a DSN on their command lines would
    # show its password to anyone who can list processes.
    env = {k: v for k, v in os.environ.items() if k not in ("HARNESSX_DSN", "HARNESSX_SQLITE")}
    env["HARNESSX_DEMO_DIR"] = str(folder)
    if backend == "postgres":
        assert dsn is not None
        env |= {"HARNESSX_DSN": dsn, "HARNESSX_SCHEMA": schema}
        where = "PostgreSQL"
    else:
        env["HARNESSX_SQLITE"] = str(folder / "runtime.sqlite3")
        where = f"SQLite ({folder / 'runtime.sqlite3'})"
    session_file = folder / "session.json"

    click.echo(f"1. A sales agent starts a durable run on {where}.")
    click.echo("   Its process will be killed with SIGKILL right after the tool's raw result commits.")
    first = _step(["_demo-drive", "--session-file", str(session_file)], env)
    if first.returncode != -9:
        raise click.ClickException(
            f"the driving process was expected to die by SIGKILL; it exited {first.returncode}"
        )
    session_id = json.loads(session_file.read_text())["session_id"]
    click.echo(f"   Process killed (exit -9). Tool invocations so far: {invocation_count(folder)}")
    click.echo(f"   Session id saved to {session_file}: {session_id}")

    click.echo("2. A fresh process resumes the saved session.")
    second = _step(["_demo-resume", "--session-file", str(session_file)], env)
    if second.returncode != 0:
        raise click.ClickException(f"resuming failed (exit {second.returncode})")
    result = RunResult.from_dict(json.loads(second.stdout.strip().splitlines()[-1]))
    count = invocation_count(folder)
    report = next((folder / "reports").glob("*.md"), None)
    click.echo("")
    click.echo(f"Run:              {result.run_id} ({result.status.value})")
    click.echo(f"Report:           {report.resolve() if report else 'missing'}")
    click.echo(f"Answer:           {result.output}")
    click.echo(f"Tool invocations: {count}")
    if not result.ok or count != 1 or report is None:
        raise click.ClickException(
            "the walkthrough did not hold: expected a completed run and exactly 1 invocation"
        )


def _demo_dir(workdir: str) -> Path:
    try:
        return prepare_demo_dir(Path(workdir))
    except OSError as exc:
        raise click.ClickException(f"cannot prepare the demo folder {workdir}: {exc}") from exc
    except HarnessError as exc:
        raise click.UsageError(str(exc)) from exc


def _pool_demo(folder: Path, runs: int, tool_seconds: float) -> None:
    from harnessx._pool_demo import run_pool_demo

    click.echo(f"Pool walkthrough in {folder} (logs in {folder / 'logs'}).")
    if not asyncio.run(run_pool_demo(folder, runs, tool_seconds, click.echo)):
        raise click.ClickException("the pool walkthrough did not hold; see the table above")


def _step(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "harnessx.cli", *args]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    for line in completed.stderr.splitlines():
        click.echo(f"   | {line}", err=True)
    return completed


@main.command("_demo-drive", hidden=True)
@click.option("--session-file", required=True, type=click.Path(dir_okay=False))
@store_options
def demo_drive(session_file: str, sqlite_path: str, dsn: str | None, schema: str) -> None:
    async def drive() -> None:
        async with opened_store(sqlite_path, dsn, schema) as store:
            runtime = AgentRuntime(DEMO_AGENT, backend=store, registry=registry)
            runtime.agent.middleware.add(CrashAfterRawResult())
            session_id = await runtime.start()
            await asyncio.to_thread(Path(session_file).write_text, json.dumps({"session_id": session_id}))
            await runtime.run(DEMO_PROMPT, request_id="q3-emea-report")
            await runtime.stop()

    run_command(drive())


@main.command("_demo-resume", hidden=True)
@click.option("--session-file", required=True, type=click.Path(dir_okay=False, exists=True))
@store_options
def demo_resume(session_file: str, sqlite_path: str, dsn: str | None, schema: str) -> None:
    async def resume() -> RunResult:
        saved = json.loads(await asyncio.to_thread(Path(session_file).read_text))
        async with opened_store(sqlite_path, dsn, schema) as store:
            runtime = AgentRuntime(DEMO_AGENT, backend=store, registry=registry)
            try:
                handle = await runtime.resume(saved["session_id"])
                if handle is None:
                    raise click.ClickException("no run to resume")
                return await handle.result()
            finally:
                await runtime.aclose()

    click.echo(json.dumps(run_command(resume()).to_dict()))


# ---------------------------------------------------------------- inspection


@main.command()
@click.argument("session_id", required=False)
@click.option("--limit", default=20, show_default=True, help="Sessions to list without SESSION_ID.")
@store_options
def status(session_id: str | None, limit: int, sqlite_path: str, dsn: str | None, schema: str) -> None:
    """List recent sessions, or show one session's latest run."""

    async def show() -> None:
        async with opened_store(sqlite_path, dsn, schema, read_only=True) as store:
            if session_id is None:
                rows = await store.recent_sessions(limit)
                if not rows:
                    click.echo("no sessions")
                    return
                click.echo(
                    f"{'SESSION':<32}  {'STATUS':<15} {'AGENT':<20}  {'CREATED':<20}  {'UPDATED':<20}  RUN"
                )
                for row in rows:
                    click.echo(
                        f"{row.session_id:<32}  {_shown_status(row):<15} {row.agent_ref or '-':<20}  "
                        f"{format_time(row.created_at):<20}  {format_time(row.updated_at):<20}  "
                        f"{row.run_id or '-'}"
                    )
                return
            session = await store.get_session(session_id)
            summary = await store.session_summary(session_id)
            if session is None or summary is None:
                raise click.ClickException(f"no session {session_id!r}")
            record = await store.latest_run(session_id, messages=False)
            schedule = await store.schedule_of(record.id) if record is not None else None
            agent = session.agent_ref or "-"
            header = (
                f"session {session_id}  agent {agent}  generation {session.generation}  "
                f"created {format_time(summary.created_at)}  updated {format_time(summary.updated_at)}"
            )
            if summary.queued:
                header += "  latest run queued: no pool worker has claimed it yet"
            if schedule is not None and schedule.queued:
                # On the header line: what follows it is the run as JSON, for scripts.
                header += f"; {_queued_line(schedule)}"
            click.echo(header)
            if record is None:
                click.echo("no runs")
                return
            try:
                result = (await store.load_state(record.id)).result()
            except CorruptStateError as exc:
                # Show what the run's row says; the rest of its state cannot be read.
                shown = {"session_id": session_id, "run_id": record.id, "status": record.status.value}
                click.echo(json.dumps({**shown, "phase": record.phase, "unreadable": str(exc)}, indent=2))
                return
            click.echo(json.dumps(result.to_dict(), indent=2))

    run_command(show())


def _queued_line(schedule: RunSchedule) -> str:
    """Where a queued run waits: from when it may be claimed, and what schedules it."""
    parts = [f"priority {schedule.priority}"]
    if schedule.concurrency_key:
        parts.append(f"concurrency key {schedule.concurrency_key}")
    if schedule.tenant and schedule.tenant != schedule.concurrency_key:
        parts.append(f"tenant {schedule.tenant}")
    delayed = schedule.not_before is not None and schedule.not_before > time.time()
    when = f"not before {format_time(schedule.not_before)}" if delayed else "claimable now"
    return f"queued since {format_time(schedule.queued_at)}, {when} ({', '.join(parts)})"


def _shown_status(row: SessionSummary) -> str:
    # A queued pool run is stored as 'running' (it is unfinished) but nothing drives it yet.
    if row.queued:
        return "queued"
    return row.run_status.value if row.run_status is not None else "idle"


def _cursor(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        parse_cursor(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    return value


@main.command()
@click.argument("run_id")
@click.option("--after", default="0", show_default=True, callback=_cursor, help="Cursor to continue behind.")
@click.option("--follow", is_flag=True, help="Keep following live events until the execution ends.")
@store_options
def events(run_id: str, after: str, follow: bool, sqlite_path: str, dsn: str | None, schema: str) -> None:
    """Print a run's stored events as JSON lines."""

    async def dump() -> None:
        async with opened_store(sqlite_path, dsn, schema, read_only=True) as store:
            if await store.get_run(run_id, messages=False) is None:
                raise click.ClickException(f"no run {run_id!r}")
            found = follow_events(store, run_id, after, poll_interval=0.2) if follow else None
            async for event in found or stored_events(store, run_id, after):
                click.echo(json.dumps(event.to_dict()))

    run_command(dump())


@main.command()
@click.argument("session_id")
@click.option(
    "--agent",
    "agent_path",
    help="module:attribute naming an Agent, a factory returning one, or an AgentRegistry. "
    "Default: the session's recorded agent reference in the built-in registries; a pool "
    "session whose agent is in none of them is queued for the pool's workers instead.",
)
@actor_option
@store_options
def resume(
    session_id: str, agent_path: str | None, actor: str | None, sqlite_path: str, dsn: str | None, schema: str
) -> None:
    """Resume a session's latest run and print its result as JSON (a pool session whose
    agent this process does not have is queued for the workers, in the audit trail)."""
    queued: list[str] = []

    async def go() -> RunResult | None:
        async with opened_store(sqlite_path, dsn, schema, auto_migrate=False) as store:
            session = await store.get_session(session_id)
            if session is None:
                raise click.ClickException(f"no session {session_id!r}")
            # Decided before looking for the agent: a finished run needs none.
            latest = await store.latest_run(session_id, messages=False)
            if latest is None or latest.status in CLOSED_STATUSES:
                return None
            if agent_path is None and _for_the_pool(session.agent_ref):
                done = await operate(store, actor, lambda op: op.resume(session_id))
                queued.append(done.message)
                return None
            runtime = _runtime_for(agent_path, session.agent_ref, store)
            try:
                handle = await runtime.resume(session_id)
                return await handle.result() if handle else None
            finally:
                await runtime.aclose()

    result = run_command(go())
    if queued:
        click.echo(queued[0])
        return
    click.echo(json.dumps(result.to_dict() if result else None, indent=2))
    if result is None:
        click.echo(
            "nothing to resume: the session has no run, or its latest run is completed or cancelled", err=True
        )


@main.command()
@click.option(
    "--from-original",
    is_flag=True,
    help="The database was written by the original harnessx 0.9.1: keep its tables (renamed), "
    "create this schema in their place and import its sessions.",
)
@store_options
def migrate(from_original: bool, sqlite_path: str, dsn: str | None, schema: str) -> None:
    """Create or upgrade the harnessx schema."""

    async def go() -> MigrationReport:
        # Not opened first: opening verifies the schema, which is what this command fixes.
        store = open_store(dsn=dsn, sqlite_path=sqlite_path, schema=schema, auto_migrate=True)
        with waiting_notice(store, to_stderr):
            return await store.migrate()

    async def imported() -> str:
        from harnessx._from_original import migrate_from_original

        store = open_store(dsn=dsn, sqlite_path=sqlite_path, schema=schema, auto_migrate=True)
        with waiting_notice(store, to_stderr):
            return (await migrate_from_original(store)).describe()

    click.echo(run_command(imported()) if from_original else run_command(go()).describe())


def _for_the_pool(agent_ref: str | None) -> bool:
    """A session by reference whose agent no built-in registry has: the pool's workers have it."""
    if agent_ref is None:
        return False
    ref = AgentRef.parse(agent_ref)
    return ref not in registry and ref not in agents


def _runtime_for(agent_path: str | None, agent_ref: str | None, store: Store) -> AgentRuntime:
    target: Any = _import(agent_path) if agent_path else None
    if target is None or isinstance(target, AgentRegistry):
        if agent_ref is None:
            raise click.ClickException(
                "this session was started with an Agent instance: pass --agent module:factory"
            )
        ref = AgentRef.parse(agent_ref)
        for candidate in [target] if target is not None else [registry, agents]:
            if ref in candidate:
                return AgentRuntime(ref, backend=store, registry=candidate)
        raise click.ClickException(f"agent {ref} is not registered; pass --agent module:registry")
    agent = target if isinstance(target, Agent) else target()
    if not isinstance(agent, Agent):
        raise click.ClickException(f"{agent_path} did not give an Agent")
    return AgentRuntime(agent, backend=store)


def _import(path: str) -> Any:
    module_name, _, attribute = path.partition(":")
    if not attribute:
        raise click.UsageError(f"--agent expects module:attribute, got {path!r}")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise click.UsageError(f"cannot load {path}: {exc}") from exc


for _command in [*COMMANDS, *LIFECYCLE_COMMANDS, console, limits]:
    main.add_command(_command)


if __name__ == "__main__":
    main()
