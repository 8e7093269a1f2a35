"""What the model reads about a call it got wrong, in harnessx 0.9.1's words, and the
near-miss it does not have to make again: a tool name wrong only in case or separators."""

from __future__ import annotations

from harnessx import Agent, AgentConfig, PermissionLevel, ProviderResponse, ScriptedProvider, ToolCall


def _agent(call: ToolCall, *names: str) -> tuple[Agent, list[str], ScriptedProvider]:
    provider = ScriptedProvider([ProviderResponse(tool_calls=[call], stop_reason="tool_use"), "done"])
    agent = Agent(config=AgentConfig(model="m", planning=False), provider=provider)
    ran: list[str] = []
    for name in names or ("search_web",):
        agent.tools.register_with_schema(
            name,
            name,
            {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
            lambda query, name=name: ran.append(f"{name}:{query}") or "found",
            permission=PermissionLevel.ALLOW,
        )
    return agent, ran, provider


def _answer(provider: ScriptedProvider) -> str:
    return str(provider.requests[-1].tool_results[0]["content"])


async def test_a_name_wrong_only_in_case_or_separators_runs_the_tool() -> None:
    for wrong in ("Search_Web", "search-web", "functions.search_web"):
        agent, ran, _ = _agent(ToolCall("c1", wrong, {"query": "x"}))
        assert (await agent.run("go")).ok
        assert ran == ["search_web:x"], wrong


async def test_an_ambiguous_or_unknown_name_is_told_what_exists() -> None:
    agent, ran, provider = _agent(ToolCall("c1", "DOIT", {"query": "x"}), "doit", "DoIt")
    await agent.run("go")
    assert ran == [] and _answer(provider).startswith("No tool named 'DOIT'.")
    agent, ran, provider = _agent(ToolCall("c1", "nonexistent", {}))
    await agent.run("go")
    assert "No tool named 'nonexistent'" in _answer(provider) and "search_web" in _answer(provider)
    agent, ran, provider = _agent(ToolCall("c1", "search_webb", {"query": "x"}))
    await agent.run("go")
    assert ran == [] and "Did you mean 'search_web'?" in _answer(provider), "a guess is offered, never run"


async def test_bad_arguments_are_one_line_naming_the_tool() -> None:
    agent, ran, provider = _agent(ToolCall("c1", "search_web", {"quary": "x"}))
    await agent.run("go")
    assert ran == []
    assert _answer(provider) == "Invalid arguments for 'search_web': 'query' is a required property"
