"""Who may use the dashboard, and what a page may do in the browser.

* Access: with a token, every request must carry it: ``Authorization: Bearer
  <token>``, or HTTP basic auth with the token as the password (any user name;
  browsers ask for it themselves).  Without a token only clients on this machine
  (loopback addresses) are served, and only under a loopback name (the Host header:
  ``localhost``, ``127.0.0.1``, ``[::1]``), since a browser takes a page of a name an
  attacker's DNS rebinds to 127.0.0.1 for that attacker's own site and lets its scripts
  read the answers; ``check_bind`` refuses to serve another address without a token.
  The token is asked of every request, local ones included, so that a reverse proxy
  on this machine does not open the dashboard to its clients; ``check_token`` refuses
  one shorter than 16 characters (both in sqlq.access, which a worker's metrics use too).
* Cross-site requests: every action of the pages is a POST that carries the
  session's CSRF token in a form field, equal to the ``sqlq_csrf`` cookie
  (SameSite=Strict, so a request another site makes carries none; Secure when the
  request came over HTTPS), from a page whose Origin, when the browser sends one, is
  the dashboard's own.  The JSON API's actions take no cookie: they need
  ``Content-Type: application/json``, which no form can send and a script of another
  site cannot send without asking first (a CORS preflight, which the dashboard does
  not grant), and an Origin, when there is one, that is the dashboard's own.  A
  token in a header is one a browser never adds to another site's request; basic
  auth it may add, hence these two checks.
* What pages may do: the Content-Security-Policy lets them load their own
  scripts, styles and images only, run no inline script, and be framed by no one;
  templates escape every value (Jinja2's autoescape).
"""

from __future__ import annotations

import hmac
import secrets

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..access import is_loopback, token_matches

CSRF_COOKIE = "sqlq_csrf"
CSRF_FIELD = "csrf"

#: Headers of every response.
HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def authorized(request: Request, token: str | None) -> bool:
    """May ``request`` use the dashboard (see the module docstring)?"""
    if token is None:  # (the Host too: a page of a name rebound to 127.0.0.1 is another site)
        client = request.client
        return client is not None and is_loopback(client.host) and is_loopback(request.url.hostname)
    # The bytes sent (Starlette reads headers as latin-1).
    return token_matches(request.headers.get("authorization", "").encode("latin-1"), token)


class Guard:
    """ASGI middleware: refuse requests that may not use the dashboard (401, asking
    for basic auth, or 403 off this machine without a token), and add HEADERS to
    every response."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                known = {name.lower() for name, _ in message.get("headers", [])}
                message["headers"] = [
                    *message.get("headers", []),
                    *(
                        (k.encode(), v.encode())
                        for k, v in HEADERS.items()
                        if k.encode() not in known
                    ),
                ]
            await send(message)

        request = Request(scope)
        if authorized(request, self.token):
            await self.app(scope, receive, send_with_headers)
            return
        refusal: Response
        if self.token is None:
            refusal = PlainTextResponse(
                "this dashboard serves this machine only, at a loopback address or localhost "
                "(start it with a token to serve others)",
                403,
            )
        else:
            refusal = PlainTextResponse(
                "an access token is needed", 401, {"www-authenticate": 'Basic realm="sqlq"'}
            )
        await refusal(scope, receive, send_with_headers)


def csrf_token(request: Request) -> str:
    """The session's CSRF token: the cookie's, or a new one (set_csrf_cookie sends it)."""
    return request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(32)


def set_csrf_cookie(response: Response, request: Request, value: str) -> None:
    """Send the session's CSRF token, if the browser does not have it (Secure over HTTPS:
    behind a proxy, the scheme its X-Forwarded-Proto says, where the server trusts it)."""
    if request.cookies.get(CSRF_COOKIE) != value:
        path = request.scope.get("root_path") or "/"
        secure = request.url.scheme == "https"
        response.set_cookie(
            CSRF_COOKIE, value, httponly=True, samesite="strict", path=path, secure=secure
        )


def csrf_refusal(request: Request, form: dict[str, str]) -> str | None:
    """Why the action ``request`` (with its ``form``) is refused as cross-site, or None."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    given = form.get(CSRF_FIELD, "")
    if not cookie or not hmac.compare_digest(cookie.encode(), given.encode()):
        return "the form's CSRF token is missing or stale: reload the page and try again"
    return _foreign(request)


def api_refusal(request: Request) -> tuple[int, str] | None:
    """(status, why) a JSON API action ``request`` is refused as cross-site, or None."""
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json":
        return 415, "an action of the API takes a JSON body: Content-Type: application/json"
    why = _foreign(request)
    return None if why is None else (403, why)


def _foreign(request: Request) -> str | None:
    """Why ``request`` comes from another site's page (its Origin), or None."""
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
        return f"an action from another site ({origin}) is refused"
    return None
