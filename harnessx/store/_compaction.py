"""Compacting a finished run's streamed text, shared by both dialects.

A run that streams stores one event per piece its provider sent (``text_delta``,
``thinking_delta``, and ``tool_call_delta`` for a tool call's arguments as the model writes
them): 60 rows for a 960-character answer sent in 16-character pieces, and more for a model
that streams a few characters at a time. Once the run has finished, no piece is added to
them: pieces that follow each other (consecutive cursors, one type, one step and attempt)
are then stored as one row, the row of the last of them, whose payload becomes
``{"text": <the pieces' text>, "pieces": [<the length of each piece but the last>]}``; the
other pieces' rows go.

A tool call's pieces merge only with pieces of the same call (its id and name), into one
``ToolCallDelta`` whose ``partial_json`` is the pieces joined: the row's payload is
``{"id", "name", "partial_json", "pieces"}``. The delta that starts a call (its name, no
arguments: how a consumer learns a call has begun) is never merged, so a compacted run reads
as the call's start, then all of its arguments in one piece.

Every cursor a client may hold still works. A reader behind a cursor before the merged
pieces reads the whole text in one event; behind a cursor of one of them (its client saw the
pieces up to it) it reads the rest of the text, from the next piece on (``trimmed``), with
the merged row's cursor, so it sees the same text as before, once. Such a trimmed event has
an id of its own (the row's id and the cursor it was read behind), so that a consumer that
drops replayed ids never takes it for the whole. A harnessx before compaction reads the row
as a payload of a release before 0.2 (``{"text": ...}``): the whole text, right from any
cursor before the merged pieces.

What is compacted, and when, is the store's (``Store.compact_events``); this module decides
the rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["STREAMED", "Plan", "plan", "trimmed"]

# The event types whose payload is a piece of streamed text.
STREAMED = ("text_delta", "thinking_delta", "tool_call_delta")
_CALL_DELTA = "tool_call_delta"


@dataclass
class Plan:
    """What compacting some runs writes: ``kept`` the rows that take their neighbours' text
    (run id, cursor, new payload), ``gone`` the rows merged into them, as ranges of cursors
    (run id, first, last: every row of the run in it is a piece of the stretch), ``rows`` how
    many those ranges hold, ``removed`` how many of them are each run's."""

    kept: list[tuple[str, int, str]] = field(default_factory=list)
    gone: list[tuple[str, int, int]] = field(default_factory=list)
    rows: int = 0
    removed: dict[str, int] = field(default_factory=dict)  # per run: rows the ranges hold


@dataclass
class _Group:
    run_id: str
    kind: str
    step_id: str
    attempt_id: str
    call: tuple[str, str] | None  # a tool call's id and name; None for text
    last: int  # the cursor of the last piece so far
    text: list[str]
    pieces: list[int]  # the lengths of the pieces before the last, in order
    cursors: list[int]  # the rows' own cursors
    tail: int  # the length of the last piece


@dataclass
class _Stored:
    text: str
    pieces: list[int]  # for a row compacted before: the lengths of its pieces but the last
    call: tuple[str, str] | None


def _pieces(value: dict[str, Any]) -> list[int] | None:
    pieces = value.get("pieces", [])
    if isinstance(pieces, list) and all(isinstance(n, int) and n >= 0 for n in pieces):
        return pieces
    return None


def _stored(kind: str, data: Any) -> _Stored | None:
    """A stored piece; ``None`` for a payload that is not one to merge (a row stored before
    0.2, the start of a tool call)."""
    value = json.loads(data) if isinstance(data, str) else data
    if kind == _CALL_DELTA:
        if not isinstance(value, dict) or not value.get("partial_json"):
            return None
        text, call_id, name = value["partial_json"], value.get("id"), value.get("name")
        pieces = _pieces(value)
        if not isinstance(text, str) or not isinstance(call_id, str) or not isinstance(name, str):
            return None
        return None if pieces is None else _Stored(text, pieces, (call_id, name))
    if isinstance(value, str):
        return _Stored(value, [], None)
    if isinstance(value, dict) and isinstance(value.get("text"), str) and "pieces" in value:
        pieces = _pieces(value)
        return None if pieces is None else _Stored(value["text"], pieces, None)
    return None


def plan(rows: Sequence[Sequence[Any]], last_cursor: Mapping[str, int]) -> Plan:
    """The rows to write for ``rows``, the streamed events of finished runs (run id, cursor,
    type, step id, attempt id, payload as stored), in order of run and cursor. A run's last
    event (``last_cursor``) is never merged into: it ends the run (a run_result), and only a
    run still streaming could end with a piece."""
    result = Plan()
    group: _Group | None = None
    for run_id, seq, kind, step_id, attempt_id, data in rows:
        stored = _stored(kind, data)
        cursor = int(seq)
        first = cursor - (len(stored.pieces) if stored is not None else 0)
        follows = (
            group is not None
            and stored is not None
            and (group.run_id, group.kind, group.step_id, group.attempt_id, group.call)
            == (run_id, kind, step_id, attempt_id, stored.call)
            and first == group.last + 1
            and cursor < last_cursor.get(run_id, 0)
        )
        if follows:
            assert group is not None and stored is not None
            group.pieces.extend([group.tail, *stored.pieces])
            group.text.append(stored.text)
            group.tail = len(stored.text) - sum(stored.pieces)
            group.last = cursor
            group.cursors.append(cursor)
            continue
        _close(group, result)
        group = None
        if stored is not None and cursor < last_cursor.get(run_id, 0):
            group = _Group(
                run_id,
                kind,
                step_id,
                attempt_id,
                stored.call,
                cursor,
                [stored.text],
                list(stored.pieces),
                [cursor],
                len(stored.text) - sum(stored.pieces),
            )
    _close(group, result)
    return result


def _close(group: _Group | None, result: Plan) -> None:
    if group is None or len(group.cursors) < 2:
        return  # a piece alone stays as it is
    merged: dict[str, Any] = {"text": "".join(group.text), "pieces": group.pieces}
    if group.call is not None:
        # A ToolCallDelta's fields, so that a reader that knows no compaction (a harnessx
        # before it) reads the whole of the pieces as one delta.
        call_id, name = group.call
        merged = {"id": call_id, "name": name, "partial_json": merged["text"], "pieces": group.pieces}
    payload = json.dumps(merged, separators=(",", ":"), ensure_ascii=False)
    result.kept.append((group.run_id, group.last, payload))
    # One range a stretch: nothing but its pieces lies between its first and last rows.
    result.gone.append((group.run_id, group.cursors[0], group.cursors[-2]))
    result.rows += len(group.cursors) - 1
    result.removed[group.run_id] = result.removed.get(group.run_id, 0) + len(group.cursors) - 1


def trimmed(kind: str, value: Any, cursor: int, after: int) -> tuple[Any, bool] | None:
    """The payload of a stored streamed ``kind`` event for a reader behind cursor ``after``
    (the text; for a tool call's pieces, the delta's fields), and whether it is cut (the
    reader saw some of its pieces); ``None`` when it is not a compacted one."""
    if not isinstance(value, dict):
        return None
    text, pieces = value.get("partial_json" if kind == _CALL_DELTA else "text"), value.get("pieces")
    if not isinstance(text, str) or not isinstance(pieces, list):
        return None
    first = cursor - len(pieces)
    cut = after >= first
    if cut:
        seen = after - first + 1  # pieces the reader saw: up to the one of cursor ``after``
        text = text[sum(pieces[:seen]) :]
    if kind == _CALL_DELTA:
        return {"id": value.get("id"), "name": value.get("name"), "partial_json": text}, cut
    return text, cut
