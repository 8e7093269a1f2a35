"""The persisted shape of a run: ``RunState``, its tool entries, and the deltas that move it.

A run only ever changes by applying a ``Delta`` the engine computed. A delta lists what is
*new or moved* (appended messages, the tool entries whose status changed, changed run
fields, new events), so a store can commit it as an append whose cost does not depend on
how long the conversation already is.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, Final, Literal

from harnessx._events import RunEvent
from harnessx._policies import DEFAULT_TIMEOUT_SECONDS, ToolRetry
from harnessx._results import PendingTool, RunResult, RunStatus, ToolResult
from harnessx.providers._base import TokenUsage, ToolCall

__all__ = [
    "STATE_VERSION",
    "UNCHANGED",
    "Delta",
    "ExecutionKey",
    "Phase",
    "RunPatch",
    "RunState",
    "ToolEntry",
    "ToolStatus",
    "Unchanged",
    "execution_key",
]

STATE_VERSION = 1


class Phase(StrEnum):
    """The last committed boundary of a run."""

    PREPARE_MODEL_CALL = "prepare_model_call"
    MODEL_CALL = "model_call"
    PREPARE_TOOLS = "prepare_tools"
    DISPATCH = "dispatch"
    RAW_RESULT = "raw_result"
    COMPLETED_RESULT = "completed_result"
    FINISH = "finish"


class ToolStatus(StrEnum):
    """``prepared -> started -> raw_completed -> completed``; ``approval`` and
    ``uncertain`` are waiting states that a decision moves on."""

    PREPARED = "prepared"
    STARTED = "started"
    RAW_COMPLETED = "raw_completed"
    COMPLETED = "completed"
    APPROVAL = "approval"
    UNCERTAIN = "uncertain"


@dataclass(frozen=True)
class ExecutionKey:
    """A tool call's identity, ``run:iteration:call`` as text, the iteration counted from 1
    as harnessx 0.9.1 does (``iteration`` here is the engine's, from 0). This type is the
    only place that builds or reads that text; keys are stored, shown and passed around as
    the text (``ToolEntry.execution_key``, ``PendingTool.execution_key``). Keys stored
    before 0.2 counted from 0; they stay as stored (``legacy``)."""

    run_id: str
    iteration: int
    call_id: str

    def __str__(self) -> str:
        return f"{self.run_id}:{self.iteration + 1}:{self.call_id}"

    @property
    def legacy(self) -> str:
        """The text of the same key as builds before 0.2 wrote it (iteration from 0)."""
        return f"{self.run_id}:{self.iteration}:{self.call_id}"

    def names(self, key: str) -> bool:
        """Whether ``key`` is this call's key, in either form."""
        return key == str(self) or key == self.legacy

    @classmethod
    def parse(cls, key: str) -> ExecutionKey | None:
        """The key ``key`` spells, or ``None`` when it is not ``run:N:call`` with N from 1."""
        run_id, _, rest = key.partition(":")
        number, _, call_id = rest.partition(":")
        if not (run_id and number.isdigit() and int(number) >= 1):
            return None
        return cls(run_id, int(number) - 1, call_id)

    @staticmethod
    def run_of(key: str) -> str:
        """The run a key (of either form, or any text a caller passed as one) names: the
        text before its first colon."""
        return key.partition(":")[0]


def execution_key(run_id: str, iteration: int, tool_call_id: str) -> str:
    """The text of ``ExecutionKey(run_id, iteration, tool_call_id)``."""
    return str(ExecutionKey(run_id, iteration, tool_call_id))


@dataclass
class ToolEntry:
    """One tool call of a run and everything known about its execution.

    ``concurrent``, ``timeout`` and ``retry`` (a ``ToolRetry.to_dict()``) are the tool's
    settings when the call was prepared, reported with it while it waits (``PendingTool``);
    entries stored before they were recorded have ``retry`` None.
    """

    execution_key: str
    iteration: int
    index: int
    call: ToolCall
    policy: str
    status: ToolStatus
    attempt: int = 0
    approved: bool = False
    raw_result: ToolResult | None = None
    result: ToolResult | None = None
    generation: int | None = None
    concurrent: bool = False
    timeout: float | None = None
    retry: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "execution_key": self.execution_key,
            "iteration": self.iteration,
            "index": self.index,
            "call": self.call.to_dict(),
            "policy": self.policy,
            "status": self.status.value,
            "attempt": self.attempt,
            "approved": self.approved,
            "raw_result": self.raw_result.to_dict() if self.raw_result else None,
            "result": self.result.to_dict() if self.result else None,
            "generation": self.generation,
            "concurrent": self.concurrent,
            "timeout": self.timeout,
            "retry": self.retry,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolEntry:
        return cls(
            execution_key=str(data["execution_key"]),
            iteration=int(data["iteration"]),
            index=int(data["index"]),
            call=ToolCall.from_dict(data["call"]),
            policy=str(data["policy"]),
            status=ToolStatus(data["status"]),
            attempt=int(data.get("attempt", 0)),
            approved=bool(data.get("approved", False)),
            raw_result=ToolResult.from_dict(data["raw_result"]) if data.get("raw_result") else None,
            result=ToolResult.from_dict(data["result"]) if data.get("result") else None,
            generation=data.get("generation"),
            concurrent=bool(data.get("concurrent", False)),
            timeout=data.get("timeout"),
            retry=data.get("retry"),
        )

    def moved(self, **changes: Any) -> ToolEntry:
        """A copy with ``changes`` applied; entries in a state are never edited in place."""
        clone = copy.copy(self)
        for name, value in changes.items():
            setattr(clone, name, value)
        return clone

    def original_form(self) -> dict[str, Any]:
        """The entry as harnessx 0.9.1's run state holds it (its ``state["tools"]`` items):
        ``PendingTool.to_dict()``'s keys with whichever results are known."""
        data: dict[str, Any] = {
            "call": {"id": self.call.id, "name": self.call.name, "input": self.call.input},
            "status": self.status.value,
            "attempt": self.attempt,
            "execution_key": self.execution_key,
            "policy": self.policy,
            "concurrent": self.concurrent,
            "timeout": self.timeout if self.timeout is not None else DEFAULT_TIMEOUT_SECONDS,
        }
        if self.retry:
            data["retry"] = dict(self.retry)
        if self.raw_result is not None:
            data["raw_result"] = self.raw_result.to_dict()
        if self.result is not None:
            data["result"] = self.result.to_dict()
        return data

    def pending(self) -> PendingTool | None:
        if self.status is ToolStatus.APPROVAL:
            status: Literal["approval", "uncertain"] = "approval"
        elif self.status is ToolStatus.UNCERTAIN:
            status = "uncertain"
        else:
            return None
        return PendingTool(
            self.execution_key,
            self.call,
            status,
            self.attempt,
            self.policy,
            self.concurrent,
            self.timeout if self.timeout is not None else DEFAULT_TIMEOUT_SECONDS,
            ToolRetry.from_dict(self.retry) if self.retry else None,
        )


class Unchanged(Enum):
    """The value of a ``RunPatch`` field the patch leaves as it is."""

    UNCHANGED = "unchanged"


UNCHANGED: Final = Unchanged.UNCHANGED


@dataclass
class RunPatch:
    """The run fields one transition changes; a field left ``UNCHANGED`` keeps its value (a
    sentinel rather than ``None``, since a reopened run's ``error`` becomes ``None``). The
    phase is not here: every delta sets it (``Delta.phase``)."""

    status: RunStatus | Unchanged = UNCHANGED
    iteration: int | Unchanged = UNCHANGED
    usage: TokenUsage | Unchanged = UNCHANGED
    output: str | Unchanged = UNCHANGED
    stop_reason: str | Unchanged = UNCHANGED
    error: dict[str, str] | Unchanged | None = UNCHANGED
    usage_incomplete: bool | Unchanged = UNCHANGED

    @property
    def empty(self) -> bool:
        """Whether it changes nothing (a boundary that only moves the phase)."""
        return self == _NO_CHANGE

    def then(self, later: RunPatch) -> RunPatch:
        """This patch followed by ``later``, as one: ``later``'s changes win."""
        return RunPatch(
            self.status if later.status is UNCHANGED else later.status,
            self.iteration if later.iteration is UNCHANGED else later.iteration,
            self.usage if later.usage is UNCHANGED else later.usage,
            self.output if later.output is UNCHANGED else later.output,
            self.stop_reason if later.stop_reason is UNCHANGED else later.stop_reason,
            self.error if later.error is UNCHANGED else later.error,
            self.usage_incomplete if later.usage_incomplete is UNCHANGED else later.usage_incomplete,
        )

    def apply(self, state: RunState) -> None:
        """Write the changed fields onto ``state``. (Field by field: this runs on every
        boundary.)"""
        if self.status is not UNCHANGED:
            state.status = self.status
        if self.iteration is not UNCHANGED:
            state.iteration = self.iteration
        if self.usage is not UNCHANGED:
            state.usage = self.usage
        if self.output is not UNCHANGED:
            state.output = self.output
        if self.stop_reason is not UNCHANGED:
            state.stop_reason = self.stop_reason
        if self.error is not UNCHANGED:
            state.error = self.error
        if self.usage_incomplete is not UNCHANGED:
            state.usage_incomplete = self.usage_incomplete


_NO_CHANGE = RunPatch()


@dataclass
class Delta:
    """What one transition changes: the boundary it moves to, the messages appended, the
    tool entries that moved, the run's changed fields and the events it announces."""

    phase: Phase
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[ToolEntry] = field(default_factory=list)
    run: RunPatch = field(default_factory=RunPatch)
    events: list[RunEvent] = field(default_factory=list)
    # A loop-guard trip this boundary tells the model about, as (period, laps, tool): the
    # driver fires HookEvent.REPETITION with it once committed. Not stored.
    repetition: tuple[int, int, str] | None = None

    def with_phase(self, phase: Phase) -> Delta:
        self.phase = phase
        return self

    def then(self, later: Delta) -> Delta:
        """This boundary and ``later`` as one, labelled with ``later``'s phase: its messages
        and events after these, an entry that both move as ``later`` leaves it. (Not stored,
        ``repetition`` stays with the boundary that tripped it.)"""
        moved = {entry.execution_key for entry in later.tools}
        return Delta(
            later.phase,
            messages=self.messages + later.messages,
            tools=[e for e in self.tools if e.execution_key not in moved] + later.tools,
            run=self.run.then(later.run),
            events=self.events + later.events,
        )


@dataclass
class RunState:
    """One run of a session, as the engine sees it.

    ``messages`` is the whole conversation of the session (earlier runs included);
    ``history_length`` marks where this run's own messages begin. ``iteration`` counts
    model calls from 0 (events and execution keys number them from 1). ``attempt`` is the
    current model call's try (1 for the first, more after retries); it lives in memory only
    and labels events.
    """

    session_id: str
    run_id: str
    status: RunStatus = RunStatus.RUNNING
    phase: Phase = Phase.PREPARE_MODEL_CALL
    iteration: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: dict[str, ToolEntry] = field(default_factory=dict)
    usage: TokenUsage = field(default_factory=TokenUsage)
    output: str = ""
    stop_reason: str = ""
    error: dict[str, str] | None = None
    usage_incomplete: bool = False
    history_length: int = 0
    version: int = STATE_VERSION
    attempt: int = 0

    def apply(self, delta: Delta) -> None:
        self.messages.extend(delta.messages)
        for entry in delta.tools:
            self.tools[entry.execution_key] = entry
        self.phase = delta.phase
        delta.run.apply(self)

    def after(self, delta: Delta) -> RunState:
        """The run as ``delta`` would leave it, this one unchanged."""
        preview = copy.copy(self)
        preview.messages = [*self.messages]
        preview.tools = dict(self.tools)
        preview.apply(delta)
        return preview

    def entries(self, iteration: int | None = None) -> list[ToolEntry]:
        """Tool entries of one iteration (default: the current one), in the model's order."""
        wanted = self.iteration if iteration is None else iteration
        found = [e for e in self.tools.values() if e.iteration == wanted]
        return sorted(found, key=lambda e: e.index)

    def last_assistant(self) -> dict[str, Any] | None:
        for message in reversed(self.messages[self.history_length :]):
            if message.get("role") == "assistant":
                return dict(message)
        return None

    def result(self) -> RunResult:
        pending = [p for p in (e.pending() for e in self.tools.values()) if p is not None]
        return RunResult(
            session_id=self.session_id,
            run_id=self.run_id,
            output=self.output,
            status=self.status,
            stop_reason=self.stop_reason,
            usage=self.usage,
            error=self.error,
            pending=pending,
            usage_incomplete=self.usage_incomplete,
        )
