"""The public ``(str, Enum)`` types as text: ``str()``, f-strings, ``%s``, ``format()``,
JSON, ``.value``, equality with the value, and a lookup by value. A program of 0.9.1's that
prints or formats them sees the member's name (``PermissionLevel.ASK``); JSON and ``==``
see the value."""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from _probe import emit

from harnessx import PermissionLevel, ReplayPolicy, RunEventType, RunStatus, StopReason, ToolChoice


def texts(member: Enum) -> dict[str, Any]:
    value = member.value
    return {
        "str": str(member),
        "f": f"{member}",
        "f_padded": f"{member:<24}|",
        "percent": "%s" % member,  # noqa: UP031 - the %-form is what is observed
        "format": "{}".format(member),  # noqa: UP032 - str.format is what is observed
        "json": json.dumps(member),
        "json_key": json.dumps({member: 1}),
        "value": value,
        "equals_value": member == value,
        "by_value": type(member)(value) is member,
        "is_str": isinstance(member, str),
        "join": "/".join([member, member]),  # type: ignore[list-item]
        "upper": member.upper(),  # type: ignore[attr-defined]
    }


emit(
    {
        type(member).__name__: texts(member)
        for member in (
            PermissionLevel.ASK,
            StopReason.END_TURN,
            ReplayPolicy.IDEMPOTENT,
            ToolChoice.ANY,
            RunStatus.COMPLETED,
            RunEventType.TEXT_DELTA,
        )
    }
)
