"""``GET /api/runs/{run_id}/events``: a run's events as Server-Sent Events.

The stream starts behind a cursor (``?after=`` or, when a client reconnects, the
``Last-Event-ID`` header), gives each event as ``id: CURSOR`` and ``data: JSON``, and ends
with the ``run_result`` that ends the run's current execution. A client that reconnects with
the last id it saw repeats nothing and skips nothing. A run that is completed or cancelled
with nothing behind the cursor answers ``204 No Content``, which tells a browser's
``EventSource`` to stop reconnecting; a run waiting for a decision keeps the stream open for
its next execution. Streams end after ``stream_seconds`` (the client reconnects) and carry a
comment every 15 s so that proxies keep them open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from harnessx._http_server import RESPONSE_DEADLINE
from harnessx._observe import follow_events
from harnessx._results import CLOSED_STATUSES
from harnessx._runlog import parse_cursor
from harnessx.console._auth import Identity
from harnessx.console._web import SECURITY_HEADERS, WebError, state

__all__ = ["events"]

_KEEPALIVE = 15.0


async def events(request: Request, who: Identity) -> Response:
    console = state(request)
    run_id = request.path_params["run_id"]
    after = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    try:
        position = parse_cursor(after)
    except ValueError as exc:
        raise WebError(400, str(exc)) from None
    record = await console.store.get_run(run_id, messages=False)
    if record is None:
        raise WebError(404, f"no run {run_id!r}")
    if position >= record.event_count and record.status in CLOSED_STATUSES:
        return Response(status_code=204, headers=SECURITY_HEADERS)
    if console.streams >= console.max_streams:
        raise WebError(503, "too many event streams are open; try again shortly")
    # Under harnessx's own server, the stream may outlive the usual response deadline.
    extend = request.scope.get("extensions", {}).get(RESPONSE_DEADLINE)
    if extend is not None:
        extend(console.stream_seconds + 2 * _KEEPALIVE)
    headers = {**SECURITY_HEADERS, "X-Accel-Buffering": "no", "Cache-Control": "no-store"}
    return StreamingResponse(
        _stream(request, run_id, position), media_type="text/event-stream", headers=headers
    )


async def _stream(request: Request, run_id: str, position: int) -> AsyncIterator[str]:
    console = state(request)
    console.streams += 1
    # No summary of a waiting run behind the cursor: the page has it; the stream stays open
    # for the run's next execution instead (a summary would end it, and the reconnecting
    # browser would refresh the page every time).
    source = follow_events(
        console.store, run_id, str(position), poll_interval=console.poll_interval, summarize=False
    )
    pending: asyncio.Task[Any] | None = None
    loop = asyncio.get_running_loop()
    ends = loop.time() + console.stream_seconds
    try:
        yield "retry: 2000\n\n"
        while loop.time() < ends:
            if pending is None:
                pending = asyncio.ensure_future(anext(source))
            done, _ = await asyncio.wait({pending}, timeout=min(_KEEPALIVE, max(0.0, ends - loop.time())))
            if not done:
                yield ": keep-alive\n\n"
                continue
            try:
                event = pending.result()
            except StopAsyncIteration:
                return  # the execution ended with its run_result
            finally:
                pending = None
            data = json.dumps(console.redact(event.to_dict()), ensure_ascii=False, separators=(",", ":"))
            yield f"id: {event.cursor}\ndata: {data}\n\n"
    finally:
        console.streams -= 1
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        with contextlib.suppress(BaseException):
            await source.aclose()  # type: ignore[attr-defined]
