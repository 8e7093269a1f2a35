"""harnessx.execution's step functions over the original's run-state dict, and the
planning built-in's module (harnessx.builtin.planning): 0.9.1's names, this engine's rules."""

from __future__ import annotations

from typing import Any

import pytest

from harnessx import ConfigurationError, ToolCall, ToolRegistry
from harnessx.execution import cancel_state, close_open_tool_calls, next_command, transition


def _turn(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": i, "name": "probe", "input": {}} for i in ids],
    }


def _model_state(stop: str, calls: list[str], messages: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    response = {
        "text": "part",
        "stop_reason": stop,
        "tool_calls": [{"id": c, "name": "probe", "input": {}} for c in calls],
    }
    state: dict[str, Any] = {"phase": "model", "status": "running", "response": response}
    if messages is not None:
        state["messages"] = messages
        state["tools"] = []
    return state


@pytest.mark.parametrize("stop", ["end_turn", "stop", "tool_use", "something_new"])
def test_calls_run_whatever_the_stop_reason_says(stop: str) -> None:
    assert transition(_model_state(stop, ["c1"]), "model", {})["phase"] == "prepare_tools"


@pytest.mark.parametrize(("stop", "answer"), [("max_tokens", "token budget"), ("refusal", "refused")])
def test_a_cut_off_or_refused_reply_finishes_and_answers_its_calls(stop: str, answer: str) -> None:
    state = _model_state(stop, ["c1"], messages=[_turn("c1")])
    advanced = transition(state, "model", {})
    assert advanced["phase"] == "finish" and advanced["stop_reason"] == stop and advanced["output"] == "part"
    block = advanced["messages"][-1]["content"][0]
    assert advanced["messages"][-1]["role"] == "user"
    assert block["tool_use_id"] == "c1" and block["is_error"] is True and answer in block["content"]
    assert state["phase"] == "model", "the state passed in is not changed"


def test_the_other_commands_move_the_phase_on() -> None:
    state = {"phase": "prepare_model", "status": "running"}
    assert transition(state, "prepare_model", {})["phase"] == "model"
    assert transition(state, "prepare_model", {"phase": "compact"})["phase"] == "compact"
    assert transition(state, "prepare_tools", {})["phase"] == "tools"
    assert transition(state, "collect_tools", {})["phase"] == "prepare_model"
    done = transition(state, "finish", {})
    assert (done["phase"], done["status"], next_command(done)) == ("result", "completed", "result")
    assert next_command({"phase": "tools", "status": "running"}) == "tools"


def test_closing_keeps_recorded_results_and_never_answers_twice() -> None:
    state = {
        "messages": [_turn("c1", "c2")],
        "tools": [{"call": {"id": "c1"}, "raw_result": {"content": "ran", "is_error": False}}],
    }
    once = close_open_tool_calls(dict(state), "never ran")
    answers = {b["tool_use_id"]: b for b in once["messages"][-1]["content"]}
    assert (answers["c1"]["content"], answers["c1"]["is_error"]) == ("ran", False)
    assert (answers["c2"]["content"], answers["c2"]["is_error"]) == ("never ran", True)
    assert close_open_tool_calls(dict(once), "never ran")["messages"] == once["messages"]


def test_a_cancelled_state_answers_open_calls_as_possibly_run() -> None:
    cancelled = cancel_state({"status": "running", "messages": [_turn("c1")], "tools": []})
    assert cancelled["status"] == "cancelled"
    assert (
        cancelled["messages"][-1]["content"][0]["content"]
        == "Run cancelled; execution outcome may be unknown."
    )


def test_the_planning_bundle_loads_into_a_bare_registry() -> None:
    from harnessx.builtin.planning import PLANNING_GUIDANCE, normalize, render

    registry = ToolRegistry()
    assert set(registry.load_builtin("planning")) == {"write_todos", "read_todos"}
    assert "Send the whole list every time" in registry.get_tool("write_todos").description
    cleaned, demoted = normalize(
        [{"content": "a", "status": "in_progress"}, {"content": "b", "status": "in_progress"}]
    )
    assert demoted == ["b"] and "0/2 complete" in render(cleaned) and PLANNING_GUIDANCE
    with pytest.raises(ConfigurationError, match="not supported by this harnessx yet"):
        ToolRegistry().load_builtin("filesystem")


async def test_a_corrected_list_is_reported_in_the_original_words() -> None:
    registry = ToolRegistry()
    registry.load_builtin("planning")
    todos = [{"content": "Read", "status": "in_progress"}, {"content": "Fix", "status": "in_progress"}]
    result = await registry.execute(ToolCall("c1", "write_todos", {"todos": todos}))
    assert 'kept "Read", set "Fix" back to pending' in result.content


def test_the_engine_module_has_what_has_a_counterpart() -> None:
    from harnessx import Agent, AgentConfig, ScriptedProvider
    from harnessx.builtin.planning import PLANNING_GUIDANCE
    from harnessx.engine import MAX_CONDENSATIONS, coalesce_same_role, render_for_summary

    joined = coalesce_same_role(
        [
            {"role": "user", "content": "one"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "r"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
            {"role": "user", "content": "two"},
        ]
    )
    assert [m["content"] for m in joined] == [
        [{"type": "text", "text": "one"}, {"type": "tool_result", "tool_use_id": "c1", "content": "r"}],
        [{"type": "text", "text": "a"}],
        "two",
    ]
    rendered = render_for_summary(
        [
            {"role": "assistant", "content": [{"type": "tool_use", "name": "grep", "input": {"q": "x"}}]},
            {"role": "user", "content": [{"type": "tool_result", "content": "y" * 500, "is_error": True}]},
        ],
        max_block_chars=100,
    )
    assert '[assistant tool call] grep({"q": "x"})' in rendered and "[tool error] " + "y" * 100 in rendered
    assert "y" * 101 not in rendered and MAX_CONDENSATIONS == 3
    with pytest.raises(ImportError, match="internal module with no counterpart"):
        from harnessx.engine import execute_tool  # noqa: F401
    briefed = Agent(config=AgentConfig(system_prompt="You are terse."), provider=ScriptedProvider(["x"]))
    assert briefed._build_system_prompt() == f"You are terse.\n\n{PLANNING_GUIDANCE}"
    plain = Agent(
        config=AgentConfig(system_prompt="You are terse.", planning=False), provider=ScriptedProvider(["x"])
    )
    assert plain._build_system_prompt() == "You are terse."


async def test_a_snapshot_carries_a_session_and_what_its_provider_learned_to_another_agent() -> None:
    """0.9.1's engine.snapshot / restore (what save_session and load_session write and
    read): the conversation, metadata, usage, task list, whole results and the model limits
    the provider learned reach an agent with another provider object."""
    from harnessx import Agent, AgentConfig, Limits, ProviderResponse, ScriptedProvider
    from harnessx.engine import new_state, restore, snapshot
    from harnessx.models import learn_model_limits, resolve_model_limits

    todos = [{"content": "a", "status": "pending"}]
    first_provider = ScriptedProvider(
        [
            ProviderResponse(tool_calls=[ToolCall("c1", "dump", {})]),
            ProviderResponse(tool_calls=[ToolCall("c2", "write_todos", {"todos": todos})]),
            "done",
        ]
    )
    second_provider = ScriptedProvider(["x"])
    learn_model_limits("model-a", provider=first_provider, max_output=2048)
    big = "line\n" * 5000
    first = Agent(config=AgentConfig(limits=Limits(max_result_chars=1000)), provider=first_provider)
    first.tools.register(name="dump")(lambda: big)
    assert (await first.run("go")).output == "done"
    first.session_metadata["who"] = "me"
    saved = {**new_state(first, "go"), **await snapshot(first)}
    assert saved["provider_state"] == {"limits": {"model-a": {"max_output": 2048}}}
    assert saved["results"] == {"c1": big} and saved["todos"] == todos
    second = Agent(provider=second_provider)
    assert (await resolve_model_limits(second_provider, "model-a")).max_output != 2048
    await restore(second, saved)
    assert (await resolve_model_limits(second_provider, "model-a")).max_output == 2048
    assert second.session_id == first.session_id and second.session_metadata == {"who": "me"}
    assert second.memory.get_messages() == first.memory.get_messages()
    assert second.memory.stored_result("c1") == big and second.todos == first.todos
    assert second.total_usage == first.total_usage and second.lifetime_iterations == first.lifetime_iterations


async def test_await_with_notices_says_it_waits_and_a_cancel_ends_the_work() -> None:
    import asyncio

    from harnessx import ProgressPolicy, RunEventType
    from harnessx.engine import await_with_notices

    notices: list[tuple[RunEventType, dict[str, object]]] = []

    async def emit(kind: RunEventType, data: dict[str, object]) -> None:
        notices.append((kind, data))

    async def slow(value: str) -> str:
        await asyncio.sleep(0.25)
        return value

    policy = ProgressPolicy(first_after_seconds=0.1, repeat_every_seconds=0.1)
    assert await await_with_notices(slow("ok"), policy, emit, on="tool", name="grep") == "ok"
    assert [kind for kind, _ in notices] == [RunEventType.WAITING, RunEventType.WAITING]
    assert notices[0][1] == {"on": "tool", "seconds": 0.1, "name": "grep"}
    assert (
        await await_with_notices(slow("off"), ProgressPolicy(first_after_seconds=None), emit, on="x") == "off"
    )
    assert len(notices) == 2
    started, stopped = asyncio.Event(), asyncio.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Future()
        finally:
            stopped.set()

    task = asyncio.create_task(await_with_notices(forever(), policy, emit, on="tool"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stopped.is_set()  # the work ended before the wait returned


def test_a_first_state_in_the_original_form() -> None:
    from harnessx import Agent, AgentConfig, ScriptedProvider
    from harnessx.engine import new_state

    agent = Agent(config=AgentConfig(planning=False), provider=ScriptedProvider(["x"]))
    agent.memory.add_user_message("earlier")
    state = new_state(agent, "go", durable=True)
    assert (state["phase"], state["status"], state["session_id"]) == ("start", "running", agent.session_id)
    assert state["messages"] == [{"role": "user", "content": "earlier"}] and state["tools"] == []
    assert next_command(state) == "start" and state["durable"] is True and state["todos"] == []


async def test_a_busy_agent_says_so() -> None:
    import asyncio

    from harnessx import Agent, AgentConfig, RuntimeStateError, ScriptedProvider

    started, release = asyncio.Event(), asyncio.Event()

    async def slow(request: object) -> str:
        started.set()
        await release.wait()
        return "done"

    agent = Agent(config=AgentConfig(planning=False), provider=ScriptedProvider(slow))
    first = asyncio.ensure_future(agent.run("first"))
    await started.wait()
    with pytest.raises(RuntimeStateError, match="busy"):
        await agent.run("second")
    release.set()
    assert (await first).ok


async def test_leaving_an_agent_stream_early_ends_its_run() -> None:
    import asyncio

    from harnessx import Agent, AgentConfig, ScriptedProvider

    started, calls = asyncio.Event(), []

    async def slow(request: object) -> str:
        calls.append(request)
        started.set()
        await asyncio.Event().wait()  # never answers
        return "late"

    agent = Agent(config=AgentConfig(planning=False), provider=ScriptedProvider(slow))
    async with agent.run_stream("first"):
        await started.wait()
    assert not agent.busy, "the run ended with its stream"
    assert len(calls) == 1

    quick = Agent(config=AgentConfig(planning=False), provider=ScriptedProvider(["done"]))
    async with quick.run_stream("go") as stream:
        events = [e async for e in stream]
    assert events[-1].type.value == "run_result" and (await stream.result()).output == "done"
