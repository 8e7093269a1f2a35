"""The flight recorder's journal: what a recorded run writes, and when.

A recorded run keeps, besides its state and events, a journal of records that explain it:
each model request and reply (before and after middleware), each attempt, each tool call's
raw and processed result, each decision, and the run's state after every commit. Records
are written in the same transaction as the commit they describe (never ahead of the state,
never behind it); the store numbers them densely per run.

``RunJournal`` is one execution's recording. The driver *notes* what it observes between
commits; the committer adds, to each commit, those notes, a ``checkpoint`` record of the
state after the commit and an ``event`` record per stored event. Notes survive a failed
commit and go with the next one, so an effect's record is not lost to a transient error.
Nothing here does I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from harnessx._errors import StorageError
from harnessx._events import RunEvent
from harnessx._ids import uuid7
from harnessx._results import ToolResult
from harnessx._state import UNCHANGED, Delta, Phase, RunState, ToolEntry
from harnessx.providers._base import ProviderResponse, StopReason, given_blocks

__all__ = [
    "RECORD_KINDS",
    "RECORD_VERSION",
    "JournalRecord",
    "RecordingError",
    "RunJournal",
    "checkpoint_payload",
    "decision_payload",
    "response_payload",
    "step_of",
]

RECORD_VERSION = 1

# Every kind a journal holds (the bundle format's list: harnessx 0.9.1 reads the same).
RECORD_KINDS = frozenset(
    {
        "run.started",
        "run.resumed",
        "checkpoint",
        "event",
        "command.failed",
        "model.started",
        "model.response",
        "model.processed",
        "model.completed",
        "model.failed",
        "model.interrupted",
        "tool.started",
        "tool.dispatched",
        "tool.returned",
        "tool.processed",
        "tool.failed",
        "tool.interrupted",
        "tool.resolved",
    }
)


class RecordingError(StorageError, RuntimeError):
    """A recorded boundary could not be committed: the run did not move past it.

    (A ``StorageError``, as the journal is written with the boundary it records.)"""


def _now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class JournalRecord:
    """One journal record. ``seq`` is given by the store when it is written."""

    kind: str
    payload: Any
    step_id: str
    attempt_id: str
    execution_key: str | None = None
    id: str = field(default_factory=uuid7)
    recorded_at: str = field(default_factory=_now)

    def __post_init__(self) -> None:
        if self.kind not in RECORD_KINDS:
            raise ValueError(f"unknown journal record kind {self.kind!r}")

    def to_dict(self, session_id: str, run_id: str, seq: int) -> dict[str, Any]:
        """The record as a bundle carries it (payload included)."""
        return {
            "version": RECORD_VERSION,
            "seq": seq,
            "id": self.id,
            "kind": self.kind,
            "recorded_at": self.recorded_at,
            "session_id": session_id,
            "run_id": run_id,
            "step_id": self.step_id,
            "attempt_id": self.attempt_id,
            "execution_key": self.execution_key,
            "payload": self.payload,
        }


def step_of(iteration: int) -> str:
    """The model step a run's iteration is in, counted from 1 (step 0 is before the first call)."""
    return str(iteration + 1)


def response_payload(response: ProviderResponse) -> dict[str, Any]:
    """A model reply as the journal keeps it (``raw`` stays out: it is the provider's own
    object), with its content blocks in order when the provider gave blocks (as 0.9.1
    records them: signed thinking, the provider's own blocks)."""
    usage = response.usage
    payload: dict[str, Any] = {
        "text": response.text,
        "tool_calls": [call.to_dict() for call in response.tool_calls or []],
        "thinking": response.thinking,
        "stop_reason": StopReason.coerce(response.stop_reason).value,
        "usage": usage.to_dict() if usage is not None else None,
    }
    if isinstance(response, ProviderResponse) and response._blocks is not None:
        payload["content"] = copy.deepcopy(given_blocks(response))
    return payload


def decision_payload(
    entry: ToolEntry,
    *,
    allow: bool | None = None,
    result: ToolResult | None = None,
    retry: bool = False,
    abort: bool = False,
) -> dict[str, Any]:
    """A decision recorded on a tool call, with the call's status after it."""
    return {
        "allow": allow,
        "result": result.to_dict() if result is not None else None,
        "retry": retry,
        "abort": abort,
        "status": entry.status.value,
    }


def checkpoint_payload(state: RunState, delta: Delta) -> dict[str, Any]:
    """The run once ``delta`` is applied: phase, status, error and the current iteration's
    tool calls (in the model's order), which is what an export checks its manifest against."""
    patch = delta.run
    status = state.status if patch.status is UNCHANGED else patch.status
    iteration = state.iteration if patch.iteration is UNCHANGED else patch.iteration
    tools = {key: entry for key, entry in state.tools.items() if entry.iteration == iteration}
    for entry in delta.tools:
        if entry.iteration == iteration:
            tools[entry.execution_key] = entry
    return {
        "phase": delta.phase.value,
        "status": status.value,
        "error": state.error if patch.error is UNCHANGED else patch.error,
        # 0.9.1 keeps extension state here; this harnessx has none.
        "extensions": {},
        "tools": [
            {
                "execution_key": entry.execution_key,
                "status": entry.status.value,
                "attempt": entry.attempt,
                "approved": entry.approved,
            }
            for entry in sorted(tools.values(), key=lambda e: e.index)
        ],
    }


class RunJournal:
    """The recording of one execution of a run (see the module docstring).

    ``attempts`` is how many model attempts the journal already holds for the step the run
    is in, so that a resumed run numbers its next attempt after those of the execution that
    crashed or stopped.
    """

    def __init__(self, state: RunState, *, attempts: int = 0) -> None:
        step = step_of(state.iteration)
        self._attempts: dict[str, int] = {step: attempts}
        fresh = state.iteration == 0 and state.phase is Phase.PREPARE_MODEL_CALL and not attempts
        # Records between model calls belong to the last step that called the model.
        self._step = "0" if fresh else step
        self._notes: list[JournalRecord] = []
        self._taken = 0

    def model_attempt_started(self, state: RunState) -> int:
        """Number the model attempt about to be made in ``state``'s step (from 1)."""
        step = step_of(state.iteration)
        self._attempts[step] = self._attempts.get(step, 0) + 1
        self._step = step
        return self._attempts[step]

    # --------------------------------------------------------------- notes

    def note(self, kind: str, payload: Any) -> None:
        """A record for the next commit, of the current model step and attempt."""
        self._notes.append(JournalRecord(kind, payload, self._step, str(self._attempts.get(self._step, 0))))

    def note_tool(self, kind: str, entry: ToolEntry, payload: Any) -> None:
        """A record of one tool call (its step, attempt and execution key), for the next commit."""
        self._notes.append(
            JournalRecord(kind, payload, step_of(entry.iteration), str(entry.attempt), entry.execution_key)
        )

    @property
    def has_notes(self) -> bool:
        return bool(self._notes)

    # What the driver observes, by boundary (one call each, so a driver stays readable).

    def model_started(self, state: RunState, request: dict[str, Any]) -> None:
        """A model attempt is about to be made with ``request`` (commit it before calling)."""
        self.model_attempt_started(state)
        self.note("model.started", request)

    def model_failed(self, error: BaseException) -> None:
        self.note("model.failed", {"type": type(error).__name__, "message": str(error)})

    def model_interrupted(self) -> None:
        self.note("model.interrupted", {"outcome": "incomplete"})

    def model_replied(self, response: ProviderResponse, *, stage: str) -> None:
        """The reply at ``stage``: ``response`` (as the provider returned it), ``processed``
        (after response middleware) or ``completed`` (as the run takes it)."""
        self.note(f"model.{stage}", response_payload(response))

    def command_failed(self, state: RunState, error: BaseException) -> None:
        failure = {"phase": state.phase.value, "type": type(error).__name__, "message": str(error)}
        self.note("command.failed", failure)

    def tools_dispatched(self, intent: Delta) -> None:
        for entry in intent.tools:
            call = entry.call.to_dict()
            self.note_tool("tool.started", entry, {"call": call, "replay_policy": entry.policy})
            self.note_tool("tool.dispatched", entry, {"call": call})

    def tools_returned(self, delta: Delta) -> None:
        for entry in delta.tools:
            self.note_tool("tool.returned", entry, entry.raw_result.to_dict() if entry.raw_result else None)

    def tools_processed(self, delta: Delta) -> None:
        for entry in delta.tools:
            self.note_tool("tool.processed", entry, entry.result.to_dict() if entry.result else None)

    def tools_interrupted(self, entries: Iterable[ToolEntry]) -> None:
        for entry in entries:
            self.note_tool("tool.interrupted", entry, {"outcome": "unknown", "status": entry.status.value})

    def tools_resolved(self, delta: Delta, keys: Iterable[str], **decision: Any) -> None:
        """Decisions on the calls ``keys`` (``allow=``, or ``result=``/``retry=``/``abort=``)."""
        wanted = set(keys)
        for entry in delta.tools:
            if entry.execution_key in wanted:
                self.note_tool("tool.resolved", entry, decision_payload(entry, **decision))

    # -------------------------------------------------------------- commits

    def for_commit(self, state: RunState, delta: Delta, events: Sequence[RunEvent]) -> list[JournalRecord]:
        """Everything a commit of ``delta`` (storing ``events``) writes to the journal: the
        pending notes, the state after it, and its events. Call ``committed()`` once the
        commit succeeded; until then the notes stay pending."""
        step, attempt = self._step, str(self._attempts.get(self._step, 0))
        self._taken = len(self._notes)
        records = list(self._notes)
        records.append(JournalRecord("checkpoint", checkpoint_payload(state, delta), step, attempt))
        records.extend(JournalRecord("event", event.to_dict(), step, attempt) for event in events)
        return records

    def for_events(self, events: Iterable[RunEvent]) -> list[JournalRecord]:
        """The records of streamed events stored on their own (notes wait for a commit)."""
        step, attempt = self._step, str(self._attempts.get(self._step, 0))
        return [JournalRecord("event", event.to_dict(), step, attempt) for event in events]

    def committed(self) -> None:
        """The notes handed out by the last ``for_commit`` are written."""
        del self._notes[: self._taken]
        self._taken = 0
