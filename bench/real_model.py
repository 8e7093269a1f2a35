"""What durability costs next to a real model call.

    bash bench/real_model_setup.sh           # once: builds llama-server, fetches the model
    python bench/real_model.py               # in memory, SQLite and a throwaway PostgreSQL
    python bench/real_model.py --runs 40 --backends memory,sqlite

llama.cpp's ``llama-server`` (``harnessx.testing.LlamaServer``) serves SmolLM2-135M-Instruct
on loopback; ``OpenAIProvider`` streams from it. The same run is timed, taking turns:

- *memory*: ``Agent.run`` (a fresh agent each time, nothing stored);
- *sqlite*: ``AgentRuntime`` on ``SQLiteBackend`` (WAL, ``synchronous=FULL``), a new session
  per run, every boundary committed;
- *postgres*: the same on ``PostgresBackend``, a throwaway cluster with fsync on.

Two runs, both greedy (the same request always gets the same reply): *answer* (one model
call, the answer always the same 48 tokens) and *tool* (a tool call, the tool, then the
answer: two model calls and about eight boundaries; the question asks the model to repeat a
tool call, as in ``tests/realmodel/weather.py``, since this model seldom calls one by itself).

Reported per store: the median run; the time the run spent inside store calls (each call
wrapped and timed; an upper bound on what durability adds, since some, such as streamed
text being flushed, overlap the model's stream) and its share of one model call (a bare
``provider.stream`` of the first request, timed in the same rotation); and the median over
rounds of durable minus in-memory run time, which on a shared machine is mostly the model's
own variation. The server counts the model calls, so a run that stopped calling the tool
would show.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnessx import Agent, AgentConfig, AgentRuntime, OpenAIProvider, SQLiteBackend
from harnessx.testing import LlamaServer

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "Name of the city, e.g. Oslo."}},
    "required": ["city"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Scenario:
    name: str
    system: str
    question: str
    max_tokens: int
    temperature: float
    tools: bool

    def provider(self, server: LlamaServer) -> OpenAIProvider:
        return OpenAIProvider("smollm2", base_url=f"{server.url}/v1", timeout=600)

    def agent(self, provider: OpenAIProvider, calls: list[str] | None = None) -> Agent:
        config = AgentConfig(
            model="smollm2",
            max_tokens=self.max_tokens,
            system_prompt=self.system,
            temperature=self.temperature,
            planning=False,
        )
        agent = Agent(config, provider=provider)
        agent.tools.unregister("read_tool_result")  # the model sees only the scenario's tools
        if self.tools:

            def get_weather(city: str) -> str:
                if calls is not None:
                    calls.append(city)
                return "It is 21 degrees and sunny in Oslo."

            agent.tools.register_with_schema(
                "get_weather",
                "Get the current weather for a city.",
                SCHEMA,
                get_weather,
                replay_policy="safe",
            )
        return agent

    def first_request(self) -> dict[str, Any]:
        tools = [
            {
                "name": "get_weather",
                "description": "Get the current weather for a city.",
                "input_schema": SCHEMA,
            }
        ]
        return {
            "model": "smollm2",
            "messages": [{"role": "user", "content": self.question}],
            "system": self.system,
            "tools": tools if self.tools else [],
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }


ANSWER = Scenario(
    "answer (1 model call)",
    "You are a storyteller.",
    "Tell me a long story about a lighthouse keeper.",
    48,
    0.0,
    tools=False,
)
TOOL = Scenario(
    "tool (2 model calls, 1 tool call)",
    "You are a weather assistant. Always call the get_weather tool to answer weather questions.",
    'Repeat after me: <tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
    80,
    0.0,
    tools=True,
)


@dataclass
class Timings:
    samples: dict[str, list[float]] = field(default_factory=dict)
    model_calls_per_run: float = 0.0
    store_calls: dict[str, str] = field(default_factory=dict)  # per store: StoreTimer.breakdown

    def add(self, key: str, seconds: float) -> None:
        self.samples.setdefault(key, []).append(seconds * 1000)

    def median(self, key: str) -> float:
        return statistics.median(self.samples[key])


# Store calls that wait (for events, for work) or run beside the run (lease renewal) are
# not time a run spends on durability.
_NOT_ON_THE_PATH = frozenset({"wait_for_events", "wait_for_work", "renew", "initialize", "aclose", "migrate"})


class StoreTimer:
    """Adds up the time a store spends in the calls a run makes (by wrapping them). Some
    overlap the model's stream (events flushed while it streams), so the sum is an upper
    bound on what durability adds to a run."""

    def __init__(self, store: Any) -> None:
        self.total = 0.0
        self.counting = False  # only the timed runs count
        # Per store call: [calls, seconds], over the timed runs.
        self.by_call: dict[str, list[float]] = {}
        for name in dir(type(store)):
            method = getattr(store, name, None)
            if name.startswith("_") or name in _NOT_ON_THE_PATH or not inspect.iscoroutinefunction(method):
                continue
            setattr(store, name, self._timed(name, method))

    def _timed(self, name: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await method(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                self.total += spent
                if self.counting:
                    entry = self.by_call.setdefault(name, [0, 0.0])
                    entry[0] += 1
                    entry[1] += spent

        return call

    def breakdown(self, runs: int) -> str:
        """Per run: each store call's count and time, the costliest first."""
        ranked = sorted(self.by_call.items(), key=lambda item: -item[1][1])
        return ", ".join(f"{name} {n / runs:.0f}x {t / runs * 1000:.1f} ms" for name, (n, t) in ranked)


async def timed(work: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await work()
    return time.perf_counter() - start


async def calls_the_tool_once(server: LlamaServer, scenario: Scenario) -> bool:
    """Whether the model calls the tool once and then answers (it does, greedily, on the
    pinned build and model; if not, timing the run would time something else)."""
    await server.reset_prompt_cache()
    provider = scenario.provider(server)
    calls: list[str] = []
    async with scenario.agent(provider, calls) as agent:
        result = await agent.run(scenario.question)
    await provider.aclose()
    return calls == ["Oslo"] and result.ok


async def measure(server: LlamaServer, scenario: Scenario, stores: dict[str, Any], runs: int) -> Timings:
    provider = scenario.provider(server)
    timings = Timings()
    runtimes: dict[str, AgentRuntime] = {}
    timers = {name: StoreTimer(store) for name, store in stores.items()}
    async with AsyncExitStack() as stack:
        for name, store in stores.items():
            runtimes[name] = await stack.enter_async_context(
                AgentRuntime(scenario.agent(provider), backend=store)
            )

        async def bare_call() -> None:
            async for _ in provider.stream(**scenario.first_request()):
                pass

        async def in_memory() -> None:
            async with scenario.agent(provider) as agent:
                await agent.run(scenario.question)

        def durable(runtime: AgentRuntime) -> Callable[[], Awaitable[Any]]:
            async def run() -> None:
                await runtime.start()  # a new session: the same conversation every time
                await runtime.run(scenario.question)

            return run

        work: dict[str, Callable[[], Awaitable[Any]]] = {"model call": bare_call, "memory": in_memory}
        work.update({name: durable(runtime) for name, runtime in runtimes.items()})
        for step in work.values():  # one untimed round: connections, caches, statements
            await server.reset_prompt_cache()
            await step()
        before = server.completions()
        for _ in range(runs):
            for name, step in work.items():
                # Untimed: every run starts from the same cache state, so all sample the same
                # reply (see LlamaServer.reset_prompt_cache).
                await server.reset_prompt_cache()
                timer = timers.get(name)
                in_store = timer.total if timer else 0.0
                if timer:
                    timer.counting = True
                timings.add(name, await timed(step))
                if timer:
                    timer.counting = False
                    timings.add(f"{name} in store", timer.total - in_store)
        # Each round: a reset before each of its steps, one bare call, then each run (memory
        # and every store) makes its calls.
        per_round = (server.completions() - before) / runs - len(work)
        timings.model_calls_per_run = (per_round - 1) / (len(work) - 1)
    await provider.aclose()
    timings.store_calls = {name: timer.breakdown(runs) for name, timer in timers.items()}
    return timings


def report(scenario: Scenario, timings: Timings, stores: list[str], runs: int) -> None:
    """Medians, and the durable run's extra time as the median of per-round differences
    (each round's runs follow one another, so the machine's drift cancels)."""
    call = timings.median("model call")
    memory = timings.median("memory")
    print(f"\n{scenario.name}: {runs} rounds, {timings.model_calls_per_run:.2f} model calls per run")
    print(
        "| run | median (ms) | in store calls (ms) | store / one model call "
        "| run - in memory, median of rounds (ms) |"
    )
    print("|---|---|---|---|---|")
    print(f"| one model call, bare | {call:.1f} | | | |")
    print(f"| in memory | {memory:.1f} | | | |")
    for name in stores:
        in_store = timings.median(f"{name} in store")
        extra = statistics.median(
            d - m for d, m in zip(timings.samples[name], timings.samples["memory"], strict=True)
        )
        print(
            f"| {name} | {timings.median(name):.1f} | {in_store:.1f} | {in_store / call:.2%} | {extra:+.1f} |"
        )
    for name in stores:
        print(f"- {name}, store calls per run: {timings.store_calls[name]}")


async def main(args: argparse.Namespace) -> None:
    with ExitStack() as sync_stack, tempfile.TemporaryDirectory() as folder:
        server = sync_stack.enter_context(LlamaServer())
        async with AsyncExitStack() as stack:
            stores: dict[str, Any] = {}
            if "sqlite" in args.backends:
                stores["sqlite"] = await stack.enter_async_context(
                    SQLiteBackend(Path(folder) / "bench.sqlite3")
                )
            if "postgres" in args.backends:
                from harnessx.store import PostgresBackend
                from harnessx.testing import ThrowawayCluster

                dsn = args.dsn or sync_stack.enter_context(ThrowawayCluster(durable=True)).dsn
                stores["postgres"] = await stack.enter_async_context(
                    PostgresBackend(dsn, schema="harnessx_bench")
                )
            for scenario in (ANSWER, TOOL):
                if scenario.tools and not await calls_the_tool_once(server, scenario):
                    print(f"\n{scenario.name}: the model did not call the tool once; not timed")
                    continue
                timings = await measure(server, scenario, stores, args.runs)
                report(scenario, timings, list(stores), args.runs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=50, help="timed rounds per scenario")
    parser.add_argument("--backends", default="sqlite,postgres", type=lambda s: s.split(","))
    parser.add_argument("--dsn", help="PostgreSQL DSN (default: a throwaway cluster)")
    asyncio.run(main(parser.parse_args()))
