"""PostgreSQL DSNs without their secrets: what may be shown of one, and scrubbing the
password out of any text (driver messages quote DSNs) before it reaches a log or an error."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from harnessx._errors import ConfigurationError

__all__ = ["Dsn", "parse_dsn", "redact_dsn"]


@dataclass(frozen=True)
class Dsn:
    """A DSN split into what may be shown and what must never be."""

    redacted: str
    user: str | None
    secrets: tuple[str, ...]

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def leaks(self, exc: BaseException) -> bool:
        shown = f"{exc}{exc.args!r}"
        return any(secret in shown for secret in self.secrets)


_SECRET_PARAM = re.compile(r"(?i)((?:^|[?&])[a-z_]*password=)([^&#]*)")


def parse_dsn(dsn: str) -> Dsn:
    scheme, sep, rest = dsn.partition("://")
    if not sep or scheme not in ("postgres", "postgresql"):
        raise ConfigurationError(
            "the PostgreSQL DSN must be a URL such as postgresql://user:password@host:5432/database "
            "(the value given is not shown, as it may hold a password)"
        )
    secrets: list[str] = []
    for match in _SECRET_PARAM.finditer(rest):  # ?password=... is accepted by asyncpg too
        secrets += [match.group(2), unquote(match.group(2))]
    rest = _SECRET_PARAM.sub(r"\1***", rest)
    # Credentials end at the *last* '@': a password with an unescaped '@' or '/' must still
    # be hidden, even if that over-redacts an odd DSN.
    userinfo, at, hostpart = rest.rpartition("@")
    user: str | None = None
    if at:
        user, colon, password = userinfo.partition(":")
        if colon:
            secrets += [password, unquote(password)]
            userinfo = f"{user}:***"
        user = unquote(user) or None
    redacted = f"{scheme}://{userinfo}@{hostpart}" if at else f"{scheme}://{hostpart}"
    # Longest first, so a secret containing another is replaced whole.
    kept = sorted({s for s in secrets if s}, key=len, reverse=True)
    return Dsn(redacted, user, (dsn, *kept))


def redact_dsn(dsn: str) -> str:
    """``dsn`` with its password replaced by ``***``, safe for messages and logs."""
    return parse_dsn(dsn).redacted
