"""The console's JSON API (``/api/...``): everything the pages show and do. Authenticate with
``Authorization: Bearer TOKEN`` (or the browser's sign-in cookie plus ``X-CSRF-Token`` on
state changes). Errors are ``{"error": "..."}`` with 400, 401, 403, 404, 409 or 503."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from harnessx._operator import Done
from harnessx._run_detail import action_dict
from harnessx.console import _actions
from harnessx.console._auth import Identity
from harnessx.console._views import (
    actions_view,
    queue_view,
    run_view,
    runs_view,
    supervisor_view,
    workers_view,
)
from harnessx.console._web import WebError, json_body, json_response, state

__all__ = [
    "api_actions",
    "api_approve",
    "api_control",
    "api_counts",
    "api_queue",
    "api_resolve",
    "api_run",
    "api_runs",
    "api_supervisor",
    "api_whoami",
    "api_workers",
]


async def api_whoami(request: Request, who: Identity) -> Response:
    return json_response({"name": who.name, "role": who.role, "via": who.via})


async def api_runs(request: Request, who: Identity) -> Response:
    view = await runs_view(state(request), dict(request.query_params))
    return json_response({"runs": view["runs"], "next": view["next"]})


async def api_counts(request: Request, who: Identity) -> Response:
    view = await runs_view(state(request), {"limit": "1"})
    return json_response({"counts": view["counts"], "total": view["total"], "counted_at": view["counted_at"]})


async def api_run(request: Request, who: Identity) -> Response:
    _, shown = await run_view(state(request), request.path_params["run_id"])
    return json_response(shown)


def _done(done: Done) -> Response:
    return json_response(
        {"message": done.message, "requeued": done.requeued, "action": action_dict(done.action)}
    )


async def api_approve(request: Request, who: Identity) -> Response:
    body = await json_body(request)
    allow = body.get("allow", True)
    if not isinstance(allow, bool):
        raise WebError(400, "allow must be true or false")
    run_id = request.path_params["run_id"]
    return _done(await _actions.decide(state(request), who, run_id, body.get("execution_key"), allow))


async def api_resolve(request: Request, who: Identity) -> Response:
    body: dict[str, Any] = await json_body(request)
    choices = [name for name in ("result", "retry", "abort") if body.get(name) not in (None, False)]
    choice = choices[0] if len(choices) == 1 else ""
    done = await _actions.resolve(
        state(request),
        who,
        request.path_params["run_id"],
        body.get("execution_key"),
        choice,
        body.get("result"),
        bool(body.get("is_error", False)),
    )
    return _done(done)


async def api_control(request: Request, who: Identity) -> Response:
    params = request.path_params
    return _done(await _actions.control(state(request), who, params["session_id"], params["verb"]))


async def api_workers(request: Request, who: Identity) -> Response:
    return json_response(await workers_view(state(request)))


async def api_queue(request: Request, who: Identity) -> Response:
    return json_response(await queue_view(state(request)))


async def api_supervisor(request: Request, who: Identity) -> Response:
    return json_response(await supervisor_view(state(request)))


async def api_actions(request: Request, who: Identity) -> Response:
    return json_response(await actions_view(state(request)))
