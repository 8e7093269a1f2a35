"""A run put back in the queue while it was waiting (a decision with ``resume=True``, a resume
of a paused or failed pool run) keeps its status until a worker drives it. If the worker that
claims it dies before its first checkpoint, the supervisor must queue it again like a running
run: otherwise it stays claimed by nobody for ever (chaos, kill-worker: "still running when
the suite ended")."""

from __future__ import annotations

import pytest
from durable_support import BackendTarget

from harnessx._results import RunStatus
from harnessx._state import Delta, Phase, RunPatch
from harnessx.store._protocol import Lease, Store, WorkerInfo
from supervisor._supervisor import ROLE

START = Delta(Phase.PREPARE_MODEL_CALL, messages=[{"role": "user", "content": "hi"}])


async def waiting_run(store: Store, status: RunStatus) -> Lease:
    """Session s1 with run r1 stopped at ``status``, requeued by its holder, lease given back."""
    await store.initialize()
    await store.create_session("s1", "sales:v1", {})
    lease = await store.claim("s1", "h")
    await store.create_run(lease, "r1", None, "hi", START)
    stop = Delta(
        Phase.FINISH if status is RunStatus.FAILED else Phase.PREPARE_TOOLS, run=RunPatch(status=status)
    )
    await store.commit(lease, await store.load_state("r1"), stop, [])
    await store.requeue(lease, "r1")
    await store.release(lease)
    return lease


async def claim_and_die(store: Store) -> None:
    await store.initialize()
    await store.register_worker(WorkerInfo(store.process_id, "host", 4242, ["sales:v1"], 1))
    claimed = await store.claim_queued("w", None, 1)
    assert [run_id for _, run_id in claimed] == ["r1"]
    await store.aclose()  # killed before it wrote anything for the run


@pytest.mark.parametrize("status", [RunStatus.AWAITING_INPUT, RunStatus.PAUSED, RunStatus.FAILED])
async def test_a_requeued_run_whose_claimer_dies_at_once_is_queued_again(
    target: BackendTarget, status: RunStatus
) -> None:
    async with target.open() as app:
        await waiting_run(app, status)
    await claim_and_die(target.open())
    async with target.open() as supervisor:
        term = await supervisor.try_leadership(ROLE)
        assert term is not None
        (orphan,) = await supervisor.find_orphans()
        recovery = await supervisor.recover_orphan(term, orphan, requeue=True)
        assert recovery is not None and recovery.run_id == "r1"
        assert (await supervisor.queue_stats()).depth == 1
        run = await supervisor.get_run("r1")
        assert run is not None and run.status == status  # still what the next worker resumes


async def test_a_run_its_claimer_ended_before_dying_is_not_driven_again(target: BackendTarget) -> None:
    """The claimer wrote the run's end (e.g. failed: it could not be started) and died before
    giving the lease back: releasing the lease is all that is left to do."""
    async with target.open() as app:
        await waiting_run(app, RunStatus.PAUSED)
    worker = target.open()
    await worker.initialize()
    await worker.register_worker(WorkerInfo(worker.process_id, "host", 4242, ["sales:v1"], 1))
    ((lease, run_id),) = list(await worker.claim_queued("w", None, 1))
    await worker.end_run(
        lease, run_id, status="failed", stop_reason="error", error={"message": "could not start"}, events=[]
    )
    await worker.aclose()
    async with target.open() as supervisor:
        term = await supervisor.try_leadership(ROLE)
        assert term is not None
        (orphan,) = await supervisor.find_orphans()
        recovery = await supervisor.recover_orphan(term, orphan, requeue=True)
        assert recovery is not None and recovery.run_id is None
        assert (await supervisor.queue_stats()).depth == 0
