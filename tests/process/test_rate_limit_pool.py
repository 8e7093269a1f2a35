"""A fleet-wide model rate limit holds across three real harness-worker processes, counted
from the model vendor's side (tests/fake_vendor.py, an HTTP server on loopback in a process
of its own that every worker calls): no window of the vendor's log has more calls or tokens
than the limits let through, although the three workers together could have sent them all
at once."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from durable_support import BackendTarget
from fake_vendor import all_logged, logged_calls, most_in_window
from pool_support import Pool

from harnessx import AgentRef, AgentRuntime

pytestmark = pytest.mark.process


@pytest.fixture
def pool(target: BackendTarget, tmp_path: Path):  # type: ignore[no-untyped-def]
    created = Pool(target, tmp_path)
    created.migrate()
    yield created
    created.stop_all()


@pytest.fixture
def throttled() -> tuple[int, str]:
    """How many first requests the vendor refuses with a 429, and its Retry-After."""
    return (0, "1")


@pytest.fixture
def vendor(tmp_path: Path, throttled: tuple[int, str]) -> Iterator[tuple[str, Path]]:
    """A vendor process: its base URL and the log of the calls it served."""
    log = tmp_path / "vendor.jsonl"
    script = str(Path(__file__).resolve().parents[1] / "fake_vendor.py")
    process = subprocess.Popen(
        [sys.executable, script, str(log), str(throttled[0]), throttled[1]],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip(), log
    finally:
        process.kill()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def limits(pool: Pool, *args: str) -> str:
    done = pool.cli("limits", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def waits_counted(port: int, bucket: str) -> float:
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    found = re.search(rf'^harnessx_rate_limit_waits_total{{bucket="{re.escape(bucket)}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.mark.timeout(300)
async def test_a_rate_limit_holds_across_three_worker_processes(
    pool: Pool, vendor: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    base_url, log = vendor
    monkeypatch.setenv("HX_VENDOR_URL", base_url)
    # A call a second of gpt-rpm; 400 tokens a second of gpt-tpm (a call uses ~350).
    assert "at most 60 calls a minute in openai/gpt-rpm" in limits(
        pool, "rate", "openai/gpt-rpm", "--rpm", "60"
    )
    assert "24000 tokens a minute" in limits(pool, "rate", "openai/gpt-tpm", "--tpm", "24000")
    ports = [free_port() for _ in range(3)]
    for index, port in enumerate(ports):
        pool.worker(f"w{index}", concurrency=4, extra=["--metrics-addr", f"127.0.0.1:{port}"])
    await pool.wait_for_workers(3)
    async with pool.target.open(auto_migrate=False) as store:
        for agent, count in (("vendor-rpm", 10), ("vendor-tpm", 20)):
            for index in range(count):
                runtime = AgentRuntime(AgentRef(agent, "v1"), backend=store, execution="pool")
                await runtime.start()
                await runtime.submit(f"{agent} job {index}")
                await runtime.stop()
    # Watched from the database, by one query now and then: following 30 runs would keep
    # this process busy, and the workers share its two cores.
    deadline = time.monotonic() + 180
    while (
        statuses := sorted(status for (status,) in await rows(pool.target, "SELECT status FROM runs"))
    ).count("running"):
        assert time.monotonic() < deadline, statuses
        await asyncio.sleep(0.5)
    assert statuses == ["completed"] * 30
    rpm, tpm = logged_calls(log, "gpt-rpm"), logged_calls(log, "gpt-tpm")
    assert len(rpm) == 10 and len(tpm) == 20
    assert len({owner for (owner,) in await rows(pool.target, "SELECT owner FROM run_claims")}) == 3
    # Each call that waited arrived no earlier than the start its reservation gave it, and
    # those starts are a second apart: the fleet's calls took turns.
    starts = {
        message: json.loads(data)["until"]
        for message, data in await rows(
            pool.target,
            "SELECT r.request_message, CAST(e.data AS TEXT) FROM events e JOIN runs r ON r.id = e.run_id "
            "WHERE e.type = 'waiting' AND CAST(e.data AS TEXT) LIKE '%rate_limit%'",
        )
    }
    late = [call.at - starts[call.prompt] for call in rpm + tpm if call.prompt in starts]
    assert len(late) >= 20 and min(late) >= -0.01, late
    rpm_starts = sorted(starts[call.prompt] for call in rpm if call.prompt in starts)
    assert all(b - a >= 1 - 0.002 for a, b in itertools.pairwise(rpm_starts)), rpm_starts
    # From the vendor's side: at most 4 + 1 calls in any 4 s, give or take how late calls
    # were delivered (the worker's event loop, store writes and the connection, on a loaded
    # machine: calls late by different amounts come closer together than their starts).
    delivery = max(0.0, max(late))
    window = 4.0
    assert most_in_window(rpm, window) <= (window + delivery) * 60 / 60 + 1, (sorted(c.at for c in rpm), late)
    # Tokens: at most the window's 400 a second, plus one call's reservation the window's
    # start cuts through (its input and the 50 tokens of output it may use).
    bound = (window + delivery) * 24000 / 60 + max(c.tokens for c in tpm) + 50
    assert most_in_window(tpm, window, tokens=True) <= bound, [(c.at, c.tokens) for c in tpm]
    # Nearly every run waited for its turn, in its events and in the workers' metrics.
    assert len(starts) >= 24
    counted = [await waits_counted(port, "openai/gpt-rpm") for port in ports]
    assert sum(counted) >= 6, counted
    listing = limits(pool, "list")
    assert "openai/gpt-rpm" in listing and "openai/gpt-tpm" in listing


@pytest.mark.timeout(300)
@pytest.mark.parametrize("throttled", [(1, "3")])
async def test_a_vendors_retry_after_pauses_the_bucket_for_every_worker(
    pool: Pool, vendor: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vendor refuses the fleet's first call with 429, Retry-After: 3. The calls other
    workers make next wait those 3 s out too, not only the refused call's own retry,
    although the fleet's limit (100 a second) would let them all go at once."""
    base_url, log = vendor
    monkeypatch.setenv("HX_VENDOR_URL", base_url)
    limits(pool, "rate", "openai/gpt-pause", "--rpm", "6000")
    # One run at a time a worker: the refused run keeps its worker while it waits to retry,
    # so the runs submitted next go to the other two.
    for index in range(3):
        pool.worker(f"w{index}", concurrency=1)
    await pool.wait_for_workers(3)
    async with pool.target.open(auto_migrate=False) as store:

        async def submit(message: str) -> None:
            runtime = AgentRuntime(AgentRef("vendor-pause", "v1"), backend=store, execution="pool")
            await runtime.start()
            await runtime.submit(message)
            await runtime.stop()

        await submit("refused first")
        deadline = time.monotonic() + 120
        while not [call for call in all_logged(log) if call.status == 429]:
            assert time.monotonic() < deadline, "the vendor never saw the first call"
            await asyncio.sleep(0.05)
        for index in range(4):
            await submit(f"paused {index}")
    deadline = time.monotonic() + 180
    while (
        statuses := sorted(status for (status,) in await rows(pool.target, "SELECT status FROM runs"))
    ).count("running"):
        assert time.monotonic() < deadline, statuses
        await asyncio.sleep(0.5)
    assert statuses == ["completed"] * 5
    (refused,) = [call for call in all_logged(log) if call.status == 429]
    served = logged_calls(log, "gpt-pause")
    assert refused.prompt == "refused first" and len(served) == 5
    # No call of the bucket reached the vendor before its Retry-After was over: the retry
    # of the refused call, and the other workers' calls, which waited in their reservations.
    assert min(call.at for call in served) >= refused.at + 3 - 0.05, (refused.at, [c.at for c in served])
    owners = dict(
        await rows(
            pool.target, "SELECT r.request_message, c.owner FROM runs r JOIN run_claims c ON c.run_id = r.id"
        )
    )
    # The two other workers took the first two runs submitted after the 429 (the refused
    # run held its worker), and waited in their reservations for the pause to end.
    others = [call for call in served if owners[call.prompt] != owners["refused first"]]
    assert len(others) >= 2, owners
    waited = {
        message
        for message, data in await rows(
            pool.target,
            "SELECT r.request_message, CAST(e.data AS TEXT) FROM events e JOIN runs r ON r.id = e.run_id "
            "WHERE e.type = 'waiting' AND CAST(e.data AS TEXT) LIKE '%rate_limit%'",
        )
    }
    assert len(waited) >= 2 and waited <= {f"paused {index}" for index in range(4)}, waited


@pytest.mark.timeout(300)
async def test_a_long_wait_for_budget_gives_the_worker_slot_back_and_keeps_its_place(
    pool: Pool, vendor: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose model call must wait 20 s for its rate budget does not keep its worker's
    one slot meanwhile: it goes back to the queue until shortly before its start, another
    run uses the slot, and the run then calls at its start from the reservation kept for
    it (the bucket's budget is spent once for it, not twice)."""
    base_url, log = vendor
    monkeypatch.setenv("HX_VENDOR_URL", base_url)
    limits(pool, "rate", "openai/gpt-hold", "--rpm", "3")  # a call every 20 s
    pool.worker("w0", concurrency=1)
    await pool.wait_for_workers(1)
    async with pool.target.open(auto_migrate=False) as store:

        async def submit(agent: str, message: str) -> str:
            runtime = AgentRuntime(AgentRef(agent, "v1"), backend=store, execution="pool")
            await runtime.start()
            handle = await runtime.submit(message)
            await runtime.stop()
            return str(handle.run_id)

        first = await store.reserve_rate("openai/gpt-hold", 0)  # someone else's, just now
        assert first is not None and first.wait == 0
        held = await submit("vendor-hold", "held back")
        deadline = time.monotonic() + 60
        while not await rows(pool.target, "SELECT run_id FROM rate_holds"):
            assert time.monotonic() < deadline, "the run never gave its slot back"
            await asyncio.sleep(0.1)
        other = await submit("safe", "meanwhile")
        status = f"SELECT status FROM runs WHERE id = '{other}'"
        while (await rows(pool.target, status)) != [("completed",)]:
            assert time.monotonic() < deadline, await rows(pool.target, "SELECT id, status FROM runs")
            await asyncio.sleep(0.1)
        # The worker's one slot served the other run while the held one waited in the queue.
        assert logged_calls(log, "gpt-hold") == [] and time.time() < first.start + 20
        status = f"SELECT status FROM runs WHERE id = '{held}'"
        deadline = time.monotonic() + 120
        while (await rows(pool.target, status)) != [("completed",)]:
            assert time.monotonic() < deadline, await rows(pool.target, "SELECT id, status FROM runs")
            await asyncio.sleep(0.2)
        (call,) = logged_calls(log, "gpt-hold")
        assert call.at >= first.start + 20 - 0.05
        waits = [
            json.loads(data)
            for (data,) in await rows(
                pool.target,
                f"SELECT CAST(data AS TEXT) FROM events WHERE run_id = '{held}' AND type = 'waiting' "
                "ORDER BY seq",
            )
        ]
        assert waits[0]["on"] == "rate_limit" and waits[0]["requeued"] is True, waits
        assert waits[0]["until"] == pytest.approx(first.start + 20, abs=0.01)
        # Claimed twice, one reservation: the bucket's next start is 40 s after the first,
        # not 60 s, and no reservation is left kept.
        assert len(await rows(pool.target, f"SELECT owner FROM run_claims WHERE run_id = '{held}'")) == 2
        assert await rows(pool.target, "SELECT run_id FROM rate_holds") == []
        after = await store.reserve_rate("openai/gpt-hold", 0)
        assert after is not None and after.start == pytest.approx(first.start + 40, abs=0.01)


async def rows(target: BackendTarget, query: str) -> list[tuple[Any, ...]]:
    if target.kind == "sqlite":
        import sqlite3

        with sqlite3.connect(target.location) as conn:
            return list(conn.execute(query))
    import asyncpg

    conn = await asyncpg.connect(target.location, server_settings={"search_path": "harness_x"})
    try:
        return [tuple(row) for row in await conn.fetch(query)]
    finally:
        await conn.close()


def test_the_rate_command_says_what_is_wrong_with_its_input(pool: Pool) -> None:
    def attempt(*args: str) -> subprocess.CompletedProcess[str]:
        return pool.cli("limits", "rate", *args)

    cases = [
        (("openai/gpt-4o",), 2, "needs requests per minute, tokens per minute or both (--rpm N, --tpm N)"),
        (("openai/gpt-4o", "--rpm", "0"), 2, "requests per minute must be a number above 0"),
        (("openai/gpt-4o", "--rpm", "5", "--burst", "-1"), 2, "burst must be from 0 to 3600"),
        (("open ai", "--rpm", "5"), 2, "without spaces"),
        (("openai/gpt-4o", "--off"), 1, "no rate limit is set on 'openai/gpt-4o'"),
        (("openai/gpt-4o", "--off", "--rpm", "5"), 2, "without --rpm or --tpm"),
    ]
    for args, code, said in cases:
        done = attempt(*args)
        assert (done.returncode, said in done.stderr, "Traceback" in done.stderr) == (code, True, False), (
            args,
            done.stderr,
        )
    assert (
        "at most 5 calls a minute and 900 tokens a minute"
        in attempt("openai/gpt-4o", "--rpm", "5", "--tpm", "900").stdout
    )
    listing = limits(pool, "list")
    assert re.search(r"openai/gpt-4o\s+5\s+900\s+0s", listing), listing
    assert "removed the rate limit on openai/gpt-4o" in attempt("openai/gpt-4o", "--off").stdout
    assert "openai/gpt-4o" not in limits(pool, "list")
