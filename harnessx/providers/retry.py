"""Which model-call failures are worth another attempt (harnessx 0.9.1's
``harnessx.providers.retry``).

The driver retries a failed model call under the agent's ``RetryPolicy`` when
``is_transient`` says so, for every provider; a provider of your own can use these to
classify its errors, or override ``LLMProvider.is_transient(exc)``, ``is_rate_limited(exc)``
and ``retry_after(exc)``, which the run asks first. ``sdk_connection_failure`` tells a vendor
SDK's wrapped connection failure (worth another attempt) from a proxy's refusal (not).
"""

from __future__ import annotations

from harnessx._retry import (
    is_context_overflow,
    is_permanent,
    is_rate_limited,
    is_transient,
    is_transient_text,
    sdk_connection_failure,
)
from harnessx._retry import retry_after as retry_after_seconds

__all__ = [
    "is_context_overflow",
    "is_permanent",
    "is_rate_limited",
    "is_transient",
    "is_transient_text",
    "retry_after_seconds",
    "sdk_connection_failure",
]
