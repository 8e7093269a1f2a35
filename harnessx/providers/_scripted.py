"""``ScriptedProvider``: a deterministic model for tests, examples and offline demos."""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harnessx._condense import SUMMARY_SYSTEM
from harnessx._errors import ProviderError
from harnessx._policies import PromptCacheHint
from harnessx.providers._base import LLMProvider, ProviderResponse, StreamChunk, TokenUsage

__all__ = ["ScriptedProvider", "ScriptedRequest"]


@dataclass
class ScriptedRequest:
    """A model request as a script function sees it."""

    model: str
    messages: list[dict[str, Any]]
    system: str
    tools: list[dict[str, Any]]
    max_tokens: int | None
    temperature: float | None
    turn: int
    """How many assistant messages the conversation already has."""

    @property
    def last_message(self) -> dict[str, Any]:
        return self.messages[-1] if self.messages else {}

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """The ``tool_result`` blocks that end the conversation (answers to the last calls),
        each with ``tool_use_id``, ``content`` and, for an error, ``is_error``."""
        last = self.last_message
        content = last.get("content") if last.get("role") == "user" else None
        if not isinstance(content, list):
            return []
        return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


Reply = ProviderResponse | str
Script = Sequence[Reply] | Callable[[ScriptedRequest], "Reply | Awaitable[Reply]"]


class ScriptedProvider(LLMProvider):
    """Answers from a script instead of a model.

    ``replies`` is either a list, whose entry ``n`` answers a conversation that already
    holds ``n`` assistant messages, or a function of a ``ScriptedRequest``. Both depend only
    on the conversation, never on how many calls this object has served, so a fresh process
    that resumes a saved run gets the reply that comes next, not the first one. A string
    reply is plain text. ``chunk_size`` splits streamed text into deltas of that many
    characters. Every request is recorded in ``requests``. A list script's entries answer
    the run's own calls; a history summary (a run condensing its conversation, see
    ``Limits.max_context_tokens``) is answered with a digest. A conversation condensed holds
    fewer assistant messages than the run made: script such a run with a function.
    """

    def __init__(self, replies: Script, *, chunk_size: int = 8, model: str = "scripted") -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        self._script = replies if callable(replies) else list(replies)
        self.chunk_size = chunk_size
        self.model = model
        self.requests: list[ScriptedRequest] = []

    def __repr__(self) -> str:
        kind = "function" if callable(self._script) else f"{len(self._script)} replies"
        return f"ScriptedProvider({kind})"

    async def create(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        system: str,
        tools: list[dict[str, Any]],
        max_tokens: int | None,
        temperature: float | None = None,
        cache: PromptCacheHint | None = None,
    ) -> ProviderResponse:
        if system == SUMMARY_SYSTEM and not callable(self._script):
            # A run condensing its history asks for a summary: a list script answers the
            # run's own turns only, so this one gets a digest of what is dropped.
            transcript = str(messages[-1].get("content", "")) if messages else ""
            return ProviderResponse(text="\n".join(line[:200] for line in transcript.splitlines()[-12:-2]))
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        request = ScriptedRequest(model, list(messages), system, list(tools), max_tokens, temperature, turn)
        self.requests.append(request)
        reply = await self._reply(request)
        response = ProviderResponse(text=reply) if isinstance(reply, str) else reply
        if not isinstance(response, ProviderResponse):
            raise ProviderError(f"script returned {type(reply).__name__}; return a str or ProviderResponse")
        if response.usage == TokenUsage():
            response.usage = TokenUsage(_estimate(messages, system), max(1, len(response.text) // 4))
        return response

    async def _reply(self, request: ScriptedRequest) -> Reply:
        if callable(self._script):
            reply = self._script(request)
            if inspect.isawaitable(reply):
                reply = await reply
            return reply
        if request.turn >= len(self._script):
            raise ProviderError(
                f"ScriptedProvider has {len(self._script)} replies but the conversation asks for "
                f"reply {request.turn + 1}; add replies to the script"
            )
        return self._script[request.turn]

    async def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        system: str,
        tools: list[dict[str, Any]],
        max_tokens: int | None,
        temperature: float | None = None,
        cache: PromptCacheHint | None = None,
    ) -> AsyncIterator[StreamChunk]:
        response = await self.create(
            model=model,
            messages=messages,
            system=system,
            tools=tools,
            max_tokens=max_tokens,
            temperature=temperature,
        )
        if response.thinking:
            yield StreamChunk("thinking_delta", response.thinking)
        text = response.text
        for start in range(0, len(text), self.chunk_size):
            yield StreamChunk("text_delta", text[start : start + self.chunk_size])
        yield StreamChunk("response", response)

    async def count_tokens(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        system: str,
        tools: list[dict[str, Any]],
    ) -> int:
        return _estimate(messages, system) + len(json.dumps(tools)) // 4


def _estimate(messages: list[dict[str, Any]], system: str) -> int:
    return max(1, (len(json.dumps(messages)) + len(system)) // 4)
