"""The original harnessx's ``harnessx.loopguard``: spotting a repeating cycle of tool calls."""

from __future__ import annotations

from harnessx._loopguard import call_signature, detect_cycle, repetition_notice

__all__ = ["call_signature", "detect_cycle", "repetition_notice"]
