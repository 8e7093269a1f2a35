"""The PostgreSQL checkpoint: which statement a checkpoint runs, and its parameters.

Every checkpoint is one execution of the ``checkpoint`` query (see postgres.sql), cut down to
the checkpoint's shape, because the server sets up every step of a statement, used or not,
at some cost each, and arrays cost more than plain values on both sides of the wire:

- a step that has nothing to write (no new run, message, tool call or event) is left out;
- a step that writes exactly one row, the common case (one tool call moves, one event is
  appended), takes its columns as plain values instead of one-element arrays to unnest;
- a checkpoint that changes nothing of a running run but its phase and event count writes
  them to the session row alone (schema 3): its run step reads instead of updating, as even
  an UPDATE that matches no row costs the server nearly as much as one that does;
- only a recorded run's checkpoint has the journal step (schema 4), and only it sends that
  step's parameters, which the step types itself: a run that is not recorded pays nothing;
- likewise only a checkpoint that stores a large tool result (schema 6) has that step.

Statements are built once per shape and cached; asyncpg prepares each once per connection.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from harnessx._events import RunEvent
from harnessx._journal import JournalRecord
from harnessx._state import ToolEntry
from harnessx.store._codec import dumps, event_data, result_keys, tool_entry_bodies, tool_entry_columns
from harnessx.store._queries import load_queries
from harnessx.store._scheduling import Schedule

__all__ = [
    "PROGRESS_NOT_HELD",
    "SESSION_EXISTS",
    "checkpoint",
    "checkpoint_statement",
    "journal_columns",
    "without_steps",
]

Q = load_queries("postgres")
# The parameters of each row-writing step (see postgres.sql): the moved tool calls' columns
# (in tool_entry_columns order) and the new events' columns, one array each, or one value
# each when there is one row.
_TOOL_PARAMS = range(7, 17)
_EVENT_PARAMS = range(17, 23)
# The run fields ($24-$31) when only events are appended.
_NO_RUN_FIELDS = (None,) * 8
# The run step of a progress-only checkpoint: the run row is not written, so the main query's
# check that the step found the run becomes a check that the session row holds its progress.
_PROGRESS_RUN = "run AS (\n    SELECT $5 AS id FROM fence f WHERE f.current\n)"
# The SQLSTATE of a progress-only checkpoint the session row cannot take: send it again whole.
PROGRESS_NOT_HELD = "HX003"
# The SQLSTATE of create_session_run for a session that exists already (nothing written).
SESSION_EXISTS = "HX004"


@functools.cache
def checkpoint_statement(
    new_run: bool,
    messages: bool,
    tools: int,
    events: int,
    progress_only: bool = False,
    journal: bool = False,
    results: bool = False,
) -> str:
    """The checkpoint query for one shape. ``tools`` and ``events`` count rows: 0 (the step
    is left out), 1 (plain values) or 2 (arrays: two or more rows); ``journal``: the
    statement appends journal records (parameters 42-48); ``results``: it stores large tool
    results (the three parameters after the last one before them)."""
    if new_run and progress_only:
        raise ValueError("a new run's checkpoint writes its run row")
    unused = {
        *(() if new_run else ("new_run",)),
        *(() if messages else ("messages_added",)),
        *(() if tools else ("tools_moved",)),
        *(() if events else ("events_added",)),
        *(() if journal else ("journal_added",)),
        *(() if results else ("results_added",)),
    }
    replaced = {"run": _PROGRESS_RUN} if progress_only else {}
    statement = without_steps(Q["checkpoint"], unused, replaced)
    if results and not journal:
        # Parameters must be numbered without gaps: the results step's follow $41.
        for old, new in ((49, 42), (50, 43), (51, 44)):
            statement = statement.replace(f"${old}::", f"${new}::")
    single = [*(_TOOL_PARAMS if tools == 1 else ()), *(_EVENT_PARAMS if events == 1 else ())]
    return _single_valued(statement, single)


def without_steps(statement: str, names: set[str], replaced: dict[str, str] | None = None) -> str:
    """``statement`` without the ``WITH`` items ``names``, which nothing in it may read, and
    with the items named in ``replaced`` replaced by the given text. Each item starts with a
    line ``<name> AS (`` (the first one after ``WITH``) and ends with a line ``),`` (the
    last one ``)``), both unindented."""
    replaced = replaced or {}
    head, sep, rest = statement.partition("WITH ")
    if head or not sep:
        raise ValueError("the statement does not start with WITH")
    items: list[list[str]] = []
    item: list[str] | None = None
    main: list[str] = []
    for line in rest.splitlines():
        if item is None and not main and re.fullmatch(r"[a-z_]+ AS \(", line):
            item = [line]
        elif item is not None:
            if line in ("),", ")"):
                item.append(")")
                items.append(item)
                item = None
            else:
                item.append(line)
        elif items and not line.startswith("--"):
            main.append(line)
    found = {item[0].split()[0] for item in items}
    if item is not None or not names <= found or not replaced.keys() <= found:
        raise ValueError(f"cannot find the WITH items {sorted({*names, *replaced})} in the statement")
    kept = [
        replaced.get(name, "\n".join(item)) for item in items if (name := item[0].split()[0]) not in names
    ]
    return "WITH " + ",\n".join(kept) + "\n" + "\n".join(main)


def _single_valued(statement: str, params: Sequence[int]) -> str:
    """``statement`` with each array parameter in ``params`` taken as one plain value: its
    type loses its ``[]`` and ``unnest($n)`` becomes ``$n`` (the statement uses such
    parameters in no other way)."""
    for number in params:
        typed = re.compile(rf"\${number}::([a-z]+)\[\]")
        if len(typed.findall(statement)) != 1:
            raise ValueError(f"parameter ${number} is not declared once as an array")
        statement = typed.sub(rf"${number}::\1", statement)
        statement = statement.replace(f"unnest(${number})", f"${number}")
    return statement


def checkpoint(
    lease: Any,
    run_id: str,
    *,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[ToolEntry],
    events: Sequence[RunEvent],
    run: tuple[Any, ...] | None,
    new_run: dict[str, Any] | None,
    events_channel: str | None,
    work_channel: str | None,
    checkpoint_id: str,
    progress_only: bool = False,
    journal: Sequence[JournalRecord] = (),
    release: bool = False,
) -> tuple[str, tuple[Any, ...]]:
    """The statement for this checkpoint's shape, and its parameters in order.
    ``checkpoint_id`` is unique to the checkpoint, whichever statements carry it.
    ``progress_only``: of the run, only the phase and the event count change (see
    migration 0003); never for a new run. ``release``: the checkpoint gives the lease up
    (as a queued new run's does)."""
    progress_only = progress_only and new_run is None
    bodies = [(entry.execution_key, kind, text) for entry in tools for kind, text in tool_entry_bodies(entry)]
    shape = (
        new_run is not None,
        bool(messages),
        min(len(tools), 2),
        min(len(events), 2),
        progress_only,
        bool(journal),
        bool(bodies),
    )
    statement = checkpoint_statement(*shape)
    queued = bool(new_run and new_run["queued"])
    last_seq = max((int(event.cursor or 0) for event in events), default=0)
    return (
        statement,
        (
            lease.session_id,
            lease.owner,
            lease.generation,
            checkpoint_id,
            run_id,
            [dumps(message) for message in messages],
            *_tool_params(tools),
            *_event_params(events, result_keys(tools)),
            last_seq,
            *(_NO_RUN_FIELDS if run is None else run),
            new_run["request_message"] if new_run else None,
            new_run["request_id"] if new_run else None,
            queued or release,
            # One wake-up per checkpoint that adds events or a run, and one for queued work.
            events_channel if events or new_run else None,
            work_channel if queued else None,
            progress_only,
            *_schedule_params(new_run.get("schedule") if queued and new_run else None),
            *(journal_columns(journal) if journal else ()),
            *(_columns(bodies, 3) if bodies else ()),
        ),
    )


def _schedule_params(schedule: Schedule | None) -> tuple[Any, ...]:
    """A new queued run's priority, concurrency key, tenant and delay ($38-$41)."""
    if schedule is None:
        return (None, None, None, None)
    return (schedule.priority, schedule.concurrency_key, schedule.group, schedule.wait)


def _event_row(event: RunEvent, keys: Mapping[str, str]) -> tuple[Any, ...]:
    """seq, event_id, type, step_id, attempt_id, data: the events columns ($17-$22)."""
    return (
        int(event.cursor or 0),
        event.event_id,
        event.type.value,
        event.step_id,
        event.attempt_id,
        event_data(event, keys),
    )


def journal_columns(journal: Sequence[JournalRecord]) -> list[list[Any]]:
    """id, kind, step_id, attempt_id, execution_key, recorded_at, payload ($42-$48)."""
    rows = [
        (r.id, r.kind, r.step_id, r.attempt_id, r.execution_key, r.recorded_at, dumps(r.payload))
        for r in journal
    ]
    return _columns(rows, 7)


def _tool_params(tools: Sequence[ToolEntry]) -> Sequence[Any]:
    if len(tools) == 1:
        return tool_entry_columns(tools[0])
    return _columns([tool_entry_columns(entry) for entry in tools], len(_TOOL_PARAMS))


def _event_params(events: Sequence[RunEvent], keys: Mapping[str, str]) -> Sequence[Any]:
    if len(events) == 1:
        return _event_row(events[0], keys)
    return _columns([_event_row(event, keys) for event in events], len(_EVENT_PARAMS))


def _columns(table: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Rows to one list per column (``width`` empty lists when there are no rows)."""
    return [list(column) for column in zip(*table, strict=True)] if table else [[] for _ in range(width)]
