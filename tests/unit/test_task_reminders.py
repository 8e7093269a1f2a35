"""The open task list rides with each request, as harnessx 0.9.1 sends it: after the last
turn, and each earlier copy kept where it was first sent, so that every request extends the
one before (the prompt cache keeps its prefix) and no request has two user turns in a row."""

from __future__ import annotations

import itertools

from harnessx import Agent, AgentConfig, ProviderResponse, ScriptedProvider, ToolCall

PLAN = [{"content": "a", "status": "in_progress"}, {"content": "b", "status": "pending"}]
TICKED = [{"content": "a", "status": "completed"}, {"content": "b", "status": "in_progress"}]


def _call(call_id: str, name: str, **arguments: object) -> ProviderResponse:
    return ProviderResponse(tool_calls=[ToolCall(call_id, name, dict(arguments))], stop_reason="tool_use")


async def test_each_request_extends_the_one_before_while_a_list_is_kept() -> None:
    provider = ScriptedProvider(
        [
            _call("c1", "write_todos", todos=PLAN),
            _call("c2", "read_todos"),
            _call("c3", "write_todos", todos=TICKED),
            "done for now",
            "b is left for later",
        ]
    )
    agent = Agent(config=AgentConfig(model="m"), provider=provider)
    await agent.run("plan it")
    await agent.run("go on")
    requests = [r.messages for r in provider.requests]
    for earlier, later in itertools.pairwise(requests[1:]):
        assert later[: len(earlier)] == earlier, "an earlier message changed between requests"
    for messages in requests:
        roles = [m["role"] for m in messages]
        assert all(a != b for a, b in itertools.pairwise(roles)), roles
    assert "0/2 complete" in str(requests[-1][1:3]), "the first copy stays where it was sent"
    tail = requests[-1][-1]
    assert tail["role"] == "user" and "1/2 complete" in str(tail["content"])
    stored = [
        m for m in agent.memory.get_messages() if m["role"] == "user" and isinstance(m["content"], list)
    ]
    assert all(b["type"] == "tool_result" for m in stored for b in m["content"]), "only the requests carry it"


async def test_no_reminder_without_an_open_list() -> None:
    provider = ScriptedProvider(["fine"])
    await Agent(config=AgentConfig(model="m"), provider=provider).run("hi")
    assert "Task list" not in str(provider.requests[0].messages)


async def test_a_list_the_program_sets_is_the_agents_until_the_model_writes_one() -> None:
    provider = ScriptedProvider(["on it", _call("c1", "write_todos", todos=TICKED), "done"])
    agent = Agent(config=AgentConfig(model="m"), provider=provider)
    agent.todos = PLAN
    assert agent.todos == PLAN
    await agent.run("start")
    assert "0/2 complete" in str(provider.requests[0].messages[-1]), "the model is shown the set list"
    assert agent.todos == PLAN and "Task list" not in str(agent.memory.get_messages())
    await agent.run("go on")
    assert agent.todos == TICKED, "the model's own list replaces it"
    try:
        agent.todos = [{"content": "", "status": "pending"}]
    except ValueError:
        pass
    else:
        raise AssertionError("a list that cannot be used is refused")
