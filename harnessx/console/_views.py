"""What the console's pages and its JSON API show, read from the store (one place for both)."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from harnessx._run_detail import RunDetail, action_dict, read_run
from harnessx.console._state import ConsoleState
from harnessx.console._web import WebError
from harnessx.store._listing import STATUSES, decode_key, encode_key
from harnessx.store._protocol import RunFilter, RunRow

__all__ = [
    "FILTERS",
    "STATUS_TABS",
    "actions_view",
    "queue_view",
    "run_filter",
    "run_view",
    "runs_view",
    "supervisor_view",
    "workers_view",
]

# The runs page's tabs: what needs a person first.
STATUS_TABS = ("awaiting_input", "queued", "running", "paused", "failed", "completed", "cancelled")
FILTERS = ("status", "agent", "session", "run", "request", "from", "to")


def _when(text: str, name: str) -> float | None:
    if not text:
        return None
    try:
        parsed = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise WebError(
            400, f"{name}={text!r} is not a time: use ISO 8601, e.g. 2026-01-31T09:30 (UTC)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def run_filter(params: dict[str, str]) -> RunFilter:
    status = params.get("status") or None
    if status is not None and status not in STATUSES:
        raise WebError(400, f"status={status!r} is not a run status: use one of {', '.join(STATUSES)}")
    return RunFilter(
        status=status,
        agent_ref=params.get("agent") or None,
        session_id=params.get("session") or None,
        run_id=params.get("run") or None,
        request_id=params.get("request") or None,
        created_from=_when(params.get("from", ""), "from"),
        created_to=_when(params.get("to", ""), "to"),
    )


def row_dict(row: RunRow) -> dict[str, Any]:
    return {
        "run_id": row.id,
        "session_id": row.session_id,
        "agent_ref": row.agent_ref,
        "request_id": row.request_id,
        "status": row.shown_status,
        "phase": row.phase,
        "iteration": row.iteration,
        "event_count": row.event_count,
        "stop_reason": row.stop_reason,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def _shown(console: ConsoleState, row: RunRow) -> dict[str, Any]:
    """A listed run; of its fields only these four hold text harnessx did not make itself
    (run ids are harnessx's hex, statuses and phases its own words), so only they are redacted:
    a page lists fifty runs, and redacting every field of each was half of its cost."""
    shown = row_dict(row)
    for name in ("session_id", "request_id", "agent_ref", "stop_reason"):
        if shown[name]:
            shown[name] = console.redact(shown[name])
    return shown


async def runs_view(console: ConsoleState, params: dict[str, str]) -> dict[str, Any]:
    where = run_filter(params)
    try:
        limit = int(params.get("limit") or 50)
    except ValueError:
        raise WebError(400, "limit must be a number from 1 to 500") from None
    if not 1 <= limit <= 500:
        raise WebError(400, "limit must be a number from 1 to 500")
    before = decode_key(params["before"]) if params.get("before") else None
    page = await console.store.list_runs(where, limit=limit, before=before)
    counts, counted_at = await console.counts.get()
    running = counts.get("running", 0) - counts.get("queued", 0)
    shown = {**counts, "running": running}
    return {
        "runs": [_shown(console, row) for row in page.runs],
        "next": encode_key(page.next) if page.next else None,
        "counts": {status: shown.get(status, 0) for status in STATUS_TABS},
        "total": sum(v for k, v in counts.items() if k != "queued"),
        "counted_at": counted_at,
        "filters": {name: params.get(name, "") for name in FILTERS},
    }


async def run_view(console: ConsoleState, run_id: str) -> tuple[RunDetail, dict[str, Any]]:
    detail = await read_run(console.store, run_id)
    if detail is None:
        raise WebError(404, f"no run {run_id!r} in {console.store_label}")
    return detail, console.redact(detail.to_dict())


async def workers_view(console: ConsoleState) -> dict[str, Any]:
    store = console.store
    workers = []
    now = time.time()
    for worker in await store.list_workers():
        if worker.stopped_at is not None:
            state = "stopped"
        elif not await store.process_alive(f"{worker.id}/"):
            state = "dead"  # the supervisor marks it stopped on its next scan
        else:
            state = "draining" if worker.draining else "live"
        workers.append(
            {
                "id": worker.id,
                "host": worker.host,
                "pid": worker.pid,
                "agents": worker.agents,
                "concurrency": worker.concurrency,
                "leases": worker.leases,
                "started_at": worker.started_at,
                "heartbeat_at": worker.heartbeat_at,
                "heartbeat_age": max(0.0, now - worker.heartbeat_at),
                "stopped_at": worker.stopped_at,
                "state": state,
            }
        )
    return {"workers": workers, "live": sum(1 for w in workers if w["state"] in ("live", "draining"))}


async def queue_view(console: ConsoleState) -> dict[str, Any]:
    stats = await console.store.queue_stats()
    served: set[str] = set()
    for worker in await console.store.running_workers():
        if worker.alive:
            served.update(worker.agents)
    now = time.time()
    agents = [
        {
            "agent_ref": ref,
            "queued": count,
            "oldest_queued_at": oldest,
            "oldest_age": max(0.0, now - oldest),
            "served": ref in served,
        }
        for ref, (count, oldest) in sorted(stats.by_agent.items(), key=lambda item: -item[1][0])
    ]
    oldest = stats.oldest_queued_at
    return {
        "depth": stats.depth,
        "oldest_queued_at": oldest,
        "oldest_age": max(0.0, now - oldest) if oldest is not None else None,
        "agents": agents,
        "unknown": [a for a in agents if not a["served"]],
    }


async def supervisor_view(console: ConsoleState) -> dict[str, Any]:
    store = console.store
    roles = []
    for leader in await store.leader_states():
        roles.append(
            {
                "role": leader.role,
                "epoch": leader.epoch,
                "holder": leader.holder,
                "since": leader.since,
                "alive": await store.process_alive(f"{leader.holder}/"),
                "scanned_at": leader.scanned_at,
                "scans": leader.scans,
                "recovered": leader.recovered,
            }
        )
    stuck = [
        {"run_id": s.run_id, "session_id": s.session_id, "status": s.status.value, "updated_at": s.updated_at}
        for s in await store.stuck_runs(3600.0, limit=20)
    ]
    return {"leaders": roles, "stuck": stuck}


async def actions_view(console: ConsoleState) -> dict[str, Any]:
    actions = await console.store.recent_actions(100)
    return {"actions": [console.redact(action_dict(a)) for a in actions]}
