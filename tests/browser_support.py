"""A real headless Chromium for the console's browser tests: the system's ``chromium`` and
``chromium-driver`` (Debian packages; ``.ci/run`` installs them), driven with Selenium.

Without them the tests are skipped with the reason, or fail when ``CI=true`` or
``HARNESSX_REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = ["chromium", "find_browser"]

CHROMIUM = os.environ.get("HARNESSX_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("HARNESSX_CHROMEDRIVER", "/usr/bin/chromedriver")


def find_browser() -> tuple[str, str]:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).exists()]
    if missing:
        reason = f"{' and '.join(missing)} missing: apt-get install chromium chromium-driver"
        if (
            os.environ.get("CI", "").lower() in ("true", "1")
            or os.environ.get("HARNESSX_REQUIRE_BROWSER") == "1"
        ):
            pytest.fail(f"a browser is required here: {reason}", pytrace=False)
        pytest.skip(reason)
    return CHROMIUM, CHROMEDRIVER


@contextmanager
def chromium() -> Iterator[Any]:
    """A fresh headless Chromium (its own profile, no network of its own: no sync, no updates)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = find_browser()
    profile = tempfile.mkdtemp(prefix="hx-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in (
        "--headless=new",
        "--no-sandbox",  # as root, Chromium refuses its sandbox
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(argument)
    browser = webdriver.Chrome(service=Service(driver), options=options)
    browser.set_page_load_timeout(30)
    try:
        yield browser
    finally:
        browser.quit()
        shutil.rmtree(profile, ignore_errors=True)
