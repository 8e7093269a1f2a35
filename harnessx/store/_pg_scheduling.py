"""Scheduling the pool on PostgreSQL (a part of ``PostgresBackend``): limits, shares, and
what the queue holds. The claim itself is ``harnessx_claim_runs`` (migration 0009), called
by ``claim_queued``; see docs/scheduling.md."""

from __future__ import annotations

from typing import Any, TypeVar

from harnessx.store._core import lease_lost
from harnessx.store._pg_execution import PostgresExecution
from harnessx.store._pg_types import Connection
from harnessx.store._protocol import Lease
from harnessx.store._queries import load_queries
from harnessx.store._scheduling import (
    AGENT_PREFIX,
    ConcurrencyLimit,
    QueueGroup,
    QueueShape,
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
    matching_pattern,
)

__all__ = ["PostgresScheduling", "rate_reservation"]


def rate_reservation(row: tuple[Any, ...]) -> RateReservation:
    """A reservation from the columns of ``harnessx_reserve_rate`` (``reserve_rate``) or
    ``harnessx_lease_ahead`` (the lease asked for with a claim, ``claim_queued``)."""
    wait, start, requests_at, tokens_at, held, granted, given_back = row
    times = (float(wait), float(start), float(requests_at), float(tokens_at))
    return RateReservation(*times, bool(held), int(granted), float(given_back))


T = TypeVar("T")
Q = load_queries("postgres")
_NOTHING = RateRelease(0, 0.0, 0.0)  # no lease given back with a reservation


class PostgresScheduling(PostgresExecution):
    """Mixed into ``PostgresBackend``, whose ``_run`` runs an operation on a pooled
    connection with retries."""

    async def set_concurrency_limit(self, pattern: str, max_running: int) -> None:
        check_pattern(pattern)
        cap = check_max_running(max_running)
        await self._run(
            "setting a concurrency limit", lambda conn: conn.execute(Q["set_limit"], pattern, cap)
        )

    async def remove_concurrency_limit(self, pattern: str) -> bool:
        row = await self._run(
            "removing a concurrency limit", lambda conn: conn.fetchrow(Q["remove_limit"], pattern)
        )
        return row is not None

    async def concurrency_limits(self) -> list[ConcurrencyLimit]:
        async def read(conn: Connection) -> list[ConcurrencyLimit]:
            found = []
            for pattern, cap, source in await conn.fetch(Q["list_limits"]):
                usage = None
                if pattern.startswith(AGENT_PREFIX) and not pattern.endswith("*"):
                    usage = await conn.fetchrow(Q["agent_usage"], pattern[len(AGENT_PREFIX) :])
                elif not pattern.endswith("*"):
                    usage = await conn.fetchrow(Q["key_usage"], pattern)
                driving, queued = (int(usage[0]), int(usage[1])) if usage is not None else (None, None)
                found.append(ConcurrencyLimit(str(pattern), int(cap), str(source), driving, queued))
            return found

        return await self._run("listing concurrency limits", read)

    async def publish_agent_defaults(self, defaults: dict[str, tuple[int | None, int | None]]) -> None:
        if not defaults:
            return
        refs = sorted(defaults)
        priorities = [defaults[ref][0] for ref in refs]
        caps = [defaults[ref][1] for ref in refs]
        await self._run(
            "publishing agent defaults",
            lambda conn: conn.execute(Q["publish_agent_defaults"], refs, priorities, caps),
        )

    async def set_tenant_weight(self, tenant: str, weight: float) -> None:
        check_key(tenant, "tenant")
        value = check_weight(weight)
        await self._run(
            "setting a tenant's weight", lambda conn: conn.execute(Q["set_weight"], tenant, value)
        )

    async def tenant_shares(self) -> list[TenantShare]:
        rows = await self._run("listing fair shares", lambda conn: conn.fetch(Q["list_shares"]))
        return [TenantShare(str(t), float(w), float(p), int(q)) for t, w, p, q in rows]

    async def queue_shape(self) -> QueueShape:
        rows = await self._run("reading the queue's shape", lambda conn: conn.fetch(Q["queue_shape"]))
        return QueueShape([QueueGroup(str(b), str(k), int(c), int(d), s) for b, k, c, d, s in rows])

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
        await self._run(
            "setting a rate limit", lambda conn: conn.execute(Q["set_rate_limit"], pattern, rpm, tpm, burst)
        )

    async def remove_rate_limit(self, pattern: str) -> bool:
        row = await self._run(
            "removing a rate limit", lambda conn: conn.fetchrow(Q["remove_rate_limit"], pattern)
        )
        return row is not None

    async def rate_limits(self) -> list[RateLimit]:
        rows = await self._run("listing rate limits", lambda conn: conn.fetch(Q["list_rate_limits"]))
        return [RateLimit.of_row(row) for row in rows]

    async def rate_buckets(self) -> list[RateBucket]:
        async def read(conn: Connection) -> list[RateBucket]:
            patterns = [str(row[0]) for row in await conn.fetch(Q["list_rate_limits"])]
            return [
                RateBucket(str(name), matching_pattern(str(name), patterns), int(waits), float(waited))
                for name, waits, waited in await conn.fetch(Q["list_rate_buckets"])
            ]

        return await self._run("listing rate buckets", read)

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
        # One statement (harnessx_reserve_rate): the bucket's row is locked inside the server
        # only, so reservations of one bucket take turns without waiting on each other's
        # round trips; the arithmetic is _scheduling.reserve_rate's and lease_rate's, on the
        # database's clock. A lease given back rides along (released_seconds).
        given = release or _NOTHING
        args = (bucket, tokens, settle, run_id, calls, float(slack), given.calls, given.end, given.mark)
        row = await self._run(
            "reserving a model call's rate budget", lambda conn: conn.fetchrow(Q["reserve_rate"], *args)
        )
        return None if row is None else rate_reservation(tuple(row))

    async def release_rate(self, bucket: str, release: RateRelease, settle: int = 0) -> None:
        args = (bucket, settle, release.calls, release.end, release.mark)
        await self._run("giving a rate lease back", lambda conn: conn.execute(Q["release_rate"], *args))

    async def hold_rate(self, lease: Lease, run_id: str, bucket: str, start: float, delay: float) -> None:
        held, _ = await self._run(
            "keeping a rate reservation for a queued run",
            lambda conn: conn.fetchrow(
                Q["hold_rate"],
                lease.session_id,
                lease.owner,
                lease.generation,
                run_id,
                bucket,
                float(start),
                max(0.0, float(delay)),
            ),
        )
        if not held:
            raise lease_lost(lease)

    async def settle_rate(self, bucket: str, tokens: int) -> None:
        if tokens:
            await self._run(
                "settling model calls' tokens", lambda conn: conn.execute(Q["settle_rate"], bucket, tokens)
            )

    async def pause_rate(self, bucket: str, seconds: float) -> float | None:
        until = await self._run(
            "pausing a rate bucket", lambda conn: conn.fetchval(Q["pause_rate"], bucket, float(seconds))
        )
        return None if until is None else float(until)
