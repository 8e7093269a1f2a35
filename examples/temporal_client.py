"""Submit a run to agents that Temporal workers build by reference (docs/temporal.md).

Start a Temporal frontend, Redis and a worker that knows ``assistant@v1`` (from
``examples/agents.py``), then run this script::

    export HARNESSX_TEMPORAL=127.0.0.1:7233 HARNESSX_EVENTS_URL=redis://127.0.0.1:6379/0
    PYTHONPATH=examples harness-worker --agents agents:registry
    python examples/temporal_client.py "count these four words"

The client holds no agent code: ``AgentRef`` names the definition the workers register.
``HARNESSX_TEMPORAL_TASK_QUEUE`` picks another task queue than ``harness-x-v1``.
"""

from __future__ import annotations

import asyncio
import os
import sys

from harnessx import AgentRef, AgentRuntime
from harnessx.temporal import DEFAULT_TASK_QUEUE, RedisEvents, TemporalBackend


async def main(prompt: str) -> None:
    backend = await TemporalBackend.connect(
        os.environ["HARNESSX_TEMPORAL"],
        events=RedisEvents(os.environ["HARNESSX_EVENTS_URL"]),
        task_queue=os.environ.get("HARNESSX_TEMPORAL_TASK_QUEUE", DEFAULT_TASK_QUEUE),
    )
    async with backend:
        runtime = AgentRuntime(AgentRef("assistant", "v1"), backend=backend)
        handle = await runtime.submit(prompt, request_id=f"example-{abs(hash(prompt))}")
        async for event in handle.events():
            print(event.cursor, event.type.value)
        result = await handle.result()
        print(result.status.value, "-", result.output)


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "count these four words"))
