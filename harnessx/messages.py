"""The original harnessx's ``harnessx.messages``: a validated conversation message."""

from __future__ import annotations

from harnessx._messages import Message
from harnessx._unsupported import unsupported_attribute

__all__ = ["Message"]


def __getattr__(name: str) -> object:
    # Only for names this module lacks: the original's that are not here say why.
    raise unsupported_attribute(__name__, name)
