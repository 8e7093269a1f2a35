"""The console's request plumbing: who is asking, what they may do, CSRF, forms, pages.

Handlers are wrapped by ``guarded``: it finds the request's identity (a bearer token, a
signed sign-in cookie, or the local operator when the console runs without auth), sends
anyone else to the sign-in page (pages) or answers 401 (API), refuses a viewer's decision
(403), and refuses a state-changing request made with the cookie unless it carries the
session's CSRF token (403).
"""

from __future__ import annotations

import base64
import datetime as dt
import hmac
import ipaddress
import json
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any
from urllib.parse import parse_qsl, quote

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from harnessx._errors import HarnessError
from harnessx.console._auth import Identity, session_hash
from harnessx.console._state import ConsoleState

__all__ = [
    "COOKIE",
    "Handler",
    "WebError",
    "base",
    "csrf_for",
    "flash",
    "form",
    "guarded",
    "identify",
    "json_body",
    "page",
    "secure",
    "state",
]

logger = logging.getLogger("harnessx.console")

COOKIE = "harnessx_console"
FLASH = "harnessx_console_flash"
LOGIN_CSRF = "harnessx_console_login"
MAX_BODY = 256 * 1024
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

Handler = Callable[[Request, Identity], Awaitable[Response]]


class WebError(Exception):
    """An answer other than success, with a message fit to show."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def state(request: Request) -> ConsoleState:
    found: ConsoleState = request.app.state.console
    return found


def base(request: Request) -> str:
    """Where the console is mounted (its links are all below it)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


# ----------------------------------------------------------------------- templates


def _time(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _ago(epoch: float | None, now: float | None = None) -> str:
    if epoch is None:
        return "-"
    seconds = max(0.0, (now or time.time()) - epoch)
    if seconds < 1:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


_templates = Environment(
    loader=PackageLoader("harnessx.console", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_templates.filters.update(time=_time, ago=_ago, pretty=_pretty, urlq=lambda v: quote(str(v), safe=""))


def page(request: Request, who: Identity | None, template: str, status: int = 200, **values: Any) -> Response:
    """A page (or, with ``?fragment=1``, the part of it a page refreshes)."""
    console = state(request)
    message = _read_flash(request)
    context = {
        "base": base(request),
        "who": who,
        "csrf": csrf_for(request, who) if who is not None else "",
        "store_label": console.store_label,
        "no_auth": console.tokens is None,
        "flash": message,
        "now": time.time(),
        "path": request.url.path,
        **values,
    }
    html = _templates.get_template(template).render(context)
    response = HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)
    if message is not None:
        response.delete_cookie(FLASH, path=base(request) or "/")
    return response


def flash(request: Request, to: str, message: str) -> Response:
    """Redirect (after a form) with a message for the next page."""
    console = state(request)
    encoded = base64.urlsafe_b64encode(message[:2000].encode()).decode()
    response = RedirectResponse(to, status_code=303, headers=SECURITY_HEADERS)
    response.set_cookie(
        FLASH,
        f"{encoded}.{console.keys.sign('flash', encoded)}",
        max_age=60,
        path=base(request) or "/",
        httponly=True,
        samesite="strict",
        secure=secure(request),
    )
    return response


def _read_flash(request: Request) -> str | None:
    value = request.cookies.get(FLASH)
    if not value:
        return None
    encoded, _, signature = value.rpartition(".")
    if not state(request).keys.verify("flash", encoded, signature):
        return None
    try:
        return base64.urlsafe_b64decode(encoded).decode()
    except ValueError:
        return None


def secure(request: Request) -> bool:
    """Whether cookies get ``Secure``: over HTTPS, or when told TLS ends at a proxy in front."""
    return state(request).secure_cookies or request.url.scheme == "https"


# ------------------------------------------------------------------------ identity


async def identify(request: Request) -> Identity | None:
    """Who sent ``request``; ``None``: nobody we know. A bad bearer token is a 401 at once."""
    console = state(request)
    if console.tokens is None:
        return Identity(console.local_name, "operator", "local")
    header = request.headers.get("authorization", "")
    if header:
        scheme, _, secret = header.partition(" ")
        token = console.tokens.find(secret.strip()) if scheme.lower() == "bearer" else None
        if token is None:
            raise WebError(401, "the Authorization header holds no valid console token (Bearer TOKEN)")
        return Identity(token.name, token.role, "api", token.token_id)
    cookie = request.cookies.get(COOKIE)
    session_id = console.keys.session_of(cookie) if cookie else None
    if session_id is None:
        return None
    hashed = session_hash(session_id)
    login = await console.store.get_login(hashed)
    if login is None or not login.valid:
        return None
    token = console.tokens.by_id(login.token_id)
    if token is None:  # the token was removed since: its sessions end with it
        return None
    return Identity(token.name, token.role, "console", token.token_id, hashed)


def csrf_for(request: Request, who: Identity) -> str:
    keys = state(request).keys
    if who.via == "console":
        return keys.csrf(who.session_hash)
    if who.via == "local":
        return keys.csrf("local")
    return ""


def _check_csrf(request: Request, who: Identity, sent: str | None) -> None:
    if who.via == "api":
        return  # a bearer token is no ambient credential: another site cannot send it
    wanted = csrf_for(request, who)
    if not sent or not hmac.compare_digest(sent, wanted):
        raise WebError(403, "this request lacks the page's CSRF token: reload the page and try again")


def _loopback_host(request: Request) -> bool:
    host = request.headers.get("host", "").lower()
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1 : host.find("]")]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def guarded(handler: Handler, *, api: bool, write: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` for known identities only; ``write``: operators only, with CSRF for cookies."""

    async def endpoint(request: Request) -> Response:
        try:
            if state(request).tokens is None and not _loopback_host(request):
                # Without auth the console answers only for localhost: another name could be a
                # site of someone else's resolving to this machine (DNS rebinding).
                raise WebError(403, "this console runs without auth and answers only requests for localhost")
            who = await identify(request)
            if who is None:
                if api:
                    raise WebError(401, "sign in first: send Authorization: Bearer TOKEN")
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(
                    f"{base(request)}/login?next={quote(target, safe='')}", status_code=303
                )
            if write:
                if not who.may_decide:
                    raise WebError(403, f"{who.name} is a viewer: only an operator may do this")
                sent = request.headers.get("x-csrf-token")
                if sent is None and not api:
                    sent = (await form(request)).get("csrf")
                _check_csrf(request, who, sent)
            return await handler(request, who)
        except WebError as exc:
            return _error(request, exc.status, exc.message, api)
        except HarnessError as exc:
            # A user's mistake or a refused decision: what to do, no traceback.
            return _error(request, 409 if write else 400, state(request).redact(str(exc)), api)

    return endpoint


def _error(request: Request, status: int, message: str, api: bool) -> Response:
    if api:
        return JSONResponse({"error": message}, status_code=status, headers=SECURITY_HEADERS)
    return page(request, None, "error.html", status=status, message=message)


# -------------------------------------------------------------------------- bodies


async def _body(request: Request) -> bytes:
    cached = request.scope.get("harnessx.body")
    if cached is not None:
        return bytes(cached)
    data = b""
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_BODY:
            raise WebError(413, f"the request body is over {MAX_BODY // 1024} KiB")
    request.scope["harnessx.body"] = data
    return data


async def form(request: Request) -> dict[str, str]:
    """A form's fields (``application/x-www-form-urlencoded``); the last of repeated names."""
    try:
        return dict(parse_qsl((await _body(request)).decode(), keep_blank_values=True))
    except UnicodeDecodeError:
        raise WebError(400, "the form is not UTF-8") from None


async def json_body(request: Request) -> dict[str, Any]:
    try:
        value = json.loads(await _body(request) or b"{}")
    except ValueError:
        raise WebError(400, "the body is not JSON") from None
    if not isinstance(value, dict):
        raise WebError(400, "the body must be a JSON object")
    return value


json_response = partial(JSONResponse, headers=SECURITY_HEADERS)
