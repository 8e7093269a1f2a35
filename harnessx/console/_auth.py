"""Who may use the console: tokens with a role, signed sign-in cookies, CSRF tokens.

Tokens come from ``HARNESSX_CONSOLE_TOKENS`` or a file (a Kubernetes Secret), one per line
(or separated by commas) as ``NAME:ROLE:TOKEN``; ``ROLE`` is ``viewer`` (reads) or
``operator`` (may also decide and control runs). A token is at least 24 characters of
``A-Z a-z 0-9 . _ ~ + / = -``. A file is read again when it changes, so a token removed from
it stops working (and signs its sessions out) within a second.

A browser signs in with a token once; the console then sets a cookie holding a random
session id and its HMAC signature (HttpOnly, SameSite=Strict). The store keeps the session
by a hash of its id (``console_logins``), so signing out ends it on every replica. Every
state-changing request made with the cookie must carry the session's CSRF token (a hidden
form field, or the ``X-CSRF-Token`` header), an HMAC of its id; API clients send
``Authorization: Bearer TOKEN`` instead and need none. The signing key is
``HARNESSX_CONSOLE_SECRET`` when set, else derived from all the tokens (changing them signs
everyone out). No token, key or session id is ever logged or shown.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harnessx._errors import ConfigurationError

__all__ = ["ROLES", "Identity", "Keys", "Token", "Tokens", "generate_token", "parse_tokens", "session_hash"]

logger = logging.getLogger("harnessx.console")

ROLES = ("viewer", "operator")
MIN_TOKEN = 24
_TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]+")
_NAME = re.compile(r"[\w.@-]{1,64}")
_ADVICE = "make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


def generate_token() -> str:
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Token:
    name: str
    role: str
    secret: str

    @property
    def token_id(self) -> str:
        """A name for the token that reveals nothing of it (kept with a sign-in)."""
        return hashlib.sha256(self.secret.encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"Token(name={self.name!r}, role={self.role!r}, secret=[secure])"


@dataclass(frozen=True)
class Identity:
    """Who a request acts as: ``role`` is viewer or operator; ``via`` console (a browser
    session), api (a bearer token) or local (no auth, loopback only)."""

    name: str
    role: str
    via: str
    token_id: str = ""
    session_hash: str = ""

    @property
    def may_decide(self) -> bool:
        return self.role == "operator"


def parse_tokens(text: str, where: str) -> list[Token]:
    tokens: list[Token] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0] if line.lstrip().startswith("#") else line
        for entry in (part.strip() for part in line.split(",")):
            if not entry:
                continue
            name, role, secret = [*entry.split(":", 2), "", ""][:3]
            at = f"{where}, line {number}"
            if not _NAME.fullmatch(name) or role not in ROLES or not secret:
                raise ConfigurationError(
                    f"{at}: expected NAME:ROLE:TOKEN with ROLE viewer or operator and NAME of letters, "
                    f"digits, '.', '_', '@' or '-' (the token itself is not shown)"
                )
            if len(secret) < MIN_TOKEN or not _TOKEN.fullmatch(secret):
                raise ConfigurationError(
                    f"{at}: the token of {name!r} must be at least {MIN_TOKEN} characters of A-Z a-z 0-9 "
                    f". _ ~ + / = - ({_ADVICE})"
                )
            tokens.append(Token(name, role, secret))
    return tokens


class Tokens:
    """The console's tokens: from a text (an environment variable) and/or a file, which is read
    again when it changes."""

    def __init__(self, text: str | None = None, file: str | os.PathLike[str] | None = None) -> None:
        self._text = text or ""
        self._file = Path(file) if file else None
        self._stamp: tuple[float, int] | None = None
        self._checked = 0.0
        self._lock = threading.Lock()
        self._by_digest: dict[bytes, Token] = {}
        self._by_id: dict[str, Token] = {}
        self._load()
        if not self._by_digest:
            where = f"{self._file}" if self._file else "HARNESSX_CONSOLE_TOKENS"
            raise ConfigurationError(f"no console token in {where}: add a line NAME:ROLE:TOKEN ({_ADVICE})")

    @classmethod
    def from_environment(cls, file: str | None = None) -> Tokens | None:
        """``HARNESSX_CONSOLE_TOKENS`` and/or ``file``; ``None`` when neither is given."""
        text = os.environ.get("HARNESSX_CONSOLE_TOKENS")
        if not text and not file:
            return None
        return cls(text, file)

    def _load(self) -> None:
        found = parse_tokens(self._text, "HARNESSX_CONSOLE_TOKENS")
        if self._file is not None:
            try:
                info = self._file.stat()
                found += parse_tokens(self._file.read_text(encoding="utf-8"), str(self._file))
            except OSError as exc:
                raise ConfigurationError(
                    f"cannot read the console's token file {self._file}: {exc.strerror}"
                ) from None
            self._stamp = (info.st_mtime, info.st_size)
        self._by_digest = {_digest(t.secret): t for t in found}
        self._by_id = {t.token_id: t for t in found}

    def _fresh(self) -> None:
        if self._file is None or time.monotonic() - self._checked < 1.0:
            return
        with self._lock:
            self._checked = time.monotonic()
            try:
                info = self._file.stat()
                if (info.st_mtime, info.st_size) == self._stamp:
                    return
                self._load()
                logger.info("console: read %d tokens from %s again", len(self._by_id), self._file)
            except (OSError, ConfigurationError) as exc:
                # Keep the tokens read last: a half-written file must not lock everyone out.
                logger.warning("console: keeping the tokens read before: %s", exc)

    def find(self, secret: str) -> Token | None:
        """The token ``secret`` is (looked up by digest: its time says nothing of the secret)."""
        self._fresh()
        return self._by_digest.get(_digest(secret))

    def by_id(self, token_id: str) -> Token | None:
        self._fresh()
        return self._by_id.get(token_id)

    def secrets(self) -> list[str]:
        """Every token, for redaction (never shown)."""
        return [token.secret for token in self._by_digest.values()]

    def __repr__(self) -> str:
        return f"Tokens({len(self._by_id)} tokens{f', file={str(self._file)!r}' if self._file else ''})"


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


class Keys:
    """Signing: session cookies, CSRF tokens, flash messages."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def for_console(cls, tokens: Tokens | None) -> Keys:
        configured = os.environ.get("HARNESSX_CONSOLE_SECRET")
        if configured:
            if len(configured) < 32:
                raise ConfigurationError(
                    f"HARNESSX_CONSOLE_SECRET must be at least 32 characters ({_ADVICE})"
                )
            return cls(hashlib.sha256(b"harnessx-console\0" + configured.encode()).digest())
        if tokens is None:  # no auth: per process
            return cls(secrets.token_bytes(32))
        material = "\n".join(sorted(tokens.secrets())).encode()
        return cls(hashlib.sha256(b"harnessx-console-tokens\0" + material).digest())

    def sign(self, purpose: str, value: str) -> str:
        mac = hmac.new(self._key, f"{purpose}\0{value}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def verify(self, purpose: str, value: str, signature: str) -> bool:
        return hmac.compare_digest(self.sign(purpose, value), signature)

    def session_cookie(self, session_id: str) -> str:
        return f"{session_id}.{self.sign('session', session_id)}"

    def session_of(self, cookie: str) -> str | None:
        """The session id a cookie value holds, if its signature is ours."""
        session_id, _, signature = cookie.rpartition(".")
        if not session_id or not self.verify("session", session_id, signature):
            return None
        return session_id

    def csrf(self, session_key: str) -> str:
        return self.sign("csrf", session_key)


def session_hash(session_id: str) -> str:
    """How the store knows a session: a hash of its id (the id itself is never stored)."""
    return hashlib.sha256(session_id.encode()).hexdigest()
