"""Rows to objects and back, shared by both dialects.

A row that does not decode, or a run that breaks the rules every run keeps
(``_integrity``), is reported as a ``CorruptStateError`` naming the run, what is wrong and
what to do: never as a bare ``JSONDecodeError`` or ``ValueError`` from deep inside a resume.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harnessx._errors import CorruptStateError
from harnessx._events import RunEvent, RunEventType, decode_data, encode_data
from harnessx._journal import RECORD_VERSION
from harnessx._results import RunResult, RunStatus, ToolResult
from harnessx._state import UNCHANGED, Delta, Phase, RunState, ToolEntry, ToolStatus
from harnessx.providers._base import TokenUsage, ToolCall
from harnessx.store._compaction import STREAMED, trimmed
from harnessx.store._integrity import call_problem, state_problem
from harnessx.store._legacy import NEEDS_CALL, upgrade_event
from harnessx.store._protocol import Action, RunRecord, RunRow
from harnessx.store._records import listed_status

__all__ = [
    "ANSWER_REF",
    "INLINE_RESULT",
    "Answers",
    "LARGE_RESULT",
    "action_from_row",
    "answers_of",
    "corrupt_run",
    "decode_state",
    "dumps",
    "event_data",
    "event_result_key",
    "events_from_rows",
    "fill_calls",
    "final_result",
    "has_result_refs",
    "journal_record_from_row",
    "loads",
    "result_keys",
    "run_record",
    "run_row",
    "run_values",
    "tool_entry_bodies",
    "tool_entries",
    "tool_entry_columns",
    "tool_entry_values",
]

# A tool result longer than this (in characters) is stored once, as a row of tool_results
# written when the result first appears; the tool call's columns and the tool_result event
# then carry a small reference in place of the text. Shorter results
# stay inline, so an ordinary checkpoint writes what it always wrote.
LARGE_RESULT = 16_384
# A tool result longer than this (and up to LARGE_RESULT) is stored whole once on its tool
# call's row: a final result that is the raw one unchanged names the raw column
# (["tool_results", "raw", ...]) and the tool_result event refers to the call, instead of
# repeating the text; the conversation keeps its own copy (or preview). Both are the shapes
# large results already use, so every harnessx of this schema reads them.
INLINE_RESULT = 1_024
# In a tool_calls column the reference is a JSON list, ["tool_results", kind, is_error,
# tool_call_id], not an object: a harnessx of the previous schema, still running during a
# rollout, refuses such a row as corrupt (a result that is not an object) instead of reading
# it as an empty result. In an event it is the key "content_ref".
_COLUMN_REF = "tool_results"
_REF = "content_ref"
_REF_KEY = "result_of"
# A run's answer is kept whole in the conversation (the assistant message the model reads)
# and on the run row (its output); its events refer to those instead of repeating it. A
# text_complete event whose text is the content of an assistant message committed in the
# same write stores {"content_ref": "message", "seq": N, "chars": L} (N: the message's place
# in its session's conversation; L: the text's length, which reading checks), and the
# run_result event of a completed run whose output the same write puts on the run row stores
# its payload without "output", with "content_ref": "output" (a completed run's row is never
# written again). read_events' one statement joins
# both in. Texts of ANSWER_REF characters or fewer stay inline: a reference would save little.
ANSWER_REF = 64
_MESSAGE_REF = "message"
_OUTPUT_REF = "output"


# One encoder for every row: json.dumps with options builds a new encoder on each call, which
# is a measurable part of a checkpoint's client-side cost.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


def dumps(value: Any) -> str:
    return _ENCODER.encode(value)


_ADVICE = (
    "the row was written by something other than harnessx, or damaged on disk: restore the database "
    "from a backup, or cancel the run to move on"
)


def loads(text: Any, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise CorruptStateError(f"corrupt {what} in the harnessx store ({exc}); {_ADVICE}") from exc


def _decoded(text: Any, what: str) -> Any:
    """``loads`` for the parts of a run: the bare problem, which the caller puts in context."""
    try:
        return json.loads(text) if text is not None else None
    except (TypeError, ValueError) as exc:
        raise _Undecodable(f"{what} is not JSON ({exc})") from exc


class _Undecodable(Exception):
    """Internal: what is wrong with one part of a run's rows."""


def run_record(row: Sequence[Any]) -> RunRecord:
    """A run's row. Never raises: a row that does not decode keeps what can be read, and
    says what cannot in ``problem`` (``load_state`` refuses it; listing, following,
    cancelling and failing it still work)."""
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
    queued, start_attempts = (bool(row[14]), _int_or(row[15], 0)) if len(row) > 14 else (False, 0)
    result: dict[str, Any] = {
        "session_id": session_id,
        "run_id": run_id,
        "output": output if isinstance(output, str) else "",
        "status": status,
        "stop_reason": stop_reason if isinstance(stop_reason, str) else "",
        "usage": {},
        "error": None,
        "usage_incomplete": bool(usage_incomplete),
        "iteration": 0,
        "history_length": 0,
    }
    problem = None
    try:
        known = RunStatus(status)
    except ValueError:
        # Such a row stands for no run that can go on: as a failed one, which listing,
        # cancelling and erasing treat as finished, as they did the unknown text.
        known = RunStatus.FAILED
        problem = f"its row: status {status!r} is not a run status"
    try:
        decoded_usage = _decoded(usage, "usage") or {}
        TokenUsage.from_dict(decoded_usage)  # raises on a field that is not a number
        result["usage"] = decoded_usage
        decoded_error = _decoded(error, "error")
        if decoded_error is not None and not isinstance(decoded_error, dict):
            raise _Undecodable("error is not an object")
        result["error"] = decoded_error
        result["iteration"] = _int(iteration, "iteration")
        result["history_length"] = _int(history_length, "history_length")
        event_count = _int(event_count, "event_count")
    except (_Undecodable, TypeError, ValueError, AttributeError) as exc:
        problem = problem or f"its row: {exc}"
        event_count = _int_or(event_count, 0)
    return RunRecord(
        str(run_id),
        str(session_id),
        request_id,
        message if isinstance(message, str) else "",
        known,
        str(phase),
        event_count,
        result,
        queued=queued,
        start_attempts=start_attempts,
        problem=problem,
    )


def _int(value: Any, what: str) -> int:
    # int() would take 2.5 as 2 and "abc" with a bare ValueError; both drivers return an
    # int for every integer column harnessx wrote, so anything else is corrupt.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Undecodable(f"{what} is {value!r}, not an integer")
    return value


def _int_or(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def corrupt_run(run_id: str, session_id: str, problem: str) -> CorruptStateError:
    """The one error for a run whose rows cannot be driven, naming the run and what to do."""
    return CorruptStateError(
        f"run {run_id} of session {session_id} cannot be loaded: {problem}; {_ADVICE} "
        f"(AgentRuntime.cancel() on that session, or 'harnessx cancel {session_id}' with the "
        "same --dsn or --sqlite)"
    )


def decode_state(
    record: RunRecord,
    message_bodies: Sequence[Any],
    tool_rows: Sequence[Sequence[Any]],
    result_bodies: Mapping[tuple[str, str], str] | None = None,
) -> RunState:
    """A run's state from its rows, checked (``_integrity``); ``CorruptStateError`` otherwise.
    ``result_bodies`` maps ``(execution_key, kind)`` to a large result's text."""
    if record.problem is not None:
        raise corrupt_run(record.id, record.session_id, record.problem)
    data = record.result
    try:
        messages = []
        for index, body in enumerate(message_bodies):
            message = _decoded(body, f"message {index + 1} of the session")
            messages.append(message)
        entries = [_tool_entry(row, result_bodies or {}) for row in tool_rows]
        state = RunState(
            session_id=record.session_id,
            run_id=record.id,
            status=record.status,
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
            # Attempts are not stored; a run that has called the model made at least one.
            attempt=0
            if Phase(record.phase) is Phase.PREPARE_MODEL_CALL and int(data["iteration"]) == 0
            else 1,
        )
        problem = state_problem(state)
    except (_Undecodable, KeyError, ValueError, TypeError, AttributeError) as exc:
        problem = str(exc)
    if problem is not None:
        raise corrupt_run(record.id, record.session_id, problem)
    return state


def _tool_entry(row: Sequence[Any], bodies: Mapping[tuple[str, str], str]) -> ToolEntry:
    key, iteration, index, call, policy, status, attempt, approved, raw_result, result, generation = row
    where = f"tool call {key}"
    try:
        decoded_call = _decoded(call, "its call")
        problem = call_problem(decoded_call)
        if problem is not None:
            raise _Undecodable(problem)
        raw = _dereferenced(_decoded(raw_result, "its raw result"), str(key), bodies, None)
        final = _dereferenced(_decoded(result, "its result"), str(key), bodies, raw)
        for part in (raw, final):
            if part is not None and not isinstance(part, dict):
                raise _Undecodable("a result is not an object")
        settings = decoded_call.get("settings") or {}  # absent before 0.2
        return ToolEntry(
            execution_key=str(key),
            iteration=_int(iteration, "iteration"),
            index=_int(index, "index"),
            call=ToolCall.from_dict(decoded_call),
            policy=str(policy),
            status=ToolStatus(status),
            attempt=_int(attempt, "attempt"),
            approved=bool(approved),
            raw_result=ToolResult.from_dict(raw) if raw else None,
            result=ToolResult.from_dict(final) if final else None,
            generation=_int_or(generation, 0),
            concurrent=bool(settings.get("concurrent", False)),
            timeout=settings.get("timeout"),
            retry=settings.get("retry"),
        )
    except (_Undecodable, KeyError, ValueError, TypeError, AttributeError) as exc:
        raise _Undecodable(f"{where}: {exc}") from exc


def _large(result: ToolResult | None) -> bool:
    return result is not None and len(result.content) > LARGE_RESULT


def _same(first: ToolResult | None, second: ToolResult | None) -> bool:
    return (
        first is not None
        and second is not None
        and first.content == second.content
        and first.is_error == second.is_error
    )


def _column(result: ToolResult | None, ref: str | None) -> str | None:
    if result is None:
        return None
    if ref is None:
        return dumps(result.to_dict())
    return dumps([_COLUMN_REF, ref, result.is_error, result.tool_call_id])


def tool_entry_bodies(entry: ToolEntry) -> list[tuple[str, str]]:
    """The ``(kind, text)`` rows of tool_results this move of ``entry`` writes: a large raw
    result when it arrives (``raw_completed``), and a large final result when it arrives
    (``completed``) unless it is the raw result unchanged."""
    bodies = []
    raw, result = entry.raw_result, entry.result
    if entry.status is ToolStatus.RAW_COMPLETED and raw is not None and _large(raw):
        bodies.append(("raw", raw.content))
    if (
        entry.status is ToolStatus.COMPLETED
        and result is not None
        and _large(result)
        and not _same(result, raw)
    ):
        bodies.append(("result", result.content))
    return bodies


def _dereferenced(part: Any, key: str, bodies: Mapping[tuple[str, str], str], raw: Any) -> Any:
    """A stored result with its reference replaced by the text it names (anything else is
    returned as it is, for the caller to check)."""
    if not (isinstance(part, list) and len(part) == 4 and part[0] == _COLUMN_REF):
        return part
    _, ref, is_error, call_id = part
    # A final result that is the raw one unchanged names "raw": ``raw`` is already whole.
    whole = isinstance(raw, dict) and isinstance(raw.get("content"), str)
    text = raw["content"] if ref == "raw" and whole else bodies.get((key, str(ref)))
    if not isinstance(text, str):
        raise _Undecodable(f"its {ref} result is stored apart, and that row is missing")
    return {"tool_call_id": str(call_id), "content": text, "is_error": bool(is_error)}


def has_result_refs(tool_rows: Sequence[Sequence[Any]]) -> bool:
    """Whether any of these tool_calls rows keeps a result apart (their raw_result and
    result columns are the 9th and 10th)."""
    return any(str(row[8] or "").startswith(_MARKER) or _names_a_body(row[9]) for row in tool_rows)


_MARKER = f'["{_COLUMN_REF}"'


def _names_a_body(result: Any) -> bool:
    """Whether a final result column refers to a tool_results row: one naming the raw result
    needs none unless the raw column does (which is read with it)."""
    text = str(result or "")
    if not text.startswith(_MARKER):
        return False
    part = _safe_loads(text)
    return not (isinstance(part, list) and len(part) > 1 and part[1] == "raw")


def final_result(raw_result: Any, result: Any, key: str, bodies: Mapping[tuple[str, str], str]) -> str | None:
    """The text of a tool call's final result (its raw one while it has no final one), from
    its columns and its stored bodies; ``None`` when it has neither."""
    try:
        raw = _dereferenced(_decoded(raw_result, "raw result"), key, bodies, None)
        final = _dereferenced(_decoded(result, "result"), key, bodies, raw)
    except _Undecodable as exc:
        raise CorruptStateError(f"tool call {key} in the harnessx store: {exc}; {_ADVICE}") from exc
    chosen = final or raw
    return str(chosen.get("content", "")) if isinstance(chosen, dict) else None


def result_keys(tools: Sequence[ToolEntry]) -> dict[str, str]:
    """For the tool entries a write commits: the execution key of each call (by call id)
    whose final result arrives now and is longer than ``INLINE_RESULT``, for
    ``event_data``: its event refers to the call's row instead of repeating the text."""
    return {
        entry.call.id: entry.execution_key
        for entry in tools
        if entry.status is ToolStatus.COMPLETED
        and entry.result is not None
        and len(entry.result.content) > INLINE_RESULT
    }


@dataclass(frozen=True)
class Answers:
    """What one write stores that its events may refer to instead of repeating: the texts
    of the assistant messages it appends, each with its ``seq``, and the output it puts on
    the row of a run it completes (``None``: none)."""

    messages: Mapping[str, int] = field(default_factory=dict)
    output: str | None = None


def answers_of(messages: Sequence[Mapping[str, Any]], first_seq: int, run: Sequence[Any] | None) -> Answers:
    """The ``Answers`` of a write appending ``messages`` from ``first_seq`` on and writing
    the run's fields ``run`` (``run_values``' order: status first, output fifth)."""
    texts = {
        str(message["content"]): first_seq + offset
        for offset, message in enumerate(messages)
        if message.get("role") == "assistant"
        and isinstance(message.get("content"), str)
        and len(message["content"]) > ANSWER_REF
    }
    completed = run is not None and run[0] == RunStatus.COMPLETED.value and isinstance(run[4], str)
    return Answers(texts, str(run[4]) if run is not None and completed else None)


def event_data(event: RunEvent, keys: Mapping[str, str] | None = None, answers: Answers | None = None) -> str:
    """An event's payload as the ``data`` column stores it (``encode_data``). A
    ``tool_result`` event of a result over ``INLINE_RESULT`` committed in the same write (``keys``, from
    ``result_keys``) refers to its tool call instead of repeating the text, and an answer's
    events to what the same write stores of it (``answers``); the live event keeps it all."""
    data = event.data
    if keys and event.type is RunEventType.TOOL_RESULT and isinstance(data, ToolResult):
        key = keys.get(data.tool_call_id)
        if key is not None and len(data.content) > INLINE_RESULT:
            return dumps({**data.to_dict(), "content": None, _REF: "tool_call", _REF_KEY: key})
    if answers is not None:
        if event.type is RunEventType.TEXT_COMPLETE and isinstance(data, str):
            seq = answers.messages.get(data)
            if seq is not None:
                # Its length too: reading checks that the message found is this text's.
                return dumps({_REF: _MESSAGE_REF, "seq": seq, "chars": len(data)})
        if (
            event.type is RunEventType.RUN_RESULT
            and isinstance(data, RunResult)
            and data.status is RunStatus.COMPLETED
            and answers.output is not None
            and len(data.output) > ANSWER_REF
            and data.output == answers.output
        ):
            payload = {k: v for k, v in data.to_dict().items() if k != "output"}
            return dumps({**payload, _REF: _OUTPUT_REF})
    return dumps(encode_data(event.type, data))


def _result_ref(value: Any) -> str | None:
    if isinstance(value, dict) and value.get(_REF) == "tool_call":
        # Rows written before typed payloads name the call by their own execution_key.
        return str(value.get(_REF_KEY) or value.get("execution_key") or "")
    return None


def event_result_key(data: Any) -> str | None:
    """The tool call whose final result a stored event refers to, if it does."""
    if isinstance(data, str) and _REF not in data:
        return None
    return _result_ref(data if isinstance(data, dict) else _safe_loads(data))


def _safe_loads(text: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def tool_entry_columns(entry: ToolEntry) -> tuple[Any, ...]:
    """execution_key, iteration, idx, call, policy, status, attempt, approved, raw_result,
    result: a tool entry's own columns, as both dialects store them (a large result as a
    reference to its tool_results row; see ``tool_entry_bodies``)."""
    raw, result = entry.raw_result, entry.result
    raw_ref = "raw" if _large(raw) else None
    repeated = _same(result, raw) and result is not None and len(result.content) > INLINE_RESULT
    result_ref = "raw" if repeated else "result" if _large(result) else None
    # The tool's settings ride with the call: both are written once, when the call is prepared.
    call = {
        **entry.call.to_dict(),
        "settings": {"concurrent": entry.concurrent, "timeout": entry.timeout, "retry": entry.retry},
    }
    return (
        entry.execution_key,
        entry.iteration,
        entry.index,
        dumps(call),
        entry.policy,
        entry.status.value,
        entry.attempt,
        bool(entry.approved),
        _column(raw, raw_ref),
        _column(result, result_ref),
    )


def tool_entry_values(entry: ToolEntry, run_id: str, generation: int, now: float) -> tuple[Any, ...]:
    """A tool_calls row: its own columns with the run, the writing generation and the time."""
    key, *columns = tool_entry_columns(entry)
    return (key, run_id, *columns, generation, now)


def events_from_rows(rows: Sequence[Sequence[Any]], after: int = 0) -> tuple[list[RunEvent], dict[int, str]]:
    """Events from ``read_events`` rows behind cursor ``after`` (seq, event_id, type, step_id,
    attempt_id, data, run_id, session_id, then for an event that refers to its tool call's
    result: the call's execution_key, raw_result and result columns and its large results as
    a JSON array of ``[kind, body]``), and the events (by position) whose call must be filled
    in from the run's tool calls, by execution key: ``tool_call_complete`` rows stored before
    0.2. A compacted row of streamed text gives the text a reader behind ``after`` has not
    seen (``_compaction``)."""
    results = _referred_results(rows)
    events: list[RunEvent] = []
    missing: dict[int, str] = {}
    for row in rows:
        seq, event_id, kind, step_id, attempt_id, data, run_id, session_id = row[:8]
        try:
            kind = RunEventType(kind)
            value = loads(data, f"event {seq} of run {run_id}")
            if kind.value in STREAMED and (cut := trimmed(kind.value, value, int(seq), after)) is not None:
                value, partial = cut
                if partial:  # not the whole row's text: an id of its own
                    event_id = f"{event_id}:{after}"
            value = _dereferenced_event(_with_answer(value, row, str(run_id)), results)
            upgraded = upgrade_event(kind, value, step_id, attempt_id)
            if upgraded is None:
                continue
            value, step_id, attempt_id = upgraded
            payload = decode_data(kind, value)
            if isinstance(payload, ToolCall) and NEEDS_CALL in payload.input:
                missing[len(events)] = str(payload.input[NEEDS_CALL])
                payload.input = {}
            events.append(
                RunEvent(
                    type=kind,
                    data=payload,
                    session_id=session_id or "",
                    run_id=run_id,
                    step_id=step_id,
                    attempt_id=attempt_id,
                    event_id=event_id,
                    cursor=str(seq),
                )
            )
        except (_Undecodable, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CorruptStateError(
                f"corrupt event {seq} of run {run_id} in the harnessx store ({exc}); the row was written by "
                "something other than harnessx, or damaged on disk: restore the database from a backup"
            ) from exc
    return events, missing


def _referred_results(rows: Sequence[Sequence[Any]]) -> dict[str, str]:
    """The final result text of each tool call an event of ``rows`` refers to (by execution
    key; empty when the call is not stored), from the columns ``read_events`` joins in."""
    results: dict[str, str] = {}
    for row in rows:
        key = event_result_key(row[5])
        if key is None or key in results:
            continue
        found, raw_result, result, bodies = row[8:12]
        if found is None:
            results[key] = ""
            continue
        pairs = loads(bodies, f"the large results of tool call {key}") or []
        stored = {(key, str(kind)): str(body) for kind, body in pairs}
        results[key] = final_result(raw_result, result, key, stored) or ""
    return results


def _with_answer(value: Any, row: Sequence[Any], run_id: str) -> Any:
    """A stored event payload with the answer it refers to put back: the output of its run
    (``read_events``' 13th column) or the text of a message of its run (the message's body
    and run, its 14th and 15th)."""
    if not isinstance(value, dict):
        return value
    ref = value.get(_REF)
    if ref == _OUTPUT_REF:
        output = row[12]
        if not isinstance(output, str):
            raise _Undecodable("it refers to its run's output, and the run is missing")
        return {**{k: v for k, v in value.items() if k != _REF}, "output": output}
    if ref == _MESSAGE_REF:
        body, owner = row[13], row[14]
        message = _safe_loads(body) if body is not None else None
        text = message.get("content") if isinstance(message, dict) else None
        chars = value.get("chars", len(text) if isinstance(text, str) else None)
        if not (
            isinstance(message, dict)
            and owner == run_id
            and message.get("role") == "assistant"
            and isinstance(text, str)
            and len(text) == chars
        ):
            raise _Undecodable(f"it refers to message {value.get('seq')!r}, not an answer of this run")
        return text
    return value


def _dereferenced_event(value: Any, results: Mapping[str, str]) -> Any:
    """A stored event payload with the result text it refers to put back."""
    key = _result_ref(value)
    if key is None:
        return value
    text = results.get(key)
    if text is None:
        raise _Undecodable("it refers to a tool call whose result is missing")
    return {**{k: v for k, v in value.items() if k not in (_REF, _REF_KEY)}, "content": text}


def fill_calls(events: list[RunEvent], missing: dict[int, str], tool_rows: Sequence[Sequence[Any]]) -> None:
    """Give the events ``events_from_rows`` listed their calls back, from the run's
    ``tool_calls`` rows (execution_key first, the call fourth)."""
    calls: dict[str, Any] = {}
    for row in tool_rows:
        if row[0] in missing.values():
            stored = loads(row[3], f"tool call {row[0]}")
            if isinstance(stored, dict) and call_problem(stored) is None:
                calls[row[0]] = ToolCall.from_dict(stored)
    for position, key in missing.items():
        call = calls.get(key)
        if call is not None:
            events[position].data = call


def run_values(state: RunState, delta: Delta) -> tuple[Any, ...]:
    """The run's fields once ``delta`` is applied, as a checkpoint writes them: status,
    phase, iteration, usage, output, stop_reason, error, usage_incomplete. (Written out
    field by field: this runs on every checkpoint.)"""
    patch = delta.run
    status = state.status if patch.status is UNCHANGED else patch.status
    usage = state.usage if patch.usage is UNCHANGED else patch.usage
    error = state.error if patch.error is UNCHANGED else patch.error
    return (
        status.value,
        delta.phase.value,
        state.iteration if patch.iteration is UNCHANGED else patch.iteration,
        dumps(usage.to_dict()),
        state.output if patch.output is UNCHANGED else patch.output,
        state.stop_reason if patch.stop_reason is UNCHANGED else patch.stop_reason,
        dumps(error) if error else None,
        state.usage_incomplete if patch.usage_incomplete is UNCHANGED else patch.usage_incomplete,
    )


def journal_record_from_row(row: Sequence[Any], session_id: str, run_id: str) -> dict[str, Any]:
    """A journal row as a bundle record (see ``JournalRecord.to_dict``)."""
    seq, record_id, kind, step_id, attempt_id, execution_key, recorded_at, payload = row
    return {
        "version": RECORD_VERSION,
        "seq": int(seq),
        "id": record_id,
        "kind": kind,
        "recorded_at": recorded_at,
        "session_id": session_id,
        "run_id": run_id,
        "step_id": step_id,
        "attempt_id": attempt_id,
        "execution_key": execution_key,
        "payload": loads(payload, f"journal record {seq} of run {run_id}"),
    }


def tool_entries(
    run_id: str, rows: Sequence[Sequence[Any]], bodies: Mapping[tuple[str, str], str]
) -> list[ToolEntry]:
    """A run's ``tool_calls`` rows decoded (large results from ``bodies``, its ``tool_results``),
    without its conversation."""
    try:
        return [_tool_entry(row, bodies) for row in rows]
    except _Undecodable as exc:
        raise CorruptStateError(f"run {run_id} cannot be shown: {exc}; {_ADVICE}") from exc


def action_from_row(row: Sequence[Any]) -> Action:
    """An ``audit`` row."""
    action_id, at, actor, via, action, session_id, run_id, key, detail, outcome, finished_at = row
    decoded = loads(detail, f"audit record {action_id}")
    return Action(
        id=str(action_id),
        actor=str(actor),
        via=str(via),
        action=str(action),
        session_id=str(session_id),
        run_id=run_id,
        execution_key=key,
        detail=decoded if isinstance(decoded, dict) else {},
        at=float(at),
        outcome=outcome,
        finished_at=None if finished_at is None else float(finished_at),
    )


def run_row(row: Sequence[Any]) -> RunRow:
    """A ``list_runs`` row; its last column is the cursor's time as the dialect compares it."""
    run_id, session_id, agent_ref, request_id, status, phase, iteration, events, stop = row[:9]
    return RunRow(
        id=str(run_id),
        session_id=str(session_id),
        agent_ref=agent_ref,
        request_id=request_id,
        status=listed_status(status),
        phase=str(phase),
        iteration=int(iteration),
        event_count=int(events),
        stop_reason=str(stop or ""),
        created_at=float(row[9]),
        updated_at=float(row[10]),
        queued=bool(row[11]),
        key=(row[12], str(run_id)),
    )
