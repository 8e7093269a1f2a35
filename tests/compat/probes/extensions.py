"""Extensions: install order by priority, the turn callbacks of a completed and of a failed
run, prompt providers, what aclose() undoes, a refused set, and ResultSpillExtension's
envelope and read_result answers (their keys and values, ids masked)."""

from __future__ import annotations

import asyncio
import json
import tempfile
from typing import Any

from _probe import emit

from harnessx import (
    Agent,
    AgentConfig,
    Extension,
    ExtensionContext,
    HookEvent,
    Middleware,
    PermissionLevel,
    ProviderResponse,
    ResultSpillExtension,
    ToolCall,
    ToolResult,
)
from harnessx.providers import LLMProvider


class Provider(LLMProvider):
    def __init__(self, replies: list[ProviderResponse] | None = None, fail: bool = False) -> None:
        self.replies = list(replies or [])
        self.fail = fail
        self.systems: list[str] = []
        self.results: list[str] = []

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.systems.append(kwargs.get("system") or "")
        last = kwargs["messages"][-1]["content"]
        if isinstance(last, list):
            blocks = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
            self.results += [b["content"] for b in blocks]
        if self.fail:
            raise ValueError("provider failed")
        return self.replies.pop(0) if self.replies else ProviderResponse(text="done")

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


class Probe(Extension):
    def __init__(self, name: str, log: list[Any], priority: int = 100) -> None:
        self.name, self.log, self.priority = name, log, priority

    def install(self, ctx: ExtensionContext) -> None:
        self.log.append([self.name, "install"])
        ctx.register_tool(lambda: "ok", name=f"{self.name}_tool")
        ctx.add_middleware(Middleware())
        ctx.on_hook(HookEvent.AGENT_START, lambda context: None)
        ctx.register_prompt_provider(lambda: f"from {self.name}")

    async def on_turn_start(self, ctx: ExtensionContext, user_message: str) -> None:
        self.log.append([self.name, "start", user_message])

    async def on_turn_end(self, ctx: ExtensionContext, final_text: str) -> None:
        self.log.append([self.name, "end", final_text])

    async def on_turn_complete(self, ctx: ExtensionContext, result: Any) -> None:
        self.log.append([self.name, "complete", str(result.status)])

    async def teardown(self) -> None:
        self.log.append([self.name, "teardown"])


def refused(make: Any) -> str:
    try:
        make()
    except Exception as exc:
        return type(exc).__name__
    return "accepted"


async def lifecycle() -> dict[str, Any]:
    log: list[Any] = []
    provider = Provider()
    agent = Agent(
        provider=provider,
        config=AgentConfig(system_prompt="Base"),
        extensions=[Probe("late", log, 100), Probe("early", log, 1)],
    )
    tools_installed = sorted(agent.tools.list_tools())
    result = await agent.run("hello")
    await agent.aclose()
    failing_log: list[Any] = []
    failing = Agent(provider=Provider(fail=True), extensions=[Probe("f", failing_log)])
    failed = await failing.run("hello")
    await failing.aclose()
    return {
        "status": str(result.status),
        "log": log,
        # The planning guidance between them is worded differently (events_in_memory:system).
        "system_start_and_end": [provider.systems[0].split("\n\n")[i] for i in (0, -2, -1)],
        "tools_installed": tools_installed,
        "tools_after_close": sorted(agent.tools.list_tools()),
        "prompt_providers_after_close": len(agent.prompt_providers),
        "failed_run": {"status": str(failed.status), "log": failing_log},
        "duplicate": refused(lambda: Agent(provider=Provider(), extensions=[Probe("x", []), Probe("x", [])])),
        "nameless": refused(lambda: Agent(provider=Provider(), extensions=[Probe("", [])])),
    }


async def spill() -> dict[str, Any]:
    rows = [{"city": "Oslo" if i % 3 else "Bergen", "value": i} for i in range(40)]
    extension = ResultSpillExtension(threshold_bytes=100, spill_root=tempfile.mkdtemp(), inline_head_rows=2)
    provider = Provider(
        [ProviderResponse(text="", tool_calls=[ToolCall("c1", "query", {})], stop_reason="tool_use")]
    )
    agent = Agent(provider=provider, extensions=[extension])
    agent.tools.register(name="query")(lambda: json.dumps({"rows": rows, "sql": "q"}))
    agent.permissions.set_permission("query", PermissionLevel.ALLOW)
    await agent.run("go")
    envelope = json.loads(provider.results[0])
    rid = envelope["result_id"]
    read = agent.tools.get_tool("read_result").handler
    reads = {
        kind: json.loads(read(result_id=rid, op=op))
        for kind, op in {
            "head": {"kind": "head", "n": 1},
            "tail": {"kind": "tail", "n": 1},
            "count": {"kind": "count"},
            "count_by": {"kind": "count_by", "column": "city"},
            "sum": {"kind": "sum", "column": "value"},
            "avg": {"kind": "avg", "column": "value"},
            "min": {"kind": "min", "column": "city"},
        }.items()
    }
    text = json.loads(extension._maybe_spill(ToolResult("t", "needle " + "hay " * 40)).content)
    search = json.loads(read(result_id=text["result_id"], op={"kind": "search", "needle": "needle"}))
    small = extension._maybe_spill(ToolResult("s", "tiny")).content
    await agent.aclose()
    return {
        "envelope_keys": sorted(k for k in envelope if k != "note"),
        "envelope": {
            k: envelope[k] for k in ("stored", "format", "row_count", "columns", "parent_keys", "head")
        },
        "reads": reads,
        "text_envelope_keys": sorted(k for k in text if k != "note"),
        "text": {k: text[k] for k in ("stored", "format", "size_bytes", "peek_chars")},
        "search_hits": search["hits"],
        "small": small,
        "read_result_tool": "read_result" in agent.tools.list_tools(),
    }


async def main() -> None:
    emit({"lifecycle": await lifecycle(), "spill": await spill()})


asyncio.run(main())
