"""The workload's script: which tools each run calls, decided by a seed in its first message.

Workers and the suite both import this module. A run's message carries its plan seed, so
the scripted model in any worker (a fresh one after a crash included) derives the same
plan from the conversation alone, and the suite knows what every run will ask for.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "TOOLS",
    "Call",
    "Plan",
    "ToolSpec",
    "approves",
    "make_plan",
    "parse_plan_seed",
    "run_message",
    "seeded",
    "tool_duration",
    "tool_output",
]

Policy = Literal["safe", "idempotent", "manual"]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    policy: Policy
    ask: bool  # PermissionLevel.ASK: the run waits for the suite's approval
    concurrent: bool
    weight: float  # how often plans pick it


# Every replay policy, each with and without an approval, concurrent and exclusive tools.
TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec("lookup", "safe", ask=False, concurrent=True, weight=0.28),
        ToolSpec("charge", "idempotent", ask=False, concurrent=True, weight=0.24),
        ToolSpec("notify", "manual", ask=False, concurrent=False, weight=0.20),
        ToolSpec("publish", "manual", ask=True, concurrent=False, weight=0.10),
        ToolSpec("refund", "idempotent", ask=True, concurrent=True, weight=0.10),
        ToolSpec("archive", "safe", ask=True, concurrent=True, weight=0.08),
    )
}


@dataclass(frozen=True)
class Call:
    call_id: str
    tool: str
    item: str


@dataclass(frozen=True)
class Plan:
    """``turns[n]`` answers a conversation holding ``n`` assistant messages; after the last
    turn the model gives its final answer."""

    seed: int
    turns: tuple[tuple[Call, ...], ...]


def seeded(*parts: object) -> random.Random:
    """A generator that depends only on ``parts`` (not on PYTHONHASHSEED or the process)."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def make_plan(seed: int) -> Plan:
    rng = seeded("plan", seed)
    names = list(TOOLS)
    weights = [TOOLS[name].weight for name in names]
    turns = []
    for turn in range(rng.choices((1, 2, 3), weights=(0.3, 0.45, 0.25))[0]):
        count = rng.choices((1, 2, 3), weights=(0.45, 0.35, 0.2))[0]
        turns.append(
            tuple(
                Call(f"call_{turn}_{index}", tool, f"item-{seed}-{turn}-{index}")
                for index, tool in enumerate(rng.choices(names, weights=weights, k=count))
            )
        )
    return Plan(seed, tuple(turns))


_SEED = re.compile(r"\bplan (\d+)\b")


def run_message(index: int, plan_seed: int) -> str:
    return f"chaos run {index}: plan {plan_seed}"


def parse_plan_seed(message: str) -> int:
    match = _SEED.search(message)
    if match is None:
        raise ValueError(f"not a chaos run message: {message!r}")
    return int(match.group(1))


def tool_duration(seed: int, execution_key: str, low_ms: int, high_ms: int) -> float:
    """Seconds a tool call takes: random, but the same for every attempt of one key."""
    return seeded("duration", seed, execution_key).uniform(low_ms, high_ms) / 1000


def tool_output(tool: str, item: str) -> str:
    # Deterministic, so a replayed call returns what the first attempt would have.
    return f"{tool} {item}: ok"


def approves(seed: int, execution_key: str) -> bool:
    """The suite's answer to an approval request: most are approved, some declined."""
    return seeded("approve", seed, execution_key).random() < 0.8
