"""The tool definitions a request carries, as a scripted server on loopback receives them.

0.9.1's Anthropic provider sends each tool as given (adding only ``eager_input_streaming``),
so the fields a program's request middleware puts on one (``cache_control`` for prompt
caching of the tool list, ``strict``, ``defer_loading``, ``input_examples``) reach the API;
ours kept only the name, description and schema. Its OpenAI provider sends a function's
name, description and parameters only (``strict`` dropped) and fails with a ``KeyError`` on a
tool in the Chat Completions form, which ours sends as given. (0.9.1's bodies were captured
on loopback for these cases, through its SDK clients.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anthropic as anthropic_sdk
import pytest
from anthropic.types.message_count_tokens_params import MessageCountTokensParams
from anthropic.types.message_create_params import (
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
)
from sdk_wire import request_is_valid

from harnessx import Agent, AgentConfig, Middleware
from harnessx.providers import AnthropicProvider, OpenAIProvider

if TYPE_CHECKING:
    from conftest import ScriptedServer

EPHEMERAL = {"type": "ephemeral"}
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


def message(text: str = "ok") -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }


class AnthropicToolFields(Middleware):
    """A 0.9.1 program's way to set Anthropic's own tool fields: a request middleware."""

    async def before_llm_call(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        fields: dict[str, dict[str, Any]] = {
            "get_weather": {"cache_control": EPHEMERAL, "strict": True, "input_examples": [{"city": "Oslo"}]},
            "get_time": {"defer_loading": True},
        }
        return messages, [{**tool, **fields.get(tool["name"], {})} for tool in tools]


def agent_with_two_tools(provider: AnthropicProvider | OpenAIProvider, *, prompt_cache: bool = True) -> Agent:
    agent = Agent(
        config=AgentConfig(
            model="claude-sonnet-4-6",
            system_prompt="Be brief.",
            planning=False,
            **({} if prompt_cache else {"prompt_cache": None}),
        ),
        provider=provider,
    )

    @agent.tools.register()
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        return "sunny"

    @agent.tools.register()
    def get_time(city: str) -> str:
        """Local time in a city."""
        return "noon"

    agent.middleware.add(AnthropicToolFields())
    return agent


def named(tools: list[dict[str, Any]], *names: str) -> list[dict[str, Any]]:
    by_name = {tool.get("name") or tool["function"]["name"]: tool for tool in tools}
    return [by_name[name] for name in names]


def reply_for(server: ScriptedServer, stream: bool) -> None:
    if stream:
        # A whole message and named events, as the vendor SDK's stream reader wants them.
        events: list[dict[str, Any]] = [
            {"type": "message_start", "message": {**message(), "content": [], "stop_reason": None}},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
            {"type": "message_stop"},
        ]
        server.reply_sse([server.event(event, event=event["type"]) for event in events])
    else:
        server.reply_json(message())


async def run(agent: Agent, stream: bool) -> None:
    if stream:
        async with agent.run_stream("Weather in Rome?") as events:
            [event async for event in events]
    else:
        assert (await agent.run("Weather in Rome?")).ok


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_tools_keep_the_fields_a_middleware_sets(
    server: ScriptedServer, anthropic: Callable[..., AnthropicProvider], stream: bool
) -> None:
    reply_for(server, stream)
    await run(agent_with_two_tools(anthropic(), prompt_cache=False), stream)
    sent = server.requests[0].json
    weather, time = named(sent["tools"], "get_weather", "get_time")
    assert weather == {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "input_schema": weather["input_schema"],
        "cache_control": EPHEMERAL,
        "strict": True,
        "input_examples": [{"city": "Oslo"}],
        "eager_input_streaming": True,
    }
    assert time["defer_loading"] is True and "cache_control" not in time
    params = MessageCreateParamsStreaming if stream else MessageCreateParamsNonStreaming
    assert request_is_valid(params, sent) == []


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_tools_keep_their_fields_through_an_sdk_client(
    server: ScriptedServer, anthropic: Callable[..., AnthropicProvider], stream: bool
) -> None:
    reply_for(server, stream)
    client = anthropic_sdk.AsyncAnthropic(base_url=server.url, api_key="sk-test", max_retries=0)
    tools = [
        {"type": "custom", "name": "a", "description": "A.", "input_schema": SCHEMA, "strict": True},
        {"name": "b", "description": "B.", "input_schema": SCHEMA, "cache_control": EPHEMERAL},
    ]
    request: dict[str, Any] = {
        "model": "claude-test",
        "messages": [{"role": "user", "content": "?"}],
        "system": "",
        "tools": tools,
        "max_tokens": 20,
    }
    provider = anthropic(client=client)
    if stream:
        [chunk async for chunk in provider.stream(**request)]
    else:
        await provider.create(**request)
    assert server.requests[0].json["tools"] == [{**tool, "eager_input_streaming": True} for tool in tools]


async def test_the_cache_hint_marks_the_last_tool_once_beside_a_programs_own_marker(
    server: ScriptedServer, anthropic: Callable[..., AnthropicProvider]
) -> None:
    server.reply_json(message())
    await agent_with_two_tools(anthropic()).run("Weather in Rome?")
    sent = server.requests[0].json
    weather, time = named(sent["tools"], "get_weather", "get_time")
    assert sent["tools"][-1] is time  # the agent's tools end with these two
    assert weather["cache_control"] == EPHEMERAL  # the program's
    assert time["cache_control"] == EPHEMERAL and time["defer_loading"] is True  # the hint's
    assert sent["system"][-1]["cache_control"] == EPHEMERAL
    assert sent["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
    assert str(sent).count("cache_control") == 4  # the API's limit


async def test_a_tool_is_sent_with_its_empty_description_and_counted_with_its_fields(
    server: ScriptedServer, anthropic: Callable[..., AnthropicProvider]
) -> None:
    server.reply_json({"input_tokens": 12})
    tools = [
        {"name": "a", "description": "", "input_schema": SCHEMA, "cache_control": EPHEMERAL},
        {"name": "b", "input_schema": SCHEMA, "strict": True},
    ]
    counted = await anthropic().count_tokens(
        model="claude-test", messages=[{"role": "user", "content": "?"}], system="", tools=tools
    )
    assert counted == 12
    sent = server.requests[0].json
    assert sent["tools"] == tools  # as 0.9.1: the empty description too, no eager flag
    assert request_is_valid(MessageCountTokensParams, sent) == []


async def test_an_anthropic_tool_without_a_schema_gets_an_empty_one(
    server: ScriptedServer, anthropic: Callable[..., AnthropicProvider]
) -> None:
    # 0.9.1 sends it without, which the API refuses; the one deliberate difference.
    server.reply_json(message())
    await anthropic().create(
        model="claude-test",
        messages=[{"role": "user", "content": "?"}],
        system="",
        tools=[{"name": "a", "description": "A.", "strict": True}],
        max_tokens=20,
    )
    [tool] = server.requests[0].json["tools"]
    assert tool["input_schema"] == {"type": "object", "properties": {}} and tool["strict"] is True


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_functions_carry_name_description_and_parameters_only_as_0_9_1s(
    server: ScriptedServer, openai: Callable[..., OpenAIProvider], stream: bool
) -> None:
    if stream:
        server.reply_sse(
            [
                server.event({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": None}]}),
                server.event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                "data: [DONE]\n\n",
            ]
        )
    else:
        server.reply_json(
            {
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
                ]
            }
        )
    await run(agent_with_two_tools(openai(), prompt_cache=False), stream)
    weather, time = named(server.requests[0].json["tools"], "get_weather", "get_time")
    # strict is not passed on: strict mode refuses schemas 0.9.1's requests send without it.
    assert weather == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": weather["function"]["parameters"],
        },
    }
    assert time["function"].keys() == {"name", "description", "parameters"}


async def test_an_openai_tool_in_the_apis_own_form_is_sent_as_given(
    server: ScriptedServer, openai: Callable[..., OpenAIProvider]
) -> None:
    server.reply_json(
        {
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
            ]
        }
    )
    native = {
        "type": "function",
        "function": {"name": "a", "description": "A.", "parameters": SCHEMA, "strict": True},
    }
    canonical = {"name": "b", "description": "B.", "input_schema": SCHEMA}
    await openai().create(
        model="gpt-test",
        messages=[{"role": "user", "content": "?"}],
        system="",
        tools=[native, canonical],
        max_tokens=20,
    )
    sent_native, sent_canonical = server.requests[0].json["tools"]
    assert sent_native == native
    assert sent_canonical["function"] == {"name": "b", "description": "B.", "parameters": SCHEMA}
