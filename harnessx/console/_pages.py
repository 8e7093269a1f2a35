"""The console's pages: runs, a run, workers, queue, supervisor, audit; sign-in and sign-out."""

from __future__ import annotations

import hmac
import secrets
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from harnessx.console import _actions
from harnessx.console._auth import Identity, session_hash
from harnessx.console._state import ConsoleState
from harnessx.console._views import (
    FILTERS,
    STATUS_TABS,
    actions_view,
    queue_view,
    run_view,
    runs_view,
    supervisor_view,
    workers_view,
)
from harnessx.console._web import (
    COOKIE,
    LOGIN_CSRF,
    SECURITY_HEADERS,
    WebError,
    base,
    flash,
    form,
    page,
    secure,
    state,
)

__all__ = [
    "audit_page",
    "control_form",
    "decide_form",
    "login",
    "login_form",
    "logout",
    "queue_page",
    "resolve_form",
    "run_page",
    "runs_page",
    "supervisor_page",
    "workers_page",
]

_TIMELINE = 200  # events a run's page shows; older ones stay in the store (and the API)


async def runs_page(request: Request, who: Identity) -> Response:
    params = dict(request.query_params)
    view = await runs_view(state(request), params)
    kept = {name: value for name, value in view["filters"].items() if value and name != "status"}
    template = "_runs.html" if params.get("fragment") else "runs.html"
    return page(
        request,
        who,
        template,
        tabs=STATUS_TABS,
        filter_names=FILTERS,
        query=lambda **changes: urlencode({k: v for k, v in {**kept, **changes}.items() if v}),
        live=not params.get("before"),
        # The counts are of every run (a filtered count would scan what the indexes spare).
        filtered=bool(kept),
        counts_ttl=state(request).counts_ttl,
        **view,
    )


async def run_page(request: Request, who: Identity) -> Response:
    run_id = request.path_params["run_id"]
    detail, shown = await run_view(state(request), run_id)
    template = "_run.html" if request.query_params.get("fragment") else "run.html"
    timeline = await _timeline(state(request), run_id, detail.row.event_count)
    return page(
        request,
        who,
        template,
        run=shown,
        pending=[entry.to_dict() for entry in detail.pending],
        pooled=detail.pooled,
        timeline=timeline,
        last_cursor=timeline[-1]["cursor"] if timeline else "0",
    )


async def _timeline(console: ConsoleState, run_id: str, shown: int) -> list[dict[str, Any]]:
    """The last events up to the ``shown`` one, the count read with the status on the page.

    Events that commit after that read are left to the page's event stream, which starts
    behind the last event shown: a page that showed them, while its status was read before
    them, would follow the run from after its end and never learn that it ended."""
    start = max(0, shown - _TIMELINE)
    # The events behind ``start``, at most up to the ``shown`` one: cursors are dense, but a
    # finished run's streamed text may be compacted (fewer rows; ``_compaction``), so a page
    # of that many rows could reach past it.
    events = await console.store.read_events(run_id, start, shown - start) if shown > start else []
    return [console.redact(event.to_dict()) for event in events if int(event.cursor) <= shown]


def _run_url(request: Request, run_id: str) -> str:
    return f"{base(request)}/runs/{quote(run_id, safe='')}"


async def decide_form(request: Request, who: Identity) -> Response:
    run_id = request.path_params["run_id"]
    fields = await form(request)
    decision = fields.get("decision")
    if decision not in ("approve", "decline"):
        raise WebError(400, "decision must be approve or decline")
    done = await _actions.decide(
        state(request), who, run_id, fields.get("execution_key"), decision == "approve"
    )
    return flash(request, _run_url(request, run_id), done.message)


async def resolve_form(request: Request, who: Identity) -> Response:
    run_id = request.path_params["run_id"]
    fields = await form(request)
    done = await _actions.resolve(
        state(request),
        who,
        run_id,
        fields.get("execution_key"),
        fields.get("choice", ""),
        fields.get("result"),
        fields.get("is_error") == "on",
    )
    return flash(request, _run_url(request, run_id), done.message)


async def control_form(request: Request, who: Identity) -> Response:
    session_id = request.path_params["session_id"]
    verb = request.path_params["verb"]
    fields = await form(request)
    done = await _actions.control(state(request), who, session_id, verb)
    back = fields.get("back") or ""
    if not back.startswith(f"{base(request)}/runs/"):
        back = f"{base(request)}/runs?session={quote(session_id, safe='')}"
    return flash(request, back, done.message)


async def workers_page(request: Request, who: Identity) -> Response:
    return page(request, who, "workers.html", **await workers_view(state(request)))


async def queue_page(request: Request, who: Identity) -> Response:
    return page(request, who, "queue.html", **await queue_view(state(request)))


async def supervisor_page(request: Request, who: Identity) -> Response:
    return page(request, who, "supervisor.html", **await supervisor_view(state(request)))


async def audit_page(request: Request, who: Identity) -> Response:
    return page(request, who, "audit.html", **await actions_view(state(request)))


# ------------------------------------------------------------------------ sign-in


def _next(request: Request, target: str | None) -> str:
    """Where to go after signing in: only a path of this console (no open redirect)."""
    home = f"{base(request)}/runs"
    if not target or not target.startswith(f"{base(request)}/") or target.startswith("//"):
        return home
    return target


async def login_form(request: Request, message: str | None = None, status: int = 200) -> Response:
    console = state(request)
    if console.tokens is None:
        return RedirectResponse(f"{base(request)}/runs", status_code=303)
    nonce = secrets.token_urlsafe(24)
    response = page(
        request,
        None,
        "login.html",
        status=status,
        nonce=nonce,
        next=_next(request, request.query_params.get("next")),
        error=message,
    )
    response.set_cookie(
        LOGIN_CSRF, nonce, max_age=3600, path=base(request) or "/", httponly=True, samesite="strict",
        secure=secure(request),
    )  # fmt: skip
    return response


async def login(request: Request) -> Response:
    console = state(request)
    if console.tokens is None:
        return RedirectResponse(f"{base(request)}/runs", status_code=303)
    fields = await form(request)
    nonce = request.cookies.get(LOGIN_CSRF, "")
    if not nonce or not hmac.compare_digest(nonce, fields.get("nonce", "")):
        return await login_form(request, "the sign-in form expired: try again", 403)
    token = console.tokens.find(fields.get("token", "").strip())
    if token is None:
        return await login_form(request, "that token is not one of this console's", 401)
    session_id = secrets.token_urlsafe(32)
    await console.store.add_login(
        session_hash(session_id), token.name, token.role, token.token_id, console.session_seconds
    )
    response = RedirectResponse(_next(request, fields.get("next")), status_code=303, headers=SECURITY_HEADERS)
    response.set_cookie(
        COOKIE,
        console.keys.session_cookie(session_id),
        max_age=int(console.session_seconds),
        path=base(request) or "/",
        httponly=True,
        samesite="strict",
        secure=secure(request),
    )
    response.delete_cookie(LOGIN_CSRF, path=base(request) or "/")
    return response


async def logout(request: Request, who: Identity) -> Response:
    console = state(request)
    if who.via == "console":
        await console.store.end_login(who.session_hash)
    response = RedirectResponse(f"{base(request)}/login", status_code=303, headers=SECURITY_HEADERS)
    response.delete_cookie(COOKIE, path=base(request) or "/")
    return response
