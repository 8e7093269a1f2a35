"""Prometheus metrics of a pool worker (one registry per worker, served on ``/metrics``)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from harnessx._rate_gate import RateWaitMetrics

__all__ = ["OTHER_AGENTS", "UNKNOWN_AGENT_SERIES", "WorkerMetrics"]

# harnessx_queued_unknown_agent_runs names at most this many agent references (those with the
# most queued runs) and sums the rest under agent="_other": an agent reference comes from
# whoever submits, so one series per reference would let a client grow the metric unbounded.
UNKNOWN_AGENT_SERIES = 10
OTHER_AGENTS = "_other"

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class WorkerMetrics:
    """Everything a worker reports; names are documented in README.md (Metrics)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.info = Gauge(
            "harnessx_worker_info",
            "Constant 1, labelled with this worker's identity.",
            ["worker_id", "host"],
            registry=r,
        )
        self.up = Gauge("harnessx_worker_up", "1 while the worker runs; 0 once it has stopped.", registry=r)
        self.draining = Gauge(
            "harnessx_worker_draining", "1 while the worker drains after SIGTERM.", registry=r
        )
        self.runs_claimed = Counter(
            "harnessx_runs_claimed", "Runs this worker claimed from the queue.", registry=r
        )
        self.runs_finished = Counter(
            "harnessx_runs_finished",
            "Executions that ended, by the run's status at the end.",
            ["status"],
            registry=r,
        )
        self.runs_errored = Counter(
            "harnessx_runs_errored",
            "Executions that ended with an exception (not a failed run status).",
            ["reason"],
            registry=r,
        )
        self.start_failures = Counter(
            "harnessx_run_start_failures",
            "Claimed runs that could not be started, by cause (agent: the registry could not build "
            "the agent; corrupt_state: the stored state cannot be read) and outcome (retried later, "
            "or failed for good).",
            ["cause", "outcome"],
            registry=r,
        )
        self.runs_deferred = Counter(
            "harnessx_runs_deferred",
            "Queued runs this worker's claims passed over because their concurrency key or agent "
            "already had as many runs driving as its limit allows (counted once per claim).",
            registry=r,
        )
        self.rate_waits = RateWaitMetrics(r)
        self.active_runs = Gauge("harnessx_active_runs", "Runs this worker is driving now.", registry=r)
        self.slots = Gauge("harnessx_concurrency_slots", "Runs this worker may drive at once.", registry=r)
        self.lease_renewals = Counter(
            "harnessx_lease_renewals",
            "Heartbeat renewals of this worker's leases, by outcome.",
            ["outcome"],
            registry=r,
        )
        self.renewal_latency = Histogram(
            "harnessx_lease_renewal_seconds",
            "Time of one renewal round trip.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.leases_lost = Counter(
            "harnessx_leases_lost", "Leases this worker found it had lost.", registry=r
        )
        self.fenced_writes = Counter(
            "harnessx_fenced_writes_rejected",
            "Writes refused because this worker's lease no longer held.",
            registry=r,
        )
        self.queue_depth = Gauge("harnessx_queue_depth", "Runs waiting for a worker.", registry=r)
        self.queue_oldest = Gauge(
            "harnessx_queue_oldest_age_seconds", "Age of the oldest queued run (0 when empty).", registry=r
        )
        self.queued_unknown = Gauge(
            "harnessx_queued_unknown_agent_runs",
            f"Queued runs for agent references this worker does not know (the {UNKNOWN_AGENT_SERIES} "
            f"with the most runs by name, the rest as agent={OTHER_AGENTS!r}).",
            ["agent"],
            registry=r,
        )
        self._unknown_series: set[str] = set()
        self.tool_calls = Counter(
            "harnessx_tool_calls",
            "Tool invocations, by replay policy and outcome.",
            ["policy", "outcome"],
            registry=r,
        )

    def set_unknown_agents(self, queued: Mapping[str, int]) -> None:
        """Queued runs per agent reference this worker does not know, in a bounded number of
        series; a reference no longer queued loses its series (it does not linger at 0)."""
        ranked = sorted(queued.items(), key=lambda item: (-item[1], item[0]))
        shown = dict(ranked[:UNKNOWN_AGENT_SERIES])
        rest = sum(count for _, count in ranked[UNKNOWN_AGENT_SERIES:])
        if rest:
            shown[OTHER_AGENTS] = rest
        for gone in self._unknown_series - set(shown):
            self.queued_unknown.remove(gone)
        for agent, count in shown.items():
            self.queued_unknown.labels(agent=agent).set(count)
        self._unknown_series = set(shown)
