"""The store conformance kit (``harnessx.testing.STORE_CHECKS``) against real SQLite files and
a real PostgreSQL server: the checks any store must pass, run on both of ours."""

from __future__ import annotations

import pytest
from durable_support import BackendTarget

from harnessx.testing import STORE_CHECKS, StoreCheck


@pytest.mark.parametrize("check", STORE_CHECKS, ids=lambda check: check.name)
async def test_store_conforms(check: StoreCheck, target: BackendTarget) -> None:
    await check.run(target.open)
