"""A whole durable run on PostgreSQL, this harnessx beside the original harnessx 0.9.1.

    python bench/versus_original.py --original-python /path/to/venv-with-0.9.1/bin/python
    python bench/versus_original.py --original-python ... --dsn postgresql://...

The workload is the seed's pattern for a request: a new agent with one tool, a new
``AgentRuntime`` on a ``PostgresBackend`` (``async with``), ``await runtime.run(prompt)``;
the model is a scripted provider written against the API both packages share (a tool call,
then an answer that quotes the tool's result), so the time is the harness's and the store's.
Each package gets a database of its own on the same server (a throwaway cluster with its
durable defaults, fsync on, unless ``--dsn`` names one).

The machine may be shared, so the two take turns: each round runs a batch of ``--runs``
runs under one interpreter and then under the other (which goes first alternates), each in
a process that has warmed up first. Reported: the median run time of each side per round,
their ratio (this harnessx / 0.9.1) per round, and the median of those ratios, which is the
figure to quote; a round's ratio compares runs made within seconds of each other.

The original is only ever run from its own interpreter, never imported here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CHILD = "--child"


# ------------------------------------------------------------------ the child (both packages)


async def _child(dsn: str, warmup: int, runs: int) -> None:
    """Run under either package's interpreter: time ``runs`` fresh durable runs."""
    from harnessx import Agent, AgentRuntime, PostgresBackend, ProviderResponse, ToolCall
    from harnessx.providers import LLMProvider

    class Scripted(LLMProvider):
        async def create(self, **kwargs: Any) -> ProviderResponse:
            last = kwargs["messages"][-1]["content"]
            blocks = last if isinstance(last, list) else []
            results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
            if results:
                return ProviderResponse(text="Total: " + str(results[0]["content"]))
            return ProviderResponse(
                text="Looking it up.",
                tool_calls=[ToolCall("c1", "lookup", {"region": "EMEA"})],
                stop_reason="tool_use",
            )

        async def count_tokens(self, **kwargs: Any) -> int:
            return 0

    def agent() -> Agent:
        built = Agent(provider=Scripted())

        @built.tools.register(replay_policy="safe")
        def lookup(region: str) -> str:
            """Sales of a region."""
            return f"{region}: 42"

        return built

    backend = await PostgresBackend.connect(dsn)
    try:
        times = []
        for number in range(warmup + runs):
            started = time.perf_counter()
            async with AgentRuntime(agent(), backend=backend) as runtime:
                result = await runtime.run("sales in EMEA?")
            elapsed = time.perf_counter() - started
            if result.output != "Total: EMEA: 42":
                raise SystemExit(f"unexpected result: {result!r}")
            if number >= warmup:
                times.append(elapsed)
    finally:
        await backend.aclose()
    print(json.dumps(times))


# ------------------------------------------------------------------ the parent (this harnessx)


def _batch(python: str, dsn: str, warmup: int, runs: int) -> list[float]:
    done = subprocess.run(
        [python, str(Path(__file__).resolve()), CHILD, dsn, str(warmup), str(runs)],
        capture_output=True,
        text=True,
        cwd="/",  # neither package's source tree on the path: each imports its own install
        check=False,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"{python} failed:\n{done.stderr[-2000:]}")
    return [float(t) for t in json.loads(done.stdout.strip().splitlines()[-1])]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def _compare(ours_python: str, original_python: str, server_dsn: str, args: argparse.Namespace) -> None:
    from harnessx.testing import dsn_with_database, quote_ident, run_psql

    databases = {}
    for side in ("ours", "original"):
        name = f"bench_versus_{side}"
        run_psql(server_dsn, f"DROP DATABASE IF EXISTS {quote_ident(name)} WITH (FORCE)")
        run_psql(server_dsn, f"CREATE DATABASE {quote_ident(name)} TEMPLATE template0")
        databases[side] = dsn_with_database(server_dsn, name)
    pythons = {"ours": ours_python, "original": original_python}
    print(f"fresh durable run on PostgreSQL, {args.runs} runs per batch, {args.rounds} rounds (ms, median)")
    print("round  first     this harnessx  0.9.1     ratio")
    ratios, medians = [], {"ours": [], "original": []}
    try:
        for number in range(args.rounds):
            order = ("ours", "original") if number % 2 == 0 else ("original", "ours")
            round_medians = {}
            for side in order:
                times = _batch(pythons[side], databases[side], args.warmup, args.runs)
                round_medians[side] = statistics.median(times)
                medians[side].append(round_medians[side])
            ratio = round_medians["ours"] / round_medians["original"]
            ratios.append(ratio)
            print(
                f"{number + 1:>5}  {order[0]:<8}  {_ms(round_medians['ours']):>13}  "
                f"{_ms(round_medians['original']):>8}  {ratio:5.2f}"
            )
    finally:
        for dsn in databases.values():
            name = dsn.rsplit("/", 1)[-1]
            run_psql(server_dsn, f"DROP DATABASE IF EXISTS {quote_ident(name)} WITH (FORCE)")
    print(
        f"median of rounds: this harnessx {_ms(statistics.median(medians['ours']))} ms, "
        f"0.9.1 {_ms(statistics.median(medians['original']))} ms; "
        f"ratio {statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})"
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == CHILD:
        asyncio.run(_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--original-python", required=True, help="interpreter with harnessx 0.9.1 installed")
    parser.add_argument("--dsn", help="PostgreSQL server DSN (default: a throwaway cluster)")
    parser.add_argument("--rounds", type=int, default=6, help="batches per side, taking turns")
    parser.add_argument("--runs", type=int, default=40, help="timed runs per batch")
    parser.add_argument("--warmup", type=int, default=10, help="untimed runs first in each batch")
    args = parser.parse_args()
    if args.dsn:
        _compare(sys.executable, args.original_python, args.dsn, args)
        return
    from harnessx.testing import ThrowawayCluster

    with ThrowawayCluster(durable=True) as cluster:
        _compare(sys.executable, args.original_python, cluster.dsn, args)


if __name__ == "__main__":
    main()
