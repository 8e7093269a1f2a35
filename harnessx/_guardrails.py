"""``GuardrailsEngine``: an agent's running account of iterations, tokens and estimated cost
against its limits (harnessx 0.9.1's ``agent.guardrails``).

Each ``Agent`` keeps one, built from ``AgentConfig.limits``: ``agent.total_usage`` and
``agent.lifetime_iterations`` are its counters, a plain run adds its usage when it ends, and
``Limits.max_cost_dollars`` counts what the agent spent before the run (its
``total_usage``) as well as the run's own. A durable run counts its own usage only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from harnessx._config import Limits
from harnessx._errors import CostLimitError, MaxIterationsError
from harnessx.providers._base import TokenUsage

__all__ = ["GuardrailsEngine"]


class GuardrailsEngine:
    """Iteration and cost accounting against ``max_iterations`` and ``max_cost_dollars``.
    Prices are dollars per million tokens ($3 in, $15 out unless given); cached prompt
    tokens cost ``cache_read_cost_multiplier`` (read) or ``cache_write_cost_multiplier``
    (written) times the input price."""

    # The prices assumed when none is given (dollars per million tokens), as 0.9.1 names them.
    INPUT_COST_PER_M = 3.0
    OUTPUT_COST_PER_M = 15.0

    def __init__(
        self,
        max_iterations: int = 50,
        max_cost_dollars: float | None = None,
        input_cost_per_m: float | None = None,
        output_cost_per_m: float | None = None,
        cache_read_cost_multiplier: float = 0.1,
        cache_write_cost_multiplier: float = 1.25,
    ) -> None:
        self.max_iterations = max_iterations
        self.max_cost_dollars = max_cost_dollars
        self.input_cost_per_m = self.INPUT_COST_PER_M if input_cost_per_m is None else input_cost_per_m
        self.output_cost_per_m = self.OUTPUT_COST_PER_M if output_cost_per_m is None else output_cost_per_m
        self.cache_read_cost_multiplier = cache_read_cost_multiplier
        self.cache_write_cost_multiplier = cache_write_cost_multiplier
        self.usage_incomplete = False
        self.reset()

    @classmethod
    def from_limits(cls, limits: Limits) -> GuardrailsEngine:
        return cls(
            max_iterations=limits.max_iterations,
            max_cost_dollars=limits.max_cost_dollars,
            input_cost_per_m=limits.input_cost_per_m,
            output_cost_per_m=limits.output_cost_per_m,
            cache_read_cost_multiplier=limits.cache_read_cost_multiplier,
            cache_write_cost_multiplier=limits.cache_write_cost_multiplier,
        )

    # ------------------------------------------------------------- counting

    def reset(self) -> None:
        """Forget everything counted."""
        self._iteration_count = 0
        self._lifetime_iterations = 0
        self._total_usage = TokenUsage()
        self._estimated_cost = 0.0
        self.usage_incomplete = False

    def reset_turn(self) -> None:
        """Start counting a new run's iterations (the lifetime count goes on)."""
        self._iteration_count = 0

    def record_iteration(self) -> None:
        self._iteration_count += 1
        self._lifetime_iterations += 1

    def cost_of(self, usage: Any) -> float:
        """Estimated dollars for one usage (a ``TokenUsage`` or an object with its fields)."""
        # Limits.cost_of is the one price formula (the runs' cost check uses it too).
        prices = Limits(
            input_cost_per_m=self.input_cost_per_m,
            output_cost_per_m=self.output_cost_per_m,
            cache_read_cost_multiplier=self.cache_read_cost_multiplier,
            cache_write_cost_multiplier=self.cache_write_cost_multiplier,
        )
        return prices.cost_of(
            int(getattr(usage, "input_tokens", 0) or 0),
            int(getattr(usage, "output_tokens", 0) or 0),
            int(getattr(usage, "cache_read_input_tokens", 0) or 0),
            int(getattr(usage, "cache_creation_input_tokens", 0) or 0),
        )

    def track_usage(self, usage: Any, *, cost: float | None = None) -> None:
        """Add a model call's usage (and its cost: ``cost``, else estimated from ``usage``)."""
        added = TokenUsage(
            **{f.name: int(getattr(usage, f.name, 0) or 0) for f in dataclasses.fields(TokenUsage)}
        )
        self._total_usage = self._total_usage + added
        self._estimated_cost += self.cost_of(added) if cost is None else float(cost)

    # --------------------------------------------------------------- checks

    def check_iteration_limit(self) -> None:
        if self.max_iterations and self._iteration_count >= self.max_iterations:
            raise MaxIterationsError(
                f"the agent reached the maximum iterations ({self.max_iterations}) for this run; "
                f"usage so far: {self.usage_summary}"
            )

    def check_cost_limit(self) -> None:
        if self.max_cost_dollars is not None and self._estimated_cost >= self.max_cost_dollars:
            raise CostLimitError(
                f"estimated cost ${self._estimated_cost:.4f} reached the limit of "
                f"${self.max_cost_dollars:.4f} (Limits.max_cost_dollars); usage: {self.usage_summary}"
            )

    # ------------------------------------------------------------- readings

    @property
    def estimated_cost(self) -> float:
        return self._estimated_cost

    @property
    def iteration_count(self) -> int:
        return self._iteration_count

    @property
    def lifetime_iterations(self) -> int:
        return self._lifetime_iterations

    @property
    def total_usage(self) -> TokenUsage:
        return self._total_usage

    @property
    def usage_summary(self) -> dict[str, Any]:
        return {
            "iterations": self._iteration_count,
            "lifetime_iterations": self._lifetime_iterations,
            **self._total_usage.to_dict(),
            "estimated_cost": f"${self._estimated_cost:.4f}",
        }

    def _count_run(self, iterations: int) -> None:
        """A plain run's iterations, counted when it ends (the runs check their limits
        themselves): the turn's count, as 0.9.1 leaves it readable after the run, and the
        lifetime count."""
        self._iteration_count = iterations
        self._lifetime_iterations += iterations

    # What Agent keeps in here (its total_usage and lifetime_iterations setters).
    def _restore(self, usage: TokenUsage | None = None, lifetime_iterations: int | None = None) -> None:
        if usage is not None:
            self._total_usage = usage
            self._estimated_cost = self.cost_of(usage)
        if lifetime_iterations is not None:
            self._lifetime_iterations = lifetime_iterations
