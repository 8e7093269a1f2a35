"""The runs listing: one named statement per dialect, narrowed to the filters given.

``list_runs`` in ``sql/<dialect>.sql`` holds every filter, one per line, each line ending in
``-- when: NAME``. ``list_statement`` keeps the lines of the filters given and drops the
others, so each combination of filters is a statement of its own: the planner sees only the
conditions that apply (a ``(:x IS NULL OR col = :x)`` condition would keep SQLite and a
generic PostgreSQL plan from using an index), and asyncpg prepares each once.
Parameters are named (``:status``); for PostgreSQL they become ``$1``, ``$2``... in order.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from harnessx._errors import ConfigurationError
from harnessx._results import RunStatus
from harnessx.store._protocol import RunFilter, RunKey
from harnessx.store._queries import load_queries

__all__ = ["STATUSES", "ListQuery", "decode_key", "encode_key", "list_query", "list_statement"]

# What a runs listing filters on: a run status, or "queued" (a pool run no worker holds yet;
# stored as running).
STATUSES = ("queued", *(status.value for status in RunStatus))

_WHEN = re.compile(r"\s*--\s*when:\s*([a-z_]+)\s*$")
_PARAM = re.compile(r"(?<![:\w]):([a-z_]+)\b")
MAX_LIMIT = 500


@dataclass(frozen=True)
class ListQuery:
    """A statement with its parameters: named (a dict, SQLite) or positional (PostgreSQL)."""

    sql: str
    args: dict[str, Any] | list[Any]


@cache
def list_statement(dialect: str, given: frozenset[str]) -> tuple[str, tuple[str, ...]]:
    """``list_runs`` keeping only the lines of the filters in ``given``; with the order of
    its parameters (for PostgreSQL's ``$n``)."""
    Q = load_queries(dialect)
    kept = []
    for line in Q["list_runs"].splitlines():
        match = _WHEN.search(line)
        if match is None:
            kept.append(line)
        elif match.group(1) in given:
            kept.append(line[: match.start()])
    sql = "\n".join(kept)
    if dialect == "sqlite":
        return sql, ()
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in order:
            order.append(name)
        return f"${order.index(name) + 1}"

    return _PARAM.sub(number, sql), tuple(order)


def _same(value: Any, exact: bool = False) -> Any:
    return value


def list_query(
    dialect: str, where: RunFilter, *, limit: int, before: RunKey | None, time: Any = _same
) -> ListQuery:
    """The statement and parameters for one page of ``limit`` runs (it asks for one more, to
    tell whether another page follows); ``time`` converts a filter's epoch seconds
    and a cursor's time to what the dialect compares ``created_at`` with."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ConfigurationError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    values: dict[str, Any] = {"limit": limit + 1}
    given = set()
    for item in fields(where):
        value = getattr(where, item.name)
        if value is None or value == "":
            continue
        if item.name == "status":
            if value not in STATUSES:
                raise ConfigurationError(f"unknown run status {value!r}: use one of {', '.join(STATUSES)}")
            if value == "queued":
                given.add("queued")
                continue
            if value == "running":
                given.add("not_queued")  # a queued run is listed as queued
        if item.name in ("created_from", "created_to"):
            value = time(value)
        given.add(item.name)
        values[item.name] = value
    if before is not None:
        given.add("before")
        values["before_at"], values["before_id"] = time(before[0], exact=True), before[1]
    sql, order = list_statement(dialect, frozenset(given))
    if dialect == "sqlite":
        return ListQuery(sql, values)
    return ListQuery(sql, [values[name] for name in order])


def encode_key(key: RunKey) -> str:
    """A listing cursor as an opaque, URL-safe string (for ``?before=`` and ``--before``)."""
    text = json.dumps([key[0], key[1]], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_key(text: str) -> RunKey:
    """The cursor ``encode_key`` made; ``ConfigurationError`` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        at, run_id = json.loads(raw)
        if isinstance(at, bool) or not isinstance(at, int | float) or not isinstance(run_id, str):
            raise ValueError("not a cursor")
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(
            f"invalid page cursor {text!r}: pass the cursor a listing gave, or leave it out for the "
            "newest runs"
        ) from exc
    return (at, run_id)
