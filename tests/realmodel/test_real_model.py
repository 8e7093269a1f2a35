"""Both providers against a real model server nobody here wrote (see ``conftest.py``).

- A streamed answer with each provider: the pieces join to the final text, usage is
  positive, the stop reason is one the wire format can give.
- An agent whose tool the model calls, with each provider: the tool runs with the model's
  arguments and the model answers after its result.
- A durable run SIGKILLed inside its tool and resumed by a fresh process: the tool call the
  model made is committed, so the model is asked only for the answer after the tool.

The tool is called because the question asks the model to repeat a call (``weather.py``
says why), greedily, so each run is the same every time and no test depends on luck. Before
each run the server's prompt cache is reset (``LlamaServer.reset_prompt_cache``) so that
what ran before does not change how the prompt is evaluated.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import anthropic, openai
from weather import QUESTION, TOOL_RESULT, weather_agent

from harnessx import Agent, LLMProvider, RunStatus, StopReason
from harnessx.testing import LlamaServer

pytestmark = [pytest.mark.realmodel, pytest.mark.timeout(1800)]

HERE = Path(__file__).resolve().parent


async def streamed(agent: Agent, message: str) -> tuple[str, Any]:
    pieces: list[str] = []
    stream = agent.run_stream(message)
    async for event in stream:
        if event.type.value == "text_delta":
            pieces.append(str(event.data["text"] if isinstance(event.data, dict) else event.data))
    return "".join(pieces), await stream.result()


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
async def test_a_streamed_answer(llama_server: LlamaServer, wire: str) -> None:
    provider = openai(llama_server) if wire == "openai" else anthropic(llama_server)
    chunks = []
    try:
        async for chunk in provider.stream(
            model="smollm2",
            messages=[{"role": "user", "content": "Say hello in five words."}],
            system="Be brief.",
            tools=[],
            max_tokens=40,
        ):
            chunks.append(chunk)
    finally:
        await provider.aclose()
    final = chunks[-1]
    assert final.kind == "response"
    pieces = [c.data for c in chunks if c.kind == "text_delta"]
    assert len(pieces) > 1  # streamed, not one block
    assert "".join(pieces) == final.data.text and final.data.text.strip()
    assert final.data.stop_reason in (StopReason.END_TURN, StopReason.MAX_TOKENS)
    usage = final.data.usage
    assert usage is not None and usage.input_tokens > 0 and usage.output_tokens > 0
    assert isinstance(final.data.raw, dict)


async def run_the_weather_agent(
    server: LlamaServer, provider: LLMProvider
) -> tuple[list[dict[str, Any]], str, Any, int]:
    """One run of the weather agent: its tool calls, streamed text, result and the number of
    model calls the server served for it."""
    await server.reset_prompt_cache()
    agent, calls = weather_agent(provider)
    before = server.completions()
    try:
        async with agent:
            text, result = await streamed(agent, QUESTION)
    finally:
        await provider.aclose()
    return calls, text, result, server.completions() - before


def check_tool_run(calls: list[dict[str, Any]], text: str, result: Any, asked: int) -> None:
    assert calls == [{"city": "Oslo"}], f"the model did not call get_weather(city='Oslo'): {result}"
    assert result.status is RunStatus.COMPLETED, result
    assert asked == 2  # the tool call, then the answer after its result
    assert result.output and text.endswith(result.output)  # the answer streamed last
    assert TOOL_RESULT in result.output  # this model answers by repeating the tool's result
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0


async def test_an_agent_whose_tool_the_model_calls(llama_server: LlamaServer) -> None:
    check_tool_run(*await run_the_weather_agent(llama_server, openai(llama_server)))


async def test_an_anthropic_agent_whose_tool_the_model_calls(llama_server: LlamaServer) -> None:
    # API version 2023-06-01 takes a temperature (greedy here); 2026-10-21 refuses it.
    provider = anthropic(llama_server, anthropic_version="2023-06-01")
    check_tool_run(*await run_the_weather_agent(llama_server, provider))


# --------------------------------------------------------------------------- durable


def _child(spec: dict[str, Any]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, str(HERE / "weather.py"), json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _in_tool(marker: Path, process: subprocess.Popen[str], timeout: float) -> bool:
    """True once the child is inside its tool; False if its run ended without calling it."""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if process.poll() is not None:
            out, err = process.communicate()
            assert process.returncode == 0, f"the run failed ({process.returncode}):\n{out}\n{err}"
            return False
        assert time.monotonic() < deadline, f"the run took more than {timeout} s"
        time.sleep(0.05)
    return True


def _calls(log: Path, pid: int) -> list[dict[str, Any]]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [call for call in map(json.loads, lines) if call["pid"] == pid]


async def test_a_durable_run_killed_in_its_tool_resumes_without_asking_again(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    spec: dict[str, Any] = {
        "db": str(tmp_path / "runs.sqlite3"),
        "base_url": llama_server.url,
        "ledger": str(tmp_path / "ledger"),
        "session_file": str(tmp_path / "session.json"),
        "calls_log": str(tmp_path / "calls"),
        "block_marker": str(tmp_path / "in-tool"),
    }
    marker = tmp_path / "in-tool"
    await llama_server.reset_prompt_cache()
    before = llama_server.completions()
    first = _child({**spec, "action": "run"})
    assert _in_tool(marker, first, timeout=900), "the run ended without calling its tool"
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=30)
    assert first.returncode == -signal.SIGKILL
    calls_log = Path(spec["calls_log"])
    assert [c["messages"] for c in _calls(calls_log, first.pid)] == [1]  # the question only
    assert llama_server.completions() - before == 1  # that one turn, committed before the tool ran

    session_id = json.loads(Path(spec["session_file"]).read_text())["session_id"]
    second = _child({**spec, "action": "resume", "session_id": session_id})
    out, err = second.communicate(timeout=900)
    assert second.returncode == 0, err
    result = json.loads(out.splitlines()[-1])
    assert result["status"] == "completed", result

    assert TOOL_RESULT in result["output"]  # answered from the tool's result

    # The fresh process never asked for the committed turn again: its one call carries the
    # question, the committed tool call and the tool's result. The server saw exactly the
    # calls the two processes made.
    assert [c["messages"] for c in _calls(calls_log, second.pid)] == [3]
    assert llama_server.completions() - before == 2
    ledger = [json.loads(line) for line in Path(spec["ledger"]).read_text().splitlines()]
    assert ledger == [{"city": "Oslo"}] * 2  # a safe tool: run again, with the committed input
