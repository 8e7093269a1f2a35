"""Request and result middleware.

Request middleware sees (and may replace) each model request before it is sent. Result
middleware transforms a tool's result *after* its raw result is committed, so it may run
again when a run is recovered: it must tolerate replay.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from harnessx._results import ToolResult
from harnessx.providers._base import ToolCall

__all__ = ["Middleware", "ModelRequest", "RequestMiddleware", "ResultMiddleware"]


@dataclass
class ModelRequest:
    """Everything the next model call will receive."""

    model: str
    messages: list[dict[str, Any]]
    system: str
    tools: list[dict[str, Any]]
    max_tokens: int | None
    temperature: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def provider_kwargs(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": self.messages,
            "system": self.system,
            "tools": self.tools,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }


RequestMiddleware = Callable[[ModelRequest], "ModelRequest | Awaitable[ModelRequest | None] | None"]
ResultMiddleware = Callable[[ToolCall, ToolResult], "ToolResult | Awaitable[ToolResult | None] | None"]


class Middleware:
    """Ordered request and result middleware of one agent. ``None`` from one means 'unchanged'."""

    def __init__(
        self,
        request: list[RequestMiddleware] | None = None,
        result: list[ResultMiddleware] | None = None,
    ) -> None:
        self.request: list[RequestMiddleware] = list(request or [])
        self.result: list[ResultMiddleware] = list(result or [])

    def add_request(self, fn: RequestMiddleware) -> RequestMiddleware:
        self.request.append(fn)
        return fn

    def add_result(self, fn: ResultMiddleware) -> ResultMiddleware:
        self.result.append(fn)
        return fn

    async def apply_request(self, request: ModelRequest) -> ModelRequest:
        for fn in self.request:
            # Each middleware gets its own copy of the message list so that an in-place
            # edit cannot leak into the run's committed history.
            outcome = fn(replace(request, messages=list(request.messages)))
            if inspect.isawaitable(outcome):
                outcome = await outcome
            if outcome is not None:
                request = outcome
        return request

    async def apply_result(self, call: ToolCall, result: ToolResult) -> ToolResult:
        for fn in self.result:
            outcome = fn(call, replace(result))
            if inspect.isawaitable(outcome):
                outcome = await outcome
            if outcome is not None:
                result = outcome
        return result
