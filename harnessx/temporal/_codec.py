"""Run state, model replies and tool results as JSON-ready dicts, for Temporal payloads.

The workflow keeps ``RunState`` objects in memory and hands activities plain dicts; every
value crossing that line goes through here, so both sides read what the other wrote.
Fields are read from the dataclasses themselves: a field added to ``RunState`` or
``ProviderResponse`` travels without a change here, as long as its value is JSON-ready.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from harnessx._results import RunResult, RunStatus, ToolResult
from harnessx._state import Phase, RunState, ToolEntry
from harnessx.providers._base import ProviderResponse, StopReason, TokenUsage, ToolCall

__all__ = [
    "jsonable",
    "response_from_dict",
    "response_to_dict",
    "result_from_dict",
    "state_from_dict",
    "state_to_dict",
    "tool_result_from_dict",
]


def jsonable(value: Any) -> Any:
    """``value`` as JSON types only (what Temporal's JSON converter accepts); anything
    else becomes its ``str``, as the stores write it."""
    return json.loads(json.dumps(value, default=str))


def state_to_dict(state: RunState) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for f in dataclasses.fields(state):
        value = getattr(state, f.name)
        if f.name == "tools":
            value = {key: entry.to_dict() for key, entry in value.items()}
        elif isinstance(value, TokenUsage):
            value = value.to_dict()
        data[f.name] = value
    return dict(jsonable(data))


def state_from_dict(data: dict[str, Any]) -> RunState:
    known = {f.name for f in dataclasses.fields(RunState)}
    values = {k: v for k, v in data.items() if k in known}
    values["status"] = RunStatus(values.get("status", RunStatus.RUNNING))
    values["phase"] = Phase(values.get("phase", Phase.PREPARE_MODEL_CALL))
    values["tools"] = {key: ToolEntry.from_dict(entry) for key, entry in (values.get("tools") or {}).items()}
    values["usage"] = TokenUsage.from_dict(values.get("usage"))
    return RunState(**values)


def response_to_dict(response: ProviderResponse) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for f in dataclasses.fields(response):
        value = getattr(response, f.name)
        if f.name == "tool_calls":
            value = [call.to_dict() for call in value or []]
        elif isinstance(value, TokenUsage):
            value = value.to_dict()
        elif isinstance(value, StopReason):
            value = value.value
        # The blocks a provider gave, under the name they are passed in (and were stored as).
        data["content" if f.name == "_blocks" else f.name] = value
    return dict(jsonable(data))


def response_from_dict(data: dict[str, Any]) -> ProviderResponse:
    known = {f.name for f in dataclasses.fields(ProviderResponse) if f.init} | {"content"}
    values = {k: v for k, v in data.items() if k in known}
    values["tool_calls"] = [ToolCall.from_dict(call) for call in values.get("tool_calls") or []]
    usage = values.get("usage")
    values["usage"] = TokenUsage.from_dict(usage) if usage is not None else None
    return ProviderResponse(**values)


def tool_result_from_dict(data: dict[str, Any]) -> ToolResult:
    return ToolResult.from_dict(data)


def result_from_dict(data: dict[str, Any]) -> RunResult:
    return RunResult.from_dict(data)
