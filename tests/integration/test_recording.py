"""Flight recording on each real backend: what a recorded run journals, and when.

The journal is read back with the store's own ``incident_snapshot`` (what an export reads);
faults are injected in the database itself (a trigger that refuses a journal insert).
"""

from __future__ import annotations

import sqlite3
from typing import Any

import asyncpg
import pytest
from durable_support import BackendTarget, make_agent
from waiting import claim_once_expired

from harnessx import (
    Agent,
    AgentRuntime,
    ConfigurationError,
    HookEvent,
    LeaseLostError,
    LLMProvider,
    PermissionLevel,
    ProviderResponse,
    RunStatus,
    StorageError,
    ToolCall,
)
from harnessx._journal import JournalRecord, RecordingError
from harnessx._state import Delta, Phase


async def run_sql(target: BackendTarget, statements: str) -> None:
    """Run ``statements`` on the target's database directly (no harnessx involved)."""
    if target.kind == "sqlite":
        with sqlite3.connect(target.location) as conn:
            conn.executescript(statements)
        return
    conn = await asyncpg.connect(target.location)
    try:
        await conn.execute(f"SET search_path TO harness_x; {statements}")
    finally:
        await conn.close()


async def journal(backend: Any, session_id: str, run_id: str) -> list[dict[str, Any]]:
    return list((await backend.incident_snapshot(session_id, run_id)).records)


def kinds(records: list[dict[str, Any]]) -> list[str]:
    return [r["kind"] for r in records]


class FlakyProvider(LLMProvider):
    """Fails its first call with ``error``, then calls ``write_report`` once and answers."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls = 0

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.calls += 1
        if self.error is not None and self.calls == 1:
            raise self.error
        answered = any(
            isinstance(m.get("content"), list) and any(b.get("type") == "tool_result" for b in m["content"])
            for m in kwargs["messages"]
        )
        if not answered:
            return ProviderResponse(tool_calls=[ToolCall("c1", "write_report", {"region": "EMEA"})])
        return ProviderResponse(text="Report written.")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


def report_agent(provider: LLMProvider, permission: str = "allow") -> Agent:
    agent = Agent(provider=provider)

    @agent.tools.register(permission=PermissionLevel(permission), replay_policy="safe")
    def write_report(region: str) -> str:
        return f"report for {region} written"

    return agent


async def test_a_recorded_run_journals_every_boundary_with_its_commit(target: BackendTarget) -> None:
    agent = make_agent(policy="safe")
    checkpoints: list[dict[str, Any]] = []
    agent.hooks.on(HookEvent.CHECKPOINT, lambda ctx: checkpoints.append(dict(ctx.data)))
    async with target.open() as backend, AgentRuntime(agent, backend=backend, recording=True) as runtime:
        result = await runtime.run("Write the report.")
        assert result.status is RunStatus.COMPLETED
        records = await journal(backend, runtime.session_id, result.run_id)
        events = await backend.read_events(result.run_id, 0, 10_000)
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    assert len({r["id"] for r in records}) == len(records)
    assert {(r["session_id"], r["run_id"]) for r in records} == {(result.session_id, result.run_id)}
    assert records[0]["kind"] == "run.started" and records[0]["payload"]["message"] == "Write the report."
    # One checkpoint record per commit, each the state the commit left: the hook saw them all.
    states = [r["payload"]["status"] for r in records if r["kind"] == "checkpoint"]
    assert states == [c["status"] for c in checkpoints]
    last = [r["payload"] for r in records if r["kind"] == "checkpoint"][-1]
    assert (last["status"], last["phase"]) == ("completed", "finish")
    # Every stored event is in the journal, in order, as stored (with its session, which the
    # events table leaves to the run).
    recorded = [r["payload"] for r in records if r["kind"] == "event"]
    assert recorded == [{**event.to_dict(), "session_id": result.session_id} for event in events]
    model = [k for k in kinds(records) if k.startswith("model.")]
    assert model == ["model.started", "model.response", "model.processed", "model.completed"] * 2
    started = next(r for r in records if r["kind"] == "model.started")
    assert started["payload"]["messages"] == [{"role": "user", "content": "Write the report."}]
    assert (started["step_id"], started["attempt_id"]) == ("1", "1")
    tool = [r for r in records if r["kind"].startswith("tool.")]
    assert [r["kind"] for r in tool] == ["tool.started", "tool.dispatched", "tool.returned", "tool.processed"]
    assert {(r["execution_key"], r["attempt_id"]) for r in tool} == {(f"{result.run_id}:1:call_0", "1")}
    assert tool[2]["payload"]["content"] == "report for R0 written"
    # The request is committed before the model is called: a checkpoint lies in between.
    index = kinds(records).index("model.started")
    assert kinds(records)[index + 1] == "checkpoint" and kinds(records)[index + 2] == "model.response"


async def test_a_session_not_recorded_has_no_journal_and_cannot_be_exported(target: BackendTarget) -> None:
    async with target.open() as backend, AgentRuntime(make_agent(), backend=backend) as runtime:
        result = await runtime.run("Write the report.")
        session = await backend.get_session(runtime.session_id)
        assert session is not None and not session.recording
        with pytest.raises(StorageError, match="not enabled"):
            await backend.incident_snapshot(runtime.session_id, result.run_id)
        for step in ("0", "1", "2"):
            assert await backend.count_journal(result.run_id, "checkpoint", step) == 0


async def test_the_session_keeps_its_recording_choice(target: BackendTarget) -> None:
    async with target.open() as backend:
        async with AgentRuntime(make_agent(), backend=backend, recording=True) as first:
            session_id = await first.start()
            await first.run("First report.")
        refused = AgentRuntime(make_agent(), backend=backend, recording=False)
        with pytest.raises(ConfigurationError, match="Recording configuration differs") as excinfo:
            await refused.resume(session_id)
        assert "recording=True or None" in str(excinfo.value)
        await refused.stop()
        async with AgentRuntime(make_agent(), backend=backend) as inheriting:
            assert await inheriting.resume(session_id) is None  # nothing unfinished
            assert inheriting.recording
            second = await inheriting.run("Second report.")
            records = await journal(backend, session_id, second.run_id)
    started = records[0]["payload"]
    assert started["message"] == "Second report."
    # The conversation the run began in: the first run's messages.
    assert started["initial_messages"][0] == {"role": "user", "content": "First report."}


async def test_an_incident_read_is_scoped_to_its_session_and_bounded(target: BackendTarget) -> None:
    async with (
        target.open() as backend,
        AgentRuntime(make_agent(), backend=backend, recording=True) as runtime,
    ):
        result = await runtime.run("Write the report.")
        elsewhere = AgentRuntime(make_agent(), backend=backend, recording=True)
        other = await elsewhere.start()
        await elsewhere.stop()  # a session without a run is written when its runtime stops
        with pytest.raises(StorageError, match="has no run"):
            await backend.incident_snapshot(other, result.run_id)
        with pytest.raises(StorageError, match="no session"):
            await backend.incident_snapshot("missing-session", result.run_id)
        with pytest.raises(StorageError, match=r"record limit \(1\).*BundleLimits\(max_records"):
            await backend.incident_snapshot(runtime.session_id, result.run_id, max_records=1)
        snapshot = await backend.incident_snapshot(runtime.session_id, result.run_id)
        assert snapshot.state.status is RunStatus.COMPLETED and snapshot.session.recording
        assert snapshot.state.messages[0] == {"role": "user", "content": "Write the report."}


async def test_a_fenced_out_writer_journals_nothing(target: BackendTarget) -> None:
    async with target.open(lease_seconds=0.3) as holder, target.open() as taker:
        runtime = AgentRuntime(make_agent(), backend=holder, recording=True)
        session_id = await runtime.start()
        result = await runtime.run("go")
        before = await journal(holder, session_id, result.run_id)
        stale = await holder.claim(session_id, "zombie")
        fresh = await claim_once_expired(taker, session_id, "rescuer")  # nobody renews the lease
        state = await holder.load_state(result.run_id)
        record = JournalRecord("command.failed", {"message": "zombie"}, "9", "9")
        with pytest.raises(LeaseLostError):
            await holder.commit(stale, state, Delta(Phase.FINISH), [], [record])
        assert await journal(taker, session_id, result.run_id) == before
        await taker.release(fresh)
        await runtime.stop()


async def test_a_journal_write_that_fails_stops_the_run_before_the_model_is_called(
    target: BackendTarget,
) -> None:
    provider = FlakyProvider()
    refuse = (
        "CREATE TRIGGER refuse_journal BEFORE INSERT ON journal WHEN NEW.kind = 'model.started' "
        "BEGIN SELECT RAISE(ABORT, 'disk failure'); END;"
        if target.kind == "sqlite"
        else "CREATE FUNCTION refuse_journal() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.kind = 'model.started' THEN RAISE EXCEPTION 'disk failure'; END IF; RETURN NEW; END $$; "
        "CREATE TRIGGER refuse_journal BEFORE INSERT ON journal FOR EACH ROW "
        "EXECUTE FUNCTION refuse_journal();"
    )
    async with target.open() as backend:
        runtime = AgentRuntime(report_agent(provider), backend=backend, recording=True)
        session_id = await runtime.start()
        await run_sql(target, refuse)
        handle = await runtime.submit("Write the report.")
        with pytest.raises(RecordingError, match="could not be committed") as failure:
            await handle.result()
        assert isinstance(failure.value, StorageError)
        assert provider.calls == 0  # the request was never sent: its record was not written
        on_table = "" if target.kind == "sqlite" else " ON journal"
        await run_sql(target, f"DROP TRIGGER refuse_journal{on_table}")
        resumed = await runtime.resume(session_id)
        assert resumed is not None
        result = await resumed.result()
        assert result.status is RunStatus.COMPLETED and provider.calls == 2
        records = await journal(backend, session_id, result.run_id)
        await runtime.stop()
    started = [(r["step_id"], r["attempt_id"]) for r in records if r["kind"] == "model.started"]
    assert started == [("1", "1"), ("2", "1")]


async def test_a_resumed_run_numbers_its_model_attempts_on(target: BackendTarget) -> None:
    provider = FlakyProvider(ValueError("the provider rejected the request"))
    async with target.open() as backend:
        runtime = AgentRuntime(report_agent(provider), backend=backend, recording=True)
        session_id = await runtime.start()
        failed = await runtime.run("Write the report.")
        assert failed.status is RunStatus.FAILED
        resumed = await runtime.resume(session_id)
        assert resumed is not None
        result = await resumed.result()
        assert result.status is RunStatus.COMPLETED
        records = await journal(backend, session_id, result.run_id)
        await runtime.stop()
    model = [(r["kind"], r["step_id"], r["attempt_id"]) for r in records if r["kind"].startswith("model.")]
    assert model[:3] == [("model.started", "1", "1"), ("model.failed", "1", "1"), ("model.started", "1", "2")]
    failure = next(r for r in records if r["kind"] == "model.failed")["payload"]
    assert failure == {"type": "ValueError", "message": "the provider rejected the request"}
    resumed_record = next(r for r in records if r["kind"] == "run.resumed")
    assert resumed_record["payload"] == {"previous_status": "failed"}
    order = kinds(records)
    assert order.index("model.failed") < order.index("run.resumed") < order.index("model.started", 3)


async def test_decisions_are_journaled_with_the_call(target: BackendTarget) -> None:
    async with target.open() as backend:
        runtime = AgentRuntime(report_agent(FlakyProvider(), "ask"), backend=backend, recording=True)
        session_id = await runtime.start()
        waiting = await runtime.run("Write the report.")
        assert waiting.status is RunStatus.AWAITING_INPUT
        result = await runtime.approve(waiting.pending[0], resume=True)
        assert result.status is RunStatus.COMPLETED
        records = await journal(backend, session_id, result.run_id)
        await runtime.stop()
    resolved = [r for r in records if r["kind"] == "tool.resolved"]
    assert len(resolved) == 1 and resolved[0]["execution_key"] == waiting.pending[0].execution_key
    assert resolved[0]["payload"] == {
        "allow": True,
        "result": None,
        "retry": False,
        "abort": False,
        "status": "prepared",
    }
    order = kinds(records)
    assert order.index("tool.resolved") < order.index("run.resumed") < order.index("tool.started")


async def test_a_reply_given_as_blocks_is_journaled_with_them_in_order(target: BackendTarget) -> None:
    """As 0.9.1 records it: the blocks a provider gave (signed thinking, a block of its own
    between them) are in the ``model.response`` and ``model.processed`` records, in order."""
    content = [
        {"type": "thinking", "thinking": "", "signature": "sig-a"},
        {"type": "provider", "provider": "anthropic", "data": {"type": "redacted_thinking", "data": "x"}},
        {"type": "thinking", "thinking": "thought", "signature": "sig-b"},
        {"type": "text", "text": "answer"},
    ]

    class Native(LLMProvider):
        async def create(self, **kwargs: Any) -> ProviderResponse:
            return ProviderResponse(content=content)

        async def count_tokens(self, **kwargs: Any) -> int:
            return 0

    async with (
        target.open() as backend,
        AgentRuntime(Agent(provider=Native()), backend=backend, recording=True) as runtime,
    ):
        result = await runtime.run("go")
        assert result.ok and result.output == "answer"
        records = await journal(backend, runtime.session_id, result.run_id)
    for kind in ("model.response", "model.processed"):
        assert next(r for r in records if r["kind"] == kind)["payload"]["content"] == content
