"""ToolRegistry registration rules and the tool-facing context."""

from __future__ import annotations

import pytest

from harnessx import (
    Agent,
    ConfigurationError,
    PermissionLevel,
    PermissionManager,
    ProviderResponse,
    ReplayPolicy,
    ScriptedProvider,
    ToolCall,
    ToolRegistry,
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
    assert PermissionManager().check(tool, call) is PermissionLevel.ASK
    assert PermissionManager(rules={"act": "deny"}).check(tool, call) is PermissionLevel.DENY
    assert PermissionManager(default="deny").check(None, ToolCall("2", "other", {})) is PermissionLevel.DENY
