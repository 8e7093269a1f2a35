"""``FallbackProvider`` and a turn only one member can continue (``native_continuation``):
a paused turn, or a server tool's call without its result. The next call goes to the member
that left it open, whose failure is not handed to another member; ``export_state`` /
``restore_state`` carry that (0.9.1's methods)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from harnessx import ProviderResponse
from harnessx.providers import LLMProvider, StreamChunk
from harnessx.providers.fallback import FallbackProvider

REQUEST: dict[str, Any] = {"model": "m", "messages": [], "tools": [], "system": "", "max_tokens": 100}
PAUSED = ProviderResponse(
    stop_reason="pause_turn",
    content=[
        {"type": "provider", "provider": "anthropic", "data": {"type": "redacted_thinking", "data": ""}}
    ],
)
SEARCHING = ProviderResponse(
    content=[
        {"type": "text", "text": "Searching."},
        {
            "type": "provider",
            "provider": "anthropic",
            "data": {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}},
        },
    ]
)


class Scripted(LLMProvider):
    def __init__(self, *replies: ProviderResponse | BaseException) -> None:
        self.replies = list(replies)
        self.calls = 0

    def _next(self) -> ProviderResponse:
        self.calls += 1
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return copy.deepcopy(reply)

    async def create(self, **kwargs: Any) -> ProviderResponse:
        return self._next()

    async def stream(self, **kwargs: Any) -> Any:
        yield StreamChunk("response", self._next())

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


@pytest.mark.parametrize("opening", [PAUSED, SEARCHING], ids=["paused", "open_server_call"])
@pytest.mark.parametrize("streamed", [False, True], ids=["create", "stream"])
async def test_an_open_turn_pins_its_member(opening: ProviderResponse, streamed: bool) -> None:
    primary = Scripted(opening, ConnectionError("down"), ProviderResponse(text="done"))
    backup = Scripted(ProviderResponse(text="must not answer"))
    chain = FallbackProvider(primary, fallbacks=[backup])

    async def call() -> ProviderResponse:
        if not streamed:
            return await chain.create(**REQUEST)
        chunks = [chunk async for chunk in chain.stream(**REQUEST)]
        return chunks[-1].data

    await call()
    with pytest.raises(ConnectionError):  # the run retries it; the backup cannot continue it
        await call()
    assert (await call()).text == "done"
    assert backup.calls == 0


async def test_a_finished_turn_unpins() -> None:
    primary = Scripted(PAUSED, ProviderResponse(text="done"), ConnectionError("down"))
    backup = Scripted(ProviderResponse(text="backup"))
    chain = FallbackProvider(primary, fallbacks=[backup])
    await chain.create(**REQUEST)
    await chain.create(**REQUEST)
    assert (await chain.create(**REQUEST)).text == "backup"


async def test_the_pin_survives_export_and_restore() -> None:
    """0.9.1's own test: the state goes through JSON (a session snapshot) and back."""
    primary = Scripted(PAUSED, ConnectionError("down"))
    backup = Scripted(ProviderResponse(text="must not answer"))
    chain = FallbackProvider(primary, fallbacks=[backup])
    await chain.create(**REQUEST)
    saved = json.loads(json.dumps(chain.export_state()))
    assert saved["pinned"] == 0
    again = FallbackProvider(primary, fallbacks=[backup])
    again.restore_state(saved)
    with pytest.raises(ConnectionError):
        await again.create(**REQUEST)
    assert backup.calls == 0


def test_learned_limits_go_with_the_state() -> None:
    primary, backup = Scripted(), Scripted()
    chain = FallbackProvider(primary, fallbacks=[backup])
    backup._harness_model_limits = {"gpt": {"context_window": 8000}}  # type: ignore[attr-defined]
    chain._harness_model_limits = {"m": {"max_output": 4096}}  # type: ignore[attr-defined]
    saved = json.loads(json.dumps(chain.export_state()))
    fresh = FallbackProvider(Scripted(), fallbacks=[Scripted()])
    fresh.restore_state(saved)
    assert fresh._harness_model_limits == {"m": {"max_output": 4096}}  # type: ignore[attr-defined]
    assert fresh.export_state() == saved
