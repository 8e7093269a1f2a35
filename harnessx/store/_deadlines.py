"""How long each lease this process holds certainly still holds, by this process's clock.

The store sets a lease's expiry to its own clock plus ``lease_seconds`` when a claim or a
renewal is processed, which is never before the request was sent. So a lease extended by a
request sent at monotonic time ``t`` holds, whatever happens to the connection meanwhile, at
least until ``t + lease_seconds`` (give or take how far the clocks' rates drift apart, which
callers leave a margin for). A reply that arrives late, after a network stall, proves only
that the lease held when the server processed it, which is why a holder asks this before an
effect outside the store, such as a tool call, rather than trusting that it just committed.
"""

from __future__ import annotations

from harnessx.store._protocol import Lease

__all__ = ["LeaseDeadlines"]

_REMEMBERED = 10_000  # leases; given up without a release (queued, lost), they are forgotten


class LeaseDeadlines:
    def __init__(self, lease_seconds: float) -> None:
        self.lease_seconds = lease_seconds
        self._until: dict[str, tuple[Lease, float]] = {}

    def extended(self, lease: Lease, sent: float) -> None:
        """``lease`` was claimed or renewed by a request sent at ``sent`` (``time.monotonic()``)."""
        if len(self._until) >= _REMEMBERED and lease.session_id not in self._until:
            self._until.clear()
        held = self._until.get(lease.session_id)
        until = sent + self.lease_seconds
        if held is None or held[0] != lease or held[1] < until:
            self._until[lease.session_id] = (lease, until)

    def forget(self, lease: Lease) -> None:
        """``lease`` no longer holds (released, lost): a newer lease on its session, claimed
        since by this process, keeps its deadline."""
        held = self._until.get(lease.session_id)
        if held is not None and held[0] == lease:
            del self._until[lease.session_id]

    def clear(self) -> None:
        """Every lease may be taken over at once (this process lost its liveness lock)."""
        self._until.clear()

    def until(self, lease: Lease) -> float:
        """The ``time.monotonic()`` until which ``lease`` certainly holds; 0 when unknown."""
        held = self._until.get(lease.session_id)
        return held[1] if held is not None and held[0] == lease else 0.0
