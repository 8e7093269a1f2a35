"""The original harnessx's ``harnessx.backends.sqlite``."""

from __future__ import annotations

from harnessx.store._sqlite import SQLiteBackend

__all__ = ["SQLiteBackend"]
