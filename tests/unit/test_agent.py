"""A plain Agent end to end with a scripted model: tools, streaming, limits, sessions."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from harnessx import (
    Agent,
    AgentConfig,
    ConfigurationError,
    HookEvent,
    Limits,
    PermissionLevel,
    PermissionManager,
    ProviderResponse,
    RetryPolicy,
    RunEventType,
    RunFailed,
    RunResult,
    RuntimeStateError,
    ScriptedProvider,
    ScriptedRequest,
    StopReason,
    ToolCall,
    ToolDefinition,
    ToolResult,
    TransientToolError,
    current_tool_context,
)


def weather_agent(replies: list[ProviderResponse | str], **kwargs: object) -> Agent:
    agent = Agent(provider=ScriptedProvider(replies), **kwargs)  # type: ignore[arg-type]

    @agent.tools.register(replay_policy="safe")
    def get_weather(city: str) -> str:
        """Current weather.

        Args:
            city: City name.
        """
        return f"sunny in {city}"

    @agent.tools.register()
    async def convert(celsius: float) -> dict[str, float]:
        """Celsius to Fahrenheit."""
        return {"fahrenheit": celsius * 9 / 5 + 32}

    return agent


TWO_TOOL_SCRIPT: list[ProviderResponse | str] = [
    ProviderResponse(
        text="Checking.",
        tool_calls=[
            ToolCall("c1", "get_weather", {"city": "Oslo"}),
            ToolCall("c2", "convert", {"celsius": 20}),
        ],
        stop_reason=StopReason.TOOL_USE,
    ),
    "It is sunny in Oslo, 68F.",
    "You asked about Oslo.",
]


async def test_multi_turn_conversation_with_two_tools() -> None:
    agent = weather_agent(TWO_TOOL_SCRIPT)
    first = await agent.run("Weather in Oslo?")
    assert first.ok and first.output == "It is sunny in Oslo, 68F."
    assert first.usage.input_tokens > 0
    provider = agent.provider
    assert isinstance(provider, ScriptedProvider)
    tool_messages = provider.requests[1].tool_results
    assert [m["content"] for m in tool_messages] == ["sunny in Oslo", '{"fahrenheit": 68.0}']
    # Content blocks, as harnessx 0.9.1 hands them to a provider (is_error only on errors).
    assert all(m["type"] == "tool_result" and "is_error" not in m for m in tool_messages)

    second = await agent.run("What did I ask?")
    assert second.output == "You asked about Oslo."
    assert second.session_id == first.session_id and second.run_id != first.run_id
    # The second request carries the whole conversation so far.
    messages = provider.requests[2].messages
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert [b["type"] for b in messages[1]["content"]] == ["text", "tool_use", "tool_use"]
    assert [b["tool_use_id"] for b in messages[2]["content"]] == [b["id"] for b in messages[1]["content"][1:]]


async def test_run_stream_payloads_are_typed_as_in_harnessx_0_9_1() -> None:
    agent = weather_agent(TWO_TOOL_SCRIPT)
    async with agent.run_stream("Weather?") as stream:
        events = [event async for event in stream]
    payloads = {event.type: type(event.data) for event in events}
    assert payloads == {
        RunEventType.TEXT_DELTA: str,
        RunEventType.TEXT_COMPLETE: str,
        RunEventType.TOOL_CALL_START: ToolCall,
        RunEventType.TOOL_CALL_COMPLETE: ToolCall,
        RunEventType.TOOL_RESULT: ToolResult,
        RunEventType.TURN_COMPLETE: str,
        RunEventType.RUN_RESULT: RunResult,
    }
    assert events[-2].data == "end_turn" and events[-1].data.output == "It is sunny in Oslo, 68F."
    # Steps are iterations (from 1); the attempt is the model call's.
    assert [(e.step_id, e.attempt_id) for e in events if e.type is RunEventType.TEXT_COMPLETE] == [
        ("1", "1"),
        ("2", "1"),
    ]


async def test_run_stream_event_order_and_cursors() -> None:
    agent = weather_agent(TWO_TOOL_SCRIPT)
    kinds: list[RunEventType] = []
    cursors: list[str | None] = []
    async with agent.run_stream("Weather?") as stream:
        async for event in stream:
            kinds.append(event.type)
            cursors.append(event.cursor)
        result = await stream.result()
    assert result.ok
    expected = [
        RunEventType.TEXT_DELTA,
        RunEventType.TOOL_CALL_START,
        RunEventType.TOOL_RESULT,
        RunEventType.TURN_COMPLETE,
        RunEventType.RUN_RESULT,
    ]
    positions = [kinds.index(kind) for kind in expected]
    assert positions == sorted(positions)
    assert kinds[-2:] == [RunEventType.TURN_COMPLETE, RunEventType.RUN_RESULT]
    assert cursors == [str(i) for i in range(1, len(cursors) + 1)]


async def test_stream_text_yields_only_text() -> None:
    agent = weather_agent(TWO_TOOL_SCRIPT)
    chunks = [chunk async for chunk in agent.stream_text("Weather?")]
    assert "".join(chunks) == "Checking.It is sunny in Oslo, 68F."
    assert len(chunks) > 2  # really streamed in pieces


async def test_stream_text_raises_when_run_does_not_complete() -> None:
    from harnessx import RunFailed

    def broken(request: ScriptedRequest) -> str:
        raise ValueError("the model is down")

    agent = weather_agent([], config=AgentConfig(retry=RetryPolicy(attempts=1)))
    agent._provider = ScriptedProvider(broken)
    with pytest.raises(RunFailed) as caught:
        async for _ in agent.stream_text("Weather?"):
            pass
    assert caught.value.result.failed


async def test_malformed_arguments_and_unknown_tool_become_error_results() -> None:
    script: list[ProviderResponse | str] = [
        ProviderResponse(
            tool_calls=[
                ToolCall("a", "get_weather", {"city": 3}),
                ToolCall("b", "get_weather", {}),
                ToolCall("c", "launch_rocket", {}),
                ToolCall("d", "convert", {}, parse_error="Expecting value: line 1 column 1"),
            ]
        ),
        "Sorry, fixed.",
    ]
    agent = weather_agent(script)
    result = await agent.run("go")
    assert result.ok
    provider = agent.provider
    assert isinstance(provider, ScriptedProvider)
    results = provider.requests[1].tool_results
    assert all(m["is_error"] for m in results)
    assert "city" in results[0]["content"] and "string" in results[0]["content"]
    assert "required property" in results[1]["content"] and "city" in results[1]["content"]
    assert "No tool named 'launch_rocket'" in results[2]["content"]
    assert "get_weather" in results[2]["content"]  # the model learns what exists
    assert "JSON" in results[3]["content"]


async def test_tool_exception_timeout_and_transient_retry() -> None:
    attempts: list[int] = []
    script: list[ProviderResponse | str] = [
        ProviderResponse(
            tool_calls=[ToolCall("1", "boom", {}), ToolCall("2", "slow", {}), ToolCall("3", "flaky", {})]
        ),
        "done",
    ]
    agent = Agent(provider=ScriptedProvider(script))

    @agent.tools.register()
    def boom() -> str:
        """Always fails."""
        raise RuntimeError("disk on fire")

    @agent.tools.register(timeout_seconds=0.05)
    async def slow() -> str:
        """Takes too long."""
        await asyncio.sleep(5)
        return "never"

    # Retry applies to tools that may run again (safe / idempotent), never to manual ones.
    @agent.tools.register(replay_policy="safe", retry=RetryPolicy(attempts=3, backoff_seconds=0))
    def flaky() -> str:
        """Fails twice, then works."""
        attempts.append(1)
        if len(attempts) < 3:
            raise TransientToolError("try again")
        return "ok"

    result = await agent.run("go")
    assert result.ok
    provider = agent.provider
    assert isinstance(provider, ScriptedProvider)
    boom_r, slow_r, flaky_r = provider.requests[1].tool_results
    assert boom_r["is_error"] and boom_r["content"] == "Tool execution error: RuntimeError: disk on fire"
    assert slow_r["is_error"] and "timed out" in slow_r["content"]
    assert flaky_r["content"] == "ok" and "is_error" not in flaky_r
    assert len(attempts) == 3


async def test_concurrent_tools_run_together_and_exclusive_ones_alone() -> None:
    running = 0
    peak = 0

    async def track() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1

    script: list[ProviderResponse | str] = [
        ProviderResponse(tool_calls=[ToolCall(str(i), "fetch", {"n": i}) for i in range(4)]),
        ProviderResponse(tool_calls=[ToolCall(str(i), "write", {"n": i}) for i in range(3)]),
        "done",
    ]
    agent = Agent(provider=ScriptedProvider(script))

    @agent.tools.register(concurrent=True)
    async def fetch(n: int) -> int:
        """Fetch."""
        await track()
        return n

    @agent.tools.register(concurrent=False)
    async def write(n: int) -> int:
        """Write."""
        await track()
        return n

    await agent.run("go")
    assert peak == 4
    peak = 0
    agent2 = Agent(provider=ScriptedProvider([script[1], "done"]))
    agent2.tools = agent.tools
    await agent2.run("go")
    assert peak == 1


async def test_tool_context_inside_sync_and_async_handlers() -> None:
    seen: list[tuple[str, int, int | None]] = []
    agent = Agent(
        provider=ScriptedProvider([ProviderResponse(tool_calls=[ToolCall("x", "probe", {})]), "ok"])
    )

    @agent.tools.register()
    def probe() -> str:
        """Probe."""
        context = current_tool_context()
        seen.append((context.execution_key, context.attempt, context.fencing_token))
        return "fine"

    result = await agent.run("go")
    # Iterations count from 1 in execution keys, as in harnessx 0.9.1.
    assert seen == [(f"{result.run_id}:1:x", 1, None)]
    with pytest.raises(RuntimeStateError):
        current_tool_context()


async def test_permissions_deny_ask_and_approver() -> None:
    script: list[ProviderResponse | str] = [
        ProviderResponse(tool_calls=[ToolCall("1", "get_weather", {"city": "Rome"})]),
        "final",
    ]
    denied = weather_agent(script, permissions={"get_weather": PermissionLevel.DENY})
    assert (await denied.run("go")).ok
    provider = denied.provider
    assert isinstance(provider, ScriptedProvider)
    assert provider.requests[1].tool_results[0]["content"] == "Permission denied"

    # A plain run with no one to ask fails closed: the model reads "Permission denied".
    unasked = weather_agent(script, permissions={"get_weather": "ask"})
    result = await unasked.run("go")
    assert result.ok and not result.pending
    provider = unasked.provider
    assert isinstance(provider, ScriptedProvider)
    assert provider.requests[1].tool_results[0]["content"] == "Permission denied"

    granted = weather_agent(script, permissions={"get_weather": "ask"})
    granted.permissions.grant_session("get_weather")
    assert (await granted.run("go")).ok
    provider = granted.provider
    assert isinstance(provider, ScriptedProvider)
    assert provider.requests[1].tool_results[0]["content"] != "Permission denied"

    answers: list[str] = []

    async def approve(call: ToolCall, tool: ToolDefinition) -> bool:
        answers.append(f"{call.name}:{tool.name}")
        return True

    approved = weather_agent(
        script, permissions=PermissionManager(rules={"get_weather": "ask"}, approval_callback=approve)
    )
    assert (await approved.run("go")).ok and answers == ["get_weather:get_weather"]
    declined = weather_agent(
        script,
        permissions=PermissionManager(
            rules={"get_weather": "ask"}, approval_callback=lambda call, tool: False
        ),
    )
    assert (await declined.run("go")).ok
    provider = declined.provider
    assert isinstance(provider, ScriptedProvider)
    assert provider.requests[1].tool_results[0]["content"] == "Permission denied"


async def test_limits_truncation_refusal_and_tool_calls_ignored_on_those_stops() -> None:
    loop_script = lambda request: ProviderResponse(tool_calls=[ToolCall("t", "get_weather", {"city": "X"})])  # noqa: E731
    limited = weather_agent([], config=AgentConfig(limits=Limits(max_iterations=3)))
    limited._provider = ScriptedProvider(loop_script)
    result = await limited.run("loop")
    assert result.limited and not result.ok and result.stop_reason == "max_iterations"
    provider = limited.provider
    assert isinstance(provider, ScriptedProvider)
    # Three model calls, then one last call with no tools offered, for the model's account.
    assert len(provider.requests) == 4
    assert provider.requests[-1].tools == [] and all(r.tools for r in provider.requests[:3])
    # The notice follows the last tool results in the same user turn, as a text block.
    *_, notice = provider.requests[-1].messages[-1]["content"]
    assert notice["type"] == "text" and "step limit" in notice["text"]

    # With no recoveries left, a reply cut off at its budget ends the run truncated; its call
    # (arguments perhaps incomplete) is answered, not run.
    cut_off = weather_agent(
        [
            ProviderResponse(
                text="Half an ans", stop_reason="max_tokens", tool_calls=[ToolCall("q", "get_weather", {})]
            )
        ],
        config=AgentConfig(limits=Limits(max_truncation_recoveries=0)),
    )
    truncated = await cut_off.run("go")
    assert truncated.truncated and truncated.output == "Half an ans"
    answer = cut_off.memory.get_messages()[-1]["content"][0]
    assert answer["tool_use_id"] == "q" and answer["is_error"] and "cut off" in answer["content"]

    refused = await weather_agent([ProviderResponse(text="No.", stop_reason=StopReason.REFUSAL)]).run("go")
    assert refused.refused and refused.stop_reason == "refusal"
    safety = await weather_agent([ProviderResponse(stop_reason="safety")]).run("go")
    assert safety.refused


async def test_tool_calls_run_even_when_stop_reason_says_end_turn() -> None:
    agent = weather_agent(
        [
            ProviderResponse(
                tool_calls=[ToolCall("1", "get_weather", {"city": "Rome"})], stop_reason="end_turn"
            ),
            "ok",
        ]
    )
    result = await agent.run("go")
    assert result.ok
    provider = agent.provider
    assert isinstance(provider, ScriptedProvider)
    assert provider.requests[1].tool_results[0]["content"] == "sunny in Rome"


async def test_provider_failure_ends_run_failed() -> None:
    agent = Agent(provider=ScriptedProvider([]))
    result = await agent.run("hello")
    assert result.failed and result.error is not None
    assert result.error["type"] == "ProviderError" and "add replies" in result.error["message"]


async def test_one_run_at_a_time() -> None:
    gate, called = asyncio.Event(), asyncio.Event()

    async def slow_script(request: ScriptedRequest) -> str:
        called.set()
        await gate.wait()
        return "done"

    agent = Agent(provider=ScriptedProvider(slow_script))
    first = asyncio.ensure_future(agent.run("one"))
    await asyncio.wait_for(called.wait(), 30)  # the first run is under way
    with pytest.raises(RuntimeStateError, match="one run at a time"):
        await agent.run("two")
    gate.set()
    assert (await first).ok
    assert (await agent.run("three")).ok


async def test_agent_without_provider_constructs_then_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "HARNESSX_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    # The original's defaults: an Anthropic model, whose missing key fails the run clearly.
    agent = Agent()
    assert (agent.config.provider, agent.config.model) == ("anthropic", "claude-sonnet-4-6")
    # As in harnessx 0.9.1, run() reports the failure in the result instead of raising it.
    failed = await agent.run("hi")
    assert failed.failed and failed.error is not None
    assert failed.error["type"] == "ConfigurationError" and "ANTHROPIC_API_KEY" in failed.error["message"]
    with pytest.raises(RunFailed, match="ANTHROPIC_API_KEY"):
        failed.raise_for_status()
    # provider=None picks one from the environment, and says what to set when there is none.
    unconfigured = await Agent(config=AgentConfig(provider=None)).run("hi")
    assert unconfigured.failed and unconfigured.error is not None
    assert unconfigured.error["type"] == "ConfigurationError"
    assert "ANTHROPIC_API_KEY" in unconfigured.error["message"]
    # The failed attempt does not leave the agent stuck.
    agent._provider = ScriptedProvider(["now it works"])
    assert (await agent.run("hi")).output == "now it works"


async def test_hooks_fire_with_their_payloads_and_a_failing_hook_is_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = weather_agent(TWO_TOOL_SCRIPT)
    heard: list[tuple[str, set[str]]] = []
    for event in HookEvent:
        agent.hooks.on(event, lambda ctx: heard.append((ctx.event.value, set(ctx.data))))

    def broken(ctx: object) -> None:
        raise ValueError("hook bug")

    registration = agent.hooks.on(HookEvent.TOOL_CALL_START, broken)
    result = await agent.run("go")
    assert result.ok and "hook bug" in caplog.text
    tool_call, llm_request = {"tool_call"}, set(LLM_REQUEST_KEYS)
    assert heard == [
        ("agent_start", {"message"}),
        ("loop_iteration_start", {"iteration"}),
        ("llm_request", llm_request),
        ("llm_response", {"response", "stop_reason", "provider"}),
        ("tool_call_start", tool_call),
        ("tool_call_start", tool_call),
        ("tool_call_end", {"tool_call", "result"}),
        ("tool_call_end", {"tool_call", "result"}),
        ("loop_iteration_end", {"iteration"}),
        ("loop_iteration_start", {"iteration"}),
        ("llm_request", llm_request),
        ("llm_response", {"response", "stop_reason", "provider"}),
        ("loop_iteration_end", {"iteration"}),
        ("agent_end", {"result"}),
    ]
    # A run in memory has no checkpoints; durable runs announce them (tests/integration).
    assert not any(name == "checkpoint" for name, _ in heard)
    registration.close()
    registration.close()  # idempotent
    caplog.clear()
    await agent.run("again")
    assert "hook bug" not in caplog.text


LLM_REQUEST_KEYS = (
    "system",
    "model",
    "max_tokens",
    "temperature",
    "stream",
    "message_count",
    "tool_count",
    "prefix_key",
)


async def test_middleware_transforms_requests_and_results() -> None:
    """The shorthand functions of this project, beside 0.9.1's class API."""
    agent = weather_agent(TWO_TOOL_SCRIPT)

    @agent.middleware.add_request
    def shout(request):  # type: ignore[no-untyped-def]
        request.system = request.system.upper()
        return request

    agent.middleware.add_result(lambda call, result: ToolResult(result.tool_call_id, f"[{result.content}]"))
    await agent.run("go")
    provider = agent.provider
    assert isinstance(provider, ScriptedProvider)
    assert provider.requests[0].system.startswith("YOU ARE A HELPFUL ASSISTANT.")
    assert provider.requests[1].tool_results[0]["content"] == "[sunny in Oslo]"


async def test_save_and_load_session_continues_conversation(tmp_path: Path) -> None:
    class Counter:
        name = "counter"

        def __init__(self) -> None:
            self.count = 0

        def export_state(self) -> dict[str, int]:
            return {"count": self.count}

        def import_state(self, state: dict[str, int]) -> None:
            self.count = state["count"]

    counter = Counter()
    counter.count = 7
    agent = weather_agent(
        TWO_TOOL_SCRIPT, config=AgentConfig(system_prompt="Be brief."), extensions=[counter]
    )
    await agent.run("Weather?")
    assert await agent.save_session(tmp_path) == agent.session_id
    assert (tmp_path / f"{agent.session_id}.json").exists()

    restored_counter = Counter()
    loaded = await Agent.load_session(
        agent.session_id, tmp_path, provider=ScriptedProvider(TWO_TOOL_SCRIPT), extensions=[restored_counter]
    )
    assert loaded.config.system_prompt == "Be brief."
    assert restored_counter.count == 7
    result = await loaded.run("What did I ask?")
    assert result.output == "You asked about Oslo."

    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigurationError, match="not a readable snapshot"):
        await Agent.load_session("bad", tmp_path)
    with pytest.raises(ConfigurationError, match="no saved session"):
        await Agent.load_session("missing", tmp_path)
    (tmp_path / "future.json").write_text(json.dumps({"version": 99}))
    with pytest.raises(ConfigurationError, match="upgrade harnessx"):
        await Agent.load_session("future", tmp_path)
    with pytest.raises(ConfigurationError, match="differs from the one saved"):
        await Agent.load_session(agent.session_id, tmp_path, config=AgentConfig(), extensions=[Counter()])


async def test_injected_provider_not_closed_but_built_one_is(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[str] = []

    class Tracking(ScriptedProvider):
        async def aclose(self) -> None:
            closed.append("x")

    async with Agent(provider=Tracking(["hi"])) as agent:
        await agent.run("hello")
    assert closed == []
    assert agent.closed
    with pytest.raises(RuntimeStateError, match="closed"):
        await agent.run("again")

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    built = Agent(config=AgentConfig(model="local", provider=None))
    provider = built.provider
    await built.aclose()
    await built.aclose()  # idempotent
    assert built._owns_provider and provider is not None
    # A closed agent still shows the provider it closed (0.9.1's programs read it then).
    assert built.provider is provider
