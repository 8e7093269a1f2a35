"""Shared machinery for providers that reach a model over HTTP.

``HTTPProvider`` owns the parts every HTTP provider needs and none should get subtly
different: API-key handling (the key never shows up in ``repr``, error messages or logs),
turning every failure into a ``ProviderError`` with the server's own message that says
whether another attempt may succeed (429 / 5xx / timeouts / dropped connections, with the
server's ``Retry-After``), and a server-sent-events parser for streamed replies. Each call
is one attempt: the runtime retries a retryable failure under the agent's ``RetryPolicy``,
the same way for every provider (``harnessx._retry``).
"""

from __future__ import annotations

import email.utils
import inspect
import json
import logging
import math
import os
import time
from abc import abstractmethod
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Mapping
from contextlib import aclosing, asynccontextmanager
from datetime import UTC
from typing import Any, ClassVar

import httpx

from harnessx._errors import ConfigurationError, HarnessError, ProviderError
from harnessx._policies import PromptCacheHint
from harnessx._redaction import redact
from harnessx.providers._base import INVALID_ARGUMENTS, LLMProvider, StreamChunk
from harnessx.providers._sdk_client import sdk_error

__all__ = [
    "RETRYABLE_STATUS_CODES",
    "ChunkParser",
    "HTTPProvider",
    "SSEEvent",
    "as_dict",
    "as_int",
    "as_text",
    "decode_event_json",
    "error_message_from_body",
    "estimate_tokens",
    "iter_sse",
    "parse_retry_after",
    "marked_tool_arguments",
    "parse_tool_arguments",
]

logger = logging.getLogger("harnessx.providers")

# 408 is not in every SDK's list, but it is the server saying "you were too slow", which is
# the same situation as a client-side timeout. 529 is Anthropic's "overloaded".
RETRYABLE_STATUS_CODES = frozenset({408, 429, 500, 502, 503, 504, 529})

SSEEvent = tuple[str, str]
ChunkParser = Callable[[AsyncIterator[SSEEvent]], AsyncGenerator[StreamChunk, None]]

_SECRET_PLACEHOLDER = "[secure]"
_MAX_MESSAGE_CHARS = 500


# --------------------------------------------------------------------------- helpers


async def iter_sse(lines: AsyncIterable[str]) -> AsyncGenerator[SSEEvent, None]:
    """Parse server-sent events from text lines (e.g. ``response.aiter_lines()``).

    Yields ``(event, data)``; ``event`` is ``"message"`` when the server named none, and a
    multi-line ``data`` field is joined with newlines. Comment lines (``:``) are skipped;
    ``id`` and ``retry`` are ignored because API streams are never resumed. An event the
    server did not terminate with a blank line before closing is still delivered, since
    some OpenAI-compatible servers omit the final blank line.
    """
    event = ""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield (event or "message", "\n".join(data))
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        # The spec strips exactly one space after the colon; more belong to the value.
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    if data:
        yield (event or "message", "\n".join(data))


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the server asked us to wait, or ``None`` if it did not say (or said nonsense).

    ``retry-after-ms`` (sent by OpenAI and Anthropic) is more precise, so it wins over
    ``Retry-After``, which may be a number of seconds or an HTTP date.
    """
    millis = _finite_float(headers.get("retry-after-ms"))
    if millis is not None and millis >= 0:
        return millis / 1000.0
    value = headers.get("retry-after")
    if not value:
        return None
    seconds = _finite_float(value)
    if seconds is not None:
        return max(0.0, seconds)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def _finite_float(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def parse_tool_arguments(raw: object) -> tuple[dict[str, Any], str | None]:
    """Turn a model's tool arguments into ``(input, parse_error)``; never raises.

    Empty arguments mean "no arguments" (models send ``""`` for parameterless tools).
    Anything else that is not a JSON object yields ``({}, <what was wrong>)`` so the engine
    can tell the model instead of crashing the run.
    """
    if isinstance(raw, dict):
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if not isinstance(raw, str):
        return {}, f"tool arguments must be a JSON object, got {type(raw).__name__}"
    try:
        # Models often write a raw newline inside a string (a file's body): accept it.
        value = json.loads(raw, strict=False)
    except (json.JSONDecodeError, RecursionError) as exc:
        if not isinstance(exc, json.JSONDecodeError):
            return {}, f"tool arguments are not valid JSON ({exc}): {_shorten(raw, 200)}"
        reason = f"{exc.msg} at position {exc.pos}"
        if exc.msg.startswith("Unterminated string") or exc.pos >= len(raw.rstrip()):
            # A document that stops part way (a stream cut off): the model should send it whole.
            reason = f"not complete JSON: cut off part way, after {len(raw)} characters"
        return {}, f"tool arguments are not valid JSON ({reason}): {_shorten(raw, 200)}"
    if not isinstance(value, dict):
        return {}, f"tool arguments must be a JSON object, got {_json_type_name(value)}"
    return value, None


def marked_tool_arguments(raw: str | None) -> dict[str, Any]:
    """``parse_tool_arguments`` in the form of harnessx 0.9.1's ``providers.base``: the
    argument object, or ``{INVALID_ARGUMENTS: <what was wrong>}`` (a custom provider may
    hand such an input to ``ToolCall``; the call is then answered with the reason)."""
    value, error = parse_tool_arguments(raw)
    return {INVALID_ARGUMENTS: error} if error is not None else value


def _json_type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def estimate_tokens(*parts: object) -> int:
    """Rough token count: about four characters of JSON per token.

    Only for providers without a counting endpoint; it can be off by tens of percent,
    particularly for non-English text and code.
    """
    text = json.dumps(parts, ensure_ascii=False, default=str)
    return max(1, math.ceil(len(text) / 4))


def as_dict(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (wire data is untrusted)."""
    return value if isinstance(value, dict) else {}


def as_int(value: object) -> int:
    """An integer count from wire data; missing or null counts are zero."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return 0


def as_text(value: object) -> str:
    """Message content as text; non-string content is sent as its JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def decode_event_json(provider_name: str, data: str) -> dict[str, Any]:
    """The JSON object carried by one streamed event."""
    try:
        value = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ProviderError(
            f"{provider_name} sent a stream event that is not JSON ({exc.msg}): {_shorten(data, 200)}"
        ) from None
    if not isinstance(value, dict):
        raise ProviderError(f"{provider_name} sent a stream event that is not a JSON object")
    return value


def error_message_from_body(body: object) -> str | None:
    """The human-readable message in an error body, across the shapes servers use.

    OpenAI and Anthropic: ``{"error": {"type", "message"}}``; Ollama: ``{"error": str}``;
    vLLM: ``{"message": str}``; FastAPI-based servers: ``{"detail": str}``.
    """
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        kind = error.get("type") or error.get("code")
        if isinstance(message, str) and message:
            return f"{kind}: {message}" if isinstance(kind, str) and kind else message
    if isinstance(error, str) and error:
        return error
    for key in ("message", "detail"):
        value = body.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _shorten(text: str, limit: int = _MAX_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


class _Transient(Exception):
    """A failure worth retrying. Internal: callers only ever see ``ProviderError``."""

    def __init__(self, message: str, *, status_code: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.retry_after = retry_after


# --------------------------------------------------------------------------- base class


class HTTPProvider(LLMProvider):
    """Base for providers that call a JSON-over-HTTP model API.

    Subclasses set the class constants and implement ``_headers``, ``create``,
    ``count_tokens`` and (optionally) ``stream``, using ``_post_json`` and
    ``_stream_chunks`` for the actual requests. Each makes one attempt and raises a
    ``ProviderError`` whose ``retryable`` and ``retry_after`` tell the runtime's retry.
    """

    provider_name: ClassVar[str]
    api_key_env: ClassVar[str]
    base_url_env: ClassVar[str]
    default_base_url: ClassVar[str]

    def __init__(
        self,
        model: str | None,
        *,
        api_key: str | None,
        base_url: str | None,
        timeout: float,
        http_client: httpx.AsyncClient | None,
        extra_headers: Mapping[str, str] | None,
        client: object | None = None,
    ) -> None:
        self.model = model
        # A vendor SDK client to send requests through instead of HTTP (``_sdk_client``);
        # the caller's, like an injected http_client. Any: it is used by the attributes the
        # SDK documents, whatever its class (a test double will do).
        self._sdk: Any = client
        # The SDK client ``client`` built for a program to read when none was given: the
        # provider's own requests never go through it.
        self._own_sdk: Any = None
        # Resolved once so that repr() can say whether a key is present; the value itself
        # is only ever read by _headers().
        self._api_key = api_key or os.environ.get(self.api_key_env) or None
        self.base_url = (base_url or os.environ.get(self.base_url_env) or self.default_base_url).rstrip("/")
        self.timeout = timeout
        self.extra_headers = dict(extra_headers or {})
        self._client = http_client
        self._owns_client = http_client is None
        # Set once a request refused for its prompt-cache fields went through without them:
        # the server does not take them, so later calls leave them out instead of going twice.
        self._cache_fields_refused = False

    def __repr__(self) -> str:
        key = _SECRET_PLACEHOLDER if self._api_key else "None"
        if self._sdk is not None:
            # The calls go through the client given: its endpoint is the one that matters (its
            # key stays out of sight like ours).
            sdk = type(self._sdk).__name__
            url = redact(str(getattr(self._sdk, "base_url", "") or "").rstrip("/"))  # a proxy's password
            shown = f"client={sdk}(base_url={url!r})"
            return f"{type(self).__name__}(model={self.model!r}, {shown}, api_key={key})"
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r}, api_key={key})"

    @property
    def client(self) -> Any:
        """The vendor SDK client: the one given as ``client=``, else one made on first read
        for the same endpoint (key, base URL, timeout, headers) with ``max_retries=0``, as
        0.9.1's providers hold one (a run owns the retries). Without ``client=`` this
        provider's own calls go over its HTTP client; the SDK client is the program's to use,
        and ``aclose()`` closes it. Assigning a client sends the calls through it."""
        if self._sdk is not None:
            return self._sdk
        if self._own_sdk is None:
            self._own_sdk = self._build_sdk_client()
        return self._own_sdk

    @client.setter
    def client(self, value: object) -> None:
        self._sdk = value

    def _build_sdk_client(self) -> Any:
        """The vendor SDK client for ``client`` (a subclass knows its vendor's)."""
        raise AttributeError(f"{type(self).__name__} has no vendor SDK client; pass one as client=")

    @property
    def http_client(self) -> httpx.AsyncClient:
        """The client requests go through. An owned one is created on first use, so a
        provider that is never called holds no connections."""
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout))
        return self._client

    async def aclose(self) -> None:
        """Close the client if this provider created it; an injected ``http_client`` is the
        caller's. A vendor SDK client (``client=``) is closed, as 0.9.1's providers did."""
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
        # The SDK client built for ``client`` is this provider's; one given is closed too,
        # as 0.9.1's providers did.
        own, self._own_sdk = self._own_sdk, None
        for sdk in (self._sdk, own):
            close = getattr(sdk, "close", None) or getattr(sdk, "aclose", None)
            if sdk is not None and callable(close):
                closed = close()
                if inspect.isawaitable(closed):
                    await closed

    # ------------------------------------------------------------------ subclass hooks

    @abstractmethod
    def _headers(self) -> dict[str, str]:
        """Authentication and API headers. Raises ``ConfigurationError`` if a needed key is missing."""

    def _missing_key_error(self, extra_hint: str = "") -> ConfigurationError:
        cls = type(self).__name__
        return ConfigurationError(
            f"{cls} has no API key: set the {self.api_key_env} environment variable "
            f"or pass api_key= to {cls}(){extra_hint}"
        )

    def _resolve_model(self, model: str | None) -> str:
        chosen = model or self.model
        if not chosen:
            cls = type(self).__name__
            raise ConfigurationError(
                f"{cls} needs a model name: pass model= to {cls}() or set AgentConfig.model"
            )
        return chosen

    # ------------------------------------------------------------------ requests

    def _with_cache_fields(
        self, payload: dict[str, Any], cache: PromptCacheHint | None, message_count: int
    ) -> dict[str, Any]:
        """``payload`` with what this API takes of the prompt-cache hint, or ``payload``
        itself when there is nothing to add. No fields by default."""
        return payload

    def _refused_cache_fields(self, exc: ProviderError) -> bool:
        """Whether ``exc`` may be a refusal of what ``_with_cache_fields`` added."""
        return False

    def _cached(
        self, payload: dict[str, Any], cache: PromptCacheHint | None, message_count: int
    ) -> dict[str, Any]:
        if self._cache_fields_refused:
            return payload
        return self._with_cache_fields(payload, cache, message_count)

    async def _post_cached(
        self, path: str, payload: dict[str, Any], cache: PromptCacheHint | None, message_count: int
    ) -> dict[str, Any]:
        """``_post_json`` with the prompt-cache fields, sent once more without them if the
        server refuses them: caching is an optimisation, never a reason for a call to fail."""
        cached = self._cached(payload, cache, message_count)
        try:
            return await self._post_json(path, cached)
        except ProviderError as exc:
            if cached is payload or not self._refused_cache_fields(exc):
                raise
        data = await self._post_json(path, payload)
        self._cache_fields_refused = True
        return data

    async def _stream_cached(
        self,
        path: str,
        payload: dict[str, Any],
        parse: ChunkParser,
        cache: PromptCacheHint | None,
        message_count: int,
    ) -> AsyncGenerator[StreamChunk, None]:
        """``_stream_chunks`` with the prompt-cache fields, as ``_post_cached``; a refusal
        can only come before the first chunk, so nothing is delivered twice."""
        cached = self._cached(payload, cache, message_count)
        delivered = False
        try:
            async for chunk in self._stream_chunks(path, cached, parse):
                delivered = True
                yield chunk
            return
        except ProviderError as exc:
            if delivered or cached is payload or not self._refused_cache_fields(exc):
                raise
        async for chunk in self._stream_chunks(path, payload, parse):
            self._cache_fields_refused = True
            yield chunk

    async def _post_json(self, path: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``payload`` and return the decoded JSON object (one attempt)."""
        if self._sdk is not None:
            try:
                return await self._sdk_post(path, payload)
            except HarnessError:
                raise
            except Exception as exc:
                raise sdk_error(self.provider_name, exc, self._redact) from exc
        headers = self._request_headers()
        try:
            response = await self.http_client.post(self._url(path), json=payload, headers=headers)
            self._check_response(response)
            return self._decode_json(response)
        except (_Transient, ProviderError, httpx.HTTPError) as exc:
            raise self._provider_error(exc) from exc

    async def _stream_chunks(
        self, path: str, payload: Mapping[str, Any], parse: ChunkParser
    ) -> AsyncGenerator[StreamChunk, None]:
        """POST ``payload`` and yield what ``parse`` makes of the server-sent events (one
        attempt). A stream that breaks off after part of the reply is retryable too: the
        runtime then announces ``attempt_reset`` so that followers drop the part they saw."""
        delivered = False
        try:
            if self._sdk is not None:
                async with aclosing(self._sdk_stream(payload, parse)) as chunks:
                    async for chunk in chunks:
                        delivered = True
                        yield chunk
                return
            headers = self._request_headers()
            async with (
                self._open_stream(path, payload, headers) as response,
                aclosing(iter_sse(response.aiter_lines())) as events,
                aclosing(parse(events)) as chunks,
            ):
                async for chunk in chunks:
                    delivered = True
                    yield chunk
        except Exception as exc:
            if isinstance(exc, HarnessError) and not isinstance(exc, ProviderError):
                raise  # IncompleteStreamError and the like: already what the runtime reads
            if self._sdk is not None:
                error = sdk_error(self.provider_name, exc, self._redact)
            elif isinstance(exc, _Transient | ProviderError | httpx.HTTPError):
                error = self._provider_error(exc)
            else:
                raise
            if delivered:
                raise ProviderError(
                    f"{self.provider_name} stream broke off after part of the reply was delivered: {error}",
                    status_code=error.status_code,
                    retryable=error.retryable,
                    retry_after=error.retry_after,
                ) from exc
            raise error from exc

    @asynccontextmanager
    async def _open_stream(
        self, path: str, payload: Mapping[str, Any], headers: dict[str, str]
    ) -> AsyncIterator[httpx.Response]:
        client = self.http_client
        request = client.build_request("POST", self._url(path), json=payload, headers=headers)
        response = await client.send(request, stream=True)
        try:
            if not response.is_success:
                await response.aread()  # the error body carries the server's message
                self._check_response(response)
            yield response
        finally:
            await response.aclose()

    # ------------------------------------------------------------------ an SDK client

    async def _sdk_post(self, path: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """What ``_post_json(path, payload)`` returns, asked of the SDK client given."""
        raise ConfigurationError(f"{type(self).__name__} cannot send {path} through an SDK client")

    def _sdk_stream(
        self, payload: Mapping[str, Any], parse: ChunkParser
    ) -> AsyncGenerator[StreamChunk, None]:
        """What ``_stream_chunks`` yields for ``payload``, asked of the SDK client given."""
        raise ConfigurationError(f"{type(self).__name__} cannot stream through an SDK client")

    def _request_headers(self) -> dict[str, str]:
        return {**self._headers(), **self.extra_headers}

    def _url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    # ------------------------------------------------------------------ failures

    def _check_response(self, response: httpx.Response) -> None:
        """Raise ``_Transient`` or ``ProviderError`` for an unsuccessful response."""
        if response.is_success:
            return
        status = response.status_code
        message = self._redact(
            f"{self.provider_name} API returned HTTP {status}: {self._server_message(response)}"
        )
        if status in RETRYABLE_STATUS_CODES:
            raise _Transient(message, status_code=status, retry_after=parse_retry_after(response.headers))
        if status in (401, 403):
            cls = type(self).__name__
            message += (
                f" (check the API key: the {self.api_key_env} environment variable "
                f"or the api_key= argument of {cls})"
            )
        raise ProviderError(message, status_code=status)

    @staticmethod
    def _server_message(response: httpx.Response) -> str:
        try:
            body = response.json()
        except ValueError:  # also covers undecodable bytes
            body = None
        found = error_message_from_body(body)
        if found:
            return _shorten(found)
        text = response.text.strip()
        return _shorten(text) if text else (response.reason_phrase or "no error message")

    def _decode_json(self, response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            raise ProviderError(
                self._redact(
                    f"{self.provider_name} returned a body that is not JSON: {_shorten(response.text)}"
                ),
                status_code=response.status_code,
            ) from None
        if not isinstance(body, dict):
            raise ProviderError(f"{self.provider_name} returned JSON that is not an object")
        return body

    def _provider_error(self, exc: Exception) -> ProviderError:
        """A failed attempt as a ``ProviderError`` that says whether to try again."""
        if isinstance(exc, _Transient):
            return ProviderError(
                exc.message, status_code=exc.status_code, retryable=True, retry_after=exc.retry_after
            )
        if isinstance(exc, ProviderError):
            if exc.retryable:
                message = self._redact(str(exc))
                return ProviderError(
                    message, status_code=exc.status_code, retryable=True, retry_after=exc.retry_after
                )
            return exc
        if isinstance(exc, httpx.TimeoutException):
            return ProviderError(
                f"{self.provider_name} request timed out ({type(exc).__name__})", retryable=True
            )
        # NetworkError: could not connect / connection reset; RemoteProtocolError: the
        # server hung up mid-response. Both are typical of overloaded or restarting servers.
        if isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError):
            return ProviderError(
                self._redact(f"{self.provider_name} connection failed: {type(exc).__name__}: {exc}"),
                retryable=True,
            )
        return ProviderError(
            self._redact(f"{self.provider_name} request failed: {type(exc).__name__}: {exc}")
        )

    def _redact(self, text: str) -> str:
        """Servers sometimes echo the key they rejected; never pass it on."""
        if self._api_key and self._api_key in text:
            return text.replace(self._api_key, _SECRET_PLACEHOLDER)
        return text
