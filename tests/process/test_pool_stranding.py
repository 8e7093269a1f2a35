"""No pool run is stranded: real harness-worker processes, on each backend.

A run a worker claims but cannot start is retried (its agent could not be built) or failed
(its state cannot be read); a run whose rows are deleted under its worker ends its
follower; a run still busy when a drain runs out of time is requeued. Every follower gets
a final answer.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from durable_support import BackendTarget
from pool_support import Pool, ledger, submit_many

from harnessx import AgentRef, AgentRuntime, RunEventType, RunStatus, StorageError

pytestmark = pytest.mark.process


@pytest.fixture
def pool(target: BackendTarget, tmp_path: Path):  # type: ignore[no-untyped-def]
    created = Pool(target, tmp_path)
    created.migrate()
    yield created
    created.stop_all()


async def raw(target: BackendTarget, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """``sql`` (``?`` placeholders) straight against the target's tables."""
    if target.kind == "sqlite":
        with sqlite3.connect(target.location) as conn:
            return conn.execute(sql, params).fetchall()
    import asyncpg

    numbered = iter(range(1, 100))
    conn = await asyncpg.connect(target.location)
    try:
        await conn.execute("SET search_path TO harness_x")
        return [
            tuple(r) for r in await conn.fetch(re.sub(r"\?", lambda _: f"${next(numbered)}", sql), *params)
        ]
    finally:
        await conn.close()


def log_lines(process: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in process.text().splitlines() if line.startswith("{")]


async def wait_until(condition: Any, what: str, within: float = 60) -> Any:
    deadline = time.monotonic() + within
    while not (found := await condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
    return found


async def test_a_run_whose_agent_cannot_be_built_is_retried_then_fails_naming_the_cause(
    pool: Pool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "factory-broken"
    broken.touch()
    monkeypatch.setenv("HX_FACTORY_BROKEN", str(broken))
    worker = pool.worker("w1", extra=["--start-attempts", "3", "--start-backoff", "0.2"])
    await pool.wait_for_workers(1)
    async with pool.target.open(auto_migrate=False) as store:
        ((runtime, handle, _),) = await submit_many(store, ["fragile"])
        events = [event async for event in handle.events()]
        result = await asyncio.wait_for(handle.result(), 60)
        await runtime.stop()
        record = await store.get_run(handle.run_id)
    assert result.status is RunStatus.FAILED and result.error is not None
    assert "gave up after 3 attempts" in result.error["message"]
    assert "API key is missing" in result.error["message"] and result.error["type"] == "RuntimeError"
    waits = [e.data for e in events if e.type is RunEventType.WAITING]
    assert [(w["on"], w["attempt"], w["max_attempts"]) for w in waits] == [("retry", 1, 3), ("retry", 2, 3)]
    assert "API key is missing" in waits[0]["error"]["message"]
    assert [e.type for e in events[-2:]] == [RunEventType.ERROR, RunEventType.RUN_RESULT]
    assert [e.cursor for e in events] == [str(i) for i in range(1, len(events) + 1)]
    assert record is not None and (record.status, record.queued, record.start_attempts) == (
        "failed",
        False,
        0,
    )
    logged = [line["message"] for line in log_lines(worker)]
    assert sum("could not start (attempt" in m for m in logged) == 2, logged


async def test_failed_starts_are_counted_across_workers_and_a_fixed_deploy_starts_the_run(
    pool: Pool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "factory-broken"
    broken.touch()
    monkeypatch.setenv("HX_FACTORY_BROKEN", str(broken))
    first = pool.worker("w1", extra=["--start-attempts", "5", "--start-backoff", "0.5"])
    await pool.wait_for_workers(1)
    async with pool.target.open(auto_migrate=False) as store:
        ((runtime, handle, _),) = await submit_many(store, ["fragile"])

        async def attempts(count: int) -> bool:
            record = await store.get_run(handle.run_id)
            return record is not None and record.start_attempts >= count

        await wait_until(lambda: attempts(1), "the first failed start")
        first.signal(signal.SIGKILL)  # the count is on the run's row, not in the worker
        first.wait()
        pool.worker("w2", extra=["--start-attempts", "5", "--start-backoff", "0.5"])
        await wait_until(lambda: attempts(2), "the second failed start, on another worker")
        broken.unlink()  # the next deploy has its key
        result = await asyncio.wait_for(handle.result(), 60)
        events = [e async for e in handle.events()]
        record = await store.get_run(handle.run_id)
        await runtime.stop()
    assert result.ok, result
    waits = [e.data for e in events if e.type is RunEventType.WAITING and e.data.get("on") == "retry"]
    assert [w["attempt"] for w in waits][:2] == [1, 2]
    assert waits[0]["worker_id"] != waits[1]["worker_id"]
    assert record is not None and record.start_attempts == 0  # started: the count is cleared
    assert len(ledger(pool.ledger_path)) == 1


async def test_a_run_whose_rows_are_corrupt_fails_at_once_and_is_never_claimed_again(pool: Pool) -> None:
    async with pool.target.open(auto_migrate=False) as store:
        ((runtime, handle, _),) = await submit_many(store, ["safe"])  # queued, no worker yet
        await raw(
            pool.target, """UPDATE messages SET body = '{"role": "wizard"}' WHERE run_id = ?""", handle.run_id
        )
        worker = pool.worker("w1")
        result = await asyncio.wait_for(handle.result(), 60)
        assert result.status is RunStatus.FAILED and result.error is not None
        assert result.error["type"] == "CorruptStateError" and "role 'wizard'" in result.error["message"]
        # The worker moves on, and never takes the failed run again.
        ((other, healthy, _),) = await submit_many(store, ["safe"])
        assert (await asyncio.wait_for(healthy.result(), 60)).ok
        record = await store.get_run(handle.run_id)
        for started in (runtime, other):
            await started.stop()
    assert record is not None and (record.status, record.queued) == ("failed", False)
    failed = [line for line in log_lines(worker) if "role 'wizard'" in line["message"]]
    assert len(failed) == 1 and failed[0]["level"] == "ERROR"
    assert [line["key"] for line in ledger(pool.ledger_path)] == [f"{healthy.run_id}:1:call_0"]


async def test_deleting_a_runs_session_under_its_worker_ends_the_follower(pool: Pool) -> None:
    pool.slow_tool = 1.5
    worker = pool.worker("w1", concurrency=2)
    await pool.wait_for_workers(1)
    async with pool.target.open(auto_migrate=False) as store:
        ((runtime, handle, _),) = await submit_many(store, ["safe"])
        await pool.wait_for_ledger(lambda lines: len(lines) == 1)  # its tool is running
        tables = (("events", "run_id"), ("tool_results", "run_id"), ("tool_calls", "run_id"))
        for table, column in (*tables, ("messages", "session_id")):
            key = handle.run_id if column == "run_id" else handle.session_id
            await raw(pool.target, f"DELETE FROM {table} WHERE {column} = ?", key)
        await raw(pool.target, "DELETE FROM runs WHERE id = ?", handle.run_id)
        await raw(pool.target, "DELETE FROM sessions WHERE id = ?", handle.session_id)
        with pytest.raises(StorageError, match="is not in the store"):
            await asyncio.wait_for(handle.result(), 60)
        await wait_until(
            lambda: _logged(worker, "was deleted from the store while this worker drove it"),
            "the worker's report",
        )
        # The worker carries on with other runs.
        other = AgentRuntime(AgentRef("safe", "v1"), backend=store, execution="pool")
        assert (await asyncio.wait_for((await other.submit("next")).result(), 60)).ok
        await other.stop()
        await runtime.stop()
    assert worker.popen.poll() is None


async def _logged(process: Any, text: str) -> bool:
    return any(text in line["message"] for line in log_lines(process))


async def test_a_run_still_busy_when_the_drain_times_out_is_requeued_and_finished_elsewhere(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HX_HANG_FIRST_ATTEMPT", "600")  # the first attempt never returns in time
    draining = pool.worker("draining", concurrency=2, extra=["--drain-timeout", "0.5"])
    await pool.wait_for_workers(1)
    async with pool.target.open(auto_migrate=False) as store:
        ((runtime, handle, _),) = await submit_many(store, ["safe"])
        await pool.wait_for_ledger(lambda lines: len(lines) == 1)
        draining.signal(signal.SIGTERM)
        # It exits once the drain timeout is over, without waiting for the tool's thread.
        assert draining.wait(timeout=60) == 0
        record = await store.get_run(handle.run_id)
        session = await store.get_session(handle.session_id)
        assert record is not None and record.queued and record.status == "running"
        assert session is not None and session.lease_owner is None
        # No supervisor, nobody's hand: the next worker takes it from the queue.
        pool.worker("taker", concurrency=2)
        result = await asyncio.wait_for(handle.result(), 60)
        await runtime.stop()
    assert result.ok, result
    assert [line["attempt"] for line in ledger(pool.ledger_path)] == [1, 2]
