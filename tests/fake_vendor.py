"""A model vendor on 127.0.0.1 for the rate-limit tests: an OpenAI-compatible
``/v1/chat/completions`` (plain or streamed) that answers every request with a short reply
and records, from its own side, when each request arrived, which model it named, the tokens
it reports using, and how many requests were open at once.

It runs in the test's event loop, or (``python tests/fake_vendor.py LOG``) in a process of its
own that prints its base URL and appends each call to LOG as a JSON line (``LOG N
RETRY_AFTER``: throttling its first N requests): a test process
busy following many runs would stamp arrivals late, in bunches. Worker processes reach it
over loopback through ``OpenAIProvider(base_url=...)``. ``throttle(n, retry_after)`` makes
the next ``n`` requests get a 429 with that ``Retry-After``, as a vendor over its limit does.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["FakeVendor", "VendorCall", "all_logged", "logged_calls", "most_in_window"]

COMPLETION_TOKENS = 20


@dataclass(frozen=True)
class VendorCall:
    """One request as the vendor saw it: ``at`` (epoch seconds of its arrival), its model,
    the tokens the reply reports (its messages' and tools' plus the completion's), its
    status, and the text of its last user message (which run sent it)."""

    at: float
    model: str
    tokens: int
    status: int
    prompt: str = ""


class FakeVendor:
    def __init__(self, on_call: Callable[[VendorCall], None] | None = None) -> None:
        self.on_call = on_call
        self.calls: list[VendorCall] = []
        self.open_now = 0
        self.most_open = 0
        self.reply_delay = 0.0
        self._throttled = 0
        self._retry_after = "1"
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self.base_url = ""

    def throttle(self, count: int, retry_after: str) -> None:
        self._throttled, self._retry_after = count, retry_after

    def served(self, model: str) -> list[VendorCall]:
        return [call for call in self.calls if call.model == model and call.status == 200]

    def _record(self, call: VendorCall) -> None:
        self.calls.append(call)
        if self.on_call is not None:
            self.on_call(call)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
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
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        line = await reader.readline()
        if not line:
            return False
        arrived = time.time()
        headers: dict[str, str] = {}
        while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = header.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        request = json.loads(body)
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            model = str(request.get("model"))
            users = [m.get("content") for m in request.get("messages", []) if m.get("role") == "user"]
            said = str(users[-1]) if users else ""
            if self._throttled > 0:
                self._throttled -= 1
                self._record(VendorCall(arrived, model, 0, 429, said))
                error = {"error": {"type": "rate_limit_error", "message": "slow down"}}
                return await _send(writer, 429, json.dumps(error), "application/json", self._retry_after)
            if self.reply_delay:
                await asyncio.sleep(self.reply_delay)
            # About four characters a token of the conversation and the tools offered, which
            # is what a vendor counts as the request's input.
            offered = [request.get("messages", []), request.get("tools", [])]
            prompt = max(1, len(json.dumps(offered, ensure_ascii=False)) // 4)
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": COMPLETION_TOKENS,
                "total_tokens": prompt + COMPLETION_TOKENS,
            }
            self._record(VendorCall(arrived, model, prompt + COMPLETION_TOKENS, 200, said))
            if request.get("stream"):
                events = [
                    {
                        "id": "c1",
                        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Done."}}],
                    },
                    {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                    {"id": "c1", "choices": [], "usage": usage},
                ]
                text = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
                return await _send(writer, 200, text, "text/event-stream")
            message = {"role": "assistant", "content": "Done."}
            reply = {"id": "c1", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
            return await _send(writer, 200, json.dumps({**reply, "usage": usage}), "application/json")
        finally:
            self.open_now -= 1


async def _send(
    writer: asyncio.StreamWriter, status: int, text: str, kind: str, retry_after: str | None = None
) -> bool:
    data = text.encode()
    head = [f"HTTP/1.1 {status} {'OK' if status == 200 else 'Too Many Requests'}", f"content-type: {kind}"]
    if retry_after is not None:
        head.append(f"retry-after: {retry_after}")
    head.append(f"content-length: {len(data)}")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
    await writer.drain()
    return True


def most_in_window(calls: list[VendorCall], window: float, *, tokens: bool = False) -> int:
    """The most calls (or, ``tokens``, their tokens) arriving in any window ``[t, t + window)``."""
    ordered = sorted(calls, key=lambda call: call.at)
    most = total = first = 0
    for call in ordered:
        total += call.tokens if tokens else 1
        while call.at - ordered[first].at >= window:
            total -= ordered[first].tokens if tokens else 1
            first += 1
        most = max(most, total)
    return most


def logged_calls(log: Path, model: str) -> list[VendorCall]:
    """The calls a vendor process served for ``model``, from its log."""
    return [call for call in all_logged(log) if call.model == model and call.status == 200]


def all_logged(log: Path) -> list[VendorCall]:
    """Every request a vendor process saw, refused ones too, from its log."""
    return [VendorCall(**json.loads(line)) for line in log.read_text().splitlines() if line.strip()]


async def _serve_forever(log: Path, throttled: int, retry_after: str) -> None:
    with log.open("a", encoding="utf-8") as out:

        def write(call: VendorCall) -> None:
            out.write(json.dumps(asdict(call)) + "\n")
            out.flush()

        vendor = FakeVendor(on_call=write)
        vendor.throttle(throttled, retry_after)
        await vendor.start()
        print(vendor.base_url, flush=True)
        await asyncio.Event().wait()  # until the test kills this process


if __name__ == "__main__":
    # LOG [N RETRY_AFTER]: the first N requests get a 429 with that Retry-After.
    arguments = sys.argv[1:]
    asyncio.run(
        _serve_forever(
            Path(arguments[0]),
            int(arguments[1]) if len(arguments) > 1 else 0,
            arguments[2] if len(arguments) > 2 else "1",
        )
    )
