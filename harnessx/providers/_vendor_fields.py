"""``extra_body``: request fields a vendor's API has and the provider contract does not.

``tool_choice``, ``parallel_tool_calls``, ``seed``, ``thinking``, ``reasoning_effort``,
``top_p``, ``metadata``, ... differ from vendor to vendor and keep arriving. Rather than one
constructor argument per field, each HTTP provider takes one ``extra_body`` mapping, checked
when the provider is built and merged into every request body.

Fields the provider derives from the agent itself (the model, the messages, the tools, the
token limit, the temperature, streaming) are refused there, with where to set them instead:
one way of doing each thing, and no request whose conversation a stray key replaced.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from harnessx._errors import ConfigurationError

__all__ = ["TOOL_FIELDS", "JSONValue", "checked_extra_body", "merge_extra_body"]

JSONValue: TypeAlias = str | int | float | bool | Sequence["JSONValue"] | Mapping[str, "JSONValue"] | None

# Fields that vendors reject when a request carries no tools (OpenAI: "tool_choice is only
# allowed when tools are specified"); a request without tools leaves them out.
TOOL_FIELDS = frozenset({"tool_choice", "parallel_tool_calls"})


def checked_extra_body(
    owner: str, extra_body: Mapping[str, JSONValue] | None, reserved: Mapping[str, str]
) -> dict[str, Any]:
    """A JSON-ready copy of ``extra_body``; ``ConfigurationError`` for what cannot be sent.

    ``reserved`` maps each field the provider sets itself to where the caller sets it instead.
    """
    if extra_body is None:
        return {}
    if not isinstance(extra_body, Mapping):
        raise ConfigurationError(
            f"{owner}(extra_body=...) must be a mapping of request field names to JSON values, "
            f"got {type(extra_body).__name__}"
        )
    fields: dict[str, Any] = {}
    for key, value in extra_body.items():
        if not isinstance(key, str) or not key:
            raise ConfigurationError(f"{owner}(extra_body=...) keys must be non-empty strings, got {key!r}")
        if key in reserved:
            raise ConfigurationError(
                f"{owner}(extra_body=...) must not set {key!r}: the provider sends it from {reserved[key]}"
            )
        try:
            # A copy through JSON: the caller's later edits cannot change what is sent, and
            # something unsendable (a set, NaN, an object) fails here, not on the first call.
            fields[key] = json.loads(json.dumps(value, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"{owner}(extra_body=...) field {key!r} is not JSON-serialisable ({exc}); "
                "use strings, numbers, booleans, None, lists and dicts"
            ) from None
    return fields


def merge_extra_body(payload: dict[str, Any], fields: Mapping[str, Any], *, has_tools: bool) -> None:
    """Add ``fields`` to ``payload`` in place (a copy each time: payloads are not shared)."""
    for key, value in fields.items():
        if key in TOOL_FIELDS and not has_tools:
            continue
        payload[key] = copy.deepcopy(value)
