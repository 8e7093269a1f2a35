"""What every probe shares: describing harnessx objects as plain JSON, the same way under
harnessx 0.9.1 and under this project, and printing the observations.

A probe must run unchanged on both packages, so it uses only their common public API; this
module imports nothing from harnessx.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

_IDS = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")


def payload(data: Any) -> Any:
    """An event payload as JSON: a str or dict as it is, harnessx objects by their fields."""
    if isinstance(data, str | dict | list) or data is None:
        return data
    kind = type(data).__name__
    if kind == "ToolCall":
        return {"id": data.id, "name": data.name, "input": data.input}
    if kind == "ToolResult":
        return {"tool_call_id": data.tool_call_id, "content": data.content, "is_error": data.is_error}
    if kind == "ToolCallDelta":
        return {"id": data.id, "name": data.name, "partial_json": data.partial_json}
    if hasattr(data, "to_dict"):
        return data.to_dict()
    return repr(data)


def event(e: Any) -> dict[str, Any]:
    return {
        "type": e.type.value,
        "data_type": type(e.data).__name__,
        "data": payload(e.data),
        "step_id": e.step_id,
        "attempt_id": e.attempt_id,
    }


def mro(cls: type) -> list[str]:
    return [k.__name__ for k in cls.__mro__ if k is not object]


def caught(error: BaseException) -> dict[str, Any]:
    return {"class": type(error).__name__, "mro": mro(type(error))}


def emit(observations: dict[str, Any]) -> None:
    """Print the observations, ids (uuids, hex ids) replaced by ``<id>``."""
    text = json.dumps(observations, sort_keys=True, default=repr)
    sys.stdout.write(_IDS.sub("<id>", text) + "\n")
