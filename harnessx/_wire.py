"""``wire``: any value harnessx stores, as strict JSON data (the original's helper)."""

from __future__ import annotations

import dataclasses
import math
from enum import Enum
from typing import Any

__all__ = ["wire"]


def wire(value: Any) -> Any:
    """``value`` as JSON data: enums by value, dataclasses by ``to_dict()`` (else their
    fields), dicts with string keys, lists, finite numbers. Anything else is a
    ``TypeError``: callables and unknown objects are never stored by accident."""
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        to_dict = getattr(value, "to_dict", None)
        return wire(to_dict() if callable(to_dict) else dataclasses.asdict(value))
    if isinstance(value, dict):
        if any(not isinstance(key, str) for key in value):
            raise TypeError("stored dictionaries must have string keys")
        return {key: wire(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [wire(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("stored numbers must be finite")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"{type(value).__name__} cannot be stored as JSON data")
