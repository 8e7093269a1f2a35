"""Erasing one session and everything it owns (a user's right-to-erasure request).

``AgentRuntime.delete_session`` and ``harnessx delete`` come here. A session with an
unfinished run (running, paused, awaiting input, queued) is refused; with ``force`` its run is
cancelled first through the operator's own path (``Operator.cancel``, in the audit trail
until the audit rows go with the session): a run nobody drives is cancelled at once, one a
live process drives is asked to stop at its next boundary, and erasure waits for that, at
most ``wait`` seconds. The store then deletes every row of the session in one transaction,
checking again under its lock that no run is unfinished and no live process holds it.
"""

from __future__ import annotations

import asyncio
import logging
import time

from harnessx._errors import ConfigurationError, SessionBusyError
from harnessx._results import UNFINISHED_STATUSES
from harnessx.store._protocol import Store

__all__ = ["erase_session"]

logger = logging.getLogger("harnessx.erasure")


async def erase_session(
    store: Store, session_id: str, *, force: bool, actor: str, via: str, wait: float | None = None
) -> dict[str, int]:
    """Delete ``session_id`` with every row it owns; the rows removed per table.
    ``ConfigurationError`` for no such session; ``SessionBusyError`` when a run is unfinished
    (without ``force``), or still unfinished ``wait`` seconds (default: two leases) after
    being asked to cancel."""
    if await store.get_session(session_id) is None:
        raise ConfigurationError(f"no session {session_id!r} in this store: check the id")
    record = await store.latest_run(session_id, messages=False)
    if record is not None and record.status in UNFINISHED_STATUSES:
        if not force:
            raise SessionBusyError(
                f"session {session_id} has an unfinished run {record.id} ({record.status.value}): cancel it "
                "first, or delete with force=True (harnessx delete --force), which cancels it"
            )
        from harnessx._operator import Operator  # the operator's path imports the runtime

        await Operator(store, actor, via).cancel(session_id)
        await _settled(store, session_id, store.lease_seconds * 2 if wait is None else wait)
    deleted = await store.delete_session(session_id)
    if deleted is None:
        raise ConfigurationError(f"no session {session_id!r} in this store (deleted meanwhile?)")
    logger.info(
        "erased session %s (%d run(s), %d event(s))",
        session_id,
        deleted.get("runs", 0),
        deleted.get("events", 0),
        extra={"session_id": session_id},
    )
    return deleted


async def _settled(store: Store, session_id: str, wait: float) -> None:
    """Wait until the session's latest run is finished and its holder has let go."""
    deadline = time.monotonic() + wait
    while True:
        record = await store.latest_run(session_id, messages=False)
        session = await store.get_session(session_id)
        finished = record is None or record.status not in UNFINISHED_STATUSES
        if session is None or (finished and session.lease_owner is None):
            return
        if (
            finished
            and session.lease_expires_at is not None
            and not await store.process_alive(session.lease_owner or "")
        ):
            return  # its holder died after the run ended: the lease does not hold anything back
        if time.monotonic() > deadline:
            held = "it is held"
            state = f"run {record.id} is still {record.status.value}" if not finished and record else held
            raise SessionBusyError(
                f"asked the process driving session {session_id} to cancel its run, but after {wait:.0f} s "
                f"{state}: try again when it has stopped"
            )
        await asyncio.sleep(0.05)
