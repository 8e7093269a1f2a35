"""What the faults did, measured from the same data the checker reads (pure functions).

- a kill is *mid-tool* when the killed process had a tool call between dispatch and the
  commit of its raw result: an invocation it started before the kill whose generation
  never committed that key's raw result;
- a *recovery* is an affected run (one whose lease the faulted process held) committing
  again after the fault: under a newer generation, or — for a database restart, after
  which the same holder may simply carry on — once the database is back;
- *fault to resume* is the time from the fault to that first commit (database clock).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from chaos.checker import Dataset, EventRow, Fault

__all__ = ["FaultStats", "fault_stats", "percentile"]

KILLS = frozenset({"kill-worker", "kill-worker-after-leader"})


def percentile(samples: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100); ``None`` without samples."""
    if not samples:
        return None
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class FaultStats:
    faults: Counter[str] = field(default_factory=Counter)
    kills_mid_tool: int = 0
    affected_runs: int = 0
    recoveries: int = 0
    resume_seconds: list[float] = field(default_factory=list)
    takeovers: int = 0  # leases the supervisor took from their holders
    leaders: int = 0  # times a supervisor became leader

    @property
    def total(self) -> int:
        return sum(self.faults.values())


def fault_stats(data: Dataset) -> FaultStats:
    stats = FaultStats()
    committed = {
        (e.key, e.generation) for e in data.events if e.type == "tool_call_complete" and e.key is not None
    }
    run_of_session: dict[str, str] = {run.session_id: run.id for run in data.runs}
    events: dict[str, list[EventRow]] = defaultdict(list)
    for event in data.events:
        events[event.run_id].append(event)
    for run_events in events.values():
        run_events.sort(key=lambda e: e.created_at)
    stats.takeovers = sum(1 for e in data.leadership if e.kind == "act")
    stats.leaders = sum(1 for e in data.leadership if e.kind == "lead")
    for fault in data.faults:
        stats.faults[fault.kind] += 1
        if fault.kind in KILLS and fault.pids and _mid_tool(data, fault, committed):
            stats.kills_mid_tool += 1
        for session_id, generation in fault.sessions:
            run_id = run_of_session.get(session_id)
            # A run that finished before the fault was over had nothing to recover (a
            # database restart lets commits already under way finish first).
            over = fault.ended if fault.pids is None else fault.started
            if run_id is None or not events[run_id] or events[run_id][-1].created_at < over:
                continue
            stats.affected_runs += 1
            resumed = next((e for e in events[run_id] if _resumes(e, fault, generation)), None)
            if resumed is not None:
                stats.recoveries += 1
                stats.resume_seconds.append(max(0.0, resumed.created_at - fault.started))
    return stats


def _mid_tool(data: Dataset, fault: Fault, committed: set[tuple[str, int]]) -> bool:
    """Was a call of the killed process in flight: started, and either still running or
    returned so recently that its raw result was on its way to the database?"""
    return any(
        fault.hits(i.pid)
        and i.started <= fault.started
        and (i.ended is None or i.ended > fault.started - 0.5)
        and (i.key, i.token) not in committed
        for i in data.invocations
    )


def _resumes(event: EventRow, fault: Fault, generation: int) -> bool:
    if event.created_at < fault.started:
        return False
    if fault.pids is None:
        return event.created_at >= fault.ended
    return event.generation > generation
