"""Agents for the Temporal tests, importable by worker processes as ``temporal_agents:registry``.

The pool tests' three agents (``safe``, ``idempotent``, ``manual``: one tool call, then an
answer; tools write ``$HX_LEDGER`` and sleep ``$HX_SLOW_TOOL``), and ``approval``, whose
tool needs a person's approval first.
"""

from __future__ import annotations

from pool_agents import _agent

from harnessx import Agent, AgentRegistry, PermissionLevel

__all__ = ["registry"]


def _approval() -> Agent:
    agent = _agent("safe")
    agent.permissions.set_permission("safe_tool", PermissionLevel.ASK)
    return agent


registry = AgentRegistry()
for _policy in ("safe", "idempotent", "manual"):
    registry.register(_policy, lambda policy=_policy: _agent(policy), version="v1")
registry.register("approval", _approval, version="v1")
