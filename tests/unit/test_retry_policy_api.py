"""RetryPolicy's public questions, as harnessx 0.9.1 answers them: ``spent`` (was this the
last call a step may make?) and ``first_event_timeout`` (how long a streamed reply may take
to start); and the payloads a ``RunEvent`` accepts."""

from __future__ import annotations

import pytest

from harnessx import ConfigurationError, RetryPolicy, RunEvent, RunEventType


def test_spent_counts_attempts_and_a_rate_limits_deeper_budget() -> None:
    policy = RetryPolicy()  # 4 attempts; a rate limit 8, within 120 s of sleep
    assert not policy.spent(3, rate_limited=False) and policy.spent(4, rate_limited=False)
    assert not policy.spent(4, rate_limited=True, waited=10, next_wait=5)
    assert policy.spent(4, rate_limited=True, waited=118, next_wait=5), "past the 120 s budget"
    assert not policy.spent(3, rate_limited=True, waited=1e6), "the first attempts are not timed"
    assert policy.spent(8, rate_limited=True)
    assert not RetryPolicy(rate_limit_budget_seconds=None).spent(
        7, rate_limited=True, waited=1e6, next_wait=60
    )


def test_the_first_event_deadline_grows_per_attempt_and_with_the_request() -> None:
    policy = RetryPolicy()
    assert [policy.first_event_timeout(0, attempt=n) for n in (1, 2, 3, 4)] == [20.0, 40.0, 80.0, 160.0]
    assert policy.first_event_timeout(0) == 20.0
    assert policy.first_event_timeout(100_000) == 30.0
    # Never past the idle limit; no growth with 1.0; the idle limit without a deadline.
    assert RetryPolicy(stream_idle_timeout_seconds=50).first_event_timeout(0, attempt=4) == 50
    assert RetryPolicy(stream_first_event_growth=1.0).first_event_timeout(0, attempt=4) == 20.0
    assert RetryPolicy(stream_first_event_timeout_seconds=None).first_event_timeout(10) == 180.0
    assert RetryPolicy(stream_idle_timeout_seconds=None).first_event_timeout(0, attempt=3) == 80.0
    for bad in (0.5, 0, True, "2"):
        with pytest.raises(ConfigurationError):
            RetryPolicy(stream_first_event_growth=bad)  # type: ignore[arg-type]


def test_a_waiting_event_says_what_it_waits_on_and_for_how_long() -> None:
    event = RunEvent(RunEventType.WAITING, {"on": "model", "seconds": 12.0})
    assert RunEvent.from_dict(event.to_dict()) == event
    RunEvent(RunEventType.WAITING, {"on": "rate_limit", "seconds": 1.5, "bucket": "b"})
    for bad in (
        {"seconds": 1.0},
        {"on": "model"},
        {"on": "weather", "seconds": 1.0},
        {"on": "tool", "seconds": True},
    ):
        with pytest.raises(ValueError):
            RunEvent(RunEventType.WAITING, bad)
    # One stored before 'seconds' was required still reads.
    stored = {**event.to_dict(), "data": {"on": "retry", "reason": "starting"}}
    assert RunEvent.from_dict(stored).data == {"on": "retry", "reason": "starting", "seconds": 0.0}
