"""The operator console in a real headless Chromium, over a real pool on PostgreSQL (a
harness-worker and a harness-supervisor process; the console a `harnessx console` process).

An operator signs in; a run that starts waiting for approval appears on the runs page
without a reload; approving it, the run completes before their eyes; three calls left
uncertain by a worker killed mid-call are settled with each of the three choices; a request
without the page's CSRF token is refused; a viewer cannot decide; signing out ends the
session. The screenshots in docs/console.md are taken here (HARNESSX_UPDATE_SCREENSHOTS=1
writes them to docs/images/).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from browser_support import chromium, find_browser
from console_support import OPERATOR, TOKENS, VIEWER
from durable_support import BackendTarget
from pool_support import Pool, ledger

from harnessx import AgentRef, AgentRuntime

pytestmark = pytest.mark.process
BIN = Path(sys.executable).parent
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait(condition: Callable[[], Any], what: str, within: float = 60) -> Any:
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Console:
    def __init__(self, target: BackendTarget, folder: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (folder / "tokens").write_text(TOKENS)
        self.log = folder / "console.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESSX_")}
        env |= {"HARNESSX_DSN": target.location, "HARNESSX_LOG_FORMAT": "json"}
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [
                    str(BIN / "harnessx"),
                    "console",
                    "--tokens-file",
                    str(folder / "tokens"),
                    "--bind",
                    f"127.0.0.1:{self.port}",
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait(
            lambda: "serving the operator console" in self.log.read_text() or self.process.poll() is not None,
            "the console",
        )
        assert self.process.poll() is None, self.log.read_text()

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)


@pytest.fixture
def setup(pg_database: str, tmp_path: Path) -> Iterator[tuple[Pool, Console]]:
    find_browser()
    pool = Pool(BackendTarget("postgres", pg_database), tmp_path)
    pool.migrate()
    console = None
    try:
        console = Console(pool.target, tmp_path)
        yield pool, console
    finally:
        if console is not None and console.process.poll() is None:
            console.stop()
        pool.stop_all()
    if console is not None:
        assert OPERATOR not in console.log.read_text() and VIEWER not in console.log.read_text()


def submit(pool: Pool, agent: str, message: str) -> tuple[str, str]:
    async def go() -> tuple[str, str]:
        async with pool.target.open(auto_migrate=False) as store:
            runtime = AgentRuntime(AgentRef(agent, "v1"), backend=store, execution="pool")
            handle = await runtime.submit(message)
            await runtime.stop()
        return handle.session_id, handle.run_id

    return asyncio.run(go())


def run_status(pool: Pool, run_id: str) -> str:
    async def go() -> str:
        async with pool.target.open(auto_migrate=False) as store:
            record = await store.get_run(run_id)
        return record.status if record else ""

    return asyncio.run(go())


def replaced(exc: Exception) -> bool:
    """Whether an element went away while it was used: Selenium's stale-element error, or
    Chromium's own words for a node detached between being found and being used."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    if isinstance(exc, StaleElementReferenceException):
        return True
    return isinstance(exc, WebDriverException) and "does not belong to the document" in str(exc.msg)


class Browser:
    def __init__(self, driver: Any, console: Console, shots: Path) -> None:
        self.driver = driver
        self.console = console
        self.shots = shots

    def go(self, path: str) -> None:
        self.driver.get(self.console.url + path)

    def css(self, selector: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def text(self, selector: str) -> str:
        """The element's rendered text, or "". Found and read in one step inside the page, so
        the live refresh cannot replace the element in between."""
        found = self.driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", selector
        )
        return str(found).strip()

    def click(self, selector: str) -> None:
        def clicked() -> bool:
            try:
                found = self.css(selector)
                if found:
                    found[0].click()
                return bool(found)
            except Exception as exc:
                if replaced(exc):
                    return False  # by the live refresh, between finding and clicking: again
                raise

        wait(clicked, f"{selector} on {self.driver.current_url}")

    def sign_in(self, token: str) -> None:
        self.go("/login")
        self.css("#token")[0].send_keys(token)
        self.click("#sign-in")
        wait(lambda: self.driver.current_url.endswith("/runs"), "the runs page after signing in")

    def shot(self, name: str) -> None:
        self.driver.save_screenshot(str(self.shots / f"console-{name}.png"))

    def post_from_page(self, path: str, body: str) -> int:
        """A form post made by a script on the console's own page (same origin, with the cookie)."""
        status: int = self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch(arguments[0], {method: 'POST', body: arguments[1], credentials: 'same-origin',"
            " headers: {'Content-Type': 'application/x-www-form-urlencoded'}, redirect: 'manual'})"
            ".then(r => done(r.status)).catch(() => done(-1));",
            path,
            body,
        )
        return status


def test_an_operator_decides_in_the_browser(setup: tuple[Pool, Console], tmp_path: Path) -> None:
    pool, console = setup
    shots = tmp_path / "shots"
    shots.mkdir()
    # Three manual calls cut off by a worker's death: the supervisor requeues their runs and
    # the next worker finds each call uncertain.
    pool.hold_tools()  # the calls stay in flight until the worker is dead
    first = pool.worker("w1")
    pool.supervisor("s1")
    asyncio.run(pool.wait_for_workers(1))
    uncertain = [submit(pool, "manual", f"reconcile {n}") for n in range(3)]
    wait(lambda: len(ledger(pool.ledger_path)) == 3, "three manual calls in flight")
    first.signal(signal.SIGKILL)
    first.wait()
    pool.release_tools()
    pool.worker("w2")
    for _, run_id in uncertain:
        wait(lambda run_id=run_id: run_status(pool, run_id) == "awaiting_input", "an uncertain call")

    with chromium() as driver:
        browser = Browser(driver, console, shots)
        browser.go("/runs")
        assert driver.current_url.startswith(f"{console.url}/login")
        browser.shot("login")
        browser.sign_in(OPERATOR)
        assert browser.text("#who") == "alice"
        wait(lambda: browser.text("[data-status=awaiting_input] .count") == "3", "three runs waiting")

        # A run that starts waiting for approval shows up on the open page by itself.
        _, run_id = submit(pool, "asks", "needs a yes")
        wait(lambda: browser.css(f"tr[data-run='{run_id}']"), "the new run on the runs page", within=30)
        wait(lambda: "awaiting input" in browser.text(f"tr[data-run='{run_id}']"), "it to wait for approval")
        browser.shot("runs")
        browser.click(f"tr[data-run='{run_id}'] a")
        wait(lambda: browser.css("button.approve"), "the approve button")
        browser.shot("run-approval")
        browser.click("button.approve")
        wait(
            lambda: "approved; the run is queued for any worker" in browser.text("#flash"),
            "the flash message",
        )
        # Completed live, no reload: the page follows the run's events.
        wait(lambda: browser.text("#run-status") == "completed", "the run to complete on the page", within=60)
        wait(lambda: browser.css("#timeline li.event-run_result"), "run_result in the timeline")
        assert "alice" in browser.text("#actions") and "approve" in browser.text("#actions")
        browser.shot("run-completed")

        # The three choices for an uncertain call.
        outcomes = {}
        for (_, uncertain_run), choice in zip(uncertain, ("record", "retry", "abort"), strict=True):
            browser.go(f"/runs/{uncertain_run}")
            wait(lambda: browser.css("form.resolve"), "the reconciliation form")
            if choice == "record":
                browser.shot("run-uncertain")
                browser.css("form.resolve textarea")[0].send_keys("written by hand, checked in the ledger")
            browser.click(f"button.{choice}")
            wanted = "cancelled" if choice == "abort" else "completed"
            wait(
                lambda wanted=wanted: browser.text("#run-status") == wanted,
                f"{choice}: the run to be {wanted}",
            )
            outcomes[choice] = browser.text("dl.facts")
        assert "written by hand, checked in the ledger" in outcomes["record"]
        calls = ledger(pool.ledger_path)
        keys = {run: [c for c in calls if c["key"].startswith(run)] for _, run in uncertain}
        assert len(keys[uncertain[0][1]]) == 1  # recorded: never invoked again
        assert len(keys[uncertain[1][1]]) == 2  # invoked again, once
        assert len(keys[uncertain[2][1]]) == 1  # aborted
        # Ended cancelled (waited for above) with no stop reason, as harnessx 0.9.1 leaves it.
        assert "Stop reason" not in outcomes["abort"]

        # A state change without the page's CSRF token is refused, even with the cookie.
        other_session, other_run = submit(pool, "asks", "a second one")
        wait(lambda: run_status(pool, other_run) == "awaiting_input", "another waiting run")
        browser.go(f"/runs/{other_run}")
        assert browser.post_from_page(f"/sessions/{other_session}/cancel", "") == 403
        assert run_status(pool, other_run) == "awaiting_input"

        browser.go("/workers")
        workers = browser.text("#workers")
        assert "live" in workers and ("stopped" in workers or "dead" in workers), workers
        browser.shot("workers")
        browser.go("/supervisor")
        assert browser.text("#leaders").splitlines()[1].split()[0] == "supervisor"
        browser.shot("supervisor")
        for page in ("queue", "audit"):
            browser.go(f"/{page}")
            browser.shot(page)
        assert "resolve_abort" in browser.text("#audit")

        # Signing out ends the session: the cookie it had signs nobody in any more.
        cookie = driver.get_cookie("harnessx_console")["value"]
        browser.click("#logout")
        wait(lambda: driver.current_url.startswith(f"{console.url}/login"), "the sign-in page")
        replayed = httpx.get(f"{console.url}/runs", headers={"Cookie": f"harnessx_console={cookie}"})
        assert replayed.status_code == 303 and replayed.headers["location"].startswith("/login")
        browser.go("/runs")
        assert driver.current_url.startswith(f"{console.url}/login")

        # A viewer sees everything and can decide nothing.
        browser.sign_in(VIEWER)
        browser.go(f"/runs/{other_run}")
        wait(lambda: browser.css("#decisions"), "the pending decision")
        assert not browser.css("button.approve") and "Only an operator may decide." in browser.text(
            "#decisions"
        )
        csrf = browser.css("meta[name=csrf-token]")[0].get_attribute("content")
        [entry] = [e for e in json.loads(browser.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch(arguments[0]).then(r => r.text()).then(done);", f"/api/runs/{other_run}"
        ))["tool_calls"]]  # fmt: skip
        form = f"csrf={csrf}&decision=approve&execution_key={entry['execution_key']}"
        assert browser.post_from_page(f"/runs/{other_run}/decide", form) == 403
        assert run_status(pool, other_run) == "awaiting_input"

    if os.environ.get("HARNESSX_UPDATE_SCREENSHOTS") == "1":
        DOCS_IMAGES.mkdir(exist_ok=True)
        for shot in shots.iterdir():
            shutil.copy(shot, DOCS_IMAGES / shot.name)
