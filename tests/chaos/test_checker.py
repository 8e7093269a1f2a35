"""The checker can fail: every invariant is shown a dataset that breaks it.

Two kinds of data. A *real* dataset: a SQLite database and effects ledger written by real
runs of the chaos agent (in this process, through ``AgentRuntime``), read back by the same
loader the suite uses; violations are planted by editing the files afterwards. And
*histories* built by hand, for what is awkward to produce for real (a worker killed
mid-call, a zombie) — each starts from a clean history and plants one thing. No switch in
the product is touched: the violations are in the data.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import chaos.agents
from chaos.archive import ArchiveReader
from chaos.checker import (
    Dataset,
    Decision,
    Effect,
    EventRow,
    Fault,
    Invocation,
    Leadership,
    LeaseLoss,
    MessageRow,
    RunRow,
    SessionRow,
    ToolCallRow,
    Violation,
    check,
)
from chaos.dataset import leadership_from_logs, lease_losses_from_logs, load_dataset
from chaos.db import SQLiteDatabase
from chaos.ledger import EffectsTable, read_invocations
from chaos.plan import TOOLS, make_plan, run_message
from chaos.timings import fault_stats, percentile
from harnessx import AgentRuntime, RunResult, SQLiteBackend
from harnessx._retention import RetentionPolicy, prune_pass


def invariants(violations: list[Violation]) -> set[str]:
    return {v.invariant for v in violations}


# ----------------------------------------------------------------------- hand-built histories


@dataclass
class History:
    """Builds a consistent history run by run, the way the runtime would have written it."""

    data: Dataset = field(default_factory=lambda: Dataset(submitted=[]))
    clock: float = 1000.0

    def tick(self) -> float:
        self.clock += 0.01
        return self.clock

    def run(self, run_id: str) -> RunHistory:
        self.data.submitted.append(run_id)
        return RunHistory(self, run_id, f"s-{run_id}")


@dataclass
class RunHistory:
    history: History
    run_id: str
    session_id: str
    generation: int = 0
    seq: int = 0
    messages: int = 0
    keys: dict[str, str] = field(default_factory=dict)  # key -> policy
    approved: set[str] = field(default_factory=set)

    @property
    def data(self) -> Dataset:
        return self.history.data

    def claim(self) -> int:
        """A claim, or the supervisor taking a lease away: either way a new generation."""
        self.generation += 1
        return self.generation

    def event(self, kind: str, key: str | None = None, attempt: int | None = None) -> EventRow:
        self.seq += 1
        row = EventRow(
            self.run_id,
            self.seq,
            f"{self.run_id}-{self.seq}",
            kind,
            self.generation,
            self.history.tick(),
            key=key,
            attempt=attempt,
        )
        self.data.events.append(row)
        return row

    def message(self) -> None:
        self.messages += 1
        self.data.messages.append(MessageRow(self.session_id, self.messages, self.run_id, self.generation))

    def model_turn(self) -> None:
        self.event("text_delta")
        self.event("text_complete")
        self.message()

    def dispatch(self, tool: str, *, pid: int = 100, attempt: int = 1, finish: bool = True) -> str:
        policy = TOOLS[tool].policy
        key = f"{self.run_id}:0:{tool}"
        self.keys[key] = policy
        self.event("tool_call_start", key, attempt)
        started = self.history.tick()
        ended = self.history.tick() if finish else None
        outcome = None
        if finish:
            outcome = "done" if policy == "safe" else "applied"
            if policy != "safe":
                self.data.effects.append(
                    Effect(key, f"inv-{key}-{attempt}", self.generation, pid, "applied", ended or 0)
                )
        self.data.invocations.append(
            Invocation(
                f"inv-{key}-{attempt}",
                key,
                tool,
                policy,
                attempt,
                self.generation,
                pid,
                started,
                ended,
                outcome,
            )
        )
        if finish:
            self.event("tool_call_complete", key, attempt)
            self.event("tool_result", key, attempt)
        return key

    def ask(self, tool: str) -> str:
        key = f"{self.run_id}:0:{tool}"
        self.keys[key] = TOOLS[tool].policy
        self.event("approval_required", key, 0)
        self.event("waiting")
        self.event("run_result")
        return key

    def decide(self, key: str, action: str) -> None:
        self.data.decisions.append(Decision(key, action, self.history.tick()))
        self.claim()  # the decision is committed under the suite's own lease
        if action == "approve":
            self.approved.add(key)
        elif action == "decline":
            self.event("tool_result", key, 0)

    def finish(self, status: str = "completed") -> None:
        self.message()
        self.event("turn_complete")
        self.event("run_result")
        self.data.runs.append(RunRow(self.run_id, self.session_id, status, self.seq, self.generation))
        self.data.sessions.append(SessionRow(self.session_id, self.generation))
        for key, policy in self.keys.items():
            written = max(e.generation for e in self.data.events if e.key == key)
            self.data.tool_calls.append(
                ToolCallRow(key, self.run_id, policy, "completed", key in self.approved, written)
            )


def clean_history() -> History:
    """Four runs that met every situation the checks look at, all handled correctly."""
    history = History()
    # r1: one call of each replay policy, no trouble.
    r1 = history.run("r1")
    r1.claim()
    r1.model_turn()
    for tool in ("lookup", "charge", "notify"):
        r1.dispatch(tool)
    r1.finish()
    # r2: an approval, answered by the suite, then the approved manual call runs once.
    r2 = history.run("r2")
    r2.claim()
    r2.model_turn()
    key = r2.ask("publish")
    r2.decide(key, "approve")
    r2.claim()  # the resume re-queues it under a lease of its own
    r2.claim()  # a worker claims it
    r2.dispatch("publish", attempt=1)
    r2.finish()
    # r3: a manual call cut off by a kill -9, surfaced as uncertain, retried by decision.
    r3 = history.run("r3")
    r3.claim()
    r3.model_turn()
    manual = r3.dispatch("notify", pid=111, finish=False)
    history.data.faults.append(Fault(1, "kill-worker", history.tick(), history.clock, (111,), (("s-r3", 1),)))
    r3.claim()  # the supervisor drops the dead holder's lease
    r3.claim()  # another worker takes it and recovers
    r3.event("recovery_required", manual, 1)
    r3.event("waiting")
    r3.event("run_result")
    r3.decide(manual, "retry")
    r3.claim()
    r3.claim()
    r3.dispatch("notify", pid=112, attempt=2)
    r3.finish()
    # r4: a safe call cut off by a kill, replayed by the next holder on its own.
    r4 = history.run("r4")
    r4.claim()
    r4.model_turn()
    r4.dispatch("lookup", pid=222, finish=False)
    history.data.faults.append(Fault(2, "kill-worker", history.tick(), history.clock, (222,), (("s-r4", 1),)))
    r4.claim()
    r4.claim()
    r4.dispatch("lookup", pid=223, attempt=2)
    r4.finish()
    return history


def planted(history: History, **changes: object) -> Dataset:
    return dataclasses.replace(history.data, **changes)


def test_a_clean_history_has_no_violations() -> None:
    assert check(clean_history().data, expect_completed=True) == []


def test_a_duplicated_event_id_is_reported() -> None:
    data = clean_history().data
    first, second = data.events[0], data.events[1]
    data.events[1] = dataclasses.replace(second, event_id=first.event_id)
    found = check(data)
    assert invariants(found) == {"dense-events"}
    assert "stored 2 times" in found[0].detail


def test_streamed_text_compacted_into_one_row_is_no_gap() -> None:
    data = clean_history().data
    r1 = [e for e in data.events if e.run_id == "r1"]
    # Events 2 and 3 stored as one row, the row of 3 (harnessx compact): not a gap.
    compacted = [e for e in data.events if not (e.run_id == "r1" and e.seq == 2)]
    merged = [dataclasses.replace(e, merged=1) if e.run_id == "r1" and e.seq == 3 else e for e in compacted]
    assert len(r1) > 3 and check(planted(clean_history(), events=merged), expect_completed=True) == []
    assert invariants(check(planted(clean_history(), events=compacted))) == {"dense-events"}


def test_a_repeated_sequence_number_is_reported() -> None:
    data = clean_history().data
    data.events.append(dataclasses.replace(data.events[2], event_id="copy"))
    assert "dense-events" in invariants(check(data))


def test_a_manual_call_cut_off_without_recovery_required_is_reported() -> None:
    history = clean_history()
    data = history.data
    data.events = [e for e in data.events if e.type != "recovery_required"]
    # Renumber r3 so its stream stays dense: only the missing uncertainty is wrong.
    r3 = [e for e in data.events if e.run_id == "r3"]
    others = [e for e in data.events if e.run_id != "r3"]
    data.events = others + [dataclasses.replace(e, seq=n) for n, e in enumerate(r3, 1)]
    data.runs = [dataclasses.replace(r, event_count=len(r3)) if r.id == "r3" else r for r in data.runs]
    found = check(data)
    assert invariants(found) == {"manual-uncertain"}
    assert "never surfaced as uncertain" in found[0].detail


def test_a_manual_call_rerun_without_a_retry_decision_is_reported() -> None:
    data = clean_history().data
    data.decisions = [d for d in data.decisions if d.action != "retry"]
    assert any("without a retry decision" in v.detail for v in check(data))


def test_a_manual_effect_applied_twice_is_reported() -> None:
    data = clean_history().data
    effect = next(e for e in data.effects if e.key == "r1:0:notify")
    data.effects.append(dataclasses.replace(effect, inv="again"))
    assert any(v.invariant == "manual-uncertain" and "applied 2 times" in v.detail for v in check(data))


def test_a_safe_replay_without_a_fault_is_reported() -> None:
    history = clean_history()
    data = planted(history, faults=[f for f in history.data.faults if f.id != 2])
    found = check(data)
    assert invariants(found) == {"replay-only-after-fault"}
    assert "met no fault" in found[0].detail


def test_a_replay_after_a_lost_lease_needs_no_fault() -> None:
    history = clean_history()
    data = planted(
        history,
        faults=[f for f in history.data.faults if f.id != 2],
        lease_losses=[LeaseLoss("s-r4", 1)],
    )
    assert check(data) == []


def test_two_calls_under_one_lease_are_reported() -> None:
    data = clean_history().data
    first = next(i for i in data.invocations if i.key == "r1:0:lookup")
    data.invocations.append(dataclasses.replace(first, inv="twice", started=first.started + 0.001))
    assert any("under one lease" in v.detail for v in check(data))


def test_a_declined_call_that_ran_is_reported() -> None:
    history = clean_history()
    r5 = history.run("r5")
    r5.claim()
    r5.model_turn()
    key = r5.ask("archive")
    r5.decide(key, "decline")
    r5.claim()
    r5.claim()
    r5.finish()
    assert check(history.data) == []
    history.data.invocations.append(
        Invocation(
            "rogue", key, "archive", "safe", 1, r5.generation, 100, history.tick(), history.tick(), "done"
        )
    )
    assert any(v.invariant == "approvals-honoured" and "declined" in v.detail for v in check(history.data))


def test_an_approved_manual_call_that_ran_twice_is_reported() -> None:
    data = clean_history().data
    once = next(i for i in data.invocations if i.key == "r2:0:publish")
    data.invocations.append(dataclasses.replace(once, inv="twice", token=once.token + 1, attempt=2))
    assert any("on 1 approval(s)" in v.detail for v in check(data))


def test_a_call_that_went_ahead_without_an_answer_is_reported() -> None:
    data = clean_history().data
    data.decisions = [d for d in data.decisions if d.action != "approve"]
    assert any("nobody answered" in v.detail for v in check(data))


def test_an_invocation_without_dispatch_intent_is_reported() -> None:
    data = clean_history().data
    data.events = [
        dataclasses.replace(e, type="tool_call_start_lost")
        if e.type == "tool_call_start" and e.key == "r1:0:charge"
        else e
        for e in data.events
    ]
    assert invariants(check(data)) == {"dispatch-first"}


def test_a_committed_result_from_a_stale_holder_is_reported() -> None:
    data = clean_history().data
    # The only invocation under the committing generation was the zombie's, and the
    # effects table refused it.
    data.invocations = [
        dataclasses.replace(i, outcome="rejected_stale") if i.key == "r1:0:charge" else i
        for i in data.invocations
    ]
    assert any("refused as stale" in v.detail for v in check(data))


def leaderships() -> list[Leadership]:
    """A fenced failover: A leads (epoch 1) and recovers, B takes over (epoch 2) and recovers.
    Log times (``t``) lag the database times: A's last write is logged after B's takeover,
    though it committed before it, which is no violation."""
    return [
        Leadership("A", "lead", 1.0, epoch=1, db_time=0.9),
        Leadership("A", "act", 2.0, epoch=1, db_time=1.9),
        Leadership("B", "lead", 3.0, epoch=2, db_time=2.95),
        Leadership("A", "act", 3.1, epoch=1, db_time=2.9),  # committed before B began
        Leadership("B", "act", 4.0, epoch=2, db_time=3.9),
    ]


def test_fenced_leadership_with_log_lines_out_of_order_is_clean() -> None:
    data = clean_history().data
    data.leadership = leaderships()
    assert check(data) == []


@pytest.mark.parametrize(
    ("planted", "detail"),
    [
        # The race the epoch closes: A's lock went (a database restart), B took over, A acts on.
        (
            Leadership("A", "act", 5.0, epoch=1, db_time=3.5),
            "wrote as the leader of epoch 1 0.550 s after supervisor B had begun epoch 2",
        ),
        (Leadership("B", "lead", 5.0, epoch=1, db_time=4.5), "took epoch 1, which supervisor A had taken"),
        (Leadership("C", "lead", 5.0, epoch=3, db_time=2.0), "epoch 3 began before epoch 2"),
        (Leadership("C", "act", 5.0, epoch=2, db_time=4.0), "of epoch 2, which it never took"),
        (Leadership("A", "act", 5.0), "wrote as the leader without an epoch"),
        (Leadership("A", "mark", 5.0, epoch=1, db_time=3.0), "of epoch 1 0.050 s after supervisor B"),
        (Leadership("C", "lead", 5.0), "became leader without an epoch"),
    ],
)
def test_a_second_active_supervisor_leader_is_reported(planted: Leadership, detail: str) -> None:
    data = clean_history().data
    data.leadership = [*leaderships(), planted]
    found = check(data)
    assert invariants(found) == {"single-leader"}, found
    assert found[0].subject == planted.supervisor and detail in found[0].detail, found


def test_fault_stats_count_mid_tool_kills_and_resume_times() -> None:
    data = clean_history().data
    stats = fault_stats(data)
    assert stats.total == 2 and stats.kills_mid_tool == 2
    assert stats.affected_runs == 2 and stats.recoveries == 2
    assert all(0 < s < 1 for s in stats.resume_seconds)
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0 and percentile([], 99) is None


def test_lease_losses_are_read_from_process_logs(tmp_path: Path) -> None:
    (tmp_path / "supervisor-1.log").write_text(
        json.dumps(
            {"logger": "supervisor", "message": "requeued run r: x", "session_id": "s1", "generation": 4}
        )
        + "\nnot json\n"
    )
    (tmp_path / "worker-1.log").write_text(
        json.dumps({"logger": "harnessx.leases", "message": "lost the lease on session s2 (generation 7)"})
        + "\n"
    )
    assert lease_losses_from_logs(tmp_path.glob("*.log")) == [LeaseLoss("s1", 4), LeaseLoss("s2", 7)]


def test_leadership_is_read_from_supervisor_logs(tmp_path: Path) -> None:
    lines = [
        {
            "ts": "2026-01-01T00:00:01.000Z",
            "message": "this supervisor is now the leader (epoch 3)",
            "supervisor_id": "A",
            "leader_epoch": 3,
            "db_time": 1767225600.9,
        },
        {
            "ts": "2026-01-01T00:00:02.500Z",
            "message": "requeued run r: its holder",
            "supervisor_id": "A",
            "leader_epoch": 3,
            "db_time": 1767225602.4,
        },
        {"ts": "2026-01-01T00:00:03.000Z", "message": "scan failed: boom", "supervisor_id": "A"},
        {
            "ts": "2026-01-01T00:00:04.000Z",
            "message": "worker w1 (pid 42 on host-1) is dead",
            "supervisor_id": "A",
            "leader_epoch": 3,
            "db_time": 1767225603.9,
        },
    ]
    (tmp_path / "supervisor-1.log").write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = leadership_from_logs([tmp_path / "supervisor-1.log"])
    assert [(e.supervisor, e.kind, e.epoch) for e in found] == [
        ("A", "lead", 3),
        ("A", "act", 3),
        ("A", "mark", 3),
    ]
    assert found[1].t - found[0].t == pytest.approx(1.5)
    assert found[1].db_time == pytest.approx(1767225602.4)


# ----------------------------------------------------------------------- a real dataset


def _plan_seed(wanted: set[str]) -> int:
    """A plan seed whose first turn calls exactly the ``wanted`` tools."""
    for seed in range(100_000):
        plan = make_plan(seed)
        if {c.tool for c in plan.turns[0]} == wanted and len(plan.turns[0]) == len(wanted):
            return seed
    raise AssertionError(f"no plan calls {wanted}")


async def _drive(folder: Path) -> tuple[list[str], list[Decision]]:
    submitted: list[str] = []
    decisions: list[Decision] = []
    seeds = [_plan_seed({"lookup", "charge", "notify"}), _plan_seed({"publish"}), _plan_seed({"refund"})]
    async with SQLiteBackend(folder / "harness.sqlite3", lease_seconds=30) as backend:
        for index, seed in enumerate(seeds):
            runtime = AgentRuntime(chaos.agents.build(), backend=backend)
            async with runtime:
                result: RunResult = await runtime.run(run_message(index, seed))
                while result.needs_input:
                    for pending in result.pending:
                        allow = pending.call.name != "refund"  # decline one kind, approve the rest
                        decisions.append(
                            Decision(pending.execution_key, "approve" if allow else "decline", 0.0)
                        )
                        await runtime.approve(pending, allow=allow)
                    handle = await runtime.resume(result.session_id)
                    assert handle is not None
                    result = await handle.result()
                assert result.ok, result
                submitted.append(result.run_id)
    return submitted, decisions


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a real database and ledger from real runs of the chaos agent."""
    folder = tmp_path_factory.mktemp("real")
    saved = chaos.agents._settings
    patch = pytest.MonkeyPatch()
    patch.setenv("CHAOS_LEDGER", str(folder / "ledger"))
    patch.setenv("CHAOS_EFFECTS", str(folder / "effects.sqlite3"))
    patch.setenv("CHAOS_TOOL_MS", "1,5")
    patch.setenv("CHAOS_SEED", "7")
    chaos.agents._settings = None
    try:
        EffectsTable(folder / "effects.sqlite3").create()
        submitted, decisions = asyncio.run(_drive(folder))
    finally:
        chaos.agents._settings = saved
        patch.undo()
    (folder / "suite.json").write_text(
        json.dumps({"submitted": submitted, "decisions": [dataclasses.asdict(d) for d in decisions]})
    )
    return folder


@pytest.fixture
def copy(recorded: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(recorded, target)
    return target


def load(folder: Path, archive: Path | None = None) -> Dataset:
    suite = json.loads((folder / "suite.json").read_text())
    decisions = [Decision(**d) for d in suite["decisions"]]
    return asyncio.run(
        load_dataset(
            SQLiteDatabase(folder / "harness.sqlite3"),
            folder,
            submitted=suite["submitted"],
            faults=[],
            decisions=decisions,
            lease_seconds=2.0,
            archive=ArchiveReader(archive) if archive is not None else None,
        )
    )


def sql(folder: Path, statement: str, *args: object, database: str = "harness.sqlite3") -> None:
    with sqlite3.connect(folder / database) as conn:
        conn.execute(statement, args)
    conn.close()


def first_run(folder: Path) -> str:
    return str(json.loads((folder / "suite.json").read_text())["submitted"][0])


def test_the_real_dataset_is_clean_and_complete(copy: Path) -> None:
    data = load(copy)
    assert len(data.runs) == 3 and {r.status for r in data.runs} == {"completed"}
    assert {i.policy for i in data.invocations} == {"safe", "idempotent", "manual"}
    assert any(e.type == "approval_required" for e in data.events)
    assert {d.action for d in data.decisions} == {"approve", "decline"}
    assert check(data, expect_completed=True) == []


def test_a_lost_run_is_reported(copy: Path) -> None:
    run_id = first_run(copy)
    sql(copy, "DELETE FROM runs WHERE id = ?", run_id)
    found = check(load(copy))
    assert Violation("runs-settle", run_id, "submitted, but no such run is stored: lost") in found


def test_a_stuck_run_is_reported(copy: Path) -> None:
    run_id = first_run(copy)
    sql(copy, "UPDATE runs SET status = 'running' WHERE id = ?", run_id)
    assert any(v.subject == run_id and "stuck" in v.detail for v in check(load(copy)))


def test_an_effect_applied_twice_is_reported(copy: Path) -> None:
    sql(
        copy,
        "INSERT INTO effects (key, tool, policy, inv, token, pid, outcome, output, t) "
        "SELECT key, tool, policy, 'planted', token, pid, outcome, output, t FROM effects "
        "WHERE policy = 'idempotent' AND outcome = 'applied' LIMIT 1",
        database="effects.sqlite3",
    )
    found = check(load(copy))
    assert invariants(found) == {"idempotent-once"}
    assert "applied 2 times" in found[0].detail


def test_a_write_by_a_stale_generation_is_reported(copy: Path) -> None:
    run_id = first_run(copy)
    # The run's last event committed by the generation before the one that wrote the rest.
    sql(
        copy,
        "UPDATE events SET generation = generation - 1 WHERE run_id = ? "
        "AND seq = (SELECT MAX(seq) FROM events WHERE run_id = ?)",
        run_id,
        run_id,
    )
    found = check(load(copy))
    assert invariants(found) == {"no-stale-writes"}
    assert found[0].subject == run_id and "after generation" in found[0].detail


def test_a_tool_call_row_rewritten_by_a_stale_generation_is_reported(copy: Path) -> None:
    sql(copy, "UPDATE tool_calls SET generation = generation - 1 WHERE policy = 'idempotent'")
    assert invariants(check(load(copy))) == {"no-stale-writes"}


def test_a_gap_in_an_event_stream_is_reported(copy: Path) -> None:
    run_id = first_run(copy)
    sql(copy, "DELETE FROM events WHERE run_id = ? AND seq = 3", run_id)
    found = check(load(copy))
    assert Violation("dense-events", run_id, "gap in the event stream: 3 missing") in found


def test_a_committed_raw_result_executed_again_is_reported(copy: Path) -> None:
    invocations, _ = read_invocations(copy / "ledger")
    done = next(i for i in invocations if i["policy"] == "safe")
    again = {**done, "inv": "planted", "token": done["token"] + 1, "attempt": done["attempt"] + 1}
    with (copy / "ledger" / "999999.jsonl").open("a") as out:
        out.write(json.dumps({k: v for k, v in again.items() if k not in ("ended", "outcome")}) + "\n")
        out.write(
            json.dumps({"e": "end", "inv": "planted", "key": done["key"], "outcome": "done", "t": 1}) + "\n"
        )
    found = check(load(copy))
    assert any(v.invariant == "no-reexecution" and v.subject == done["key"] for v in found)


def test_an_unreadable_ledger_line_is_reported(copy: Path) -> None:
    with (copy / "ledger" / "999999.jsonl").open("a") as out:
        out.write("{not json\n")
    assert invariants(check(load(copy))) == {"ledger-readable"}


# ----------------------------------------------------------------------- retention's archive


def prune_everything(folder: Path) -> Path:
    """Retention as the supervisor runs it, at a cutoff every finished session has passed,
    archiving what it removes; the archive folder."""

    async def prune() -> int:
        async with SQLiteBackend(folder / "harness.sqlite3") as backend:
            policy = RetentionPolicy(0.001, batch=1, archive=folder / "archive")
            return (await prune_pass(backend, policy)).sessions

    assert asyncio.run(prune()) == 3
    return folder / "archive"


def edit_archive(archive: Path, change: object) -> None:
    (path,) = archive.glob("*.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        change(record)  # type: ignore[operator]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_sessions_retention_removed_are_checked_from_its_archive(copy: Path) -> None:
    before = load(copy)
    archive = prune_everything(copy)
    assert load(copy).runs == []  # gone from the database: without the archive, all lost
    assert "runs-settle" in invariants(check(load(copy)))
    data = load(copy, archive)
    assert sorted(data.runs, key=lambda r: r.id) == sorted(before.runs, key=lambda r: r.id)
    assert sorted(data.events, key=lambda e: e.event_id) == sorted(before.events, key=lambda e: e.event_id)
    assert sorted(data.tool_calls, key=lambda t: t.execution_key) == sorted(
        before.tool_calls, key=lambda t: t.execution_key
    )
    assert len(data.pruned) == 3
    assert check(data, expect_completed=True) == []


def test_an_archived_session_is_checked_like_a_stored_one(copy: Path) -> None:
    archive = prune_everything(copy)
    edit_archive(archive, lambda record: record["events"].pop(2) if len(record["events"]) > 3 else None)
    assert "dense-events" in invariants(check(load(copy, archive)))


def test_a_session_pruned_with_an_unfinished_run_is_reported(copy: Path) -> None:
    archive = prune_everything(copy)
    run_id = first_run(copy)

    def unfinish(record: dict[str, list[dict[str, object]]]) -> None:
        for run in record["runs"]:
            if run["id"] == run_id:
                run["status"] = "awaiting_input"

    edit_archive(archive, unfinish)
    found = check(load(copy, archive))
    assert any(v.invariant == "prune-finished-only" and "awaiting_input" in v.detail for v in found)


def test_an_archive_record_of_a_session_still_stored_is_ignored(copy: Path, tmp_path: Path) -> None:
    """A batch that archived its sessions and then rolled back (a server restart) leaves
    records of sessions the database still holds; and a supervisor killed mid-write leaves a
    partial last line, whose batch never committed."""
    pruned = tmp_path / "pruned"
    shutil.copytree(copy, pruned)
    archive = prune_everything(pruned)
    edit_archive(archive, lambda record: [run.update(status="running") for run in record["runs"]])
    (path,) = archive.glob("*.jsonl")
    with path.open("a") as out:
        out.write('{"format": "harnessx.session", "version": 1, "sess')
    data = load(copy, archive)
    assert data.pruned == [] and check(data, expect_completed=True) == []
