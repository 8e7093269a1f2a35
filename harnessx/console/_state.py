"""What every request of the console shares: the store, who may sign in, keys, redaction,
and the counts per status (kept a few seconds: counting a million runs costs a scan)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from harnessx._errors import HarnessError
from harnessx._redaction import Redactor
from harnessx.console._auth import Keys, Tokens
from harnessx.store._protocol import Store

__all__ = ["ConsoleState", "Counts"]

logger = logging.getLogger("harnessx.console")


class Counts:
    """Runs per status, at most ``ttl`` seconds old. A stale value is served while a fresh one
    is counted in the background, so no request waits for the count but the first."""

    def __init__(self, store: Store, ttl: float) -> None:
        self.store = store
        self.ttl = ttl
        self.value: dict[str, int] | None = None
        self.at = 0.0
        self._refresh: asyncio.Task[None] | None = None

    async def get(self) -> tuple[dict[str, int], float]:
        stale = time.time() - self.at >= self.ttl
        if stale and (self._refresh is None or self._refresh.done()):
            self._refresh = asyncio.create_task(self._count(), name="harnessx-console-counts")
        if self.value is None:
            assert self._refresh is not None
            await asyncio.shield(self._refresh)
            if self.value is None:
                raise HarnessError("the runs could not be counted; see the console's log")
        return dict(self.value), self.at

    async def _count(self) -> None:
        try:
            self.value = await self.store.count_runs()
            self.at = time.time()
        except HarnessError as exc:
            logger.warning("console: counting runs failed: %s", exc)

    async def aclose(self) -> None:
        if self._refresh is not None and not self._refresh.done():
            self._refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresh


@dataclass
class ConsoleState:
    store: Store
    tokens: Tokens | None  # None: no auth (loopback only, --insecure-no-auth)
    keys: Keys
    local_name: str = "local"
    secure_cookies: bool = False
    session_seconds: float = 12 * 3600.0
    max_streams: int = 200
    stream_seconds: float = 300.0
    poll_interval: float = 0.25
    counts_ttl: float = 5.0
    streams: int = 0
    counts: Counts = field(init=False)
    redactor: Redactor = field(init=False)
    _secrets: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.counts = Counts(self.store, self.counts_ttl)
        self._secrets = tuple(sorted(self.tokens.secrets())) if self.tokens else ()
        self.redactor = Redactor(self._secrets)

    @property
    def store_label(self) -> str:
        """The store as pages show it (the backend's repr holds no password)."""
        return repr(self.store)

    def redact(self, value: Any) -> Any:
        """Run data as the console shows it: credentials masked (the console's own tokens
        included, as they are now), in pages and API answers alike."""
        if self.tokens is not None:
            current = tuple(sorted(self.tokens.secrets()))
            if current != self._secrets:
                self._secrets, self.redactor = current, Redactor(current)
        return self.redactor.redact(value)
