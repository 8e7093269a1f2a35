"""The suite's side of the workload: submitting runs to the pool and answering them.

Runs are submitted at a steady pace by reference (``execution="pool"``), so no agent code
runs here. A settler watches for runs only a person could move on and acts as that person,
from runtimes of its own:

- an approval: approve or decline (decided by the seed), ``resume=True`` on the last one;
- an ``uncertain`` manual call: investigate the effects table — fencing the key first, so
  no older holder can still apply it — then ``resolve_tool(result=...)`` with the effect
  that happened, or ``retry=True`` if none did, and resume;
- a failed run (a storage outage outlasted the retries): resume it, as an operator would.

Every decision is logged (with the time it was taken) for the checker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from chaos.agents import AGENT
from chaos.archive import ArchiveReader
from chaos.checker import Decision
from chaos.db import Database
from chaos.ledger import EffectsTable
from chaos.plan import approves, run_message, seeded
from harnessx import AgentRef, AgentRuntime, HarnessError, PendingTool, ToolResult
from harnessx.store._protocol import Store

__all__ = ["Submitted", "Workload"]

KEYS = 4
KEY_PREFIX = "chaos:"
"""Runs go to 4 concurrency keys, round robin, under a limit on ``chaos:*`` as large as the
fleet's slots (it never binds, and every claim checks it)."""

logger = logging.getLogger("chaos.workload")

MAX_RESUMES_OF_FAILED = 5


@dataclass(frozen=True)
class Submitted:
    index: int
    run_id: str
    session_id: str
    t: float


class Workload:
    def __init__(
        self,
        store: Store,
        db: Database,
        effects: EffectsTable,
        *,
        seed: int,
        folder: Path,
        archive: ArchiveReader | None = None,
    ) -> None:
        self.store = store
        self.archive = archive  # where retention writes the sessions it removes
        self.db = db
        self.effects = effects
        self.seed = seed
        self.folder = folder
        self.submitted: list[Submitted] = []
        self.decisions: list[Decision] = []
        self.counts: Counter[str] = Counter()
        self.submitting_done = asyncio.Event()
        self.all_done = asyncio.Event()
        self._busy: set[str] = set()
        self._failed_resumes: Counter[str] = Counter()
        self._tasks: set[asyncio.Task[None]] = set()
        self._gate = asyncio.Semaphore(8)

    def _runtime(self) -> AgentRuntime:
        return AgentRuntime(AgentRef(AGENT, "v1"), backend=self.store, execution="pool")

    # ---------------------------------------------------------------- submitting

    async def submit(self, count: int, over: float, more: Callable[[], bool] | None = None) -> None:
        """Submit ``count`` runs evenly over ``over`` seconds; then, at the same pace, one more
        each time while ``more()`` (a scenario that still needs tool calls to land in)."""
        began = time.monotonic()
        try:
            index = 0
            while index < count or (more is not None and more()):
                await self._submit_one(index)
                index += 1
                ahead = began + over * index / count - time.monotonic()
                if ahead > 0:
                    await asyncio.sleep(ahead)
        finally:
            self.submitting_done.set()

    async def _submit_one(self, index: int) -> None:
        plan_seed = seeded("run", self.seed, index).randrange(10**9)
        runtime = self._runtime()
        deadline = time.monotonic() + 120
        try:
            while True:
                try:
                    if runtime.session_id is None:
                        await runtime.start()
                    # The request id makes a retry after an unanswered submit safe. The key
                    # (also the run's fair-share tenant) sends every claim through the
                    # scheduling claim, its limit checked (runner.py sets it).
                    handle = await runtime.submit(
                        run_message(index, plan_seed),
                        request_id=f"chaos-{index}",
                        concurrency_key=f"{KEY_PREFIX}{index % KEYS}",
                    )
                    break
                except HarnessError as exc:
                    if time.monotonic() > deadline:
                        raise
                    self.counts["submit_retries"] += 1
                    logger.info("submitting run %d failed (%s); retrying", index, exc)
                    await asyncio.sleep(0.2)
        finally:
            await runtime.stop()
        record = Submitted(index, handle.run_id, handle.session_id, time.time())
        self.submitted.append(record)
        with (self.folder / "submitted.jsonl").open("a") as out:
            out.write(json.dumps(asdict(record)) + "\n")

    # ---------------------------------------------------------------- settling

    async def settle(self) -> None:
        """Answer runs that wait for a person, until cancelled."""
        while True:
            try:
                rows = await self.db.fetch("needs_suite", time.time())
            except Exception as exc:  # a restart outlasting the reader's patience: keep trying
                logger.warning("could not list waiting runs: %s", exc)
                rows = []
            for run_id, session_id, status in rows:
                if run_id not in self._busy:
                    self._busy.add(str(run_id))
                    task = asyncio.create_task(self._settle(str(run_id), str(session_id), str(status)))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
            await self._check_done()
            await asyncio.sleep(0.1)

    async def _check_done(self) -> None:
        if not self.submitting_done.is_set():
            return
        with contextlib.suppress(Exception):
            completed = {str(run_id) for (run_id,) in await self.db.fetch("completed_runs")}
            if self.archive is not None:  # a completed run retention removed is still done
                completed.update(
                    i for i, status in self.archive.run_statuses().items() if status == "completed"
                )
            if all(s.run_id in completed for s in self.submitted):
                self.all_done.set()

    async def _settle(self, run_id: str, session_id: str, status: str) -> None:
        runtime = self._runtime()
        try:
            async with self._gate:
                state = await self.store.load_state(run_id)
                if state.status.value != status:
                    return  # it moved on since we looked
                pending = state.result().pending if status == "awaiting_input" else []
                for number, item in enumerate(pending):
                    await self._decide(runtime, session_id, item, last=number == len(pending) - 1)
                if not pending:
                    if status == "failed":
                        self._failed_resumes[run_id] += 1
                        if self._failed_resumes[run_id] > MAX_RESUMES_OF_FAILED:
                            return
                        self.counts["resumed_failed"] += 1
                    await runtime.resume(session_id)
        except HarnessError as exc:
            self.counts["settle_errors"] += 1
            logger.info("settling run %s failed (%s); will look again", run_id, exc)
            await asyncio.sleep(0.2)
        finally:
            await runtime.stop()
            self._busy.discard(run_id)

    async def _decide(self, runtime: AgentRuntime, session_id: str, item: PendingTool, *, last: bool) -> None:
        key = item.execution_key
        taken = time.time()
        if item.status == "approval":
            allow = approves(self.seed, key)
            action = "approve" if allow else "decline"
            await self._recorded(key, action, taken, runtime.approve(item, allow=allow))
            if last:
                # Not approve(resume=True): that waits for the run to finish or stop again,
                # and the suite hands the run back to the pool without waiting.
                await runtime.resume(session_id)
            return
        session = await self.store.get_session(session_id)
        token = session.generation if session is not None else 0
        # Fence first: every holder that could still be running this call has an older token.
        output = await asyncio.to_thread(self.effects.investigate, key, token)
        if output is None:
            await self._recorded(key, "retry", taken, runtime.resolve_tool(item, retry=True))
        else:
            result = ToolResult(item.call.id, output)
            await self._recorded(key, "result", taken, runtime.resolve_tool(item, result=result))
        if last:
            await runtime.resume(session_id)

    async def _recorded(self, key: str, action: str, taken: float, call: Awaitable[object]) -> None:
        # Logged before the outcome is known: if the decision turns out not to have been
        # committed, the run still waits for it and a later pass decides again (the checker
        # only ever reads these as upper bounds).
        decision = Decision(key, action, taken)
        self.decisions.append(decision)
        self.counts[action] += 1
        with (self.folder / "decisions.jsonl").open("a") as out:
            out.write(json.dumps(asdict(decision)) + "\n")
        await call

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
