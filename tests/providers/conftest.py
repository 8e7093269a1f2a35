"""A scripted HTTP server on 127.0.0.1 for provider tests.

Each test queues the replies the server should give (status, headers, a JSON body or an
SSE body written in separate chunks) and afterwards inspects the requests it received.
The server is a small asyncio HTTP/1.1 implementation running in the test's own event
loop, so nothing is mocked on the client side: httpx really connects, sends and reads.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import pytest

from harnessx import Agent, AgentConfig, HookEvent, RetryPolicy, RunEvent, RunResult
from harnessx.providers import AnthropicProvider, LLMProvider, OpenAIProvider

FAST_RETRY = RetryPolicy(attempts=3, backoff_seconds=0.01, max_backoff_seconds=5.0, jitter=0.0)


@dataclass
class Reply:
    """One scripted response.

    ``json`` is sent with a Content-Length; ``sse`` chunks (text, or bytes exactly as
    recorded) are sent one by one with chunked transfer encoding. ``drop_after`` cuts the
    connection after that many SSE chunks without finishing the body; ``delay`` waits
    before sending anything.
    """

    status: int = 200
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    sse: list[str] | list[bytes] | None = None
    body: bytes | None = None
    drop_after: int | None = None
    delay: float = 0.0


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def sse_event(data: Any, event: str | None = None) -> str:
    """One server-sent event; ``data`` that is not a string is sent as JSON."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n"


class ScriptedServer:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Request] = []
        self.url = ""
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    # Shorthands, so that test modules need not import from this conftest.
    def reply_json(self, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.script(Reply(status, json=body, headers=headers or {}))

    def reply_sse(self, events: list[str] | list[bytes], *, drop_after: int | None = None) -> None:
        self.script(Reply(sse=events, drop_after=drop_after))

    def reply_raw(self, body: bytes, status: int, headers: dict[str, str] | None = None) -> None:
        self.script(Reply(status, body=body, headers=headers or {}))

    def reply_slowly(self, delay: float, body: Any) -> None:
        self.script(Reply(json=body, delay=delay))

    event = staticmethod(sse_event)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        # Handlers may still be waiting (a delayed reply the client gave up on).
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while await self._handle_one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up (e.g. it timed out); nothing left to do
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _handle_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection should end."""
        request_line = await reader.readline()
        if not request_line:
            return False
        method, path, _ = request_line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.requests.append(Request(method, path, headers, body))
        reply = self.replies.popleft() if self.replies else _unscripted(method, path)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        return await _write_reply(writer, reply)


def _unscripted(method: str, path: str) -> Reply:
    # 418 is not retried, so a test that sends more requests than it scripted fails fast.
    return Reply(418, {"error": {"type": "test_error", "message": f"no reply scripted for {method} {path}"}})


async def _write_reply(writer: asyncio.StreamWriter, reply: Reply) -> bool:
    reason = HTTPStatus(reply.status).phrase if reply.status in HTTPStatus._value2member_map_ else "Unknown"
    head = [f"HTTP/1.1 {reply.status} {reason}"]
    headers = dict(reply.headers)
    if reply.sse is not None:
        headers.setdefault("content-type", "text/event-stream")
        headers["transfer-encoding"] = "chunked"
    else:
        body = reply.body if reply.body is not None else json.dumps(reply.json).encode()
        if reply.body is None:
            headers.setdefault("content-type", "application/json")
        headers["content-length"] = str(len(body))
    head += [f"{name}: {value}" for name, value in headers.items()]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    if reply.sse is None:
        writer.write(body)
        await writer.drain()
        return True
    for number, chunk in enumerate(reply.sse):
        if reply.drop_after is not None and number >= reply.drop_after:
            writer.close()
            return False
        data = chunk if isinstance(chunk, bytes) else chunk.encode()
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()
        await asyncio.sleep(0)  # let the client see the chunks separately
    if reply.drop_after is not None:
        writer.close()
        return False
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    return True


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    scripted = ScriptedServer()
    await scripted.start()
    yield scripted
    await scripted.stop()


@dataclass
class Driven:
    """A run of an agent that uses the provider: how it ended, its events, its retries."""

    result: RunResult
    events: list[RunEvent]
    retries: list[dict[str, Any]]

    @property
    def waits(self) -> list[float]:
        return [retry["wait_seconds"] for retry in self.retries]


async def _drive(provider: LLMProvider, *, retry: RetryPolicy = FAST_RETRY, stream: bool = False) -> Driven:
    """Run one agent turn through ``provider``: the runtime's retry path, as every provider
    gets it (the providers themselves make one attempt per call). ``stream`` calls the
    provider's ``stream`` (server-sent events) instead of ``create`` (JSON)."""
    agent = Agent(config=AgentConfig(model="m", retry=retry), provider=provider)
    retries: list[dict[str, Any]] = []
    agent.hooks.on(HookEvent.RETRY, lambda context: retries.append(dict(context.data)))
    if stream:
        async with agent.run_stream("hi") as run:
            events = [event async for event in run]
            result = await run.result()
    else:
        events, result = [], await agent.run("hi")
    return Driven(result, events, retries)


Drive = Callable[..., Any]


@pytest.fixture
def drive() -> Drive:
    """``await drive(provider, retry=..., stream=...)`` -> ``Driven``."""
    return _drive


TEST_KEY = "sk-test-SECRET-0123456789"


@pytest.fixture
async def openai(server: ScriptedServer) -> AsyncIterator[Callable[..., OpenAIProvider]]:
    """Build OpenAI providers aimed at the scripted server; closed when the test ends."""
    made: list[OpenAIProvider] = []

    def make(**kwargs: Any) -> OpenAIProvider:
        kwargs.setdefault("base_url", f"{server.url}/v1")
        kwargs.setdefault("api_key", TEST_KEY)
        provider = OpenAIProvider(kwargs.pop("model", "gpt-test"), **kwargs)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


@pytest.fixture
async def anthropic(server: ScriptedServer) -> AsyncIterator[Callable[..., AnthropicProvider]]:
    """Build Anthropic providers aimed at the scripted server; closed when the test ends."""
    made: list[AnthropicProvider] = []

    def make(**kwargs: Any) -> AnthropicProvider:
        kwargs.setdefault("base_url", server.url)
        kwargs.setdefault("api_key", TEST_KEY)
        provider = AnthropicProvider(kwargs.pop("model", "claude-test"), **kwargs)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests must not pick up a developer's real keys or endpoints."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def unused_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
