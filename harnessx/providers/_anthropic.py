"""Anthropic Messages API (``POST {base_url}/v1/messages``)."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from harnessx._errors import ConfigurationError, IncompleteStreamError, MalformedToolInputError, ProviderError
from harnessx._model_limits import ModelLimits, lookup_model_limits
from harnessx._policies import PromptCacheHint
from harnessx.providers._base import (
    INVALID_ARGUMENTS,
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
    parse_tool_arguments,
)
from harnessx.providers._sdk_client import (
    attributes,
    await_sdk,
    call_sdk,
    jsonable,
    model_and_client,
    sdk_kwargs,
    sse,
)
from harnessx.providers._tool_choice import ToolChoice, normalize_tool_choice
from harnessx.providers._vendor_fields import JSONValue, checked_extra_body, merge_extra_body

__all__ = ["ANTHROPIC_API_VERSION", "AnthropicProvider", "is_server_tool"]

logger = logging.getLogger("harnessx.providers")

ANTHROPIC_DEFAULT_BASE_URL = "https://api.anthropic.com"
_ANTHROPIC_HOST = "api.anthropic.com"

# The current API version. The vendor's version history lists 2026-10-21 as the latest
# (https://platform.claude.com/docs/en/api/versioning), and its Python SDK sends it by default
# (anthropic 2.x: ANTHROPIC_API_VERSION in anthropic/_constants.py; checked against the SDK
# in tests/providers/test_sdk_conformance.py). From this version on the Messages API refuses
# temperature, top_p and top_k with a 400, whatever their value (same page).
ANTHROPIC_API_VERSION = "2026-10-21"
_NO_SAMPLING_FROM = "2026-10-21"

# Fields the provider derives from the agent; extra_body may not replace them.
_RESERVED_FIELDS = {
    "model": "AgentConfig.model (or AnthropicProvider(model=...))",
    "messages": "the conversation",
    "system": "AgentConfig.system_prompt",
    "tools": "the agent's tools",
    "max_tokens": "AgentConfig.max_tokens (or AnthropicProvider(default_max_tokens=...))",
    "temperature": "AgentConfig.temperature (sent with anthropic_version='2023-06-01' only)",
    "stream": "the call: streamed runs stream",
}

_STOP_REASONS = {
    "end_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "refusal": StopReason.REFUSAL,
    "pause_turn": StopReason.PAUSE_TURN,
    # The context window filled up mid-reply: as truncated as hitting max_tokens.
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
}

# Request fields /v1/messages/count_tokens takes besides model, messages, system and tools.
_COUNTED_FIELDS = frozenset(
    {"cache_control", "output_config", "speed", "thinking", "tool_choice", "user_profile_id", "workspace_id"}
)

# What the Models API stated, for the whole process, by (endpoint, model): a program that
# builds a provider per task asks once, not once per agent. Only answers are kept here (a
# failed lookup is the provider's own), and the endpoint is part of the key because a gateway
# may serve other limits. AnthropicProvider.clear_model_limits_cache() empties it.
_MODELS_API_ANSWERS: dict[tuple[str, str], ModelLimits] = {}

# A tool's field asking the API to stream its arguments as they are written.
_EAGER = "eager_input_streaming"
# What the SDK's stream raises for a streamed tool argument that is not JSON, and the event
# (not one the API sends) by which _sdk_events tells the parser so.
_SDK_UNREADABLE_ARGUMENTS = "Unable to parse tool parameter JSON"
_UNREADABLE_ARGUMENTS = "harnessx_unreadable_tool_arguments"

# The blocks of a reply the run reads itself; the others are the API's own, kept as
# ``provider`` blocks under this provider's name (see _reply_block).
_OWN_BLOCKS = frozenset({"text", "thinking", "redacted_thinking", "tool_use"})
PROVIDER_BLOCK_NAME = "anthropic"

# Stream error events that are the streaming form of a 529 / 500 / 429.
_TRANSIENT_STREAM_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})


class AnthropicProvider(HTTPProvider):
    """Claude models through the Messages API.

    The key comes from ``api_key=`` or ``ANTHROPIC_API_KEY`` and is required for Anthropic's
    own host; a compatible server without a key (llama.cpp's ``llama-server``) gets none. The
    base URL comes from ``base_url=`` or ``ANTHROPIC_BASE_URL``. ``max_tokens`` is mandatory
    in this API, so ``default_max_tokens`` is sent when the caller gives none.

    ``anthropic_version`` defaults to the current API version, which has no sampling
    parameters: a configured ``temperature`` is then not sent (a warning says so once);
    ``anthropic_version="2023-06-01"`` sends it. ``extra_body`` holds other request fields
    (``thinking``, ``top_k`` on the older version, ``metadata``, ...).

    ``tool_choice`` (``"auto"``, ``"any"``, ``"none"`` or a ``ToolChoice``; else
    ``ANTHROPIC_TOOL_CHOICE``; unset sends nothing) goes as ``{"type": ...}`` in requests
    that carry tools. A ``tool_choice`` in ``extra_body`` (``{"type": "tool", "name": ...}``)
    wins over it.

    Usage: ``input_tokens`` counts every prompt token, the cached ones included (the API's
    own ``input_tokens`` leaves out those it reports as cache reads and writes), the same as
    ``OpenAIProvider``.

    The reply's content blocks are kept in order on ``ProviderResponse.content``, thinking
    blocks with their signatures and redacted thinking included: with extended thinking and
    tools the API wants them back unchanged in the assistant turn.

    ``client=`` takes an ``anthropic.AsyncAnthropic`` (or any object of its shape), as 0.9.1's
    provider did: requests then go through ``client.messages.create`` / ``.stream`` /
    ``.count_tokens``, which choose the endpoint, key, API version and retries (``api_key``,
    ``base_url``, ``anthropic_version`` and ``http_client`` are not used). A ``temperature``
    is sent, and sent once more without it if the client or the API refuses it; the model's
    limits are asked of ``client.models.retrieve`` once per model and endpoint in the process
    (for a model ``harnessx.models`` knows, in the background: the table answers until the
    API has). ``aclose()`` closes the client, as 0.9.1's did.
    """

    name = "anthropic"
    provider_name = "Anthropic"
    api_key_env = "ANTHROPIC_API_KEY"
    base_url_env = "ANTHROPIC_BASE_URL"
    default_base_url = ANTHROPIC_DEFAULT_BASE_URL

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        anthropic_version: str = ANTHROPIC_API_VERSION,
        timeout: float = 120.0,
        http_client: httpx.AsyncClient | None = None,
        extra_headers: Mapping[str, str] | None = None,
        default_max_tokens: int | None = None,
        extra_body: Mapping[str, JSONValue] | None = None,
        client: object | None = None,
        eager_tool_streaming: bool = True,
        tool_choice: ToolChoice | str | None = None,
    ) -> None:
        model, client = model_and_client("AnthropicProvider", model, client)
        # Checked before anything is built: a bad value (or ANTHROPIC_TOOL_CHOICE) fails here.
        self.tool_choice = normalize_tool_choice(tool_choice, env_var="ANTHROPIC_TOOL_CHOICE")
        super().__init__(
            model,
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            http_client=http_client,
            extra_headers=extra_headers,
            client=client,
        )
        self._models_api: dict[str, ModelLimits | None] = {}
        self._asking: dict[str, asyncio.Future[ModelLimits | None]] = {}
        if default_max_tokens is not None and default_max_tokens < 1:
            raise ConfigurationError(f"default_max_tokens must be positive, got {default_max_tokens}")
        self.anthropic_version = anthropic_version
        self._default_max_tokens = default_max_tokens
        self.extra_body = checked_extra_body("AnthropicProvider", extra_body, _RESERVED_FIELDS)
        self._warned_temperature = False
        # Each tool asks the API to stream its arguments as the model writes them
        # (``eager_input_streaming``, as 0.9.1 asks): otherwise a call is held back until its
        # arguments are whole, and a model writing a long argument sends nothing for minutes,
        # which the stall deadline takes for a dead stream. A server that refuses the field
        # turns it off for this provider, and the call goes again without it.
        self.eager_tool_streaming = eager_tool_streaming

    def default_max_tokens(self, model: str) -> int:
        """``default_max_tokens=`` if given, else the model's limit (``harnessx.models``)."""
        if self._default_max_tokens is not None:
            return self._default_max_tokens
        return super().default_max_tokens(self._resolve_model(model))

    @property
    def requires_api_key(self) -> bool:
        """Only Anthropic's own endpoint insists on a key; a local compatible server has none."""
        return urlsplit(self.base_url).hostname == _ANTHROPIC_HOST

    @property
    def accepts_sampling(self) -> bool:
        """Whether the API version still takes ``temperature`` (versions before 2026-10-21).
        With an SDK client the client chooses the version: sent, and dropped if refused."""
        return self._sdk is not None or self.anthropic_version < _NO_SAMPLING_FROM

    async def model_limits(self, model: str) -> ModelLimits | None:
        """With an SDK client, the limits its Models API states (asked once per model and
        endpoint; no answer leaves the table's); without one, ``None``: the table's
        (``harnessx.models``). A coroutine, as 0.9.1's (``await provider.model_limits(m)``)."""
        if self._sdk is None:
            return None
        if model in self._models_api:
            return self._models_api[model]
        shared = _MODELS_API_ANSWERS.get(self._endpoint_key(model))
        if shared is not None:
            self._models_api[model] = shared
            return shared
        return await self._limits_from_api(model)

    @staticmethod
    def clear_model_limits_cache() -> None:
        """Forget the limits the Models API stated, for every endpoint, in this process (a
        provider asks again the next time it is asked of a model)."""
        _MODELS_API_ANSWERS.clear()

    def _endpoint_key(self, model: str) -> tuple[str, str]:
        return (str(getattr(self._sdk, "base_url", "")), model)

    async def _limits_from_api(self, model: str) -> ModelLimits | None:
        asking = self._asking.get(model)
        if asking is not None and asking.get_loop() is not asyncio.get_running_loop():
            asking = None  # begun on an event loop that has ended (asyncio.run per call)
        if asking is None:
            asking = self._asking[model] = asyncio.ensure_future(self._ask_models_api(model))
        if not asking.done() and lookup_model_limits(model) is not None:
            # The table knows the model: its answer serves this call rather than holding it
            # up for a round trip (every run in a fresh process paid one). Later calls get
            # the API's figures once it has answered.
            return None
        found = await asking
        self._asking.pop(model, None)
        self._models_api[model] = found
        if found is not None:
            _MODELS_API_ANSWERS[self._endpoint_key(model)] = found
        return found

    async def _ask_models_api(self, model: str) -> ModelLimits | None:
        try:
            info = await asyncio.wait_for(self._sdk.models.retrieve(model), timeout=10)
        except Exception:  # an older API, a proxy without /v1/models, a client double
            logger.debug("%s: the Models API did not answer for %s", self.provider_name, model, exc_info=True)
            return None
        window, output = getattr(info, "max_input_tokens", None), getattr(info, "max_tokens", None)
        if type(window) is int and type(output) is int and window > 0 and output > 0:
            return ModelLimits(window, output)
        return None

    async def aclose(self) -> None:
        """Stop the Models API lookups still running, then close as ``HTTPProvider`` does."""
        for asking in self._asking.values():
            asking.cancel()
        self._asking.clear()
        await super().aclose()

    def _build_sdk_client(self) -> Any:
        try:
            import anthropic
        except ImportError:
            raise AttributeError(
                "AnthropicProvider.client is an anthropic.AsyncAnthropic, and the anthropic package "
                "is not installed: pip install anthropic (the provider itself needs no SDK)"
            ) from None
        return anthropic.AsyncAnthropic(
            api_key=self._api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=0,
            default_headers={"anthropic-version": self.anthropic_version, **self.extra_headers},
        )

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "application/json", "anthropic-version": self.anthropic_version}
        if self._api_key:
            # x-api-key is accepted by every API version and by compatible servers and proxies.
            headers["x-api-key"] = self._api_key
        elif self.requires_api_key:
            raise self._missing_key_error(
                " (or point base_url / ANTHROPIC_BASE_URL at a server that needs none)"
            )
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
        try:
            return _parse_message(await self._post_cached("/v1/messages", payload, cache, len(messages)))
        except ProviderError as exc:
            if not self._refused_eager_streaming(payload, exc):
                raise
        payload = self._payload(model, messages, system, tools, max_tokens, temperature)
        return _parse_message(await self._post_cached("/v1/messages", payload, cache, len(messages)))

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
        payload = {**self._payload(model, messages, system, tools, max_tokens, temperature), "stream": True}
        delivered = False
        try:
            async for chunk in self._stream_cached(
                "/v1/messages", payload, _parse_stream, cache, len(messages)
            ):
                delivered = True
                yield chunk
            return
        except ProviderError as exc:
            # A refusal comes before the stream opens: nothing was delivered to repeat.
            if delivered or not self._refused_eager_streaming(payload, exc):
                raise
        payload = {**self._payload(model, messages, system, tools, max_tokens, temperature), "stream": True}
        async for chunk in self._stream_cached("/v1/messages", payload, _parse_stream, cache, len(messages)):
            yield chunk

    def _refused_eager_streaming(self, payload: Mapping[str, Any], exc: ProviderError) -> bool:
        """Whether ``exc`` refused the ``eager_input_streaming`` this provider put on the
        tools of ``payload``; if so it sends the field no more."""
        asked = self.eager_tool_streaming and any(
            tool.get(_EAGER) is True for tool in payload.get("tools") or [] if isinstance(tool, dict)
        )
        if not asked or _EAGER not in str(exc):
            return False
        logger.info("%s: the server refused %s; tools go without it from now on", self.provider_name, _EAGER)
        self.eager_tool_streaming = False
        return True

    def _with_cache_fields(
        self, payload: dict[str, Any], cache: PromptCacheHint | None, message_count: int
    ) -> dict[str, Any]:
        return with_cache_markers(payload, cache, message_count)

    def _refused_cache_fields(self, exc: ProviderError) -> bool:
        """Any invalid-request refusal may be one of the cache markers, since a compatible
        server (llama.cpp, a gateway) may not say why; through an SDK client (or a double of
        one) a refusal that names them."""
        if _EAGER in str(exc):
            return False  # the tools' field, not the markers (see _refused_eager_streaming)
        return exc.status_code == 400 or (self._sdk is not None and "cache_control" in str(exc))

    # ------------------------------------------------------------------ an SDK client

    async def _sdk_post(self, path: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        messages: Any = self._sdk.messages
        if path.endswith("/count_tokens"):
            return dict(jsonable(await messages.count_tokens(**sdk_kwargs(messages.count_tokens, payload))))
        try:
            reply = await await_sdk(messages.create, sdk_kwargs(messages.create, payload))
        except ValueError as exc:
            # The SDK refuses a call that may run past ten minutes unstreamed; stream it.
            if "Streaming is required" not in str(exc):
                raise
            final: ProviderResponse | None = None
            async with aclosing(self._sdk_stream(payload, _parse_stream)) as chunks:
                async for chunk in chunks:
                    if chunk.kind == "response":
                        final = chunk.data
            if final is None or not isinstance(final.raw, dict):
                raise IncompleteStreamError("Anthropic stream ended before the message was complete") from exc
            return final.raw
        return _message_json(reply)

    async def _sdk_stream(
        self, payload: Mapping[str, Any], parse: ChunkParser
    ) -> AsyncGenerator[StreamChunk, None]:
        messages: Any = self._sdk.messages
        request = {key: value for key, value in payload.items() if key != "stream"}  # stream() sets it
        async with call_sdk(messages.stream, sdk_kwargs(messages.stream, request)) as stream:
            if not hasattr(stream, "__aiter__"):
                # A client double that offers only the text and the final message.
                async for text in stream.text_stream:
                    if text:
                        yield StreamChunk("text_delta", text)
                yield StreamChunk("response", _parse_message(_message_json(await stream.get_final_message())))
                return
            async with aclosing(_sdk_events(stream)) as events, aclosing(parse(events)) as chunks:
                async for chunk in chunks:
                    yield chunk

    async def count_tokens(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        system: str,
        tools: list[dict[str, Any]],
    ) -> int:
        """Exact input-token count from ``POST /v1/messages/count_tokens``."""
        payload = self._base_payload(model, messages, system, tools)
        # The fields that change the count; the endpoint refuses the others (metadata, ...).
        counted = {key: value for key, value in self.extra_body.items() if key in _COUNTED_FIELDS}
        merge_extra_body(payload, {**self._tool_choice_field(), **counted}, has_tools=bool(tools))
        data = await self._post_json("/v1/messages/count_tokens", payload)
        count = data.get("input_tokens")
        if not isinstance(count, int):
            raise ProviderError("Anthropic count_tokens reply has no input_tokens")
        return count

    def _base_payload(
        self, model: str, messages: list[dict[str, Any]], system: str, tools: list[dict[str, Any]]
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self._resolve_model(model),
            "messages": to_wire_messages(messages),
        }
        if system:
            payload["system"] = system
        if tools:
            payload["tools"] = to_wire_tools(tools)
        return payload

    def _payload(
        self,
        model: str,
        messages: list[dict[str, Any]],
        system: str,
        tools: list[dict[str, Any]],
        max_tokens: int | None,
        temperature: float | None,
    ) -> dict[str, Any]:
        payload = self._base_payload(model, messages, system, tools)
        if self.eager_tool_streaming and payload.get("tools"):
            # Sent streamed or not, so the tool definitions (part of the cached prefix) are the
            # same for both; a tool that says either way itself keeps its choice. A server tool
            # (web search, ...) has no arguments of ours to stream and is sent as given.
            payload["tools"] = [
                tool if is_server_tool(tool) else {**tool, _EAGER: tool.get(_EAGER, True)}
                for tool in payload["tools"]
            ]
        payload["max_tokens"] = max_tokens if max_tokens is not None else self.default_max_tokens(model)
        if temperature is not None and self._sends_temperature(temperature):
            payload["temperature"] = temperature
        merge_extra_body(payload, {**self._tool_choice_field(), **self.extra_body}, has_tools=bool(tools))
        return payload

    def _tool_choice_field(self) -> dict[str, Any]:
        # The plain value, not the member: the body is JSON, and checked as the SDK types it.
        return {} if self.tool_choice is None else {"tool_choice": {"type": self.tool_choice.value}}

    def _sends_temperature(self, temperature: float) -> bool:
        if self.accepts_sampling:
            return True
        if not self._warned_temperature:  # once per provider, not on every call
            self._warned_temperature = True
            logger.warning(
                "AnthropicProvider: API version %s has no temperature; temperature=%s is not sent "
                "(AnthropicProvider(anthropic_version='2023-06-01') sends it)",
                self.anthropic_version,
                temperature,
            )
        return False


# --------------------------------------------------------------------------- an SDK client's replies

_MESSAGE_FIELDS = ("id", "type", "role", "model", "stop_reason", "stop_sequence")
_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
# The events the Messages API streams; the SDK's stream adds its own ("text", "input_json",
# ...) derived from them, which would count everything twice.
_WIRE_EVENTS = frozenset(
    {"message_start", "content_block_start", "content_block_delta", "message_delta", "error"}
)


def _message_json(message: object) -> dict[str, Any]:
    """An SDK ``Message`` as the JSON the API sent. Read field by field, so a client double
    (a ``MagicMock`` answers every attribute) gives only what it was set up with."""
    data = attributes(message, _MESSAGE_FIELDS)
    content = message.get("content") if isinstance(message, Mapping) else getattr(message, "content", None)
    if isinstance(content, list | tuple):
        data["content"] = [jsonable(block) for block in content]
    usage = message.get("usage") if isinstance(message, Mapping) else getattr(message, "usage", None)
    if usage is not None:
        data["usage"] = attributes(usage, _USAGE_FIELDS)
    return data


async def _sdk_events(stream: AsyncIterator[object]) -> AsyncGenerator[SSEEvent, None]:
    """The SDK stream's events as the server-sent events they were read from.

    The SDK parses each streamed tool argument as it assembles the message, and raises when
    one is not JSON (with eager input streaming the API no longer checks them); the rest of
    the stream is then lost. As 0.9.1 does, the reply so far is kept: the parser is told
    which call could not be read (``_UNREADABLE_ARGUMENTS``), and the run answers that call
    with the reason, asking the model to send it again."""
    try:
        async for event in stream:
            kind = getattr(event, "type", None)
            if kind in _WIRE_EVENTS:
                yield sse(str(kind), event)
            elif kind in ("content_block_stop", "message_stop"):
                # The SDK adds the assembled block or message to these; nothing to parse in them.
                yield (str(kind), json.dumps({"type": kind}))
    except ValueError as exc:
        if _SDK_UNREADABLE_ARGUMENTS not in str(exc):
            raise
        # "... Error: <the parser's message>. JSON: <the argument text>": the text stays out.
        detail = str(exc.__cause__ or exc).split(". JSON:")[0]
        reason = f"tool arguments are not valid JSON ({detail}); the partial input was discarded"
        yield (_UNREADABLE_ARGUMENTS, json.dumps({"type": _UNREADABLE_ARGUMENTS, "reason": reason}))


# --------------------------------------------------------------------------- request


def to_wire_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Content-block messages (see ``harnessx.providers._base``) to Messages-API messages.

    The format is the API's own, so this mostly copies: it drops what the API would refuse
    (empty text blocks, thinking without the signature the API issued), keeps each block to
    the fields the API knows, and merges neighbouring messages of one role, answers first.
    """
    wire: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role not in ("user", "assistant"):
            raise ConfigurationError(f"unknown message role {role!r}; expected user or assistant")
        content = message.get("content")
        blocks = [b for b in map(_to_wire_block, _content_blocks(content)) if b is not None]
        if not blocks:  # the API rejects empty content; an empty turn says nothing anyway
            continue
        if wire and wire[-1]["role"] == role:
            if isinstance(wire[-1]["content"], str):
                wire[-1]["content"] = [{"type": "text", "text": wire[-1]["content"]}]
            wire[-1]["content"].extend(blocks)
        elif isinstance(content, str):
            # A plain string goes as the string, as 0.9.1 sends it (the API reads it as one
            # text block); a cache marker on it makes it that block (_marked_message).
            wire.append({"role": role, "content": content})
        else:
            wire.append({"role": role, "content": blocks})
    for entry in wire:
        if isinstance(entry["content"], list):
            # Tool results must open the user message that answers the tool calls.
            entry["content"].sort(key=lambda block: block.get("type") != "tool_result")
    return wire


def _content_blocks(content: object) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return [as_dict(block) for block in content]
    return [{"type": "text", "text": as_text(content)}]


def _result_part(part: object) -> object:
    """A block of a tool result's content as the API takes it: a text block without what an
    SDK's reply added to it (``parsed_output``, ...), which the API refuses; others as given."""
    if isinstance(part, dict) and part.get("type") == "text":
        return {key: part[key] for key in ("type", "text", "cache_control") if key in part}
    return part


def _to_wire_block(block: dict[str, Any]) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text":
        text = as_text(block.get("text"))
        return {"type": "text", "text": text} if text else None  # empty text blocks are rejected
    if kind == "tool_use":
        arguments = block.get("input")
        call: dict[str, Any] = {
            "type": "tool_use",
            "id": str(block.get("id", "")),
            "name": str(block.get("name", "")),
            "input": arguments if isinstance(arguments, dict) else {},
        }
        if isinstance(block.get("caller"), dict):
            call["caller"] = block["caller"]  # who made the call (programmatic tool calling)
        return call
    if kind == "tool_result":
        content = block.get("content")
        wire: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": str(block.get("tool_use_id", "")),
            "content": [_result_part(part) for part in content]
            if isinstance(content, list)
            else as_text(content),
        }
        if block.get("is_error"):
            wire["is_error"] = True
        return wire
    # Thinking goes back exactly as the API returned it: with extended thinking and tools it
    # checks the signature (and decrypts the redacted data) of the turn that called the tools.
    if kind == "thinking":
        if not block.get("signature"):
            return None  # only thinking the API itself signed may be sent back
        return {
            "type": "thinking",
            "thinking": as_text(block.get("thinking")),
            "signature": block["signature"],
        }
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": as_text(block.get("data"))}
    if kind == "provider":
        # A block of the provider's own (server_tool_use, web_search_tool_result, ...), kept
        # from a reply: Anthropic's go back exactly as the API sent them (a paused turn is
        # continued from them); another provider's mean nothing here and are left out.
        data = block.get("data")
        if block.get("provider") != PROVIDER_BLOCK_NAME or not isinstance(data, dict):
            return None
        return copy.deepcopy(data)
    if kind in ("image", "document"):
        return {"type": kind, "source": block.get("source")}
    raise ConfigurationError(
        f"content block type {kind!r} is not supported by AnthropicProvider; see docs/compatibility.md"
    )


def is_server_tool(tool: Mapping[str, Any]) -> bool:
    """Whether ``tool`` is one of the API's own tools (``{"type": "web_search_20250305",
    "name": "web_search", "max_uses": 3}``, code execution, ...): a ``type`` other than
    ``custom`` and no ``input_schema``. The server runs it; the run never sees its calls."""
    kind = tool.get("type")
    return isinstance(kind, str) and kind != "custom" and "input_schema" not in tool


def to_wire_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's tools as the API takes them: each as given, with every field it carries,
    as 0.9.1 sends them. A program's middleware may put Anthropic's own fields on a tool
    (``cache_control`` for prompt caching of the tool list, ``strict``, ``defer_loading``,
    ``input_examples``, ``eager_input_streaming``) and they must reach the API; a server tool
    (``is_server_tool``) is sent exactly as given too. Only one of ours without an
    ``input_schema`` gets an empty object schema, which the API requires (0.9.1 sends none
    and the call is refused)."""
    wire = []
    for tool in tools:
        if is_server_tool(tool):
            wire.append(copy.deepcopy(dict(tool)))
            continue
        # A shallow copy: the schema is the registry's own (not copied per request), and
        # nothing on the way to the wire changes a tool in place.
        entry = dict(tool)
        if not entry.get("input_schema"):
            entry["input_schema"] = {"type": "object", "properties": {}}
        wire.append(entry)
    return wire


# --------------------------------------------------------------------------- response


def _stop_reason(value: object) -> StopReason:
    if not value:
        return StopReason.END_TURN
    return _STOP_REASONS.get(str(value), StopReason.OTHER)


def _usage(data: object) -> TokenUsage:
    usage = as_dict(data)
    if not usage:
        return TokenUsage()  # the server reported none
    cache_read = as_int(usage.get("cache_read_input_tokens"))
    cache_write = as_int(usage.get("cache_creation_input_tokens"))
    return TokenUsage(
        # The API counts cache reads and writes apart from input_tokens; TokenUsage counts every
        # prompt token in input_tokens, as OpenAI's prompt_tokens does.
        input_tokens=as_int(usage.get("input_tokens")) + cache_read + cache_write,
        output_tokens=as_int(usage.get("output_tokens")),
        cache_read_input_tokens=cache_read,
        cache_creation_input_tokens=cache_write,
    )


def _tool_call(block: dict[str, Any], raw_input: object) -> ToolCall:
    parsed, error = parse_tool_arguments(raw_input)
    return ToolCall(str(block.get("id", "")), str(block.get("name", "")), parsed, parse_error=error)


def _parse_message(data: dict[str, Any]) -> ProviderResponse:
    content = data.get("content")
    if not isinstance(content, list):
        detail = error_message_from_body(data) or "no content in the reply"
        raise ProviderError(f"Anthropic returned no message: {detail}")
    blocks = [as_dict(block) for block in content]
    return _response(
        blocks, [_tool_call(b, b.get("input")) for b in blocks if b.get("type") == "tool_use"], data
    )


def _response(
    blocks: list[dict[str, Any]], tool_calls: list[ToolCall], message: dict[str, Any]
) -> ProviderResponse:
    text = [as_text(block.get("text")) for block in blocks if block.get("type") == "text"]
    thinking = [as_text(block.get("thinking")) for block in blocks if block.get("type") == "thinking"]
    return ProviderResponse(
        text="".join(text),
        tool_calls=tool_calls,
        thinking="".join(thinking) or None,
        stop_reason=_stop_reason(message.get("stop_reason")),
        usage=_usage(message.get("usage")),
        raw=message,
        content=[_reply_block(block) for block in blocks],
    )


def _reply_block(block: dict[str, Any]) -> dict[str, Any]:
    """A reply's block as ``ProviderResponse.content`` holds it: text, thinking and tool calls
    as they came; any other (``server_tool_use``, ``web_search_tool_result``,
    ``code_execution_tool_result``, ...) wrapped as 0.9.1 wraps it, ``{"type": "provider",
    "provider": "anthropic", "data": block}``, to be kept in its place and sent back as it is."""
    if block.get("type") in _OWN_BLOCKS:
        return block
    return {"type": "provider", "provider": PROVIDER_BLOCK_NAME, "data": block}


# --------------------------------------------------------------------------- streaming


@dataclass
class _Block:
    """One content block as it streams in: its start, then what its deltas add."""

    block: dict[str, Any]
    json_parts: list[str] = field(default_factory=list)
    unreadable: str | None = None  # why its streamed arguments could not be read

    @property
    def type(self) -> str:
        return str(self.block.get("type", ""))


@dataclass
class _StreamState:
    """Assembles the stream the way the vendor's SDK does: the result is the ``message`` a
    non-streamed call returns (``ProviderResponse.raw``), each block whole."""

    message: dict[str, Any] = field(default_factory=dict)
    blocks: dict[int, _Block] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    finished: bool = False

    def feed(self, event: str, data: dict[str, Any]) -> list[StreamChunk]:
        kind = data.get("type") or event
        if kind == "message_start":
            self.message = copy.deepcopy(as_dict(data.get("message")))
            self.usage.update(_present(as_dict(self.message.get("usage"))))
        elif kind == "content_block_start":
            return self._start_block(as_int(data.get("index")), as_dict(data.get("content_block")))
        elif kind == "content_block_delta":
            return self._delta(as_int(data.get("index")), as_dict(data.get("delta")))
        elif kind == "message_delta":
            # stop_reason, stop_sequence and what later API versions add (stop_details, ...)
            self.message.update(as_dict(data.get("delta")))
            # message_delta usage is cumulative, so it replaces what message_start said.
            self.usage.update(_present(as_dict(data.get("usage"))))
        elif kind == "message_stop":
            self.finished = True
        elif kind == _UNREADABLE_ARGUMENTS:
            self._unreadable_arguments(as_text(data.get("reason")))
        elif kind == "error":
            error = as_dict(data.get("error"))
            message = error_message_from_body(data) or "unknown stream error"
            raise ProviderError(
                f"Anthropic stream error: {message}",
                retryable=error.get("type") in _TRANSIENT_STREAM_ERRORS,
            )
        # ping, content_block_stop and event types added later need no action.
        return []

    def _unreadable_arguments(self, reason: str) -> None:
        """The stream ends at the call being streamed, whose arguments could not be read:
        the reply so far stands, with that call marked for the run to answer."""
        calls = [block for _, block in sorted(self.blocks.items()) if block.type == "tool_use"]
        if not calls or not calls[-1].block.get("id") or not calls[-1].block.get("name"):
            raise MalformedToolInputError(reason)  # no call to answer: the reply is asked again
        calls[-1].unreadable = reason
        # The stream never reached message_delta: the reply stops at a tool call.
        self.message["stop_reason"] = self.message.get("stop_reason") or "tool_use"
        self.finished = True

    def _start_block(self, index: int, start: dict[str, Any]) -> list[StreamChunk]:
        block = _Block(copy.deepcopy(start))
        self.blocks[index] = block
        if block.type == "text" and start.get("text"):
            return [StreamChunk("text_delta", start["text"])]
        if block.type == "thinking" and start.get("thinking"):
            return [StreamChunk("thinking_delta", start["thinking"])]
        if block.type == "tool_use":
            # The model has started a tool call: say which, before its arguments (as 0.9.1).
            return [StreamChunk("tool_call_delta", _call_delta(block, ""))]
        return []

    def _delta(self, index: int, delta: dict[str, Any]) -> list[StreamChunk]:
        block = self.blocks.get(index)
        if block is None:
            raise ProviderError(f"Anthropic stream sent a delta for unknown content block {index}")
        kind = delta.get("type")
        if kind == "text_delta":
            piece = as_text(delta.get("text"))
            block.block["text"] = as_text(block.block.get("text")) + piece
            return [StreamChunk("text_delta", piece)] if piece else []
        if kind == "thinking_delta":
            piece = as_text(delta.get("thinking"))
            block.block["thinking"] = as_text(block.block.get("thinking")) + piece
            return [StreamChunk("thinking_delta", piece)] if piece else []
        if kind == "signature_delta":
            # The signature proves the thinking is the model's; the API checks it when the
            # block comes back, so it is kept exactly as sent. One delta carries all of it
            # (the vendor's SDK, too, sets rather than appends).
            block.block["signature"] = as_text(delta.get("signature"))
            return []
        if kind == "input_json_delta":
            piece = as_text(delta.get("partial_json"))
            block.json_parts.append(piece)
            if piece and block.type == "tool_use":
                return [StreamChunk("tool_call_delta", _call_delta(block, piece))]
            # A server tool's input, or an empty piece: nothing to show, but the stream is
            # alive (a chunk of any kind resets the run's idle deadline).
            return [StreamChunk("progress")]
        if kind == "citations_delta":
            citations = block.block.get("citations")
            block.block["citations"] = [
                *(citations if isinstance(citations, list) else []),
                delta.get("citation"),
            ]
            return []
        return []  # delta types added later: nothing the engine uses

    def response(self) -> ProviderResponse:
        blocks: list[dict[str, Any]] = []
        tool_calls: list[ToolCall] = []
        for _, block in sorted(self.blocks.items()):
            if block.unreadable is not None:
                raw_input: object = {INVALID_ARGUMENTS: block.unreadable}
                block.block["input"] = raw_input
            elif block.json_parts:
                # Blocks that stream their input (tool_use, server_tool_use, mcp_tool_use)
                # start with an empty one; the joined deltas are the whole input.
                raw_input = "".join(block.json_parts)
                parsed, _ = parse_tool_arguments(raw_input)
                block.block["input"] = parsed
            else:
                raw_input = block.block.get("input")
            if block.type == "tool_use":
                tool_calls.append(_tool_call(block.block, raw_input))
            blocks.append(block.block)
        message = {**self.message, "content": blocks, "usage": dict(self.usage)}
        return _response(blocks, tool_calls, message)


def _present(usage: dict[str, Any]) -> dict[str, Any]:
    # Counts the server leaves null must not erase ones it reported earlier.
    return {key: value for key, value in usage.items() if value is not None}


def _call_delta(block: _Block, piece: str) -> ToolCallDelta:
    # The id and name the final ToolCall gets (_tool_call), so the pieces name the call that runs.
    return ToolCallDelta(str(block.block.get("id", "")), str(block.block.get("name", "")), piece)


async def _parse_stream(events: AsyncIterator[SSEEvent]) -> AsyncGenerator[StreamChunk, None]:
    state = _StreamState()
    async for event, data in events:
        for chunk in state.feed(event, decode_event_json("Anthropic", data)):
            yield chunk
        if state.finished:
            break
    if not state.finished:
        # Retried like a dropped connection; what was assembled is a fragment.
        raise IncompleteStreamError("Anthropic stream ended before message_stop")
    yield StreamChunk("response", state.response())


def with_cache_markers(
    payload: dict[str, Any], cache: PromptCacheHint | None, message_count: int
) -> dict[str, Any]:
    """``payload`` with Anthropic's ``cache_control`` markers where ``cache`` says the stable
    prefix ends (``system``, ``tools``, ``message:<i>``; three markers at most, under the
    API's four); the same object when there is nothing to mark. A block that cannot carry a
    marker (thinking) is left alone."""
    if cache is None or not cache.enabled or not cache.breakpoints:
        return payload
    control: dict[str, Any] = {"type": "ephemeral"}
    if cache.ttl_seconds is not None and cache.ttl_seconds >= 3600:
        control["ttl"] = "1h"  # the longer of the two lifetimes the API offers (5m, 1h)
    marked = dict(payload)
    for breakpoint in cache.breakpoints:
        if breakpoint == "system" and isinstance(marked.get("system"), str) and marked["system"]:
            marked["system"] = [{"type": "text", "text": marked["system"], "cache_control": dict(control)}]
        elif breakpoint == "tools" and marked.get("tools"):
            tools = list(marked["tools"])
            tools[-1] = {**tools[-1], "cache_control": dict(control)}
            marked["tools"] = tools
        elif breakpoint.startswith("message:") and marked.get("messages"):
            wire = list(marked["messages"])
            index = _wire_index(breakpoint, message_count, len(wire))
            if index is not None:
                wire[index] = _marked_message(wire[index], control)
                marked["messages"] = wire
    return marked


def _wire_index(breakpoint: str, message_count: int, wire_count: int) -> int | None:
    """The wire message a ``message:<i>`` breakpoint names: the last one for the request's
    last message (the wire form may join or drop messages), else the same position."""
    try:
        index = int(breakpoint.split(":", 1)[1])
    except ValueError:
        return None
    if index >= message_count - 1:
        return wire_count - 1
    return index if 0 <= index < wire_count else None


def _marked_message(message: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str) and content:
        return {**message, "content": [{"type": "text", "text": content, "cache_control": dict(control)}]}
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        if content[-1].get("type") in ("thinking", "redacted_thinking"):
            return message
        return {**message, "content": [*content[:-1], {**content[-1], "cache_control": dict(control)}]}
    return message
