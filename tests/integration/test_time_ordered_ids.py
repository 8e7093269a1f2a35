"""The rows written on every step get time-ordered ids (UUID version 7), on both backends:
a run's sessions, runs and events sort in the order they were made, so their inserts go to
the right edge of each index instead of random pages."""

from __future__ import annotations

import uuid

from durable_support import BackendTarget, make_agent

from harnessx import AgentRuntime


async def test_sessions_runs_and_events_get_time_ordered_ids(target: BackendTarget) -> None:
    async with target.open() as store:
        made = []
        for _ in range(3):
            async with AgentRuntime(make_agent(policy="safe"), backend=store) as runtime:
                made.append(await runtime.run("Write the EMEA report."))
        runs = [result.run_id for result in made]
        sessions = [result.session_id for result in made]
        for value in runs + sessions:
            assert uuid.UUID(value).version == 7, value
        assert runs == sorted(runs) and sessions == sorted(sessions)
        event_ids = []
        for run_id in runs:
            events = await store.read_events(run_id, 0)
            assert len(events) > 5
            event_ids += [event.event_id for event in events]
        assert all(uuid.UUID(e).version == 7 for e in event_ids)
        # In the order the runs wrote them: across runs, and by sequence within each.
        assert event_ids == sorted(event_ids) and len(set(event_ids)) == len(event_ids)
