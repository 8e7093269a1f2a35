"""The operator's verbs in the terminal: ``runs``, ``show``, ``approve``, ``resolve``,
``cancel``, ``pause`` (and ``resume`` of a pool session, from ``cli.py``).

They need no agent code: every action goes through ``Operator`` (the runtime's own verbs),
and each is recorded in the audit trail under the OS user's name, or ``--as NAME``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from harnessx._cli_common import format_time, opened_store, run_command
from harnessx._errors import ConfigurationError
from harnessx._operator import Done, Operator, default_actor
from harnessx._processes import store_options
from harnessx._results import UNFINISHED_STATUSES, RunStatus
from harnessx._run_detail import RunDetail, read_run
from harnessx._state import ExecutionKey
from harnessx.store._listing import STATUSES, decode_key, encode_key
from harnessx.store._protocol import RunFilter, RunRow, Store

__all__ = ["COMMANDS", "actor_option", "operate"]

F = TypeVar("F", bound=Callable[..., Any])


def actor_option(fn: F) -> F:
    return click.option(
        "--as",
        "actor",
        default=None,
        metavar="NAME",
        help="Who acts, for the audit trail [default: the OS user].",
    )(fn)


async def operate(store: Store, actor: str | None, work: Callable[[Operator], Any]) -> Done:
    return await work(Operator(store, actor or default_actor(), "cli"))  # type: ignore[no-any-return]


def _status(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and value not in STATUSES:
        raise click.BadParameter(
            f"{value!r} is not a run status: use one of {', '.join(STATUSES)}", ctx, param
        )
    return value


@click.command()
@click.option("--status", callback=_status, help=f"Only runs with this status ({', '.join(STATUSES)}).")
@click.option("--agent", "agent_ref", metavar="REF", help="Only runs of this agent reference (name@version).")
@click.option("--session", "session_id", help="Only runs of this session.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 500), help="Runs to list.")
@click.option("--before", metavar="CURSOR", help="Continue behind the cursor an earlier listing printed.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run.")
@store_options
def runs(
    status: str | None,
    agent_ref: str | None,
    session_id: str | None,
    limit: int,
    before: str | None,
    as_json: bool,
    sqlite_path: str,
    dsn: str | None,
    schema: str,
) -> None:
    """List runs, newest first."""

    async def go() -> tuple[list[RunRow], str | None]:
        where = RunFilter(status=status, agent_ref=agent_ref, session_id=session_id)
        key = decode_key(before) if before else None
        async with opened_store(sqlite_path, dsn, schema, read_only=True) as store:
            page = await store.list_runs(where, limit=limit, before=key)
        return page.runs, encode_key(page.next) if page.next else None

    rows, more = run_command(go())
    if as_json:
        for row in rows:
            click.echo(json.dumps(_row_dict(row)))
        return
    if not rows:
        click.echo("no runs")
        return
    click.echo(f"{'RUN':<32}  {'SESSION':<32}  {'STATUS':<14}  {'AGENT':<20}  {'CREATED':<20}  UPDATED")
    for row in rows:
        click.echo(
            f"{row.id:<32}  {row.session_id:<32}  {row.shown_status:<14}  {row.agent_ref or '-':<20}  "
            f"{format_time(row.created_at):<20}  {format_time(row.updated_at)}"
        )
    if more:
        click.echo(f"more: --before {more}")


def _row_dict(row: RunRow) -> dict[str, Any]:
    return {
        "run_id": row.id,
        "session_id": row.session_id,
        "agent_ref": row.agent_ref,
        "request_id": row.request_id,
        "status": row.shown_status,
        "phase": row.phase,
        "iteration": row.iteration,
        "event_count": row.event_count,
        "stop_reason": row.stop_reason,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


@click.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="The whole run as one JSON object.")
@store_options
def show(run_id: str, as_json: bool, sqlite_path: str, dsn: str | None, schema: str) -> None:
    """Show one run: its state, tool calls, pending decisions, operators' actions, conversation."""

    async def go() -> RunDetail | None:
        async with opened_store(sqlite_path, dsn, schema, read_only=True) as store:
            return await read_run(store, run_id)

    detail = run_command(go())
    if detail is None:
        raise click.ClickException(f"no run {run_id!r}")
    if as_json:
        click.echo(json.dumps(detail.to_dict(), indent=2))
        return
    row = detail.row
    fields = [
        ("run", row.id),
        ("session", row.session_id),
        ("agent", row.agent_ref or "- (an Agent instance: its application continues it)"),
        ("status", row.shown_status + (f" ({row.stop_reason})" if row.stop_reason else "")),
        ("phase", f"{row.phase}, iteration {row.iteration}, {row.event_count} events"),
        ("request", row.request_id or "-"),
        ("created", format_time(row.created_at)),
        ("updated", format_time(row.updated_at)),
        ("generation", str(detail.session.generation)),
    ]
    if detail.state is not None and detail.state.error:
        fields.append(("error", json.dumps(detail.state.error)))
    if detail.problem:
        fields.append(("unreadable", detail.problem))
    for name, value in fields:
        click.echo(f"{name + ':':<12}{value}")
    click.echo("")
    click.echo("TOOL CALL" + " " * 47 + "STATUS         POLICY      ATTEMPT  GENERATION")
    for entry in detail.tools:
        click.echo(
            f"{entry.execution_key:<55} {entry.status.value:<14} {entry.policy:<11} {entry.attempt:<8} "
            f"{entry.generation if entry.generation is not None else '-'}"
        )
    if not detail.tools:
        click.echo("(none)")
    for entry in detail.pending:
        key, sid = entry.execution_key, row.session_id
        click.echo("")
        if entry.status.value == "approval":
            click.echo(f"waiting for approval: {entry.call.name}({json.dumps(entry.call.input)})")
            click.echo(f"  harnessx approve {sid} {key}  [--decline]")
        else:
            click.echo(
                f"uncertain (dispatched before a crash): {entry.call.name}({json.dumps(entry.call.input)})"
            )
            click.echo(f"  harnessx resolve {sid} {key} (--result TEXT | --retry | --abort)")
    if detail.actions:
        click.echo("")
        click.echo(f"{'ACTION':<16}{'BY':<20}{'VIA':<9}{'AT':<22}OUTCOME")
        for action in detail.actions:
            click.echo(
                f"{action.action:<16}{action.actor:<20}{action.via:<9}{format_time(action.at):<22}"
                f"{action.outcome or 'unknown (the acting process stopped before it learned)'}"
            )
    if detail.messages:
        click.echo("")
        for message in detail.messages:
            click.echo(f"{message.get('role', '?')}: {_content(message)}")


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content)
    calls = message.get("tool_calls")
    if calls:
        text += f" [calls: {', '.join(str(c.get('name', '?')) for c in calls if isinstance(c, dict))}]"
    return " ".join(text.split())[:300]


@click.command()
@click.argument("session_id")
@click.argument("execution_key", required=False)
@click.option("--decline", is_flag=True, help="Decline instead: the model sees 'Permission denied'.")
@actor_option
@store_options
def approve(
    session_id: str,
    execution_key: str | None,
    decline: bool,
    actor: str | None,
    sqlite_path: str,
    dsn: str | None,
    schema: str,
) -> None:
    """Approve (or --decline) a tool call waiting for approval in the session's latest run.

    Without EXECUTION_KEY the run must wait on exactly one such call. A pool run is then
    queued for any worker."""

    async def go() -> Done:
        async with opened_store(sqlite_path, dsn, schema, auto_migrate=False) as store:
            key = execution_key or await _only_pending(store, session_id)
            _same_session(key, session_id)
            return await operate(store, actor, lambda op: op.approve(key, allow=not decline))

    click.echo(run_command(go()).message)


async def _only_pending(store: Store, session_id: str) -> str:
    record = await store.latest_run(session_id, messages=False)
    if record is None:
        raise ConfigurationError(f"session {session_id!r} has no run (check the id and the store)")
    waiting = [e.execution_key for e in await store.tool_calls(record.id) if e.status.value == "approval"]
    if len(waiting) == 1:
        return waiting[0]
    if not waiting:
        raise ConfigurationError(
            f"run {record.id} of session {session_id} has no tool call waiting for approval"
        )
    raise ConfigurationError(
        f"run {record.id} waits for approval of {len(waiting)} calls: name one as EXECUTION_KEY "
        f"({', '.join(waiting)})"
    )


def _same_session(key: str, session_id: str) -> None:
    if ":" not in key:
        raise ConfigurationError(
            f"{key!r} is not an execution key (RUN_ID:ITERATION:CALL_ID, as 'harnessx show' prints)"
        )


@click.command()
@click.argument("session_id")
@click.argument("execution_key")
@click.option(
    "--result", "result_text", metavar="TEXT", help="Record what the call really did, as its result."
)
@click.option("--error", "is_error", is_flag=True, help="With --result: the result is an error.")
@click.option("--retry", is_flag=True, help="Accept another invocation of the call.")
@click.option("--abort", is_flag=True, help="End the run cancelled (nothing is undone).")
@actor_option
@store_options
def resolve(
    session_id: str,
    execution_key: str,
    result_text: str | None,
    is_error: bool,
    retry: bool,
    abort: bool,
    actor: str | None,
    sqlite_path: str,
    dsn: str | None,
    schema: str,
) -> None:
    """Settle an uncertain tool call: --result TEXT, --retry or --abort (exactly one)."""
    if (result_text is not None) + retry + abort != 1:
        raise click.UsageError("give exactly one of --result TEXT, --retry or --abort")
    if is_error and result_text is None:
        raise click.UsageError("--error goes with --result TEXT")

    async def go() -> Done:
        async with opened_store(sqlite_path, dsn, schema, auto_migrate=False) as store:
            await _check_session(store, session_id, execution_key)
            return await operate(
                store,
                actor,
                lambda op: op.resolve(
                    execution_key, result=result_text, is_error=is_error, retry=retry, abort=abort
                ),
            )

    click.echo(run_command(go()).message)


async def _check_session(store: Store, session_id: str, key: str) -> None:
    _same_session(key, session_id)
    record = await store.get_run(ExecutionKey.run_of(key), messages=False)
    if record is not None and record.session_id != session_id:
        raise ConfigurationError(f"tool call {key} belongs to session {record.session_id}, not {session_id}")


def _control(verb: str) -> click.Command:
    @click.command(name=verb)
    @click.argument("session_id")
    @actor_option
    @store_options
    def command(session_id: str, actor: str | None, sqlite_path: str, dsn: str | None, schema: str) -> None:
        async def go() -> str:
            async with opened_store(sqlite_path, dsn, schema, auto_migrate=False) as store:
                if await store.get_session(session_id) is None:
                    raise click.ClickException(f"no session {session_id!r}")
                record = await store.latest_run(session_id, messages=False)
                if record is None or record.status not in UNFINISHED_STATUSES:
                    return f"nothing to {verb}: the session has no unfinished run"
                if verb == "pause" and record.status is not RunStatus.RUNNING:
                    return f"nothing to pause: run {record.id} is {record.status.value}"
                done = await operate(store, actor, lambda op: getattr(op, verb)(session_id))
                return done.message

        click.echo(run_command(go()))

    command.help = {
        "cancel": "Cancel a session's unfinished run, even one whose stored state cannot be read.",
        "pause": "Pause a session's running run at its next boundary (resume continues it).",
    }[verb]
    return command


COMMANDS = [runs, show, approve, resolve, _control("cancel"), _control("pause")]
