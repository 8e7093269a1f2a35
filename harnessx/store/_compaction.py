"""Compacting a finished run's streamed text, shared by both dialects.

A run that streams stores one event per piece its provider sent (``text_delta``,
``thinking_delta``): 60 rows for a 960-character answer sent in 16-character pieces, and more
for a model that streams a few characters at a time. Once the run has finished, no piece is
added to them: pieces that follow each other (consecutive cursors, one type, one step and
attempt) are then stored as one row, the row of the last of them, whose payload becomes
``{"text": <the pieces' text>, "pieces": [<the length of each piece but the last>]}``; the
other pieces' rows go.

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
STREAMED = ("text_delta", "thinking_delta")


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
    last: int  # the cursor of the last piece so far
    text: list[str]
    pieces: list[int]  # the lengths of the pieces before the last, in order
    cursors: list[int]  # the rows' own cursors
    tail: int  # the length of the last piece


def _stored(data: Any) -> tuple[str, list[int]] | None:
    """A stored piece's text and, for a row compacted before, the lengths of its pieces but
    the last; ``None`` for a payload that is not one (a row stored before 0.2)."""
    value = json.loads(data) if isinstance(data, str) else data
    if isinstance(value, str):
        return value, []
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        pieces = value.get("pieces")
        if isinstance(pieces, list) and all(isinstance(n, int) and n >= 0 for n in pieces):
            return value["text"], pieces
    return None


def plan(rows: Sequence[Sequence[Any]], last_cursor: Mapping[str, int]) -> Plan:
    """The rows to write for ``rows``, the streamed events of finished runs (run id, cursor,
    type, step id, attempt id, payload as stored), in order of run and cursor. A run's last
    event (``last_cursor``) is never merged into: it ends the run (a run_result), and only a
    run still streaming could end with a piece."""
    result = Plan()
    group: _Group | None = None
    for run_id, seq, kind, step_id, attempt_id, data in rows:
        stored = _stored(data)
        cursor = int(seq)
        first = cursor - (len(stored[1]) if stored is not None else 0)
        follows = (
            group is not None
            and stored is not None
            and (group.run_id, group.kind, group.step_id, group.attempt_id)
            == (run_id, kind, step_id, attempt_id)
            and first == group.last + 1
            and cursor < last_cursor.get(run_id, 0)
        )
        if follows:
            assert group is not None and stored is not None
            text, pieces = stored
            group.pieces.extend([group.tail, *pieces])
            group.text.append(text)
            group.tail = len(text) - sum(pieces)
            group.last = cursor
            group.cursors.append(cursor)
            continue
        _close(group, result)
        group = None
        if stored is not None and cursor < last_cursor.get(run_id, 0):
            text, pieces = stored
            group = _Group(
                run_id,
                kind,
                step_id,
                attempt_id,
                cursor,
                [text],
                list(pieces),
                [cursor],
                len(text) - sum(pieces),
            )
    _close(group, result)
    return result


def _close(group: _Group | None, result: Plan) -> None:
    if group is None or len(group.cursors) < 2:
        return  # a piece alone stays as it is
    payload = json.dumps(
        {"text": "".join(group.text), "pieces": group.pieces}, separators=(",", ":"), ensure_ascii=False
    )
    result.kept.append((group.run_id, group.last, payload))
    # One range a stretch: nothing but its pieces lies between its first and last rows.
    result.gone.append((group.run_id, group.cursors[0], group.cursors[-2]))
    result.rows += len(group.cursors) - 1
    result.removed[group.run_id] = result.removed.get(group.run_id, 0) + len(group.cursors) - 1


def trimmed(value: Any, cursor: int, after: int) -> tuple[str, bool] | None:
    """The text of a stored streamed payload for a reader behind cursor ``after``, and whether
    it is cut (the reader saw some of its pieces); ``None`` when it is not a compacted one."""
    if not isinstance(value, dict):
        return None
    text, pieces = value.get("text"), value.get("pieces")
    if not isinstance(text, str) or not isinstance(pieces, list):
        return None
    first = cursor - len(pieces)
    if after < first:
        return text, False
    seen = after - first + 1  # pieces the reader saw: up to the one of cursor ``after``
    return text[sum(pieces[:seen]) :], True
