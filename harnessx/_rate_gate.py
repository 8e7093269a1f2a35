"""Fleet-wide model rate limits on the driving side (see docs/scheduling.md, *Model rate
limits*).

Before a model call of a durable run, the driver asks the ``RateGate`` for the call's
*bucket* (``provider/model``, e.g. ``openai/gpt-4o``). When a limit governs the bucket the
gate reserves the call's start through the store, which every worker shares (one statement),
and the driver waits for that start with no request open to the vendor: the wait is a
``waiting`` event (``on: rate_limit``) and a metric.

After the reply, the tokens the call really used *settle* the reservation, which counted what
the request was expected to use. That is not on the call's path: the difference is owed in
this process and goes to the store with the bucket's next reservation from here (in the same
statement), or on its own at most ``SETTLE_SECONDS`` after the reply when no reservation
took it first. A process that dies loses at most the differences of its calls of the last
``SETTLE_SECONDS``; usually they give budget back (a call reserves all of its ``max_tokens``),
so losing them errs on the limit's side.

A vendor's 429 with ``Retry-After`` on a reserved call pauses the bucket for the whole fleet
(``pause``): every worker's next reservations of it start no earlier.

*Leases.* A bucket this process calls often is reserved several calls at a time: the
reservation asks for about as many starts as the gate's calls of the bucket took in the last
``LEASE_SECONDS``, and the store grants, besides the call's own, only those that may also
start now. The gate spends them on its next calls of the bucket with no round trip, each
within ``LEASE_SECONDS`` of asking; what is not spent by then (or when the gate flushes,
or the bucket is paused) is given back. Only the store can make a call wait, so waits and
their metrics are those of the store's reservations.

*Ahead.* A worker that claims runs knows their first model calls are a few milliseconds
away, behind the runs' loads: it asks for a lease for them in the claim's own statement
(``ahead``, then ``taken`` with the store's answer), in the bucket (and of the size in
tokens) that this process's runs have lately opened with, so that the first calls find
their starts granted instead of asking the store on their way. It is an ordinary lease (the
same arithmetic, the same ``LEASE_SECONDS``) of at most as many calls as the claim took
runs, granted only while each may start now: a full bucket grants none, and the calls
reserve (and wait) as before. A guess that misses only costs its calls, given back unspent.

The limits themselves are read from the store at most every ``refresh_seconds``, so a model
call of a bucket that nothing limits costs no round trip.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harnessx._errors import StorageError
from harnessx._middleware import ModelRequest
from harnessx.providers._base import LLMProvider, TokenUsage
from harnessx.providers._http import estimate_tokens
from harnessx.store._protocol import Store
from harnessx.store._scheduling import RateAsk, RateLimit, RateRelease, RateReservation, governing_rate

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = [
    "HOLD_SECONDS",
    "LEAD_SECONDS",
    "LEASE_CALLS",
    "LEASE_SECONDS",
    "OPENERS",
    "SETTLE_SECONDS",
    "Admission",
    "RateGate",
    "RateWaitMetrics",
    "bucket_of",
]

logger = logging.getLogger("harnessx.rates")

REFRESH_SECONDS = 5.0
"""How stale the gate's copy of the limits may be: a limit set or removed with ``harnessx
limits rate`` applies to every worker's next model calls within this long."""
HOLD_SECONDS = 5.0
"""The longest a pool run waits for its rate budget in its worker's slot: a longer wait gives
the slot back (the run goes back to the queue, its reservation kept for it, until
``LEAD_SECONDS`` before its start)."""
LEAD_SECONDS = 1.0
"""How long before its reserved start a run that gave its slot back is claimable again: the
time a worker takes to claim and load it."""
SETTLE_SECONDS = 1.0
"""The longest a call's token difference stays in this process before it reaches the store:
the bound on how far the shared bucket may lag what the fleet's calls really used."""


LEASE_SECONDS = 0.25
"""A lease's lifetime L: a leased call starts within this long of the moment its lease was
asked for, else it is given back. It is also how far ahead of now a leased call's own start
in the bucket's schedule may lie (the store's ``slack``), so that a lease is possible at a
burst of 0; from the calls' starts, any window of W seconds then holds at most
(W + 2L + burst) x rpm / 60 + 1 calls (docs/scheduling.md, *Leases*)."""
LEASE_CALLS = 32
"""The most calls one lease holds."""
LEASE_SHARE = 0.5
"""The most of a limit's burst (and the lease's slack), in calls, that one lease holds: one
worker never takes all the room there is from the others."""
OPENERS = 8
"""How many of this process's latest opening calls (a driver's first model call) ``ahead``
goes by: it asks only when they all went to one bucket, for as many tokens as the largest."""


def bucket_of(provider: LLMProvider, model: str | None) -> str:
    """The bucket of a model call: the provider's name (``provider_name``, else its class's
    without ``Provider``), lower case, ``/`` the model asked for (else the provider's own)."""
    name = getattr(provider, "provider_name", None)
    if not isinstance(name, str) or not name:
        name = type(provider).__name__.removesuffix("Provider") or type(provider).__name__
    chosen = model or getattr(provider, "model", None) or "default"
    return f"{name.lower()}/{chosen}"


@dataclass(frozen=True)
class Admission:
    """One model call's reservation: its bucket, the tokens reserved for it, how long it
    must wait before it starts (seconds; 0: now), the start by the store's clock (epoch
    seconds) and by this process's (``time.monotonic()``); ``held``: the reservation was
    kept for the run while it waited in the queue."""

    bucket: str
    tokens: int
    wait: float
    start: float
    until: float
    held: bool = False

    def remaining(self) -> float:
        """Seconds left of the wait: the start is kept however long writing its event took."""
        return max(0.0, self.until - time.monotonic())


@dataclass
class _Lease:
    """Calls' starts of one bucket the store granted this gate to spend itself: ``left`` of
    them, and ``tokens`` (their estimates) to draw each call's own estimate from, until
    ``expires`` (``time.monotonic()``). ``start`` is the grant's start by the store's clock
    at ``granted`` (monotonic); ``end`` and ``mark`` are what the store needs to take the
    unspent ones back (``RateRelease``)."""

    left: int
    tokens: int
    expires: float
    start: float
    granted: float
    end: float
    mark: float

    def release(self) -> RateRelease:
        return RateRelease(self.left, self.end, self.mark)


_SHARED: weakref.WeakKeyDictionary[Any, RateGate] = weakref.WeakKeyDictionary()


_WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class RateWaitMetrics:
    """``harnessx_rate_limit_waits_total{bucket}`` and ``harnessx_rate_limit_wait_seconds``:
    the model calls a worker's gate made wait, and for how long. The pool worker and the
    Temporal worker both report them (``observe`` is a ``RateGate`` observer)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        # Imported here: a process that reports no metrics (import harnessx) does not load it.
        from prometheus_client import Counter, Histogram

        self.waits = Counter(
            "harnessx_rate_limit_waits",
            "Model calls of this worker's runs that waited for a fleet-wide rate limit's budget, by "
            "bucket (provider/model).",
            ["bucket"],
            registry=registry,
        )
        self.wait = Histogram(
            "harnessx_rate_limit_wait_seconds",
            "How long a model call waited for a fleet-wide rate limit's budget before it started.",
            ["bucket"],
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )

    def observe(self, bucket: str, seconds: float) -> None:
        # Buckets are provider/model names from the agents' definitions, not from clients: few.
        self.waits.labels(bucket=bucket).inc()
        self.wait.labels(bucket=bucket).observe(seconds)


class RateGate:
    """Reserves model calls' starts in the store's shared buckets (one gate per process).

    ``observers`` are called with ``(bucket, seconds)`` for every call that has to wait:
    the worker counts them in its metrics."""

    @classmethod
    def shared(cls, store: Store) -> RateGate:
        """The gate every ``AgentRuntime`` on ``store`` shares in this process: a runtime made
        per request reads the limits when its copy is stale, not once per runtime (one more
        round trip for each run)."""
        gate = _SHARED.get(store)
        if gate is None:
            gate = _SHARED[store] = cls(store)
        return gate

    def __init__(
        self,
        store: Store,
        *,
        refresh_seconds: float = REFRESH_SECONDS,
        settle_seconds: float = SETTLE_SECONDS,
        lease_seconds: float = LEASE_SECONDS,
    ) -> None:
        self.store = store
        self.refresh_seconds = refresh_seconds
        self.settle_seconds = settle_seconds
        self.lease_seconds = lease_seconds
        self.observers: list[Callable[[str, float], None]] = []
        self._limits: list[RateLimit] = []
        self._read_at = -math.inf
        self._refreshing: asyncio.Task[None] | None = None
        # Tokens the calls of each bucket used beyond (negative: short of) their
        # reservations, not yet in the store; and the task that sends them if no
        # reservation of the bucket does first.
        self._owed: dict[str, int] = {}
        self._settling: asyncio.Task[None] | None = None
        # Each bucket's lease, when its calls were asked for lately (what the next lease
        # asks for), and the task that gives back the leases that expire unspent.
        self._leases: dict[str, _Lease] = {}
        self._reserving: dict[str, asyncio.Event] = {}  # a lease being asked for, by bucket
        self._giving_back: set[asyncio.Task[None]] = set()
        self._recent: dict[str, deque[float]] = {}
        self._expiring: asyncio.Task[None] | None = None
        # The bucket and tokens of the latest opening calls (a driver's first), and when a
        # lease was asked for ahead of claimed runs' first calls, by bucket (ahead).
        self._openers: deque[tuple[str, int]] = deque(maxlen=OPENERS)
        self._ahead: dict[str, float] = {}

    async def refresh(self) -> None:
        """Read the limits now (a worker does when it starts, so that its first model calls
        find them read)."""
        self._limits = await self.store.rate_limits()
        self._read_at = time.monotonic()

    async def limit_for(self, bucket: str) -> RateLimit | None:
        """The limit governing ``bucket``, from a copy at most ``refresh_seconds`` old.

        Only the first read is waited for. A stale copy is read again in the background and
        used meanwhile, so a store that is slow or unreachable holds no model call up here
        (one that cannot be written to stops the run at its next write anyway)."""
        if self._read_at == -math.inf:
            await self.refresh()
        elif time.monotonic() - self._read_at >= self.refresh_seconds and (
            self._refreshing is None or self._refreshing.done()
        ):
            self._refreshing = asyncio.create_task(self._refresh_quietly(), name="harnessx-rate-limits")
        return governing_rate(self._limits, bucket)

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh()
        except StorageError as exc:
            logger.warning("could not read the model rate limits (%s); using those read before", exc)
            self._read_at = time.monotonic() - self.refresh_seconds + 1.0  # again in a second

    async def admit(
        self,
        provider: LLMProvider,
        request: ModelRequest,
        run_id: str | None = None,
        *,
        opening: bool = False,
    ) -> Admission | None:
        """Reserve the start of ``request``'s call (or take the reservation kept for
        ``run_id``: pass it only for a run that has one, as it goes to the store); ``None``
        when no limit governs it. A call this gate's lease of the bucket covers starts now,
        with no round trip. What earlier calls of the bucket owe, and a lease given back,
        go to the store in the same statement as the reservation. ``opening``: the call is
        its driver's first (what ``ahead`` learns from)."""
        bucket = bucket_of(provider, request.model)
        limit = await self.limit_for(bucket)
        if limit is None:
            return None
        tokens = 0
        if limit.tokens_per_minute is not None:
            # What the request is expected to use: its input, by the usual four characters
            # a token, and as much output as it allows (vendors reserve max_tokens, too).
            tokens = estimate_tokens(request.system, request.messages, request.tools) + (
                request.max_tokens or 0
            )
        if opening:
            self._openers.append((bucket, tokens))
        calls = self._lease_size(bucket, limit, tokens, time.monotonic())
        while True:
            asked = time.monotonic()
            lease = self._leases.get(bucket)
            if run_id is None and lease is not None and asked < lease.expires and tokens <= lease.tokens:
                lease.left -= 1
                lease.tokens -= tokens
                if lease.left == 0:  # spent: the allowance's rest is tokens given back
                    del self._leases[bucket]
                    if lease.tokens:
                        self._owe(bucket, -lease.tokens)
                return Admission(bucket, tokens, 0.0, lease.start + (asked - lease.granted), asked)
            reserving = self._reserving.get(bucket)
            if run_id is not None or reserving is None:
                break
            # Another call of the bucket is asking the store for a lease: wait for it rather
            # than ask too (it asked for about this call's share as well).
            await reserving.wait()
        if run_id is not None:
            return await self._reserve(bucket, tokens, run_id, calls, lease, asked)
        self._reserving[bucket] = asking = asyncio.Event()
        try:
            return await self._reserve(bucket, tokens, run_id, calls, lease, asked)
        finally:
            del self._reserving[bucket]
            asking.set()

    async def _reserve(
        self, bucket: str, tokens: int, run_id: str | None, calls: int, lease: _Lease | None, asked: float
    ) -> Admission | None:
        """The store's part of ``admit``: one reservation, giving back ``lease`` (expired,
        or it cannot cover this call) in the same statement."""
        release = None
        owed = self._owed.pop(bucket, 0)
        if run_id is not None:
            calls = 1  # a kept reservation is one call's; the lease stays for other runs
        elif lease is not None:  # expired, or it cannot cover this call: given back with it
            self._leases.pop(bucket, None)
            owed -= lease.tokens
            release = lease.release()
        try:
            taken = await self.store.reserve_rate(
                bucket, tokens, owed, run_id, calls=calls, slack=self.lease_seconds, release=release
            )
        except BaseException:
            # Whether it reached the store is not known: owing more again errs on the
            # limit's side, giving budget back twice would not (nor would calls given back).
            if owed > 0:
                self._owe(bucket, owed)
            raise
        if taken is None:  # the limit was removed since the gate last read them
            return None
        if taken.granted > 1:
            self._lease_out(bucket, taken, taken.granted - 1, tokens, asked)
        wait = max(0.0, taken.wait)  # a kept reservation's start may have passed
        if wait > 0 and not taken.held:  # a kept one was counted when it was made
            for observe in self.observers:
                observe(bucket, wait)
        return Admission(bucket, tokens, wait, taken.start, time.monotonic() + wait, taken.held)

    def _lease_out(self, bucket: str, taken: RateReservation, calls: int, tokens: int, asked: float) -> None:
        """Keep ``calls`` of ``taken``'s starts (``tokens`` each) as the bucket's lease, to
        be spent within ``lease_seconds`` of ``asked``."""
        older = self._leases.pop(bucket, None)
        if older is not None:  # not expected (one call of a bucket asks at a time): not lost
            task = asyncio.create_task(self._give_back(bucket, older), name="harnessx-rate-lease-back")
            self._giving_back.add(task)
            task.add_done_callback(self._giving_back.discard)
        self._leases[bucket] = _Lease(
            calls,
            calls * tokens,
            asked + self.lease_seconds,
            taken.start,
            time.monotonic(),
            taken.requests_at,
            taken.given_back,
        )
        self._expire_soon()

    def ahead(self, calls: int) -> RateAsk | None:
        """What to ask for with a claim of up to ``calls`` runs: a lease of their first model
        calls' starts (module docstring, *Ahead*), or ``None``. Only when this process's
        latest opening calls all went to one bucket that a limit governs, and this gate
        neither holds a lease of it nor has asked ahead for one; as many calls as runs,
        capped as a lease's are, of the largest opening call's tokens. Whoever asks must
        hand the answer to ``taken``, also when the claim fails."""
        if calls <= 0 or not self._openers:
            return None
        bucket = self._openers[0][0]
        if any(opened != bucket for opened, _ in self._openers):
            return None
        tokens = max(spent for _, spent in self._openers)
        limit = governing_rate(self._limits, bucket)  # the copy read: nothing waits here
        if limit is None or bucket in self._leases or bucket in self._ahead:
            return None
        self._ahead[bucket] = time.monotonic()
        return RateAsk(bucket, tokens, min(calls, self._lease_cap(limit, tokens)), self.lease_seconds)

    def taken(self, ask: RateAsk, reservation: RateReservation | None) -> None:
        """The store's answer to ``ask`` (``None``: the claim failed, or nothing limits the
        bucket any more): the calls granted (none when the claim took no run, or the bucket
        is full) become the bucket's lease, counted from the moment they were asked for."""
        asked = self._ahead.pop(ask.bucket, time.monotonic())
        if reservation is not None and reservation.granted > 0:
            self._lease_out(ask.bucket, reservation, reservation.granted, ask.tokens, asked)

    def _lease_cap(self, limit: RateLimit, tokens: int) -> int:
        """The most calls one lease may hold under ``limit`` (``LEASE_SHARE``), at least 1."""
        room = limit.burst_seconds + self.lease_seconds
        cap = LEASE_CALLS
        if limit.requests_per_minute is not None:
            cap = min(cap, int(room * limit.requests_per_minute / 60.0 * LEASE_SHARE))
        if limit.tokens_per_minute is not None and tokens > 0:
            cap = min(cap, int(room * limit.tokens_per_minute / 60.0 * LEASE_SHARE / tokens))
        return max(1, cap)

    def _lease_size(self, bucket: str, limit: RateLimit, tokens: int, now: float) -> int:
        """How many calls' starts to ask for: about as many as this gate's calls of the
        bucket in the last lease lifetime (at least this one), at most ``LEASE_CALLS`` and
        ``LEASE_SHARE`` of what the limit lets start at once. Notes this call."""
        recent = self._recent.setdefault(bucket, deque())
        while recent and recent[0] <= now - self.lease_seconds:
            recent.popleft()
        recent.append(now)
        return min(max(1, len(recent) - 1), self._lease_cap(limit, tokens))

    def _expire_soon(self) -> None:
        if self._expiring is None or self._expiring.done():
            self._expiring = asyncio.create_task(self._give_back_expired(), name="harnessx-rate-leases")

    async def _give_back_expired(self) -> None:
        """Give each lease back as it expires unspent, off every call's path."""
        while self._leases:
            first = min(lease.expires for lease in self._leases.values())
            await asyncio.sleep(max(0.0, first - time.monotonic()))
            now = time.monotonic()
            for bucket, lease in list(self._leases.items()):
                if lease.expires <= now and self._leases.get(bucket) is lease:
                    del self._leases[bucket]
                    try:
                        await self._give_back(bucket, lease)
                    except Exception as exc:  # a store closed meanwhile: nobody awaits this task
                        logger.warning("could not give a rate lease back: %s", exc)
                        return

    async def _give_back(self, bucket: str, lease: _Lease) -> None:
        """Give ``lease``'s unspent calls and tokens back, with what the bucket owes. A store
        failure is only logged: calls not given back stay spent, which errs on the side of
        the limit."""
        owed = self._owed.pop(bucket, 0) - lease.tokens
        try:
            await self.store.release_rate(bucket, lease.release(), owed)
        except StorageError as exc:
            logger.warning("could not give back the unspent rate lease of bucket %s: %s", bucket, exc)
            if owed > 0:
                self._owe(bucket, owed)

    def settle(self, admission: Admission, usage: TokenUsage) -> None:
        """Owe the store the difference between the tokens the call reported using and what
        it reserved; it goes with the bucket's next reservation from this process, or within
        ``settle_seconds`` (nothing on the call's path waits for it)."""
        used = usage.total_tokens
        if admission.tokens and used > 0 and used != admission.tokens:
            self._owe(admission.bucket, used - admission.tokens)

    def _owe(self, bucket: str, tokens: int) -> None:
        self._owed[bucket] = self._owed.get(bucket, 0) + tokens
        if self._settling is None or self._settling.done():
            self._settling = asyncio.create_task(self._settle_soon(), name="harnessx-rate-settle")

    async def _settle_soon(self) -> None:
        while self._owed:  # what a failed flush still owes is tried again
            await asyncio.sleep(self.settle_seconds)
            try:
                await self.flush()
            except Exception as exc:  # a store closed meanwhile: nobody awaits this task
                logger.warning("could not settle model calls' tokens: %s", exc)
                return

    async def flush(self) -> None:
        """Give every unspent lease back and send every bucket's owed tokens to the store
        now (a worker does as it stops). A store failure is only logged: what fewer tokens
        or unspent calls would have given back stays spent, which errs on the side of the
        limit; what more tokens owe is kept for later."""
        while self._leases:
            await self._give_back(*self._leases.popitem())
        while self._owed:
            bucket, tokens = self._owed.popitem()
            try:
                await self.store.settle_rate(bucket, tokens)
            except StorageError as exc:
                logger.warning("could not settle model calls' tokens in bucket %s: %s", bucket, exc)
                if tokens > 0:
                    self._owe(bucket, tokens)
                return

    async def pause(self, admission: Admission, seconds: float) -> None:
        """The vendor refused the admitted call with ``Retry-After: seconds``: no call of its
        bucket starts, anywhere in the fleet, before that has passed. A store failure is
        only logged (the refused call's own retry still waits it out)."""
        if not (seconds > 0 and math.isfinite(seconds)):
            return
        # This gate's leased calls of the bucket must not start during the pause either.
        lease = self._leases.pop(admission.bucket, None)
        try:
            await self.store.pause_rate(admission.bucket, seconds)
        except StorageError as exc:
            logger.warning(
                "could not pause bucket %s for the vendor's Retry-After: %s", admission.bucket, exc
            )
        if lease is not None:
            await self._give_back(admission.bucket, lease)
