"""Importing the sessions of a database the original harnessx 0.9.1 wrote.

Each original session becomes a session here with the same id, agent reference (an
``AgentRef`` by name and version; an agent passed as an instance is matched by its
configuration, as for a session started here) and runs, each run with its conversation, its
tool calls and their results, written through the ``Store`` API like any other run, so that
an unfinished run resumes here as it would have there: a call the original dispatched
without recording its result is recovered by its replay policy (``manual``: ``uncertain``),
an approval still waits for ``approve`` / ``decline``. Not imported: the original's stream
events (an imported run's event history starts with the import) and flight recordings.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from typing import Any

from harnessx._config import AgentConfig
from harnessx._events import RunEvent, RunEventType
from harnessx._messages import from_blocks
from harnessx._results import FINISHED_STATUSES, RunStatus, ToolResult
from harnessx._state import Delta, ExecutionKey, Phase, RunPatch, RunState, ToolEntry, ToolStatus
from harnessx.providers._base import TokenUsage, ToolCall
from harnessx.store._original import OriginalRun, OriginalSession
from harnessx.store._protocol import Store

__all__ = ["ImportReport", "import_sessions", "migrate_from_original"]

_HOLDER = "harnessx-import"


@dataclass
class ImportReport:
    """What an import did: per session, the runs imported with their status."""

    imported: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def unfinished(self) -> dict[str, tuple[str, str]]:
        """Sessions whose latest run can be resumed: session id -> (run id, status)."""
        latest = {sid: runs[-1] for sid, runs in self.imported.items() if runs}
        return {sid: run for sid, run in latest.items() if run[1] not in FINISHED_STATUSES}

    def describe(self) -> str:
        runs = sum(len(r) for r in self.imported.values())
        lines = [f"imported {len(self.imported)} session(s) with {runs} run(s)"]
        for sid, (run_id, status) in sorted(self.unfinished.items()):
            lines.append(
                f"  unfinished: session {sid} run {run_id} ({status}): resume it with resume({sid!r})"
            )
        for sid, reason in sorted(self.skipped.items()):
            lines.append(f"  skipped: session {sid}: {reason}")
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)


async def migrate_from_original(store: Store) -> ImportReport:
    """``harnessx migrate --from-original`` on a store not yet open: move the original's
    tables aside, create this harnessx's schema in their place, import every session. Run
    again, it imports what the last run did not (an interrupted import, say)."""
    where = await store.prepare_from_original()
    await store.migrate()
    async with store:
        return await import_sessions(store, await store.read_original_sessions(where))


async def import_sessions(store: Store, sessions: list[OriginalSession]) -> ImportReport:
    """Write ``sessions`` into ``store`` (already migrated); those already there are skipped."""
    report = ImportReport()
    for session in sessions:
        if await store.get_session(session.id) is not None:
            report.skipped[session.id] = "already in this database (imported before?)"
            continue
        if not session.runs:
            await store.create_session(session.id, _agent_ref(session.payload), _fingerprint(session.payload))
            report.imported[session.id] = []
            continue
        runs = _importable(session, report)
        await store.create_session(session.id, _agent_ref(session.payload), _fingerprint(session.payload))
        if session.payload.get("recording"):
            report.notes.append(
                f"session {session.id} was flight-recorded there; its recording is not imported"
            )
        previous: list[dict[str, Any]] = []
        imported: list[tuple[str, str]] = []
        for run in runs:
            messages = _conversation(run)
            delta = _run_delta(session.id, run, messages[len(previous) :])
            lease = await store.claim(session.id, _HOLDER)
            try:
                await store.create_run(lease, run.id, run.request_id, _request_text(run), delta)
            finally:
                with contextlib.suppress(Exception):
                    await store.release(lease)
            imported.append((run.id, _status(run).value))
            previous = messages
        report.imported[session.id] = imported
    return report


def _importable(session: OriginalSession, report: ImportReport) -> list[OriginalRun]:
    """The runs to import, in order. Each run's conversation must extend the one before;
    a session whose history the original condensed between runs keeps its latest run only,
    which carries the whole conversation as it then stood."""
    runs = list(session.runs)
    for earlier, later in itertools.pairwise(runs):
        before, after = _conversation(earlier), _conversation(later)
        if after[: len(before)] != before:
            report.notes.append(
                f"session {session.id}: its history was condensed between runs; only its latest run "
                "is imported (with the conversation as it then stood)"
            )
            return runs[-1:]
    return runs


def _agent_ref(payload: dict[str, Any]) -> str | None:
    agent = payload.get("agent") or {}
    name, version = agent.get("name"), agent.get("version") or "v1"
    if not name or name == "inline":
        return None  # an Agent instance: matched by its configuration when resumed
    return f"{name}@{version}"


def _fingerprint(payload: dict[str, Any]) -> dict[str, Any]:
    try:
        config = AgentConfig.from_dict(payload.get("config") or {})
    except (TypeError, ValueError):
        return {}
    return {"config": config.fingerprint_fields(), "tools": {}}


def _request_text(run: OriginalRun) -> str:
    message = run.state.get("message", "")
    if isinstance(message, str):
        return message
    return " ".join(str(b.get("text", "")) for b in message if isinstance(b, dict))


def _conversation(run: OriginalRun) -> list[dict[str, Any]]:
    """The run's whole conversation in the engine's form, the user's message included (a
    run stopped before it was added, at phase ``start``, gets it here)."""
    messages = from_blocks(run.state.get("messages") or [])
    if run.state.get("phase") == "start" and run.status == "running":
        messages = [*messages, *from_blocks([{"role": "user", "content": run.state.get("message", "")}])]
    return messages


def _status(run: OriginalRun) -> RunStatus:
    status = str(run.state.get("status") or run.status)
    if status == "running" and run.state.get("phase") in ("finish", "result"):
        return RunStatus.COMPLETED  # the original had only the bookkeeping of the end left
    try:
        return RunStatus(status)
    except ValueError:
        return RunStatus.FAILED


def _phase(run: OriginalRun, entries: list[ToolEntry], iteration: int) -> Phase:
    phase = str(run.state.get("phase", ""))
    current = [e for e in entries if e.iteration == iteration]
    if _status(run).finished or phase in ("finish", "result"):
        return Phase.FINISH
    if phase == "prepare_tools":
        return Phase.MODEL_CALL  # the reply is in; its tool calls are prepared next
    if phase in ("tools", "collect_tools") and current:
        if all(e.status is ToolStatus.COMPLETED for e in current):
            return Phase.COMPLETED_RESULT
        if any(e.status in (ToolStatus.STARTED, ToolStatus.RAW_COMPLETED) for e in current):
            return Phase.DISPATCH
        return Phase.PREPARE_TOOLS
    return Phase.PREPARE_MODEL_CALL  # start, prepare_model, model, compact: call the model


def _entries(run: OriginalRun) -> list[ToolEntry]:
    """Every tool call the run recorded, the state's own list last (it is the newest)."""
    merged = dict(run.entries)
    merged.update({str(t.get("execution_key")): t for t in run.state.get("tools") or []})
    positions: dict[str, int] = {}
    for message in run.state.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        calls = (
            [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
            if isinstance(content, list)
            else []
        )
        positions.update((str(b.get("id")), i) for i, b in enumerate(calls))
    out = []
    for key, raw in merged.items():
        parsed = ExecutionKey.parse(key)
        if parsed is None or parsed.run_id != run.id or not isinstance(raw.get("call"), dict):
            continue
        status = str(raw.get("status"))
        if status not in {s.value for s in ToolStatus}:
            continue
        out.append(
            ToolEntry(
                execution_key=key,
                iteration=parsed.iteration,
                index=positions.get(parsed.call_id, 0),
                call=ToolCall.from_dict(raw["call"]),
                policy=str(raw.get("policy") or "manual"),
                status=ToolStatus(status),
                attempt=int(raw.get("attempt") or 0),
                approved=bool(raw.get("approved", False)),
                raw_result=ToolResult.from_dict(raw["raw_result"]) if raw.get("raw_result") else None,
                result=ToolResult.from_dict(raw["result"]) if raw.get("result") else None,
            )
        )
    return sorted(out, key=lambda e: (e.iteration, e.index))


def _usage(data: Any) -> TokenUsage:
    usage = dict(data or {}) if isinstance(data, dict) else {}
    usage.setdefault("cache_read_tokens", usage.get("cache_read_input_tokens", 0))
    usage.setdefault("cache_write_tokens", usage.get("cache_creation_input_tokens", 0))
    return TokenUsage.from_dict(usage)


def _run_delta(session_id: str, run: OriginalRun, messages: list[dict[str, Any]]) -> Delta:
    state = run.state
    entries = _entries(run)
    # The original counts the model calls made (from its phase "model" on, the current one
    # too); the engine numbers the current call from 0.
    made = int(state.get("iterations") or 0)
    iteration = made if str(state.get("phase", "")) in ("start", "prepare_model") else max(0, made - 1)
    iteration = max([iteration, *(e.iteration for e in entries)])
    status = _status(run)
    phase = _phase(run, entries, iteration)
    error = state.get("error") if isinstance(state.get("error"), dict) else None
    fields = RunPatch(
        status=status,
        iteration=iteration,
        usage=_usage(state.get("usage")),
        output=str(state.get("output") or state.get("partial_output") or ""),
        stop_reason=str(state.get("stop_reason") or ""),
        error=error,
        usage_incomplete=bool(state.get("usage_incomplete", False)),
    )
    delta = Delta(phase, messages=messages, tools=entries, run=fields)
    if status.finished:
        # A finished run ends with its result, as every run here does.
        preview = RunState(session_id=session_id, run_id=run.id)
        preview.apply(Delta(phase, tools=entries, run=fields))
        step = "run"
        delta.events.append(
            RunEvent(RunEventType.RUN_RESULT, preview.result(), session_id, run.id, step, step)
        )
    return delta
