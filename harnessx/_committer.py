"""Committing a durable run: fenced checkpoints, coalesced text deltas, and a live feed.

The lease holder is the only writer of a run's events, so it numbers them itself. Text
deltas get their cursor at once and go to local followers through the ``RunFeed``, but
reach the store in batches (at most ``flush_max`` events or ``flush_interval`` seconds
apart, and always together with the next checkpoint). A crash loses at most the unflushed
provisional text, which the next attempt's ``attempt_reset`` tells consumers to discard.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator

from harnessx._errors import LeaseLostError, StorageError
from harnessx._events import RunEvent
from harnessx._journal import RecordingError, RunJournal
from harnessx._state import UNCHANGED, Delta, RunState
from harnessx.store._protocol import Lease, Store

__all__ = ["RunFeed", "StoreCommitter"]

_CONFIRM_ATTEMPTS = 3


class RunFeed:
    """Events of a run driven in this process, flushed or not, for local followers."""

    def __init__(self, first_seq: int) -> None:
        self.first_seq = first_seq
        self.events: list[RunEvent] = []
        self.closed = False
        self._changed = asyncio.Event()

    def covers(self, seq: int) -> bool:
        return seq >= self.first_seq

    def after(self, position: int) -> list[RunEvent]:
        start = position + 1 - self.first_seq
        return self.events[max(start, 0) :]

    def publish(self, events: list[RunEvent]) -> None:
        if events:
            self.events.extend(events)
            self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait(self, max_wait: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), max_wait)


class StoreCommitter:
    """The ``Committer`` for a durable run: every write is fenced by ``lease``.

    With a ``journal`` (a recorded run), each write also appends the run's journal records
    for it, in the same transaction. With ``on_release``, the commit that finishes the run
    (completed, failed or cancelled: nothing is written after it) also gives the lease back,
    in the same transaction; ``on_release`` is called just before it is sent, to stop
    renewing the lease, and ``released`` says it was given back."""

    def __init__(
        self,
        store: Store,
        lease: Lease,
        *,
        last_seq: int,
        feed: RunFeed | None = None,
        flush_interval: float = 0.05,
        flush_max: int = 64,
        journal: RunJournal | None = None,
        on_release: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.on_release = on_release
        self.released = False
        self.journal = journal
        self.lease = lease
        self.feed = feed
        self._seq = last_seq
        self._buffer: list[RunEvent] = []
        self._buffer_since = 0.0
        self.flush_interval = flush_interval
        self.flush_max = flush_max

    @property
    def last_seq(self) -> int:
        return self._seq

    def _number(self, events: list[RunEvent]) -> None:
        for event in events:
            self._seq += 1
            event.cursor = str(self._seq)

    async def commit(self, state: RunState, delta: Delta) -> None:
        before = self._seq
        self._number(delta.events)
        buffered, self._buffer = self._buffer, []
        status = delta.run.status
        release = self.on_release is not None and status is not UNCHANGED and status.finished
        if release:
            assert self.on_release is not None
            self.on_release()
        try:
            if self.journal is None:
                await self.store.commit(self.lease, state, delta, buffered, release=release)
            else:
                records = self.journal.for_commit(state, delta, [*buffered, *delta.events])
                with _recorded(state):
                    await self.store.commit(self.lease, state, delta, buffered, records, release=release)
                self.journal.committed()
            self.released = release
        except BaseException:
            # Not written: whatever the driver commits next (the run's failure) numbers its
            # events from here again, with the buffered ones, so that the stream stays dense.
            # (After a lost lease or a store failure it writes nothing more at all.)
            self._seq, self._buffer = before, buffered + self._buffer
            raise
        if self.feed is not None:
            self.feed.publish(delta.events)

    async def confirm(self) -> None:
        """Return once the lease certainly still holds for a moment, by this process's clock;
        called right before a tool is invoked. The checkpoint before it (the dispatch intent)
        proves only that the lease held when the server committed it: its reply may have
        been held up, past the lease, while another process took the run over. When the last
        claim or renewal is too old to tell, renew the lease first. ``LeaseLostError`` if it
        turns out lost, or cannot be shown to hold: the tool must not run then."""
        margin = min(1.0, self.store.lease_seconds / 10)  # clocks' rates may drift apart
        for _ in range(_CONFIRM_ATTEMPTS):
            if time.monotonic() + margin < self.store.lease_deadline(self.lease):
                return
            try:
                renewal = await self.store.renew([self.lease])
            except StorageError as exc:
                raise self._unconfirmed(f"renewing it failed: {exc}") from exc
            if self.lease.session_id not in renewal.held:
                raise self._unconfirmed("another process took the session over")
        raise self._unconfirmed(f"{_CONFIRM_ATTEMPTS} renewals in a row took longer than the lease")

    async def pending_cancel(self) -> bool:
        """Whether a cancel request waits on the session (another process's ``cancel``): one
        written while the run paused or began to wait stays for the driver to act on."""
        session = await self.store.get_session(self.lease.session_id)
        return session is not None and session.control == "cancel"

    def _unconfirmed(self, why: str) -> LeaseLostError:
        return LeaseLostError(
            f"the lease on session {self.lease.session_id} (generation {self.lease.generation}) could "
            f"not be confirmed before a tool call ({why}); the tool did not run"
        )

    async def provisional(self, state: RunState, event: RunEvent) -> None:
        self._number([event])
        if not self._buffer:
            self._buffer_since = time.monotonic()
        self._buffer.append(event)
        if self.feed is not None:
            self.feed.publish([event])
        if (
            len(self._buffer) >= self.flush_max
            or time.monotonic() - self._buffer_since >= self.flush_interval
        ):
            await self.flush()

    async def lookup_result(self, session_id: str, tool_call_id: str) -> str | None:
        """A stored tool result of the session, for ``read_tool_result`` (see the driver)."""
        return await self.store.tool_result(session_id, tool_call_id)

    async def flush(self) -> None:
        if self._buffer:
            buffered, self._buffer = self._buffer, []
            run_id = buffered[0].run_id
            try:
                if self.journal is None:
                    await self.store.append_events(self.lease, run_id, buffered)
                else:
                    records = self.journal.for_events(buffered)
                    with _recorded(buffered[0]):
                        await self.store.append_events(self.lease, run_id, buffered, records)
            except BaseException:
                self._buffer = buffered + self._buffer  # not written: they go with the next commit
                raise


@contextlib.contextmanager
def _recorded(subject: RunState | RunEvent) -> Iterator[None]:
    """A recorded run's failed write is a ``RecordingError`` (a lost lease stays itself)."""
    try:
        yield
    except LeaseLostError:
        raise
    except StorageError as exc:
        raise RecordingError(
            f"a recorded boundary of run {subject.run_id} could not be committed, so the run stopped "
            f"before it: {exc}"
        ) from exc
