"""Signing in and out (``/ui/login``, ``/ui/logout``): the token typed into the form is
checked against the API's tokens and kept in the login cookie (:mod:`service.ui.auth`);
after signing in the visitor goes back to the page that asked (``next``, on this site
only)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from service.ui import auth
from service.ui.forms import read_form, safe_next, write_guard
from service.ui.page import base, redirect, render, secured

router = APIRouter()


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> Response:
    return render(
        request,
        "login.html",
        nav="login",
        title="Sign in",
        next=safe_next(request.query_params.get("next")),
        why=request.query_params.get("why"),
        https=auth.secure_cookie_ok(request),
        reads_need=auth.login_needed_for_reads(request),
    )


@router.post("/login")
async def login(request: Request) -> Response:
    form = await read_form(request)
    target = safe_next(str(form.get("next") or ""))
    if not auth.csrf_ok(request, str(form.get("csrf") or "")):
        return write_guard(request, form) or redirect(request, "/ui/login")
    token = str(form.get("token") or "").strip()
    if not auth.token_valid(request, token):
        return render(
            request,
            "login.html",
            status_code=401,
            nav="login",
            title="Sign in",
            next=target,
            why=None,
            https=auth.secure_cookie_ok(request),
            reads_need=auth.login_needed_for_reads(request),
            error="That token is not accepted by this service.",
        )
    response = RedirectResponse(base(request) + target, status_code=303)
    auth.set_login(response, request, token)
    return secured(response)


@router.post("/logout")
async def logout(request: Request) -> Response:
    form = await read_form(request)
    if not auth.csrf_ok(request, str(form.get("csrf") or "")):
        return write_guard(request, form) or redirect(request, "/ui/")
    response = redirect(request, "/ui/login", done="logout")
    auth.clear_login(response, request)
    return secured(response)
