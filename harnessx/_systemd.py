"""The sd_notify datagram protocol (readiness, watchdog, status) for the long-running processes."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

__all__ = ["SystemdNotifier"]

logger = logging.getLogger("harnessx.systemd")


class SystemdNotifier:
    """Talks the sd_notify protocol to the service manager named by ``$NOTIFY_SOCKET``.

    Without ``NOTIFY_SOCKET`` (not started by systemd, or not ``Type=notify``) every call
    is a no-op. Sending never raises and never blocks: a lost notification is logged at
    debug level, because failing the service over it would be worse.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self._address = self._socket_address(env.get("NOTIFY_SOCKET", ""))
        self._watchdog_usec = env.get("WATCHDOG_USEC", "")
        self._watchdog_pid = env.get("WATCHDOG_PID", "")

    @staticmethod
    def _socket_address(value: str) -> str | None:
        if not value:
            return None
        # systemd writes abstract-namespace sockets with a leading "@" for the NUL byte.
        return "\0" + value[1:] if value.startswith("@") else value

    @property
    def enabled(self) -> bool:
        return self._address is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between ``watchdog()`` calls: half of ``WatchdogSec=``, or None if not enabled."""
        if self._watchdog_pid and self._watchdog_pid != str(os.getpid()):
            return None  # the watchdog is meant for another process (we were forked or exec'd)
        try:
            usec = int(self._watchdog_usec)
        except ValueError:
            return None
        return usec / 2 / 1_000_000 if usec > 0 else None

    def ready(self, status: str | None = None) -> bool:
        return self.notify("READY=1", *self._status(status))

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def status(self, text: str) -> bool:
        return self.notify(*self._status(text))

    @staticmethod
    def _status(text: str | None) -> list[str]:
        # One assignment per line in the datagram, so a newline would end the status early.
        return [] if text is None else ["STATUS=" + " ".join(text.splitlines())]

    def notify(self, *assignments: str) -> bool:
        """Sends ``KEY=value`` assignments in one datagram; True if it was sent."""
        for assignment in assignments:
            if "=" not in assignment or "\n" in assignment:
                raise ValueError(f"not a KEY=value notification: {assignment!r}")
        if self._address is None or not assignments:
            return False
        payload = "\n".join(assignments).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                # A full receive queue must not stall the event loop; the message is dropped.
                sock.setblocking(False)
                sock.sendto(payload, self._address)
        except OSError as exc:
            logger.debug("sd_notify %r to %r failed: %s", assignments, self._address, exc)
            return False
        return True
