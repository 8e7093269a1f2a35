"""0.9.1's module of ``ResultSpillExtension``; the name lives in ``harnessx.extensions``."""

from __future__ import annotations

from harnessx._result_spill import ResultSpillExtension

__all__ = ["ResultSpillExtension"]
