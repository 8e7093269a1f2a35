"""The model limits registry (``harnessx.models``, as harnessx 0.9.1's) and the reply budget
a run asks for when ``AgentConfig.max_tokens`` is unset."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harnessx import (
    Agent,
    AgentConfig,
    Fallback,
    ModelLimits,
    ProviderResponse,
    ToolCall,
    register_model_limits,
)
from harnessx import models as model_limits
from harnessx.models import (
    DEFAULT_OUTPUT_CAP,
    UNKNOWN_MODEL,
    context_window_from_error,
    learn_model_limits,
    lookup_model_limits,
    normalize_model_id,
    reply_limit_from_error,
    resolve_model_limits,
)
from harnessx.providers import LLMProvider
from harnessx.providers.base import INVALID_ARGUMENTS, parse_tool_arguments


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    """Registrations and learned limits are process-wide: each test starts without any."""
    saved = dict(model_limits._registered), dict(model_limits._learned)
    model_limits._registered.clear()
    model_limits._learned.clear()
    yield
    model_limits._registered.clear()
    model_limits._registered.update(saved[0])
    model_limits._learned.clear()
    model_limits._learned.update(saved[1])


class Recording(LLMProvider):
    """Answers each call with the next reply and keeps what it was asked."""

    def __init__(self, *replies: ProviderResponse) -> None:
        self.replies = list(replies)
        self.calls: list[dict[str, Any]] = []

    async def create(self, **kwargs: Any) -> ProviderResponse:
        self.calls.append(kwargs)
        return self.replies.pop(0)

    async def count_tokens(self, **kwargs: Any) -> int:
        return 0


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("anthropic/claude-opus-4-6", "claude-opus-4-6"),
        ("us.anthropic.claude-sonnet-4-6-v1:0", "claude-sonnet-4-6"),
        ("claude-opus-4-5@20251101", "claude-opus-4-5"),
        ("models/gemini-2.5-pro", "gemini-2.5-pro"),
        ("Claude-3-5-Haiku-Latest", "claude-3-5-haiku"),
    ],
)
def test_deployment_ids_normalize_to_the_model_name(raw: str, name: str) -> None:
    assert normalize_model_id(raw) == name


def test_the_longest_known_prefix_decides() -> None:
    assert lookup_model_limits("claude-sonnet-4-6") == ModelLimits(1_000_000, 128_000)
    assert lookup_model_limits("claude-3-5-haiku-20241022") == ModelLimits(200_000, 8_192)
    assert lookup_model_limits("claude-3-haiku-20240307") == ModelLimits(200_000, 4_096)
    assert lookup_model_limits("gpt-4o-mini") == ModelLimits(128_000, 16_384)
    assert lookup_model_limits("a-model-nobody-knows") is None


def test_limits_are_positive_integers() -> None:
    with pytest.raises(ValueError, match="max_output must be a positive integer"):
        ModelLimits(1000, 0)
    with pytest.raises(ValueError, match="prefix must be a non-empty string"):
        register_model_limits(" ", context_window=10, max_output=5)


async def test_resolution_order_registered_then_learned_then_provider_then_table() -> None:
    class Knows(Recording):
        async def model_limits(self, model: str) -> ModelLimits:
            return ModelLimits(50_000, 5_000)

    assert await resolve_model_limits(Recording(), "some-new-model") == UNKNOWN_MODEL
    assert await resolve_model_limits(Knows(), "claude-sonnet-4-6") == ModelLimits(50_000, 5_000)
    learned = Recording()
    learn_model_limits("claude-sonnet-4-6", provider=learned, max_output=16_000)
    assert await resolve_model_limits(learned, "claude-sonnet-4-6") == ModelLimits(1_000_000, 16_000)
    assert await resolve_model_limits(Recording(), "claude-sonnet-4-6") == ModelLimits(1_000_000, 128_000)
    learn_model_limits("claude-sonnet-4-6", context_window=300_000)  # no provider: the process's
    assert await resolve_model_limits(Recording(), "claude-sonnet-4-6") == ModelLimits(300_000, 128_000)
    register_model_limits("claude-sonnet-4-6", context_window=500_000, max_output=50_000)
    assert await resolve_model_limits(Knows(), "claude-sonnet-4-6") == ModelLimits(500_000, 50_000)


async def test_a_failing_provider_lookup_leaves_the_table() -> None:
    class Broken(Recording):
        def model_limits(self, model: str) -> ModelLimits:
            raise ConnectionError("models API down")

    assert await resolve_model_limits(Broken(), "claude-haiku-4-5") == ModelLimits(200_000, 64_000)


@pytest.mark.parametrize(
    ("message", "limit"),
    [
        ("max_tokens: 32000 > 8192, which is the maximum allowed number of output tokens", (8192, True)),
        (
            "max_tokens is too large: 32000. This model supports at most 16384 completion tokens",
            (16384, True),
        ),
        ("max_output_tokens must be less than or equal to 65536", (65536, True)),
        (
            "input length and `max_tokens` exceed context limit: 190000 + 32000 > 200000",
            (200_000 - 190_000 - 1_024, False),
        ),
        ("prompt is too long: 250000 tokens > 200000 maximum", None),
        ("rate limit exceeded", None),
    ],
)
def test_the_limit_a_refusal_names(message: str, limit: tuple[int, bool] | None) -> None:
    assert reply_limit_from_error(Exception(message)) == limit


def test_the_window_a_refusal_names() -> None:
    assert (
        context_window_from_error(Exception("prompt is too long: 250000 tokens > 200000 maximum")) == 200_000
    )
    assert (
        context_window_from_error(Exception("This model's maximum context length is 128000 tokens."))
        == 128_000
    )
    assert context_window_from_error(Exception("bad request")) is None


async def test_an_unset_max_tokens_is_the_models_own_limit_capped() -> None:
    """0.9.1 sends the model's limit (at most DEFAULT_OUTPUT_CAP), never None."""
    budgets = []
    for model in ("claude-opus-4-6", "claude-3-haiku-20240307", "some-new-model"):
        provider = Recording(ProviderResponse(text="hi"))
        async with Agent(config=AgentConfig(model=model, planning=False), provider=provider) as agent:
            assert (await agent.run("hi")).ok
        budgets.append(provider.calls[0]["max_tokens"])
    assert budgets == [DEFAULT_OUTPUT_CAP, 4_096, DEFAULT_OUTPUT_CAP]


async def test_a_configured_budget_stays_within_the_model_and_a_provider_may_choose() -> None:
    provider = Recording(ProviderResponse(text="a"), ProviderResponse(text="b"))
    config = AgentConfig(model="claude-3-haiku-20240307", max_tokens=600, planning=False)
    async with Agent(config=config, provider=provider) as agent:
        await agent.run("go")
    config = AgentConfig(model="claude-3-haiku-20240307", max_tokens=50_000, planning=False)
    async with Agent(config=config, provider=provider) as agent:
        await agent.run("go")
    assert [c["max_tokens"] for c in provider.calls] == [600, 4_096]

    class Chooses(Recording):
        def default_max_tokens(self, model: str) -> int:
            return 1_234

    chooser = Chooses(ProviderResponse(text="c"))
    async with Agent(config=AgentConfig(model="claude-opus-4-6", planning=False), provider=chooser) as agent:
        await agent.run("go")
    assert chooser.calls[0]["max_tokens"] == 1_234


async def test_registered_limits_set_the_budget_of_a_run() -> None:
    register_model_limits("house-model", context_window=8_000, max_output=2_000)
    provider = Recording(ProviderResponse(text="hi"))
    async with Agent(config=AgentConfig(model="house-model-7b", planning=False), provider=provider) as agent:
        await agent.run("hi")
    assert provider.calls[0]["max_tokens"] == 2_000


@pytest.mark.parametrize(
    ("raw", "readable"),
    [
        ('{"path": "a.py"}', True),
        ('{"content": "line one\nline two"}', True),  # a raw newline in a string, as models write
        ('{"path": "a.py", "content": "unterminat', False),
        ("[1, 2]", False),
        ("", True),
    ],
)
def test_tool_arguments_parse_or_say_why_not(raw: str, readable: bool) -> None:
    parsed = parse_tool_arguments(raw)
    assert isinstance(parsed, dict) and (INVALID_ARGUMENTS not in parsed) == readable


async def test_a_call_marked_unreadable_is_answered_with_the_reason() -> None:
    """A custom provider written for 0.9.1 marks bad arguments with INVALID_ARGUMENTS."""
    ran = []
    bad = ToolCall("c1", "write", parse_tool_arguments('{"path": "a.py", "content": "half'))
    provider = Recording(
        ProviderResponse(tool_calls=[bad], stop_reason="tool_use"), ProviderResponse(text="ok")
    )
    agent = Agent(config=AgentConfig(planning=False), provider=provider)

    @agent.tools.register()
    def write(path: str, content: str) -> str:
        """Write a file."""
        ran.append(path)
        return "written"

    async with agent:
        assert (await agent.run("go")).ok
    answer = provider.calls[1]["messages"][-1]["content"][0]
    assert answer["is_error"] and "not valid JSON" in answer["content"] and ran == []


async def test_model_limits_of_the_built_in_providers_and_a_chain_are_awaited_as_in_0_9_1() -> None:
    """0.9.1's ``AnthropicProvider.model_limits`` and ``FallbackProvider.model_limits`` are
    coroutines: ``await provider.model_limits(m)``. A chain answers for the member that serves
    the next call, with that member's own model, over a registration of its nominal model."""
    from harnessx.providers.anthropic import AnthropicProvider
    from harnessx.providers.fallback import FallbackProvider

    anthropic = AnthropicProvider(api_key="test-key")
    assert await anthropic.model_limits("claude-sonnet-4-6") is None  # the table's, no SDK client
    await anthropic.aclose()

    register_model_limits("nominal", context_window=1_000, max_output=100)
    register_model_limits("member-model", context_window=64_000, max_output=8_000)

    chain = FallbackProvider(
        Fallback(Recording(), model="member-model"), fallbacks=[Fallback(Recording(), model="other")]
    )
    assert await chain.model_limits("nominal") == ModelLimits(64_000, 8_000)
    assert await resolve_model_limits(chain, "nominal") == ModelLimits(64_000, 8_000)
