"""The pool as deployed: harness-worker and harness-supervisor processes, real kills."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from durable_support import BackendTarget
from pool_support import (
    Pool,
    Process,
    audit_generations,
    cut_leader_connection,
    latest_term,
    ledger,
    submit_many,
)

from harnessx import AgentRef, AgentRuntime, RunStatus

pytestmark = pytest.mark.process


@pytest.fixture
def pool(target: BackendTarget, tmp_path: Path):  # type: ignore[no-untyped-def]
    created = Pool(target, tmp_path)
    created.migrate()
    yield created
    created.stop_all()


async def results_of(submitted: list, within: float = 90) -> list:  # type: ignore[type-arg]
    return await asyncio.wait_for(asyncio.gather(*(handle.result() for _, handle, _ in submitted)), within)


async def test_stop_returns_the_pool_run_it_waited_for(pool: Pool) -> None:
    # As a runtime that drove the run returns it, and as on Temporal: stop() reads nothing.
    pool.worker("w1")
    await pool.wait_for_workers(1)
    async with pool.target.open(auto_migrate=False) as store:
        runtime = AgentRuntime(AgentRef("safe", "v1"), backend=store, execution="pool")
        result = await asyncio.wait_for(runtime.run("the report"), 60)
        stopped = await runtime.stop()
    assert result.ok
    assert stopped == {"session_id": result.session_id, "run": result, "state": "stopped"}


async def test_fifty_runs_complete_and_a_killed_worker_is_recovered(pool: Pool) -> None:
    pool.slow_tool = 0.3
    first = pool.worker("w1")
    second = pool.worker("w2")
    pool.supervisor("s1")
    await pool.wait_for_workers(2)
    policies = ["safe", "idempotent", "manual"] * 16 + ["safe", "safe"]
    async with pool.target.open(auto_migrate=False) as store:
        submitted = await submit_many(store, policies)
        # Kill w1 once it is in the middle of tool calls.
        await pool.wait_for_ledger(
            lambda lines: sum(1 for line in lines if line["pid"] == first.popen.pid) >= 2
        )
        killed_at = time.monotonic()
        first.signal(signal.SIGKILL)
        first.wait()
        results = await results_of(submitted)
        elapsed = time.monotonic() - killed_at
        for runtime, _, _ in submitted:
            await runtime.stop()
    lines = ledger(pool.ledger_path)
    calls = Counter(line["key"] for line in lines)
    on_dead = {line["key"] for line in lines if line["pid"] == first.popen.pid}
    for result, (_, _, policy) in zip(results, submitted, strict=True):
        key_calls = [key for key in calls if key.startswith(result.run_id)]
        if result.status is RunStatus.AWAITING_INPUT:
            # Only a manual call cut off by the kill may wait for a person.
            (pending,) = result.pending
            assert policy == "manual" and pending.status == "uncertain"
            # Dispatched on the dead worker: it ran there once, or never got to start.
            key = pending.execution_key
            assert calls[key] == 0 or (calls[key] == 1 and key in on_dead)
            continue
        assert result.ok, result
        (key,) = key_calls
        # Once, or a second time only after the kill interrupted it (never for manual).
        assert calls[key] == 1 or (calls[key] == 2 and key in on_dead and policy != "manual")
    assert any(r.status is RunStatus.COMPLETED for r in results)
    assert second.popen.poll() is None
    assert await audit_generations(pool.target) == []
    # The killed worker's runs were resumed without waiting for its 30 s leases.
    assert elapsed < pool.lease_seconds


async def test_a_zombie_worker_is_fenced_out(pool: Pool) -> None:
    pool.lease_seconds = 1.0
    pool.slow_tool = 2.5
    zombie = pool.worker("zombie", concurrency=1)
    await pool.wait_for_workers(1)
    async with pool.target.open(auto_migrate=False) as store:
        submitted = await submit_many(store, ["safe"])
        await pool.wait_for_ledger(lambda lines: len(lines) == 1)
        zombie.signal(signal.SIGSTOP)  # a long GC pause: the process lives, its lease does not
        pool.worker("rescuer", concurrency=1)
        pool.supervisor("s1")
        (result,) = await results_of(submitted)
        zombie.signal(signal.SIGCONT)
        # Its tool returns, it tries to go on and learns the run is not its own any more.
        await wait_for_log(
            zombie, lambda p: "lease lost to another process" in p.text(), "stopped the run it lost"
        )
        runtime = submitted[0][0]
        status = await runtime.status()
        await runtime.stop()
    assert result.ok and status["run"].ok
    lines = ledger(pool.ledger_path)
    assert [line["attempt"] for line in lines] == [1, 2]
    assert lines[1]["token"] > lines[0]["token"]  # the rescuer's fencing token is newer
    assert await audit_generations(pool.target) == []
    assert "lease" in zombie.text().lower()


async def test_sigterm_drain_hands_runs_over_at_once(pool: Pool) -> None:
    pool.slow_tool = 0.5
    draining = pool.worker("draining", concurrency=4)
    await pool.wait_for_workers(1)
    async with pool.target.open(auto_migrate=False) as store:
        submitted = await submit_many(store, ["safe"] * 8)
        await pool.wait_for_ledger(lambda lines: len(lines) >= 2)
        pool.worker("taker", concurrency=4)
        started = time.monotonic()
        draining.signal(signal.SIGTERM)
        assert draining.wait(timeout=20) == 0
        results = await results_of(submitted)
        elapsed = time.monotonic() - started
        for runtime, _, _ in submitted:
            await runtime.stop()
    assert all(result.ok for result in results)
    assert elapsed < pool.lease_seconds  # nobody waited for a lease to expire
    assert " draining " in draining.text()


def leads(process: Process) -> list[dict[str, Any]]:
    return [
        r
        for r in process.records()
        if str(r.get("message", "")).startswith("this supervisor is now the leader")
    ]


def leader_writes(process: Process) -> list[dict[str, Any]]:
    """Log lines of the writes a supervisor made as the leader (recoveries, dead workers)."""
    return [
        r
        for r in process.records()
        if str(r.get("message", "")).startswith(("requeued run", "released"))
        or str(r.get("message", "")).endswith(" is dead")
    ]


async def wait_for_log(process: Process, predicate: Any, what: str, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not predicate(process):
        assert process.popen.poll() is None, f"{process.name} exited:\n{process.text()[-3000:]}"
        assert time.monotonic() < deadline, f"{process.name} never {what}:\n{process.text()[-3000:]}"
        await asyncio.sleep(0.05)


async def test_supervisor_failover(pool: Pool) -> None:
    pool.slow_tool = 0.5
    leader = pool.supervisor("leader")
    await wait_for_log(leader, leads, "became the leader")
    standby = pool.supervisor("standby")
    victim = pool.worker("victim", concurrency=2)
    await pool.wait_for_workers(1)
    leader.signal(signal.SIGKILL)
    leader.wait()
    async with pool.target.open(auto_migrate=False) as store:
        submitted = await submit_many(store, ["safe"] * 4)
        await pool.wait_for_ledger(lambda lines: any(line["pid"] == victim.popen.pid for line in lines))
        pool.worker("survivor", concurrency=2)
        await pool.wait_for_workers(2)
        victim.signal(signal.SIGKILL)
        victim.wait()
        results = await results_of(submitted)
        for runtime, _, _ in submitted:
            await runtime.stop()
    assert all(result.ok for result in results)
    # The standby took the next epoch and wrote under it only: at least marking the victim dead.
    await wait_for_log(
        standby, lambda p: any(" is dead" in r["message"] for r in leader_writes(p)), "saw the kill"
    )
    ((first,), (taken,)) = leads(leader), leads(standby)
    assert (first["leader_epoch"], taken["leader_epoch"]) == (1, 2)
    assert await latest_term(pool.target) == (2, taken["supervisor_id"])
    for write in leader_writes(standby):
        assert write["leader_epoch"] == 2 and write["db_time"] >= taken["db_time"], write
    assert leader_writes(leader) == [] or all(w["leader_epoch"] == 1 for w in leader_writes(leader))


@pytest.mark.parametrize("target", ["postgres"], indirect=True)  # SQLite's file lock has no connection
async def test_a_leader_whose_lock_went_with_its_connection_steps_down(pool: Pool) -> None:
    """What a PostgreSQL restart does to the leader, without the restart: its lock goes with
    its connection while the process is unable to notice (stopped). The standby takes over;
    the old leader, continued, steps down, and nothing it wrote is from after the takeover."""
    pool.slow_tool = 0.5
    old = pool.supervisor("old")
    await wait_for_log(old, leads, "became the leader")
    standby = pool.supervisor("standby")
    await wait_for_log(standby, lambda p: "standing by" in p.text(), "stood by")
    victim = pool.worker("victim", concurrency=2)
    await pool.wait_for_workers(1)
    old.signal(signal.SIGSTOP)
    try:
        await cut_leader_connection(pool.target.location)
        await wait_for_log(standby, leads, "took over")
        async with pool.target.open(auto_migrate=False) as store:
            submitted = await submit_many(store, ["safe"] * 4)
            await pool.wait_for_ledger(lambda lines: any(line["pid"] == victim.popen.pid for line in lines))
            pool.worker("survivor", concurrency=2)
            await pool.wait_for_workers(2)
            victim.signal(signal.SIGKILL)
            victim.wait()
            results = await results_of(submitted)
            for runtime, _, _ in submitted:
                await runtime.stop()
    finally:
        old.signal(signal.SIGCONT)
    await wait_for_log(old, lambda p: "lost its leadership" in p.text(), "stepped down")
    assert all(result.ok for result in results)
    ((first,), (taken,)) = leads(old), leads(standby)
    assert (first["leader_epoch"], taken["leader_epoch"]) == (1, 2)
    assert await latest_term(pool.target) == (2, taken["supervisor_id"])
    for write in leader_writes(old):
        assert write["leader_epoch"] == 1 and write["db_time"] < taken["db_time"], write
    assert old.popen.poll() is None and standby.popen.poll() is None
    assert len(leads(old)) == 1  # it stands by now: the standby holds the lock


def test_pool_metrics_are_served(target: BackendTarget, tmp_path: Path) -> None:
    import httpx

    from harnessx.testing import free_port

    pool = Pool(target, tmp_path)
    pool.migrate()
    worker_port, supervisor_port = free_port(), free_port()
    try:
        pool.worker("w", extra=["--metrics-addr", f"127.0.0.1:{worker_port}"])
        pool.supervisor("s", extra=["--metrics-addr", f"127.0.0.1:{supervisor_port}"])
        deadline = time.monotonic() + 20
        while True:
            try:
                worker = httpx.get(f"http://127.0.0.1:{worker_port}/metrics")
                supervisor = httpx.get(f"http://127.0.0.1:{supervisor_port}/metrics")
                ready = httpx.get(f"http://127.0.0.1:{worker_port}/readyz")
                if ready.status_code == 200 and "harnessx_supervisor_leader 1.0" in supervisor.text:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "endpoints did not come up"
            time.sleep(0.1)
    finally:
        pool.stop_all()
    assert worker.headers["content-type"].startswith("text/plain")
    for name in (
        "harnessx_runs_claimed_total", "harnessx_runs_finished_total", "harnessx_active_runs",
        "harnessx_concurrency_slots", "harnessx_lease_renewals_total", "harnessx_lease_renewal_seconds",
        "harnessx_leases_lost_total", "harnessx_fenced_writes_rejected_total", "harnessx_queue_depth",
        "harnessx_queue_oldest_age_seconds", "harnessx_tool_calls_total",
    ):  # fmt: skip
        assert f"# TYPE {name.removesuffix('_total')}" in worker.text, name
    for name in (
        "harnessx_supervisor_leader", "harnessx_supervisor_leader_epoch",
        "harnessx_supervisor_writes_refused_total",
        "harnessx_orphans_detected_total", "harnessx_orphans_recovered_total",
        "harnessx_orphan_recovery_seconds", "harnessx_workers_live", "harnessx_queue_depth",
        "harnessx_stuck_runs",
    ):  # fmt: skip
        assert f"# TYPE {name.removesuffix('_total')}" in supervisor.text, name


def command_line(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


async def test_the_dsn_and_its_password_stay_off_the_process_list(pg_database: str, tmp_path: Path) -> None:
    # The shared cluster trusts every login, so the server ignores the password; what matters
    # is where the processes got it from: only their environment holds the DSN.
    password = "pool-Secret-8f3e"
    parts = urlsplit(pg_database)
    with_password = urlunsplit(
        parts._replace(netloc=f"{parts.username}:{password}@{parts.hostname}:{parts.port}")
    )
    database = parts.path.lstrip("/")
    pool = Pool(BackendTarget("postgres", with_password), tmp_path)
    pool.migrate()
    try:
        worker = pool.worker("w1", concurrency=1)
        supervisor = pool.supervisor("s1")
        await pool.wait_for_workers(1)
        async with pool.target.open(auto_migrate=False) as store:
            ((runtime, handle, _),) = await submit_many(store, ["safe"])
            result = await asyncio.wait_for(handle.result(), 60)
            await runtime.stop()
        assert result.ok, result
        for process in (worker, supervisor):
            assert process.popen.poll() is None, process.text()
            line = command_line(process.popen.pid)
            assert "harness-" in line, line
            assert password not in line and database not in line, line
            assert password not in process.text()
    finally:
        pool.stop_all()


@pytest.mark.parametrize("control", ["cancel", "pause"])
async def test_a_request_the_dead_worker_never_acted_on_is_acted_on_by_the_next(
    pool: Pool, control: str
) -> None:
    """The worker driving the run is frozen mid-tool when the request arrives (alive, so the
    request is written for it) and then dies: the worker that takes the run over acts on the
    request as it starts, not at its first lease renewal, which a short run never reaches."""
    pool.hold_tools()
    first = pool.worker("w1", concurrency=1)
    await pool.wait_for_workers(1)
    async with pool.target.open(auto_migrate=False) as store:
        ((runtime, handle, _),) = await submit_many(store, ["safe"])
        await pool.wait_for_ledger(lambda lines: len(lines) == 1)
        first.signal(signal.SIGSTOP)
        await (runtime.cancel() if control == "cancel" else runtime.pause())
        first.signal(signal.SIGKILL)
        first.wait()
        pool.release_tools()
        pool.worker("w2", concurrency=1)
        pool.supervisor("s1")
        result = await asyncio.wait_for(handle.result(), 60)
        session = await store.get_session(result.session_id)
        await runtime.stop()
    assert result.status is (RunStatus.CANCELLED if control == "cancel" else RunStatus.PAUSED), result
    assert session is not None and session.control is None
    assert len(ledger(pool.ledger_path)) == 1  # the safe tool was not run again first
