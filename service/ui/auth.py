"""The dashboard's authentication: the API's own tokens, carried in a cookie.

* Reads follow the API's rule (:func:`service.api.actors.read_tokens`): any user's token,
  the read token or the write token when ``api.read_token`` is set or the API listens beyond
  loopback; open only on loopback (or an API explicitly run open).
* Writes (resolve, acknowledge, assign, notes, silences, feedback) need what the API's
  writes need: an actor whose role is write (:func:`actor`); each is recorded under its
  name. A trusted proxy's user header names the visitor as it does for the API.
* ``POST /ui/login`` checks the token typed into the form and keeps it in the
  ``sentinel_token`` cookie: ``HttpOnly`` (no script can read it), ``SameSite=Lax`` (a
  link from Slack or PagerDuty still opens the page signed in; no other site can post with
  it), ``Secure`` over HTTPS and on loopback (where browsers accept it over plain HTTP), path
  ``/ui``, 12 hours. A plain-HTTP login on another host still works and says that the
  token then travels unencrypted. An ``Authorization: Bearer`` header is accepted as well.
* Every form carries a CSRF token that must equal the ``sentinel_csrf`` cookie (double
  submit), and a request whose ``Origin`` is another site is refused.
"""

from __future__ import annotations

import hmac
import secrets

from fastapi import Request, Response

from service.api.actors import Actor, by_token, identify, open_api, read_tokens
from service.api.deps import get_ctx
from service.config import ApiSettings
from service.netguard import is_loopback

COOKIE = "sentinel_token"
CSRF_COOKIE = "sentinel_csrf"
COOKIE_PATH = "/ui"
MAX_AGE_S = 12 * 3600
MAX_TOKEN_LEN = 4096


def _settings(request: Request) -> ApiSettings:
    return get_ctx(request).settings.api


def given_token(request: Request) -> str | None:
    """The token this request carries: the ``Authorization: Bearer`` header, else the
    cookie."""
    header = request.headers.get("authorization") or ""
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    cookie = request.cookies.get(COOKIE)
    return cookie if cookie and cookie.strip() else None


def actor(request: Request) -> Actor | None:
    """Who this visitor is (:func:`service.api.actors.identify`: a trusted proxy's user, the
    owner of the token, ``anonymous`` on an API with no credential); None: nobody known."""
    if len(given_token(request) or "") > MAX_TOKEN_LEN:
        return None
    peer = request.client.host if request.client is not None else None
    return identify(_settings(request), given_token(request), peer, request.headers)


def can_read(request: Request) -> bool:
    return not read_tokens(_settings(request)) or actor(request) is not None


def can_write(request: Request) -> bool:
    who = actor(request)
    return who is not None and who.can_write


def login_needed_for_reads(request: Request) -> bool:
    return bool(read_tokens(_settings(request)))


def tokens_configured(request: Request) -> bool:
    return not open_api(_settings(request))


def token_valid(request: Request, token: str) -> bool:
    return len(token) <= MAX_TOKEN_LEN and by_token(_settings(request), token) is not None


def is_https(request: Request) -> bool:
    proto = (request.headers.get("x-forwarded-proto") or "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or proto == "https"


def secure_cookie_ok(request: Request) -> bool:
    """Whether a ``Secure`` cookie reaches the server: over HTTPS, or on loopback (which
    browsers treat as a secure context)."""
    return is_https(request) or is_loopback(request.url.hostname or "")


def cookie_path(request: Request) -> str:
    """``/ui`` below the app's root path (a reverse proxy serving it under a prefix)."""
    return str(request.scope.get("root_path") or "").rstrip("/") + COOKIE_PATH


def set_login(response: Response, request: Request, token: str) -> None:
    response.set_cookie(
        COOKIE,
        token,
        max_age=MAX_AGE_S,
        path=cookie_path(request),
        httponly=True,
        secure=secure_cookie_ok(request),
        samesite="lax",
    )


def clear_login(response: Response, request: Request) -> None:
    response.delete_cookie(
        COOKIE,
        path=cookie_path(request),
        httponly=True,
        secure=secure_cookie_ok(request),
        samesite="lax",
    )


# ---- CSRF (double submit) -------------------------------------------------------------------
def csrf_token(request: Request) -> str:
    """This browser's CSRF token (a new one when it has none; :func:`keep_csrf` stores it)."""
    token = getattr(request.state, "csrf", None)
    if token is None:
        token = request.cookies.get(CSRF_COOKIE) or ""
        if not (20 <= len(token) <= 100):
            token = secrets.token_urlsafe(32)
            request.state.csrf_new = True
        request.state.csrf = token
    return token


def keep_csrf(response: Response, request: Request) -> None:
    if getattr(request.state, "csrf_new", False):
        response.set_cookie(
            CSRF_COOKIE,
            request.state.csrf,
            path=cookie_path(request),
            httponly=True,
            secure=secure_cookie_ok(request),
            samesite="strict",
        )


def same_origin(request: Request) -> bool:
    """A browser's ``Origin`` (when it sends one) names this host."""
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin is None
    hosts = {
        request.headers.get("host", ""),
        (request.headers.get("x-forwarded-host") or "").split(",")[0].strip(),
    }
    return origin.split("://", 1)[-1].rstrip("/") in hosts - {""}


def csrf_ok(request: Request, submitted: str | None) -> bool:
    cookie = request.cookies.get(CSRF_COOKIE)
    if not cookie or not submitted or not same_origin(request):
        return False
    return hmac.compare_digest(cookie.encode(), submitted.encode())
