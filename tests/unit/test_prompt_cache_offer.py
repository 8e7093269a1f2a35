"""offer_cache: a hint goes to a provider method that declares ``cache`` (not one that only
takes ``**kwargs``, as in harnessx 0.9.1), judged once per function, however many instances
call it."""

from __future__ import annotations

from typing import Any

from harnessx._policies import PromptCacheHint
from harnessx._prompt_cache import _takes_cache, offer_cache

HINT = PromptCacheHint(prefix_key="k", breakpoints=("system",), ttl_seconds=None, enabled=True)


class Named:
    def complete(self, messages: list[Any], cache: PromptCacheHint | None = None) -> None: ...


class Keywords:
    def complete(self, messages: list[Any], **kwargs: Any) -> None: ...


class Without:
    def complete(self, messages: list[Any]) -> None: ...


def test_the_hint_goes_only_to_a_method_that_takes_it() -> None:
    assert offer_cache(Named().complete, {"messages": []}, HINT) == {"messages": [], "cache": HINT}
    assert offer_cache(Keywords().complete, {"messages": []}, HINT) == {"messages": []}
    assert offer_cache(Keywords().complete, {"messages": []}, HINT, through_kwargs=True)["cache"] is HINT
    assert offer_cache(Without().complete, {"messages": [], "cache": HINT}, HINT) == {"messages": []}
    assert offer_cache(Named().complete, {"messages": []}, None) == {"messages": []}


def test_a_method_is_judged_once_for_every_instance() -> None:
    offer_cache(Named().complete, {}, HINT)
    before = _takes_cache.cache_info()
    for _ in range(5):
        offer_cache(Named().complete, {}, HINT)
    after = _takes_cache.cache_info()
    assert after.hits - before.hits == 5 and after.misses == before.misses


def test_an_unhashable_callable_is_judged_each_time() -> None:
    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, cache: PromptCacheHint | None = None) -> None: ...

    assert offer_cache(Unhashable(), {}, HINT) == {"cache": HINT}
