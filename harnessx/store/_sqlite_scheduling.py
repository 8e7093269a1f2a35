"""Scheduling the pool on SQLite (a part of ``SQLiteBackend``): the claim, limits, shares.

A claim is one ``BEGIN IMMEDIATE`` transaction, and SQLite lets one writer in at a time, so
counting a key's driving runs and taking one more cannot race with another claimer: the
count and the take are in the same serialised transaction. The algorithm is the one
``harnessx_claim_runs`` runs on PostgreSQL (see docs/scheduling.md).
"""

from __future__ import annotations

import heapq
import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from harnessx.store._deadlines import LeaseDeadlines
from harnessx.store._protocol import Lease
from harnessx.store._queries import load_queries
from harnessx.store._scheduling import (
    AGENT_PREFIX,
    LOOK_AHEAD,
    Claims,
    ConcurrencyLimit,
    QueueGroup,
    QueueShape,
    RateAsk,
    RateBucket,
    RateLimit,
    RateRelease,
    RateReservation,
    TenantShare,
    check_key,
    check_max_running,
    check_pattern,
    check_rate,
    check_weight,
    governing_rate,
    lease_ahead,
    lease_rate,
    matching_pattern,
    released_seconds,
    reserve_rate,
    stride_allocation,
    token_seconds,
)

__all__ = ["SQLiteScheduling"]

T = TypeVar("T")
Q = load_queries("sqlite")


class _Limits:
    """The limits met during one claim: each limited key's cap and runs driving (plus those
    this claim took), and the keys found full."""

    def __init__(self, conn: sqlite3.Connection, now: float) -> None:
        self.conn, self.now = conn, now
        self.caps: dict[str, int | None] = {}
        self.used: dict[str, int] = {}
        self.full: set[str] = set()

    def room(self, keys: list[str]) -> bool:
        for key in keys:
            if key in self.full:
                return False
            if key not in self.caps:
                cap, driving = self.conn.execute(Q["key_room"], (key, self.now)).fetchone()
                self.caps[key] = cap
                if cap is not None:
                    self.used[key] = int(driving)
            cap = self.caps[key]
            if cap is None:
                continue
            if self.used[key] >= cap:
                self.full.add(key)
                return False
        return True

    def took(self, keys: list[str]) -> None:
        for key in keys:
            if key in self.used:
                self.used[key] += 1


class SQLiteScheduling:
    """Mixed into ``SQLiteBackend``, whose ``_call`` runs a function on the database thread
    and ``_write`` makes it one write transaction."""

    lease_seconds: float
    _deadlines: LeaseDeadlines

    if TYPE_CHECKING:

        async def _call(self, fn: Callable[..., T], *args: Any) -> T: ...

        def _write(self, conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], T]) -> T: ...

        def owner_for(self, holder: str) -> str: ...

        def _fence(self, conn: sqlite3.Connection, lease: Lease, new_messages: int) -> int: ...

        def _unsynced(self, conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], T]) -> T: ...

    async def claim_queued(
        self, holder: str, agent_refs: list[str] | None, limit: int, *, rate: RateAsk | None = None
    ) -> Claims:
        owner = self.owner_for(holder)
        refs = None if agent_refs is None else list(dict.fromkeys(agent_refs))

        def body(conn: sqlite3.Connection) -> Claims:
            now = time.time()
            picked = self._pick(conn, refs, limit, now)
            claims = Claims(deferred=picked.deferred)
            for run_id, session_id, _ in sorted(picked.runs, key=lambda p: (p[2], p[0])):
                (generation,) = conn.execute(
                    Q["take_lease"], (owner, now + self.lease_seconds, session_id)
                ).fetchone()
                conn.execute(Q["dequeue_run"], (now, int(generation), run_id))
                conn.execute(Q["record_claim"], (run_id, int(generation), owner, now))
                claims.append((Lease(session_id, owner, int(generation)), run_id))
            if picked.floor is not None:  # several groups wait: the ones served advance
                served: dict[str, int] = {}
                for _, _, tenant in picked.runs:
                    served[tenant] = served.get(tenant, 0) + 1
                for tenant in sorted(served):
                    conn.execute(Q["advance_pass"], (picked.floor, served[tenant], tenant))
            if rate is not None and claims:  # the runs' first calls, in the claim's transaction
                claims.rate = _lease_ahead(conn, rate, len(claims))
            return claims

        sent = time.monotonic()
        claims: Claims = await self._call(self._write, body)
        for lease, _ in claims:
            self._deadlines.extended(lease, sent)
        return claims

    def _pick(self, conn: sqlite3.Connection, refs: list[str] | None, limit: int, now: float) -> _Picked:
        limited, floor = conn.execute(Q["claim_setup"]).fetchone()
        picked = _Picked(floor)
        if refs is not None and len(refs) > 1:
            refs = [str(ref) for (ref,) in conn.execute(Q["queued_agents"], (json.dumps(refs),))]
            if not refs:  # none of the agents served has a run queued
                return picked
        limits = _Limits(conn, now) if limited else None
        if floor is None:  # only untenanted runs wait
            self._take_from(conn, "", limit, refs, now, limits, picked)
            return picked
        # The first round shares the claim among the limit + 1 groups next in line, so those
        # are all it reads (of as many as a thousand tenants); a later round reads them all.
        waiting = _waiting(conn, floor, limit + 1)
        everyone = len(waiting) <= limit
        taken: dict[str, int] = {}
        done: set[str] = set()
        # Share out what is left among the groups that may still supply, by their passes as
        # this claim has advanced them, until the claim is full or no group can give more.
        while len(picked.runs) < limit:
            left = limit - len(picked.runs)
            if not everyone and (taken or done):
                waiting, everyone = _waiting(conn, floor, -1), True
            groups = sorted(
                (
                    (name, passed + taken.get(name, 0) / weight, weight)
                    for name, passed, weight in waiting
                    if name not in done
                ),
                key=lambda g: (g[1] + 1 / g[2], g[0]),
            )[: left + 1]
            if not groups:
                break
            for name, wanted in stride_allocation(groups, left):
                want = min(wanted, limit - len(picked.runs))
                got = self._take_from(conn, name, want, refs, now, limits, picked)
                taken[name] = taken.get(name, 0) + got
                if got < want:
                    done.add(name)
        return picked

    @staticmethod
    def _take_from(
        conn: sqlite3.Connection,
        tenant: str,
        want: int,
        refs: list[str] | None,
        now: float,
        limits: _Limits | None,
        picked: _Picked,
    ) -> int:
        """Pick up to ``want`` runs of ``tenant`` in rank order; how many it picked."""
        got = skipped = 0
        for run_id, session_id, key, agent_ref, _ in _queue(conn, tenant, refs, now):
            if run_id in picked.ids or session_id in picked.sessions:
                continue
            keys = [k for k in (key, f"{AGENT_PREFIX}{agent_ref}" if agent_ref else None) if k]
            if limits is not None and not limits.room(keys):
                picked.deferred += 1
                skipped += 1
                if skipped >= LOOK_AHEAD:
                    break
                continue
            if limits is not None:
                limits.took(keys)
            picked.add(str(run_id), str(session_id), tenant)
            got += 1
            if got >= want:
                break
        return got

    async def set_concurrency_limit(self, pattern: str, max_running: int) -> None:
        check_pattern(pattern)
        values = (pattern, check_max_running(max_running), time.time())
        await self._call(self._write, lambda conn: conn.execute(Q["set_limit"], values))

    async def remove_concurrency_limit(self, pattern: str) -> bool:
        def body(conn: sqlite3.Connection) -> bool:
            return conn.execute(Q["remove_limit"], (pattern,)).fetchone() is not None

        return await self._call(self._write, body)

    async def concurrency_limits(self) -> list[ConcurrencyLimit]:
        def body(conn: sqlite3.Connection) -> list[ConcurrencyLimit]:
            now = time.time()
            found = []
            for pattern, cap, source in conn.execute(Q["list_limits"]).fetchall():
                usage: tuple[int, int] | None = None
                if pattern.startswith(AGENT_PREFIX) and not pattern.endswith("*"):
                    usage = conn.execute(Q["agent_usage"], (pattern[len(AGENT_PREFIX) :], now)).fetchone()
                elif not pattern.endswith("*"):
                    usage = conn.execute(Q["key_usage"], (pattern, now)).fetchone()
                driving, queued = usage if usage is not None else (None, None)
                found.append(ConcurrencyLimit(str(pattern), int(cap), str(source), driving, queued))
            return found

        return await self._call(body)

    async def publish_agent_defaults(self, defaults: dict[str, tuple[int | None, int | None]]) -> None:
        def body(conn: sqlite3.Connection) -> None:
            now = time.time()
            for ref, (priority, max_concurrent) in sorted(defaults.items()):
                conn.execute(Q["publish_agent_defaults"], (ref, priority, max_concurrent, now))

        if defaults:
            await self._call(self._write, body)

    async def set_tenant_weight(self, tenant: str, weight: float) -> None:
        check_key(tenant, "tenant")
        values = (tenant, check_weight(weight))
        await self._call(self._write, lambda conn: conn.execute(Q["set_weight"], values))

    async def tenant_shares(self) -> list[TenantShare]:
        rows = await self._call(lambda conn: conn.execute(Q["list_shares"]).fetchall())
        return [TenantShare(str(t), float(w), float(p), int(q)) for t, w, p, q in rows]

    async def queue_shape(self) -> QueueShape:
        now = time.time()
        rows = await self._call(lambda conn: conn.execute(Q["queue_shape"], (now,)).fetchall())
        return QueueShape([QueueGroup(str(b), str(k), int(c), int(d or 0), s) for b, k, c, d, s in rows])

    # ------------------------------------------------------------------ model rate limits

    async def set_rate_limit(
        self,
        pattern: str,
        requests_per_minute: float | None,
        tokens_per_minute: float | None,
        burst_seconds: float = 0.0,
    ) -> None:
        check_pattern(pattern, "rate limit's bucket")
        rpm, tpm, burst = check_rate(requests_per_minute, tokens_per_minute, burst_seconds)
        values = (pattern, rpm, tpm, burst, time.time())
        await self._call(self._write, lambda conn: conn.execute(Q["set_rate_limit"], values))

    async def remove_rate_limit(self, pattern: str) -> bool:
        def body(conn: sqlite3.Connection) -> bool:
            return conn.execute(Q["remove_rate_limit"], (pattern,)).fetchone() is not None

        return await self._call(self._write, body)

    async def rate_limits(self) -> list[RateLimit]:
        rows = await self._call(lambda conn: conn.execute(Q["list_rate_limits"]).fetchall())
        return [RateLimit.of_row(row) for row in rows]

    async def rate_buckets(self) -> list[RateBucket]:
        def body(conn: sqlite3.Connection) -> list[RateBucket]:
            patterns = [str(row[0]) for row in conn.execute(Q["list_rate_limits"])]
            return [
                RateBucket(str(name), matching_pattern(str(name), patterns), int(waits), float(waited))
                for name, waits, waited in conn.execute(Q["list_rate_buckets"])
            ]

        return await self._call(body)

    async def reserve_rate(
        self,
        bucket: str,
        tokens: int,
        settle: int = 0,
        run_id: str | None = None,
        calls: int = 1,
        slack: float = 0.0,
        release: RateRelease | None = None,
    ) -> RateReservation | None:
        # One write transaction, which SQLite lets in one at a time: the limit, the bucket's
        # row and its new times are read and written with no other reservation in between.
        def body(conn: sqlite3.Connection) -> RateReservation | None:
            limit = _governing(conn, bucket)
            kept = None if run_id is None else conn.execute(Q["take_rate_hold"], (run_id, bucket)).fetchone()
            if limit is None:
                return None
            requests_at, tokens_at, paused, given_back = _bucket(conn, bucket)
            now = time.time()
            tokens_at += token_seconds(limit, settle)
            if release is not None:  # a lease's unspent calls, given back first
                credit = released_seconds(limit, release, requests_at, given_back, now)
                requests_at, given_back = requests_at - credit, given_back + credit
            if kept is not None:  # the run's own reservation, kept while it waited queued
                conn.execute(Q["reserve_rate"], (bucket, requests_at, tokens_at, 0.0, 0, given_back))
                start = float(kept[0])
                return RateReservation(
                    start - now, start, requests_at, tokens_at, held=True, given_back=given_back
                )
            taken = reserve_rate(limit, requests_at, tokens_at, now, tokens, paused)
            taken = lease_rate(limit, replace(taken, given_back=given_back), now, tokens, calls, slack)
            waited = 1 if taken.wait > 0 else 0
            values = (bucket, taken.requests_at, taken.tokens_at, taken.wait, waited, given_back)
            conn.execute(Q["reserve_rate"], values)
            return taken

        # Committed without waiting for the disk (docs/scheduling.md, *The algorithm*): the
        # fsync held SQLite's one write lock, every writer of the file waiting behind it, and
        # the model call waited for it. A crash of the process loses nothing (the WAL is
        # written); a power failure may lose the last reservations, unless a later commit
        # (any run's next checkpoint) synced them first.
        return await self._call(self._unsynced, lambda conn: self._write(conn, body))

    async def release_rate(self, bucket: str, release: RateRelease, settle: int = 0) -> None:
        def body(conn: sqlite3.Connection) -> None:
            limit = _governing(conn, bucket)
            row = conn.execute(Q["rate_bucket"], (bucket,)).fetchone()
            if limit is None or row is None:
                return
            requests_at, tokens_at, _, given_back = (float(v) for v in row)
            credit = released_seconds(limit, release, requests_at, given_back, time.time())
            values = (bucket, requests_at - credit, tokens_at + token_seconds(limit, settle), 0.0, 0)
            conn.execute(Q["reserve_rate"], (*values, given_back + credit))

        await self._call(self._unsynced, lambda conn: self._write(conn, body))

    async def settle_rate(self, bucket: str, tokens: int) -> None:
        def body(conn: sqlite3.Connection) -> None:
            limit = _governing(conn, bucket)
            if limit is not None and tokens:
                conn.execute(Q["settle_rate"], (bucket, token_seconds(limit, tokens)))

        await self._call(self._write, body)

    async def hold_rate(self, lease: Lease, run_id: str, bucket: str, start: float, delay: float) -> None:
        def body(conn: sqlite3.Connection) -> None:
            self._fence(conn, lease, 0)
            now = time.time()
            if conn.execute(Q["requeue_later"], (now, now + max(0.0, delay), run_id)).rowcount:
                conn.execute(Q["hold_rate"], (run_id, bucket, float(start)))

        await self._call(self._write, body)

    async def pause_rate(self, bucket: str, seconds: float) -> float | None:
        def body(conn: sqlite3.Connection) -> float | None:
            row = conn.execute(Q["pause_rate"], (bucket, time.time() + float(seconds))).fetchone()
            return None if row is None else float(row[0])

        return await self._call(self._write, body)


def _waiting(conn: sqlite3.Connection, floor: float, count: int) -> list[tuple[str, float, float]]:
    """The ``count`` fair-share groups next in line (-1: all), as (tenant, pass, weight)."""
    return [(str(t), float(p), float(w)) for t, p, w in conn.execute(Q["waiting_tenants"], (floor, count))]


def _governing(conn: sqlite3.Connection, bucket: str) -> RateLimit | None:
    return governing_rate([RateLimit.of_row(row) for row in conn.execute(Q["list_rate_limits"])], bucket)


def _bucket(conn: sqlite3.Connection, bucket: str) -> tuple[float, float, float, float]:
    """A bucket's requests_at, tokens_at, paused_until and given_back (zeros: never used)."""
    row = conn.execute(Q["rate_bucket"], (bucket,)).fetchone()
    if row is None:
        return 0.0, 0.0, 0.0, 0.0
    requests_at, tokens_at, paused, given_back = (float(v) for v in row)
    return requests_at, tokens_at, paused, given_back


def _lease_ahead(conn: sqlite3.Connection, ask: RateAsk, runs: int) -> RateReservation | None:
    """``ask``'s lease for a claim that took ``runs`` runs, in its transaction (``None``: no
    limit governs the bucket); a grant of none writes nothing."""
    limit = _governing(conn, ask.bucket)
    if limit is None:
        return None
    requests_at, tokens_at, paused, given_back = _bucket(conn, ask.bucket)
    leased = lease_ahead(limit, requests_at, tokens_at, time.time(), ask, runs, paused)
    if leased.granted:
        values = (ask.bucket, leased.requests_at, leased.tokens_at, 0.0, 0, given_back)
        conn.execute(Q["reserve_rate"], values)
    return replace(leased, given_back=given_back)


class _Picked:
    """The runs one claim picks, as ``(run_id, session_id, tenant)``, and how many it passed
    over; ``floor``: the lowest pass of the waiting tenants (``None``: none waits)."""

    def __init__(self, floor: float | None) -> None:
        self.floor = floor
        self.runs: list[tuple[str, str, str]] = []
        self.ids: set[str] = set()
        self.sessions: set[str] = set()
        self.deferred = 0

    def add(self, run_id: str, session_id: str, tenant: str) -> None:
        self.runs.append((run_id, session_id, tenant))
        self.ids.add(run_id)
        self.sessions.add(session_id)


def _queue(conn: sqlite3.Connection, tenant: str, refs: list[str] | None, now: float) -> Iterator[Any]:
    """A tenant's claimable runs in rank order, of the agents ``refs`` names (None: any). Each
    named agent's are read through its own index and merged as they are read, so a claim
    never reads the runs of agents it does not serve (with 20,000 of them queued ahead: 24 ms
    a claim, read through the tenant's queue)."""
    if refs is None:
        return iter(conn.execute(Q["tenant_queue"], (tenant, now)))
    return heapq.merge(
        *(conn.execute(Q["agent_queue"], (tenant, now, ref)) for ref in refs), key=lambda row: row[4]
    )
