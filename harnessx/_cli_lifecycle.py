"""The data lifecycle in the terminal: ``prune`` (retention), ``delete`` (erasure), ``export``
and ``import`` (archives as JSON lines, one record per session)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TextIO, TypeVar

import click

from harnessx._cli_common import opened_store, run_command
from harnessx._cli_operate import actor_option
from harnessx._compaction import COMPACT_AFTER, compact_pass, default_compact_batch
from harnessx._erasure import erase_session
from harnessx._errors import ConfigurationError
from harnessx._operator import default_actor
from harnessx._processes import store_options
from harnessx._results import FINISHED_STATUSES
from harnessx._retention import (
    PARTITIONS_AHEAD,
    RetentionPolicy,
    default_batch,
    parse_duration,
    prune_pass,
    statuses_of,
)
from harnessx.store._archive import parse_record
from harnessx.store._protocol import Store

__all__ = ["COMMANDS", "duration_option"]

F = TypeVar("F", bound=Callable[..., Any])
_EXPORT_BATCH = 100


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def duration_option(*names: str, required: bool, help: str, envvar: str | None = None) -> Callable[[F], F]:
    return click.option(
        *names, required=required, callback=_duration, metavar="DURATION", envvar=envvar, help=help
    )


_statuses = click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([status.value for status in FINISHED_STATUSES]),
    help="Only sessions whose latest run ended so (repeat for several) [default: any finished].",
)


@click.command()
@duration_option(
    "--older-than",
    required=True,
    help="Remove finished sessions idle for longer than this: 30d, 12h, 90m, 1d12h.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@_statuses
@click.option(
    "--archive",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write each session to a new JSON-lines file in this folder before removing it "
    "('harnessx import FILE' restores it).",
)
@click.option(
    "--batch",
    type=click.IntRange(1, 10_000),
    help="Sessions per transaction [default: 200 on PostgreSQL, 20 on SQLite].",
)
@store_options
def prune(
    older_than: float,
    dry_run: bool,
    statuses: tuple[str, ...],
    archive: Path | None,
    batch: int | None,
    sqlite_path: str,
    dsn: str | None,
    schema: str,
) -> None:
    """Remove finished sessions (every run completed, cancelled or failed) idle for longer than
    --older-than, with everything they own. A session with a run that is running, paused or
    awaiting input is never removed, however old."""

    async def go() -> str:
        async with opened_store(sqlite_path, dsn, schema, auto_migrate=False) as store:
            policy = RetentionPolicy(
                older_than,
                batch=batch or default_batch(store),
                statuses=statuses_of(statuses),
                archive=archive,
            )
            report = await prune_pass(store, policy, dry_run=dry_run)
            text = report.describe(policy, dry_run=dry_run)
            if not dry_run:
                # PostgreSQL: the days of events none of whose runs is left go whole, as the
                # supervisor's housekeeping does (docs/operations.md, *Partitioned events*).
                began = time.perf_counter()
                days = await store.maintain_partitions(PARTITIONS_AHEAD)
                if days is not None and (days.dropped or days.purged):
                    text += (
                        f"; dropped {len(days.dropped)} day(s) of events ({days.dropped_rows} event(s)) "
                        f"and deleted {days.purged} event(s) of runs pruned before, in "
                        f"{time.perf_counter() - began:.2f} s"
                    )
            if dry_run and report.sample:
                more = report.sessions - len(report.sample)
                text += "\n" + "\n".join(report.sample) + (f"\n... and {more} more" if more > 0 else "")
            return text

    click.echo(run_command(go()))


@click.command()
@store_options
@duration_option(
    "--older-than",
    required=False,
    help="Compact runs that finished longer ago than this (1h, 30m, 2d) [default: 1h].",
)
@click.option(
    "--batch",
    type=click.IntRange(1, 10_000),
    help="Runs per transaction [default: 100 on PostgreSQL, 5 on SQLite].",
)
def compact(
    older_than: float | None, batch: int | None, dsn: str | None, sqlite_path: str, schema: str
) -> None:
    """Compact the streamed text of finished runs: each stretch of text pieces a run streamed is
    stored as one event, and a reader resuming behind any cursor still reads the same text,
    once. harness-supervisor does this continuously (--compact-after); this is for stores
    without one."""

    async def go() -> str:
        async with opened_store(sqlite_path, dsn, schema, auto_migrate=False) as store:
            report = await compact_pass(
                store,
                COMPACT_AFTER if older_than is None else older_than,
                batch=batch or default_compact_batch(store),
            )
            return report.describe()

    click.echo(run_command(go()))


@click.command()
@click.argument("session_id")
@click.option(
    "--force", is_flag=True, help="Cancel the session's unfinished run first (otherwise it is refused)."
)
@actor_option
@store_options
def delete(
    session_id: str, force: bool, actor: str | None, sqlite_path: str, dsn: str | None, schema: str
) -> None:
    """Erase one session and everything it owns: runs, conversation, tool calls and results,
    events, journal, operators' actions. Refused while a run of it is unfinished, unless --force."""

    async def go() -> dict[str, int]:
        async with opened_store(sqlite_path, dsn, schema, auto_migrate=False) as store:
            who = actor or default_actor()
            return await erase_session(store, session_id, force=force, actor=who, via="cli")

    deleted = run_command(go())
    rows = ", ".join(f"{count} {table}" for table, count in sorted(deleted.items()) if count)
    click.echo(f"deleted session {session_id}: {rows}")


@click.command()
@duration_option(
    "--older-than", required=False, help="Only finished sessions idle for longer than this (as prune)."
)
@click.option("--session", "session_ids", multiple=True, help="Only this session (repeat for several).")
@_statuses
@store_options
def export(
    older_than: float | None,
    session_ids: tuple[str, ...],
    statuses: tuple[str, ...],
    sqlite_path: str,
    dsn: str | None,
    schema: str,
) -> None:
    """Write sessions with their runs, conversation, tool calls and events to standard output as
    JSON lines, one self-describing record per session ('harnessx import' restores them).
    Without options: every session."""
    if statuses and older_than is None:
        raise click.UsageError("--status selects among finished sessions: give --older-than too")

    async def go() -> int:
        async with opened_store(sqlite_path, dsn, schema, read_only=True) as store:
            count = 0
            async for ids in _chosen(store, older_than, session_ids, statuses):
                for record in await store.export_sessions(ids):
                    sys.stdout.write(_line(record))
                    count += 1
                sys.stdout.flush()
            return count

    count = run_command(go())
    click.echo(f"exported {count} session(s)", err=True)


async def _chosen(
    store: Store, older_than: float | None, session_ids: tuple[str, ...], statuses: tuple[str, ...]
) -> AsyncIterator[list[str]]:
    """The ids to export, a batch at a time."""
    if session_ids:
        for session_id in session_ids:
            if await store.get_session(session_id) is None:
                raise ConfigurationError(f"no session {session_id!r} in this store: nothing was exported")
        for start in range(0, len(session_ids), _EXPORT_BATCH):
            yield list(session_ids[start : start + _EXPORT_BATCH])
        return
    if older_than is not None:
        cursor = None
        while True:
            batch = await store.prune(
                older_than, limit=_EXPORT_BATCH, statuses=statuses_of(statuses), after=cursor, dry_run=True
            )
            if batch.pruned:
                yield batch.pruned
            cursor = batch.cursor
            if cursor is None:
                return
    after = ""
    while True:
        ids = await store.session_page(after, _EXPORT_BATCH)
        if not ids:
            return
        yield ids
        after = ids[-1]


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


@click.command("import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
@store_options
def import_(file: TextIO, sqlite_path: str, dsn: str | None, schema: str) -> None:
    """Restore sessions from a JSON-lines file written by 'harnessx export' or 'harnessx prune
    --archive' ('-': standard input) into an existing database ('harnessx migrate' creates one).
    A session that exists already is left as it is; importing the same file again changes nothing."""
    name = getattr(file, "name", "the file")
    counts = {"imported": 0, "skipped": 0}

    async def go() -> None:
        # Like every command but migrate: a mistyped path is an error, not a new database.
        async with opened_store(sqlite_path, dsn, schema, auto_migrate=False) as store:
            for number, line in _lines(file):
                where = f"{name} line {number}"
                try:
                    record = parse_record(line, where)
                    restored = await store.import_session(record)
                except ConfigurationError as exc:
                    done = counts["imported"]
                    raise ConfigurationError(
                        f"{exc}. {done} session(s) before it were imported; fix the line and import "
                        "again (those are skipped)"
                    ) from None
                counts["imported" if restored else "skipped"] += 1

    run_command(go())
    click.echo(
        f"imported {counts['imported']} session(s); {counts['skipped']} skipped (a session with the "
        "same id exists)"
    )


def _lines(file: TextIO) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(file, 1):
        if line.strip():
            yield number, line


COMMANDS = [prune, compact, delete, export, import_]
