"""The worker's metrics stay bounded whatever clients submit."""

from __future__ import annotations


def test_unknown_agent_series_are_bounded_and_removed_when_gone() -> None:
    from harness_workers._metrics import OTHER_AGENTS, UNKNOWN_AGENT_SERIES, WorkerMetrics

    metrics = WorkerMetrics()

    def series() -> dict[str, float]:
        (family,) = [m for m in metrics.registry.collect() if m.name == "harnessx_queued_unknown_agent_runs"]
        return {s.labels["agent"]: s.value for s in family.samples}

    metrics.set_unknown_agents({f"a{n}@v1": n + 1 for n in range(300)})
    shown = series()
    assert len(shown) == UNKNOWN_AGENT_SERIES + 1 and sum(shown.values()) == sum(range(1, 301))
    assert min(v for k, v in shown.items() if k != OTHER_AGENTS) == 291  # the largest ten by name
    metrics.set_unknown_agents({"a1@v1": 2})
    assert series() == {"a1@v1": 2}
    metrics.set_unknown_agents({})
    assert series() == {}
