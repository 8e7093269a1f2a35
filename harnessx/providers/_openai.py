"""OpenAI-compatible chat completions (OpenAI itself, vLLM, Ollama, LM Studio, ...)."""

from __future__ import annotations

import copy
import functools
import inspect
import json
import logging
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from harnessx._errors import ConfigurationError, IncompleteStreamError, ProviderError
from harnessx._policies import PromptCacheHint
from harnessx.providers._base import (
    ProviderResponse,
    StopReason,
    StreamChunk,
    TokenUsage,
    ToolCall,
    ToolCallDelta,
)
from harnessx.providers._http import (
    ChunkParser,
    HTTPProvider,
    SSEEvent,
    as_dict,
    as_int,
    as_text,
    decode_event_json,
    error_message_from_body,
    estimate_tokens,
    parse_tool_arguments,
)
from harnessx.providers._sdk_client import await_sdk, jsonable, model_and_client, sdk_kwargs, sse
from harnessx.providers._tool_choice import ToolChoice, normalize_tool_choice
from harnessx.providers._vendor_fields import JSONValue, checked_extra_body, merge_extra_body

__all__ = ["MaxTokensParam", "OpenAIProvider", "is_reasoning_model"]

logger = logging.getLogger("harnessx.providers")

MaxTokensParam = Literal["max_completion_tokens", "max_tokens"]

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
_OPENAI_HOST = "api.openai.com"

_FINISH_REASONS = {
    "stop": StopReason.END_TURN,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "length": StopReason.MAX_TOKENS,
    "content_filter": StopReason.SAFETY,
}

# OpenAI's reasoning models: the o-series and GPT-5 onwards, except the "-chat" variants (the
# non-reasoning model behind ChatGPT). A gateway's "vendor/" prefix is ignored.
_REASONING_MODEL = re.compile(r"^(?:o\d+|gpt-(?:[5-9]|[1-9]\d+))(?:$|[-.])")

# Fields the provider derives from the agent; extra_body may not replace them.
_RESERVED_FIELDS = {
    "model": "AgentConfig.model (or OpenAIProvider(model=...))",
    "messages": "the conversation",
    "tools": "the agent's tools",
    "max_tokens": "AgentConfig.max_tokens (OpenAIProvider(max_tokens_param=...) names the field)",
    "max_completion_tokens": "AgentConfig.max_tokens (OpenAIProvider(max_tokens_param=...) names the field)",
    "temperature": "AgentConfig.temperature",
    "stream": "the call: streamed runs stream",
    "stream_options": "the call: a streamed request asks for usage",
    "n": "nothing: the engine reads one choice",
}

# Error types an OpenAI-compatible server may put in a mid-stream error event that mean
# "try again later" rather than "your request is wrong".
_TRANSIENT_STREAM_ERRORS = frozenset({"server_error", "rate_limit_exceeded", "overloaded", "timeout"})


class OpenAIProvider(HTTPProvider):
    """Chat completions over HTTP: ``POST {base_url}/chat/completions``.

    ``base_url`` (or ``OPENAI_BASE_URL``) points it at any OpenAI-compatible server. An
    API key (``api_key=`` or ``OPENAI_API_KEY``) is required only for OpenAI's own host; a
    local server without a key gets no ``Authorization`` header.

    Usage: ``input_tokens`` is OpenAI's ``prompt_tokens``, which already *includes* the
    cached tokens also reported as ``cache_read_input_tokens`` (and ``cache_creation_input_tokens``).

    ``max_tokens_param`` names the field the token limit goes in: ``max_completion_tokens``
    (the default; OpenAI deprecates ``max_tokens`` and its reasoning models refuse it) or
    ``max_tokens`` for a compatible server that only knows the older name.
    ``reasoning_model`` says whether the model refuses ``temperature`` (OpenAI's reasoning
    models do); ``None`` decides by the model name (o1, o3, o4-mini, gpt-5, ...).
    ``extra_body`` holds any other request fields to send (``parallel_tool_calls``,
    ``seed``, ``reasoning_effort``, ...); see ``_vendor_fields``.

    ``tool_choice`` (``"auto"``, ``"any"``, ``"none"`` or a ``ToolChoice``; else
    ``OPENAI_TOOL_CHOICE``; unset sends nothing) goes in requests that carry tools, ``any``
    as OpenAI's ``"required"``. A ``tool_choice`` in ``extra_body`` (a named function) wins
    over it.

    ``client=`` takes an ``openai.AsyncOpenAI`` (or any object of its shape), as 0.9.1's
    provider did: requests then go through ``client.chat.completions.create``, which chooses
    the endpoint, key and retries (``api_key``, ``base_url``, ``organization`` and
    ``http_client`` are not used); fields the SDK has no parameter for, and
    ``prompt_cache_key``, go in its ``extra_body``. ``aclose()`` closes the client, as
    0.9.1's did.

    A stream that ends with neither a finish reason nor ``[DONE]`` was cut short
    (``IncompleteStreamError``, retried). ``allow_missing_finish_reason_for_text=True``
    accepts such a stream when it holds text and no tool call, for a server that never
    says it finished.
    """

    name = "openai"
    provider_name = "OpenAI"
    # OpenAI caches long prompt prefixes by itself; ``prompt_cache_key`` (the prompt-cache
    # hint's prefix key, as harnessx 0.9.1 sends it) routes requests that share a prefix to
    # the same cache. A subclass for a server that refuses unknown fields may set this
    # False; a refusal naming the field is also caught (see create).
    supports_prompt_cache_key = True
    api_key_env = "OPENAI_API_KEY"
    base_url_env = "OPENAI_BASE_URL"
    default_base_url = OPENAI_DEFAULT_BASE_URL

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        organization: str | None = None,
        timeout: float = 120.0,
        http_client: httpx.AsyncClient | None = None,
        extra_headers: Mapping[str, str] | None = None,
        max_tokens_param: MaxTokensParam = "max_completion_tokens",
        reasoning_model: bool | None = None,
        extra_body: Mapping[str, JSONValue] | None = None,
        client: object | None = None,
        allow_missing_finish_reason_for_text: bool = False,
        tool_choice: ToolChoice | str | None = None,
    ) -> None:
        model, client = model_and_client("OpenAIProvider", model, client)
        # Checked before anything is built: a bad value (or OPENAI_TOOL_CHOICE) fails here.
        self.tool_choice = normalize_tool_choice(tool_choice, env_var="OPENAI_TOOL_CHOICE")
        if max_tokens_param not in ("max_completion_tokens", "max_tokens"):
            raise ConfigurationError(
                f"OpenAIProvider(max_tokens_param={max_tokens_param!r}): use 'max_completion_tokens' "
                "(OpenAI) or 'max_tokens' (a server that only knows the older field)"
            )
        super().__init__(
            model,
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            http_client=http_client,
            extra_headers=extra_headers,
            client=client,
        )
        self.allow_missing_finish_reason_for_text = allow_missing_finish_reason_for_text
        self.organization = organization
        self.max_tokens_param: MaxTokensParam = max_tokens_param
        self.reasoning_model = reasoning_model
        self.extra_body = checked_extra_body("OpenAIProvider", extra_body, _RESERVED_FIELDS)
        self._warned_temperature: set[str] = set()

    @property
    def requires_api_key(self) -> bool:
        """Only OpenAI's own endpoint insists on a key; local servers usually have none."""
        return urlsplit(self.base_url).hostname == _OPENAI_HOST

    def _build_sdk_client(self) -> Any:
        try:
            import openai
        except ImportError:
            raise AttributeError(
                "OpenAIProvider.client is an openai.AsyncOpenAI, and the openai package is not "
                "installed: pip install openai (the provider itself needs no SDK)"
            ) from None
        if not self._api_key and self.requires_api_key:
            raise self._missing_key_error()
        return openai.AsyncOpenAI(
            # A compatible server that wants no key (llama-server): the SDK insists on one,
            # so it gets a placeholder that server ignores.
            api_key=self._api_key or "no-key",
            organization=self.organization,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=0,
            default_headers=self.extra_headers,
        )

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "application/json"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        elif self.requires_api_key:
            raise self._missing_key_error(
                " (or point base_url / OPENAI_BASE_URL at a server that needs none)"
            )
        if self.organization:
            headers["openai-organization"] = self.organization
        return headers

    # ------------------------------------------------------------------ calls

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
        payload = self._payload(model, messages, system, tools, max_tokens, temperature)
        return _parse_completion(await self._post_cached("/chat/completions", payload, cache, len(messages)))

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
        payload = self._payload(model, messages, system, tools, max_tokens, temperature)
        payload["stream"] = True
        # Without this the stream carries no token counts at all.
        payload["stream_options"] = {"include_usage": True}
        parse = functools.partial(
            _parse_stream, text_may_end_unfinished=self.allow_missing_finish_reason_for_text
        )
        chunks = self._stream_cached("/chat/completions", payload, parse, cache, len(messages))
        async for chunk in chunks:
            yield chunk

    def _with_cache_fields(
        self, payload: dict[str, Any], cache: PromptCacheHint | None, message_count: int
    ) -> dict[str, Any]:
        """``payload`` with ``prompt_cache_key`` from an enabled hint (one ``extra_body``
        already sets wins)."""
        if (
            cache is None
            or not cache.enabled
            or not cache.prefix_key
            or not self.supports_prompt_cache_key
            or "prompt_cache_key" in payload
        ):
            return payload
        return {**payload, "prompt_cache_key": cache.prefix_key}

    def _refused_cache_fields(self, exc: ProviderError) -> bool:
        """Whether a server refused the request for its ``prompt_cache_key`` (servers that
        check for unknown fields name the one they refuse: "Unrecognized request argument
        supplied: prompt_cache_key", "extra inputs are not permitted ... prompt_cache_key")."""
        return exc.status_code in (400, 422) and "prompt_cache_key" in str(exc)

    # ------------------------------------------------------------------ an SDK client

    def _sdk_kwargs(self, payload: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        create: Any = self._sdk.chat.completions.create
        # prompt_cache_key goes in extra_body, as 0.9.1 sent it: SDK versions before the
        # field have no parameter for it.
        return create, sdk_kwargs(create, payload, extra_body_fields=frozenset({"prompt_cache_key"}))

    async def _sdk_post(self, path: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        create, kwargs = self._sdk_kwargs(payload)
        reply = jsonable(await await_sdk(create, kwargs))
        if not isinstance(reply, dict):
            raise ProviderError(f"OpenAI client returned {type(reply).__name__}, not a chat completion")
        return reply

    async def _sdk_stream(
        self, payload: Mapping[str, Any], parse: ChunkParser
    ) -> AsyncGenerator[StreamChunk, None]:
        create, kwargs = self._sdk_kwargs(payload)
        stream = await await_sdk(create, kwargs)
        try:
            async with aclosing(_sdk_events(stream)) as events, aclosing(parse(events)) as chunks:
                async for chunk in chunks:
                    yield chunk
        finally:
            # The SDK's stream holds the connection until closed; a generator, its frames.
            close = getattr(stream, "aclose", None) or getattr(stream, "close", None)
            if callable(close):
                closed = close()
                if inspect.isawaitable(closed):
                    await closed

    async def count_tokens(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        system: str,
        tools: list[dict[str, Any]],
    ) -> int:
        """An *estimate* (about four characters per token): OpenAI has no counting endpoint."""
        return estimate_tokens(system, messages, tools)

    def _payload(
        self,
        model: str,
        messages: list[dict[str, Any]],
        system: str,
        tools: list[dict[str, Any]],
        max_tokens: int | None,
        temperature: float | None,
    ) -> dict[str, Any]:
        chosen = self._resolve_model(model)
        payload: dict[str, Any] = {"model": chosen, "messages": to_wire_messages(messages, system)}
        if tools:  # OpenAI rejects an empty "tools" array
            payload["tools"] = to_wire_tools(tools)
        if max_tokens is not None:
            payload[self.max_tokens_param] = max_tokens
        if temperature is not None and self._accepts_temperature(chosen, temperature):
            payload["temperature"] = temperature
        merge_extra_body(payload, {**self._tool_choice_field(), **self.extra_body}, has_tools=bool(tools))
        return payload

    def _tool_choice_field(self) -> dict[str, Any]:
        # OpenAI's word for "any" is "required"; the plain value, not the member, goes out.
        if self.tool_choice is None:
            return {}
        return {"tool_choice": "required" if self.tool_choice is ToolChoice.ANY else self.tool_choice.value}

    def _accepts_temperature(self, model: str, temperature: float) -> bool:
        reasoning = is_reasoning_model(model) if self.reasoning_model is None else self.reasoning_model
        if not reasoning:
            return True
        if model not in self._warned_temperature:  # once per model, not on every call
            self._warned_temperature.add(model)
            logger.warning(
                "OpenAIProvider: %s is a reasoning model, which refuses temperature; "
                "temperature=%s is not sent (OpenAIProvider(reasoning_model=False) sends it)",
                model,
                temperature,
            )
        return False


def is_reasoning_model(model: str) -> bool:
    """Whether ``model`` names one of OpenAI's reasoning models (which refuse ``temperature``)."""
    name = model.rsplit("/", 1)[-1].lower()
    return "-chat" not in name and _REASONING_MODEL.match(name) is not None


# --------------------------------------------------------------------------- request


def to_wire_messages(messages: list[dict[str, Any]], system: str) -> list[dict[str, Any]]:
    """Content-block messages (see ``harnessx.providers._base``) to chat-completions messages.

    An assistant turn's ``tool_use`` blocks become its ``tool_calls``; a user message's
    ``tool_result`` blocks become ``role: "tool"`` messages, ahead of any text it also holds.
    Thinking is not sent back: chat completions has no place for it.
    """
    wire: list[dict[str, Any]] = []
    if system:
        wire.append({"role": "system", "content": system})
    for message in messages:
        role = message.get("role")
        if role == "user":
            wire.extend(_to_wire_user(message.get("content")))
        elif role == "assistant":
            wire.append(_to_wire_assistant(message.get("content")))
        else:
            raise ConfigurationError(f"unknown message role {role!r}; expected user or assistant")
    return wire


def _blocks(content: object) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return [as_dict(block) for block in content]
    return [{"type": "text", "text": as_text(content)}]


def _to_wire_user(content: object) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in _blocks(content):
        kind = block.get("type")
        if kind == "tool_result":
            body = block.get("content")
            text = body if isinstance(body, str) else _joined_text(body)
            # Chat completions has no error flag on tool results, so say it in the text.
            if block.get("is_error") and not text.lower().startswith("error"):
                text = f"Error: {text}"
            messages.append(
                {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text}
            )
        elif kind == "text":
            texts.append(as_text(block.get("text")))
        else:
            raise ConfigurationError(
                f"content block type {kind!r} is not supported by OpenAIProvider; see docs/compatibility.md"
            )
    if texts or not messages:
        messages.append({"role": "user", "content": "\n".join(texts)})
    return messages


def _joined_text(content: object) -> str:
    if isinstance(content, list):
        return "".join(as_text(as_dict(b).get("text")) for b in content if as_dict(b).get("type") == "text")
    return as_text(content)


def _to_wire_assistant(content: object) -> dict[str, Any]:
    blocks = _blocks(content)
    text = "".join(as_text(b.get("text")) for b in blocks if b.get("type") == "text")
    calls = [
        {
            "id": str(block.get("id", "")),
            "type": "function",
            "function": {
                "name": str(block.get("name", "")),
                "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False),
            },
        }
        for block in blocks
        if block.get("type") == "tool_use"
    ]
    wire: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        wire["tool_calls"] = calls
        # The API wants null, not "", for an assistant turn that is only tool calls.
        wire["content"] = text or None
    return wire


def to_wire_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each tool as a Chat Completions function: its name, description and schema, as 0.9.1
    sends them. Other fields are not sent, ``strict`` included: a schema that strict mode
    does not accept would turn a request 0.9.1 sends into a refusal. A tool already in the
    API's own form (``{"type": "function", "function": {...}}``, where a program asks for
    ``strict`` itself) is sent as given; 0.9.1 fails on one with a ``KeyError``."""
    wire: list[dict[str, Any]] = []
    for tool in tools:
        if tool.get("type") == "function" and isinstance(tool.get("function"), dict):
            wire.append(copy.deepcopy(dict(tool)))
            continue
        wire.append(
            {
                "type": "function",
                "function": {
                    "name": tool["name"],
                    "description": tool.get("description", ""),
                    "parameters": tool.get("input_schema") or {"type": "object", "properties": {}},
                },
            }
        )
    return wire


# --------------------------------------------------------------------------- response


def _stop_reason(finish_reason: object, has_tool_calls: bool, refused: bool = False) -> StopReason:
    # A declined request says so in "refusal", whatever finish_reason came with it ("stop").
    if refused:
        return StopReason.REFUSAL
    if not finish_reason:
        reason = StopReason.END_TURN
    else:
        reason = _FINISH_REASONS.get(str(finish_reason), StopReason.OTHER)
    # Some compatible servers (older Ollama, some vLLM parsers) say "stop" while
    # returning tool calls; the tool calls are what matters.
    if has_tool_calls and reason == StopReason.END_TURN:
        return StopReason.TOOL_USE
    return reason


def _usage(data: object) -> TokenUsage:
    usage = as_dict(data)
    if not usage:
        return TokenUsage()  # the server reported none
    details = as_dict(usage.get("prompt_tokens_details"))
    return TokenUsage(
        input_tokens=as_int(usage.get("prompt_tokens")),
        output_tokens=as_int(usage.get("completion_tokens")),
        cache_read_input_tokens=as_int(details.get("cached_tokens")),
        cache_creation_input_tokens=as_int(details.get("cache_write_tokens")),
    )


def _reasoning_text(message: dict[str, Any]) -> str | None:
    # vLLM and DeepSeek say reasoning_content; OpenRouter and newer Ollama say reasoning.
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _tool_call(call_id: object, name: object, arguments: object) -> ToolCall:
    parsed, error = parse_tool_arguments(arguments)
    ident = call_id if isinstance(call_id, str) and call_id else _synthetic_call_id()
    return ToolCall(ident, str(name or ""), parsed, parse_error=error)


def _synthetic_call_id() -> str:
    # A few local servers omit the id; the engine needs one to pair the result.
    return f"call_{uuid.uuid4().hex[:24]}"


def _wire_tool_call(call: dict[str, Any]) -> ToolCall:
    function = as_dict(call.get("function"))
    return _tool_call(call.get("id"), function.get("name"), function.get("arguments"))


def _parse_completion(data: dict[str, Any]) -> ProviderResponse:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        detail = error_message_from_body(data) or "no choices in the reply"
        raise ProviderError(f"OpenAI returned no completion: {detail}")
    choice = as_dict(choices[0])
    message = as_dict(choice.get("message"))
    tool_calls = [_wire_tool_call(as_dict(call)) for call in message.get("tool_calls") or []]
    refusal = _refusal_text(message)
    return ProviderResponse(
        # The refusal is the model's answer (it says why); it must not read as an empty one.
        text=as_text(message.get("content")) + refusal,
        tool_calls=tool_calls,
        thinking=_reasoning_text(message),
        stop_reason=_stop_reason(choice.get("finish_reason"), bool(tool_calls), bool(refusal)),
        usage=_usage(data.get("usage")),
        raw=data,
    )


def _refusal_text(message: dict[str, Any]) -> str:
    refusal = message.get("refusal")
    return refusal if isinstance(refusal, str) else ""


# --------------------------------------------------------------------------- streaming


@dataclass
class _PartialToolCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    # The id its tool_call_delta chunks name: the API's, or one made up when its first
    # fragment has none (then the call gets it too, unless a later fragment brings the API's).
    delta_id: str = ""


@dataclass
class _StreamState:
    """Everything a stream has said so far; becomes the final ``ProviderResponse``."""

    text: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    calls: dict[int, _PartialToolCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)
    raw_usage: dict[str, Any] | None = None
    header: dict[str, Any] = field(default_factory=dict)
    done: bool = False

    def feed(self, event: dict[str, Any]) -> list[StreamChunk]:
        error = event.get("error")
        if error:
            message = error_message_from_body(event) or str(error)
            kind = str(as_dict(error).get("type") or as_dict(error).get("code") or "")
            raise ProviderError(f"OpenAI stream error: {message}", retryable=kind in _TRANSIENT_STREAM_ERRORS)
        if not self.header:
            self.header = {key: event[key] for key in ("id", "created", "model") if key in event}
        if event.get("usage"):
            self.raw_usage = as_dict(event["usage"])
            self.usage = _usage(event["usage"])
        chunks: list[StreamChunk] = []
        for choice in map(as_dict, event.get("choices") or []):
            if as_int(choice.get("index")) != 0:  # we never ask for n > 1
                continue
            chunks.extend(self._feed_delta(as_dict(choice.get("delta"))))
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return chunks

    def _feed_delta(self, delta: dict[str, Any]) -> list[StreamChunk]:
        chunks: list[StreamChunk] = []
        content = delta.get("content")
        if isinstance(content, str) and content:
            self.text.append(content)
            chunks.append(StreamChunk("text_delta", content))
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            # Shown as it streams, like any answer; the final stop reason says it was a refusal.
            self.refusal.append(refusal)
            chunks.append(StreamChunk("text_delta", refusal))
        reasoning = _reasoning_text(delta)
        if reasoning:
            self.thinking.append(reasoning)
            chunks.append(StreamChunk("thinking_delta", reasoning))
        for position, fragment in enumerate(delta.get("tool_calls") or []):
            chunks.extend(self._feed_tool_fragment(position, as_dict(fragment)))
        return chunks

    def _feed_tool_fragment(self, position: int, fragment: dict[str, Any]) -> list[StreamChunk]:
        """A call's first fragment gives a ``tool_call_delta`` naming the call, with no
        arguments; each piece of its arguments another (as 0.9.1's provider)."""
        # The id and name come in a call's first fragment only; later fragments carry just
        # the index and another piece of the arguments string.
        index = fragment.get("index")
        call = self.calls.setdefault(index if isinstance(index, int) else position, _PartialToolCall())
        chunks: list[StreamChunk] = []
        if isinstance(fragment.get("id"), str) and fragment["id"]:
            call.id = fragment["id"]
        function = as_dict(fragment.get("function"))
        name = function.get("name")
        if isinstance(name, str) and name and not call.name:
            call.name = name
        piece = function.get("arguments")
        if isinstance(piece, dict):  # some servers send the whole object at once
            piece = json.dumps(piece)
        piece = piece if isinstance(piece, str) else ""
        call.arguments.append(piece)
        if not call.delta_id:
            call.delta_id = call.id or _synthetic_call_id()
            chunks.append(StreamChunk("tool_call_delta", ToolCallDelta(call.delta_id, call.name)))
        if piece:
            chunks.append(StreamChunk("tool_call_delta", ToolCallDelta(call.delta_id, call.name, piece)))
        # A fragment with nothing to show still proves the stream alive (any chunk resets
        # the run's idle deadline).
        return chunks or [StreamChunk("progress")]

    def response(self) -> ProviderResponse:
        tool_calls = [
            _tool_call(call.id or call.delta_id, call.name, "".join(call.arguments))
            for _, call in sorted(self.calls.items())
        ]
        refusal = "".join(self.refusal)
        return ProviderResponse(
            text="".join(self.text) + refusal,
            tool_calls=tool_calls,
            thinking="".join(self.thinking) or None,
            stop_reason=_stop_reason(self.finish_reason, bool(tool_calls), bool(refusal)),
            usage=self.usage,
            raw=self.completion(tool_calls),
        )

    def completion(self, tool_calls: list[ToolCall]) -> dict[str, Any]:
        """The stream as the one ``chat.completion`` object a non-streamed call returns."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self.text) or None,
            "refusal": "".join(self.refusal) or None,
        }
        if self.thinking:
            message["reasoning_content"] = "".join(self.thinking)
        if tool_calls:
            message["tool_calls"] = [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments}}
                for call, arguments in zip(
                    tool_calls, ("".join(c.arguments) for _, c in sorted(self.calls.items())), strict=True
                )
            ]
        completion: dict[str, Any] = {
            **self.header,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        }
        if self.raw_usage is not None:
            completion["usage"] = self.raw_usage
        return completion


async def _sdk_events(stream: AsyncIterable[object]) -> AsyncGenerator[SSEEvent, None]:
    """An SDK stream's chunks as the server-sent events they were read from."""
    async for chunk in stream:
        yield sse("message", chunk)


async def _parse_stream(
    events: AsyncIterator[SSEEvent], *, text_may_end_unfinished: bool = False
) -> AsyncGenerator[StreamChunk, None]:
    state = _StreamState()
    async for _event, data in events:
        if data.strip() == "[DONE]":
            state.done = True
            break
        for chunk in state.feed(decode_event_json("OpenAI", data)):
            yield chunk
    # Some compatible servers never send [DONE]; a finish reason is proof enough that the
    # reply is complete. Neither means the connection was cut short.
    # A server that never says it finished may be allowed a text answer; never a tool call,
    # whose arguments may be cut off anywhere.
    unfinished_text = text_may_end_unfinished and state.text and not state.calls
    if not state.done and state.finish_reason is None and not unfinished_text:
        raise IncompleteStreamError("OpenAI stream ended before the reply was complete")
    yield StreamChunk("response", state.response())
