"""Rows to objects and back, shared by both dialects.

A row that does not decode is reported as a ``StorageError`` naming the row and what to
do, never as a bare ``JSONDecodeError`` from deep inside a resume.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from harnessx._errors import StorageError
from harnessx._events import RunEvent, RunEventType
from harnessx._results import RunStatus, ToolResult
from harnessx._state import Delta, Phase, RunState, ToolEntry, ToolStatus
from harnessx.providers._base import TokenUsage, ToolCall
from harnessx.store._protocol import RunRecord

__all__ = [
    "dumps",
    "event_from_row",
    "loads",
    "run_record",
    "run_values",
    "tool_entry_columns",
    "tool_entry_from_row",
    "tool_entry_values",
]


# One encoder for every row: json.dumps with options builds a new encoder on each call, which
# is a measurable part of a checkpoint's client-side cost.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


def dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def loads(text: Any, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise StorageError(
            f"corrupt {what} in the harnessx store ({exc}); the row was written by something other than "
            "harnessx or damaged on disk: restore it from a backup, or cancel the run to move on"
        ) from exc


def run_record(row: Sequence[Any]) -> RunRecord:
    (
        run_id,
        session_id,
        request_id,
        message,
        status,
        phase,
        event_count,
        iteration,
        usage,
        output,
        stop_reason,
    ) = row[:11]
    error, usage_incomplete, history_length = row[11:14]
    what = f"run {run_id}"
    result = {
        "session_id": session_id,
        "run_id": run_id,
        "output": output,
        "status": status,
        "stop_reason": stop_reason,
        "usage": loads(usage, what + " usage") or {},
        "error": loads(error, what + " error"),
        "usage_incomplete": bool(usage_incomplete),
        "iteration": int(iteration),
        "history_length": int(history_length),
    }
    return RunRecord(run_id, session_id, request_id, message, status, phase, int(event_count), result)


def state_from(record: RunRecord, messages: list[dict[str, Any]], entries: list[ToolEntry]) -> RunState:
    data = record.result
    try:
        return RunState(
            session_id=record.session_id,
            run_id=record.id,
            status=RunStatus(record.status),
            phase=Phase(record.phase),
            iteration=int(data["iteration"]),
            messages=messages,
            tools={e.execution_key: e for e in entries},
            usage=TokenUsage.from_dict(data["usage"]),
            output=str(data["output"]),
            stop_reason=str(data["stop_reason"]),
            error=data["error"],
            usage_incomplete=bool(data["usage_incomplete"]),
            history_length=int(data["history_length"]),
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise StorageError(
            f"corrupt run {record.id} in the harnessx store ({exc}): restore it from a backup, "
            "or cancel the run to move on"
        ) from exc


def tool_entry_columns(entry: ToolEntry) -> tuple[Any, ...]:
    """execution_key, iteration, idx, call, policy, status, attempt, approved, raw_result,
    result: a tool entry's own columns, as both dialects store them."""
    raw, result = entry.raw_result, entry.result
    return (
        entry.execution_key,
        entry.iteration,
        entry.index,
        dumps(entry.call.to_dict()),
        entry.policy,
        entry.status.value,
        entry.attempt,
        bool(entry.approved),
        dumps(raw.to_dict()) if raw else None,
        dumps(result.to_dict()) if result else None,
    )


def tool_entry_values(entry: ToolEntry, run_id: str, generation: int, now: float) -> tuple[Any, ...]:
    """A tool_calls row: its own columns with the run, the writing generation and the time."""
    key, *columns = tool_entry_columns(entry)
    return (key, run_id, *columns, generation, now)


def tool_entry_from_row(row: Sequence[Any]) -> ToolEntry:
    key, iteration, index, call, policy, status, attempt, approved, raw_result, result, generation = row
    what = f"tool call {key}"
    try:
        raw = loads(raw_result, what)
        final = loads(result, what)
        return ToolEntry(
            execution_key=key,
            iteration=int(iteration),
            index=int(index),
            call=ToolCall.from_dict(loads(call, what)),
            policy=str(policy),
            status=ToolStatus(status),
            attempt=int(attempt),
            approved=bool(approved),
            raw_result=ToolResult.from_dict(raw) if raw else None,
            result=ToolResult.from_dict(final) if final else None,
            generation=int(generation),
        )
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        if isinstance(exc, StorageError):
            raise
        raise StorageError(f"corrupt {what} in the harnessx store ({exc}): restore it from a backup") from exc


def event_from_row(row: Sequence[Any], session_id: str = "") -> RunEvent:
    seq, event_id, kind, step_id, attempt_id, data, run_id = row
    try:
        return RunEvent(
            type=RunEventType(kind),
            data=loads(data, f"event {seq} of run {run_id}") or {},
            session_id=session_id,
            run_id=run_id,
            step_id=step_id,
            attempt_id=attempt_id,
            event_id=event_id,
            cursor=str(seq),
        )
    except ValueError as exc:
        if isinstance(exc, StorageError):
            raise
        raise StorageError(f"corrupt event {seq} of run {run_id} ({exc}): restore it from a backup") from exc


def run_values(state: RunState, delta: Delta) -> tuple[Any, ...]:
    """The run's fields once ``delta`` is applied, as a checkpoint writes them: status,
    phase, iteration, usage, output, stop_reason, error, usage_incomplete. (Written out
    field by field: this runs on every checkpoint.)"""
    changed = delta.run
    status = changed.get("status", state.status)
    phase = changed.get("phase", state.phase)
    error = changed.get("error", state.error)
    return (
        status.value if isinstance(status, RunStatus) else RunStatus(status).value,
        phase.value if isinstance(phase, Phase) else Phase(phase).value,
        int(changed.get("iteration", state.iteration)),
        dumps(changed.get("usage", state.usage).to_dict()),
        changed.get("output", state.output),
        changed.get("stop_reason", state.stop_reason),
        dumps(error) if error else None,
        bool(changed.get("usage_incomplete", state.usage_incomplete)),
    )
