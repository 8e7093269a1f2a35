"""Waking idle pool workers on SQLite, which cannot notify another process itself.

A store that waits for work (a pool worker's) listens on a Unix datagram socket in Linux's
abstract namespace, named for its process id (``SQLiteBackend.process_id``, the name of its
liveness lock file in ``<database>.owners``). A store that makes a run claimable (a
submission, a requeue, an orphan's recovery) sends, after its commit, one byte to every
process id with a lock file there: the listening ones wake and claim at once, the others
are not bound and the send fails at once (``ECONNREFUSED``), as does one to a process that
died (its lock file is tidied by whoever next checks it).

The bell only shortens the wait: an idle worker still polls (20, 60, 140 ms ... after its
last run, at most every 250 ms by default), so a ring lost, or not sent (a process other
than a store made the run claimable; a platform without the abstract namespace), costs
what it cost before the bell. Nothing is created on disk, and a datagram carries no
information: anyone able to send one to the socket can only make a worker look at the
queue early.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
from pathlib import Path

__all__ = ["WorkBell", "ring"]

logger = logging.getLogger(__name__)

# Abstract socket names are per network namespace and not files; the prefix keeps ours apart
# from other programs'.
_PREFIX = b"\0harnessx-work-bell/"
SUPPORTED = sys.platform.startswith("linux")


def _address(process_id: str) -> bytes:
    return _PREFIX + process_id.encode()


class WorkBell:
    """The listening side: bound on the first ``wait``, closed with the store."""

    def __init__(self, process_id: str) -> None:
        self._process_id = process_id
        self._socket: socket.socket | None = None

    async def wait(self, max_wait: float) -> bool:
        """Sleep up to ``max_wait`` seconds; ``True`` when rung before that."""
        bell = self._listening()
        if bell is None:
            await asyncio.sleep(max_wait)
            return False
        try:
            await asyncio.wait_for(asyncio.get_running_loop().sock_recv(bell, 1), max_wait)
        except TimeoutError:
            return False
        self._drain(bell)  # a burst of submissions rang several times: one wake-up is enough
        return True

    def close(self) -> None:
        bell, self._socket = self._socket, None
        if bell is not None:
            bell.close()

    def _listening(self) -> socket.socket | None:
        if self._socket is None and SUPPORTED:
            bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                bell.bind(_address(self._process_id))
            except OSError as exc:  # e.g. a sandbox without the abstract namespace
                bell.close()
                logger.debug("no work bell (%s): idle workers poll", exc)
                return None
            bell.setblocking(False)
            self._socket = bell
        return self._socket

    @staticmethod
    def _drain(bell: socket.socket) -> None:
        with contextlib.suppress(BlockingIOError):
            while bell.recv(16):
                pass


def ring(owners_dir: Path) -> None:
    """Wake every listening store of the database whose liveness files are in ``owners_dir``
    (a few system calls; never blocks, never fails)."""
    if not SUPPORTED:
        return
    try:
        names = [entry.name[: -len(".lock")] for entry in _lock_files(owners_dir)]
    except OSError:
        return
    if not names:
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        for name in names:
            # Not bound (not waiting for work, or gone), or its queue is full (rung already).
            with contextlib.suppress(OSError):
                sender.sendto(b"!", _address(name))


def _lock_files(owners_dir: Path) -> list[Path]:
    return [path for path in owners_dir.iterdir() if path.name.endswith(".lock")]
