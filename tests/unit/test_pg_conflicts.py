"""What a PostgreSQL conflict (a deadlock, a serialization failure) is reported as: how often
it was tried only where it was tried again, and what to do where it was tried once."""

from __future__ import annotations

import asyncpg
import pytest

from harnessx import StorageError
from harnessx.store import PostgresBackend, _pg_execution


def backend() -> PostgresBackend:
    return PostgresBackend("postgresql://app:s3cret-pw@db.example:5432/app")


def deadlock() -> asyncpg.exceptions.DeadlockDetectedError:
    return asyncpg.exceptions.DeadlockDetectedError("deadlock detected")


def test_a_conflict_met_once_says_nothing_was_kept_and_to_try_again() -> None:
    message = str(backend()._translate(deadlock(), "taking leadership", None, None, None))
    assert "DeadlockDetectedError" in message and "try again" in message, message
    assert "gave up" not in message, message  # it was not tried again
    assert "s3cret" not in message


async def test_a_transaction_failed_by_every_conflict_says_how_often_it_went(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_pg_execution, "_RETRY_ATTEMPTS", 3)
    tries = 0

    async def transaction() -> None:
        nonlocal tries
        tries += 1
        raise deadlock()

    with pytest.raises(StorageError) as caught:
        await backend()._until_no_conflict("migrating the schema", transaction)
    assert tries == 3
    assert "kept conflicting" in str(caught.value) and "gave up after 3 attempts in" in str(caught.value)


async def test_a_transaction_goes_again_after_a_conflict_only() -> None:
    tries = 0

    async def transaction() -> str:
        nonlocal tries
        tries += 1
        if tries == 1:
            raise deadlock()
        return "applied"

    assert await backend()._until_no_conflict("migrating the schema", transaction) == "applied"
    assert tries == 2

    async def refused() -> None:
        raise asyncpg.exceptions.LockNotAvailableError("canceling statement due to lock timeout")

    # Not a conflict the server resolved: raised as it is, once, for the caller's advice.
    with pytest.raises(asyncpg.exceptions.LockNotAvailableError):
        await backend()._until_no_conflict("migrating the schema", refused)
