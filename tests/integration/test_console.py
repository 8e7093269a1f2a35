"""The operator console over a real server on loopback, on both backends: sign-in, roles,
CSRF, the JSON API, decisions through it, and the live event stream."""

from __future__ import annotations

import asyncio
import html
import json
import re
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from console_support import OPERATOR, TOKENS, VIEWER, serve_console, sign_in
from durable_support import BackendTarget

from harness_workers import Worker, WorkerConfig
from harnessx import (
    Agent,
    AgentRef,
    AgentRegistry,
    AgentRuntime,
    ProviderResponse,
    ScriptedProvider,
    StreamChunk,
    ToolCall,
    ToolCallDelta,
)
from harnessx._errors import ConfigurationError
from harnessx._operator import Operator
from harnessx.console import Tokens, create_app


def registry(release: threading.Event) -> AgentRegistry:
    def script(turns: int) -> Any:
        def reply(request: Any) -> ProviderResponse | str:
            if request.turn < turns:
                call = ToolCall(f"c{request.turn}", "step", {"n": request.turn})
                return ProviderResponse(text=f"step {request.turn}", tool_calls=[call])
            return "all done"

        return reply

    def build(permission: str | None, turns: int) -> Agent:
        agent = Agent(provider=ScriptedProvider(script(turns)))

        @agent.tools.register(permission=permission, replay_policy="safe")
        def step(n: int) -> str:
            """One step.

            Args:
                n: Step number.
            """
            release.wait(30)
            return f"step {n} done"

        return agent

    found = AgentRegistry()
    found.register("asks", lambda: build("ask", 1))
    found.register("plain", lambda: build(None, 3))
    return found


async def submit(store: Any, name: str) -> tuple[str, str]:
    runtime = AgentRuntime(AgentRef(name, "v1"), backend=store, execution="pool")
    handle = await runtime.submit("go")
    await runtime.stop()
    return handle.session_id, handle.run_id


async def until(check: Any, what: str, within: float = 30) -> Any:
    for _ in range(int(within / 0.02)):
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
async def pool(target: BackendTarget) -> Any:
    release = threading.Event()
    async with target.open() as worker_store, target.open() as store:
        config = WorkerConfig(concurrency=4, stats_interval=0.05)
        worker = Worker(worker_store, registry(release), config)
        task = asyncio.create_task(worker.run())
        await worker.registered.wait()
        try:
            yield store, release
        finally:
            release.set()
            worker.drain()
            await task


async def status(store: Any, run_id: str) -> str:
    record = await store.get_run(run_id)
    return record.status.value if record else ""


async def test_nothing_is_served_without_signing_in(target: BackendTarget) -> None:
    async with (
        target.open() as store,
        serve_console(store) as served,
        httpx.AsyncClient(base_url=served.url) as client,
    ):
        page = await client.get("/runs?status=failed")
        assert page.status_code == 303 and page.headers["location"] == "/login?next=%2Fruns%3Fstatus%3Dfailed"
        assert (await client.get("/api/runs")).status_code == 401
        # The probes answer anyone, and say nothing but whether the console and its store answer.
        assert (await client.get("/healthz")).text == "ok\n"
        assert (await client.get("/readyz")).text == "ok\n"
        bad = await client.get("/api/runs", headers={"Authorization": f"Bearer {OPERATOR}x"})
        assert bad.status_code == 401 and OPERATOR not in bad.text
        forged = await client.get("/runs", headers={"Cookie": "harnessx_console=forged.value"})
        assert forged.status_code == 303
        refused = await client.post("/login", data={"nonce": "made-up", "token": OPERATOR})
        assert refused.status_code == 403 and "expired" in refused.text
    with pytest.raises(ConfigurationError, match="serves nothing without auth"):
        create_app(store, tokens=None)
    with pytest.raises(ConfigurationError, match="at least 24 characters"):
        Tokens("alice:operator:short")
    with pytest.raises(ConfigurationError, match="NAME:ROLE:TOKEN"):
        Tokens("alice:admin:" + "x" * 30)


async def test_sign_in_csrf_and_sign_out_end_the_session(pool: Any) -> None:
    store, release = pool
    release.set()
    _, run_id = await submit(store, "asks")
    await until(lambda: _is(store, run_id, "awaiting_input"), "a run waiting for approval")
    [entry] = [e for e in await store.tool_calls(run_id) if e.pending()]
    async with serve_console(store) as served, httpx.AsyncClient(base_url=served.url) as client:
        csrf = await sign_in(client, OPERATOR)
        session_cookie = client.cookies["harnessx_console"]
        assert OPERATOR not in session_cookie
        page = await client.get(f"/runs/{run_id}")
        assert "Approve" in page.text and entry.execution_key in page.text
        assert OPERATOR not in page.text and VIEWER not in page.text
        form = {"execution_key": entry.execution_key, "decision": "approve"}
        no_csrf = await client.post(f"/runs/{run_id}/decide", data=form)
        assert no_csrf.status_code == 403 and "CSRF" in no_csrf.text
        wrong = await client.post(f"/runs/{run_id}/decide", data={**form, "csrf": csrf[:-2] + "xx"})
        assert wrong.status_code == 403
        assert await status(store, run_id) == "awaiting_input" and await store.run_actions(run_id) == []
        done = await client.post(f"/runs/{run_id}/decide", data={**form, "csrf": csrf})
        assert done.status_code == 303 and done.headers["location"] == f"/runs/{run_id}"
        shown = await client.get(f"/runs/{run_id}")
        assert "approved; the run is queued for any worker" in shown.text
        await until(lambda: _is(store, run_id, "completed"), "the approved run to complete")
        [action] = await store.run_actions(run_id)
        assert (action.actor, action.via, action.action, action.outcome) == (
            "alice",
            "console",
            "approve",
            "ok",
        )
        assert (await client.post("/logout", data={})).status_code == 403  # CSRF on sign-out too
        out = await client.post("/logout", data={"csrf": csrf})
        assert out.status_code == 303 and out.headers["location"] == "/login"
        # The old cookie, replayed, no longer signs anyone in.
        async with httpx.AsyncClient(base_url=served.url) as other:
            replayed = await other.get("/runs", headers={"Cookie": f"harnessx_console={session_cookie}"})
        assert replayed.status_code == 303 and replayed.headers["location"].startswith("/login")


async def _is(store: Any, run_id: str, wanted: str) -> bool:
    return await status(store, run_id) == wanted


async def test_a_viewer_reads_but_cannot_decide(pool: Any) -> None:
    store, release = pool
    release.set()
    session_id, run_id = await submit(store, "asks")
    await until(lambda: _is(store, run_id, "awaiting_input"), "a run waiting for approval")
    [entry] = [e for e in await store.tool_calls(run_id) if e.pending()]
    viewer = {"Authorization": f"Bearer {VIEWER}"}
    async with (
        serve_console(store) as served,
        httpx.AsyncClient(base_url=served.url, headers=viewer) as client,
    ):
        assert (await client.get("/api/whoami")).json() == {"name": "vic", "role": "viewer", "via": "api"}
        runs = (await client.get("/api/runs", params={"status": "awaiting_input"})).json()
        assert [r["run_id"] for r in runs["runs"]] == [run_id]
        page = await client.get(f"/runs/{run_id}")
        assert "Only an operator may decide." in page.text and "Approve</button>" not in page.text
        body = {"execution_key": entry.execution_key}
        refused = await client.post(f"/api/runs/{run_id}/approve", json=body)
        assert refused.status_code == 403 and "viewer" in refused.json()["error"]
        assert (await client.post(f"/api/sessions/{session_id}/cancel")).status_code == 403
        assert await status(store, run_id) == "awaiting_input"
        operator = {"Authorization": f"Bearer {OPERATOR}"}
        done = await client.post(
            f"/api/runs/{run_id}/approve", json={**body, "allow": False}, headers=operator
        )
        assert done.status_code == 200, done.text
        assert done.json()["requeued"] is True and done.json()["action"]["via"] == "api"
        again = await client.post(f"/api/runs/{run_id}/approve", json=body, headers=operator)
        assert again.status_code == 409 and "no tool call awaiting approval" in again.json()["error"]


async def test_the_json_api_lists_pages_and_counts(pool: Any) -> None:
    store, release = pool
    release.set()
    made = [await submit(store, "asks") for _ in range(3)]
    for _, run_id in made:
        await until(lambda run_id=run_id: _is(store, run_id, "awaiting_input"), "waiting runs")
    headers = {"Authorization": f"Bearer {OPERATOR}"}
    async with (
        serve_console(store, counts_ttl=0.0) as served,
        httpx.AsyncClient(base_url=served.url, headers=headers) as client,
    ):
        first = (await client.get("/api/runs", params={"limit": 2})).json()
        second = (await client.get("/api/runs", params={"limit": 2, "before": first["next"]})).json()
        assert second["next"] is None
        assert [r["run_id"] for r in first["runs"] + second["runs"]] == [
            run_id for _, run_id in reversed(made)
        ]
        counts = await until(lambda: _counts(client, 3), "the counts to include the three runs")
        assert counts["awaiting_input"] == 3
        bad = await client.get("/api/runs", params={"status": "nope"})
        assert bad.status_code == 400 and "not a run status" in bad.json()["error"]
        assert (await client.get("/api/runs", params={"before": "garbage"})).status_code == 400
        assert (await client.get("/api/runs/nope")).status_code == 404
        detail = (await client.get(f"/api/runs/{made[0][1]}")).json()
        assert detail["tool_calls"][0]["status"] == "approval" and detail["agent_ref"] == "asks@v1"
        for path in ("/api/workers", "/api/queue", "/api/supervisor", "/api/actions"):
            answer = await client.get(path)
            assert answer.status_code == 200, path
        assert (await client.get("/api/workers")).json()["live"] == 1
        for path in ("/runs", f"/runs/{made[0][1]}", "/workers", "/queue", "/supervisor", "/audit"):
            page = await client.get(path)
            assert page.status_code == 200, path
            assert page.headers["content-security-policy"].startswith("default-src 'self'")
            assert OPERATOR not in page.text


async def test_the_runs_page_says_what_its_counts_count(target: BackendTarget) -> None:
    """The counts per status are of every run, whatever the other filters, and a few seconds
    old: the page says both, so that a filtered page is not read as counting what it lists."""
    async with (
        target.open() as store,
        serve_console(store, counts_ttl=2.5) as served,
        httpx.AsyncClient(base_url=served.url) as client,
    ):
        await sign_in(client, OPERATOR)
        for params, filtered in (({}, False), ({"status": "failed"}, False), ({"agent": "asks@v1"}, True)):
            page = await client.get("/runs", params={**params, "fragment": "1"})
            counted = re.search(r'<span class="as-of" id="counted">([^<]*)</span>', page.text)
            assert counted is not None, page.text
            assert counted.group(1).endswith("recounted every 2.5 s"), counted.group(1)
            assert counted.group(1).startswith("of all runs, not only those filtered;") is filtered


class _Drafting(ScriptedProvider):
    """Streams its tool call as the built-in providers do: the call's name, then its arguments."""

    async def stream(self, **kwargs: Any) -> AsyncIterator[StreamChunk]:
        async for chunk in super().stream(**kwargs):
            for call in chunk.data.tool_calls if chunk.kind == "response" else []:
                yield StreamChunk("tool_call_delta", ToolCallDelta(call.id, call.name))
                yield StreamChunk(
                    "tool_call_delta", ToolCallDelta(call.id, call.name, json.dumps(call.input))
                )
            yield chunk


async def test_a_run_page_shows_a_streamed_tool_call_once_whole(target: BackendTarget) -> None:
    """The pieces of a tool call as the model wrote it are left out of the timeline, as the
    pieces of its text are: the tool_call_start after them shows the call whole."""
    call = ToolCall("c0", "step", {"n": 7})
    agent = Agent(provider=_Drafting([ProviderResponse(text="one step", tool_calls=[call]), "all done"]))

    @agent.tools.register(replay_policy="safe")
    def step(n: int) -> str:
        """One step.

        Args:
            n: Step number.
        """
        return f"step {n} done"

    async with target.open() as store:
        async with AgentRuntime(agent, backend=store) as runtime:
            handle = await runtime.submit("go")
            assert (await handle.result()).ok
        kinds = [event.type.value for event in await store.read_events(handle.run_id, 0, 100)]
        assert kinds.count("tool_call_delta") == 2
        async with serve_console(store) as served, httpx.AsyncClient(base_url=served.url) as client:
            await sign_in(client, OPERATOR)
            page = await client.get(f"/runs/{handle.run_id}")
    shown = re.findall(r'class="event-([a-z_]+)"', page.text)
    assert "tool_call_start" in shown and "tool_result" in shown
    assert "tool_call_delta" not in shown and "text_delta" not in shown


async def _counts(client: httpx.AsyncClient, total: int) -> dict[str, int] | None:
    answer = (await client.get("/api/runs/counts")).json()
    return answer["counts"] if answer["total"] == total else None  # type: ignore[no-any-return]


async def read_stream(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], stop_after: int | None
) -> list[dict[str, Any]]:
    """Events of one SSE connection, as (id, data); closes after ``stop_after`` events."""
    got: list[dict[str, Any]] = []
    async with client.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        event: dict[str, Any] = {}
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                event["id"] = line[4:]
            elif line.startswith("data: "):
                event["data"] = json.loads(line[6:])
            elif line == "" and "data" in event:
                got.append(event)
                event = {}
                if stop_after is not None and len(got) >= stop_after:
                    break
    return got


async def test_events_resume_from_last_event_id_without_gaps_or_repeats(pool: Any) -> None:
    store, release = pool
    _, run_id = await submit(store, "plain")
    headers = {"Authorization": f"Bearer {OPERATOR}"}
    async with serve_console(store) as served, httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        url = f"/api/runs/{run_id}/events"
        first = await read_stream(client, url, headers, stop_after=2)  # then the client goes away
        release.set()  # the run goes on while nobody listens
        rest = await read_stream(client, url, {**headers, "Last-Event-ID": first[-1]["id"]}, stop_after=None)
        received = first + rest
        assert rest[-1]["data"]["type"] == "run_result" and rest[-1]["data"]["data"]["status"] == "completed"
        stored = await store.read_events(run_id, 0, 10_000)
        assert [e["id"] for e in received] == [e.cursor for e in stored]
        assert [e["data"]["event_id"] for e in received] == [e.event_id for e in stored]
        assert [e["data"]["type"] for e in received] == [e.type.value for e in stored]
        # A finished run with nothing behind the cursor: 204, which stops a browser's EventSource.
        done = await client.get(url, headers={**headers, "Last-Event-ID": received[-1]["id"]})
        assert done.status_code == 204
        by_query = await read_stream(client, f"{url}?after={received[-3]['id']}", headers, stop_after=None)
        assert [e["id"] for e in by_query] == [e["id"] for e in received[-2:]]
        assert (await client.get(f"{url}?after=abc", headers=headers)).status_code == 400


async def test_a_run_page_follows_events_that_commit_while_it_is_read(pool: Any, monkeypatch: Any) -> None:
    """The run's page reads its status, then its timeline. When the run ends between the two
    reads, the page shows the older status and its event stream must still bring the end
    (a stream started behind the run's last event would bring nothing, and the page would
    show the run running for ever). The run is finished exactly between the reads here."""
    store, release = pool
    _, run_id = await submit(store, "plain")
    await until(lambda: _has_events(store, run_id), "the run's first events")
    read_row = store.list_runs

    async def row_then_the_run_ends(where: Any, **kwargs: Any) -> Any:
        page = await read_row(where, **kwargs)
        if where.run_id == run_id and page.runs[0].status == "running":
            release.set()
            await until(lambda: _is(store, run_id, "completed"), "the run to end")
        return page

    monkeypatch.setattr(store, "list_runs", row_then_the_run_ends)
    async with serve_console(store) as served, httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        await sign_in(client, OPERATOR)
        page = await client.get(f"/runs/{run_id}")
        assert re.search(r'id="run-status">running<', page.text), page.text
        follow = re.search(r'data-events="([^"]+)"', page.text)
        assert follow is not None
        monkeypatch.undo()
        followed = await read_stream(client, html.unescape(follow.group(1)), {}, stop_after=None)
        assert followed[-1]["data"]["type"] == "run_result"
        assert followed[-1]["data"]["data"]["status"] == "completed"
        after = int(follow.group(1).rsplit("after=", 1)[1])
        assert all(int(c) <= after for c in re.findall(r'<li data-cursor="(\d+)"', page.text))
        stored = await store.read_events(run_id, 0, 10_000)
        assert [e["id"] for e in followed] == [e.cursor for e in stored[after:]]  # no gap, no repeat


async def _has_events(store: Any, run_id: str) -> bool:
    record = await store.get_run(run_id)
    return record is not None and record.status == "running" and record.event_count > 0


async def test_a_waiting_runs_stream_stays_open_for_its_next_execution(pool: Any) -> None:
    """Behind a waiting run's last event there is nothing yet: the stream waits (it does not
    end with a summary, which would make the page reload on every reconnect)."""
    store, release = pool
    release.set()
    session_id, run_id = await submit(store, "asks")
    await until(lambda: _is(store, run_id, "awaiting_input"), "the run to wait")

    async def let_go() -> bool:
        session = await store.get_session(session_id)
        return session is not None and session.lease_owner is None

    await until(let_go, "the worker to let the session go")  # the execution is over
    record = await store.get_run(run_id)
    headers = {"Authorization": f"Bearer {OPERATOR}", "Last-Event-ID": str(record.event_count)}
    async with serve_console(store) as served, httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        reading = asyncio.create_task(read_stream(client, f"/api/runs/{run_id}/events", headers, None))
        [entry] = [e for e in await store.tool_calls(run_id) if e.pending()]
        await Operator(store, "alice", "console").approve(entry.execution_key)
        received = await reading
    assert all(e["id"] for e in received)  # stored events only, no summary
    assert received[0]["id"] == str(record.event_count + 1)
    assert received[-1]["data"]["type"] == "run_result"
    assert received[-1]["data"]["data"]["status"] == "completed"


async def test_without_auth_only_localhost_is_answered(target: BackendTarget) -> None:
    async with (
        target.open() as store,
        serve_console(store, tokens=None, local_name="me (no auth)") as served,
        httpx.AsyncClient(base_url=served.url) as client,
    ):
        assert (await client.get("/api/whoami")).json() == {
            "name": "me (no auth)",
            "role": "operator",
            "via": "local",
        }
        rebound = await client.get("/api/whoami", headers={"Host": "evil.example:8080"})
        assert rebound.status_code == 403 and "localhost" in rebound.json()["error"]
        # A state change still needs the page's CSRF token (another site could post here).
        assert (await client.post("/sessions/s/cancel", data={})).status_code == 403


def test_tokens_file_is_read_again_when_it_changes(tmp_path: Any) -> None:
    import os
    import time

    path = tmp_path / "tokens"
    path.write_text(TOKENS)
    tokens = Tokens(file=path)
    assert tokens.find(VIEWER) is not None and "secret" not in repr(tokens)
    path.write_text(f"alice:operator:{OPERATOR}\n")
    os.utime(path, (time.time() + 5, time.time() + 5))
    tokens._checked = 0.0  # the file is looked at once a second at most
    assert tokens.find(VIEWER) is None and tokens.find(OPERATOR) is not None


async def test_mounted_in_another_application_everything_lives_under_its_path(target: BackendTarget) -> None:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Mount, Route

    from harnessx._http_server import HttpServer, listen

    async def home(request: Any) -> PlainTextResponse:
        return PlainTextResponse("the host application")

    def nonce_of(html: str) -> str:
        return html.split('name="nonce" value="', 1)[1].split('"', 1)[0]

    async with target.open() as store:
        console = create_app(store, tokens=Tokens(TOKENS))
        host = Starlette(routes=[Route("/", home), Mount("/ops", app=console)])
        server = HttpServer(host, listen("127.0.0.1", 0))
        await server.start()
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as client:
                assert (await client.get("/")).text == "the host application"
                first = await client.get("/ops/runs")
                assert (
                    first.status_code == 303 and first.headers["location"] == "/ops/login?next=%2Fops%2Fruns"
                )
                form = await client.get("/ops/login")
                assert 'action="/ops/login"' in form.text and 'href="/ops/static/console.css"' in form.text
                sign = {"nonce": nonce_of(form.text), "token": OPERATOR, "next": "/ops/runs"}
                done = await client.post("/ops/login", data=sign)
                assert done.status_code == 303 and done.headers["location"] == "/ops/runs"
                assert "Path=/ops" in done.headers["set-cookie"]
                page = await client.get("/ops/runs")
                assert page.status_code == 200 and 'href="/ops/workers"' in page.text
                assert (await client.get("/ops/static/console.js")).status_code == 200
                # After signing in, only a path of the console is followed (no open redirect).
                again = await client.get("/ops/login")
                away = {"nonce": nonce_of(again.text), "token": OPERATOR, "next": "https://evil.example/"}
                assert (await client.post("/ops/login", data=away)).headers["location"] == "/ops/runs"
        finally:
            await server.stop()
