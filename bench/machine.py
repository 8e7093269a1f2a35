"""How fast this machine is right now, printed beside every benchmark's figures.

The virtual machine the figures in docs/benchmarks.md come from gave half its steps per
second on some evenings of what it gave on others, with nothing else running: its host's
other tenants, not anything the load average or ``/proc/stat`` steal shows. A benchmark's
absolute figures say little without the machine's speed at that moment, so each prints the
CPU time of a fixed piece of pure Python (``calibration_ms``: an integer loop and the JSON
encoding of a small run-like document, the best of three): figures taken at different
times compare after scaling by it, and a target met or missed on a slow turn of the
machine can be told from one missed by the code.
"""

from __future__ import annotations

import json
import os
import time

_MESSAGE = {"role": "user", "content": "look it up " * 8, "tool_calls": [{"id": "c1", "args": {"q": 1}}]}
_DOCUMENT = {
    "messages": [_MESSAGE] * 4,
    "usage": {"input_tokens": 120, "output_tokens": 30},
}


def _workload() -> int:
    total = 0
    for i in range(200_000):
        total += i * i % 7
    for _ in range(2_000):
        total += len(json.dumps(_DOCUMENT))
    return total


def calibration_ms() -> float:
    """Milliseconds of this process's CPU for the fixed workload (the best of three; lower
    is faster)."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        _workload()
        best = min(best, time.process_time() - started)
    return best * 1000


def describe(calibration: float) -> str:
    """The machine line of a benchmark's report: ``calibration`` is taken as the benchmark
    starts, before its servers and workers do (right after them the same workload took half
    as long again on the benchmark machine: their leftovers still ran)."""
    return (
        f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
        f"calibration {calibration:.0f} ms of CPU before the benchmark (bench/machine.py; lower is faster)"
    )
