"""How fast this machine is right now, printed beside every benchmark's figures.

The virtual machine the figures in docs/benchmarks.md come from gave half its steps per
second on some evenings of what it gave on others, with nothing else running: its host's
other tenants, not anything the load average or ``/proc/stat`` steal shows. A benchmark's
absolute figures say little without the machine's state at that moment, so each prints
three readings taken as it starts, before its servers and workers do:

- ``calibration_ms``: the CPU time of a fixed piece of pure Python (an integer loop and the
  JSON encoding of a small run-like document; the best of three);
- ``handoff_us``: a message's round trip between two processes over a socket pair (the
  median of 2,000), what a step pays at every hop between a worker, the database server and
  a waiting client: the kernel's scheduling and wake-ups, which a VM's neighbours slow down
  without making pure computation slower;
- ``fsync_ms``: a 4 KiB write and ``fsync`` of a file in the temporary folder (the median of
  50), what every durable commit waits for.

On 2026-12-02 the pool's CPU per step followed the calibration only loosely (2.2 ms at 45 ms,
2.6-3.7 ms at 54-79 ms), hence the other two. Lower is faster for all three.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import tempfile
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
    """Milliseconds of this process's CPU for the fixed workload (the best of three)."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        _workload()
        best = min(best, time.process_time() - started)
    return best * 1000


def handoff_us(rounds: int = 2_000) -> float:
    """Microseconds for one byte to go to a child process and back (the median)."""
    parent, child = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the child echoes until the parent closes its end
        parent.close()
        try:
            while data := child.recv(1):
                child.sendall(data)
        finally:
            os._exit(0)
    child.close()
    samples = []
    try:
        for _ in range(rounds):
            started = time.perf_counter()
            parent.sendall(b"x")
            parent.recv(1)
            samples.append(time.perf_counter() - started)
    finally:
        parent.close()
        os.waitpid(pid, 0)
    return statistics.median(samples) * 1e6


def fsync_ms(rounds: int = 50) -> float:
    """Milliseconds to write 4 KiB to a file and fsync it (the median)."""
    block = os.urandom(4096)
    samples = []
    with tempfile.TemporaryFile() as file:
        for _ in range(rounds):
            started = time.perf_counter()
            file.write(block)
            file.flush()
            os.fsync(file.fileno())
            samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def reading() -> str:
    """The three readings, taken now (about half a second)."""
    return (
        f"calibration {calibration_ms():.0f} ms of CPU, process hand-off {handoff_us():.0f} µs, "
        f"fsync {fsync_ms():.2f} ms"
    )


def describe(taken: str) -> str:
    """The machine line of a benchmark's report; ``taken`` is ``reading()`` from before its
    servers and workers started (right after them the CPU workload took half as long again
    on the benchmark machine: their leftovers still ran)."""
    return (
        f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, {taken} "
        "before the benchmark (bench/machine.py; lower is faster)"
    )
