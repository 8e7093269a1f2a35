"""Noticing an agent that repeats itself (``LoopGuard``).

A stuck agent repeats a *cycle* of calls (A, B, A, B defeats a same-call-twice check), and
it is only stuck while the results come back the same: polling a job whose answer changes
is progress. So each completed call is reduced to a signature of its name, arguments and
result, and a cycle of up to ``max_period`` signatures repeated ``threshold`` times at the
end of the run's history trips the guard. A trip never fails the run: it puts a note in
front of the next result the model reads, and the history starts again, so one cycle is
reported once. Everything here is computed from the run's committed tool entries, so a
resumed run reaches the same verdicts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from harnessx._policies import LoopGuard

__all__ = ["call_signature", "detect_cycle", "repetition_notice", "trip_at"]


def call_signature(name: str, arguments: Any, result: str) -> str:
    try:
        rendered = json.dumps(arguments, sort_keys=True, default=str)
    except (TypeError, ValueError):
        rendered = repr(arguments)
    return hashlib.sha256(f"{name}\0{rendered}\0{result}".encode("utf-8", "replace")).hexdigest()[:16]


def detect_cycle(signatures: list[str], *, max_period: int = 4, threshold: int = 3) -> int | None:
    """The period of a cycle repeated ``threshold`` times at the end, or ``None``."""
    if threshold < 2 or not signatures:
        return None
    for period in range(1, max(1, max_period) + 1):
        needed = period * threshold
        if len(signatures) < needed:
            break
        tail = signatures[-needed:]
        lap = tail[:period]
        if all(tail[i * period : (i + 1) * period] == lap for i in range(1, threshold)):
            return period
    return None


def repetition_notice(period: int, laps: int) -> str:
    what = "The same call" if period == 1 else f"The same cycle of {period} calls"
    return (
        # "[harness]" marks what the harness, not a tool, says (as harnessx 0.9.1 marks it).
        f"[harness] Loop guard: {what} has now come back {laps} times with the same result; running it "
        "again will not tell you anything new. Look at what you already have, then try a different "
        "approach or stop and say what is in the way."
    )


def trip_at(steps: Iterable[list[str]], guard: LoopGuard) -> int | None:
    """Replay the run's steps (each a list of call signatures, in order) and return the
    cycle period if the guard trips on the last step, else ``None``."""
    if not guard.applies():
        return None
    history: list[str] = []
    period: int | None = None
    for signatures in steps:
        history.extend(signatures)
        history = history[-guard.history :]
        period = detect_cycle(history, max_period=guard.max_period, threshold=guard.threshold)
        if period is not None:
            history = []
    return period
