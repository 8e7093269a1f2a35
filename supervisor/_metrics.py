"""Prometheus metrics of the supervisor."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from harnessx.store._scheduling import QueueShape

__all__ = ["KEY_SERIES", "SupervisorMetrics"]

# harnessx_queue_*_by_key name at most this many keys: keys come from whoever submits.
KEY_SERIES = 20

_RECOVERY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)
_PASS_BUCKETS = (0.01, 0.1, 1.0, 5.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
_BATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class SupervisorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.leader = Gauge(
            "harnessx_supervisor_leader", "1 while this supervisor is the active leader.", registry=r
        )
        self.leader_epoch = Gauge(
            "harnessx_supervisor_leader_epoch",
            "The leadership epoch (fencing token) this supervisor holds; 0 while it does not lead.",
            registry=r,
        )
        self.writes_refused = Counter(
            "harnessx_supervisor_writes_refused",
            "Writes as leader the store refused because a newer leader had taken over.",
            registry=r,
        )
        self.scans = Counter("harnessx_supervisor_scans", "Orphan scans made as leader.", registry=r)
        self.scan_seconds = Histogram(
            "harnessx_supervisor_scan_seconds", "Time of one orphan scan.", registry=r
        )
        self.orphans_detected = Counter(
            "harnessx_orphans_detected",
            "Leases found with a dead holder or expired, by reason.",
            ["reason"],
            registry=r,
        )
        self.orphans_recovered = Counter(
            "harnessx_orphans_recovered", "Orphaned runs requeued for the pool.", registry=r
        )
        self.orphans_pending = Gauge(
            "harnessx_orphans_unrecovered", "Requeued orphaned runs no worker has claimed yet.", registry=r
        )
        self.oldest_unrecovered = Gauge(
            "harnessx_orphan_oldest_unrecovered_seconds",
            "Time since the oldest still-unclaimed orphan was detected (0 when none).",
            registry=r,
        )
        self.recovery_seconds = Histogram(
            "harnessx_orphan_recovery_seconds",
            "From detecting an orphan to a worker holding its session again.",
            buckets=_RECOVERY_BUCKETS,
            registry=r,
        )
        self.workers_live = Gauge(
            "harnessx_workers_live", "Registered workers whose process is alive.", registry=r
        )
        self.workers_dead = Counter(
            "harnessx_workers_died", "Workers found dead (their liveness lock gone).", registry=r
        )
        self.workers_pruned = Counter(
            "harnessx_workers_pruned",
            "Rows of workers that stopped long ago, forgotten (--worker-retention).",
            registry=r,
        )
        self.partitions = Gauge(
            "harnessx_event_partitions",
            "Day partitions of events (PostgreSQL), as of the latest housekeeping.",
            registry=r,
        )
        self.partitions_ahead = Gauge(
            "harnessx_event_partitions_ahead_seconds",
            "How far ahead the partitions of events reach (PostgreSQL): events of runs made later "
            "cannot be stored. Alert well before 0.",
            registry=r,
        )
        self.partitions_made = Counter(
            "harnessx_event_partitions_made", "Partitions of events the leader made.", registry=r
        )
        self.partitions_dropped = Counter(
            "harnessx_event_partitions_dropped",
            "Past days of events dropped whole, none of their runs being stored any more (retention).",
            registry=r,
        )
        self.partition_errors = Counter(
            "harnessx_event_partition_errors",
            "Housekeepings that failed to make or drop partitions of events.",
            registry=r,
        )
        self.queue_depth = Gauge("harnessx_queue_depth", "Runs waiting for a worker.", registry=r)
        self.queue_oldest = Gauge(
            "harnessx_queue_oldest_age_seconds", "Age of the oldest queued run (0 when empty).", registry=r
        )
        self.queue_by_priority = Gauge(
            "harnessx_queue_depth_by_priority",
            "Runs waiting for a worker, by priority band (high > 0, normal = 0, low < 0).",
            ["band"],
            registry=r,
        )
        self.oldest_by_priority = Gauge(
            "harnessx_queue_oldest_age_by_priority_seconds",
            "The longest a claimable queued run of the band has waited (0 when none).",
            ["band"],
            registry=r,
        )
        self.queue_by_key = Gauge(
            "harnessx_queue_depth_by_key",
            f"Runs waiting for a worker, by concurrency key: the {KEY_SERIES} keys with the most by "
            "name, the rest as key='other', runs without a key as key='none'.",
            ["key"],
            registry=r,
        )
        self.oldest_by_key = Gauge(
            "harnessx_queue_oldest_age_by_key_seconds",
            "The longest a claimable queued run of the key has waited (0 when none).",
            ["key"],
            registry=r,
        )
        self.queue_delayed = Gauge(
            "harnessx_queue_delayed",
            "Queued runs no worker may claim yet (a not_before delay, or a failed start's back-off).",
            registry=r,
        )
        self._key_series: set[str] = set()
        self.stuck_runs = Gauge(
            "harnessx_stuck_runs",
            "Unfinished runs not updated for longer than the configured age, by status.",
            ["status"],
            registry=r,
        )
        self.sessions_pruned = Counter(
            "harnessx_retention_sessions_pruned",
            "Finished sessions removed by retention (--retention), with everything they owned.",
            registry=r,
        )
        self.runs_compacted = Counter(
            "harnessx_compaction_runs",
            "Finished runs whose streamed text was compacted (each stretch of pieces one event row).",
            registry=r,
        )
        self.rows_compacted = Counter(
            "harnessx_compaction_rows",
            "Event rows removed by compaction (merged into the row after them).",
            registry=r,
        )
        self.compaction_errors = Counter(
            "harnessx_compaction_errors",
            "Compaction passes that failed (the runs stay noted for the next).",
            registry=r,
        )
        self.rows_pruned = Counter(
            "harnessx_retention_rows_pruned",
            "Rows removed by retention, by table.",
            ["table"],
            registry=r,
        )
        self.retention_pass_seconds = Histogram(
            "harnessx_retention_pass_seconds",
            "Time of one retention pass over every session old enough.",
            buckets=_PASS_BUCKETS,
            registry=r,
        )
        self.retention_batch_seconds = Histogram(
            "harnessx_retention_batch_seconds",
            "Time of one retention batch (one transaction).",
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.retention_errors = Counter(
            "harnessx_retention_errors",
            "Retention passes that failed (the next pass continues).",
            registry=r,
        )
        self.oldest_retained = Gauge(
            "harnessx_retention_oldest_activity_age_seconds",
            "Age of the oldest last activity of any stored session, after the latest retention pass: "
            "about the retention period while retention keeps up.",
            registry=r,
        )

    def set_queue_shape(self, shape: QueueShape, now: float) -> None:
        """The queue by priority band and by key, in a bounded number of series; a key no
        longer queued loses its series."""
        for band in ("high", "normal", "low"):
            count, since = shape.by_band().get(band, (0, None))
            self.queue_by_priority.labels(band=band).set(count)
            self.oldest_by_priority.labels(band=band).set(max(0.0, now - since) if since is not None else 0.0)
        keys = shape.by_key(KEY_SERIES)
        for gone in self._key_series - set(keys):
            self.queue_by_key.remove(gone)
            self.oldest_by_key.remove(gone)
        for key, (count, since) in keys.items():
            self.queue_by_key.labels(key=key).set(count)
            self.oldest_by_key.labels(key=key).set(max(0.0, now - since) if since is not None else 0.0)
        self._key_series = set(keys)
        self.queue_delayed.set(shape.delayed)
