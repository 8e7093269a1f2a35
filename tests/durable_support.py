"""Agents, backends and a child-process driver shared by the durable-run tests.

The tools record every invocation in a ledger file (one JSON line each), so a test can
count what really ran, across processes and crashes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnessx import (
    Agent,
    AgentConfig,
    HookEvent,
    ProviderResponse,
    ScriptedProvider,
    ScriptedRequest,
    ToolCall,
    current_tool_context,
)
from harnessx._demo import CrashAfterRawResult

__all__ = [
    "BackendTarget",
    "ChildRun",
    "holder_gone",
    "ledger_lines",
    "make_agent",
    "sales_script",
    "spawn_child",
]

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class BackendTarget:
    """Where a test's durable state lives: a SQLite file or a PostgreSQL database."""

    kind: str
    location: str

    def open(self, **kwargs: Any) -> Any:
        if self.kind == "sqlite":
            from harnessx import SQLiteBackend

            return SQLiteBackend(self.location, **kwargs)
        return self.open_at(self.location, **kwargs)

    def open_at(self, location: str, **kwargs: Any) -> Any:
        """A PostgreSQL backend at ``location`` (this database through a proxy, say)."""
        from harnessx.store import PostgresBackend

        return PostgresBackend(location, **kwargs)


def sales_script(tool: str, count: int = 1) -> Any:
    """A model that calls ``tool`` ``count`` times in one reply, then reports the results."""

    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            calls = [ToolCall(f"call_{i}", tool, {"region": f"R{i}"}) for i in range(count)]
            return ProviderResponse(text="Writing the report.", tool_calls=calls)
        contents = "; ".join(m["content"] for m in request.tool_results)
        return f"Done: {contents}"

    return reply


# A web search the server pauses, as AnthropicProvider keeps its blocks (0.9.1's provider
# blocks): the paused turn, and what the server adds once that turn comes back to it.
PAUSED_SEARCH: list[dict[str, Any]] = [
    {"type": "text", "text": "Searching. "},
    {
        "type": "provider",
        "provider": "anthropic",
        "data": {
            "type": "server_tool_use",
            "id": "srvtoolu_1",
            "name": "web_search",
            "input": {"query": "q"},
        },
    },
]
SEARCH_DONE: list[dict[str, Any]] = [
    {
        "type": "provider",
        "provider": "anthropic",
        "data": {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
    },
    {"type": "text", "text": "Found it."},
]


def search_script(*, die_when_continued: bool = False) -> Any:
    """A model whose first reply is a paused web search; asked again, it finishes the search
    if the paused turn came back verbatim, and says what came back otherwise.
    ``die_when_continued``: the process SIGKILLs itself when asked again instead."""

    def reply(request: ScriptedRequest) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(content=PAUSED_SEARCH, stop_reason="pause_turn")
        if die_when_continued:
            os.kill(os.getpid(), signal.SIGKILL)
        if request.last_message != {"role": "assistant", "content": PAUSED_SEARCH}:
            return f"the paused turn came back as {json.dumps(request.last_message)}"
        return ProviderResponse(content=SEARCH_DONE)

    return reply


def make_agent(
    *,
    script: str = "sales",
    policy: str = "manual",
    permission: str | None = None,
    count: int = 1,
    ledger: str | None = None,
    block_marker: str | None = None,
    system_prompt: str = "You write sales reports.",
    tool_seconds: float = 0.0,
) -> Agent:
    """A sales agent whose ``write_report`` tool appends to ``ledger`` (``script="search"``:
    its model searches the web instead, ``search_script``).

    With ``block_marker``, the tool's first attempt creates that file and then hangs, so
    a test can kill the process while the tool is running.
    """
    replies = {
        "sales": lambda: sales_script("write_report", count),
        "search": search_script,
        "search_dying": lambda: search_script(die_when_continued=True),
    }[script]()
    agent = Agent(config=AgentConfig(system_prompt=system_prompt), provider=ScriptedProvider(replies))

    @agent.tools.register(replay_policy=policy, permission=permission)
    def write_report(region: str) -> str:
        """Write the sales report for a region.

        Args:
            region: Sales region.
        """
        context = current_tool_context()
        if ledger:
            with open(ledger, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"key": context.execution_key, "attempt": context.attempt}) + "\n")
        if block_marker and context.attempt == 1:
            Path(block_marker).touch()
            time.sleep(600)
        time.sleep(tool_seconds)
        return f"report for {region} written"

    return agent


def ledger_lines(path: str | Path) -> list[dict[str, Any]]:
    file = Path(path)
    if not file.exists():
        return []
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]


@dataclass
class ChildRun:
    process: subprocess.Popen[str]
    session_file: Path

    def wait_for(self, path: Path, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            if self.process.poll() is not None:
                out, err = self.process.communicate()
                raise AssertionError(f"child exited {self.process.returncode} early:\n{out}\n{err}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {path}")
            time.sleep(0.01)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.communicate(timeout=30)  # reap it and close the pipes

    def finish(self, timeout: float = 60.0) -> tuple[int, str, str]:
        out, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, out, err

    @property
    def session_id(self) -> str:
        return str(json.loads(self.session_file.read_text())["session_id"])


async def holder_gone(backend: Any, session_id: str) -> None:
    """Wait until the store sees that the process holding ``session_id``'s lease is dead.

    A SIGKILLed process's socket closes at once, but PostgreSQL frees its liveness lock only
    when the server's backend for that connection notices and exits: a few milliseconds,
    more on a loaded machine. The lease itself runs for much longer than this wait may take,
    so a claim that succeeds after it still shows that a dead holder's lease need not expire.
    """
    session = await backend.get_session(session_id)
    owner = session.lease_owner if session is not None else None
    if owner is None:
        return
    try:
        async with asyncio.timeout(10.0):
            while await backend.process_alive(owner):
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"the dead holder {owner} still looks alive after 10 s") from None


def spawn_child(
    target: BackendTarget,
    workdir: Path,
    *,
    agent: dict[str, Any],
    prompt: str = "Write the EMEA report.",
    kill_at_phase: str | None = None,
    session_id: str | None = None,
    action: str = "run",
    request_id: str | None = None,
    recording: bool | None = None,
) -> ChildRun:
    """Start ``python durable_support.py`` as a real OS process driving one run."""
    session_file = workdir / f"session-{time.monotonic_ns()}.json"
    spec = {
        "target": {"kind": target.kind, "location": target.location},
        "agent": agent,
        "prompt": prompt,
        "kill_at_phase": kill_at_phase,
        "session_file": str(session_file),
        "session_id": session_id,
        "action": action,
        "request_id": request_id,
        "recording": recording,
    }
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, str(HERE / "durable_support.py"), json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    return ChildRun(process, session_file)


async def _child_main(spec: dict[str, Any]) -> None:
    from harnessx import AgentRuntime

    target = BackendTarget(**spec["target"])
    agent = make_agent(**spec["agent"])
    phase = spec.get("kill_at_phase")
    if phase == "raw_result":
        # SIGKILL ourselves once a tool's raw result is committed (result middleware runs then).
        agent.middleware.add(CrashAfterRawResult())
    elif phase == "dispatch":
        # SIGKILL ourselves as a tool starts: its dispatch is committed by then, so the
        # call is `started` with no result (a phase CHECKPOINT does not name).
        agent.hooks.on(HookEvent.TOOL_CALL_START, lambda context: os.kill(os.getpid(), signal.SIGKILL))
    elif phase:
        # SIGKILL ourselves right after a boundary of that CHECKPOINT phase (0.9.1's names:
        # prepare_model, prepare_tools, tools, finish, result) commits.
        def kill(context: Any) -> None:
            if context.data["phase"] == phase:
                os.kill(os.getpid(), signal.SIGKILL)

        agent.hooks.on(HookEvent.CHECKPOINT, kill)
    async with target.open() as backend:
        runtime = AgentRuntime(agent, backend=backend, recording=spec.get("recording"))
        if spec["action"] == "run":
            session_id = await runtime.start(spec.get("session_id"))
            Path(spec["session_file"]).write_text(json.dumps({"session_id": session_id}))
            result = await runtime.run(spec["prompt"], request_id=spec.get("request_id"))
        else:
            handle = await runtime.resume(spec["session_id"])
            Path(spec["session_file"]).write_text(json.dumps({"session_id": spec["session_id"]}))
            result = await handle.result() if handle else None
        print(json.dumps(result.to_dict() if result else None))
        await runtime.stop()


if __name__ == "__main__":
    import asyncio

    asyncio.run(_child_main(json.loads(sys.argv[1])))
