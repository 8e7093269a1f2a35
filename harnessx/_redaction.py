"""Masking secrets in what leaves the process: log lines, probe answers, incident bundles.

What is masked: URL passwords, values of secret-named keys (``password``, ``token``,
``api_key``, ``authorization``, ``cookie``, ...) in ``key=value`` / ``key: value`` text and in
mappings, bearer tokens, well-known API key and token shapes (``sk-``, GitHub, GitLab, Slack,
AWS, Google, JSON Web Tokens, PEM private keys), and, for a ``Redactor``, literal secrets
it is given and JSON documents held in strings. It protects credentials; it does not find
personal data or business secrets in prose.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Redactor", "environment_secrets", "is_secret_key", "redact", "redact_value", "scrub"]

# ``scheme://user:password@host``. A password is taken to run to the *last* ``@`` before
# whitespace or a quote: one typed in by hand may hold a raw ``/``, ``#``, ``@`` or ``:``, which
# ends the userinfo for a URL parser but must still be hidden. The price is the odd URL with a
# port and an ``@`` further on (``http://h:80/a@b``), whose middle is masked too.
_URL_PASSWORD = re.compile(r"""(?P<prefix>[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s"']*:)[^\s"']*@""")
# A name containing one of these words names a secret. The word must not run on into lowercase
# letters, so ``input_tokens`` is left alone while ``access_token`` and ``apiKey`` are caught.
_SECRET_NAME = r"""[\w-]*?
    (?:password|passwd|passphrase|secret|token|api[_-]?key|private[_-]?key|access[_-]?key
       |authorization|cookies?|credentials?)
    (?-i:(?![a-z0-9]))[\w-]*"""
_SECRET_FIELD = re.compile(_SECRET_NAME, re.IGNORECASE | re.VERBOSE)
# A secret-named key in any of key=value, key: value, "key": "value" or 'key': 'value'
# (quoted values may escape their quote with a backslash, as libpq's key=value DSNs do).
# An unquoted value runs to whitespace or a quote; one of , ; & ) } ] ends it only where what
# follows reads as the end of the value (whitespace, the end, or the next ``name=``), so
# ``password=ab;cd`` is hidden whole while ``?token=abc&b=2`` keeps ``&b=2``.
_SECRET_PAIR = re.compile(
    rf"""
    (?P<key>(?<![\w-]){_SECRET_NAME})
    (?P<sep>["']?\s*[:=]\s*)
    (?:
        (?P<quote>["'])(?:(?!(?P=quote))[^\\]|\\.)*(?P=quote)
      | (?P<scheme>(?:bearer|basic|token)\s+)?
        (?:(?![,;&}})\]](?:\s|$|[\w.-]+=))[^\s"'])+
    )
    """,
    re.IGNORECASE | re.VERBOSE,
)
_API_KEY = re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{8,}")
_BEARER = re.compile(r"(?i)(?P<scheme>\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}")
# Token shapes that are secrets wherever they appear.
_TOKENS = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----"
    r"|(?<![A-Za-z0-9])(?:"
    r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|glpat-[A-Za-z0-9_-]{20,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16}(?![A-Za-z0-9])"
    r"|AIza[0-9A-Za-z_-]{35}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
    r")",
    re.S,
)
_MASK = "***"
_HOLD = "\ue000"  # a private-use character: never in a real secret, matched as one
# Shorter literal secrets would match ordinary words: those are left to the patterns.
_MIN_LITERAL = 8


def scrub(text: str, mask: str = _MASK) -> str:
    """``text`` with every secret the patterns know replaced by ``mask`` (idempotent)."""

    def pair(match: re.Match[str]) -> str:
        quote = match["quote"] or ""
        return f"{match['key']}{match['sep']}{quote}{match['scheme'] or ''}{_HOLD}{quote}"

    # Masks already there are held as one character the patterns take for a secret value,
    # so that masking again changes nothing ("[REDACTED]" would otherwise lose its "]").
    text = text.replace(mask, _HOLD)
    text = _URL_PASSWORD.sub(lambda m: f"{m['prefix']}{_HOLD}@", text)
    text = _SECRET_PAIR.sub(pair, text)
    text = _API_KEY.sub(f"sk-{_HOLD}", text)
    text = _BEARER.sub(lambda m: f"{m['scheme']}{_HOLD}", text)
    return _TOKENS.sub(_HOLD, text).replace(_HOLD, mask)


def redact(text: str) -> str:
    """``text`` with URL passwords, values of secret-named keys, bearer tokens and API keys masked."""
    return scrub(text)


def redact_value(key: str, value: object) -> object:
    if value is not None and _SECRET_FIELD.fullmatch(key):
        return _MASK
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {str(k): redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value("", item) for item in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    # Anything else is rendered with str() by the formatters, and a repr can quote a secret
    # (a settings object holding a DSN), so it is rendered and scrubbed here.
    return redact(str(value))


def is_secret_key(key: str) -> bool:
    """Whether a mapping key names a credential."""
    return _SECRET_FIELD.fullmatch(key) is not None


def environment_secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """Credentials in the environment: values of secret-named variables (``OPENAI_API_KEY``),
    and the passwords in URLs and keyword DSNs of any variable (``HARNESSX_DSN``)."""
    environ = os.environ if environ is None else environ
    found: set[str] = set()
    for name, value in environ.items():
        if is_secret_key(name):
            found.add(value)
        found.update(m.group(1) for m in re.finditer(r"://[^\s:/@]*:([^\s/@]+)@", value))
        found.update(m.group(1) for m in re.finditer(r"(?i)\bpassword\s*=\s*([^\s&;]+)", value))
    return {value for value in found if len(value) >= _MIN_LITERAL}


class Redactor:
    """Redacts JSON-shaped values: mapping values under secret-named keys, secrets in every
    string (``scrub``), the ``literals`` given wherever they appear, and JSON documents held
    in strings (parsed, redacted alike and written back)."""

    def __init__(self, literals: Iterable[str] = (), *, mask: str = "[REDACTED]") -> None:
        kept = {value for value in literals if len(value) >= _MIN_LITERAL}
        # Longest first, so that a secret containing another is removed whole.
        self._literals = sorted(kept, key=len, reverse=True)
        self.mask = mask

    def redact(self, value: Any) -> Any:
        """A redacted copy of ``value`` (which is left as it is)."""
        if isinstance(value, Mapping):
            result: dict[Any, Any] = {}
            for key, child in value.items():
                name = self.text(key) if isinstance(key, str) else key
                while name in result:  # two keys that redact alike keep both values
                    name = f"{name}#"
                secret = isinstance(key, str) and is_secret_key(key) and child not in (None, "", True, False)
                result[name] = self.mask if secret else self.redact(child)
            return result
        if isinstance(value, list | tuple):
            return [self.redact(child) for child in value]
        if isinstance(value, str):
            return self.text(value)
        return value

    def text(self, text: str) -> str:
        if text.lstrip()[:1] in ("{", "["):
            embedded = self._embedded_json(text)
            if embedded is not None:
                return embedded
        for literal in self._literals:
            text = text.replace(literal, self.mask)
        return scrub(text, self.mask)

    def _embedded_json(self, text: str) -> str | None:
        """A JSON document held in ``text``, redacted and written back; ``None`` if ``text``
        holds none or nothing in it needed redacting."""
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            return None
        redacted = self.redact(parsed)
        if redacted == parsed:
            return None
        return json.dumps(redacted, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
