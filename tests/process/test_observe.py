"""Observing a run that another process drives: every event, in order, no gaps."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from durable_support import BackendTarget, make_agent, spawn_child

from harnessx import AgentRuntime, RunEventType

pytestmark = pytest.mark.process


async def test_a_follower_in_another_process_sees_every_event_in_order(
    target: BackendTarget, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    agent_spec = {"policy": "safe", "count": 3, "ledger": str(ledger), "tool_seconds": 0.4}
    child = spawn_child(target, tmp_path, agent=agent_spec, request_id="report-1")
    child.wait_for(child.session_file)
    async with target.open() as backend:
        observer = AgentRuntime(make_agent(policy="safe", count=3), backend=backend)
        await observer.start(child.session_id)  # bind to the child's session without driving it
        while await backend.find_run(child.session_id, "report-1") is None:
            await asyncio.sleep(0.01)  # the child creates the run right after saving the session id
        # The same request id gives a handle on the child's run: following, not driving.
        handle = await observer.submit("Write the EMEA report.", request_id="report-1")
        events = [event async for event in handle.events()]
        followed = await handle.result()
        await observer.stop()
    code, out, err = child.finish()
    assert code == 0, err
    driven = json.loads(out.strip().splitlines()[-1])
    assert followed.to_dict() == driven
    assert [e.cursor for e in events] == [str(i) for i in range(1, len(events) + 1)]
    assert len({e.event_id for e in events}) == len(events)
    kinds = [e.type for e in events]
    assert kinds.count(RunEventType.TOOL_RESULT) == 3 and kinds[-1] is RunEventType.RUN_RESULT
