"""What the configuration does to a run: limits, large results, the task list, the loop
guard, repeated calls, and slow-model notices (the original harnessx 0.9.1's behaviour)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from harnessx import (
    Agent,
    AgentConfig,
    HookEvent,
    Limits,
    LoopGuard,
    ProgressPolicy,
    ProviderError,
    ProviderResponse,
    RetryPolicy,
    RunEventType,
    ScriptedProvider,
    ScriptedRequest,
    TokenUsage,
    ToolCall,
    ToolPolicy,
    ToolRegistry,
)
from harnessx.providers import LLMProvider, StreamChunk


def script_of(agent: Agent) -> ScriptedProvider:
    provider = agent.provider
    assert isinstance(provider, ScriptedProvider)
    return provider


async def test_max_iterations_zero_means_unlimited() -> None:
    calls = [ProviderResponse(tool_calls=[ToolCall(f"c{i}", "tick", {})]) for i in range(60)]
    agent = Agent(
        provider=ScriptedProvider([*calls, "done"]), config=AgentConfig(limits=Limits(max_iterations=0))
    )
    agent.tools.register(name="tick", replay_policy="safe")(lambda: "tock")
    result = await agent.run("count")
    assert result.ok and result.output == "done" and len(script_of(agent).requests) == 61


async def test_the_limit_asks_once_more_without_tools_or_fails_when_told_to() -> None:
    loop = ProviderResponse(tool_calls=[ToolCall("c", "tick", {})])
    final = ProviderResponse(
        text="I ticked twice; nothing else is left.", tool_calls=[ToolCall("z", "tick", {})]
    )
    agent = Agent(
        provider=ScriptedProvider([loop, loop, final]), config=AgentConfig(limits=Limits(max_iterations=2))
    )
    agent.tools.register(name="tick", replay_policy="safe")(lambda: "tock")
    result = await agent.run("go")
    assert result.limited and result.output == "I ticked twice; nothing else is left."
    last = script_of(agent).requests[-1]
    assert last.tools == [] and "step limit" in last.messages[-1]["content"][-1]["text"]
    # The call the last reply made anyway is answered, not run: the conversation stays valid.
    assert agent.memory.get_messages()[-1]["content"][0]["content"].startswith("Not executed")

    strict = Agent(
        provider=ScriptedProvider([loop, loop]),
        config=AgentConfig(limits=Limits(max_iterations=2, final_answer_on_limit=False)),
    )
    strict.tools.register(name="tick", replay_policy="safe")(lambda: "tock")
    failed = await strict.run("go")
    assert failed.failed and failed.error is not None and failed.error["type"] == "MaxIterationsError"


async def test_the_cost_limit_stops_a_run_before_its_next_model_call() -> None:
    def expensive(request: ScriptedRequest) -> ProviderResponse:
        return ProviderResponse(
            tool_calls=[ToolCall(f"c{request.turn}", "tick", {})], usage=TokenUsage(1_000_000, 0)
        )

    limits = Limits(max_cost_dollars=5.0, input_cost_per_m=2.0)
    agent = Agent(provider=ScriptedProvider(expensive), config=AgentConfig(limits=limits))
    agent.tools.register(name="tick", replay_policy="safe")(lambda: "tock")
    result = await agent.run("spend")
    assert result.failed and result.error is not None and result.error["type"] == "CostLimitError"
    assert len(script_of(agent).requests) == 3  # $2, $4, then $6 >= $5: no fourth call


async def test_a_large_result_reaches_the_model_as_a_preview_and_reads_back() -> None:
    big = "\n".join(f"line {i}: value {i * 7}" for i in range(20_000))
    replies: list[ProviderResponse | str] = [
        ProviderResponse(tool_calls=[ToolCall("big1", "dump", {})]),
        ProviderResponse(
            tool_calls=[ToolCall("r1", "read_tool_result", {"result_id": "big1", "pattern": "line 12345:"})]
        ),
        ProviderResponse(
            tool_calls=[ToolCall("r2", "read_tool_result", {"result_id": "big1", "offset": 19990})]
        ),
        "line 12345 holds 86415.",
    ]
    agent = Agent(provider=ScriptedProvider(replies))
    agent.tools.register(name="dump", replay_policy="safe")(lambda: big)
    async with agent.run_stream("dump it") as stream:
        events = [event async for event in stream]
    requests = script_of(agent).requests
    (shown,) = requests[1].tool_results
    assert len(big) > 400_000 and len(shown["content"]) <= 12_000
    assert 'read_tool_result(result_id="big1"' in shown["content"] and "line 0: value 0" in shown["content"]
    (found,) = requests[2].tool_results
    assert "line 12345: value 86415" in found["content"] and len(found["content"]) <= 12_000
    (tail,) = requests[3].tool_results
    assert (
        tail["content"].startswith("[big1: lines 19991-20000 of 20000]") and "line 19999" in tail["content"]
    )
    # The stream still carries the whole result.
    results = [e for e in events if e.type is RunEventType.TOOL_RESULT]
    assert len(results[0].data.content) >= len(big)
    # The limit is Limits.max_result_chars.
    small = Agent(
        provider=ScriptedProvider([*replies[:1], "ok"]),
        config=AgentConfig(limits=Limits(max_result_chars=500)),
    )
    small.tools.register(name="dump", replay_policy="safe")(lambda: "x" * 2_000)
    await small.run("dump it")
    assert len(script_of(small).requests[1].tool_results[0]["content"]) < 1_000


def _search_results(records: int, size: int) -> str:
    return json.dumps(
        {
            "query": "rates",
            "results": [
                {
                    "title": f"Source {i}",
                    "url": f"https://example.com/{i}",
                    "content": "word " * size + f"end-{i}",
                }
                for i in range(records)
            ],
        }
    )


async def test_a_list_of_records_is_trimmed_to_fit_or_previewed_record_by_record() -> None:
    """As 0.9.1: every record stays when their texts can be cut to fit; past that, each
    record is named in the preview. What is left out is still read by read_tool_result,
    in a run and (agent.tools.execute) after it."""
    replies: list[ProviderResponse | str] = [
        ProviderResponse(
            tool_calls=[ToolCall("few", "search", {"n": 8}), ToolCall("many", "search", {"n": 300})]
        ),
        "ok",
    ]
    agent = Agent(
        provider=ScriptedProvider(replies), config=AgentConfig(limits=Limits(max_result_chars=20_000))
    )
    agent.tools.register(name="search", replay_policy="safe")(lambda n: _search_results(n, 1_000))
    async with agent:
        assert (await agent.run("search")).ok
        trimmed, previewed = (r["content"] for r in script_of(agent).requests[1].tool_results)
        header, guide, body = trimmed.split("\n", 2)
        assert header.startswith("[Tool result trimmed to fit (") and len(trimmed) <= 20_000
        assert 'read_tool_result(result_id="few", pattern="<words>")' in guide
        records = json.loads(body)["results"]
        assert [r["title"] for r in records] == [f"Source {i}" for i in range(8)]
        assert all(r["content"].endswith(" more characters]") for r in records)
        assert previewed.startswith("[Tool result too large (1 line, ")
        assert "Not shown: the full text of the 300 records" in previewed
        assert (
            'JSON with 300 records in "results".' in previewed
            and "1. Source 0 | https://example.com/0" in previewed
        )
        read = await agent.tools.execute(
            ToolCall("r", "read_tool_result", {"result_id": "few", "pattern": "end-7"})
        )
        assert not read.is_error and read.content.startswith("[few: 1 matches for 'end-7'")


def test_a_spilled_list_of_records_is_previewed_with_the_whole_results_size() -> None:
    from harnessx import ToolResult
    from harnessx.memory import ConversationMemory

    whole = _search_results(8, 1_000)
    memory = ConversationMemory(max_result_chars=len(whole) - 1)
    memory.add_user_message("go")
    memory.add_assistant_message([{"type": "tool_use", "id": "t1", "name": "search", "input": {}}])
    memory.add_tool_results([ToolResult(tool_call_id="t1", content=whole)])
    assert memory.get_messages()[-1]["content"][0]["content"].startswith("[Tool result trimmed to fit")
    assert memory.spill_large_results() > 20_000
    spilled = memory.get_messages()[-1]["content"][0]["content"]
    assert spilled.startswith(f"[Tool result too large (1 line, {len(whole):,} chars).")
    assert "end-7" in memory.read_evicted("t1", pattern="end-7")


async def test_an_unknown_result_id_is_an_error_result_for_the_model() -> None:
    replies: list[ProviderResponse | str] = [
        ProviderResponse(tool_calls=[ToolCall("r", "read_tool_result", {"result_id": "nope"})]),
        "ok",
    ]
    agent = Agent(provider=ScriptedProvider(replies))
    await agent.run("read")
    (answer,) = script_of(agent).requests[1].tool_results
    assert answer["is_error"] and "no stored result with id 'nope'" in answer["content"]


async def test_the_task_list_tools_and_their_events() -> None:
    plan = [{"content": "Look it up", "status": "in_progress"}, {"content": "Answer", "status": "pending"}]
    done = [{"content": "Look it up", "status": "completed"}, {"content": "Answer", "status": "in_progress"}]
    replies: list[ProviderResponse | str] = [
        ProviderResponse(
            tool_calls=[ToolCall("w1", "write_todos", {"todos": plan}), ToolCall("r1", "read_todos", {})]
        ),
        ProviderResponse(tool_calls=[ToolCall("w2", "write_todos", {"todos": done})]),
        "All done.",
        ProviderResponse(tool_calls=[ToolCall("r2", "read_todos", {})]),
        "Still the same list.",
    ]
    agent = Agent(provider=ScriptedProvider(replies))
    assert {"write_todos", "read_todos", "read_tool_result"} <= set(agent.tools.names())
    seen: list[dict[str, object]] = []
    async with agent.run_stream("plan it") as stream:
        seen = [e.data for e in [event async for event in stream] if e.type is RunEventType.TODOS_UPDATED]
    assert [item["completed"] for item in seen] == [0, 1]
    assert seen[0] == {"todos": plan, "completed": 0, "total": 2, "in_progress": "Look it up"}
    requests = script_of(agent).requests
    assert "write_todos" in requests[0].system  # the planning guidance
    # read_todos after write_todos in the same reply sees the new list.
    assert "[~] Look it up" in requests[1].tool_results[1]["content"]
    # The open list is shown at the end of the next request, not in the system prompt.
    *_, reminder = requests[1].messages[-1]["content"]
    assert reminder["type"] == "text" and reminder["text"].startswith("[Task list, 0/2 complete]")
    assert agent.todos == done
    # A later run of the session carries the list on.
    await agent.run("and now?")
    assert "[x] Look it up" in script_of(agent).requests[-1].tool_results[0]["content"]

    plain = Agent(provider=ScriptedProvider(["hi"]), config=AgentConfig(planning=False))
    assert "write_todos" not in plain.tools.names() and "read_tool_result" in plain.tools.names()


async def test_an_application_tool_of_a_built_in_name_wins() -> None:
    tools = ToolRegistry()
    tools.register(name="read_tool_result")(lambda result_id: f"mine: {result_id}")
    agent = Agent(provider=ScriptedProvider(["x"]), tools=tools)
    tool = agent.tools.get_tool("read_tool_result")
    assert tool.handler("a") == "mine: a"


async def test_the_loop_guard_annotates_a_repeating_cycle_once() -> None:
    ping = ProviderResponse(tool_calls=[ToolCall("p", "poll", {"job": 1})])
    agent = Agent(provider=ScriptedProvider([ping, ping, ping, ping, "stuck"]))
    agent.tools.register(name="poll", replay_policy="safe")(lambda job: "still running")
    trips: list[dict[str, object]] = []
    agent.hooks.on(HookEvent.REPETITION, lambda ctx: trips.append(dict(ctx.data)))
    await agent.run("wait for the job")
    answers = [r.tool_results[0]["content"] for r in script_of(agent).requests[1:]]
    assert [a.startswith("[harness] Loop guard") for a in answers] == [False, False, True, False]
    assert trips == [{"period": 1, "laps": 3, "tool": "poll"}], "the REPETITION hook says so too"
    off = Agent(
        provider=ScriptedProvider([ping, ping, ping, "stuck"]),
        config=AgentConfig(limits=Limits(loop_guard=LoopGuard(enabled=False))),
    )
    off.tools.register(name="poll", replay_policy="safe")(lambda job: "still running")
    await off.run("wait")
    assert not any("Loop guard" in r.tool_results[0]["content"] for r in script_of(off).requests[1:])


async def test_dedupe_calls_runs_an_identical_call_once_per_run() -> None:
    ran: list[str] = []
    again = ProviderResponse(tool_calls=[ToolCall("a", "search", {"q": "milk", "n": 1})])
    reordered = ProviderResponse(tool_calls=[ToolCall("b", "search", {"n": 1, "q": "milk"})])
    agent = Agent(
        provider=ScriptedProvider([again, reordered, "first", again, "second"]),
        config=AgentConfig(tools=ToolPolicy(dedupe_calls=True)),
    )

    @agent.tools.register(replay_policy="safe")
    def search(q: str, n: int) -> str:
        """Search."""
        ran.append(q)
        return f"{len(ran)} hit"

    assert (await agent.run("one")).output == "first" and ran == ["milk"]
    assert script_of(agent).requests[2].tool_results[0] == {
        **script_of(agent).requests[2].tool_results[0],
        "tool_use_id": "b",
        "content": "1 hit",
    }
    assert (await agent.run("two")).output == "second" and ran == ["milk", "milk"]  # per run


class Slow(LLMProvider):
    def __init__(self, delay: float) -> None:
        self.delay = delay

    async def create(self, **kwargs: object) -> ProviderResponse:
        await asyncio.sleep(self.delay)
        return ProviderResponse(text="hello")

    async def count_tokens(self, **kwargs: object) -> int:
        return 0


async def test_a_silent_model_call_produces_waiting_notices() -> None:
    agent = Agent(
        provider=Slow(0.35),
        config=AgentConfig(progress=ProgressPolicy(first_after_seconds=0.1, repeat_every_seconds=0.1)),
    )
    async with agent.run_stream("hi") as stream:
        events = [event async for event in stream]
        result = await stream.result()
    waiting = [e.data for e in events if e.type is RunEventType.WAITING]
    assert len(waiting) >= 2 and all(w["on"] == "model" for w in waiting)
    assert [w["seconds"] for w in waiting] == sorted(w["seconds"] for w in waiting) and waiting[0][
        "seconds"
    ] > 0
    assert result.ok and result.output == "hello"  # a notice, never a deadline

    quiet = Agent(provider=Slow(0.2), config=AgentConfig(progress=ProgressPolicy(first_after_seconds=None)))
    async with quiet.run_stream("hi") as stream:
        assert not [e async for e in stream if e.type is RunEventType.WAITING]


async def test_old_tool_results_are_cleared_from_a_request_over_max_context_tokens() -> None:
    from harnessx._memory import CLEARED_TOOL_RESULT

    calls = [ProviderResponse(tool_calls=[ToolCall(f"c{i}", "page", {"n": i})]) for i in range(6)]
    agent = Agent(
        provider=ScriptedProvider([*calls, "read them all"]),
        # The window holds the reply too: 500 of 4,000 tokens leave the request 3,500.
        config=AgentConfig(max_tokens=500, limits=Limits(max_context_tokens=4_000)),
    )
    agent.tools.register(name="page", replay_policy="safe")(lambda n: f"page {n}: " + "words " * 400)
    result = await agent.run("read every page")
    assert result.ok
    last = script_of(agent).requests[-1].messages
    answers = [
        block["content"]
        for m in last
        if isinstance(m["content"], list)
        for block in m["content"]
        if block.get("type") == "tool_result"
    ]
    cleared = [i for i, text in enumerate(answers) if text == CLEARED_TOOL_RESULT]
    # The oldest answers were cleared from the request; the newest ones are whole.
    assert cleared and answers[-1].startswith("page 5:")
    assert cleared == list(range(len(cleared)))
    # The conversation itself keeps them all.
    assert all(m["content"].startswith("page") for m in agent.messages if m.get("role") == "tool")


class PausingStream(LLMProvider):
    """Streams "a", then stays silent until ``go`` is set, then "b" (or fails)."""

    def __init__(self, fail: bool = False) -> None:
        self.go = asyncio.Event()
        self.fail = fail
        self.closed = False

    async def create(self, **kwargs: object) -> ProviderResponse:
        raise AssertionError("streamed only")

    async def stream(self, **kwargs: object):  # type: ignore[no-untyped-def]
        try:
            yield StreamChunk("text_delta", "a")
            await self.go.wait()
            if self.fail:
                raise ProviderError("the connection dropped")
            yield StreamChunk("text_delta", "b")
            yield StreamChunk("response", ProviderResponse(text="ab"))
        finally:
            self.closed = True

    async def count_tokens(self, **kwargs: object) -> int:
        return 0


async def test_a_silence_inside_a_stream_is_noticed_in_order_with_its_deltas() -> None:
    provider = PausingStream()
    policy = ProgressPolicy(first_after_seconds=0.05, repeat_every_seconds=0.05)
    agent = Agent(provider=provider, config=AgentConfig(progress=policy, planning=False))
    seen: list[tuple[str, object]] = []
    async with agent.run_stream("hi") as stream:
        async for event in stream:
            if event.type is RunEventType.TEXT_DELTA:
                seen.append(("text", event.data))
            elif event.type is RunEventType.WAITING:
                seen.append(("waiting", event.data["seconds"]))
                if sum(kind == "waiting" for kind, _ in seen) == 2:
                    provider.go.set()
        result = await stream.result()
    assert result.ok and result.output == "ab"
    assert [kind for kind, _ in seen] == ["text", "waiting", "waiting", "text"]
    # Seconds count from the last chunk, growing while the silence lasts.
    assert 0 < float(seen[1][1]) <= float(seen[2][1])  # type: ignore[arg-type]
    assert provider.closed


async def test_a_stream_that_fails_after_a_silence_fails_the_call_and_is_closed() -> None:
    provider = PausingStream(fail=True)
    policy = ProgressPolicy(first_after_seconds=0.05, repeat_every_seconds=0.05)
    agent = Agent(
        provider=provider,
        config=AgentConfig(progress=policy, planning=False, retry=RetryPolicy(attempts=1)),
    )
    async with agent.run_stream("hi") as stream:
        async for event in stream:
            if event.type is RunEventType.WAITING:
                provider.go.set()
        result = await stream.result()
    assert not result.ok and "the connection dropped" in str(result.error)
    assert provider.closed


class BlockingStream(LLMProvider):
    """Holds the event loop itself (a blocking call) before a slow reply: the silence
    watch's timer can only fire late."""

    async def create(self, **kwargs: object) -> ProviderResponse:
        raise AssertionError("streamed only")

    async def stream(self, **kwargs: object):  # type: ignore[no-untyped-def]
        time.sleep(0.35)  # noqa: ASYNC251 - blocking the loop is the point: the timer fires late
        await asyncio.sleep(0.25)
        yield StreamChunk("response", ProviderResponse(text="late"))

    async def count_tokens(self, **kwargs: object) -> int:
        return 0


async def test_waiting_notices_report_the_silence_as_scheduled_not_the_timer_lateness() -> None:
    # harnessx 0.9.1 reports first_after_seconds, then one repeat more each notice (its
    # example progress_and_waiting.py prints "0.5s so far", "1.0s so far", ...).
    policy = ProgressPolicy(first_after_seconds=0.1, repeat_every_seconds=0.1)
    agent = Agent(provider=BlockingStream(), config=AgentConfig(progress=policy, planning=False))
    async with agent.run_stream("hi") as stream:
        seconds = [e.data["seconds"] async for e in stream if e.type is RunEventType.WAITING]
        assert (await stream.result()).output == "late"
    assert seconds and seconds == [round(0.1 * n, 1) for n in range(1, len(seconds) + 1)]


def test_a_loop_guard_switch_that_is_not_a_bool_is_a_type_error() -> None:
    from harnessx import ConfigurationError

    for wrong in (None, "yes", 1):
        with pytest.raises(TypeError, match=r"LoopGuard\.enabled must be True or False"):
            LoopGuard(enabled=wrong)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError):
            LoopGuard(enabled=wrong)  # type: ignore[arg-type]
