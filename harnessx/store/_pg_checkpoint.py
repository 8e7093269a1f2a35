"""The PostgreSQL checkpoint: which statement a checkpoint runs, and its parameters.

Every checkpoint is one statement, one round trip: a data-modifying ``WITH`` whose steps are
the blocks of ``sql/postgres_checkpoint.sql``. The statement is cut to the checkpoint's shape,
because the server sets up every step of a statement, used or not, at some cost each, and
arrays cost more than plain values on both sides of the wire:

- a step that has nothing to write (no new run, message, tool call or event) is left out;
- a step that writes exactly one row, the common case (one tool call moves, one event is
  appended), takes its columns as plain values instead of one-element arrays to unnest;
- a checkpoint that changes nothing of a running run but its phase and event count writes
  them to the session row alone (schema 3): its run step reads instead of updating, as even
  an UPDATE that matches no row costs the server nearly as much as one that does;
- only a recorded run's checkpoint has the journal step (schema 4), only a checkpoint that
  stores a large tool result (schema 6) the results step, and a parameter that no kept step
  uses is not sent at all.

What is declared once, here: every parameter by name with its type (``SCALARS``), every
row set with its columns (``_ROW_SETS``), and which blocks make up a shape (``_STEPS``). The
blocks name parameters (``:run``, ``:tools.status``; see the file's header), so a shape's
statement is numbered and typed by ``render`` — no positions are written anywhere, and a new
column is one entry in its row set (plus the value the codec gives it). Statements are put
together once per shape and cached; asyncpg prepares each once per connection.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harnessx._events import RunEvent
from harnessx._journal import JournalRecord
from harnessx._state import ToolEntry
from harnessx.store._codec import (
    Answers,
    answers_of,
    dumps,
    event_data,
    result_keys,
    tool_entry_bodies,
    tool_entry_columns,
)
from harnessx.store._queries import load_queries, when
from harnessx.store._scheduling import Schedule

__all__ = [
    "APPLIED",
    "GROUP",
    "GROUP_ROW_SETS",
    "LOST",
    "NOT_HELD",
    "PROGRESS_NOT_HELD",
    "WRITTEN",
    "ROW_SETS",
    "SCALARS",
    "SESSION_EXISTS",
    "CHECKPOINT",
    "Checkpoint",
    "CheckpointStatement",
    "GroupShape",
    "Parameters",
    "Shape",
    "all_group_shapes",
    "all_shapes",
    "checkpoint",
    "checkpoint_statement",
    "group",
    "group_statement",
    "journal_columns",
    "render",
]

# The SQLSTATE of a progress-only checkpoint the session row cannot take: send it again whole.
PROGRESS_NOT_HELD = "HX003"
# The SQLSTATE of create_session_run for a session that exists already (nothing written).
SESSION_EXISTS = "HX004"


@dataclass(frozen=True)
class RowSet:
    """Rows a checkpoint writes, sent one array per column (``columns``: name and element
    type, in the order the codec gives a row's values); ``single``: a shape that writes
    exactly one row sends plain values instead."""

    name: str
    columns: tuple[tuple[str, str], ...]
    single: bool


# Every parameter that is not a row set's, with its type. The run's fields after the delta
# (status ... usage_incomplete) are all NULL when only events are appended; ``release`` gives
# the lease up in the same commit (a queued new run, or an execution's last checkpoint);
# the channels are NULL when nobody is to be woken; priority ... delay are a new queued
# run's schedule (NULL priority: its agent's default; NULL delay: claimable at once).
SCALARS: dict[str, str] = {
    "session": "text",
    "owner": "text",
    "generation": "bigint",
    "checkpoint_id": "text",
    "run": "text",
    "messages": "json[]",
    "last_seq": "bigint",
    "status": "text",
    "phase": "text",
    "iteration": "bigint",
    "usage": "jsonb",
    "output": "text",
    "stop_reason": "text",
    "error": "json",
    "usage_incomplete": "boolean",
    "request_message": "text",
    "request_id": "text",
    "release": "boolean",
    "events_channel": "text",
    "work_channel": "text",
    "priority": "integer",
    "concurrency_key": "text",
    "tenant": "text",
    "delay": "float8",
}
_RUN_FIELDS = ("status", "phase", "iteration", "usage", "output", "stop_reason", "error", "usage_incomplete")

ROW_SETS: dict[str, RowSet] = {
    # tool_entry_columns' order.
    "tools": RowSet(
        "tools",
        (
            ("execution_key", "text"),
            ("iteration", "bigint"),
            ("idx", "bigint"),
            ("call", "json"),
            ("policy", "text"),
            ("status", "text"),
            ("attempt", "bigint"),
            ("approved", "boolean"),
            ("raw_result", "json"),
            ("result", "json"),
        ),
        single=True,
    ),
    # _event_row's order.
    "events": RowSet(
        "events",
        (
            ("seq", "bigint"),
            ("event_id", "text"),
            ("type", "text"),
            ("step_id", "text"),
            ("attempt_id", "text"),
            ("data", "json"),
        ),
        single=True,
    ),
    # journal_columns' order.
    "journal": RowSet(
        "journal",
        (
            ("id", "text"),
            ("kind", "text"),
            ("step_id", "text"),
            ("attempt_id", "text"),
            ("execution_key", "text"),
            ("recorded_at", "text"),
            ("payload", "json"),
        ),
        single=False,
    ),
    # tool_entry_bodies' rows with their call's key first.
    "results": RowSet(
        "results", (("execution_key", "text"), ("kind", "text"), ("body", "text")), single=False
    ),
}


@dataclass(frozen=True)
class Shape:
    """What a checkpoint writes. ``tools`` and ``events`` count rows: 0 (the step is left
    out), 1 (plain values) or 2 (arrays: two or more rows). ``progress_only``: of the run,
    only the phase and the event count change (never for a new run)."""

    new_run: bool = False
    messages: bool = False
    tools: int = 0
    events: int = 0
    progress_only: bool = False
    journal: bool = False
    results: bool = False

    def __post_init__(self) -> None:
        if self.new_run and self.progress_only:
            raise ValueError("a new run's checkpoint writes its run row")
        if not (0 <= self.tools <= 2 and 0 <= self.events <= 2):
            raise ValueError("tools and events count rows as 0, 1 or 2 (two or more)")

    def rows(self, row_set: str) -> int:
        """0, 1 or 2 (two or more) rows of ``row_set``."""
        return {"tools": self.tools, "events": self.events, "journal": 2, "results": 2}[row_set]

    @property
    def flags(self) -> frozenset[str]:
        """The ``-- when:`` names the blocks' conditional lines test."""
        writes_run = not self.new_run and not self.progress_only
        return frozenset(
            name
            for name, on in (
                ("new_run", self.new_run),
                ("run", writes_run),
                ("progress", self.progress_only),
                ("writes_run", not self.progress_only),
            )
            if on
        )


# The statement's WITH items in order, each as (item name, block in postgres_checkpoint.sql,
# whether a shape has it); then the main query, which reads only ``fence`` and ``run``.
_STEPS: tuple[tuple[str, str, Callable[[Shape], bool]], ...] = (
    ("fence", "fence", lambda s: True),
    ("new_run", "new_run", lambda s: s.new_run),
    ("run", "run", lambda s: not s.new_run and not s.progress_only),
    ("run", "run_progress", lambda s: s.progress_only),
    ("messages_added", "messages_added", lambda s: s.messages),
    ("tools_moved", "tools_moved", lambda s: bool(s.tools)),
    ("events_added", "events_added", lambda s: bool(s.events)),
    ("journal_added", "journal_added", lambda s: s.journal),
    ("results_added", "results_added", lambda s: s.results),
)


@dataclass(frozen=True)
class Parameters:
    """What a family of statements may name: scalars with their types, and row sets."""

    scalars: Mapping[str, str]
    row_sets: Mapping[str, RowSet]

    @functools.cached_property
    def order(self) -> dict[str, int]:
        """Numbering order: the scalars, then each row set's columns."""
        keys = [
            *self.scalars,
            *(f"{rs.name}.{column}" for rs in self.row_sets.values() for column, _ in rs.columns),
        ]
        return {key: number for number, key in enumerate(keys)}

    def row_set(self, name: str) -> RowSet:
        if name not in self.row_sets:
            raise ValueError(f"unknown checkpoint row set :{name}")
        return self.row_sets[name]


CHECKPOINT = Parameters(SCALARS, ROW_SETS)
# Placeholders that list a row set's columns rather than send them.
_LISTS = frozenset({"columns", "record", "values"})


def _in_json(element: str) -> str:
    """How a column of this type travels in a JSON document: a JSON value as the text of it
    (a string), so that it is stored verbatim, as a ``json`` parameter's text is."""
    return "text" if element in ("json", "jsonb") else element


# :name, :set.column, :set.column[] (never the second colon of a ``::type`` cast).
_PLACEHOLDER = re.compile(r"(?<![:\w]):([a-z_]+)(?:\.([a-z_]+)(\[\])?)?")


@dataclass(frozen=True)
class CheckpointStatement:
    """One shape's statement and the parameter names it takes, in order (``$1`` first)."""

    shape: Shape
    text: str
    params: tuple[str, ...]

    def arguments(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(values[name] for name in self.params)


def render(
    blocks: Sequence[tuple[str, str]], main: str, shape: Shape, parameters: Parameters = CHECKPOINT
) -> CheckpointStatement:
    """``WITH`` the ``(name, body)`` items, then ``main``, with every placeholder numbered in
    declaration order and typed for ``shape``. Unknown names are an error."""
    found: dict[str, None] = {}
    scalars, order = parameters.scalars, parameters.order

    def scan(match: re.Match[str]) -> str:
        name, column, _ = match.groups()
        if column is None:
            if name not in scalars:
                raise ValueError(f"unknown checkpoint parameter :{name}")
            found[name] = None
            return match.group(0)
        row_set = parameters.row_set(name)
        if column in _LISTS:
            return match.group(0)  # names and types only: no parameter
        for col, _type in row_set.columns if column == "each" else ((column, ""),):
            key = f"{name}.{col}"
            if key not in order:
                raise ValueError(f"unknown checkpoint parameter :{key}")
            found[key] = None
        return match.group(0)

    texts = [body for _, body in blocks] + [main]
    for text in texts:
        _PLACEHOLDER.sub(scan, text)
    params = tuple(sorted(found, key=order.__getitem__))
    numbers = {key: number for number, key in enumerate(params, 1)}

    def one(row_set: RowSet, column: str, whole: bool) -> str:
        key = f"{row_set.name}.{column}"
        element = dict(row_set.columns)[column]
        if row_set.single and shape.rows(row_set.name) == 1:
            if whole:
                raise ValueError(f":{key}[] of a row set that may be sent as plain values")
            return f"${numbers[key]}::{element}"
        array = f"${numbers[key]}::{element}[]"
        return array if whole else f"unnest({array})"

    def substitute(match: re.Match[str]) -> str:
        name, column, whole = match.groups()
        if column is None:
            return f"${numbers[name]}::{scalars[name]}"
        row_set = parameters.row_set(name)
        if column == "columns":
            return ", ".join(col for col, _ in row_set.columns)
        if column == "record":  # as json_to_recordset reads a row sent in a JSON document
            return ", ".join(f"{col} {_in_json(element)}" for col, element in row_set.columns)
        if column == "values":  # the record's columns with their declared types
            return ", ".join(
                col if _in_json(element) == element else f"{col}::{element} AS {col}"
                for col, element in row_set.columns
            )
        if column == "each":
            return ", ".join(one(row_set, col, False) for col, _ in row_set.columns)
        return one(row_set, column, bool(whole))

    items = [f"{name} AS (\n{_PLACEHOLDER.sub(substitute, body)}\n)" for name, body in blocks]
    text = "WITH " + ",\n".join(items) + "\n" + _PLACEHOLDER.sub(substitute, main)
    return CheckpointStatement(shape, text, params)


@functools.cache
def checkpoint_statement(shape: Shape) -> CheckpointStatement:
    """The checkpoint statement for ``shape``."""
    blocks = load_queries("postgres_checkpoint")
    flags = shape.flags
    kept = [(name, when(blocks[block], flags)) for name, block, has in _STEPS if has(shape)]
    return render(kept, when(blocks["main"], flags), shape)


def all_shapes() -> Iterator[Shape]:
    """Every shape a checkpoint can take (a large result comes only with a tool call)."""
    for new_run, messages, tools, events, progress, journal, results in itertools.product(
        (False, True), (False, True), (0, 1, 2), (0, 1, 2), (False, True), (False, True), (False, True)
    ):
        if not (new_run and progress) and not (results and not tools):
            yield Shape(new_run, messages, tools, events, progress, journal, results)


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint, as ``checkpoint`` sends it alone or ``group`` with others.
    ``checkpoint_id`` is unique to the checkpoint, whichever statements carry it.
    ``progress_only``: of the run, only the phase and the event count change (see migration
    0003); never for a new run. ``release``: the checkpoint gives the lease up (as a queued
    new run's does). ``first_seq``: the ``seq`` the first of ``messages`` gets (its session's
    message count before; ``None``: not known, no event refers to them)."""

    lease: Any
    run_id: str
    checkpoint_id: str
    messages: Sequence[dict[str, Any]] = ()
    tools: Sequence[ToolEntry] = ()
    events: Sequence[RunEvent] = ()
    run: tuple[Any, ...] | None = None
    new_run: dict[str, Any] | None = None
    events_channel: str | None = None
    work_channel: str | None = None
    progress_only: bool = False
    journal: Sequence[JournalRecord] = ()
    release: bool = False
    first_seq: int | None = None

    @functools.cached_property
    def bodies(self) -> list[tuple[str, str, str]]:
        """The large tool results it stores: ``(execution_key, kind, text)``."""
        return [(e.execution_key, kind, text) for e in self.tools for kind, text in tool_entry_bodies(e)]

    @property
    def groupable(self) -> bool:
        """Whether ``group`` can send it: a running run's checkpoint without a journal or a
        large tool result (rare; those go alone)."""
        return self.new_run is None and not self.journal and not self.bodies

    def event_rows(self) -> list[tuple[Any, ...]]:
        """Its events as the events row set's rows."""
        keys = result_keys(self.tools)
        first = self.first_seq
        answers = answers_of(self.messages if first is not None else (), first or 0, self.run)
        return [_event_row(event, keys, answers) for event in self.events]

    @property
    def last_seq(self) -> int:
        return max((int(event.cursor or 0) for event in self.events), default=0)


def checkpoint(point: Checkpoint, *, progress_only: bool | None = None) -> tuple[str, tuple[Any, ...]]:
    """The statement for this checkpoint's shape, and its parameters in order;
    ``progress_only`` overrides the checkpoint's own (``False``: send it whole)."""
    new_run, messages, tools, events = point.new_run, point.messages, point.tools, point.events
    progress = point.progress_only if progress_only is None else progress_only
    progress = progress and new_run is None
    bodies = point.bodies
    shape = Shape(
        new_run is not None,
        bool(messages),
        min(len(tools), 2),
        min(len(events), 2),
        progress,
        bool(point.journal),
        bool(bodies),
    )
    statement = checkpoint_statement(shape)
    queued = bool(new_run and new_run["queued"])
    schedule: Schedule | None = new_run.get("schedule") if queued and new_run else None
    lease = point.lease
    values: dict[str, Any] = {
        "session": lease.session_id,
        "owner": lease.owner,
        "generation": lease.generation,
        "checkpoint_id": point.checkpoint_id,
        "run": point.run_id,
        "messages": [dumps(message) for message in messages],
        "last_seq": point.last_seq,
        **dict(zip(_RUN_FIELDS, point.run or (None,) * len(_RUN_FIELDS), strict=True)),
        "request_message": new_run["request_message"] if new_run else None,
        "request_id": new_run["request_id"] if new_run else None,
        "release": queued or point.release,
        # One wake-up per checkpoint that adds events or a run, and one for queued work.
        "events_channel": point.events_channel if events or new_run else None,
        "work_channel": point.work_channel if queued else None,
        "priority": schedule.priority if schedule else None,
        "concurrency_key": schedule.concurrency_key if schedule else None,
        "tenant": schedule.group if schedule else None,
        "delay": schedule.wait if schedule else None,
    }
    if tools:
        _put_rows(values, shape, "tools", [tool_entry_columns(entry) for entry in tools])
    if events:
        _put_rows(values, shape, "events", point.event_rows())
    if point.journal:
        _put_rows(values, shape, "journal", _journal_rows(point.journal))
    if bodies:
        _put_rows(values, shape, "results", bodies)
    return statement.text, statement.arguments(values)


# ------------------------------------------------------------------ group commit

# The group statement's row sets (postgres_checkpoint_batch.sql): every one sent as arrays,
# each row naming its member (numbered from 1). ``tools`` and ``events`` are there for their
# column lists. The members' run fields are _RUN_FIELDS, typed as the scalars are.
GROUP_ROW_SETS: dict[str, RowSet] = {
    "members": RowSet(
        "members",
        (
            ("member", "integer"),
            ("session", "text"),
            ("owner", "text"),
            ("generation", "bigint"),
            ("checkpoint_id", "text"),
            ("run", "text"),
            ("messages", "integer"),
            ("last_seq", "bigint"),
            *((field, SCALARS[field]) for field in _RUN_FIELDS),
            ("release", "boolean"),
            ("progress_only", "boolean"),
            ("events_channel", "text"),
        ),
        single=False,
    ),
    "member_messages": RowSet(
        "member_messages", (("member", "integer"), ("position", "bigint"), ("body", "json")), single=False
    ),
    "member_tools": RowSet("member_tools", (("member", "integer"), *ROW_SETS["tools"].columns), single=False),
    "member_events": RowSet(
        "member_events", (("member", "integer"), *ROW_SETS["events"].columns), single=False
    ),
    "tools": ROW_SETS["tools"],
    "events": ROW_SETS["events"],
}
# Each row set travels as one JSON document (an array of objects, one per row): one
# parameter, encoded in one call, where 40 arrays would have the driver look at every element.
GROUP = Parameters(
    {name: "json" for name in ("members", "member_messages", "member_tools", "member_events")}, GROUP_ROW_SETS
)


@dataclass(frozen=True)
class GroupShape:
    """Which steps a group statement has: each is left out when no member has anything for
    it (``run``: some member writes its run's fields, not its progress alone)."""

    run: bool = False
    messages: bool = False
    tools: bool = False
    events: bool = False


_GROUP_STEPS: tuple[tuple[str, Callable[[GroupShape], bool]], ...] = (
    ("members", lambda s: True),
    ("fence", lambda s: True),
    ("run", lambda s: s.run),
    ("messages_added", lambda s: s.messages),
    ("tools_moved", lambda s: s.tools),
    ("events_added", lambda s: s.events),
)

# What the group statement answers for each member (see postgres_checkpoint_batch.sql).
WRITTEN, APPLIED, NOT_HELD, LOST = "written", "applied", "not_held", "lost"


@functools.cache
def group_statement(shape: GroupShape) -> CheckpointStatement:
    """The group statement for ``shape``."""
    blocks = load_queries("postgres_checkpoint_batch")
    flags = frozenset({"run"} if shape.run else ())
    kept = [(name, when(blocks[name], flags)) for name, has in _GROUP_STEPS if has(shape)]
    return render(kept, when(blocks["main"], flags), Shape(), GROUP)


def all_group_shapes() -> Iterator[GroupShape]:
    for flags in itertools.product((False, True), repeat=4):
        yield GroupShape(*flags)


def group(points: Sequence[Checkpoint]) -> tuple[str, tuple[Any, ...]]:
    """One statement that writes every checkpoint of ``points`` (each ``groupable``, of a
    different session), and its parameters; it answers one of ``WRITTEN``, ``APPLIED``,
    ``NOT_HELD`` or ``LOST`` per checkpoint, in order."""
    members: list[tuple[Any, ...]] = []
    messages: list[tuple[Any, ...]] = []
    tools: list[tuple[Any, ...]] = []
    events: list[tuple[Any, ...]] = []
    writes_run = False
    for number, point in enumerate(points, 1):
        lease = point.lease
        writes_run = writes_run or not point.progress_only
        members.append(
            (
                number,
                lease.session_id,
                lease.owner,
                lease.generation,
                point.checkpoint_id,
                point.run_id,
                len(point.messages),
                point.last_seq,
                *(point.run or (None,) * len(_RUN_FIELDS)),
                point.release,
                point.progress_only,
                point.events_channel if point.events else None,
            )
        )
        messages.extend((number, position, dumps(m)) for position, m in enumerate(point.messages, 1))
        tools.extend((number, *tool_entry_columns(entry)) for entry in point.tools)
        events.extend((number, *row) for row in point.event_rows())
    statement = group_statement(GroupShape(writes_run, bool(messages), bool(tools), bool(events)))
    values: dict[str, Any] = {}
    for name, rows in (
        ("members", members),
        ("member_messages", messages),
        ("member_tools", tools),
        ("member_events", events),
    ):
        if rows:
            names = [column for column, _ in GROUP_ROW_SETS[name].columns]
            values[name] = dumps([dict(zip(names, row, strict=True)) for row in rows])
    return statement.text, statement.arguments(values)


def _put_rows(values: dict[str, Any], shape: Shape, name: str, rows: Sequence[Sequence[Any]]) -> None:
    """``rows`` of row set ``name`` into ``values``: one value per column when the shape
    sends the one row as plain values, else one list per column."""
    row_set = ROW_SETS[name]
    keys = [f"{name}.{column}" for column, _ in row_set.columns]
    if row_set.single and shape.rows(name) == 1:
        values.update(zip(keys, rows[0], strict=True))
    else:
        values.update(zip(keys, _columns(rows, len(keys)), strict=True))


def _event_row(event: RunEvent, keys: Mapping[str, str], answers: Answers) -> tuple[Any, ...]:
    """The events row set's columns of one event."""
    return (
        int(event.cursor or 0),
        event.event_id,
        event.type.value,
        event.step_id,
        event.attempt_id,
        event_data(event, keys, answers),
    )


def _journal_rows(journal: Sequence[JournalRecord]) -> list[tuple[Any, ...]]:
    return [
        (r.id, r.kind, r.step_id, r.attempt_id, r.execution_key, r.recorded_at, dumps(r.payload))
        for r in journal
    ]


def journal_columns(journal: Sequence[JournalRecord]) -> list[list[Any]]:
    """The journal row set's columns, one list each (as create_session_run takes them)."""
    return _columns(_journal_rows(journal), len(ROW_SETS["journal"].columns))


def _columns(table: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    """Rows to one list per column (``width`` empty lists when there are no rows)."""
    return [list(column) for column in zip(*table, strict=True)] if table else [[] for _ in range(width)]
