"""The fleet's model rate limits on Temporal: a backend given the store that holds them
(``TemporalBackend(rate_limits=store)``) makes its workers' model activities reserve each
call's start from the same buckets as pool workers, and wait for it with no request open
to the vendor (a real HTTP server on loopback), behind a waiting event."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fake_vendor import FakeVendor
from temporal_support import TemporalSetup

from harnessx import Agent, AgentConfig, AgentRef, AgentRegistry, AgentRuntime, RunStatus, SQLiteBackend
from harnessx.providers import OpenAIProvider
from harnessx.temporal import TemporalWorkerMetrics
from harnessx.testing import free_port

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def vendor() -> AsyncIterator[FakeVendor]:
    served = FakeVendor()
    await served.start()
    yield served
    await served.stop()


async def test_a_temporal_model_call_waits_for_the_shared_buckets_budget(
    setup: TemporalSetup, vendor: FakeVendor, tmp_path: Path
) -> None:
    providers: list[OpenAIProvider] = []

    def build() -> Agent:
        provider = OpenAIProvider("gpt-temporal", api_key="sk-test-not-a-secret", base_url=vendor.base_url)
        providers.append(provider)
        config = AgentConfig(model="gpt-temporal", system_prompt="Be brief.", max_tokens=50, planning=False)
        return Agent(config=config, provider=provider)

    registry = AgentRegistry()
    registry.register("vendor", build, version="v1")
    async with SQLiteBackend(tmp_path / "limits.sqlite3") as store:
        await store.set_rate_limit("openai/*", 4, None)  # a call every 15 s
        taken = await store.reserve_rate("openai/gpt-temporal", 0)  # another worker's, just now
        assert taken is not None
        backend = await setup.backend(registry, rate_limits=store)
        metrics = TemporalWorkerMetrics()
        try:
            async with await backend.worker(metrics=metrics):
                runtime = AgentRuntime(AgentRef("vendor", "v1"), backend=backend)
                handle = await runtime.submit("Hello")
                waiting = None
                async for event in handle.events():
                    if event.type.value == "waiting" and event.data.get("on") == "rate_limit":
                        waiting = event
                        break
                assert waiting is not None and waiting.data["bucket"] == "openai/gpt-temporal"
                assert 0 < waiting.data["seconds"] <= 15
                # Waiting (its start is seconds away yet): the vendor has seen nothing.
                assert time.time() < waiting.data["until"] - 1
                assert vendor.calls == [] and vendor.open_now == 0
                result = await asyncio.wait_for(handle.result(), 60)
                assert result.status is RunStatus.COMPLETED and result.output == "Done."
        finally:
            await backend.aclose()
            for provider in providers:
                await provider.aclose()
        (call,) = vendor.served("gpt-temporal")
        assert call.at >= taken.start + 15 - 0.01
        (bucket,) = await store.rate_buckets()
        assert (bucket.name, bucket.waits) == ("openai/gpt-temporal", 1)
    # The worker's metrics count the wait, as a pool worker's do.
    labels = {"bucket": "openai/gpt-temporal"}
    assert metrics.registry.get_sample_value("harnessx_rate_limit_waits_total", labels) == 1
    assert metrics.registry.get_sample_value("harnessx_rate_limit_wait_seconds_count", labels) == 1
    waited = metrics.registry.get_sample_value("harnessx_rate_limit_wait_seconds_sum", labels)
    assert waited == pytest.approx(waiting.data["seconds"], abs=0.01)


async def test_a_temporal_worker_process_obeys_the_limits_of_the_store_it_is_given(
    setup: TemporalSetup, vendor: FakeVendor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``harness-worker --temporal ... --rate-limits --sqlite PATH``: the same, from the
    command a deployment runs."""
    from temporal_agents import registry

    monkeypatch.setenv("HX_VENDOR_URL", vendor.base_url)
    path = tmp_path / "limits.sqlite3"
    async with SQLiteBackend(path) as store:
        await store.set_rate_limit("openai/gpt-rpm", 6, None)  # a call every 10 s
        taken = await store.reserve_rate("openai/gpt-rpm", 0)  # another worker's, just now
        assert taken is not None
    port = free_port()
    metrics_addr = ["--metrics-addr", f"127.0.0.1:{port}"]
    worker = setup.worker("w0", extra=["--rate-limits", "--sqlite", str(path), *metrics_addr])
    backend = await setup.backend(registry)
    try:
        runtime = AgentRuntime(AgentRef("vendor-rpm", "v1"), backend=backend)
        handle = await runtime.submit("Hello")
        result = await asyncio.wait_for(handle.result(), 60)
        assert result.status is RunStatus.COMPLETED, worker.text()[-3000:]
        waits = [
            e async for e in handle.events() if e.type.value == "waiting" and e.data.get("on") == "rate_limit"
        ]
        async with httpx.AsyncClient(timeout=5) as http:
            text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    finally:
        await backend.aclose()
    assert len(waits) == 1 and 0 < waits[0].data["seconds"] <= 10
    # /metrics of the worker process: the wait, under the pool worker's names.
    assert 'harnessx_rate_limit_waits_total{bucket="openai/gpt-rpm"} 1.0' in text
    assert 'harnessx_rate_limit_wait_seconds_count{bucket="openai/gpt-rpm"} 1.0' in text
    (call,) = vendor.served("gpt-rpm")
    assert call.at >= taken.start + 10 - 0.01
