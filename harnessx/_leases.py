"""Keeping leases alive: one heartbeat renews every lease this holder has, in one call."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from harnessx._errors import StorageError
from harnessx.store._protocol import Lease, SessionStore
from harnessx.store._records import ControlRequest

__all__ = ["LeaseKeeper"]

logger = logging.getLogger("harnessx.leases")

OnLost = Callable[[Lease], None]
OnControl = Callable[[Lease, ControlRequest], None]
# (succeeded, seconds the round trip took, leases found lost)
OnRenewal = Callable[[bool, float, int], None]


class LeaseKeeper:
    """Renews held leases every ``interval`` seconds.

    A lease the store no longer confirms is reported to its ``on_lost`` callback at once
    (the run must stop writing). Pause and cancel requests written by other processes
    (``Store.set_control``) come with every renewal until the run's stopping commit clears
    them (so a renewal whose reply was lost loses none); each goes to ``on_control`` once per
    lease, and again only if it changes (a pause that became a cancel). Between renewals the
    keeper waits on ``Store.wait_for_control``, so that a request arrives at once rather than
    at the next beat.
    """

    def __init__(
        self,
        store: SessionStore,
        interval: float | None = None,
        *,
        on_renewal: OnRenewal | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.store = store
        self.interval = interval if interval is not None else store.lease_seconds / 3
        self._held: dict[str, tuple[Lease, OnLost, OnControl | None]] = {}
        # The request last handed to each held lease's on_control.
        self._delivered: dict[Lease, ControlRequest] = {}
        self._task: asyncio.Task[None] | None = None
        self._on_renewal = on_renewal
        self._on_failure = on_failure

    def hold(
        self,
        lease: Lease,
        on_lost: OnLost,
        on_control: OnControl | None = None,
        pending: ControlRequest | None = None,
    ) -> None:
        """Renew ``lease`` from now on. ``pending``: the request already on the session when
        it was claimed (left for whoever drives the run next by a holder that died before
        acting on it), handed to ``on_control`` at once instead of at the first renewal,
        which a short run may never reach."""
        self._held[lease.session_id] = (lease, on_lost, on_control)
        if pending is not None and on_control is not None:
            self._delivered[lease] = pending
            on_control(lease, pending)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._beat(), name="harnessx-lease-heartbeat")

    def drop(self, lease: Lease) -> None:
        held = self._held.get(lease.session_id)
        if held is not None and held[0] == lease:
            del self._held[lease.session_id]
        self._delivered.pop(lease, None)

    async def renew_now(self) -> None:
        if not self._held:
            return
        leases = [held[0] for held in self._held.values()]
        started = time.perf_counter()
        try:
            renewal = await self.store.renew(leases)
        except StorageError:
            if self._on_renewal is not None:
                self._on_renewal(False, time.perf_counter() - started, 0)
            raise
        if self._on_renewal is not None:
            self._on_renewal(True, time.perf_counter() - started, len(renewal.lost))
        for lease in leases:
            held = self._held.get(lease.session_id)
            if held is None or held[0] != lease:
                continue
            if lease.session_id in renewal.lost:
                del self._held[lease.session_id]
                self._delivered.pop(lease, None)
                logger.warning(
                    "lost the lease on session %s (generation %d)",
                    lease.session_id,
                    lease.generation,
                    extra={"session_id": lease.session_id, "generation": lease.generation},
                )
                held[1](lease)
            elif (request := renewal.controls.get(lease.session_id)) is not None and held[2] is not None:
                # Every renewal returns the request until the run's stop clears it: hand it
                # over once, and again only if it changed (a pause that became a cancel).
                if self._delivered.get(lease) == request:
                    continue
                self._delivered[lease] = request
                held[2](lease, request)

    async def _beat(self) -> None:
        try:
            while self._held:
                await self._wait(self.interval)
                try:
                    await self.renew_now()
                except StorageError as exc:
                    # The lease may still hold; the next beat tries again. Fencing keeps a
                    # run that really lost it from writing in the meantime.
                    logger.warning("lease renewal failed: %s", exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("the lease heartbeat died")
            if self._on_failure is not None:
                self._on_failure(exc)
            raise

    async def _wait(self, seconds: float) -> None:
        """Until the next beat is due, or a pause/cancel request may be waiting sooner."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (left := deadline - loop.time()) > 0:
            try:
                if await self.store.wait_for_control(left):
                    return
            except StorageError:
                await asyncio.sleep(left)  # nothing to hear: the beat as planned
                return

    async def aclose(self) -> None:
        self._held.clear()
        self._delivered.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
