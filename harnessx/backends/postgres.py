"""The original harnessx's ``harnessx.backends.postgres`` (needs ``harnessx[postgres]``)."""

from __future__ import annotations

from harnessx.store._postgres import PostgresBackend

__all__ = ["PostgresBackend"]
