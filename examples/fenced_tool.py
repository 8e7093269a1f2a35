"""An idempotent tool that an external system protects with the execution key and the
lease's fencing token, so neither a replay nor a zombie worker can apply an effect twice.

Run: python examples/fenced_tool.py
"""

from __future__ import annotations

import asyncio
import sqlite3

from harnessx import (
    Agent,
    AgentRuntime,
    ProviderResponse,
    ScriptedProvider,
    SQLiteBackend,
    ToolCall,
    current_tool_context,
)

PAYMENTS = "payments.sqlite3"


def apply_charge(conn: sqlite3.Connection, execution_key: str, token: int, customer: str, amount: int) -> str:
    """The payment system's side: one charge per execution key, newest lease holder wins.

    A call whose fencing token is older than one already seen for this key comes from a
    process that lost its lease (a zombie): it is rejected, even if it arrives last.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute(
            "SELECT token, charged FROM charges WHERE execution_key = ?", (execution_key,)
        ).fetchone()
        if row is not None and token < row[0]:
            conn.execute("ROLLBACK")
            return f"rejected: token {token} is older than {row[0]}"
        if row is not None and row[1]:
            conn.execute("UPDATE charges SET token = ? WHERE execution_key = ?", (token, execution_key))
            conn.execute("COMMIT")
            return "already charged"
        conn.execute(
            "INSERT INTO charges (execution_key, token, customer, amount, charged) VALUES (?, ?, ?, ?, 1) "
            "ON CONFLICT (execution_key) DO UPDATE SET token = excluded.token, charged = 1",
            (execution_key, token, customer, amount),
        )
        conn.execute("COMMIT")
        return f"charged {customer} {amount} EUR"
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def payments() -> sqlite3.Connection:
    conn = sqlite3.connect(PAYMENTS, isolation_level=None)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS charges (execution_key TEXT PRIMARY KEY, token INTEGER NOT NULL, "
        "customer TEXT NOT NULL, amount INTEGER NOT NULL, charged INTEGER NOT NULL)"
    )
    return conn


agent = Agent(
    provider=ScriptedProvider(
        [
            ProviderResponse(tool_calls=[ToolCall("call_1", "charge", {"customer": "ACME", "amount": 120})]),
            "Charged.",
        ]
    )
)


@agent.tools.register(replay_policy="idempotent")
def charge(customer: str, amount: int) -> str:
    """Charge a customer.

    Args:
        customer: Customer name.
        amount: Amount in EUR.
    """
    context = current_tool_context()
    with payments() as conn:
        return apply_charge(conn, context.execution_key, context.fencing_token or 0, customer, amount)


async def main() -> None:
    # Each run of this example is a new session that charges once: start from an empty
    # ledger (this example's own table), so a second run shows the same as the first.
    with payments() as conn:
        conn.execute("DELETE FROM charges")
    async with SQLiteBackend("runtime.sqlite3") as backend, AgentRuntime(agent, backend=backend) as runtime:
        result = await runtime.run("Charge ACME 120 EUR.")
        print(result.output)
    with payments() as conn:
        key, token = conn.execute("SELECT execution_key, token FROM charges").fetchone()
        print("replayed by the same holder:", apply_charge(conn, key, token, "ACME", 120))
        print("late call from a zombie:", apply_charge(conn, key, token - 1, "ACME", 120))
        print("charges:", conn.execute("SELECT COUNT(*) FROM charges WHERE charged = 1").fetchone()[0])


if __name__ == "__main__":
    asyncio.run(main())
