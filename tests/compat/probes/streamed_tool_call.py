"""A built-in provider's streamed tool call: the Anthropic provider, given the vendor's SDK
client, reads a stream recorded from a real model server (llama-server, in
``tests/providers/streams``) replayed on loopback. Observed: the chunks it yields other than
``progress`` (which only says the stream is alive; the packages send it at different
moments), the call the reply ends with, and the ``tool_call_delta`` events of a run that
streams the same conversation."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from _probe import emit, event, payload
from anthropic import AsyncAnthropic

from harnessx import Agent, AgentConfig, PermissionLevel, RunEventType
from harnessx.providers.anthropic import AnthropicProvider

STREAMS = Path(__file__).resolve().parents[2] / "providers" / "streams"
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
TOOL = {"name": "get_weather", "description": "Get the current weather for a city.", "input_schema": WEATHER}


class Replay:
    """A loopback server for the Anthropic API: the recorded streams in order, for each
    streamed message; no model limits (the Models API says 404); a fixed token count."""

    def __init__(self, recordings: list[str]) -> None:
        self.bodies = [(STREAMS / f"{name}.sse").read_bytes() for name in recordings]
        self.sent = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method, path, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
        headers = dict(
            line.decode().lower().split(": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line
        )
        await reader.readexactly(int(headers.get("content-length", "0")))
        if method == "GET":
            status, kind = "404 Not Found", "application/json"
            body = json.dumps(
                {"type": "error", "error": {"type": "not_found_error", "message": "no"}}
            ).encode()
        elif path.startswith("/v1/messages/count_tokens"):
            status, kind, body = "200 OK", "application/json", b'{"input_tokens": 40}'
        else:
            status, kind = "200 OK", "text/event-stream"
            body = self.bodies[min(self.sent, len(self.bodies) - 1)]
            self.sent += 1
        writer.write(
            f"HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()


def chunk(c: Any) -> list[Any]:
    return [c.kind, payload(c.data) if c.kind != "response" else None]


async def main() -> None:
    replay = Replay(
        [
            "llamacpp_anthropic_stream_tool_use",
            "llamacpp_anthropic_stream_tool_use",
            "llamacpp_anthropic_stream_after_tool_result",
        ]
    )
    server = await asyncio.start_server(replay.serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    def provider() -> AnthropicProvider:
        return AnthropicProvider(client=AsyncAnthropic(base_url=url, api_key="sk-test", max_retries=0))

    question = [{"role": "user", "content": "What is the weather in Oslo right now?"}]
    chunks = [
        c
        async for c in provider().stream(
            model="smollm2", messages=question, system="", tools=[TOOL], max_tokens=96
        )
    ]
    reply = chunks[-1].data

    agent = Agent(AgentConfig(model="smollm2", max_tokens=96), provider=provider())
    agent.tools.register_with_schema(
        "get_weather", "Get the current weather for a city.", WEATHER, lambda city: f"Sunny in {city}."
    )
    agent.permissions.set_permission("get_weather", PermissionLevel.ALLOW)
    async with agent, agent.run_stream("What is the weather in Oslo right now?") as stream:
        events = [e async for e in stream]
        result = await stream.result()
    server.close()
    await server.wait_closed()
    kinds = [e.type for e in events]
    deltas = [e for e in events if e.type is RunEventType.TOOL_CALL_DELTA]
    emit(
        {
            "chunks": [chunk(c) for c in chunks if c.kind != "progress"],
            "tool_calls": [[c.id, c.name, c.input] for c in reply.tool_calls],
            "run_status": str(result.status),
            "run_deltas": [event(e) for e in deltas],
            "delta_before_start": kinds.index(RunEventType.TOOL_CALL_DELTA)
            < kinds.index(RunEventType.TOOL_CALL_START),
            "joined": "".join(getattr(e.data, "partial_json", "") for e in deltas),
        }
    )


asyncio.run(main())
