"""The silences page (active, pending, expired; a form prefilled from ``?incident=``) and
its two forms: create a silence, expire one.

A new silence is validated by the API's :class:`~service.api.schemas.SilenceRequest` (what
the form's checkboxes and extra matcher give, a duration, a comment); what was wrong comes
back as ``?error=`` on the page. Expiring ends the silence now and keeps it in the list.
"""

from __future__ import annotations

import time

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError

from service.api.schemas import SilenceRequest
from service.ui import data, present
from service.ui.forms import read_form, write_guard
from service.ui.page import denied_read, redirect, render, store

router = APIRouter()


@router.get("/silences", response_class=HTMLResponse)
def silences_page(request: Request) -> Response:
    denied = denied_read(request)
    if denied:
        return denied
    db = store(request)
    all_ = db.list_silences()
    now = time.time()
    active = [s for s in all_ if s["active"]]
    pending = [s for s in all_ if not s["active"] and s["starts_at"] > now]
    expired = [s for s in all_ if not s["active"] and s["ends_at"] <= now][:100]
    inc = None
    incident_id = request.query_params.get("incident")
    if incident_id:
        inc = db.get_incident(incident_id)
    return render(
        request,
        "silences.html",
        nav="silences",
        title="Silences",
        active=active,
        pending=pending,
        expired=expired,
        inc=inc,
        candidates=present.silence_candidates(inc) if inc else [],
        durations=present.DURATIONS,
        form_error=request.query_params.get("error"),
    )


@router.post("/silences")
async def create_silence(request: Request) -> Response:
    form = await read_form(request)
    refused = write_guard(request, form)
    if refused:
        return refused
    matchers: dict[str, list[str]] = {}
    for key in present.SILENCE_KEYS:
        if form.get(f"use_{key}") and str(form.get(f"value_{key}") or "").strip():
            matchers[key] = [str(form[f"value_{key}"]).strip()]
    extra_key = str(form.get("extra_key") or "").strip()
    extra_value = str(form.get("extra_value") or "").strip()
    if extra_key and extra_value:
        matchers.setdefault(extra_key, []).append(extra_value)
    incident = str(form.get("incident") or "")
    back = {"incident": incident} if incident else {}
    try:
        body = SilenceRequest(
            matchers=matchers,
            duration=str(form.get("duration") or "2h"),
            comment=str(form.get("comment") or "").strip() or "silenced from the dashboard",
            created_by=str(form.get("created_by") or "").strip()[:200] or "dashboard",
        )
    except ValidationError as exc:
        msg = "; ".join(
            str(e.get("msg", "")).removeprefix("Value error, ")
            for e in exc.errors(include_url=False, include_input=False)
        )
        return redirect(request, "/ui/silences", error=msg[:300], **back)
    db = store(request)
    new = body.resolved()
    try:
        await anyio.to_thread.run_sync(
            lambda: db.create_silence(
                new.matchers,
                new.ends_at,
                created_by=new.created_by,
                comment=new.comment,
                starts_at=new.starts_at,
            )
        )
    except ValueError as exc:
        return redirect(request, "/ui/silences", error=str(exc)[:300], **back)
    return redirect(request, "/ui/silences", done="silenced")


@router.post("/silences/{silence_id}/expire")
async def expire_silence(request: Request, silence_id: str) -> Response:
    form = await read_form(request)
    refused = write_guard(request, form)
    if refused:
        return refused
    db = store(request)
    await anyio.to_thread.run_sync(lambda: data.expire_silence(db, silence_id, time.time()))
    return redirect(request, "/ui/silences", done="expired")
