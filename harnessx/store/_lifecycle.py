"""What both dialects share of retention and erasure: which sessions may go, and why not.

A prune looks at candidate sessions (their ``prune_check_at`` is older than the cutoff) and
decides from facts read under the same lock that keeps runs from starting in them: a session
goes when no unexpired lease holds it, it has no unfinished run, its last activity is older
than the cutoff and, when statuses are given, its latest run has one of them. A session found
still in use gets ``prune_check_at`` moved to when it may next qualify (its last activity; for
an unfinished run, the time it was looked at), so that a pass never looks at it again before
then: a pass costs what became old enough since the last one, not the whole history.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

__all__ = ["Fact", "Judgement", "judge"]


@dataclass(frozen=True)
class Fact:
    """What a prune knows of one candidate session (``last_active`` as the dialect keeps
    times exactly: SQLite epoch seconds, PostgreSQL a timestamptz as text)."""

    session_id: str
    free: bool  # no unexpired lease holds it
    unfinished: bool
    last_active: float | str
    idle: bool  # last active before the cutoff
    latest_status: str | None


@dataclass
class Judgement:
    """Which candidates go, and when to look again at those that stay (``None``: now)."""

    eligible: list[str]
    recheck: list[tuple[str, float | str | None]]


def judge(facts: Sequence[Fact], statuses: Collection[str] | None) -> Judgement:
    eligible: list[str] = []
    recheck: list[tuple[str, float | str | None]] = []
    for fact in facts:
        if not fact.free:
            continue  # a process is about to use it: looked at again in the next pass
        if fact.unfinished:
            recheck.append((fact.session_id, None))
        elif not fact.idle:
            recheck.append((fact.session_id, fact.last_active))
        elif statuses is None or fact.latest_status in statuses:
            eligible.append(fact.session_id)
        # else: old enough but not of the statuses asked for; another prune may want it
    return Judgement(eligible, recheck)
