"""The day partitions of events on PostgreSQL (a part of ``PostgresBackend``; migrations 0018, 0022).

Events are partitioned by the time their run's id was made (``harnessx_id_ms``), one partition
per UTC day. The supervisor's leader calls ``maintain_partitions`` at every housekeeping:

- it makes the partitions that cover the days ahead (an event of a run whose day has no
  partition cannot be stored, and the checkpoint that carries it fails with an error that
  says how to make them);
- it drops each past day none of whose runs is stored any more (retention removed them and
  left their events, see ``prune_sessions``): ``DETACH PARTITION ... CONCURRENTLY``, which
  waits for the transactions reading it instead of making every checkpoint wait, then
  ``DROP TABLE`` of what is now a table of its own;
- it deletes row by row the events of runs pruned longer than ``grace`` ago whose day is
  kept (another run of it still is), so that no pruned run's events stay for long.

Whether a day still has runs is read through the primary key of runs, as a range of run ids
(those of a day lie between the lowest version 7 ids of its two ends) checked exactly, and
before a day is dropped every distinct run id in it is looked up (one index probe each): a
collation that ordered ids unlike their bytes could then only keep a day, never drop one
holding a stored run.
"""

from __future__ import annotations

import logging
import re
import time

from harnessx._errors import HarnessError
from harnessx.store._pg_execution import PostgresExecution, quote_ident
from harnessx.store._pg_types import Connection
from harnessx.store._queries import load_queries
from harnessx.store._records import Partitions

__all__ = ["GRACE", "PostgresPartitions", "id_ms", "lowest_id"]

logger = logging.getLogger("harnessx.store.postgres")
Q = load_queries("postgres")

# How long the events of a pruned run may wait for their day to be dropped before they are
# deleted row by row: more than a day partition takes to empty in steady state (its runs
# are pruned over one day, a cutoff after they were made).
GRACE = 2 * 86400.0
# A day is dropped only once it ended this long ago: a host whose clock is behind may still
# make run ids of it.
_SETTLED_MS = 3_600_000
_PURGE_BATCH = 200
_PURGE_BATCHES = 50  # per call: the next housekeeping goes on


_VERSION_7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def id_ms(run_id: str) -> int:
    """The partition key of a run's events, as ``harnessx_id_ms`` computes it: the Unix
    milliseconds a version 7 id begins with, 0 for any other text."""
    return int(run_id[:8] + run_id[9:13], 16) if _VERSION_7.fullmatch(run_id) else 0


def lowest_id(ms: int) -> str:
    """The lowest version 7 UUID text of a Unix millisecond (every id of it sorts after)."""
    digits = f"{ms:012x}"
    return f"{digits[:8]}-{digits[8:]}-0000-0000-000000000000"


class PostgresPartitions(PostgresExecution):
    """Mixed into ``PostgresBackend`` (``_run``: one operation on a pooled connection)."""

    async def maintain_partitions(self, ahead: float, *, grace: float = GRACE) -> Partitions:
        """Make the partitions of events that cover run ids made up to ``ahead`` seconds from
        now (by the database clock), drop the past days without stored runs, delete the
        events of runs pruned more than ``grace`` seconds ago, and say what there is."""

        async def make(conn: Connection) -> int:
            return int(await conn.fetchval(Q["add_event_partitions"], float(ahead)))

        made = await self._run("making partitions of events", make)
        dropped: list[str] = []
        rows: list[int] = []
        problem: str | None = None
        try:
            await self._drop_days(dropped, rows)
        except HarnessError as exc:  # e.g. a role that does not own events: rows still go below
            problem = f"dropping days of events: {exc}"
        purged = await self._purge(grace)

        async def state(conn: Connection) -> tuple[int, float | None]:
            count, until = await conn.fetchrow(Q["event_partitions"])
            return int(count), None if until is None else float(until)

        count, until = await self._run("reading the partitions of events", state)
        return Partitions("events", count, until, made, dropped, purged, problem, sum(rows))

    async def _drop_days(self, dropped: list[str], rows: list[int]) -> None:
        """Drop each past day without stored runs, appending its name to ``dropped`` and the
        events it held to ``rows`` as each goes (what went before a failure is reported)."""
        now_ms = int(time.time() * 1000)
        days = await self._run("listing partitions of events", lambda conn: conn.fetch(Q["event_days"]))
        for name, low, high, pending in days:
            if high > now_ms - _SETTLED_MS:
                break  # days in order: the rest are newer
            bounds = (lowest_id(low), lowest_id(high), int(low), int(high))
            if await self._one("reading runs of a day", "day_has_runs", *bounds) != (False,):
                continue
            if not pending and await self._day_holds_a_run(name):
                continue
            await self._drop(str(name))
            # The day's events as their prunes counted them (schema 26): counting the partition
            # now would read all of it, which dropping it whole is there to avoid.
            found = await self._one("forgetting pruned runs of a day", "forget_pruned_day", *bounds)
            held = int(found[0]) if found is not None else 0
            dropped.append(str(name))
            rows.append(held)
            logger.info("dropped %s (%d events): none of its runs is stored", name, held)

    async def _day_holds_a_run(self, name: str) -> bool:
        """Whether any run id in the partition is a stored run: every distinct id, found by
        skipping through its primary key, looked up in runs (stops at the first)."""
        table = quote_ident(name)
        query = f"""
            WITH RECURSIVE ids AS (
                (SELECT run_id FROM {table} ORDER BY run_id LIMIT 1)
                UNION ALL
                SELECT (SELECT p.run_id FROM {table} p WHERE p.run_id > ids.run_id ORDER BY p.run_id LIMIT 1)
                FROM ids WHERE ids.run_id IS NOT NULL
            )
            SELECT EXISTS (SELECT 1 FROM ids JOIN runs r ON r.id = ids.run_id)
        """
        return bool(await self._run("reading the runs of a day", lambda conn: conn.fetchval(query)))

    async def _drop(self, name: str) -> None:
        table = quote_ident(name)

        async def drop(conn: Connection) -> None:
            # Read again each attempt: a retry may find it detached already.
            pending = await conn.fetchval(Q["detach_pending"], table)
            if pending is not None:
                # Outside a transaction: a concurrent detach commits twice, waiting in between
                # for every transaction that may still read the partition. One that was
                # interrupted is finished instead (it cannot be started again).
                how = "FINALIZE" if pending else "CONCURRENTLY"
                await conn.execute(f"ALTER TABLE events DETACH PARTITION {table} {how}")
            await conn.execute(f"DROP TABLE IF EXISTS {table}")

        await self._run(f"dropping {name}", drop)

    async def _purge(self, grace: float) -> int:
        rows = 0
        for _ in range(_PURGE_BATCHES):
            found = await self._one(
                "deleting events of pruned runs", "purge_pruned_events", float(grace), _PURGE_BATCH
            )
            assert found is not None
            rows += int(found[0])
            if int(found[1]) < _PURGE_BATCH:
                break
        return rows
