"""AnthropicProvider and the API's own tools (web search, code execution, ...), as 0.9.1 has
them: a server tool in a request's tools goes as given; the blocks it adds to a reply
(``server_tool_use``, ``web_search_tool_result``, ...) are kept in order as ``provider``
blocks, stored with the conversation (memory, SQLite, PostgreSQL, a session snapshot) and
sent back to the API verbatim, a paused turn (``pause_turn``) included.

The replies are built in the API's wire format and checked against the vendor SDK's own
types (``anthropic.types.Message``; the SDK's stream accumulator assembles the same message
from the events).
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from anthropic import types as at
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types.message_create_params import (
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
)
from durable_support import BackendTarget
from pydantic import TypeAdapter
from sdk_wire import request_is_valid

from harnessx import Agent, AgentConfig, AgentRuntime, Middleware, ProviderResponse
from harnessx.providers import AnthropicProvider, OpenAIProvider, StreamChunk
from harnessx.providers.base import native_continuation

if TYPE_CHECKING:
    from conftest import ScriptedServer

MakeAnthropic = Callable[..., AnthropicProvider]
ASK: dict[str, Any] = {"model": "claude-test", "messages": [{"role": "user", "content": "?"}], "system": ""}
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
LOOKUP = {"name": "lookup", "description": "Look up.", "input_schema": {"type": "object", "properties": {}}}

SEARCH_CALL = {
    "type": "server_tool_use",
    "id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
    "name": "web_search",
    "input": {"query": "durable agent runs"},
}
SEARCH_RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE",
    "content": [
        {
            "type": "web_search_result",
            "url": "https://example.org/durable",
            "title": "Durable runs",
            "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2YSDA",
            "page_age": "April 30, 2025",
        }
    ],
}
CITED = {
    "type": "text",
    "text": "Durable runs survive a crash.",
    "citations": [
        {
            "type": "web_search_result_location",
            "url": "https://example.org/durable",
            "title": "Durable runs",
            "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm",
            "cited_text": "A durable run survives a crash of its process.",
        }
    ],
}
SEARCHING = {"type": "text", "text": "Let me search."}
SERVER_USE = {"web_search_requests": 1, "web_fetch_requests": 0}
# A whole reply that searched the web, as the API returns it.
BLOCKS: list[dict[str, Any]] = [SEARCHING, SEARCH_CALL, SEARCH_RESULT, CITED]


def wrapped(block: dict[str, Any]) -> dict[str, Any]:
    """A block of the API's own as ``ProviderResponse.content`` and the memory hold it."""
    if block["type"] in ("text", "thinking", "redacted_thinking", "tool_use"):
        return block
    return {"type": "provider", "provider": "anthropic", "data": block}


def sent(block: dict[str, Any]) -> dict[str, Any]:
    """A block as the request carries it back: the API's own verbatim, text as its text."""
    return {"type": "text", "text": block["text"]} if block["type"] == "text" else block


def message(blocks: list[dict[str, Any]], stop: str = "end_turn", mid: str = "msg_01") -> dict[str, Any]:
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": copy.deepcopy(blocks),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 2100, "output_tokens": 120, "server_tool_use": SERVER_USE},
    }


def events(blocks: list[dict[str, Any]], stop: str = "end_turn", mid: str = "msg_01") -> list[dict[str, Any]]:
    """``blocks`` streamed as the API streams them: a server tool's input in pieces, its
    result whole in its block's start, a citation in its own delta."""
    start = {**message([], mid=mid), "stop_reason": None, "usage": {"input_tokens": 2100, "output_tokens": 1}}
    out: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(blocks):
        if block["type"] == "server_tool_use":
            text = json.dumps(block["input"])
            out.append(
                {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}}
            )
            for piece in (text[:9], text[9:]):
                delta = {"type": "input_json_delta", "partial_json": piece}
                out.append({"type": "content_block_delta", "index": index, "delta": delta})
        elif block["type"] == "text":
            out.append(
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
            )
            for citation in block.get("citations") or []:
                delta = {"type": "citations_delta", "citation": citation}
                out.append({"type": "content_block_delta", "index": index, "delta": delta})
            delta = {"type": "text_delta", "text": block["text"]}
            out.append({"type": "content_block_delta", "index": index, "delta": delta})
        else:
            out.append({"type": "content_block_start", "index": index, "content_block": block})
        out.append({"type": "content_block_stop", "index": index})
    delta = {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}}
    out.append({**delta, "usage": {"output_tokens": 120, "server_tool_use": SERVER_USE}})
    out.append({"type": "message_stop"})
    return out


def sse(server: ScriptedServer, items: list[dict[str, Any]]) -> list[str]:
    return [server.event(item, event=item["type"]) for item in items]


def sdk_message(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` read by the SDK's own ``Message`` type and written back: the fixture is a
    reply the SDK knows block by block (not a fallback type), and stays what it was."""
    parsed = at.Message.model_validate(data)
    assert [type(b).__name__ for b in parsed.content if b.type != "text"] == [
        "ServerToolUseBlock",
        "WebSearchToolResultBlock",
    ][: sum(1 for b in parsed.content if b.type != "text")]
    return dict(parsed.model_dump(mode="json", exclude_unset=True))


def sdk_accumulated(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The message the SDK's own stream accumulator assembles from ``items``."""
    adapter: TypeAdapter[Any] = TypeAdapter(at.RawMessageStreamEvent)
    snapshot: Any = None
    buffers: dict[int, bytes] = {}
    for item in items:
        event = adapter.validate_python(item)
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=buffers)
    assert snapshot is not None
    return dict(snapshot.model_dump(mode="json", exclude_unset=True, exclude_none=True))


async def collect(stream: AsyncIterator[StreamChunk]) -> list[StreamChunk]:
    return [chunk async for chunk in stream]


# --------------------------------------------------------------------------- the fixtures


def test_the_fixtures_are_what_the_sdk_reads() -> None:
    reply = message(BLOCKS)
    assert sdk_message(reply)["content"] == BLOCKS
    assembled = sdk_accumulated(events(BLOCKS))
    assert assembled["content"] == BLOCKS
    assert assembled["stop_reason"] == "end_turn"


# --------------------------------------------------------------------------- requests


@pytest.mark.parametrize("streaming", [False, True], ids=["create", "stream"])
async def test_a_server_tool_goes_as_given(
    server: ScriptedServer, anthropic: MakeAnthropic, streaming: bool
) -> None:
    tools = [LOOKUP, {**LOOKUP, "name": "quiet", "eager_input_streaming": False}, WEB_SEARCH]
    before = copy.deepcopy(tools)
    provider = anthropic()
    if streaming:
        server.reply_sse(sse(server, events([SEARCHING])))
        await collect(provider.stream(**ASK, tools=tools, max_tokens=100))
    else:
        server.reply_json(message([SEARCHING]))
        await provider.create(**ASK, tools=tools, max_tokens=100)
    server.reply_json({"input_tokens": 40})
    await provider.count_tokens(**ASK, tools=tools)
    body, counted = (request.json for request in server.requests)
    by_name = {tool["name"]: tool for tool in body["tools"]}
    assert by_name["web_search"] == WEB_SEARCH  # not reshaped, no eager_input_streaming
    assert by_name["lookup"]["eager_input_streaming"] is True
    assert by_name["quiet"]["eager_input_streaming"] is False
    assert WEB_SEARCH in counted["tools"]
    assert tools == before, "the caller's tool definitions are left as they were"
    params = MessageCreateParamsStreaming if streaming else MessageCreateParamsNonStreaming
    assert request_is_valid(params, body) == []


# --------------------------------------------------------------------------- replies


async def test_a_reply_keeps_the_server_tools_blocks_in_order(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    reply = message(BLOCKS)
    server.reply_json(sdk_message(reply))
    response = await anthropic().create(**ASK, tools=[WEB_SEARCH], max_tokens=100)
    assert response.content == [wrapped(b) for b in BLOCKS]
    assert response.tool_calls == []  # the server ran the search: nothing for the run to run
    assert response.text == "Let me search.Durable runs survive a crash."
    assert response.raw == reply


async def test_a_streamed_reply_keeps_the_server_tools_blocks_in_order(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    items = events(BLOCKS)
    server.reply_sse(sse(server, items))
    chunks = await collect(anthropic().stream(**ASK, tools=[WEB_SEARCH], max_tokens=100))
    final = chunks[-1].data
    assert final.content == [wrapped(b) for b in BLOCKS]
    assert final.raw["content"] == sdk_accumulated(items)["content"] == BLOCKS
    assert final.tool_calls == []
    assert [c.data for c in chunks if c.kind == "text_delta"] == [SEARCHING["text"], CITED["text"]]


def test_an_open_server_call_is_a_native_continuation() -> None:
    def reply(*blocks: dict[str, Any], stop: str = "end_turn") -> ProviderResponse:
        return ProviderResponse(content=[wrapped(b) for b in blocks], stop_reason=stop)

    assert native_continuation(reply(SEARCHING, SEARCH_CALL))
    assert native_continuation(reply(SEARCHING, stop="pause_turn"))
    assert not native_continuation(reply(SEARCHING, SEARCH_CALL, SEARCH_RESULT, CITED))
    assert not native_continuation(ProviderResponse(text="plain"))


# --------------------------------------------------------------------------- sent back


class WebSearch(Middleware):
    """How a 0.9.1 program offers a server tool: its request middleware adds it."""

    async def before_llm_call(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return messages, [*tools, WEB_SEARCH]


def search_agent(provider: AnthropicProvider) -> Agent:
    agent = Agent(AgentConfig(model="claude-test", max_tokens=200, planning=False), provider=provider)
    agent.middleware.add(WebSearch())
    return agent


def the_searching_turn(body: dict[str, Any]) -> list[dict[str, Any]]:
    turns = [m for m in body["messages"] if m["role"] == "assistant"]
    searching = [t for t in turns if any(b.get("type") == "server_tool_use" for b in t["content"])]
    assert len(searching) == 1, body["messages"]
    return list(searching[0]["content"])


def script_paused_search(server: ScriptedServer) -> None:
    """The server pauses the turn after the search starts; asked again, it finishes it; a
    later run's reply is plain."""
    paused = [SEARCHING, SEARCH_CALL]
    server.reply_sse(sse(server, events(paused, "pause_turn", "msg_01")))
    server.reply_sse(sse(server, events([SEARCH_RESULT, CITED], "end_turn", "msg_02")))
    server.reply_sse(sse(server, events([{"type": "text", "text": "Nothing new."}], "end_turn", "msg_03")))


async def streamed(runner: Agent | AgentRuntime, prompt: str) -> Any:
    stream = runner.run_stream(prompt)
    async for _ in stream:
        pass
    return await stream.result()


def unmarked(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``blocks`` without the prompt cache's marker (a request's last block carries one)."""
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]


def assert_sent_back(server: ScriptedServer) -> None:
    continued, later_run = (request.json for request in server.requests[1:3])
    # The paused turn goes back as it stands, last, for the server to continue.
    assert continued["messages"][-1]["role"] == "assistant"
    assert unmarked(continued["messages"][-1]["content"]) == [sent(SEARCHING), SEARCH_CALL]
    # The next run sends the whole turn back: the server's blocks verbatim, in their places.
    assert the_searching_turn(later_run) == [sent(b) for b in BLOCKS]
    for body in (continued, later_run):
        assert WEB_SEARCH in unmarked(body["tools"])
        assert request_is_valid(MessageCreateParamsStreaming, body) == []


@pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"])
async def test_a_paused_search_is_continued_and_sent_back_verbatim(
    server: ScriptedServer,
    anthropic: MakeAnthropic,
    store: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Durable: the second run is driven by a fresh runtime from the conversation the store
    kept, so the blocks the request carries are the ones read back from the store."""
    script_paused_search(server)
    if store == "memory":
        async with search_agent(anthropic()) as agent:
            first = await streamed(agent, "Search, please.")
            assert (await streamed(agent, "Anything new?")).output == "Nothing new."
            shown = agent.memory.get_messages()
    else:
        location = (
            str(tmp_path / "runs.sqlite3") if store == "sqlite" else request.getfixturevalue("pg_database")
        )
        target = BackendTarget(store, location)
        async with (
            target.open() as backend,
            AgentRuntime(search_agent(anthropic()), backend=backend) as runtime,
        ):
            session_id = await runtime.start()
            first = await streamed(runtime, "Search, please.")
        async with (
            target.open() as backend,
            AgentRuntime(search_agent(anthropic()), backend=backend) as runtime,
        ):
            await runtime.start(session_id)
            assert (await streamed(runtime, "Anything new?")).output == "Nothing new."
            shown = runtime.agent.memory.get_messages()
    assert first.ok and first.output.endswith(CITED["text"])
    assert_sent_back(server)
    # The memory shows both replies' blocks as 0.9.1's does: the server's wrapped, in order.
    replies = [m["content"] for m in shown if m["role"] == "assistant"]
    assert replies[:2] == [[wrapped(SEARCHING), wrapped(SEARCH_CALL)], [wrapped(SEARCH_RESULT), CITED]]


async def test_a_session_snapshot_keeps_the_servers_blocks(
    server: ScriptedServer, anthropic: MakeAnthropic, tmp_path: Path
) -> None:
    server.reply_json(message(BLOCKS))
    server.reply_json(message([{"type": "text", "text": "Nothing new."}], mid="msg_02"))
    async with search_agent(anthropic()) as agent:
        assert (await agent.run("Search, please.")).ok
        saved = await agent.save_session(str(tmp_path))
        shown = agent.memory.get_messages()
    assert shown[1] == {"role": "assistant", "content": [wrapped(b) for b in BLOCKS]}
    async with await Agent.load_session(saved, str(tmp_path), provider=anthropic()) as loaded:
        loaded.middleware.add(WebSearch())
        assert loaded.memory.get_messages() == shown
        assert (await loaded.run("Anything new?")).output == "Nothing new."
    later = server.requests[1].json
    assert the_searching_turn(later) == [sent(b) for b in BLOCKS]
    assert request_is_valid(MessageCreateParamsNonStreaming, later) == []


async def test_a_middleware_may_not_change_the_servers_blocks(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    class Rewrite(Middleware):
        async def after_llm_call(self, response: Any) -> Any:
            blocks = response.content
            blocks[1]["data"]["input"] = {"query": "something else"}
            response.content = blocks
            return response

    server.reply_json(message(BLOCKS))
    async with search_agent(anthropic()) as agent:
        agent.middleware.add(Rewrite())
        result = await agent.run("Search, please.")
    assert result.failed and "signed or opaque" in result.error["message"]


async def test_a_middleware_editing_the_text_keeps_the_servers_blocks(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    class Shout(Middleware):
        async def after_llm_call(self, response: Any) -> Any:
            response.text = response.text.upper()
            return response

    server.reply_json(message(BLOCKS))
    async with search_agent(anthropic()) as agent:
        agent.middleware.add(Shout())
        assert (await agent.run("Search, please.")).ok
        shown = agent.memory.get_messages()[1]["content"]
    text = "LET ME SEARCH.DURABLE RUNS SURVIVE A CRASH."
    assert shown == [{"type": "text", "text": text}, wrapped(SEARCH_CALL), wrapped(SEARCH_RESULT)]


async def test_another_providers_blocks_are_not_sent(
    server: ScriptedServer, anthropic: MakeAnthropic
) -> None:
    """A conversation carried over from another provider (a fallback chain): its blocks mean
    nothing to this API and stay out; Anthropic's own stay out of an OpenAI request."""
    turn = [
        SEARCHING,
        {"type": "provider", "provider": "gemini", "data": {"thought_signature": "xyz"}},
        wrapped(SEARCH_CALL),
        wrapped(SEARCH_RESULT),
    ]
    messages = [{"role": "user", "content": "?"}, {"role": "assistant", "content": turn}]
    server.reply_json(message([{"type": "text", "text": "ok"}]))
    await anthropic().create(model="claude-test", messages=messages, system="", tools=[], max_tokens=100)
    assert server.requests[0].json["messages"][1]["content"] == [SEARCHING, SEARCH_CALL, SEARCH_RESULT]
    openai = {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    }
    server.reply_json(openai)
    async with OpenAIProvider("gpt-test", base_url=server.url + "/v1", api_key="k") as provider:
        await provider.create(model="gpt-test", messages=messages, system="", tools=[], max_tokens=100)
    assert server.requests[1].json["messages"][1] == {"role": "assistant", "content": SEARCHING["text"]}
