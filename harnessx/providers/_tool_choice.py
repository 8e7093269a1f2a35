"""``tool_choice``: how free the model is to call a tool, one name for every provider.

Each vendor spells it its own way on the wire (Anthropic ``{"type": "any"}``, OpenAI
``"required"``); a provider takes one of these three values, as harnessx 0.9.1's did, and
writes its vendor's form into requests that carry tools. Left unset nothing is sent, so
each vendor's own default (``auto``) applies and the request is the one sent before the
option existed. A vendor form these three do not cover (Anthropic's ``{"type": "tool",
"name": ...}``, ``disable_parallel_tool_use``) goes in the provider's ``extra_body``, which
wins over ``tool_choice=`` when both are set, as an SDK's ``extra_body`` wins over its
named arguments.
"""

from __future__ import annotations

import os
from enum import Enum

from harnessx._errors import ConfigurationError

__all__ = ["TOOL_CHOICES", "ToolChoice", "normalize_tool_choice"]


class ToolChoice(str, Enum):  # noqa: UP042 - str() gives the member name, as in 0.9.1
    """How free the model is to call a tool.

    ``AUTO``: it may call one or answer in text (every vendor's default). ``ANY``: it must
    call one, for an agent whose every turn is a tool call (on ``AUTO`` such a model now and
    then writes the call out as prose instead). ``NONE``: it may not call one. A ``str``
    enum: ``ToolChoice.ANY == "any"``; ``.value`` is the string.
    """

    AUTO = "auto"
    ANY = "any"
    NONE = "none"


TOOL_CHOICES: tuple[str, ...] = tuple(choice.value for choice in ToolChoice)
"""The values ``tool_choice=`` takes, in ``ToolChoice``'s order."""


def normalize_tool_choice(value: ToolChoice | str | None, *, env_var: str | None = None) -> ToolChoice | None:
    """``value`` as a ``ToolChoice`` (any case, surrounding spaces ignored); when it is
    ``None``, the environment variable ``env_var`` if set, else ``None`` (send nothing).
    Anything else is a ``ConfigurationError`` (a ``ValueError``) naming the choices."""
    source = "tool_choice"
    raw: object = value
    if value is None and env_var is not None:
        raw, source = os.environ.get(env_var), env_var
    if raw is None or raw == "":
        return None
    if isinstance(raw, ToolChoice):
        return raw
    # By value, never through str(): str() of a ToolChoice is its member name.
    if isinstance(raw, str):
        try:
            return ToolChoice(raw.strip().lower())
        except ValueError:
            pass
    raise ConfigurationError(
        f"{source}={raw!r} is not a tool choice: use one of {', '.join(map(repr, TOOL_CHOICES))} "
        "(harnessx.ToolChoice), or put the vendor's own form in the provider's extra_body"
    )
