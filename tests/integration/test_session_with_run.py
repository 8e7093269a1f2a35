"""A new session is written together with its first run (``Store.create_session_run``),
on each real backend: what it writes, what it refuses, and the runtime around it."""

from __future__ import annotations

from pathlib import Path

import pytest
from durable_support import BackendTarget, make_agent

from harnessx import AgentRef, AgentRuntime, ConfigurationError
from harnessx._state import Delta, RunState
from harnessx.store._protocol import NewSession


def first_boundary(session_id: str, run_id: str) -> tuple[RunState, Delta]:
    probe = RunState(session_id=session_id, run_id=run_id)
    return probe, make_agent().engine(durable=True).start(probe, "Write the report.")


async def test_the_state_written_is_the_state_the_runtime_drives(target: BackendTarget) -> None:
    """The runtime does not load a run it has just created in a new session: what the store
    reads back must be exactly what it drives."""
    async with target.open() as store:
        probe, start = first_boundary("s1", "r1")
        session = NewSession("s1", "sales@v1", {"config": {"model": "m"}}, recording=False)
        lease = await store.create_session_run(session, "me", "r1", "req", "Write the report.", start)
        probe.apply(start)
        assert await store.load_state("r1") == probe
        record = await store.get_session("s1")
        assert record is not None
        assert (record.agent_ref, record.fingerprint, record.lease_owner, record.generation) == (
            "sales@v1",
            {"config": {"model": "m"}},
            lease.owner,
            lease.generation,
        )
        run = await store.get_run("r1", messages=False)
        assert run is not None and (run.status, run.request_id, run.queued) == ("running", "req", False)
        # The lease holds: checkpoints go through, another holder is refused.
        assert await store.find_run("s1", "req") == run
        await store.release(lease)


async def test_an_existing_session_is_refused_and_nothing_is_written(target: BackendTarget) -> None:
    async with target.open() as store:
        await store.create_session("s1", None, {})
        _, start = first_boundary("s1", "r1")
        with pytest.raises(ConfigurationError, match="already exists"):
            await store.create_session_run(NewSession("s1", None, {}), "me", "r1", None, "hi", start)
        assert await store.get_run("r1") is None
        session = await store.get_session("s1")
        assert session is not None and session.lease_owner is None and session.generation == 0


async def test_a_queued_first_run_holds_no_lease(target: BackendTarget) -> None:
    async with target.open() as store:
        _, start = first_boundary("s1", "r1")
        await store.create_session_run(
            NewSession("s1", "sales@v1", {}), "me", "r1", None, "hi", start, queued=True
        )
        session = await store.get_session("s1")
        assert session is not None and session.lease_owner is None
        run = await store.get_run("r1")
        assert run is not None and run.queued and run.status == "running"
        claimed = await store.claim_queued("worker", ["sales@v1"], 5)
        assert [(lease.session_id, run_id) for lease, run_id in claimed] == [("s1", "r1")]


async def test_a_session_started_without_a_run_is_written_when_the_runtime_stops(
    target: BackendTarget,
) -> None:
    async with target.open() as store:
        runtime = AgentRuntime(make_agent(), backend=store)
        session_id = await runtime.start()
        assert await store.get_session(session_id) is None  # written with its first run
        assert (await runtime.status())["run"] is None  # no run yet
        await runtime.stop()
        assert await store.get_session(session_id) is not None
        async with AgentRuntime(make_agent(), backend=store) as later:
            assert await later.resume(session_id) is None  # no run to resume


async def test_binding_another_session_writes_the_one_started(target: BackendTarget, tmp_path: Path) -> None:
    async with target.open() as store, AgentRuntime(make_agent(policy="safe"), backend=store) as runtime:
        first = await runtime.start()
        second = await runtime.start()
        assert await store.get_session(first) is not None
        assert await store.get_session(second) is None
        result = await runtime.run("Write the report.")
        assert result.ok and result.session_id == second
        # A second run of the session claims it and loads its history.
        again = await runtime.run("Write it again.")
        assert again.ok and again.session_id == second
        assert (await store.load_state(again.run_id)).history_length == 4


async def test_a_pool_submission_writes_its_session_with_the_queued_run(target: BackendTarget) -> None:
    async with target.open() as store:
        runtime = AgentRuntime(AgentRef("sales", "v1"), backend=store, execution="pool")
        handle = await runtime.submit("Write the report.")
        await runtime.stop()
        session = await store.get_session(handle.session_id)
        assert session is not None and session.agent_ref == "sales@v1" and session.lease_owner is None
        run = await store.get_run(handle.run_id)
        assert run is not None and run.queued


async def test_a_submit_whose_session_was_written_meanwhile_goes_on_with_it(target: BackendTarget) -> None:
    """An earlier attempt of ours may have committed although its reply was lost, or another
    process may have bound the same id: the session is found, as start() would have found it,
    and a request id still deduplicates."""
    async with target.open() as store, AgentRuntime(make_agent(policy="safe"), backend=store) as runtime:
        session_id = await runtime.start()
        fingerprint = make_agent(policy="safe").fingerprint()
        _, start = first_boundary(session_id, "earlier")
        lease = await store.create_session_run(
            NewSession(session_id, None, fingerprint), "lost", "earlier", "req-1", "Write the report.", start
        )
        await store.release(lease)
        handle = await runtime.submit("Write the report.", request_id="req-1")
        assert handle.run_id == "earlier"
    async with target.open() as store, AgentRuntime(make_agent(policy="safe"), backend=store) as runtime:
        session_id = await runtime.start()
        await store.create_session(session_id, None, make_agent(policy="safe").fingerprint())
        result = await runtime.run("Write the report.")
        assert result.ok and result.session_id == session_id
    other = make_agent(system_prompt="Other.")
    async with target.open() as store, AgentRuntime(other, backend=store) as runtime:
        session_id = await runtime.start()
        await store.create_session(session_id, None, make_agent().fingerprint())
        with pytest.raises(ConfigurationError, match="cannot use session"):
            await runtime.run("Write the report.")
