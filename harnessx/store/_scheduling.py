"""Scheduling the pool: what a queued run carries, the limits the claim obeys, and the
stride arithmetic of fair shares (see docs/scheduling.md).

Both stores implement the claim itself (SQLite in Python inside one write transaction,
PostgreSQL in the ``harnessx_claim_runs`` function); what they share lives here: the
checks on names, the order of tenants, and the records the store returns.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harnessx._errors import ConfigurationError
from harnessx.store._protocol import Lease

__all__ = [
    "AGENT_PREFIX",
    "AGING_SECONDS",
    "LOOK_AHEAD",
    "Claims",
    "ConcurrencyLimit",
    "QueueGroup",
    "QueueShape",
    "RateAsk",
    "RateBucket",
    "RateLimit",
    "RateRelease",
    "RateReservation",
    "RunSchedule",
    "Schedule",
    "TenantShare",
    "check_key",
    "check_max_running",
    "check_pattern",
    "check_rate",
    "check_weight",
    "delay_of",
    "governing_rate",
    "lease_ahead",
    "lease_rate",
    "matching_pattern",
    "released_seconds",
    "reserve_rate",
    "stride_allocation",
    "token_seconds",
]

AGING_SECONDS = 60.0
"""A queued run's effective priority rises by one for every this many seconds it waits."""
LOOK_AHEAD = 32
"""Runs of one tenant a claim passes over (their limit is full) before it tries the next."""
AGENT_PREFIX = "agent:"
"""Limits on ``agent:NAME@VERSION`` apply to all of that agent's runs; no concurrency key may
start with it."""

_MAX_NAME = 200
_PRIORITY_RANGE = 1_000_000


@dataclass(frozen=True)
class Schedule:
    """How a queued pool run is scheduled: ``priority`` (higher first; ``None``: its agent's
    default, else 0), ``concurrency_key`` (limits count the runs of a key), ``tenant`` (the
    fair-share group; default: the concurrency key) and ``delay`` (seconds from now, by the
    store's clock, before any worker may claim it)."""

    priority: int | None = None
    concurrency_key: str | None = None
    tenant: str | None = None
    delay: float | None = None

    def __post_init__(self) -> None:
        if self.priority is not None:
            if not isinstance(self.priority, int) or isinstance(self.priority, bool):
                raise ConfigurationError(f"priority must be an int, got {self.priority!r}")
            if abs(self.priority) > _PRIORITY_RANGE:
                raise ConfigurationError(
                    f"priority must be between -{_PRIORITY_RANGE} and {_PRIORITY_RANGE}, got {self.priority}"
                )
        if self.concurrency_key is not None:
            check_key(self.concurrency_key, "concurrency_key")
            if self.concurrency_key.startswith(AGENT_PREFIX):
                raise ConfigurationError(
                    f"concurrency_key {self.concurrency_key!r} starts with {AGENT_PREFIX!r}, which names "
                    "limits on whole agents: pick another key, or limit the agent with "
                    f"'harnessx limits set {AGENT_PREFIX}NAME@VERSION N'"
                )
        if self.tenant is not None:
            check_key(self.tenant, "tenant")
        if self.delay is not None and not (isinstance(self.delay, int | float) and math.isfinite(self.delay)):
            raise ConfigurationError(
                f"the delay before a run is claimed must be a number of seconds, got {self.delay!r}"
            )

    @property
    def group(self) -> str:
        """The fair-share group the run waits in: its tenant, else its concurrency key,
        else ``''`` (the runs with neither)."""
        return self.tenant or self.concurrency_key or ""

    @property
    def wait(self) -> float | None:
        """The delay, ``None`` when the run may be claimed at once."""
        return self.delay if self.delay is not None and self.delay > 0 else None


@dataclass(frozen=True)
class RunSchedule:
    """How a run is scheduled, as stored: ``not_before`` (epoch seconds) while it may not be
    claimed yet, ``queued_at`` while it waits, and its last claim (``claimed_at``)."""

    run_id: str
    priority: int
    concurrency_key: str | None
    tenant: str
    queued_at: float | None
    not_before: float | None
    claimed_at: float | None

    @property
    def queued(self) -> bool:
        return self.queued_at is not None


@dataclass(frozen=True)
class ConcurrencyLimit:
    """At most ``max_running`` runs of each key ``pattern`` matches drive at once;
    ``driving``: how many of the key's runs (an exact pattern's) do now, ``queued`` wait."""

    pattern: str
    max_running: int
    source: str  # "operator" (harnessx limits set) or "registry" (AgentRegistry.register)
    driving: int | None = None
    queued: int | None = None


@dataclass(frozen=True)
class RateLimit:
    """A fleet-wide rate for the model calls of each ``provider/model`` bucket ``pattern``
    matches: requests and tokens per minute (``None``: not limited), ``burst_seconds`` of
    calls that may go at once after a quiet spell."""

    pattern: str
    requests_per_minute: float | None
    tokens_per_minute: float | None
    burst_seconds: float = 0.0

    @classmethod
    def of_row(cls, row: Sequence[Any]) -> RateLimit:
        """A ``rate_limits`` row: pattern, rpm, tpm, burst."""
        pattern, rpm, tpm, burst = row
        return cls(
            str(pattern),
            None if rpm is None else float(rpm),
            None if tpm is None else float(tpm),
            float(burst),
        )


def governing_rate(limits: Sequence[RateLimit], bucket: str) -> RateLimit | None:
    """The limit that governs ``bucket``: the exact one, else the longest ``prefix*``."""
    by_pattern = {limit.pattern: limit for limit in limits}
    pattern = matching_pattern(bucket, list(by_pattern))
    return None if pattern is None else by_pattern[pattern]


@dataclass(frozen=True)
class RateBucket:
    """One ``provider/model`` bucket as the store keeps it: the limit ``pattern`` that
    governs it (``None``: none does any more), how many model calls waited for its budget
    (``waits``) and for how long in all (``waited``, seconds)."""

    name: str
    pattern: str | None
    waits: int
    waited: float


@dataclass(frozen=True)
class RateReservation:
    """One reservation (``reserve_rate``): the call may start ``wait`` seconds from the
    moment it was made, at ``start``; ``requests_at`` / ``tokens_at`` are the bucket's new
    theoretical arrival times (epoch seconds, all by the store's clock); ``held``: it is the
    reservation kept for the run while it waited in the queue (``hold_rate``), not a new one."""

    wait: float
    start: float
    requests_at: float
    tokens_at: float
    held: bool = False
    granted: int = 1
    """Calls' starts reserved (a lease, ``calls`` > 1): the first as ever, the others only
    if they may start now too (``lease_rate``)."""
    given_back: float = 0.0
    """The bucket's running total of request time given back (``RateRelease.mark``)."""


@dataclass(frozen=True)
class RateAsk:
    """A lease of up to ``calls`` starts in ``bucket`` (``tokens`` each, granted while each
    may start within ``slack`` seconds of now, the first one now) asked for with a claim
    (``Store.claim_queued``): the first model calls of the runs the worker is claiming,
    reserved in the claim's own transaction (``RateGate.ahead``), at most one a run taken.
    """

    bucket: str
    tokens: int
    calls: int
    slack: float


@dataclass(frozen=True)
class RateRelease:
    """A lease's unspent calls given back to their bucket: ``calls`` of them, the bucket's
    ``requests_at`` the grant left (``end``, store's clock) and its ``given_back`` then
    (``mark``). See ``released_seconds``."""

    calls: int
    end: float
    mark: float


def check_rate(
    requests_per_minute: float | None, tokens_per_minute: float | None, burst_seconds: float
) -> tuple[float | None, float | None, float]:
    """A rate limit's numbers: at least one rate, each above 0; a burst of 0 or more seconds."""
    rates = (("requests per minute", requests_per_minute), ("tokens per minute", tokens_per_minute))
    for what, value in rates:
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not 0 < value <= 1e12
        ):
            raise ConfigurationError(f"a rate limit's {what} must be a number above 0, got {value!r}")
    if requests_per_minute is None and tokens_per_minute is None:
        raise ConfigurationError(
            "a rate limit needs requests per minute, tokens per minute or both (--rpm N, --tpm N)"
        )
    if (
        isinstance(burst_seconds, bool)
        or not isinstance(burst_seconds, int | float)
        or not 0 <= burst_seconds <= 3600
    ):
        raise ConfigurationError(
            f"a rate limit's burst must be from 0 to 3600 seconds of its rate, got {burst_seconds!r}"
        )
    return (
        None if requests_per_minute is None else float(requests_per_minute),
        None if tokens_per_minute is None else float(tokens_per_minute),
        float(burst_seconds),
    )


def reserve_rate(
    limit: RateLimit,
    requests_at: float,
    tokens_at: float,
    now: float,
    tokens: int,
    paused_until: float = 0.0,
) -> RateReservation:
    """Reserve one model call of ``tokens`` tokens from a bucket (GCRA, the generic cell
    rate algorithm, as a virtual schedule).

    ``requests_at`` and ``tokens_at`` are the bucket's theoretical arrival times: when the
    bucket would be empty again if calls kept coming at its rate. A call may start once
    both are at most ``burst_seconds`` ahead of it, and not before ``paused_until`` (a
    vendor's Retry-After); it moves them on by one request's share of a minute (60 / rpm)
    and by its tokens' (tokens * 60 / tpm). Every caller reserves its own start in turn, so
    callers that wait never race for the same moment, and in any window of W seconds the
    calls started number at most (W + burst) * rpm / 60 + 1. (PostgreSQL runs the same
    arithmetic in ``harnessx_reserve_rate``, migration 0012.)"""
    burst = limit.burst_seconds
    start = max(now, paused_until)
    if limit.requests_per_minute is not None:
        start = max(start, requests_at - burst)
    if limit.tokens_per_minute is not None and tokens > 0:
        start = max(start, tokens_at - burst)
    if limit.requests_per_minute is not None:
        requests_at = max(requests_at, start) + 60.0 / limit.requests_per_minute
    if limit.tokens_per_minute is not None and tokens > 0:
        tokens_at = max(tokens_at, start) + tokens * 60.0 / limit.tokens_per_minute
    return RateReservation(start - now, start, requests_at, tokens_at)


def lease_rate(
    limit: RateLimit,
    taken: RateReservation,
    now: float,
    tokens: int,
    calls: int,
    slack: float,
) -> RateReservation:
    """``taken`` (one call reserved by ``reserve_rate``) and as many more of the ``calls``
    as may also start now: each is reserved by GCRA's own arithmetic (its request's share of
    a minute, its ``tokens``' share), and granted only while its start would be at most
    ``slack`` seconds from now. A first call that waits gets no company: a lease never
    holds a call that would have had to wait. (``harnessx_reserve_rate``, migration 0035,
    runs the same arithmetic.)"""
    if calls <= 1 or taken.start > now:
        return taken
    burst = limit.burst_seconds
    requests_at, tokens_at, granted = taken.requests_at, taken.tokens_at, 1
    rpm, tpm = limit.requests_per_minute, limit.tokens_per_minute
    while granted < calls:
        if rpm is not None and requests_at - burst > now + slack:
            break
        if tpm is not None and tokens > 0 and tokens_at - burst > now + slack:
            break
        if rpm is not None:
            requests_at += 60.0 / rpm
        if tpm is not None and tokens > 0:
            tokens_at += tokens * 60.0 / tpm
        granted += 1
    return RateReservation(
        taken.wait, taken.start, requests_at, tokens_at, granted=granted, given_back=taken.given_back
    )


def lease_ahead(
    limit: RateLimit,
    requests_at: float,
    tokens_at: float,
    now: float,
    ask: RateAsk,
    calls: int,
    paused_until: float = 0.0,
) -> RateReservation:
    """The lease a claim grants for ``ask`` (at most ``calls``: the runs it took): like
    ``lease_rate``'s, but no call in it may wait, the first included; ``granted`` 0 when
    the first would have to (the bucket is full, or paused), and then nothing is taken.
    (``harnessx_lease_ahead``, migration 0038, runs the same arithmetic.)"""
    if calls <= 0:
        return RateReservation(0.0, now, requests_at, tokens_at, granted=0)
    first = reserve_rate(limit, requests_at, tokens_at, now, ask.tokens, paused_until)
    if first.start > now:
        return RateReservation(0.0, now, requests_at, tokens_at, granted=0)
    return lease_rate(limit, first, now, ask.tokens, min(calls, ask.calls), ask.slack)


def released_seconds(
    limit: RateLimit, release: RateRelease, requests_at: float, given_back: float, now: float
) -> float:
    """How far a lease's unspent calls move their bucket's ``requests_at`` back: what they
    counted (``calls`` x 60 / rpm), but only the part of it still ahead of now. The calls
    were reserved as the segment of the bucket's schedule ending at ``release.end``; what
    of that segment has passed by ``now`` is spent time (giving it back would let later
    calls crowd into the time those never used), and other leases given back since the
    grant (``given_back - release.mark``) may have moved the segment that much earlier.
    Never below now: a bucket at or before now is simply full."""
    rpm = limit.requests_per_minute
    if rpm is None or release.calls <= 0:
        return 0.0
    ahead = release.end - (given_back - release.mark) - now
    return max(0.0, min(release.calls * 60.0 / rpm, ahead, requests_at - now))


def token_seconds(limit: RateLimit, tokens: int) -> float:
    """How far ``tokens`` tokens move a bucket's token arrival time (0 without a token rate):
    a call that used more (or, negative, fewer) tokens than it reserved is settled by it."""
    if limit.tokens_per_minute is None:
        return 0.0
    return tokens * 60.0 / limit.tokens_per_minute


@dataclass(frozen=True)
class TenantShare:
    """A fair-share group: its ``weight`` (a tenant of weight 2 gets twice the claims of one
    of weight 1 while both wait), its ``pass`` (the claims it had, by weight) and how many of
    its runs wait (``queued``; not counted for the untenanted group ``''``)."""

    tenant: str
    weight: float
    pass_: float
    queued: int


class Claims(list[tuple[Lease, str]]):
    """What one ``claim_queued`` call took, as ``(lease, run_id)``; ``deferred``: runs it
    passed over because one of their limits was full; ``rate``: the lease its ``rate`` ask
    was granted (``None``: nothing was asked, or no limit governs the bucket any more)."""

    deferred: int = 0
    rate: RateReservation | None = None

    def __init__(
        self,
        taken: list[tuple[Lease, str]] | None = None,
        deferred: int = 0,
        rate: RateReservation | None = None,
    ) -> None:
        super().__init__(taken or [])
        self.deferred = deferred
        self.rate = rate


_NAME = re.compile(r"^[^\s*]+$")


def check_key(value: object, what: str) -> str:
    """A concurrency key or tenant: a non-empty string, no white space or ``*``."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > _MAX_NAME or not _NAME.match(value):
        raise ConfigurationError(
            f"{what} {value!r} must be at most {_MAX_NAME} characters without spaces or '*' "
            "(a '*' at the end of a limit's pattern matches keys)"
        )
    return value


def check_pattern(value: object, what: str = "limit pattern") -> str:
    """A limit's pattern: a key, or a prefix ending in one ``*`` (``*`` alone: every key)."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"the {what} must be a non-empty string, got {value!r}")
    stem = value[:-1] if value.endswith("*") else value
    if stem:
        try:
            check_key(stem, what)
        except ConfigurationError:
            raise ConfigurationError(
                f"the {what} {value!r} must be a key, or a prefix ending in '*' ('tenant:*', or '*' for "
                "every key), without spaces"
            ) from None
    return value


def check_max_running(value: object) -> int:
    """A concurrency limit: a whole number of runs, 0 (none may drive: the key is paused) or more."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 1_000_000:
        raise ConfigurationError(
            f"a concurrency limit must be a whole number of runs from 0 to 1000000, got {value!r}"
        )
    return value


def check_weight(value: object) -> float:
    """A tenant's fair-share weight: above 0 (1 is the default)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1_000_000:
        raise ConfigurationError(
            f"a tenant's weight must be a number above 0 (1 is the default), got {value!r}"
        )
    return float(value)


def matching_pattern(key: str, patterns: list[str]) -> str | None:
    """The pattern that governs ``key``: itself if present, else the longest ``prefix*``."""
    if key in patterns:
        return key
    prefixes = [p for p in patterns if p.endswith("*") and key.startswith(p[:-1])]
    return max(prefixes, key=len, default=None)


def stride_allocation(groups: list[tuple[str, float, float]], n: int) -> list[tuple[str, int]]:
    """How many of ``n`` claims each group gets by its ``(name, pass, weight)``: the ``n``
    lowest tags ``pass + k / weight`` (k = 1, 2, ...), as ``(name, count)`` in the order of
    each group's first tag (ties by name)."""
    tags = sorted((passed + k / weight, name) for name, passed, weight in groups for k in range(1, n + 1))[:n]
    first: dict[str, float] = {}
    counts: dict[str, int] = {}
    for tag, name in tags:
        first.setdefault(name, tag)
        counts[name] = counts.get(name, 0) + 1
    return [(name, counts[name]) for name in sorted(first, key=lambda g: (first[g], g))]


@dataclass(frozen=True)
class QueueGroup:
    """Queued runs of one priority band (``high`` > 0, ``normal``, ``low`` < 0) and one
    concurrency key (``''``: none): how many, how many may not be claimed yet (a delay or a
    start back-off), and since when the longest-claimable one could have been claimed."""

    band: str
    key: str
    count: int
    delayed: int
    claimable_since: float | None


@dataclass(frozen=True)
class QueueShape:
    """The queue by priority band and concurrency key (see ``Store.queue_shape``)."""

    groups: list[QueueGroup]

    def by_band(self) -> dict[str, tuple[int, float | None]]:
        """Per band: queued runs and since when the longest-claimable one could be claimed."""
        return _summed(self.groups, lambda g: g.band)

    def by_key(self, top: int = 20) -> dict[str, tuple[int, float | None]]:
        """Per concurrency key: the ``top`` keys with the most queued runs by name, the rest
        summed as ``other`` (so that a metric's labels stay few), runs with no key as ``none``."""
        summed = _summed(self.groups, lambda g: g.key or "none")
        keyed = sorted((k for k in summed if k != "none"), key=lambda k: (-summed[k][0], k))
        shown = {k: summed[k] for k in keyed[:top]}
        rest = [summed[k] for k in keyed[top:]]
        if rest:
            shown["other"] = (
                sum(c for c, _ in rest),
                min((s for _, s in rest if s is not None), default=None),
            )
        if "none" in summed:
            shown["none"] = summed["none"]
        return shown

    @property
    def delayed(self) -> int:
        return sum(g.delayed for g in self.groups)


def _summed(
    groups: list[QueueGroup], label: Callable[[QueueGroup], str]
) -> dict[str, tuple[int, float | None]]:
    out: dict[str, tuple[int, float | None]] = {}
    for group in groups:
        count, since = out.get(label(group), (0, None))
        if group.claimable_since is not None:
            since = group.claimable_since if since is None else min(since, group.claimable_since)
        out[label(group)] = (count + group.count, since)
    return out


def delay_of(not_before: dt.datetime | dt.timedelta | None) -> float | None:
    """``submit(not_before=...)`` as seconds from now: a delay as given, a time (which must
    say its time zone) from this host's clock; ``None`` for none."""
    if not_before is None:
        return None
    if isinstance(not_before, dt.timedelta):
        return not_before.total_seconds()
    if isinstance(not_before, dt.datetime):
        if not_before.tzinfo is None or not_before.utcoffset() is None:
            raise ConfigurationError(
                f"not_before={not_before!r} has no time zone: pass an aware datetime, e.g. "
                "datetime.now(timezone.utc) + timedelta(minutes=5), or a timedelta"
            )
        return (not_before - dt.datetime.now(dt.UTC)).total_seconds()
    raise ConfigurationError(f"not_before must be a datetime or a timedelta, got {type(not_before).__name__}")
