"""Group commit: the checkpoints of several sessions in one PostgreSQL statement.

A worker drives many runs at once, and their checkpoints come in faster than one round trip
each: while one is on its way to the server, the next ones wait here, and go together in one
statement (``_pg_checkpoint.group``) as soon as it is back. So at most one group is in flight
per store, and a checkpoint that finds nothing in flight waits one turn of the event loop
(for the others of a burst to join it) and, if none came, goes alone from its caller's task,
as the one-checkpoint statement it always was (the same round trips, the same cost): grouping
only ever happens when checkpoints would otherwise have queued for connections and commits.

Each member keeps its own fence. A member whose lease no longer holds is answered ``lost``
and writes nothing, while the others are written: only its caller gets the
``LeaseLostError``. A member whose progress the session row does not hold is sent again
alone and whole, as after ``HX003``. When the statement as a whole is refused (a member's run
not its session's, a constraint), nothing of it was written, and every member is sent again
alone, to meet its own fate. The store's failures (after its retries) reach every member.

A caller that stops waiting (cancelled) is dropped if its checkpoint has not been sent yet;
once sent, the checkpoint commits or not with its group, as a cancelled single statement may
or may not have committed: the next holder of the run reads what the database has.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from harnessx._errors import HarnessError, StorageError
from harnessx.store._pg_checkpoint import APPLIED, LOST, NOT_HELD, WRITTEN, Checkpoint

__all__ = ["GroupCommit"]

# Members per group at most: the statement's arrays grow with it, and a lone slow member (a
# row lock to wait for) holds up everything in its group.
GROUP_LIMIT = 32

_Waiting = tuple[Checkpoint, "asyncio.Future[None]"]


class GroupCommit:
    """Commits checkpoints, several at once when they queue up (see the module's doc).

    ``alone(point)`` writes one checkpoint with the one-checkpoint statement and raises what it
    raises; ``direct(point)`` does the same from the caller's own task, on a pooled
    connection (on the group's connection it cost less client CPU but no less time: a run's
    other statements go on pooled connections, and the server's backends then take turns;
    measured in docs/benchmarks.md); ``together(points)`` writes several with one statement
    and returns each one's answer (``WRITTEN``, ``APPLIED``, ``NOT_HELD``, ``LOST``) in order,
    ``None`` when the statement was refused as a whole (nothing written), or raises the store's
    failure;
    ``lost(point)`` is the error a member whose lease no longer holds gets."""

    def __init__(
        self,
        alone: Callable[[Checkpoint], Awaitable[None]],
        direct: Callable[[Checkpoint], Awaitable[None]],
        together: Callable[[Sequence[Checkpoint]], Awaitable[list[str] | None]],
        lost: Callable[[Checkpoint], HarnessError],
        *,
        limit: int = GROUP_LIMIT,
    ) -> None:
        self._alone = alone
        self._direct = direct
        self._together = together
        self._lost = lost
        self._limit = limit
        self._waiting: list[_Waiting] = []
        self._sender: asyncio.Task[None] | None = None
        self._leading = False  # a caller is giving others one turn to join it
        # Held while a group is in flight. A group locks several session rows, in no order
        # the store promises, and so does the renewal of this process's leases: the renewal
        # holds this too, so that the two never wait for each other's rows (a deadlock the
        # server would break only after a second).
        self.exclusive = asyncio.Lock()

    async def commit(self, point: Checkpoint) -> None:
        """Write ``point`` (``groupable``), with whatever else is waiting by then."""
        if self._idle():
            # Nothing in flight or waiting: give the checkpoints of this same turn of the event
            # loop (a burst) one turn to come, and if none did, send this one from here. A task
            # and a future per lone checkpoint were ~15 % of its cost on a quick machine.
            self._leading = True
            try:
                await asyncio.sleep(0)
            finally:
                self._leading = False
            if not self._waiting and not self._sending():
                async with self.exclusive:
                    await self._direct(point)
                return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((point, future))
        if not self._sending():
            # Its own context: the sender's logging must not carry the first caller's run.
            self._sender = asyncio.get_running_loop().create_task(
                self._send_waiting(), name="harnessx-pg-group-commit", context=contextvars.Context()
            )
        await future

    def _sending(self) -> bool:
        return self._sender is not None and not self._sender.done()

    def _idle(self) -> bool:
        """No checkpoint is in flight, waiting, or about to be sent."""
        return not (self._leading or self._waiting or self._sending() or self.exclusive.locked())

    async def close(self) -> None:
        """Stop sending (the store is closing): what has not been sent fails with
        ``StorageError``."""
        sender, self._sender = self._sender, None
        if sender is not None and not sender.done():
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
        self._fail(self._waiting, StorageError("the store was closed before the checkpoint was sent"))
        self._waiting = []

    async def _send_waiting(self) -> None:
        sending: list[_Waiting] = []
        try:
            while self._waiting:
                async with self.exclusive:
                    # Chosen once the lock is held: what came while waiting for it goes too.
                    sending, self._waiting = self._next_group(self._waiting)
                    if len(sending) == 1:
                        await self._send_alone(*sending[0])
                    elif sending:
                        await self._send_together(sending)
                sending = []
        except asyncio.CancelledError:
            self._fail(sending, StorageError("the store was closed while the checkpoint was sent"))
            raise

    def _next_group(self, waiting: list[_Waiting]) -> tuple[list[_Waiting], list[_Waiting]]:
        """The next group, in the order the checkpoints came: at most one per session (a
        session's next checkpoint waits for the one before), callers still waiting only."""
        group: list[_Waiting] = []
        later: list[_Waiting] = []
        sessions: set[str] = set()
        for point, future in waiting:
            if future.done():
                continue  # its caller stopped waiting before it was sent
            session = point.lease.session_id
            if len(group) < self._limit and session not in sessions:
                sessions.add(session)
                group.append((point, future))
            else:
                later.append((point, future))
        return group, later

    async def _send_alone(self, point: Checkpoint, future: asyncio.Future[None]) -> None:
        try:
            await self._alone(point)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            _settle(future, exc)
        else:
            _settle(future, None)

    async def _send_together(self, group: list[_Waiting]) -> None:
        try:
            answers = await self._together([point for point, _ in group])
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._fail(group, exc)
            return
        if answers is None:
            # Refused as a whole (nothing of it written): each member on its own.
            for point, future in group:
                await self._send_alone(point, future)
            return
        for (point, future), answer in zip(group, answers, strict=True):
            if answer in (WRITTEN, APPLIED):
                _settle(future, None)
            elif answer == LOST:
                _settle(future, self._lost(point))
            elif answer == NOT_HELD:
                # The session row holds another run's progress: send it whole (as after HX003).
                await self._send_alone(replace(point, progress_only=False), future)
            else:  # pragma: no cover - the statement answers only the four
                _settle(future, StorageError(f"unexpected answer {answer!r} from a group commit"))

    @staticmethod
    def _fail(group: Sequence[_Waiting], exc: BaseException) -> None:
        for _, future in group:
            _settle(future, exc)


def _settle(future: asyncio.Future[None], exc: BaseException | None) -> None:
    """Give a waiting caller its outcome (a caller that stopped waiting gets nothing)."""
    if future.done():
        return
    if exc is None:
        future.set_result(None)
    else:
        future.set_exception(exc)
