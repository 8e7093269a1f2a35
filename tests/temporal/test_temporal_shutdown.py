"""Closing a connected ``TemporalBackend`` shuts its Temporal runtime down.

The Rust core's threads complete each call's asyncio future holding the GIL, letting go of
it halfway; a program that returned from ``asyncio.run`` while one was there aborted in
interpreter finalization ("PyGILState_Release: ... finalizing", temporalio/sdk-python#300).
``aclose()`` joins those threads while the event loop runs, which the test sees in the
process's thread list (Linux's ``/proc``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from temporal_support import TemporalSetup
from temporalio.runtime import Runtime, TelemetryConfig

from harnessx import ConfigurationError

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the thread list in /proc"),
]


def _core_threads() -> set[str]:
    """The ids of this process's Tokio worker threads (the Rust core's)."""
    found = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except FileNotFoundError:
            continue  # ended meanwhile
        if name.startswith("tokio"):
            found.add(tid)
    return found


async def test_closing_a_connected_backend_joins_its_core_threads(setup: TemporalSetup) -> None:
    before = _core_threads()
    backend = await setup.backend()
    async with backend:
        assert await backend.client.service_client.check_health()
        own = _core_threads() - before
        assert own, "the backend's client runs on a runtime of its own"
    assert not own & _core_threads(), "aclose() left the runtime's threads running"
    with pytest.raises(ConfigurationError, match="closed"):
        backend.client  # noqa: B018 - the property is what is tested


async def test_a_runtime_passed_in_is_left_running(setup: TemporalSetup) -> None:
    before = _core_threads()
    runtime = Runtime(telemetry=TelemetryConfig())
    backend = await setup.backend(runtime=runtime)
    async with backend:
        assert await backend.client.service_client.check_health()
        theirs = _core_threads() - before
        assert theirs
    assert theirs <= _core_threads(), "the caller's runtime was shut down"
