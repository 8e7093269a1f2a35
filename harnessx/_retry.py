"""Which model-call failures are worth another attempt, and how long to wait first.

One retry path for every provider: the driver retries a failed model call under the
agent's ``RetryPolicy`` when ``is_transient`` says another attempt may succeed, whatever
the provider (the built-in HTTP ones make a single attempt each time they are called).
A provider can decide for itself by defining ``is_transient(exc) -> bool`` and
``retry_after(exc) -> float | None``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import httpx

from harnessx._errors import ContextOverflowError, ProviderError
from harnessx.providers._http import RETRYABLE_STATUS_CODES, parse_retry_after

__all__ = [
    "is_context_overflow",
    "is_permanent",
    "is_rate_limited",
    "is_transient",
    "is_transient_text",
    "retry_after",
    "sdk_connection_failure",
]

# Messages that say "try again later" when an exception carries nothing better (harnessx
# 0.9.1's list, which programs' providers rely on).
_TRANSIENT_WORDS = (
    "resource_exhausted",
    "peer closed connection",
    "incomplete chunked read",
    "stream ended",
    "stalled",
    "rate limit",
    "rate_limit",
    "too many requests",
    "overloaded",
    "unavailable",
    "timeout",
    "timed out",
    "temporarily",
    "connection reset",
    "server error",
    "bad gateway",
    "gateway timeout",
)
# ... and ones that say no number of attempts will help, whatever the status says: a quota
# or billing 429 is not throttling (after any backoff it is still spent).
_PERMANENT_WORDS = (
    "quota exceeded",
    "insufficient_quota",
    "exceeded your current quota",
    "billing",
    "payment required",
    "spending limit",
    "credit balance",
    "account is not active",
    "suspended",
)
# A request too long for the model's window: the same request will not fit next time either
# (it is condensed instead: _overflow). A throttle may say "too many tokens" too, but it
# names a rate.
_OVERFLOW_WORDS = (
    "context length",
    "context_length_exceeded",
    "maximum context",
    "too many tokens",
    "prompt is too long",
    "reduce the length",
    "context overflow",
)
_THROTTLE_WORDS = ("rate limit", "too many requests", "throttl")


def is_permanent(exc: BaseException) -> bool:
    """True when no number of attempts will help (quota, billing), whatever the status."""
    text = str(exc).lower()
    return any(word in text for word in _PERMANENT_WORDS)


def is_context_overflow(exc: BaseException) -> bool:
    """True when ``exc`` refused a request as too long for the model's context window."""
    if isinstance(exc, ContextOverflowError):
        return True
    text = str(exc).lower()
    return any(w in text for w in _OVERFLOW_WORDS) and not any(w in text for w in _THROTTLE_WORDS)


def is_transient_text(text: str) -> bool:
    """True when an error message reads like throttling, overload or a timeout."""
    lowered = str(text).lower()
    return any(word in lowered for word in _TRANSIENT_WORDS)


def is_transient(exc: BaseException, provider: Any = None) -> bool:
    """True when one more attempt at the same call could plausibly succeed."""
    classify = getattr(provider, "is_transient", None)
    if callable(classify):
        try:
            return bool(classify(exc))
        except Exception:  # a broken classifier must not turn a failure into a crash
            pass
    # Permanent and overflow failures may come with a 429 or a 5xx: settled before the status.
    if is_permanent(exc) or is_context_overflow(exc):
        return False
    if isinstance(exc, ProviderError):
        return exc.retryable
    status = _status_of(exc)
    if status is not None:
        return status in RETRYABLE_STATUS_CODES or status >= 500
    if isinstance(exc, TimeoutError | ConnectionError | asyncio.TimeoutError | httpx.TransportError):
        return True
    return is_transient_text(str(exc))


# Exception class names the vendor SDKs (anthropic, openai) use for "could not reach the
# server" and "timed out": no status, not an OSError, "Connection error." as their text.
SDK_CONNECTION_ERRORS = frozenset({"APIConnectionError", "APITimeoutError"})


def sdk_connection_failure(exc: BaseException) -> bool:
    """True when a vendor SDK wrapped a lost connection or a timeout (``APIConnectionError``,
    ``APITimeoutError``, here or in the chain of causes), which another attempt may get
    through; false when a forward proxy refused the tunnel with a 4xx, a decision that the
    same request meets again."""
    seen: set[int] = set()
    current: BaseException | None = exc
    wrapped = False
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(base.__name__ in SDK_CONNECTION_ERRORS for base in type(current).__mro__):
            wrapped = True
        if proxy_refused(current):
            return False
        current = current.__cause__ or current.__context__
    return wrapped


def proxy_refused(exc: BaseException) -> bool:
    """A forward proxy refusing the tunnel with a 4xx (``httpx.ProxyError("403 Forbidden")``):
    a policy answer, not a lost connection."""
    if "proxy" not in type(exc).__name__.lower():
        return False
    text = str(exc)
    return any(str(code) in text for code in range(400, 452))


_RATE_LIMIT_WORDS = ("rate limit", "rate_limit", "too many requests", "overloaded")


def is_rate_limited(exc: BaseException, provider: Any = None) -> bool:
    """True for a throttle (429) or an overload (529): the same call is welcome a little
    later, so it earns the deeper ``RetryPolicy.rate_limit_attempts``."""
    classify = getattr(provider, "is_rate_limited", None)
    if callable(classify):
        try:
            return bool(classify(exc))
        except Exception:
            pass
    if is_permanent(exc) or is_context_overflow(exc):
        return False
    status = _status_of(exc)
    if status is not None:
        return status in (429, 529)
    text = str(exc).lower()
    return any(word in text for word in _RATE_LIMIT_WORDS)


def retry_after(exc: BaseException, provider: Any = None) -> float | None:
    """The wait the server asked for before the next attempt, in seconds, if it said."""
    reader = getattr(provider, "retry_after", None)
    if callable(reader):
        try:
            value = reader(exc)
            return None if value is None else max(0.0, float(value))
        except Exception:
            pass
    if isinstance(exc, ProviderError):
        return exc.retry_after
    for holder in (getattr(exc, "response", None), exc):
        headers = getattr(holder, "headers", None)
        if isinstance(headers, Mapping | httpx.Headers):
            return parse_retry_after({str(k).lower(): str(v) for k, v in headers.items()})
    return _body_retry_after(getattr(exc, "body", None))


def _body_retry_after(body: object) -> float | None:
    """A wait a vendor's error body states (``{"retry_after": 3}``, or inside its
    ``"error"`` object), as 0.9.1 reads it when no header said."""
    for holder in (body, body.get("error") if isinstance(body, Mapping) else None):
        value = holder.get("retry_after") if isinstance(holder, Mapping) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return float(value)
    return None


def _status_of(exc: BaseException) -> int | None:
    for name in ("status_code", "status", "http_status", "code"):
        value = getattr(exc, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
            return value
    return None
