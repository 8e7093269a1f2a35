"""Where an ``AgentRuntime``'s runs execute: here (``LocalSubmission``) or on the worker
pool (``PoolSubmission``). The runtime picks one at construction (``execution=``) and asks it
at each point where the two differ; everything else about a run is the same.

A local runtime holds the agent's definition, drives each run it submits or resumes in this
process, and checks a stored session against its agent. A pool runtime holds only the
agent's reference: a new run waits in the queue for any worker (which resolves the reference
in its registry), a resumed one is queued again, and a run some worker drives is followed.
"""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from harnessx._agent import Agent
from harnessx._driver import announce_checkpoint
from harnessx._errors import ConfigurationError, SessionBusyError
from harnessx._handle import RunHandle
from harnessx._registry import AgentRef, AgentRegistry
from harnessx._state import RunState
from harnessx.store._protocol import Lease, RunRecord, Store
from harnessx.store._records import ControlRequest
from harnessx.store._scheduling import Schedule

if TYPE_CHECKING:
    from harnessx._runtime import AgentRuntime

__all__ = ["LocalSubmission", "PoolSubmission", "Submission", "submission_for"]


class Submission(ABC):
    """What differs between the two ways to execute (see the module)."""

    execution: ClassVar[Literal["local", "pool"]]
    queued: ClassVar[bool]
    """Whether a new run waits in the pool's queue (rather than being driven at once)."""
    compares_definition: ClassVar[bool]
    """Whether binding a stored session checks it against the agent held here."""

    @abstractmethod
    def agent(self, ref: AgentRef, registry: AgentRegistry) -> Agent:
        """The agent this runtime uses, given only its reference."""

    @abstractmethod
    def fingerprint(self, runtime: AgentRuntime) -> dict[str, Any]:
        """What a new session records of the agent's definition."""

    @abstractmethod
    def recorded_config(self, runtime: AgentRuntime) -> dict[str, Any] | None:
        """The agent configuration a flight-recorded run's first record names."""

    @abstractmethod
    def schedule(self, schedule: Schedule) -> Schedule:
        """``submit``'s scheduling options, accepted or refused."""

    @abstractmethod
    async def submitted(
        self, runtime: AgentRuntime, lease: Lease, run_id: str, state: RunState | None, *, stream: bool
    ) -> RunHandle:
        """The handle of run ``run_id``, just created under ``lease``: ``state`` is its state
        when the creation wrote all of it (``None``: load it)."""

    @abstractmethod
    async def resumed(
        self, runtime: AgentRuntime, lease: Lease, record: RunRecord, pending: ControlRequest | None
    ) -> RunHandle:
        """Continue the claimed session's latest run ``record``; ``pending``: the pause or
        cancel request left on the session (a holder that died before acting on it)."""

    @abstractmethod
    def busy(self, runtime: AgentRuntime, record: RunRecord, error: SessionBusyError) -> RunHandle:
        """A resume found the session held by a process that drives the run right now."""

    @abstractmethod
    async def status_of(self, store: Store, record: RunRecord) -> dict[str, Any]:
        """What ``status()`` adds for the latest run."""


class LocalSubmission(Submission):
    execution = "local"
    queued = False
    compares_definition = True

    def agent(self, ref: AgentRef, registry: AgentRegistry) -> Agent:
        return registry.create(ref)

    def fingerprint(self, runtime: AgentRuntime) -> dict[str, Any]:
        return runtime.agent.fingerprint()

    def recorded_config(self, runtime: AgentRuntime) -> dict[str, Any] | None:
        return runtime.agent.config.to_dict()

    def schedule(self, schedule: Schedule) -> Schedule:
        raise ConfigurationError(
            "priority, concurrency_key, tenant and not_before schedule runs for the worker pool: "
            "create the runtime with AgentRuntime(AgentRef(name, version), execution='pool')"
        )

    async def submitted(
        self, runtime: AgentRuntime, lease: Lease, run_id: str, state: RunState | None, *, stream: bool
    ) -> RunHandle:
        if state is None:
            state = await runtime.backend.load_state(run_id)
        await announce_checkpoint(runtime.agent.hooks, runtime.agent, state)
        return runtime._launch(lease, state, last_seq=0, stream=stream)

    async def resumed(
        self, runtime: AgentRuntime, lease: Lease, record: RunRecord, pending: ControlRequest | None
    ) -> RunHandle:
        state = await runtime.backend.load_state(record.id)
        return runtime._launch(lease, state, last_seq=record.event_count, resumed=True, pending=pending)

    def busy(self, runtime: AgentRuntime, record: RunRecord, error: SessionBusyError) -> RunHandle:
        raise error

    async def status_of(self, store: Store, record: RunRecord) -> dict[str, Any]:
        return {}


class PoolSubmission(Submission):
    execution = "pool"
    queued = True
    # By reference: the workers' registry decides what the version means.
    compares_definition = False

    def agent(self, ref: AgentRef, registry: AgentRegistry) -> Agent:
        # The workers hold the real definition; this process records decisions with a
        # bare agent (no model, no tools).
        return Agent()

    def fingerprint(self, runtime: AgentRuntime) -> dict[str, Any]:
        return {}  # the session's version label (its agent reference) is the record

    def recorded_config(self, runtime: AgentRuntime) -> dict[str, Any] | None:
        return None  # the workers' registry has the definition

    def schedule(self, schedule: Schedule) -> Schedule:
        return schedule

    async def submitted(
        self, runtime: AgentRuntime, lease: Lease, run_id: str, state: RunState | None, *, stream: bool
    ) -> RunHandle:
        # The queued run holds no lease: its creation gave it up.
        return RunHandle(runtime, lease.session_id, run_id, start_seq=0)

    async def resumed(
        self, runtime: AgentRuntime, lease: Lease, record: RunRecord, pending: ControlRequest | None
    ) -> RunHandle:
        # Any worker continues it; recovery and reopening happen where it is driven.
        store = runtime.backend
        await store.requeue(lease, record.id)
        await store.release(lease)
        return RunHandle(runtime, record.session_id, record.id, start_seq=record.event_count)

    def busy(self, runtime: AgentRuntime, record: RunRecord, error: SessionBusyError) -> RunHandle:
        # A worker is driving it right now: follow that execution.
        return RunHandle(runtime, record.session_id, record.id, start_seq=record.event_count)

    async def status_of(self, store: Store, record: RunRecord) -> dict[str, Any]:
        return {"schedule": await _schedule_of(store, record.id)}


def submission_for(execution: str) -> Submission:
    return PoolSubmission() if execution == "pool" else LocalSubmission()


async def _schedule_of(store: Store, run_id: str) -> dict[str, Any] | None:
    """A pool run's place in the queue, for ``status()``: whether it waits, from when a
    worker may claim it, and its priority, concurrency key and tenant."""
    found = await store.schedule_of(run_id)
    if found is None:
        return None

    def when(epoch: float | None) -> dt.datetime | None:
        return None if epoch is None else dt.datetime.fromtimestamp(epoch, dt.UTC)

    return {
        "queued": found.queued,
        "not_before": when(found.not_before) if found.queued else None,
        "priority": found.priority,
        "concurrency_key": found.concurrency_key,
        "tenant": found.tenant or None,
        "queued_at": when(found.queued_at),
        "claimed_at": when(found.claimed_at),
    }
