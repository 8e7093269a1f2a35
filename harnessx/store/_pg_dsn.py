"""PostgreSQL DSNs without their secrets: what may be shown of one, and scrubbing the
password out of any text (driver messages quote DSNs) before it reaches a log or an error."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from harnessx._errors import ConfigurationError

__all__ = ["ENCODING_ADVICE", "Dsn", "check_dsn", "parse_dsn", "redact_dsn"]


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


ENCODING_ADVICE = (
    "percent-encode the user name and password: / as %2F, # as %23, ? as %3F, @ as %40, % as %25 "
    "(python3 -c 'import urllib.parse, getpass; print(urllib.parse.quote(getpass.getpass(), safe=\"\"))' "
    "prints the encoded form of a password typed at its prompt)"
)


def check_dsn(dsn: str) -> Dsn:
    """``parse_dsn``, refusing a DSN whose credentials the driver would misread."""
    parsed = parse_dsn(dsn)
    _check_credentials(dsn.partition("://")[2], parsed.redacted)
    return parsed


def _check_credentials(rest: str, redacted: str) -> None:
    """Refuse credentials that URL parsing (asyncpg's) would split in the wrong place.

    Read as a URL, the authority ends at the first '/', '?' or '#', and asyncpg takes the
    user and password to end at its *first* '@'. A raw '/', '?' or '#' in a password thus
    makes the rest of the password a path, query or fragment (and its start a host and port),
    and a raw '@' makes its tail part of the host. Said here, in our words, before the
    driver's own message (a ValueError quoting part of the password) can be shown.
    """
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority = rest[:end]
    if "@" in authority:
        broken = "@" in authority.rpartition("@")[0]
    else:
        # No credentials in the authority, but an '@' further on: unless it is a query
        # value (key=value), the credentials were cut short by a raw '/', '?' or '#'.
        before_at, at, _ = rest.partition("@")
        broken = bool(at) and "=" not in before_at
    if broken:
        raise ConfigurationError(
            f"the user name or password in the PostgreSQL DSN {redacted} holds a character that a URL "
            f"must escape (one of / ? # @; the value is not shown): {ENCODING_ADVICE}"
        )


def redact_dsn(dsn: str) -> str:
    """``dsn`` with its password replaced by ``***``, safe for messages and logs."""
    return parse_dsn(dsn).redacted
