"""Provider names: the built-in providers plus factories an application registers.

``AgentConfig(provider=name)`` names one of these, and an ``Agent`` given no provider
instance builds it with ``make_provider``. Registration is per process: a process that
resumes a durable session must register the same names first, as it binds the same agents.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harnessx._errors import ConfigurationError

if TYPE_CHECKING:
    from harnessx.providers._base import LLMProvider

__all__ = [
    "BUILTIN_PROVIDERS",
    "ORIGINAL_ONLY_PROVIDERS",
    "is_known_provider",
    "make_provider",
    "provider_factory",
    "register_provider",
    "registered_providers",
    "unregister_provider",
]

BUILTIN_PROVIDERS: tuple[str, ...] = ("anthropic", "openai")
# Built into the original harnessx 0.9.1, not (yet) into this one.
ORIGINAL_ONLY_PROVIDERS: tuple[str, ...] = ("gemini", "openrouter", "azure")
_ALIASES = {"openai-compatible": "openai"}
_registry: dict[str, Callable[..., LLMProvider]] = {}


def _key(name: str) -> str:
    key = name.strip().lower()
    return _ALIASES.get(key, key)


def register_provider(name: str, factory: Callable[..., LLMProvider], *, replace: bool = False) -> None:
    """Make ``AgentConfig(provider=name)`` build its provider with ``factory(**kwargs)``."""
    key = name.strip().lower()
    if not key or any(c.isspace() for c in key):
        raise ConfigurationError(f"provider name {name!r} must be non-empty and contain no whitespace")
    if key in BUILTIN_PROVIDERS or key in _ALIASES:
        raise ConfigurationError(f"{name!r} is a built-in provider name; register yours under another name")
    if key in _registry and not replace:
        raise ConfigurationError(f"provider {name!r} is already registered; pass replace=True to replace it")
    if not callable(factory):
        raise ConfigurationError("register_provider needs a callable factory that returns an LLMProvider")
    _registry[key] = factory


def unregister_provider(name: str) -> bool:
    """Forget a registered provider name; ``True`` if it was registered."""
    return _registry.pop(name.strip().lower(), None) is not None


def registered_providers() -> tuple[str, ...]:
    return tuple(sorted(_registry))


def provider_factory(name: str) -> Callable[..., LLMProvider] | None:
    return _registry.get(_key(name))


def is_known_provider(name: str) -> bool:
    key = _key(name)
    return key in BUILTIN_PROVIDERS or key in _registry


def unknown_provider_error(name: object) -> ConfigurationError:
    if isinstance(name, str) and _key(name) in ORIGINAL_ONLY_PROVIDERS:
        return ConfigurationError(
            f"the {name!r} provider of the original harnessx is not supported by this harnessx yet "
            "(see docs/compatibility.md): use 'anthropic' or 'openai' (any OpenAI-compatible server), "
            "or pass your own LLMProvider"
        )
    known = ", ".join(repr(n) for n in (*BUILTIN_PROVIDERS, *registered_providers()))
    return ConfigurationError(
        f"unknown provider {name!r}: use one of {known}, or one passed to register_provider()"
    )


def make_provider(name: str = "anthropic", **kwargs: Any) -> LLMProvider:
    """A new provider for ``name``; ``kwargs`` go to its constructor (``model=``, ``retry=``...)."""
    if not isinstance(name, str):
        raise unknown_provider_error(name)
    key = _key(name)
    factory = _registry.get(key)
    if factory is not None:
        return factory(**kwargs)
    if key == "anthropic":
        from harnessx.providers._anthropic import AnthropicProvider

        return AnthropicProvider(**kwargs)
    if key == "openai":
        from harnessx.providers._openai import OpenAIProvider

        return OpenAIProvider(**kwargs)
    raise unknown_provider_error(name)
