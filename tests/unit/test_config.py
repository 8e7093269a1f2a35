"""Configuration objects with the original harnessx 0.9.1's names, defaults and checks."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, asdict

import pytest

from harnessx import (
    Agent,
    AgentConfig,
    ConfigurationError,
    Fallback,
    FallbackProvider,
    Limits,
    LoopGuard,
    ProgressPolicy,
    PromptCachePolicy,
    ProviderError,
    ProviderResponse,
    RetryPolicy,
    RuntimeConfig,
    ScriptedProvider,
    ToolPolicy,
    ToolRetry,
    make_provider,
    register_provider,
)
from harnessx.providers import LLMProvider
from harnessx.providers._registry import unregister_provider


def test_agent_config_defaults_are_the_originals() -> None:
    config = AgentConfig()
    assert config.model == "claude-sonnet-4-6" and config.provider == "anthropic"
    assert config.max_tokens is None and config.planning is True and config.fallbacks == ()
    assert config.system_prompt == "You are a helpful assistant."
    assert config.limits == Limits() and config.limits.max_iterations == 50
    assert config.limits.max_result_chars == 12_000 and config.limits.max_context_tokens is None
    assert config.retry == RetryPolicy() and config.retry.attempts == 4
    assert config.prompt_cache == PromptCachePolicy() and config.tools == ToolPolicy()
    assert config.progress == ProgressPolicy(10.0, 15.0) and config.max_parallel_subagents == 4
    assert AgentConfig(prompt_cache=None).prompt_cache is None
    # Positional order: model, provider, max_tokens; the rest keyword-only.
    assert AgentConfig("m", "openai", 100).max_tokens == 100
    with pytest.raises(TypeError):
        AgentConfig("m", "openai", 100, False)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: AgentConfig(model=""), "model must be a non-empty string"),
        (lambda: AgentConfig(provider="nope"), "unknown provider 'nope'"),
        (lambda: AgentConfig(provider="gemini"), "not supported by this harnessx yet"),
        (lambda: AgentConfig(max_tokens=0), "max_tokens must be a finite positive integer"),
        (lambda: AgentConfig(temperature=-1), "temperature"),
        (lambda: AgentConfig(fallbacks=[Fallback(ScriptedProvider(["x"]))]), "must name providers"),
        (lambda: Limits(max_iterations=-1), "0 means unlimited"),
        (lambda: Limits(max_result_chars=0), "max_result_chars"),
        (lambda: Limits(max_cost_dollars=-1.0), "max_cost_dollars"),
        (lambda: RetryPolicy(attempts=0), "1 disables retry"),
        (lambda: RetryPolicy(jitter=2), "jitter"),
        (lambda: ToolRetry(attempts=0), "1 disables retry"),
        (lambda: ToolPolicy(default_timeout_seconds=0), "default_timeout_seconds"),
        (lambda: ProgressPolicy(first_after_seconds=0), "first_after_seconds"),
        (lambda: LoopGuard(threshold=1), "threshold"),
        (lambda: Fallback("nope"), "unknown fallback provider"),
        (lambda: RuntimeConfig(max_session_duration_seconds=0), "max_session_duration_seconds"),
    ],
)
def test_bad_settings_are_configuration_errors(build: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        build()  # type: ignore[operator]


def test_policies_are_frozen_and_keep_the_original_field_order() -> None:
    limits = Limits()
    with pytest.raises(FrozenInstanceError):
        limits.max_iterations = 3  # type: ignore[misc]
    assert [f for f in asdict(RetryPolicy())][:4] == [
        "attempts",
        "backoff_seconds",
        "call_timeout_seconds",
        "max_backoff_seconds",
    ]
    assert RetryPolicy(4, 0.5, 30.0).call_timeout_seconds == 30.0
    assert ToolRetry().to_dict() == {
        "attempts": 3,
        "backoff_seconds": 0.5,
        "max_backoff_seconds": 30.0,
        "retry_error_results": False,
    }
    assert ToolRetry.from_dict({"attempts": 2, "unknown": 1}).attempts == 2
    assert ToolRetry(backoff_seconds=1.0).wait_for(3) == 4.0
    assert RetryPolicy(backoff_seconds=1, jitter=0.5).wait_for(1, rand=lambda: 1.0) == 0.5
    assert RetryPolicy(backoff_seconds=1, jitter=0.5).wait_for(1, retry_after=3.0, rand=lambda: 1.0) == 3.0
    assert Limits(loop_guard={"enabled": False}).loop_guard == LoopGuard(enabled=False)  # type: ignore[arg-type]


def test_config_from_dict_reads_every_stored_shape() -> None:
    config = AgentConfig(
        "m",
        planning=False,
        limits=Limits(max_iterations=3),
        tools=ToolPolicy(dedupe_calls=True, retry=ToolRetry(2)),
    )
    assert AgentConfig.from_dict(config.to_dict()) == config
    assert AgentConfig.from_dict(asdict(config)) == config
    # The original's 0.3 flat keys.
    flat = AgentConfig.from_dict({"model": "m", "max_iterations": 7, "llm_max_attempts": 2})
    assert flat.limits.max_iterations == 7 and flat.retry.attempts == 2
    # This project's 0.1 shape: model "" (the provider's default), tools as a list of names.
    old = AgentConfig.from_dict(
        {
            "model": "",
            "provider": None,
            "limits": {"max_iterations": 5, "max_tool_calls_per_turn": 64, "tool_concurrency": 8},
            "retry": {
                "attempts": 2,
                "backoff_seconds": 0.5,
                "max_backoff_seconds": 60.0,
                "retry_on_timeout": True,
            },
            "tools": ["a", "b"],
        }
    )
    assert old.model == "claude-sonnet-4-6" and old.provider is None
    assert old.offered_tools == ["a", "b"] and old.limits.max_iterations == 5


def test_the_provider_registry() -> None:
    class Custom(ScriptedProvider):
        pass

    register_provider("custom-model", lambda **kwargs: Custom(["hi"]))
    try:
        config = AgentConfig(provider="custom-model")
        assert isinstance(make_provider(config.provider or ""), Custom)
        with pytest.raises(ConfigurationError, match="already registered"):
            register_provider("custom-model", lambda **kwargs: Custom(["hi"]))
        with pytest.raises(ConfigurationError, match="built-in provider name"):
            register_provider("openai", lambda **kwargs: Custom(["hi"]))
    finally:
        assert unregister_provider("custom-model")
    with pytest.raises(ConfigurationError, match="unknown provider"):
        make_provider("custom-model")


async def test_an_agent_builds_its_provider_by_name_alone_through_harnessx_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As 0.9.1: a registered factory takes no arguments (each request names its model),
    for the agent's provider and a fallback chain's members; the agent builds it when it is
    built, through ``harnessx.core.make_provider``, and closes it once."""

    class Custom(ScriptedProvider):
        closed = 0

        async def aclose(self) -> None:
            Custom.closed += 1

    register_provider("no-arguments", lambda: Custom(["hi", "again"]))
    try:
        agent = Agent(AgentConfig(provider="no-arguments", model="my-model"))
        assert isinstance(agent.provider, Custom)
        assert (await agent.run("go")).output == "hi"
        assert agent.provider.requests[0].model == "my-model"  # type: ignore[attr-defined]
        await agent.aclose()
        chain = Agent(AgentConfig(provider="no-arguments", fallbacks=(Fallback("no-arguments", model="b"),)))
        assert isinstance(chain.provider, FallbackProvider)
        await chain.aclose()
    finally:
        assert unregister_provider("no-arguments")
    built = Custom(["hi"])
    monkeypatch.setattr("harnessx.core.make_provider", lambda name: built)
    replaced = Agent()
    assert replaced.provider is built
    await replaced.aclose()
    await replaced.aclose()
    await Agent(provider=Custom(["hi"])).aclose()  # an injected provider stays the caller's
    assert Custom.closed == 4  # the agent, the chain's two members, the replacement: once each


class Flaky(LLMProvider):
    def __init__(self, failures: list[BaseException | None], text: str) -> None:
        self.failures = list(failures)
        self.text = text
        self.calls: list[dict[str, object]] = []
        self.closed = False

    async def create(self, **kwargs: object) -> ProviderResponse:
        self.calls.append(kwargs)
        failure = self.failures.pop(0) if self.failures else None
        if failure is not None:
            raise failure
        return ProviderResponse(text=self.text)

    async def count_tokens(self, **kwargs: object) -> int:
        return 0

    async def aclose(self) -> None:
        self.closed = True


async def test_fallback_provider_fails_over_on_transient_errors_only() -> None:
    primary = Flaky([ConnectionError("down"), ConnectionError("down")], "primary")
    backup = Flaky([], "backup")
    chain = FallbackProvider(primary, fallbacks=[Fallback(backup, model="backup-model", max_tokens=50)])
    response = await chain.create(model="m", messages=[], system="", tools=[], max_tokens=1000)
    assert response.text == "backup" and chain.last_served == "Flaky"
    assert backup.calls[0]["model"] == "backup-model" and backup.calls[0]["max_tokens"] == 50
    # A bad request is not retried elsewhere: it would fail on every vendor.
    bad = Flaky([ProviderError("bad request", status_code=400)], "x")
    with pytest.raises(ProviderError, match="bad request"):
        await FallbackProvider(bad, fallbacks=[backup]).create(
            model="m", messages=[], system="", tools=[], max_tokens=1
        )
    # switch_after=2: the primary gets a second try before the chain moves on.
    patient = FallbackProvider(
        Flaky([ConnectionError("blip"), None], "primary"), fallbacks=[Flaky([], "backup")], switch_after=2
    )
    with pytest.raises(ConnectionError):
        await patient.create(model="m", messages=[], system="", tools=[], max_tokens=1)
    assert (await patient.create(model="m", messages=[], system="", tools=[], max_tokens=1)).text == "primary"
    await chain.aclose()
    assert not primary.closed  # injected members are the caller's


async def test_a_chain_fails_over_by_the_classification_runs_retry_by_and_closes_what_it_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As 0.9.1: an error's status read from ``code`` (or ``status``, ...) and its text decide,
    as for a run's retries (the chain used to read only ``status_code``); ``async with`` closes
    the members the chain built from names (through harnessx.providers.fallback.make_provider),
    not those passed in."""
    unavailable = type("Unavailable", (Exception,), {"code": 503})("service unavailable")
    primary, backup = Flaky([unavailable], "primary"), Flaky([], "backup")
    chain = FallbackProvider(primary, fallbacks=[backup])
    assert (await chain.create(model="m", messages=[], system="", tools=[], max_tokens=1)).text == "backup"
    quota = type("Quota", (Exception,), {"code": 429})("You exceeded your current quota")
    with pytest.raises(Exception, match="quota"):  # would fail on every member: not failed over
        await FallbackProvider(Flaky([quota], "x"), fallbacks=[Flaky([], "y")]).create(
            model="m", messages=[], system="", tools=[], max_tokens=1
        )
    built = Flaky([], "built")
    monkeypatch.setattr("harnessx.providers.fallback.make_provider", lambda name: built)
    injected = Flaky([], "injected")
    async with FallbackProvider("anthropic", fallbacks=[injected]) as entered:
        assert entered.labels == ("anthropic", "Flaky")
    assert built.closed and not injected.closed


def test_fallbacks_in_the_config_and_an_injected_provider_are_refused() -> None:
    from harnessx import Agent

    with pytest.raises(ConfigurationError, match="both describe what to call"):
        Agent(config=AgentConfig(fallbacks=[Fallback("openai")]), provider=Flaky([], "x"))


def test_agent_config_fallbacks_build_a_chain() -> None:
    from harnessx import Agent

    agent = Agent(config=AgentConfig(provider="openai", fallbacks=[Fallback("anthropic", model="claude-x")]))
    provider = agent.provider
    assert isinstance(provider, FallbackProvider) and provider.labels == ("openai", "anthropic")
