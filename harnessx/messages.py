"""The original harnessx's ``harnessx.messages``: a validated conversation message."""

from __future__ import annotations

from harnessx._messages import Message

__all__ = ["Message"]
