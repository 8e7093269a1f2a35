"""``FallbackProvider``: failover across providers, packaged as one provider.

``AgentConfig(fallbacks=[Fallback("openai", model="gpt-4o")])`` is the usual way in: the
agent builds the chain (its own provider first) and closes what it built. Build one directly
when a member must be a live object. A member that fails transiently collects a strike;
at ``switch_after`` strikes the next member is tried within the same call, with its own
model and reply budget. A failure that is not transient (a bad request) is raised at once:
it would fail on every vendor. A stream moves on only before its first chunk reached the
caller; after that, a failure is the run's retry path to handle (``attempt_reset``).
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from harnessx._errors import ConfigurationError
from harnessx._model_limits import PROVIDER_CACHE, ModelLimits, resolve_model_limits
from harnessx._policies import Fallback, PromptCacheHint
from harnessx._prompt_cache import offer_cache
from harnessx.providers._base import (
    LLMProvider,
    ProviderResponse,
    StreamChunk,
    call_create,
    native_continuation,
    streams_natively,
)

__all__ = ["FallbackProvider"]


class _Member:
    def __init__(self, spec: Fallback | LLMProvider | str) -> None:
        # Looked up on harnessx.providers.fallback at each call, as 0.9.1's chain does: a
        # program (or a test) that replaces that attribute decides what members it builds.
        from harnessx.providers import fallback

        self.model: str | None = None
        self.max_tokens: int | None = None
        if isinstance(spec, Fallback):
            self.model, self.max_tokens = spec.model, spec.max_tokens
            spec = spec.provider
        if isinstance(spec, str):
            # By name alone (a registered factory takes no arguments): request() names the model.
            self.provider: LLMProvider = fallback.make_provider(spec)
            self.label = spec.lower()
            self.owned = True
        elif hasattr(spec, "create"):
            self.provider = spec
            self.label = str(getattr(spec, "name", "") or type(spec).__name__)
            self.owned = False
        else:
            raise ConfigurationError(
                "a FallbackProvider member must be a Fallback, a provider name or an LLMProvider"
            )
        self.strikes = 0
        self.skip_until = 0.0

    def transient(self, exc: BaseException) -> bool:
        """Whether the chain moves past this member for ``exc``: by the classification the
        driver retries by (the member's own ``is_transient`` first, if it has one)."""
        from harnessx._retry import is_transient

        return is_transient(exc, self.provider)

    def request(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        mapped = dict(kwargs)
        if self.model is not None:
            mapped["model"] = self.model
        if self.max_tokens is not None:
            mapped["max_tokens"] = self.max_tokens
        return mapped


class FallbackProvider(LLMProvider):
    """An ordered chain of providers that fails over on transient errors.

    ``switch_after`` is how many transient failures a member collects before the chain
    moves past it; ``cooldown_seconds`` keeps a member that was passed over out of the
    rotation that long. A member's strikes reset when it answers. ``last_served`` names
    the member that answered the latest call.
    """

    name = "fallback"

    def __init__(
        self,
        primary: Fallback | LLMProvider | str,
        *,
        fallbacks: Sequence[Fallback | LLMProvider | str] = (),
        switch_after: int = 1,
        cooldown_seconds: float = 0.0,
    ) -> None:
        if type(switch_after) is not int or switch_after < 1:
            raise ConfigurationError("switch_after must be a positive integer")
        if isinstance(cooldown_seconds, bool) or cooldown_seconds < 0:
            raise ConfigurationError("cooldown_seconds must not be negative")
        self._members = [_Member(spec) for spec in (primary, *fallbacks)]
        # The stall deadlines of a chain are those every member can keep.
        promptly = [getattr(m.provider, "first_event_promptly", False) for m in self._members]
        self.first_event_promptly = all(promptly)
        self.streams_natively = all(streams_natively(m.provider) for m in self._members)
        self.switch_after = switch_after
        self.cooldown_seconds = float(cooldown_seconds)
        self.last_served: str | None = None
        # The member whose failure the caller saw last: the run asks the chain whether to
        # retry, and the chain asks that member, as 0.9.1's does.
        self._failing: _Member | None = None
        # The member whose reply left a turn only it can continue (native_continuation: a
        # paused turn, a server tool's call without its result): the next call goes to it
        # alone, and its failure is the run's to retry, not another member's to answer.
        self._pinned: _Member | None = None

    @classmethod
    def from_config(cls, config: Any) -> FallbackProvider:
        """The chain an ``AgentConfig`` describes: its provider, then its fallbacks."""
        return cls(
            config.provider or "anthropic",
            fallbacks=list(config.fallbacks),
            switch_after=config.retry.switch_after,
            cooldown_seconds=config.retry.cooldown_seconds,
        )

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(m.label for m in self._members)

    def _eligible(self) -> list[_Member]:
        if self._pinned is not None:
            return [self._pinned]
        now = time.monotonic()
        ready = [m for m in self._members if m.skip_until <= now]
        return ready or list(self._members)  # all cooling down: try them all

    def _move_on(self, member: _Member, last: bool) -> bool:
        """Count a transient failure; ``True`` when the chain should try the next member."""
        member.strikes += 1
        if member.strikes < self.switch_after or last:
            return False
        if self.cooldown_seconds:
            member.skip_until = time.monotonic() + self.cooldown_seconds
        return True

    def _served(self, member: _Member, response: Any) -> None:
        member.strikes = 0
        self.last_served = member.label
        self._failing = None
        self._pinned = member if native_continuation(response) else None

    def export_state(self) -> dict[str, Any]:
        """What a session snapshot carries of the chain (0.9.1's method): the model limits it
        and its members learned, and which member a turn left open is pinned to (and which
        failed last), by position."""
        state: dict[str, Any] = {
            "members": [{"limits": copy.deepcopy(_learned(m.provider))} for m in self._members],
            "pinned": self._index(self._pinned),
            "failing": self._index(self._failing),
        }
        if _learned(self):
            state["limits"] = copy.deepcopy(_learned(self))
        return state

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Take back what ``export_state`` gave (from this chain or one of the same members)."""
        limits = state.get("limits")
        if isinstance(limits, dict):
            setattr(self, PROVIDER_CACHE, copy.deepcopy(limits))
        members = state.get("members")
        for member, saved in zip(self._members, members if isinstance(members, list) else [], strict=False):
            learned = saved.get("limits") if isinstance(saved, dict) else None
            if isinstance(learned, dict) and learned:
                with contextlib.suppress(AttributeError, TypeError):  # a provider without attributes
                    setattr(member.provider, PROVIDER_CACHE, copy.deepcopy(learned))
        self._pinned = self._member_at(state.get("pinned"))
        self._failing = self._member_at(state.get("failing"))

    def _index(self, member: _Member | None) -> int | None:
        return None if member is None else self._members.index(member)

    def _member_at(self, index: object) -> _Member | None:
        if type(index) is int and 0 <= index < len(self._members):
            return self._members[index]
        return None

    def is_transient(self, exc: BaseException) -> bool:
        """Whether the run tries the chain again: as the member that failed last (the first
        one before any did) classifies ``exc``."""
        return (self._failing or self._members[0]).transient(exc)

    def retry_after(self, exc: BaseException) -> float | None:
        from harnessx._retry import retry_after

        return retry_after(exc, (self._failing or self._members[0]).provider)

    async def create(self, *, cache: PromptCacheHint | None = None, **kwargs: Any) -> ProviderResponse:
        # ``cache`` named, so that the run hands this provider its hint (accepts_cache).
        kwargs["cache"] = cache
        chain = self._eligible()
        for index, member in enumerate(chain):
            try:
                method = member.provider.create
                response = await call_create(
                    member.provider, **offer_cache(method, member.request(kwargs), kwargs.get("cache"))
                )
            except Exception as exc:
                self._failing = member
                if not member.transient(exc) or not self._move_on(member, index == len(chain) - 1):
                    raise
                continue
            self._served(member, response)
            return response
        raise AssertionError("a FallbackProvider always has a member")  # pragma: no cover

    async def stream(
        self, *, cache: PromptCacheHint | None = None, **kwargs: Any
    ) -> AsyncIterator[StreamChunk]:
        kwargs["cache"] = cache
        chain = self._eligible()
        for index, member in enumerate(chain):
            request = offer_cache(member.provider.stream, member.request(kwargs), kwargs.get("cache"))
            iterator = member.provider.stream(**request).__aiter__()
            delivered = False
            final: Any = None
            try:
                async for chunk in iterator:
                    if not delivered and chunk.kind != "progress":
                        delivered = True
                        self.last_served = member.label
                    if chunk.kind == "response":
                        final = chunk.data
                    yield chunk
            except Exception as exc:
                self._failing = member
                last = index == len(chain) - 1
                if delivered or not member.transient(exc) or not self._move_on(member, last):
                    raise
                continue
            finally:
                closer = getattr(iterator, "aclose", None)
                if closer is not None:
                    with contextlib.suppress(Exception):
                        await closer()
            self._served(member, final)
            return

    # The chain's limits are those of the member serving the next call (resolve_model_limits
    # asks here even when a registration names the chain's nominal model).
    _resolves_member_limits = True

    async def model_limits(self, model: str) -> ModelLimits:
        """The limits of the member that serves the next call, for its own model (the one
        a paused turn is pinned to first), as 0.9.1's chain answers them."""
        member = self._eligible()[0]
        return await resolve_model_limits(member.provider, member.model or model)

    async def count_tokens(self, **kwargs: Any) -> int:
        member = self._eligible()[0]
        request = member.request(kwargs)
        request.pop("cache", None)
        request.pop("max_tokens", None)
        request.pop("temperature", None)
        return int(await member.provider.count_tokens(**request))

    async def aclose(self) -> None:
        """Close the members this chain built from names; injected ones stay open."""
        for member in self._members:
            if member.owned:
                await member.provider.aclose()


def _learned(provider: object) -> dict[str, Any]:
    learned = getattr(provider, PROVIDER_CACHE, None)
    return learned if isinstance(learned, dict) else {}
