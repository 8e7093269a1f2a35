"""DSNs asyncpg would misread: refused in our words, the password never shown."""

from __future__ import annotations

import traceback

import pytest

from harnessx import ConfigurationError
from harnessx.store import PostgresBackend

SECRET = "Sup3rSecretTail"


def shown(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def leaks(text: str) -> bool:
    # Any 4 characters of the password in a row count as a leak: asyncpg's own message
    # quoted it up to the first special character.
    return any(SECRET[i : i + 4] in text for i in range(len(SECRET) - 3))


@pytest.mark.parametrize("special", ["/", "#", "?", "@"])
def test_raw_special_characters_in_the_password_are_refused_with_the_encoding(special: str) -> None:
    password = SECRET[:5] + special + SECRET[5:]
    with pytest.raises(ConfigurationError) as refused:
        PostgresBackend(f"postgresql://app:{password}@db.example:5432/app")
    message = str(refused.value)
    assert "postgresql://app:***@db.example:5432/app" in message
    assert "percent-encode" in message and "%2F" in message and "%23" in message and "%40" in message
    assert not leaks(shown(refused.value)), shown(refused.value)


def test_encoded_passwords_and_at_signs_in_the_query_are_accepted() -> None:
    PostgresBackend(f"postgresql://app:{SECRET[:5]}%2F{SECRET[5:]}@h/app")
    PostgresBackend("postgresql://h/app?user=someone@example")
    PostgresBackend("postgresql://app@h1:5432,h2:5433/app")


@pytest.mark.parametrize(
    "dsn",
    [
        f"postgresql://app:a=b/{SECRET}@127.0.0.1:1/app",  # past our check; asyncpg's int() fails
        f"postgresql://app:{SECRET}@127.0.0.1:notaport/app",
    ],
)
async def test_what_the_driver_cannot_parse_is_ours_and_redacted(dsn: str) -> None:
    backend = PostgresBackend(dsn)
    with pytest.raises(ConfigurationError) as refused:
        await backend.initialize()
    assert "the PostgreSQL driver could not parse the DSN postgresql://app:***@" in str(refused.value)
    assert "percent-encode" in str(refused.value)
    assert not leaks(shown(refused.value)), shown(refused.value)
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


async def test_without_a_password_the_driver_reason_is_shown() -> None:
    with pytest.raises(ConfigurationError, match=r"could not parse the DSN .*\(invalid literal for int"):
        await PostgresBackend("postgresql://app@127.0.0.1:notaport/app").initialize()


def test_connect_timeout_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="connect_timeout must be positive"):
        PostgresBackend("postgresql://h/app", connect_timeout=0)
