"""ToolRegistry registration rules and the tool-facing context."""

from __future__ import annotations

import pytest

from harnessx import (
    Agent,
    ConfigurationError,
    HookEvent,
    PermissionLevel,
    PermissionManager,
    ProviderResponse,
    ReplayPolicy,
    ScriptedProvider,
    ToolCall,
    ToolRegistry,
    ToolRetry,
    TransientToolError,
)


def test_schema_and_description_come_from_hints_and_docstring() -> None:
    tools = ToolRegistry()

    @tools.register(permission="ask", replay_policy="idempotent", timeout_seconds=5)
    def book(city: str, nights: int = 1, smoking: bool | None = None) -> str:
        """Book a hotel room.

        Args:
            city: Where to stay.
            nights: How many nights.
        """
        return "ok"

    tool = tools.get("book")
    assert tool is not None
    assert tool.description == "Book a hotel room."
    assert tool.permission is PermissionLevel.ASK and tool.replay_policy is ReplayPolicy.IDEMPOTENT
    schema = tool.input_schema
    assert schema["required"] == ["city"]
    assert schema["properties"]["city"] == {"type": "string", "description": "Where to stay."}
    assert schema["properties"]["nights"]["type"] == "integer"
    assert tools.specs() == [{"name": "book", "description": "Book a hotel room.", "input_schema": schema}]


def test_duplicates_fail_unless_replaced_and_bad_settings_are_refused() -> None:
    tools = ToolRegistry()

    @tools.register(name="x")
    def first() -> str:
        """First."""
        return "1"

    with pytest.raises(ConfigurationError, match="replace=True"):

        @tools.register(name="x")
        def second() -> str:
            """Second."""
            return "2"

    @tools.register(name="x", replace=True)
    def third() -> str:
        """Third."""
        return "3"

    assert tools.get("x") is not None and tools.get("x").handler is third  # type: ignore[union-attr]
    with pytest.raises(ConfigurationError, match="replay_policy"):
        tools.register(replay_policy="sometimes")
    with pytest.raises(ConfigurationError, match="not valid"):
        tools.register_with_schema("bad name!", "d", {"type": "object"}, lambda: None)
    with pytest.raises(ConfigurationError, match="object type"):
        tools.register_with_schema("arr", "d", {"type": "array"}, lambda: None)


async def test_register_with_schema_receives_arguments_as_given() -> None:
    received: list[dict[str, object]] = []
    agent = Agent(
        provider=ScriptedProvider(
            [ProviderResponse(tool_calls=[ToolCall("1", "lookup", {"sku": "A-1", "extra": [1, 2]})]), "done"]
        )
    )

    async def lookup(**arguments: object) -> str:
        received.append(arguments)
        return "found"

    agent.tools.register_with_schema(
        "lookup",
        "Look up a product.",
        {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]},
        lookup,
    )
    assert (await agent.run("go")).ok
    assert received == [{"sku": "A-1", "extra": [1, 2]}]


def test_permission_precedence() -> None:
    tools = ToolRegistry()

    @tools.register(permission="ask")
    def act() -> str:
        """Act."""
        return "ok"

    call = ToolCall("1", "act", {})
    tool = tools.get("act")
    assert PermissionManager().get_effective_permission(call.name, tool) is PermissionLevel.ASK
    assert (
        PermissionManager(rules={"act": "deny"}).get_effective_permission("act", tool) is PermissionLevel.DENY
    )
    manager = PermissionManager(PermissionLevel.DENY)
    assert manager.get_effective_permission("other", None) is PermissionLevel.DENY
    manager.set_permission("other", "allow")
    assert manager.get_effective_permission("other", None) is PermissionLevel.ALLOW


# ----------------------------------------------------- the original harnessx's tool API


def test_register_tool_and_tool_definitions() -> None:
    from harnessx import DEFAULT_TOOL_TIMEOUT_SECONDS, ToolDefinition, ToolNotFoundError, ToolRetry

    tools = ToolRegistry(default_timeout_seconds=9.0)

    def lookup(city: str) -> str:
        """Look a city up."""
        return city

    definition = tools.register_tool(lookup, permission=PermissionLevel.ASK, replay_policy="safe")
    assert isinstance(definition, ToolDefinition) and definition.name == "lookup"
    assert definition.permission_level is PermissionLevel.ASK and definition.replay_policy == "safe"
    assert definition.timeout_seconds == 9.0 and definition.description == "Look a city up."
    built = ToolDefinition("echo", "Echo.", {"type": "object", "properties": {}}, lambda: "e")
    assert built.timeout_seconds == DEFAULT_TOOL_TIMEOUT_SECONDS == 25.0
    assert tools.register_tool(built, retry=ToolRetry(2)).retry == ToolRetry(2)
    assert tools.has_tool("echo") and tools.list_tools() == ["lookup", "echo"]
    assert [t["name"] for t in tools.get_tool_params()] == ["lookup", "echo"]
    with pytest.raises(ToolNotFoundError, match="no tool named 'nope'"):
        tools.get_tool("nope")
    assert tools.unregister("echo") and not tools.unregister("echo")
    with pytest.raises(ConfigurationError, match="already registered"):
        tools.register_tool(lookup)


async def test_execute_checks_arguments_permissions_and_reuses_with_dedupe() -> None:
    ran: list[str] = []
    tools = ToolRegistry(dedupe_calls=True)

    @tools.register(permission="ask")
    async def act(item: str) -> str:
        """Act on an item."""
        ran.append(item)
        return f"did {item}"

    assert (await tools.execute(ToolCall("1", "act", {"item": 3}))).is_error  # wrong type
    assert (await tools.execute(ToolCall("2", "act", {"item": "a"}))).content == "Permission denied"
    allow = PermissionManager(approval_callback=lambda call, tool: True)
    first = await tools.execute(ToolCall("3", "act", {"item": "a"}), permissions=allow)
    second = await tools.execute(ToolCall("4", "act", {"item": "a"}), permissions=allow)
    assert (first.content, second.content, second.tool_call_id, ran) == ("did a", "did a", "4", ["a"])
    tools.reset_call_cache()
    await tools.execute(ToolCall("5", "act", {"item": "a"}), permissions=allow)
    assert ran == ["a", "a"]


async def test_permission_manager_api() -> None:
    from harnessx import CliPermissionManager

    tools = ToolRegistry()
    tools.register(name="write", permission="ask")(lambda: "w")
    tool = tools.get_tool("write")
    asked: list[str] = []

    async def callback(call: ToolCall, definition: object) -> bool:
        asked.append(call.name)
        return False

    manager = PermissionManager(PermissionLevel.ALLOW, approval_callback=callback)
    call = ToolCall("1", "write", {})
    assert manager.get_effective_permission("write", tool) is PermissionLevel.ASK
    assert await manager.check_permission(call, tool) is False and asked == ["write"]
    manager.grant_session("write")
    assert await manager.check_permission(call, tool) is True and asked == ["write"]
    manager.reset_session_grants()
    manager.set_permission("write", PermissionLevel.DENY)
    manager.grant_session("write")
    assert await manager.check_permission(call, tool) is False  # a grant never overrides DENY
    with pytest.raises(ConfigurationError):
        PermissionManager("sometimes")
    bad = PermissionManager(PermissionLevel.ASK, approval_callback=lambda call, tool: "yes")
    with pytest.raises(ConfigurationError, match="must return True or False"):
        await bad.check_permission(call, tool)
    assert CliPermissionManager().default_level is PermissionLevel.ASK


@pytest.mark.parametrize(
    "asked", ["search-web", "searchWeb", "functions.search_web", "default_api:search_web", "Search_Web"]
)
def test_resolve_tool_finds_the_one_tool_a_near_miss_means(asked: str) -> None:
    tools = ToolRegistry()
    for name in ("search_web", "read_file"):
        tools.register(name=name)(lambda: "ok")
    tool, name = tools.resolve_tool(asked)
    assert name == "search_web" and tool is tools.get("search_web")
    assert tools.resolve_tool("read_file")[1] == "read_file"


@pytest.mark.parametrize("asked", ["doit", "browse", "write"])
def test_resolve_tool_does_not_guess_a_name_that_could_mean_two_tools_or_none(asked: str) -> None:
    from harnessx.tools import ToolNotFoundError

    tools = ToolRegistry()
    for name in ("do_it", "do-it", "read_file", "write_file_now"):
        tools.register(name=name)(lambda: "ok")
    with pytest.raises(ToolNotFoundError, match=f"No tool named '{asked}'.*Available tools: do-it, do_it"):
        tools.resolve_tool(asked)
    with pytest.raises(ToolNotFoundError, match="Available tools: read_file"):
        tools.resolve_tool("do_it", among=["read_file"])  # only those offered


async def test_a_tool_retry_fires_the_retry_hook() -> None:
    tries = 0

    def flaky() -> str:
        nonlocal tries
        tries += 1
        if tries < 3:
            raise TransientToolError(f"throttled (try {tries})")
        return "third time"

    call = ProviderResponse(tool_calls=[ToolCall("c1", "flaky", {})])
    agent = Agent(provider=ScriptedProvider([call, "done"]))
    agent.tools.register_tool(
        flaky,
        permission=PermissionLevel.ALLOW,
        replay_policy="safe",
        retry=ToolRetry(attempts=3, backoff_seconds=1, max_backoff_seconds=0.01),
    )
    retries: list[dict[str, object]] = []
    agent.hooks.on(HookEvent.RETRY, lambda ctx: retries.append(dict(ctx.data)))
    assert (await agent.run("go")).ok and tries == 3
    # As 0.9.1's: one RETRY per failed try, its wait bounded by the tool's cap.
    assert retries == [
        {
            "kind": "tool",
            "name": "flaky",
            "attempt": n,
            "next_attempt": n + 1,
            "wait_seconds": 0.01,
            "error": f"throttled (try {n})",
            "provider": None,
        }
        for n in (1, 2)
    ]
