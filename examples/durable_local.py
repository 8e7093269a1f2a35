"""A durable run on the embedded SQLite store, with an approval that survives a restart.

Run: python examples/durable_local.py
"""

from __future__ import annotations

import asyncio

from harnessx import (
    Agent,
    AgentRuntime,
    ProviderResponse,
    RunResult,
    ScriptedProvider,
    SQLiteBackend,
    ToolCall,
)


def build_agent() -> Agent:
    agent = Agent(
        provider=ScriptedProvider(
            [
                ProviderResponse(
                    tool_calls=[ToolCall("call_1", "send_invoice", {"customer": "ACME", "amount": 120})]
                ),
                "The invoice is sent.",
            ]
        )
    )

    @agent.tools.register(permission="ask", replay_policy="idempotent")
    def send_invoice(customer: str, amount: int) -> str:
        """Send an invoice.

        Args:
            customer: Customer name.
            amount: Amount in EUR.
        """
        return f"invoice for {amount} EUR sent to {customer}"

    return agent


def present_result(result: RunResult) -> None:
    if result.ok:
        print("Answer:", result.output)
    elif result.failed and result.error:
        print("Error:", result.error["message"])
    for pending in result.pending:
        print(pending.status, pending.execution_key, pending.call.name)


async def main() -> None:
    async with SQLiteBackend("runtime.sqlite3") as backend:
        # First process: the run stops and waits for a person.
        async with AgentRuntime(build_agent(), backend=backend) as runtime:
            waiting = await runtime.run("Invoice ACME for 120 EUR.")
            present_result(waiting)

        # Later, maybe another process: approve and continue in the same call, which
        # returns the finished run's result.
        runtime = AgentRuntime(build_agent(), backend=backend)
        try:
            present_result(await runtime.approve(waiting.pending[0], resume=True))
        finally:
            await runtime.aclose()


if __name__ == "__main__":
    asyncio.run(main())
