"""How every dashboard page answers: the templates, the page context they all share, the
security headers, the 303 redirect after a form, and the read guard.

:func:`render` gives each template ``base`` (the app's root path), ``now``, the CSRF token,
the notice a ``?done=`` names, what the visitor may do (``can_write``, ``signed_in``,
``tokens``), time helpers and the list's refresh period. Every answer carries
:data:`CSP` (no inline script or style, forms post only here), ``no-store`` and
``nosniff``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from service.api.deps import get_ctx, get_store
from service.store import Store
from service.ui import auth, present

HERE = Path(__file__).resolve().parent


def _nothing_for_none(value: object) -> object:
    return "" if value is None else value


templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.filters.update(
    ts=present.fmt_time,
    iso=present.iso_time,
    dur=present.fmt_duration,
    rungtext=present.ladder_state_text,
    bare=present.bare,
)
# a value the page does not have prints nothing, never a literal "None" (templates say what
# is missing in words where it matters)
templates.env.finalize = _nothing_for_none

POLL_S = 10
NOTICES = {
    "resolved": "Incident resolved.",
    "feedback": "Thank you: the feedback was recorded.",
    "silenced": "Silence created: matching incidents will not page until it ends.",
    "expired": "Silence expired.",
    "acked": "Acknowledged: you are on it (PagerDuty stops escalating; Slack is told).",
    "assigned": "Assignee changed.",
    "noted": "Note added to the timeline.",
    "edited": "Silence changed.",
    "extended": "Silence extended.",
    "tested": "Test notification sent.",
    "login": "Signed in.",
    "logout": "Signed out.",
}
CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


def store(request: Request) -> Store:
    """The service's store; 503 when it runs without one (as for the API's routes)."""
    found: Store = get_store(get_ctx(request))
    return found


def base(request: Request) -> str:
    return str(request.scope.get("root_path") or "").rstrip("/")


def secured(response: Response) -> Response:
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    return response


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> Response:
    now = time.time()
    notice = NOTICES.get(request.query_params.get("done") or "")
    context.setdefault("error", None)
    response = templates.TemplateResponse(
        request,
        name,
        {
            "base": base(request),
            "now": now,
            "csrf": auth.csrf_token(request),
            "notice": notice,
            "can_write": auth.can_write(request),
            "signed_in": auth.given_token(request) is not None
            and auth.token_valid(request, auth.given_token(request) or ""),
            "actor": auth.actor(request),
            "tokens": auth.tokens_configured(request),
            "nav": context.pop("nav", ""),
            "ago": lambda t: present.fmt_ago(t, now),
            "age": lambda t: present.age_class(t, now),
            "poll_s": poll_s(request),
            **context,
        },
        status_code=status_code,
    )
    auth.keep_csrf(response, request)
    return secured(response)


def poll_s(request: Request) -> int:
    """How often the list refreshes itself: ``?poll=`` seconds (2 to 300), else 10."""
    try:
        return min(300, max(2, int(request.query_params.get("poll") or POLL_S)))
    except ValueError:
        return POLL_S


def redirect(request: Request, path: str, **query: str) -> RedirectResponse:
    """303 to ``path`` under the root path, with the non-empty ``query`` values."""
    q = {k: v for k, v in query.items() if v}
    url = base(request) + path + (("?" + urlencode(q)) if q else "")
    return RedirectResponse(url, status_code=303)


def login_redirect(request: Request) -> RedirectResponse:
    target = request.url.path + (("?" + request.url.query) if request.url.query else "")
    return redirect(request, "/ui/login", next=target)


TRUE = frozenset({"true", "1", "on", "yes"})
FALSE = frozenset({"false", "0", "off", "no", ""})


def form_bool(value: object, name: str) -> bool:
    """A form field or query parameter read as a boolean, strictly: ``true``/``1``/``on``/
    ``yes`` are true, ``false``/``0``/``off``/``no``, empty or absent are false; anything
    else is refused (400), never taken as true because it is not empty."""
    if value is None:
        return False
    text = value.strip().lower() if isinstance(value, str) else None
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    raise HTTPException(
        400, f"{name}: not a boolean (true/false, 1/0, on/off, yes/no): {str(value)[:40]!r}"
    )


def denied_read(request: Request) -> Response | None:
    """None when this request may read; else the way to the login form (a plain 401 for the
    list's refresh, which cannot follow it)."""
    if auth.can_read(request):
        return None
    if form_bool(request.query_params.get("fragment"), "fragment"):
        return secured(Response("sign in again", status_code=401, media_type="text/plain"))
    return login_redirect(request)
