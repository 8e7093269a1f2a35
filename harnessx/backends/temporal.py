"""The original harnessx's ``harnessx.backends.temporal`` (needs ``harnessx-durable[temporal]``):
``TemporalBackend`` and ``RedisEvents``, from ``harnessx.temporal`` (docs/temporal.md)."""

from __future__ import annotations

from harnessx.temporal import RedisEvents, TemporalBackend

__all__ = ["RedisEvents", "TemporalBackend"]
