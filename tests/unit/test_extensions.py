"""Extensions as harnessx 0.9.1 has them: ``Extension`` subclasses installed by priority
through an ``ExtensionContext``, their registrations undone on ``aclose()``, their turn
callbacks, prompt providers, and ``ResultSpillExtension``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from harnessx import (
    Agent,
    AgentRuntime,
    Extension,
    ExtensionContext,
    HookEvent,
    LLMProvider,
    Middleware,
    ProviderResponse,
    ResultSpillExtension,
    RunResult,
    RunStatus,
    ScriptedProvider,
    SQLiteBackend,
    ToolCall,
    ToolResult,
)

BUILTIN_TOOLS = sorted(Agent().tools.names())


class Probe(Extension):
    def __init__(self, name: str, log: list[Any], priority: int = 100) -> None:
        self.name, self.log, self.priority = name, log, priority

    def install(self, ctx: ExtensionContext) -> None:
        self.log.append((self.name, "install"))
        ctx.register_tool(lambda: "ok", name=f"{self.name}_tool")
        ctx.add_middleware(Middleware())
        ctx.on_hook(HookEvent.AGENT_START, lambda context: None)
        ctx.register_prompt_provider(lambda: f"from {self.name}")

    async def on_turn_start(self, ctx: ExtensionContext, user_message: str) -> None:
        self.log.append((self.name, "start", user_message))

    async def on_turn_end(self, ctx: ExtensionContext, final_text: str) -> None:
        self.log.append((self.name, "end", final_text))

    async def on_turn_complete(self, ctx: ExtensionContext, result: RunResult) -> None:
        self.log.append((self.name, "complete", result.status))

    async def teardown(self) -> None:
        self.log.append((self.name, "teardown"))


async def test_installed_by_priority_called_per_turn_and_undone_on_close() -> None:
    log: list[Any] = []
    provider = ScriptedProvider(["hi"])
    agent = Agent(provider=provider, extensions=[Probe("late", log, 100), Probe("early", log, 1)])
    assert log == [("early", "install"), ("late", "install")]
    assert [e.name for e in agent.extensions] == ["early", "late"]
    assert {"early_tool", "late_tool"} <= set(agent.tools.names())

    result = await agent.run("hello")
    assert result.status is RunStatus.COMPLETED
    # Prompt providers append to the system prompt in install order.
    assert provider.requests[0].system.endswith("from early\n\nfrom late")
    assert log[2:] == [
        ("early", "start", "hello"),
        ("late", "start", "hello"),
        ("early", "end", "hi"),
        ("late", "end", "hi"),
        # Terminal callbacks run in reverse install order.
        ("late", "complete", RunStatus.COMPLETED),
        ("early", "complete", RunStatus.COMPLETED),
    ]

    await agent.aclose()
    assert log[-2:] == [("late", "teardown"), ("early", "teardown")]
    assert agent.tools.names() == BUILTIN_TOOLS
    assert not agent.middleware._middleware and not agent.prompt_providers
    assert not agent.hooks.has(HookEvent.AGENT_START)


async def test_a_failed_run_reaches_on_turn_complete() -> None:
    log: list[Any] = []

    def fail(request: object) -> str:
        raise ValueError("model broke")

    agent = Agent(provider=ScriptedProvider(fail), extensions=[Probe("p", log)])
    assert (await agent.run("hello")).status is RunStatus.FAILED
    assert ("p", "complete", RunStatus.FAILED) in log
    assert not any(entry[1] == "end" for entry in log)
    await agent.aclose()


async def test_a_failing_on_turn_start_fails_the_run() -> None:
    class Refuses(Probe):
        async def on_turn_start(self, ctx: ExtensionContext, user_message: str) -> None:
            raise RuntimeError("not today")

    log: list[Any] = []
    agent = Agent(provider=ScriptedProvider(["unused"]), extensions=[Refuses("r", log)])
    result = await agent.run("hello")
    assert result.status is RunStatus.FAILED and "not today" in str(result.error)
    await agent.aclose()


def test_a_bad_set_is_refused_before_anything_installs() -> None:
    log: list[Any] = []
    with pytest.raises(ValueError, match="Duplicate extension"):
        Agent(provider=ScriptedProvider([]), extensions=[Probe("same", log), Probe("same", log)])
    with pytest.raises(ValueError, match="no name"):
        Agent(provider=ScriptedProvider([]), extensions=[Probe("", log)])
    with pytest.raises(TypeError, match="priority"):
        Agent(provider=ScriptedProvider([]), extensions=[Probe("p", log, "1")])  # type: ignore[arg-type]
    assert log == []


def test_a_failing_install_undoes_the_others() -> None:
    class Broken(Probe):
        def install(self, ctx: ExtensionContext) -> None:
            ctx.register_tool(lambda: "x", name="half_done")
            raise RuntimeError("cannot install")

    log: list[Any] = []
    tools_before = Agent(provider=ScriptedProvider([])).tools.names()
    with pytest.raises(RuntimeError, match="cannot install"):
        agent = Agent(provider=ScriptedProvider([]), extensions=[Probe("ok", log, 1), Broken("broken", log)])
    agent = Agent(provider=ScriptedProvider([]))
    assert agent.tools.names() == tools_before


async def test_teardown_failures_are_raised_after_everything_is_closed() -> None:
    class Broken(Probe):
        async def teardown(self) -> None:
            raise ValueError("cleanup failed")

    log: list[Any] = []
    agent = Agent(provider=ScriptedProvider([]), extensions=[Broken("broken", log), Probe("fine", log)])
    with pytest.raises(ExceptionGroup, match="extension teardown failed"):
        await agent.aclose()
    assert ("fine", "teardown") in log and agent.tools.names() == BUILTIN_TOOLS
    with pytest.raises(ExceptionGroup):  # said again, nothing closed twice
        await agent.aclose()
    assert log.count(("fine", "teardown")) == 1


async def test_state_saved_with_the_session_comes_back(tmp_path: Path) -> None:
    class Stateful(Extension):
        name = "stateful"

        def __init__(self) -> None:
            self.records: dict[str, str] = {}

        def install(self, ctx: ExtensionContext) -> None:
            ctx.set_state("installed", True)

        async def on_save_session(self, ctx: ExtensionContext) -> dict[str, Any]:
            return {"records": dict(self.records)}

        async def on_load_session(self, ctx: ExtensionContext, state: dict[str, Any]) -> None:
            self.records = dict(state["records"])

    first = Stateful()
    first.records["a"] = "1"
    agent = Agent(provider=ScriptedProvider([]), extensions=[first])
    session_id = await agent.save_session(tmp_path)
    second = Stateful()
    loaded = await Agent.load_session(
        session_id, tmp_path, provider=ScriptedProvider([]), extensions=[second]
    )
    assert second.records == {"a": "1"}
    assert ExtensionContext(loaded, "stateful").get_state("installed") is True
    await agent.aclose()
    await loaded.aclose()


async def test_a_durable_run_calls_the_extension_too(tmp_path: Path) -> None:
    log: list[Any] = []
    provider = ScriptedProvider(["durable answer"])
    agent = Agent(provider=provider, extensions=[Probe("p", log)])
    async with SQLiteBackend(tmp_path / "runs.db") as store:
        runtime = AgentRuntime(agent, backend=store)
        await runtime.start()
        try:
            result = await runtime.run("hi")
        finally:
            await runtime.stop()
    assert result.status is RunStatus.COMPLETED
    assert ("p", "end", "durable answer") in log and ("p", "complete", RunStatus.COMPLETED) in log
    assert provider.requests[0].system.endswith("from p")
    await agent.aclose()


# ----------------------------------------------------------------- result spill


async def test_a_large_result_is_stored_and_read_back(tmp_path: Path) -> None:
    rows = [{"city": "Oslo" if i % 3 else "Bergen", "value": i} for i in range(40)]
    spill = ResultSpillExtension(threshold_bytes=100, spill_root=str(tmp_path / "spill"), inline_head_rows=2)

    def script(request: Any) -> ProviderResponse | str:
        if request.turn == 0:
            return ProviderResponse(tool_calls=[ToolCall("c1", "query", {})])
        envelope = json.loads(request.tool_results[0]["content"])
        seen.append(envelope)
        if request.turn == 1:
            return ProviderResponse(
                tool_calls=[
                    ToolCall(
                        "c2",
                        "read_result",
                        {"result_id": envelope["result_id"], "op": {"kind": "count_by", "column": "city"}},
                    ),
                    ToolCall(
                        "c3",
                        "read_result",
                        {"result_id": envelope["result_id"], "op": {"kind": "sum", "column": "value"}},
                    ),
                    ToolCall(
                        "c4", "read_result", {"result_id": envelope["result_id"], "op": {"kind": "peek"}}
                    ),
                ]
            )
        answers.extend(json.loads(block["content"]) for block in request.tool_results)
        return "done"

    seen: list[dict[str, Any]] = []
    answers: list[dict[str, Any]] = []
    agent = Agent(provider=ScriptedProvider(script), extensions=[spill])
    agent.tools.register(name="query", permission="allow")(lambda: json.dumps({"rows": rows, "sql": "q"}))
    assert (await agent.run("go")).status is RunStatus.COMPLETED

    envelope = seen[0]
    assert envelope["stored"] is True and envelope["format"] == "jsonl" and envelope["row_count"] == 40
    assert envelope["head"] == rows[:2] and envelope["parent_keys"] == ["sql"]
    by_city, total, peek = answers
    assert {h["value"]: h["count"] for h in by_city["histogram"]} == {"Oslo": 26, "Bergen": 14}
    assert total["value"] == sum(range(40))
    assert "error" in peek and "holds rows" in peek["error"]

    stored = Path(spill._results[envelope["result_id"]].path)
    assert stored.is_file() and len(stored.read_text().splitlines()) == 40
    await agent.aclose()
    assert not stored.exists() and (tmp_path / "spill").exists()  # only its own folder goes


def test_small_error_and_text_results() -> None:
    spill = ResultSpillExtension(threshold_bytes=10, inline_peek_chars=5)
    assert spill._maybe_spill(ToolResult("a", "short")).content == "short"
    failed = ToolResult("b", "x" * 50, is_error=True)
    assert spill._maybe_spill(failed) is failed
    text = json.loads(spill._maybe_spill(ToolResult("c", "needle in " + "hay " * 20)).content)
    assert (text["format"], text["peek"], text["size_bytes"]) == ("text", "needl", 90)
    found = json.loads(
        spill._read_result(text["result_id"], {"kind": "search", "needle": "needle", "around": 3})
    )
    assert found["hits"] == [{"offset": 0, "context": "needle in"}]
    assert "error" in json.loads(spill._read_result("r_missing", {"kind": "peek"}))
    assert "needs the field" in json.loads(spill._read_result(text["result_id"], {"kind": "search"}))["error"]


def test_a_result_over_the_cap_is_left_whole() -> None:
    # 0.9.1 replaces it with a note that it was too large, and its content is lost.
    spill = ResultSpillExtension(threshold_bytes=10, max_spill_bytes=20)
    big = ToolResult("a", "y" * 30)
    assert spill._maybe_spill(big) is big


async def test_spilled_results_survive_a_session_snapshot(tmp_path: Path) -> None:
    spill = ResultSpillExtension(threshold_bytes=10, spill_root=str(tmp_path / "spill"))
    agent = Agent(provider=ScriptedProvider([]), extensions=[spill])
    envelope = json.loads(
        spill._maybe_spill(ToolResult("t", json.dumps({"rows": [{"v": 1}, {"v": 2}]}))).content
    )
    session_id = await agent.save_session(tmp_path / "sessions")
    restored = ResultSpillExtension()
    loaded = await Agent.load_session(
        session_id, tmp_path / "sessions", provider=ScriptedProvider([]), extensions=[restored]
    )
    answer = json.loads(restored._read_result(envelope["result_id"], {"kind": "tail", "n": 1}))
    assert answer["rows"] == [{"v": 2}]
    await loaded.aclose()
    await agent.aclose()


# ----------------------------------------------------------------- cancellation


class Hangs(LLMProvider):
    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.entered.set()
        await asyncio.Event().wait()
        raise AssertionError("never answers")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


async def test_cancelling_run_cancels_the_run_and_says_so() -> None:
    log: list[Any] = []
    ends: list[RunStatus] = []
    provider = Hangs()
    agent = Agent(provider=provider, extensions=[Probe("p", log)])
    agent.hooks.on(HookEvent.AGENT_END, lambda ctx: ends.append(ctx.data["result"].status))
    task = asyncio.create_task(agent.run("hello"))
    await provider.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Before: the run went on in the background, the agent stayed busy, nobody was told.
    assert ends == [RunStatus.CANCELLED] and ("p", "complete", RunStatus.CANCELLED) in log
    assert not agent.busy and [m["role"] for m in agent.memory.get_messages()] == ["user"]
    await agent.aclose()


async def test_leaving_a_stream_early_cancels_the_run_the_same_way() -> None:
    ends: list[RunStatus] = []
    provider = Hangs()
    agent = Agent(provider=provider)
    agent.hooks.on(HookEvent.AGENT_END, lambda ctx: ends.append(ctx.data["result"].status))
    async with agent.run_stream("hello"):
        await provider.entered.wait()
    assert ends == [RunStatus.CANCELLED] and not agent.busy
    await agent.aclose()


async def test_cancelling_a_waiting_durable_run_tells_hooks_and_extensions_once(tmp_path: Path) -> None:
    log: list[Any] = []
    ends: list[RunStatus] = []
    asks = ProviderResponse(tool_calls=[ToolCall("t", "ask", {})], stop_reason="tool_use")
    agent = Agent(provider=ScriptedProvider([asks]), extensions=[Probe("p", log)])
    agent.tools.register(name="ask", permission="ask")(lambda: "unused")
    agent.hooks.on(HookEvent.AGENT_END, lambda ctx: ends.append(ctx.data["result"].status))
    async with SQLiteBackend(tmp_path / "runs.db") as store:
        runtime = AgentRuntime(agent, backend=store)
        await runtime.start()
        try:
            assert (await runtime.run("hello")).status is RunStatus.AWAITING_INPUT
            assert ends == []
            await runtime.cancel()
            await runtime.cancel()
        finally:
            await runtime.stop()
    assert ends == [RunStatus.CANCELLED]
    assert log.count(("p", "complete", RunStatus.CANCELLED)) == 1
    await agent.aclose()
