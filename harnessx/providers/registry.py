"""The original harnessx's ``harnessx.providers.registry``: provider names and the factories
``register_provider`` adds (``harnessx.providers`` exports the same)."""

from __future__ import annotations

from harnessx.providers._registry import (
    BUILTIN_PROVIDERS,
    is_known_provider,
    provider_factory,
    register_provider,
    registered_providers,
    unregister_provider,
)

__all__ = [
    "BUILTIN_PROVIDERS",
    "is_known_provider",
    "provider_factory",
    "register_provider",
    "registered_providers",
    "unregister_provider",
]
