"""The silences page (active, pending, expired; a form prefilled from ``?incident=``) and
its two forms: create a silence, expire one.

"Preview what it hides" renders the page again with the form as filled in and the open and
last day's incidents it would match; a silence that pins no single namespace is refused
unless "every namespace" is ticked. A new silence is validated by the API's :class:`~service.api.schemas.SilenceRequest` (what
the form's checkboxes and extra matcher give, a duration, a comment); what was wrong comes
back as ``?error=`` on the page. Expiring ends the silence now and keeps it in the list.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError

from service import labels
from service.api.schemas import SilenceRequest
from service.notify.silences import SilencePreview, preview
from service.store.views import IncidentView
from service.ui import data, present
from service.ui.forms import read_form, writing_form
from service.ui.page import denied_read, form_bool, redirect, render, store

router = APIRouter()


@router.get("/silences", response_class=HTMLResponse)
def silences_page(request: Request) -> Response:
    denied = denied_read(request)
    if denied:
        return denied
    return _page(request, None, None, False)


@router.post("/silences/preview", response_class=HTMLResponse)
async def preview_page(request: Request) -> Response:
    """The form as filled in, with what the silence would hide (creates nothing)."""
    denied = denied_read(request)
    if denied:
        return denied
    form = await read_form(request)
    matchers = _matchers(form)
    shown = [
        {
            "key": k,
            "value": str(form.get(f"value_{k}") or ""),
            "checked": form_bool(form.get(f"use_{k}"), f"use_{k}"),
        }
        for k in present.SILENCE_KEYS
        if str(form.get(f"value_{k}") or "").strip() or form_bool(form.get(f"use_{k}"), k)
    ]
    seen: PreviewShown | None = None
    if matchers:
        db = store(request)
        found = await anyio.to_thread.run_sync(lambda: preview(db, matchers, time.time()))
        seen = PreviewShown(found, not labels.pins_one_namespace(matchers))
    return _page(request, seen, shown, form_bool(form.get("cluster_wide"), "cluster_wide"))


class PreviewShown:
    """A :class:`SilencePreview` as the page shows it."""

    def __init__(self, found: SilencePreview, wide: bool) -> None:
        self.open: list[IncidentView] = found.open
        self.recent: list[IncidentView] = found.recent
        self.namespaces = found.namespaces
        self.truncated = found.truncated
        self.wide = wide
        shown = {i["id"] for i in found.open}
        self.listed = [*found.open, *(i for i in found.recent if i["id"] not in shown)][:50]


def _matchers(form: Mapping[str, object]) -> dict[str, list[str]]:
    matchers: dict[str, list[str]] = {}
    for key in present.SILENCE_KEYS:
        if (
            form_bool(form.get(f"use_{key}"), f"use_{key}")
            and str(form.get(f"value_{key}") or "").strip()
        ):
            matchers[key] = [str(form[f"value_{key}"]).strip()]
    extra_key = str(form.get("extra_key") or "").strip()
    extra_value = str(form.get("extra_value") or "").strip()
    if extra_key and extra_value:
        matchers.setdefault(extra_key, []).append(extra_value)
    return matchers


def _page(
    request: Request,
    seen: PreviewShown | None,
    shown: list[dict[str, object]] | None,
    cluster_wide: bool,
) -> Response:
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
        candidates=shown if shown is not None else (present.silence_candidates(inc) if inc else []),
        durations=present.DURATIONS,
        form_error=request.query_params.get("error"),
        preview=seen,
        cluster_wide=cluster_wide,
    )


@router.post("/silences")
async def create_silence(request: Request) -> Response:
    form = await writing_form(request)
    if isinstance(form, Response):
        return form
    matchers = _matchers(form)
    incident = str(form.get("incident") or "")
    back = {"incident": incident} if incident else {}
    try:
        body = SilenceRequest(
            matchers=matchers,
            duration=str(form.get("duration") or "2h"),
            comment=str(form.get("comment") or "").strip() or "silenced from the dashboard",
            created_by=str(form.get("created_by") or "").strip()[:200] or "dashboard",
            cluster_wide=form_bool(form.get("cluster_wide"), "cluster_wide"),
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
    form = await writing_form(request)
    if isinstance(form, Response):
        return form
    db = store(request)
    await anyio.to_thread.run_sync(lambda: data.expire_silence(db, silence_id, time.time()))
    return redirect(request, "/ui/silences", done="expired")
