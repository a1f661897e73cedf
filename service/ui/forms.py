"""The dashboard's forms: reading one (bounded, urlencoded or multipart) and the write guard
every form that changes something passes first.

A form that writes must carry the CSRF token of :mod:`service.ui.auth` (else 403: stale or
from another site) and come from a visitor who may write (else the login form, coming back
to the form's page). :func:`safe_next` keeps a "come back here" target on this site.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from starlette.datastructures import UploadFile
from starlette.types import Message

from service.api.body import read_body
from service.store.people import Who
from service.ui import auth
from service.ui.page import redirect, secured

MAX_FORM = 64 * 1024  # forms other than the paste
REFUSED = (
    "<!doctype html><html lang=en><title>Refused</title><main><h1>Refused</h1>"
    "<p>This form is stale or came from another site. Go back, reload the page and "
    "submit it again.</p></main></html>"
)

# a form's fields: text, or an upload for a multipart file field
Form = dict[str, str | UploadFile]


async def read_form(request: Request, limit: int = MAX_FORM) -> Form:
    """A form body (urlencoded or multipart), bounded; values are strings or uploads."""
    body = await read_body(request, limit)
    media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if media == "application/x-www-form-urlencoded":
        try:
            parsed = parse_qs(
                body.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=200
            )
        except ValueError:
            raise HTTPException(status_code=400, detail="too many form fields") from None
        return {k: v[-1] for k, v in parsed.items()}
    if media == "multipart/form-data":

        async def receive() -> Message:
            return {"type": "http.request", "body": body, "more_body": False}

        fresh = Request(request.scope, receive)
        form = await fresh.form(max_files=1, max_fields=50, max_part_size=limit)
        return dict(form.items())
    raise HTTPException(status_code=415, detail="expected a form")


def write_guard(request: Request, form: Form) -> Response | None:
    """None when this form may write; else the answer (403 for a forged form, the login
    form when the token is missing)."""
    if not auth.csrf_ok(request, str(form.get("csrf") or "")):
        return secured(HTMLResponse(REFUSED, status_code=403))
    if not auth.can_write(request):
        return redirect(request, "/ui/login", next=str(form.get("back") or "/ui/"), why="write")
    return None


async def writing_form(request: Request) -> Form | Response:
    """A form that writes: read, then guarded (:func:`write_guard`); the form, or the answer
    that refuses it."""
    form = await read_form(request)
    return write_guard(request, form) or form


def writer(request: Request) -> Who:
    """Who writes this form (after :func:`write_guard` let it through)."""
    who = auth.actor(request)
    if who is None or not who.can_write:  # (the guard refused it already)
        raise HTTPException(status_code=401, detail="sign in to write")
    return who.who


def safe_next(target: str | None) -> str:
    """A local path to go back to after signing in (never another site)."""
    if not target or not target.startswith("/ui") or target.startswith("//") or "\\" in target:
        return "/ui/"
    return target
