"""Everything an operator sees of one run, read from the store (the console's run page and
``harnessx show``): its row, its state when it can be read, its tool calls and the actions
operators took on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harnessx._errors import CorruptStateError
from harnessx._state import RunState, ToolEntry
from harnessx.store._protocol import Action, RunFilter, RunRecord, RunRow, SessionRecord, Store

__all__ = ["RunDetail", "action_dict", "read_run"]


@dataclass
class RunDetail:
    record: RunRecord
    row: RunRow
    session: SessionRecord
    state: RunState | None  # None: it cannot be read (``problem`` says why)
    tools: list[ToolEntry] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    problem: str | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """This run's own messages (the session's earlier ones are left out)."""
        if self.state is None:
            return []
        return self.state.messages[self.state.history_length :]

    @property
    def pending(self) -> list[ToolEntry]:
        return [entry for entry in self.tools if entry.pending() is not None]

    @property
    def pooled(self) -> bool:
        """Whether a pool worker continues it (its session names an agent reference)."""
        return self.session.agent_ref is not None

    def to_dict(self) -> dict[str, Any]:
        row = self.row
        return {
            "run_id": row.id,
            "session_id": row.session_id,
            "agent_ref": row.agent_ref,
            "request_id": row.request_id,
            "request_message": self.record.request_message,
            "status": row.shown_status,
            "phase": row.phase,
            "iteration": row.iteration,
            "event_count": row.event_count,
            "stop_reason": row.stop_reason,
            "created_at": row.created_at,
            "updated_at": row.updated_at,
            "generation": self.session.generation,
            "result": self.state.result().to_dict() if self.state is not None else None,
            "problem": self.problem,
            "messages": self.messages,
            "tool_calls": [entry.to_dict() for entry in self.tools],
            "actions": [action_dict(action) for action in self.actions],
        }


def action_dict(action: Action) -> dict[str, Any]:
    return {
        "id": action.id,
        "at": action.at,
        "actor": action.actor,
        "via": action.via,
        "action": action.action,
        "session_id": action.session_id,
        "run_id": action.run_id,
        "execution_key": action.execution_key,
        "detail": action.detail,
        "outcome": action.outcome,
        "finished_at": action.finished_at,
    }


async def read_run(store: Store, run_id: str) -> RunDetail | None:
    """``None`` when there is no such run; a run whose state cannot be read is still shown."""
    record = await store.get_run(run_id, messages=False)
    page = await store.list_runs(RunFilter(run_id=run_id), limit=1)
    if record is None or not page.runs:
        return None
    session = await store.get_session(record.session_id)
    assert session is not None  # a run's session is never deleted
    detail = RunDetail(record, page.runs[0], session, None)
    try:
        detail.state = await store.load_state(run_id)
        detail.tools = sorted(detail.state.tools.values(), key=lambda e: (e.iteration, e.index))
    except CorruptStateError as exc:
        detail.problem = str(exc)
        try:
            detail.tools = await store.tool_calls(run_id)
        except CorruptStateError:
            detail.tools = []
    detail.actions = await store.run_actions(run_id)
    return detail
