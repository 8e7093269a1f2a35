"""Masking secrets (URL passwords, values of secret-named keys, ``sk-`` API keys) in text that
leaves the process: log lines, probe answers."""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["redact", "redact_value"]

_URL_PASSWORD = re.compile(r"(?P<prefix>[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)[^@\s/]+@")
# A name containing one of these words names a secret. The word must not run on into lowercase
# letters, so ``input_tokens`` is left alone while ``access_token`` and ``apiKey`` are caught.
_SECRET_NAME = r"""[\w-]*?
    (?:password|passwd|secret|token|api[_-]?key|authorization)
    (?-i:(?![a-z0-9]))[\w-]*"""
_SECRET_FIELD = re.compile(_SECRET_NAME, re.IGNORECASE | re.VERBOSE)
# A secret-named key in any of key=value, key: value, "key": "value" or 'key': 'value'.
_SECRET_PAIR = re.compile(
    rf"""
    (?P<key>(?<![\w-]){_SECRET_NAME})
    (?P<sep>["']?\s*[:=]\s*)
    (?:
        (?P<quote>["'])(?:(?!(?P=quote))[^\\]|\\.)*(?P=quote)
      | (?P<scheme>(?:bearer|basic|token)\s+)?[^\s"',;&}})\]]+
    )
    """,
    re.IGNORECASE | re.VERBOSE,
)
_API_KEY = re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{8,}")
_MASK = "***"


def _mask_pair(match: re.Match[str]) -> str:
    quote = match["quote"] or ""
    return f"{match['key']}{match['sep']}{quote}{match['scheme'] or ''}{_MASK}{quote}"


def redact(text: str) -> str:
    """``text`` with URL passwords, values of secret-named keys and ``sk-`` API keys masked."""
    text = _URL_PASSWORD.sub(rf"\g<prefix>{_MASK}@", text)
    text = _SECRET_PAIR.sub(_mask_pair, text)
    return _API_KEY.sub(f"sk-{_MASK}", text)


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
