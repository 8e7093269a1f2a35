"""Which providers get the prompt-cache hint, as in harnessx 0.9.1: one whose ``create``
declares ``cache``; never one that takes ``**kwargs`` (it may hand them to a vendor SDK that
refuses ``cache``); a FallbackProvider passes it on to the members that declare it."""

from __future__ import annotations

from typing import Any

import pytest

from harnessx import (
    Agent,
    AgentConfig,
    ConfigurationError,
    FallbackProvider,
    PromptCachePolicy,
    ProviderResponse,
)
from harnessx.prompt_cache import (
    DISABLED,
    PromptCacheHint,
    accepts_cache,
    build_hint,
    hint_from_wire,
    prefix_key,
)
from harnessx.providers import LLMProvider


def _vendor_sdk(
    *, model: str, messages: Any, system: Any, tools: Any, max_tokens: Any, temperature: Any
) -> str:
    return "ok"  # a strict SDK call: an unknown keyword is a TypeError


class Forwarding(LLMProvider):
    """A 0.9.1-style provider that passes its keywords on."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.seen.append(kwargs)
        return ProviderResponse(text=_vendor_sdk(**kwargs))

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


class Declaring(Forwarding):
    async def create(self, *, cache: PromptCacheHint | None = None, **kwargs: Any) -> ProviderResponse:
        self.seen.append({**kwargs, "cache": cache})
        return ProviderResponse(text="ok")


async def test_a_provider_taking_kwargs_is_called_without_the_hint() -> None:
    provider = Forwarding()
    assert (await Agent(config=AgentConfig(planning=False), provider=provider).run("hi")).ok
    assert len(provider.seen) == 1 and "cache" not in provider.seen[0]


async def test_the_base_stream_hands_the_hint_on_to_create_as_the_original_does() -> None:
    provider = Declaring()
    agent = Agent(config=AgentConfig(planning=False), provider=provider)
    async with agent.run_stream("hi") as stream:
        assert (await stream.result()).ok
    assert isinstance(provider.seen[0]["cache"], PromptCacheHint)

    class Recording(Forwarding):
        async def create(self, **kwargs: Any) -> ProviderResponse:
            self.seen.append(kwargs)
            return ProviderResponse(text="ok")

    recording = Recording()
    async with Agent(config=AgentConfig(planning=False), provider=recording).run_stream("hi") as stream:
        assert (await stream.result()).ok
    assert isinstance(recording.seen[0]["cache"], PromptCacheHint), "through **kwargs, as 0.9.1's stream"


async def test_a_provider_declaring_cache_gets_it_through_a_fallback_too() -> None:
    direct, member = Declaring(), Declaring()
    await Agent(config=AgentConfig(planning=False), provider=direct).run("hi")
    await Agent(config=AgentConfig(planning=False), provider=FallbackProvider(member)).run("hi")
    for provider in (direct, member):
        hint = provider.seen[0]["cache"]
        assert isinstance(hint, PromptCacheHint) and hint.enabled and len(hint.prefix_key) == 64
    await Agent(config=AgentConfig(planning=False, prompt_cache=None), provider=direct).run("hi")
    assert direct.seen[-1]["cache"] == DISABLED


def test_the_module_of_the_original() -> None:
    async def explicit(*, model: str, cache: Any = None) -> None: ...
    async def open_ended(**kwargs: Any) -> None: ...

    assert accepts_cache(explicit) and not accepts_cache(open_ended)
    hint = build_hint(PromptCachePolicy(ttl_seconds=60), "m", "sys", [], [{"role": "user"}])
    assert hint.prefix_key == prefix_key("m", "sys", [])
    wire = {
        "prefix_key": hint.prefix_key,
        "breakpoints": ["system", "message:0"],
        "ttl_seconds": 60,
        "enabled": True,
    }
    assert hint_from_wire(wire) == hint and hint_from_wire(None) is None and hint_from_wire(hint) is hint
    with pytest.raises(TypeError, match="key_salt"):
        PromptCachePolicy(key_salt=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        AgentConfig(prompt_cache="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        AgentConfig(prompt_cache="yes")  # type: ignore[arg-type]
