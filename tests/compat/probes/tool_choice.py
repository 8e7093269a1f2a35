"""``tool_choice``: ``ToolChoice``, ``normalize_tool_choice`` / ``TOOL_CHOICES``, and what the
Anthropic provider, given the vendor's SDK client, sends for each choice (with tools and
without, created and streamed, from the argument and from ``ANTHROPIC_TOOL_CHOICE``), and
what it refuses. Observed on a loopback server that records the request bodies.

The OpenAI provider is not probed: 0.9.1's needs the ``openai`` package, which the original's
venv does not have (tests/providers/test_tool_choice.py checks ours against the SDK's types).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from _probe import emit
from anthropic import AsyncAnthropic

from harnessx import ToolChoice
from harnessx.providers.anthropic import AnthropicProvider
from harnessx.providers.base import TOOL_CHOICES, normalize_tool_choice

STREAM = Path(__file__).resolve().parents[2] / "providers" / "streams" / "llamacpp_anthropic_stream_text.sse"
TOOL = {
    "name": "get_weather",
    "description": "Weather.",
    "input_schema": {"type": "object", "properties": {}},
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "Hi."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 5, "output_tokens": 2},
}


class Recorder:
    """The Anthropic API on loopback: a message (or the recorded stream), the Models API
    answering 404; every request body is kept."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method = head.split(b" ", 1)[0]
        headers = dict(
            line.decode().lower().split(": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line
        )
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        if method == b"GET":
            status, kind = "404 Not Found", "application/json"
            body = json.dumps(
                {"type": "error", "error": {"type": "not_found_error", "message": "no"}}
            ).encode()
        else:
            request = json.loads(raw)
            self.bodies.append(request)
            status = "200 OK"
            if request.get("stream"):
                kind, body = "text/event-stream", STREAM.read_bytes()
            else:
                kind, body = "application/json", json.dumps(MESSAGE).encode()
        writer.write(
            f"HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()


def refusal(error: BaseException) -> dict[str, Any]:
    # A ValueError, as 0.9.1's; this project raises its ConfigurationError, a ValueError.
    return {"value_error": isinstance(error, ValueError)}


def refused(value: Any) -> dict[str, Any]:
    try:
        normalize_tool_choice(value)
    except Exception as error:
        return {**refusal(error), "names_the_choices": all(repr(c) in str(error) for c in TOOL_CHOICES)}
    return {"value_error": None}


async def main() -> None:
    recorder = Recorder()
    server = await asyncio.start_server(recorder.serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    def provider(**options: Any) -> AnthropicProvider:
        return AnthropicProvider(
            client=AsyncAnthropic(base_url=url, api_key="sk-test", max_retries=0), **options
        )

    async def sent(made: AnthropicProvider, *, tools: list[Any], streamed: bool = False) -> Any:
        request = {
            "model": "m",
            "messages": [{"role": "user", "content": "?"}],
            "system": "",
            "max_tokens": 20,
        }
        if streamed:
            [chunk async for chunk in made.stream(**request, tools=tools)]
        else:
            await made.create(**request, tools=tools)
        return recorder.bodies[-1].get("tool_choice", "<absent>")

    requests: dict[str, Any] = {}
    for name, option in [
        ("unset", None),
        ("auto", "auto"),
        ("any", "any"),
        ("none", "none"),
        ("upper_any", "ANY"),
        ("enum_none", ToolChoice.NONE),
    ]:
        made = provider(tool_choice=option)
        requests[name] = {
            "attribute": None
            if made.tool_choice is None
            else [type(made.tool_choice).__name__, made.tool_choice.value],
            "with_tools": await sent(made, tools=[TOOL]),
            "without_tools": await sent(made, tools=[]),
        }
    requests["streamed_any"] = await sent(provider(tool_choice="any"), tools=[TOOL], streamed=True)

    os.environ["ANTHROPIC_TOOL_CHOICE"] = "any"
    from_env = await sent(provider(), tools=[TOOL])
    argument_over_env = await sent(provider(tool_choice="auto"), tools=[TOOL])
    os.environ["ANTHROPIC_TOOL_CHOICE"] = "often"
    try:
        provider()
        env_refusal: dict[str, Any] = {"value_error": None}
    except Exception as error:
        env_refusal = refusal(error)
    del os.environ["ANTHROPIC_TOOL_CHOICE"]
    try:
        provider(tool_choice="required")
        argument_refusal: dict[str, Any] = {"value_error": None}
    except Exception as error:
        argument_refusal = refusal(error)

    server.close()
    await server.wait_closed()
    emit(
        {
            "enum": {
                "values": [choice.value for choice in ToolChoice],
                "is_str": isinstance(ToolChoice.ANY, str),
                "equals_value": ToolChoice.ANY == "any",
                "str": str(ToolChoice.ANY),
                "format": f"{ToolChoice.AUTO}",
                "json": json.dumps(ToolChoice.NONE),
                "upper": ToolChoice.ANY.upper(),
            },
            "TOOL_CHOICES": list(TOOL_CHOICES),
            "normalize": {
                "none": normalize_tool_choice(None),
                "empty": normalize_tool_choice(""),
                "member_is_kept": normalize_tool_choice(ToolChoice.ANY) is ToolChoice.ANY,
                "string_gives_member": normalize_tool_choice("any") is ToolChoice.ANY,
                "any_case": normalize_tool_choice("None") is ToolChoice.NONE,
            },
            "refused": {"required": refused("required"), "sometimes": refused("sometimes")},
            "requests": requests,
            "from_env": from_env,
            "argument_over_env": argument_over_env,
            "env_refusal": env_refusal,
            "argument_refusal": argument_refusal,
        }
    )


asyncio.run(main())
