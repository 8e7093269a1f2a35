"""Agents by reference: ``AgentRef`` names a definition that an ``AgentRegistry`` can build."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harnessx._agent import Agent
from harnessx._errors import ConfigurationError
from harnessx.store._scheduling import Schedule, check_max_running

__all__ = ["AgentDefaults", "AgentFactory", "AgentRef", "AgentRegistry", "agents"]

AgentFactory = Callable[[], Agent]


@dataclass(frozen=True)
class AgentRef:
    """A name and version label, e.g. ``AgentRef("assistant", "v1")`` (``assistant@v1``)."""

    name: str
    version: str = "v1"

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"

    @classmethod
    def parse(cls, text: str) -> AgentRef:
        name, _, version = text.partition("@")
        if not name:
            raise ConfigurationError(f"invalid agent reference {text!r}: expected 'name@version'")
        return cls(name, version or "v1")


@dataclass(frozen=True)
class AgentDefaults:
    """What a registry says of an agent's pool runs: the ``priority`` of a run submitted
    without one, and ``max_concurrent``, how many of its runs may drive at once across the
    fleet (``None``: no limit). Workers publish them to the store when they start."""

    priority: int | None = None
    max_concurrent: int | None = None


class AgentRegistry:
    """Factories that build agents by reference. A worker resolves submitted refs here."""

    def __init__(self) -> None:
        self._factories: dict[AgentRef, AgentFactory] = {}
        self._defaults: dict[AgentRef, AgentDefaults] = {}

    def register(
        self,
        name: str,
        factory: AgentFactory,
        *,
        version: str = "v1",
        priority: int | None = None,
        max_concurrent: int | None = None,
    ) -> AgentRef:
        """Register ``factory`` as ``name@version``. ``priority``: the default priority of
        the agent's pool runs; ``max_concurrent``: at most this many of them drive at once,
        across every worker (see docs/scheduling.md)."""
        ref = AgentRef(name, version)
        if ref in self._factories:
            raise ConfigurationError(f"agent {ref} is already registered")
        if priority is not None:
            Schedule(priority=priority)  # the same checks as a run's own priority
        if max_concurrent is not None:
            check_max_running(max_concurrent)
        self._factories[ref] = factory
        self._defaults[ref] = AgentDefaults(priority, max_concurrent)
        return ref

    def defaults(self, ref: AgentRef) -> AgentDefaults:
        """The pool defaults ``ref`` was registered with."""
        return self._defaults.get(ref, AgentDefaults())

    def __contains__(self, ref: object) -> bool:
        return ref in self._factories

    def refs(self) -> list[AgentRef]:
        return sorted(self._factories, key=str)

    def create(self, ref: AgentRef | str) -> Agent:
        key = AgentRef.parse(ref) if isinstance(ref, str) else ref
        factory = self._factories.get(key)
        if factory is None:
            known = ", ".join(str(r) for r in self.refs()) or "none"
            raise ConfigurationError(f"unknown agent {key}: this registry has {known}; register it first")
        agent = factory()
        if not isinstance(agent, Agent):
            raise ConfigurationError(f"the factory for {key} returned {type(agent).__name__}, not an Agent")
        return agent


agents = AgentRegistry()
"""The process-local default registry."""
