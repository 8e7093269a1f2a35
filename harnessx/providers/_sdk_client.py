"""A vendor SDK client (``anthropic.AsyncAnthropic``, ``openai.AsyncOpenAI``) as a provider's
transport.

Programs written for the original harnessx hand their providers an SDK client
(``AnthropicProvider(client=AsyncAnthropic(...))``) to choose its endpoint, retries, proxy or
a test double. A provider given one builds the same request it would send over HTTP, calls
the client's method with it as keyword arguments, and reads what the client returns through
the same parsers as a reply from the wire: this module only turns the SDK's objects back
into the JSON they came from, and the SDK's exceptions into ``ProviderError``.

Nothing here imports a vendor SDK: a client is used through the attributes the SDK
documents, so a double with the same shape (a ``SimpleNamespace`` of async functions) works
as well as the real client.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from types import SimpleNamespace
from typing import Any

import httpx

from harnessx._errors import ConfigurationError, ProviderError

__all__ = [
    "attributes",
    "await_sdk",
    "call_sdk",
    "jsonable",
    "model_and_client",
    "sdk_error",
    "sdk_kwargs",
    "sse",
]


def jsonable(value: object) -> Any:
    """``value`` as the JSON it was decoded from: pydantic models (the SDKs' types) by
    ``model_dump``, a ``SimpleNamespace`` or a plain object by its attributes."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            # The fields the server sent (a null inside a tool's input included), without
            # the SDK's own additions (__api_exclude__: parsed_output, ...).
            dumped = dump(mode="json", exclude_unset=True, exclude=getattr(value, "__api_exclude__", None))
        except TypeError:  # a model_dump without pydantic's keywords
            dumped = dump()
        if isinstance(dumped, Mapping):
            return jsonable(dumped)
    if isinstance(value, SimpleNamespace) or hasattr(value, "__dict__"):
        return {key: jsonable(item) for key, item in vars(value).items() if not key.startswith("_")}
    return str(value)


def attributes(value: object, names: tuple[str, ...]) -> dict[str, Any]:
    """The named attributes of ``value`` that are set, as JSON; for objects (test doubles
    such as ``MagicMock``) that answer every attribute, so only the known ones are read."""
    if isinstance(value, Mapping):
        return {name: jsonable(value[name]) for name in names if value.get(name) is not None}
    found: dict[str, Any] = {}
    for name in names:
        item = getattr(value, name, None)
        if item is None:
            continue
        plain = isinstance(item, str | int | float | bool | list | tuple | Mapping | SimpleNamespace)
        if plain or hasattr(item, "model_dump"):
            found[name] = jsonable(item)
    return found


def model_and_client(provider: str, model: object, client: object | None) -> tuple[str | None, object | None]:
    """0.9.1 took the SDK client as a provider's first positional argument; ours take the
    model name there. A first argument that is not a name is taken for the client."""
    if model is None or isinstance(model, str):
        return model, client
    if client is not None:
        raise ConfigurationError(
            f"{provider} got a client twice ({type(model).__name__} as the model name and client=): "
            "pass the model name as a string, or the client once"
        )
    return None, model


def sdk_kwargs(
    method: Callable[..., object],
    payload: Mapping[str, Any],
    *,
    extra_body_fields: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """``payload`` as keyword arguments of an SDK method. A field the method has no parameter
    for (a newer API field, ``extra_body=`` of the provider) goes in the SDK's ``extra_body``,
    which it merges into the JSON it sends; so do ``extra_body_fields``, which older SDK
    versions do not name."""
    parameters: Mapping[str, inspect.Parameter]
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):  # a callable without a signature: pass everything
        parameters = {}
    takes_any = not parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in payload.items():
        if key in extra_body_fields or not (takes_any or key in parameters):
            extra[key] = value
        else:
            kwargs[key] = value
    if extra:
        kwargs["extra_body"] = {**kwargs.get("extra_body", {}), **extra}
    return kwargs


def _sends_temperature(kwargs: Mapping[str, Any]) -> bool:
    extra = kwargs.get("extra_body")
    return "temperature" in kwargs or (isinstance(extra, Mapping) and "temperature" in extra)


def _without_temperature(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    # An SDK without the parameter (anthropic 2.x: the current API version has none) got it
    # in extra_body.
    out = {key: value for key, value in kwargs.items() if key != "temperature"}
    extra = out.get("extra_body")
    if isinstance(extra, Mapping) and "temperature" in extra:
        rest = {key: value for key, value in extra.items() if key != "temperature"}
        if rest:
            out["extra_body"] = rest
        else:
            del out["extra_body"]
    return out


def _refuses_temperature(exc: BaseException, kwargs: Mapping[str, Any]) -> bool:
    # An SDK (or model) that has no temperature: a TypeError from the method's signature, or
    # the server's refusal naming the field.
    if not _sends_temperature(kwargs) or "temperature" not in str(exc):
        return False
    return isinstance(exc, TypeError) or getattr(exc, "status_code", None) == 400


def call_sdk(method: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """``method(**kwargs)``, once more without ``temperature`` if that is what it refused
    (as 0.9.1 did). For methods that return their result directly (``messages.stream``);
    ``await_sdk`` is the form for coroutine methods."""
    try:
        return method(**kwargs)
    except TypeError as exc:
        if not _refuses_temperature(exc, kwargs):
            raise
    return method(**_without_temperature(kwargs))


async def await_sdk(method: Callable[..., Awaitable[Any]], kwargs: dict[str, Any]) -> Any:
    """``await method(**kwargs)``, once more without ``temperature`` if it was refused."""
    try:
        return await method(**kwargs)
    except Exception as exc:
        if not _refuses_temperature(exc, kwargs):
            raise
    return await method(**_without_temperature(kwargs))


def sdk_error(provider_name: str, exc: BaseException, redact: Callable[[str], str]) -> ProviderError:
    """A failed SDK call as a ``ProviderError`` that says whether to try again: by the HTTP
    status the SDK's ``APIStatusError`` carries (with the server's ``Retry-After``), or as a
    connection failure or timeout."""
    # Imported here: _http imports this module (and _retry imports _http).
    from harnessx._retry import proxy_refused, sdk_connection_failure
    from harnessx.providers._http import RETRYABLE_STATUS_CODES, parse_retry_after

    if isinstance(exc, ProviderError):
        return exc
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    name = type(exc).__name__
    if status is not None:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
        retry_after = parse_retry_after(headers) if isinstance(headers, Mapping) else None
        return ProviderError(
            redact(f"{provider_name} API returned HTTP {status}: {exc}"),
            status_code=status,
            retryable=status in RETRYABLE_STATUS_CODES,
            retry_after=retry_after,
        )
    # A proxy refusing the tunnel (a 4xx to CONNECT) is policy: the same request meets it again.
    connection = sdk_connection_failure(exc) or (
        isinstance(exc, ConnectionError | TimeoutError | httpx.TransportError) and not proxy_refused(exc)
    )
    if connection:
        return ProviderError(redact(f"{provider_name} connection failed: {name}: {exc}"), retryable=True)
    return ProviderError(redact(f"{provider_name} request failed: {name}: {exc}"))


def sse(event: str, data: object) -> tuple[str, str]:  # _http.SSEEvent
    """An SDK stream event as the server-sent event it was read from."""
    return (event, json.dumps(jsonable(data)))
