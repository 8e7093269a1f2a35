"""Middleware: transforms on the way to and from the model and the tools.

Subclass ``Middleware`` and override what you need (each method returns what it was given
by default), then ``agent.middleware.add(MyMiddleware())``:

- ``before_llm_call(messages, tools) -> (messages, tools)``: the conversation and tool
  specs of the next model call (a copy: changing them changes only this request);
- ``after_llm_call(response) -> response``: the model's ``ProviderResponse``. While one
  is installed, a reply's text reaches the event stream whole, after it, not as it streams;
- ``before_tool_execution(tool_call) -> tool_call``: a call before it is checked and run;
  it must keep its ``id``;
- ``after_tool_execution(result) -> result``: a tool's ``ToolResult`` once its raw result is
  committed. It runs again when a run is resumed after a crash, so it must tolerate replay;
  if it raises, the run fails (and a resume runs it again).

Middleware run in the order they were added. ``add_request(fn)`` and ``add_result(fn)``
are shorthands for plain functions (see ``MiddlewarePipeline``).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from harnessx._hooks import Registration
from harnessx._policies import PromptCacheHint
from harnessx._results import ToolResult
from harnessx.providers._base import ProviderResponse, ToolCall

__all__ = ["Middleware", "MiddlewarePipeline", "ModelRequest", "RequestMiddleware", "ResultMiddleware"]


class Middleware:
    """Base class of middleware; every method passes its input through unchanged."""

    async def before_llm_call(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return messages, tools

    async def after_llm_call(self, response: Any) -> Any:
        return response

    async def before_tool_execution(self, tool_call: Any) -> Any:
        return tool_call

    async def after_tool_execution(self, result: Any) -> Any:
        return result


@dataclass
class ModelRequest:
    """Everything the next model call will receive (what ``add_request`` functions see)."""

    model: str
    messages: list[dict[str, Any]]
    system: str
    tools: list[dict[str, Any]]
    max_tokens: int | None
    temperature: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # The prompt-cache hint (harnessx._prompt_cache), set once the request is final; it goes
    # to providers that take a ``cache`` argument, not to provider_kwargs().
    cache: PromptCacheHint | None = None

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


class _RequestFunction(Middleware):
    def __init__(self, fn: RequestMiddleware) -> None:
        self.fn = fn


class _ResultFunction(Middleware):
    def __init__(self, fn: ResultMiddleware) -> None:
        self.fn = fn


async def _settle(outcome: Any) -> Any:
    return await outcome if inspect.isawaitable(outcome) else outcome


class MiddlewarePipeline:
    """An agent's middleware, in order (``agent.middleware``).

    ``add_request(fn)``: ``fn(ModelRequest)`` may return a changed request (model, system
    prompt, budget included) or ``None`` for unchanged; it runs after ``before_llm_call``.
    ``add_result(fn)``: ``fn(call, result)`` may return a changed ``ToolResult`` or ``None``.
    Both return ``fn``, so they work as decorators.
    """

    def __init__(self) -> None:
        self._middleware: list[Middleware] = []

    def add(self, middleware: Middleware) -> Registration:
        self._middleware.append(middleware)
        return Registration(lambda: self.remove(middleware))

    def remove(self, middleware: Middleware) -> None:
        self._middleware = [m for m in self._middleware if m is not middleware]

    def add_request(self, fn: RequestMiddleware) -> RequestMiddleware:
        self.add(_RequestFunction(fn))
        return fn

    def add_result(self, fn: ResultMiddleware) -> ResultMiddleware:
        self.add(_ResultFunction(fn))
        return fn

    @property
    def rewrites_responses(self) -> bool:
        """True when some middleware overrides ``after_llm_call``."""
        return any(type(m).after_llm_call is not Middleware.after_llm_call for m in self._middleware)

    async def process_llm_request(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        for m in self._middleware:
            messages, tools = await m.before_llm_call(messages, tools)
        return messages, tools

    async def process_model_request(self, request: ModelRequest) -> ModelRequest:
        for m in self._middleware:
            if isinstance(m, _RequestFunction):
                outcome = await _settle(m.fn(replace(request, messages=list(request.messages))))
                if outcome is not None:
                    request = outcome
        return request

    async def process_llm_response(self, response: ProviderResponse) -> ProviderResponse:
        for m in self._middleware:
            response = await m.after_llm_call(response)
        return response

    async def process_tool_call(self, tool_call: ToolCall) -> ToolCall:
        for m in self._middleware:
            tool_call = await m.before_tool_execution(tool_call)
        return tool_call

    async def process_tool_result(self, result: ToolResult, call: ToolCall | None = None) -> ToolResult:
        for m in self._middleware:
            if isinstance(m, _ResultFunction):
                if call is not None:
                    outcome = await _settle(m.fn(call, replace(result)))
                    if outcome is not None:
                        result = outcome
            else:
                result = await m.after_tool_execution(result)
        return result
