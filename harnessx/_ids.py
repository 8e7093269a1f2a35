"""Time-ordered ids for the rows written on every step (RFC 9562 UUID version 7).

A random (version 4) id lands on a random page of every index it is in, so each run touched
pages spread over the whole index: with millions of runs stored, most of them cold. A
version 7 id begins with the Unix time in milliseconds, so ids made close together sort
together and a run's inserts go to the few pages at the right edge of each index. Python
3.11 has no ``uuid.uuid7``; this is one, in the standard text form (36 characters, as
``str(uuid.uuid4())``, so stored ids keep their shape).

The 74 bits after the time and version are random for the first id of a millisecond and
count up from there for the rest of it (RFC 9562 6.2, method 2), so ids from one process are
strictly increasing even when many are made in one millisecond or the clock steps back.
Ids from different processes interleave by time only. The time an id was made is readable
from it: do not use one where that must stay secret.
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid

__all__ = ["uuid7", "uuid7_time"]

_COUNTER_BITS = 74  # rand_a (12) and rand_b (62)
# A new millisecond starts its counter in the lower half, leaving room to count up.
_START_BITS = _COUNTER_BITS - 1
_clock = time.time_ns  # tests replace it to step the clock
_lock = threading.Lock()
_last_ms = -1
_counter = 0


def _next() -> tuple[int, int]:
    global _last_ms, _counter
    now = _clock() // 1_000_000
    with _lock:
        if now > _last_ms:
            _last_ms, _counter = now, secrets.randbits(_START_BITS)
        else:
            # The same millisecond, or the clock went back: keep counting from the last id.
            _counter += 1
            if _counter >> _COUNTER_BITS:
                _last_ms, _counter = _last_ms + 1, secrets.randbits(_START_BITS)
        return _last_ms, _counter


def uuid7() -> str:
    """A new version 7 UUID as text, greater than every one this process made before."""
    ms, counter = _next()
    rand_a = counter >> 62
    rand_b = counter & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    # The standard text form, written out (uuid.UUID's checks and str() cost 3 times as much;
    # every event gets one of these).
    digits = f"{value:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def uuid7_time(value: str) -> float:
    """The Unix time (seconds) a version 7 id was made."""
    return (uuid.UUID(value).int >> 80) / 1000.0
