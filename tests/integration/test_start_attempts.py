"""The store's part in runs a worker cannot start: counted, held back, ended; both backends."""

from __future__ import annotations

from durable_support import BackendTarget

from harnessx._events import RunEvent, RunEventType
from harnessx._results import RunResult, RunStatus
from harnessx._state import Delta, Phase


async def queued_run(store: object, session_id: str = "s", run_id: str = "r1") -> None:
    await store.create_session(session_id, "safe@v1", {})  # type: ignore[attr-defined]
    lease = await store.claim(session_id, "submitter")  # type: ignore[attr-defined]
    start = Delta(Phase.PREPARE_MODEL_CALL, messages=[{"role": "user", "content": "go"}])
    await store.create_run(lease, run_id, None, "go", start, queued=True)  # type: ignore[attr-defined]


def notice(text: str) -> RunEvent:
    return RunEvent(
        RunEventType.WAITING, {"on": "retry", "seconds": 0.0, "reason": text}, "s", "r1", "run", "run"
    )


async def test_a_deferred_run_is_counted_held_back_then_claimable(target: BackendTarget) -> None:
    async with target.open() as store:
        await queued_run(store)
        ((lease, run_id),) = await store.claim_queued("w", ["safe@v1"], 5)
        first = notice("first")
        await store.defer_start(lease, run_id, attempts=1, retry_in=3600, events=[first])
        await store.release(lease)
        assert first.cursor == "1"
        record = await store.get_run(run_id)
        assert record is not None and (record.queued, record.start_attempts, record.event_count) == (
            True,
            1,
            1,
        )
        assert await store.claim_queued("w", ["safe@v1"], 5) == []  # held back for an hour
        assert (await store.queue_stats()).depth == 1  # but still counted as waiting

        await queued_run(store, "s2", "r2")  # another run is not held back by it
        ((other, other_run),) = await store.claim_queued("w", ["safe@v1"], 5)
        assert other_run == "r2"
        await store.release(other)


async def test_an_elapsed_back_off_is_claimable_and_starting_clears_the_count(target: BackendTarget) -> None:
    async with target.open() as store:
        await queued_run(store)
        ((lease, run_id),) = await store.claim_queued("w", ["safe@v1"], 5)
        await store.defer_start(lease, run_id, attempts=2, retry_in=0, events=[notice("a"), notice("b")])
        await store.release(lease)
        ((lease, again),) = await store.claim_queued("w", ["safe@v1"], 5)
        assert again == run_id
        record = await store.get_run(run_id)
        assert record is not None and (record.queued, record.start_attempts) == (False, 2)
        await store.clear_start_attempts(lease, run_id)
        record = await store.get_run(run_id)
        assert record is not None and record.start_attempts == 0
        assert [e.cursor for e in await store.read_events(run_id, 0)] == ["1", "2"]


async def test_ending_a_run_without_its_state(target: BackendTarget) -> None:
    async with target.open() as store:
        await queued_run(store)
        ((lease, run_id),) = await store.claim_queued("w", ["safe@v1"], 5)
        await store.defer_start(lease, run_id, attempts=4, retry_in=0, events=[notice("a")])
        closing = [
            RunEvent(RunEventType.ERROR, "m", "s", run_id, "1", ""),
            RunEvent(
                RunEventType.RUN_RESULT, RunResult("s", run_id, status=RunStatus.FAILED), "s", run_id, "1", ""
            ),
        ]
        error = {"type": "X", "message": "m"}
        await store.end_run(lease, run_id, status="failed", stop_reason="error", error=error, events=closing)
        assert [e.cursor for e in closing] == ["2", "3"]
        record = await store.get_run(run_id)
        assert record is not None
        assert (record.status, record.queued, record.start_attempts, record.event_count) == (
            "failed",
            False,
            0,
            3,
        )
        assert record.result["error"] == error and record.result["stop_reason"] == "error"
        await store.release(lease)
        assert await store.claim_queued("w", ["safe@v1"], 5) == []
