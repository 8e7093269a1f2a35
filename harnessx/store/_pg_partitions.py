"""The day partitions of events on PostgreSQL (a part of ``PostgresBackend``, migration 0018).

Events are partitioned by the time their run's id was made (``harnessx_id_ms``), one partition
per UTC day. The supervisor's leader keeps partitions made ahead (``maintain_partitions``,
every housekeeping interval); an event of a run whose day has no partition cannot be stored,
and the checkpoint that carries it fails with an error that says how to make them.
"""

from __future__ import annotations

from harnessx.store._pg_execution import PostgresExecution
from harnessx.store._pg_types import Connection
from harnessx.store._queries import load_queries
from harnessx.store._records import Partitions

__all__ = ["PostgresPartitions"]

Q = load_queries("postgres")


class PostgresPartitions(PostgresExecution):
    """Mixed into ``PostgresBackend`` (``_run``: one operation on a pooled connection)."""

    async def maintain_partitions(self, ahead: float) -> Partitions:
        """Make the partitions of events that cover run ids made up to ``ahead`` seconds from
        now (by the database clock), and say what there is."""

        async def maintain(conn: Connection) -> Partitions:
            made = int(await conn.fetchval(Q["add_event_partitions"], float(ahead)))
            count, until = await conn.fetchrow(Q["event_partitions"])
            return Partitions("events", int(count), None if until is None else float(until), made)

        return await self._run("making partitions of events", maintain)
