"""The scheduling rules that need no database: names, patterns, stride shares, the queue's
metrics in a bounded number of series, delays, the rate limits' arithmetic."""

from __future__ import annotations

import datetime as dt

import pytest

from harnessx import AgentRegistry, ConfigurationError
from harnessx.store._scheduling import (
    QueueGroup,
    QueueShape,
    RateLimit,
    RateRelease,
    Schedule,
    check_pattern,
    check_rate,
    delay_of,
    governing_rate,
    lease_rate,
    matching_pattern,
    released_seconds,
    reserve_rate,
    stride_allocation,
    token_seconds,
)
from supervisor._metrics import KEY_SERIES, SupervisorMetrics


def test_stride_shares_follow_passes_and_weights() -> None:
    assert stride_allocation([("a", 0, 1), ("b", 0, 1)], 4) == [("a", 2), ("b", 2)]
    assert stride_allocation([("a", 0, 3), ("b", 0, 1)], 4) == [("a", 3), ("b", 1)]
    # A group far behind in pass takes everything until it catches up.
    assert stride_allocation([("a", 10, 1), ("b", 0, 1)], 4) == [("b", 4)]
    assert stride_allocation([("b", 1, 1), ("a", 0, 1)], 3) == [("a", 2), ("b", 1)]


def test_the_most_specific_pattern_governs_a_key() -> None:
    patterns = ["*", "tenant:*", "tenant:4*", "tenant:42"]
    assert matching_pattern("tenant:42", patterns) == "tenant:42"
    assert matching_pattern("tenant:43", patterns) == "tenant:4*"
    assert matching_pattern("tenant:7", patterns) == "tenant:*"
    assert matching_pattern("crm", patterns) == "*"
    assert matching_pattern("crm", ["tenant:*"]) is None
    for good in ("*", "a*", "agent:x@v1", "tenant:42"):
        assert check_pattern(good) == good
    for bad in ("a*b", "**", "a b", ""):
        with pytest.raises(ConfigurationError):
            check_pattern(bad)


def test_a_schedules_group_is_its_tenant_else_its_key() -> None:
    assert Schedule(tenant="t", concurrency_key="k").group == "t"
    assert Schedule(concurrency_key="k").group == "k"
    assert Schedule().group == ""
    assert Schedule(delay=-5).wait is None and Schedule(delay=2).wait == 2
    with pytest.raises(ConfigurationError, match="between"):
        Schedule(priority=10**7)
    with pytest.raises(ConfigurationError, match="priority must be an int"):
        Schedule(priority=True)


def test_delays_from_datetimes_and_timedeltas() -> None:
    assert delay_of(None) is None
    assert delay_of(dt.timedelta(minutes=2)) == 120
    soon = delay_of(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60))
    assert soon is not None and 58 < soon <= 60
    with pytest.raises(ConfigurationError, match="no time zone"):
        delay_of(dt.datetime(2030, 1, 1))


def test_a_registry_checks_its_defaults() -> None:
    registry = AgentRegistry()
    ref = registry.register("a", lambda: None, priority=3, max_concurrent=2)  # type: ignore[arg-type,return-value]
    assert (registry.defaults(ref).priority, registry.defaults(ref).max_concurrent) == (3, 2)
    with pytest.raises(ConfigurationError, match="whole number"):
        registry.register("b", lambda: None, max_concurrent=-1)  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigurationError, match="priority must be an int"):
        registry.register("c", lambda: None, priority=1.5)  # type: ignore[arg-type,return-value]
    assert "b" not in {r.name for r in registry.refs()}


def test_queue_metrics_name_a_bounded_number_of_keys() -> None:
    groups = [QueueGroup("normal", f"k{i:03d}", 100 - i, 0, 1000.0 + i) for i in range(50)]
    groups += [QueueGroup("high", "", 5, 1, 990.0), QueueGroup("low", "k000", 1, 1, None)]
    shape = QueueShape(groups)
    keys = shape.by_key(KEY_SERIES)
    assert len(keys) == KEY_SERIES + 2  # the top keys, "other" and "none"
    assert keys["k000"] == (101, 1000.0) and keys["none"] == (5, 990.0)
    assert keys["other"][0] == sum(100 - i for i in range(KEY_SERIES, 50))
    metrics = SupervisorMetrics()
    metrics.set_queue_shape(shape, now=1100.0)
    value = metrics.registry.get_sample_value
    assert value("harnessx_queue_depth_by_priority", {"band": "normal"}) == sum(100 - i for i in range(50))
    assert value("harnessx_queue_oldest_age_by_priority_seconds", {"band": "high"}) == 110.0
    assert value("harnessx_queue_delayed") == 2
    # A key no longer queued loses its series rather than staying at its last value.
    metrics.set_queue_shape(QueueShape([QueueGroup("normal", "k001", 3, 0, 1090.0)]), now=1100.0)
    assert value("harnessx_queue_depth_by_key", {"key": "k000"}) is None
    assert value("harnessx_queue_depth_by_key", {"key": "k001"}) == 3
    assert value("harnessx_queue_depth_by_priority", {"band": "high"}) == 0


def reserved_starts(limit: RateLimit, arrivals: list[tuple[float, int]]) -> list[float]:
    """When each call (arriving at a time, with its tokens) may start, one after another."""
    requests_at = tokens_at = 0.0
    starts = []
    for now, tokens in arrivals:
        taken = reserve_rate(limit, requests_at, tokens_at, now, tokens)
        requests_at, tokens_at = taken.requests_at, taken.tokens_at
        starts.append(now + taken.wait)
    return starts


def test_calls_arriving_together_start_a_rate_apart() -> None:
    starts = reserved_starts(RateLimit("openai/*", 60, None), [(100.0, 0)] * 5)
    assert starts == pytest.approx([100, 101, 102, 103, 104])
    # After a quiet spell the bucket is empty again: no credit for the quiet time without a burst.
    assert reserved_starts(RateLimit("m", 60, None), [(100.0, 0), (200.0, 0), (200.0, 0)]) == pytest.approx(
        [100, 200, 201]
    )


def test_a_burst_lets_that_many_seconds_of_calls_start_at_once() -> None:
    starts = reserved_starts(RateLimit("m", 60, None, burst_seconds=2), [(100.0, 0)] * 6)
    assert starts == pytest.approx([100, 100, 100, 101, 102, 103])


def test_tokens_space_calls_by_their_size() -> None:
    # 6,000 tokens a minute is 100 a second: a call of 500 tokens holds the next one 5 s.
    limit = RateLimit("m", None, 6000)
    assert reserved_starts(limit, [(0.0, 500), (0.0, 100), (0.0, 100)]) == pytest.approx([0, 5, 6])
    # Both rates: the tighter one decides.
    both = RateLimit("m", 600, 6000)
    assert reserved_starts(both, [(0.0, 10), (0.0, 10), (0.0, 1000)]) == pytest.approx([0, 0.1, 0.2])
    assert token_seconds(limit, -200) == pytest.approx(-2)
    assert token_seconds(RateLimit("m", 60, None), 500) == 0


def test_calls_in_any_window_stay_within_the_rate() -> None:
    import random

    rng = random.Random(7)
    limit = RateLimit("m", 120, None, burst_seconds=1)
    arrivals = sorted((rng.uniform(0, 30), 0) for _ in range(200))
    starts = reserved_starts(limit, arrivals)
    for window in (1.0, 5.0, 10.0):
        most = max(sum(1 for s in starts if t <= s < t + window) for t in starts)
        assert most <= (window + limit.burst_seconds) * 120 / 60 + 1


def test_rate_limits_are_checked_and_the_most_specific_governs() -> None:
    assert check_rate(60, None, 0) == (60.0, None, 0.0)
    with pytest.raises(ConfigurationError, match="needs requests per minute, tokens per minute or both"):
        check_rate(None, None, 0)
    with pytest.raises(ConfigurationError, match="tokens per minute must be a number above 0"):
        check_rate(None, 0, 0)
    with pytest.raises(ConfigurationError, match="burst must be from 0 to 3600"):
        check_rate(60, None, -1)
    limits = [
        RateLimit("*", 1000, None),
        RateLimit("openai/*", 100, None),
        RateLimit("openai/gpt-4o", 10, None),
    ]
    assert governing_rate(limits, "openai/gpt-4o") == limits[2]
    assert governing_rate(limits, "openai/gpt-4o-mini") == limits[1]
    assert governing_rate(limits, "anthropic/claude") == limits[0]
    assert governing_rate(limits[1:], "anthropic/claude") is None


def test_a_lease_gives_back_only_what_is_still_ahead_of_now() -> None:
    limit = RateLimit("m", 60, None)  # a call a second
    # Three unspent calls of a lease whose share of the schedule ends at 110.
    release = RateRelease(3, end=110.0, mark=5.0)
    assert released_seconds(limit, release, requests_at=120.0, given_back=5.0, now=100.0) == 3.0
    # Time has passed into their share: only what is still ahead goes back.
    assert released_seconds(limit, release, requests_at=120.0, given_back=5.0, now=108.5) == 1.5
    assert released_seconds(limit, release, requests_at=120.0, given_back=5.0, now=111.0) == 0.0
    # Leases given back since the grant moved this one's share that much earlier.
    assert released_seconds(limit, release, requests_at=120.0, given_back=7.0, now=106.0) == 2.0
    # Never below now; nothing to give back without a request rate.
    assert released_seconds(limit, release, requests_at=101.0, given_back=5.0, now=100.0) == 1.0
    assert released_seconds(RateLimit("m", None, 600), release, 120.0, 5.0, 100.0) == 0.0


def test_a_lease_holds_only_calls_that_may_start_now() -> None:
    limit = RateLimit("m", 60, None, burst_seconds=2)
    first = reserve_rate(limit, 0.0, 0.0, 100.0, 0)
    assert lease_rate(limit, first, 100.0, 0, 10, 0.25).granted == 3  # now, and 2 s of burst
    assert lease_rate(limit, first, 100.0, 0, 2, 0.25).granted == 2  # no more than asked
    waits = reserve_rate(limit, 105.0, 0.0, 100.0, 0)  # the bucket is 3 s ahead: it waits
    assert waits.wait == 3.0 and lease_rate(limit, waits, 100.0, 0, 10, 0.25).granted == 1
    # No burst: the slack alone (a call every 0.1 s, 0.25 s ahead at most).
    fast = RateLimit("m", 600, None)
    assert lease_rate(fast, reserve_rate(fast, 0.0, 0.0, 100.0, 0), 100.0, 0, 10, 0.25).granted == 3
