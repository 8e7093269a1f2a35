"""The store conformance kit: checks any ``Store`` implementation must pass.

Each check is an ``async`` function of a *store factory*: a callable that returns a new,
not yet opened store on one and the same database each time it is called (so that two
calls are two processes sharing the database), accepting ``lease_seconds=``. The checks
open the stores they need with ``async with`` and close them; a closed store counts as a
dead process (its liveness lock is gone). They need an empty database of their own.

What they hold a store to (the store protocol's guarantees, ``harnessx.store._protocol``):

- ``leases_and_fencing``: a claim bumps the generation; a live holder's session is refused
  to others; a dead holder's is free at once; every write under a stale lease is refused
  with ``LeaseLostError`` and writes nothing.
- ``renewal``: one renewal names the leases it renewed and those it lost, extends the
  renewed ones' deadlines, and returns pending control requests.
- ``concurrent_claims``: two claimers of one session, one winner; two workers claiming
  from one queue never get the same run.
- ``orphan_recovery``: a dead holder's and an expired lease are found, recovered once each
  with a generation bump (the old holder is fenced out), the run requeued and claimable.
- ``checkpoint_atomicity``: a checkpoint that fails part-way (an event cursor taken, a
  request id taken, a session that exists) leaves nothing of itself behind.
- ``event_cursors``: events come back in cursor order, ``after=`` is exclusive, ``limit``
  pages, content round-trips, runs do not mix.
- ``controls``: a pause or cancel request is written only while the session is leased and
  its run running (a later pause never replaces a cancel), is seen by the owner alone
  (``pending_controls``, until a renewal returns it), is returned by every renewal until
  the commit that stops the run clears it, except a cancel on a run that only pauses.

With pytest and pytest-asyncio in ``asyncio_mode = auto`` (both backends of this project
run it so, ``tests/integration/test_store_conformance.py``)::

    import pytest
    from harnessx.store import SQLiteBackend
    from harnessx.testing import STORE_CHECKS, StoreCheck

    @pytest.mark.parametrize("check", STORE_CHECKS, ids=lambda check: check.name)
    async def test_my_store(check: StoreCheck, tmp_path) -> None:
        path = tmp_path / "store.sqlite3"
        await check.run(lambda **kwargs: SQLiteBackend(path, **kwargs))

Without it: ``await check_store(new_database)`` runs every check, each on the store
factory ``new_database()`` returns for an empty database of its own, and raises the first
failure. A failure is a ``StoreConformanceError`` (an ``AssertionError``) saying what the
store did instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from harnessx._errors import ConfigurationError, HarnessError, LeaseLostError, SessionBusyError
from harnessx._events import RunEvent, RunEventType
from harnessx._results import RunStatus
from harnessx._state import Delta, Phase, RunPatch
from harnessx.store._protocol import Lease, NewSession, Store

__all__ = ["STORE_CHECKS", "StoreCheck", "StoreConformanceError", "StoreFactory", "check_store"]

StoreFactory = Callable[..., Store]
"""``factory(lease_seconds=...)``: a new, unopened store on the checks' database."""

T = TypeVar("T")

_WITHIN = 15.0  # seconds a condition the checks wait for may take (a loaded machine)


class StoreConformanceError(AssertionError):
    """A store did not do what the protocol promises."""


@dataclass(frozen=True)
class StoreCheck:
    """One conformance check: ``await check.run(factory)``."""

    name: str
    run: Callable[[StoreFactory], Awaitable[None]]

    @property
    def doc(self) -> str:
        return (self.run.__doc__ or "").strip()


# ---------------------------------------------------------------------- helpers


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise StoreConformanceError(what)


async def _refused(error: type[BaseException], write: Awaitable[Any], what: str) -> BaseException:
    try:
        await write
    except error as exc:
        return exc
    except BaseException as exc:
        raise StoreConformanceError(
            f"{what}: expected {error.__name__}, got {type(exc).__name__}: {exc}"
        ) from exc
    raise StoreConformanceError(f"{what}: expected {error.__name__}, but it succeeded")


async def _eventually(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    """``probe()``'s first result that is not ``None``, polled until ``_WITHIN`` seconds."""
    deadline = time.monotonic() + _WITHIN
    while True:
        found = await probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise StoreConformanceError(f"{what} within {_WITHIN:g} s")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _opened(factory: StoreFactory, count: int, **kwargs: Any) -> AsyncIterator[list[Store]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(factory(**kwargs)) for _ in range(count)]


def _event(run_id: str, seq: int, text: str = "") -> RunEvent:
    return RunEvent(RunEventType.TEXT_DELTA, text or f"event {seq}", run_id=run_id, cursor=str(seq))


def _first_boundary(run_id: str, events: int = 0) -> Delta:
    return Delta(
        Phase.PREPARE_MODEL_CALL,
        messages=[{"role": "user", "content": f"hello from {run_id}"}],
        events=[_event(run_id, seq) for seq in range(1, events + 1)],
    )


async def _start(store: Store, session_id: str, run_id: str, *, events: int = 0, holder: str = "h") -> Lease:
    """A new session holding one run, under a lease of ``store``'s process."""
    await store.create_session(session_id, None, {})
    lease = await store.claim(session_id, holder)
    await store.create_run(lease, run_id, None, "hello", _first_boundary(run_id, events))
    return lease


async def _queue(store: Store, session_id: str, run_id: str, agent_ref: str | None = None) -> None:
    await store.create_session(session_id, agent_ref, {})
    lease = await store.claim(session_id, "submitter")
    await store.create_run(lease, run_id, None, "queued", _first_boundary(run_id), queued=True)


async def _written(store: Store, run_id: str) -> tuple[Any, ...]:
    """What a run's rows hold, to compare before and after a refused write."""
    record = await store.get_run(run_id, messages=False)
    _expect(record is not None, f"run {run_id} is missing")
    assert record is not None
    state = await store.load_state(run_id)
    events = [(e.cursor, e.type, e.data) for e in await store.read_events(run_id, 0)]
    return (
        record.status,
        record.phase,
        record.event_count,
        [dict(m) for m in state.messages],
        sorted(state.tools),
        events,
    )


async def _finish(store: Store, lease: Lease, run_id: str) -> None:
    await store.end_run(lease, run_id, status="completed", stop_reason="end_turn", error=None, events=[])


def _step(run_id: str, first_seq: int) -> Delta:
    """A boundary that writes a message and two events (cursors ``first_seq`` and on)."""
    return Delta(
        Phase.MODEL_CALL,
        messages=[{"role": "assistant", "content": "On it."}],
        events=[_event(run_id, first_seq), _event(run_id, first_seq + 1)],
    )


# ----------------------------------------------------------------------- checks


async def leases_and_fencing(factory: StoreFactory) -> None:
    """A claim bumps the generation; a live holder's session is refused to others and a
    dead holder's is free at once; every write under a stale lease is refused and writes
    nothing."""
    async with factory() as other:
        async with factory() as holder:
            first = await _start(holder, "fenced", "fenced-run", events=1)
            again = await holder.claim("fenced", "h")  # the holder may re-claim: newer generation
            _expect(
                again.generation > first.generation,
                f"a re-claim did not bump the generation ({first.generation} -> {again.generation})",
            )
            before = await _written(holder, "fenced-run")
            state = await holder.load_state("fenced-run")
            await _refused(
                LeaseLostError,
                holder.commit(first, state, _step("fenced-run", 2), []),
                "a checkpoint under a stale generation",
            )
            await _refused(
                LeaseLostError,
                holder.append_events(first, "fenced-run", [_event("fenced-run", 2)]),
                "appending events under a stale generation",
            )
            await _refused(
                LeaseLostError, holder.requeue(first, "fenced-run"), "a requeue under a stale lease"
            )
            _expect(await _written(holder, "fenced-run") == before, "a refused write changed the run")

            _expect(await other.process_alive(again.owner), "a live holder is reported dead")
            await _refused(SessionBusyError, other.claim("fenced", "o"), "claiming a live holder's session")
            await _refused(
                ConfigurationError, other.claim("no-such-session", "o"), "claiming a missing session"
            )
        # The holder's store is closed: its process counts as dead, its lease is free at once.
        _expect(not await other.process_alive(again.owner), "a closed store's process is reported alive")
        taken = await other.claim("fenced", "o")
        _expect(taken.generation > again.generation, "a takeover did not bump the generation")
        await _refused(
            LeaseLostError,
            other.commit(again, state, _step("fenced-run", 2), []),
            "a checkpoint under the dead holder's lease, sent through another process",
        )
        _expect(await _written(other, "fenced-run") == before, "a refused write changed the run")
        await other.commit(taken, state, _step("fenced-run", 2), [])  # the new holder can
        _expect((await _written(other, "fenced-run"))[2] == 3, "the new holder's checkpoint was not written")


async def renewal(factory: StoreFactory) -> None:
    """One renewal names the leases it renewed and those it lost (released, taken over),
    extends the renewed ones' deadlines and forgets the lost ones', and returns pending
    control requests."""
    async with factory(lease_seconds=60.0) as store:
        leases = {}
        for sid in ("renewed", "taken", "released"):
            leases[sid] = await _start(store, sid, f"{sid}-run")
        newer = await store.claim("taken", "h")  # the old lease on "taken" no longer holds
        await store.release(leases["released"])
        _expect(await store.set_control("renewed", "pause"), "a running run's request was not written")
        before = store.lease_deadline(leases["renewed"])
        _expect(before > time.monotonic(), "a claimed lease has no deadline ahead")

        renewed = await store.renew(list(leases.values()))
        _expect(renewed.held == {"renewed"}, f"renewal held {sorted(renewed.held)}, expected ['renewed']")
        _expect(
            renewed.lost == {"taken", "released"},
            f"renewal lost {sorted(renewed.lost)}, expected ['released', 'taken']",
        )
        _expect(renewed.controls == {"renewed": "pause"}, f"renewal carried controls {renewed.controls}")
        _expect(store.lease_deadline(leases["renewed"]) >= before, "renewal moved a deadline back")
        _expect(store.lease_deadline(leases["released"]) == 0.0, "a released lease keeps a deadline")
        _expect(store.lease_deadline(leases["taken"]) == 0.0, "a lost lease keeps a deadline")
        _expect(store.lease_deadline(newer) > 0.0, "the newer lease lost its deadline")
        both = await store.renew([leases["renewed"], newer])
        _expect(both.held == {"renewed", "taken"} and not both.lost, f"renewing held leases: {both}")
        empty = await store.renew([])
        _expect(not empty.held and not empty.lost, "renewing no lease reported some")


async def concurrent_claims(factory: StoreFactory) -> None:
    """Two claimers of one session at once: exactly one wins, the other is refused. Two
    workers claiming from one queue at once never get the same run."""
    async with _opened(factory, 3) as (app, first, second):
        await app.create_session("contested", None, {})
        outcomes = await asyncio.gather(
            first.claim("contested", "a"), second.claim("contested", "b"), return_exceptions=True
        )
        winners = [o for o in outcomes if isinstance(o, Lease)]
        losers = [o for o in outcomes if isinstance(o, SessionBusyError)]
        _expect(len(winners) == 1 and len(losers) == 1, f"two claimers got {outcomes!r}")

        runs = {f"queued-{n}" for n in range(6)}
        for n, run_id in enumerate(sorted(runs)):
            await _queue(app, f"queue-{n}", run_id, "sales:v1")
        taken_first, taken_second = await asyncio.gather(
            first.claim_queued("w", ["sales:v1"], 4), second.claim_queued("w", ["sales:v1"], 4)
        )
        taken = [run_id for _, run_id in [*taken_first, *taken_second]]
        _expect(len(taken) == len(set(taken)), f"a run was claimed twice: {sorted(taken)}")
        rest = await first.claim_queued("w", None, 10)
        taken += [run_id for _, run_id in rest]
        _expect(sorted(taken) == sorted(runs), f"claimed {sorted(taken)}, queued {sorted(runs)}")
        _expect(await second.claim_queued("w", None, 10) == [], "an empty queue gave a run")
        _expect((await app.queue_stats()).depth == 0, "claimed runs still count as queued")


async def orphan_recovery(factory: StoreFactory) -> None:
    """A dead holder's lease and an expired one are found as orphans, recovered once each
    with a generation bump (the old holder is fenced out); a requeued run is claimable."""
    async with _opened(factory, 2) as (supervisor, worker):
        async with factory(lease_seconds=0.5) as slow:
            slow_lease = await _start(slow, "expired", "expired-run")
            async with factory() as dying:
                dead_lease = await _start(dying, "dead", "dead-run")

            async def both_found() -> dict[str, Any] | None:
                found = {o.session_id: o for o in await supervisor.find_orphans()}
                reasons = {sid: o.reason for sid, o in found.items()}
                return found if reasons == {"dead": "dead", "expired": "expired"} else None

            orphans = await _eventually(
                both_found, "a dead holder's and an expired lease were not both found"
            )
            _expect(
                orphans["dead"].generation == dead_lease.generation,
                "an orphan's generation is not its lease's",
            )
            term = await supervisor.try_leadership("conformance")
            _expect(term is not None, "a free leadership role could not be taken")
            assert term is not None
            _expect(await worker.try_leadership("conformance") is None, "two processes hold one role")

            recovered = await supervisor.recover_orphan(term, orphans["dead"], requeue=True)
            _expect(
                recovered is not None and recovered.run_id == "dead-run",
                f"recovering the dead holder's lease gave {recovered}",
            )
            again = await supervisor.recover_orphan(term, orphans["dead"], requeue=True)
            _expect(again is None, "an orphan was recovered twice")
            released = await supervisor.recover_orphan(term, orphans["expired"], requeue=False)
            _expect(
                released is not None and released.run_id is None,
                f"releasing an expired lease gave {released}",
            )
            await _refused(
                LeaseLostError,
                slow.append_events(slow_lease, "expired-run", [_event("expired-run", 1)]),
                "a write by the holder of a recovered lease",
            )
            _expect(await supervisor.find_orphans() == [], "recovered orphans are still found")

        session = await supervisor.get_session("dead")
        _expect(session is not None and session.lease_owner is None, "a recovered session is still leased")
        assert session is not None
        _expect(session.generation > dead_lease.generation, "recovery did not bump the generation")
        [(lease, run_id)] = await worker.claim_queued("w", None, 10)
        _expect(run_id == "dead-run", f"the requeued run was not claimable (got {run_id})")
        _expect(
            lease.generation > session.generation, "claiming the requeued run did not bump the generation"
        )
        await supervisor.release_leadership(term)


async def checkpoint_atomicity(factory: StoreFactory) -> None:
    """A checkpoint that fails part-way leaves nothing of itself: an event cursor already
    taken fails the whole checkpoint (its message, its phase too); a run whose request id
    is taken and a session run whose session exists are not created at all."""
    async with factory() as store:
        lease = await _start(store, "atomic", "atomic-run", events=1)
        before = await _written(store, "atomic-run")
        state = await store.load_state("atomic-run")
        # Its first event reuses cursor 1: the message and phase before it must not stay.
        clash = _step("atomic-run", 1)
        await _refused(
            HarnessError, store.commit(lease, state, clash, []), "a checkpoint reusing an event cursor"
        )
        _expect(await _written(store, "atomic-run") == before, "a failed checkpoint left part of itself")
        await store.commit(lease, state, _step("atomic-run", 2), [])  # the lease still holds
        _expect((await _written(store, "atomic-run"))[2] == 3, "the checkpoint after a failed one was lost")

        await _finish(store, lease, "atomic-run")
        await store.create_run(lease, "first-request", "req-1", "one", _first_boundary("first-request"))
        await _finish(store, lease, "first-request")
        before = await _written(store, "first-request")
        await _refused(
            SessionBusyError,
            store.create_run(lease, "second-request", "req-1", "two", _first_boundary("second-request", 1)),
            "a run whose request id the session has used",
        )
        _expect(await store.get_run("second-request", messages=False) is None, "a refused run was created")
        _expect(await _written(store, "first-request") == before, "a refused run wrote to the session")

        session = NewSession("atomic", None, {"other": True})
        await _refused(
            ConfigurationError,
            store.create_session_run(session, "h", "third", None, "three", _first_boundary("third", 1)),
            "a session run whose session exists",
        )
        _expect(await store.get_run("third", messages=False) is None, "a refused session run created its run")
        record = await store.get_session("atomic")
        _expect(record is not None and record.fingerprint == {}, "a refused session run changed the session")


async def event_cursors(factory: StoreFactory) -> None:
    """Events come back in cursor order, ``after=`` is exclusive, ``limit`` pages, their
    content round-trips, and two runs' events do not mix."""
    async with factory() as store:
        lease = await _start(store, "cursors", "cursor-run", events=2)
        other = await _start(store, "others", "other-run", events=1)
        state = await store.load_state("cursor-run")
        await store.commit(lease, state, _step("cursor-run", 4), [_event("cursor-run", 3, "provisional")])
        await store.append_events(lease, "cursor-run", [_event("cursor-run", 6, 'streamed ✓ "quoted"')])
        await store.append_events(other, "other-run", [_event("other-run", 2)])

        everything = await store.read_events("cursor-run", 0)
        cursors = [int(e.cursor) for e in everything]
        _expect(cursors == [1, 2, 3, 4, 5, 6], f"cursors read back {cursors}, expected 1..6 in order")
        _expect(all(e.run_id == "cursor-run" for e in everything), "another run's events were read")
        texts = [e.data for e in everything]
        _expect(texts[2] == "provisional" and texts[5] == 'streamed ✓ "quoted"', f"content came back {texts}")
        after = [int(e.cursor) for e in await store.read_events("cursor-run", 2)]
        _expect(after == [3, 4, 5, 6], f"after=2 read {after}, expected [3, 4, 5, 6]")
        page = [int(e.cursor) for e in await store.read_events("cursor-run", 1, limit=2)]
        _expect(page == [2, 3], f"after=1, limit=2 read {page}, expected [2, 3]")
        _expect(await store.read_events("cursor-run", 6) == [], "reading after the last event gave some")
        record = await store.get_run("cursor-run", messages=False)
        _expect(
            record is not None and record.event_count == 6, "the run's event count is not its last cursor"
        )
        _expect(
            [int(e.cursor) for e in await store.read_events("other-run", 0)] == [1, 2], "runs' events mixed"
        )


async def waiting_for_a_stop(factory: StoreFactory) -> None:
    """``wait_until_stopped``: a running run's row comes back after the wait, which the
    commit that stops the run ends; a stopped run's row comes back at once; no such run is
    ``None``."""
    async with factory() as store:
        lease = await _start(store, "stopping", "stop-run")
        record = await store.wait_until_stopped("stop-run", 0.01)
        _expect(record is not None and not record.stopped, f"a running run's row came back as {record}")
        waiting = asyncio.ensure_future(store.wait_until_stopped("stop-run", 600))
        await _finish(store, lease, "stop-run")
        try:
            await asyncio.wait_for(waiting, _WITHIN)
        except TimeoutError:
            raise StoreConformanceError("the commit that stopped the run did not end a wait for it") from None
        record = await asyncio.wait_for(store.wait_until_stopped("stop-run", 600), _WITHIN)
        _expect(
            record is not None and record.stopped and record.status is RunStatus.COMPLETED,
            f"a finished run's row came back as {record}",
        )
        _expect(await store.wait_until_stopped("no-such-run", 0.01) is None, "a run that is not there")


async def controls(factory: StoreFactory) -> None:
    """A pause or cancel request (see ``Store.set_control``): written only while the session
    is leased and its run running, a cancel never replaced by a pause; seen by the process
    holding the lease and no other, until a renewal returns it; returned by every renewal
    (a reply lost loses nothing) until the commit that stops the run clears it, so that no
    later execution meets it; a cancel outlives a commit that only pauses the run."""
    async with _opened(factory, 2) as (owner, bystander):
        lease = await _start(owner, "controlled", "controlled-run")
        await _start(owner, "untouched", "untouched-run")
        _expect(await owner.pending_controls() == {}, "controls are pending before any was set")
        for control in ("pause", "cancel"):
            written = await bystander.set_control("controlled", control)  # an operator's process
            _expect(written, f"a {control} request on a running run was not written")
            pending = await owner.pending_controls()
            _expect(pending == {"controlled": control}, f"the owner sees {pending} after a {control} request")
            _expect(await bystander.pending_controls() == {}, "a process holding no lease sees a control")
            session = await bystander.get_session("controlled")
            _expect(session is not None and session.control == control, "the session row lacks the request")
            for _ in range(2):
                renewed = await owner.renew([lease])
                _expect(renewed.controls == {"controlled": control}, f"a renewal carried {renewed.controls}")
            _expect(await owner.pending_controls() == {}, "a returned request is still pending")
        _expect(await bystander.set_control("controlled", "pause"), "a pause after a cancel was refused")
        renewed = await owner.renew([lease])
        _expect(
            renewed.controls == {"controlled": "cancel"}, f"a pause replaced a cancel: {renewed.controls}"
        )
        # A commit that only pauses the run keeps the cancel (its driver acts on it next)...
        state = await owner.load_state("controlled-run")
        paused = Delta(Phase.PREPARE_MODEL_CALL, run=RunPatch(status=RunStatus.PAUSED))
        await owner.commit(lease, state, paused, [])
        session = await bystander.get_session("controlled")
        _expect(session is not None and session.control == "cancel", "a pause dropped a cancel")
        # ... and the commit that finishes it clears it.
        state = await owner.load_state("controlled-run")
        cancelled = Delta(Phase.PREPARE_MODEL_CALL, run=RunPatch(status=RunStatus.CANCELLED))
        await owner.commit(lease, state, cancelled, [])
        session = await bystander.get_session("controlled")
        _expect(session is not None and session.control is None, "a finished run kept its request")
        _expect((await owner.renew([lease])).controls == {}, "a finished run's renewal carried a request")
        # A pause the run acts on goes with its pausing commit.
        other = await _start(owner, "paused", "paused-run")
        _expect(await bystander.set_control("paused", "pause"), "a request was not written")
        state = await owner.load_state("paused-run")
        await owner.commit(other, state, paused, [])
        session = await bystander.get_session("paused")
        _expect(session is not None and session.control is None, "a paused run kept its pause request")
        _expect(
            not await bystander.set_control("paused", "cancel"), "a request was written for a stopped run"
        )
        _expect((await owner.renew([other])).controls == {}, "a stopped run's renewal carried a request")
        await owner.release(other)
        _expect(
            not await bystander.set_control("paused", "cancel"),
            "a request was written for a free session",
        )


STORE_CHECKS: tuple[StoreCheck, ...] = tuple(
    StoreCheck(check.__name__, check)
    for check in (
        leases_and_fencing,
        renewal,
        concurrent_claims,
        orphan_recovery,
        checkpoint_atomicity,
        event_cursors,
        waiting_for_a_stop,
        controls,
    )
)
"""Every check of the kit, in the order ``check_store`` runs them."""


async def check_store(new_database: Callable[[], StoreFactory]) -> None:
    """Run every check, each on the factory of an empty database ``new_database()`` makes."""
    for check in STORE_CHECKS:
        await check.run(new_database())
