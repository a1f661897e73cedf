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
from urllib.parse import urlencode

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError

from service import labels
from service.api.silence_schemas import SilenceExtend, SilenceRequest
from service.notify.silences import SilencePreview, preview
from service.store.views import IncidentView
from service.ui import auth, present
from service.ui.forms import read_form, write_guard, writer, writing_form
from service.ui.page import denied_read, form_bool, redirect, render, store

router = APIRouter()


@router.get("/silences", response_class=HTMLResponse)
def silences_page(request: Request) -> Response:
    denied = denied_read(request)
    if denied:
        return denied
    q = request.query_params  # a form coming back from the sign-in page keeps its values
    return _page(request, None, shown_rows(q), bool(q.get("cluster_wide")), typed(q))


@router.post("/silences/preview", response_class=HTMLResponse)
async def preview_page(request: Request) -> Response:
    """The form as filled in, with what the silence would hide (creates nothing)."""
    denied = denied_read(request)
    if denied:
        return denied
    form = await read_form(request)
    matchers = _matchers(form)
    shown = shown_rows(form) or []
    seen: PreviewShown | None = None
    if matchers:
        db = store(request)
        found = await anyio.to_thread.run_sync(lambda: preview(db, matchers, time.time()))
        seen = PreviewShown(found, not labels.pins_one_namespace(matchers))
    return _page(
        request, seen, shown, form_bool(form.get("cluster_wide"), "cluster_wide"), typed(form)
    )


TYPED = ("comment", "duration", "extra_key", "extra_value", "incident")


def typed(form: Mapping[str, object]) -> dict[str, str]:
    """What was typed into the silence form besides the matcher rows (kept across a preview,
    a refusal and signing in)."""
    return {k: str(form.get(k) or "") for k in TYPED if str(form.get(k) or "").strip()}


def shown_rows(form: Mapping[str, object]) -> list[dict[str, object]] | None:
    """The matcher rows as filled in (None: nothing was filled in)."""
    rows: list[dict[str, object]] = [
        {
            "key": k,
            "value": str(form.get(f"value_{k}") or ""),
            "checked": form_bool(form.get(f"use_{k}"), f"use_{k}"),
        }
        for k in present.SILENCE_KEYS
        if str(form.get(f"value_{k}") or "").strip() or form_bool(form.get(f"use_{k}"), k)
    ]
    return rows or None


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
    kept: dict[str, str] | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    db = store(request)
    all_ = db.list_silences()
    now = time.time()
    active = [s for s in all_ if s["active"]]
    pending = [s for s in all_ if not s["active"] and s["starts_at"] > now]
    expired = [s for s in all_ if not s["active"] and s["ends_at"] <= now][:100]
    inc = None
    kept = kept or {}
    incident_id = kept.get("incident") or request.query_params.get("incident")
    if incident_id:
        inc = db.get_incident(incident_id)
    return render(
        request,
        "silences.html",
        status_code=status_code,
        nav="silences",
        title="Silences",
        active=active,
        pending=pending,
        expired=expired,
        inc=inc,
        candidates=shown if shown is not None else (present.silence_candidates(inc) if inc else []),
        durations=present.DURATIONS,
        form_error=error or request.query_params.get("error"),
        preview=seen,
        cluster_wide=cluster_wide,
        kept=kept,
    )


@router.post("/silences")
async def create_silence(request: Request) -> Response:
    form = await read_form(request)
    if auth.csrf_ok(request, str(form.get("csrf") or "")) and not auth.can_write(request):
        # to the sign-in page and back to this form as it was filled in
        filled = {
            **typed(form),
            **{k: str(v) for k, v in form.items() if k.startswith(("use_", "value_"))},
            **(
                {"cluster_wide": "1"} if form_bool(form.get("cluster_wide"), "cluster_wide") else {}
            ),
        }
        back = "/ui/silences?" + urlencode(filled) + "#new-silence"
        return redirect(request, "/ui/login", next=back, why="write")
    refused = write_guard(request, form)
    if refused is not None:
        return refused
    matchers = _matchers(form)
    incident = str(form.get("incident") or "")
    try:
        body = SilenceRequest(
            matchers=matchers,
            duration=str(form.get("duration") or "2h"),
            comment=str(form.get("comment") or "").strip() or "silenced from the dashboard",
            cluster_wide=form_bool(form.get("cluster_wide"), "cluster_wide"),
        )
    except ValidationError as exc:
        msg = "; ".join(
            str(e.get("msg", "")).removeprefix("Value error, ")
            for e in exc.errors(include_url=False, include_input=False)
        )
        return _refused(request, form, msg)
    db, who = store(request), writer(request)
    new = body.resolved()
    try:
        await anyio.to_thread.run_sync(
            lambda: db.create_silence(
                new.matchers,
                new.ends_at,
                by=who,
                comment=new.comment,
                starts_at=new.starts_at,
                incident_id=incident or None,
            )
        )
    except ValueError as exc:
        return _refused(request, form, str(exc))
    return redirect(request, "/ui/silences", done="silenced")


def _refused(request: Request, form: Mapping[str, object], why: str) -> Response:
    """The form again, as it was filled in, saying why it was refused."""
    return _page(
        request,
        None,
        shown_rows(form),
        form_bool(form.get("cluster_wide"), "cluster_wide"),
        typed(form),
        error=why[:300],
        status_code=422,
    )


@router.post("/silences/{silence_id}/extend")
async def extend_silence(request: Request, silence_id: str) -> Response:
    form = await writing_form(request)
    if isinstance(form, Response):
        return form
    try:
        body = SilenceExtend(duration=str(form.get("duration") or "2h"))
    except ValidationError:
        return redirect(request, "/ui/silences", error="choose how much longer")
    db, who = store(request), writer(request)
    done = await anyio.to_thread.run_sync(lambda: db.extend_silence(silence_id, body.seconds, who))
    if done is None:
        return redirect(request, "/ui/silences", error="that silence has ended: make a new one")
    return redirect(request, "/ui/silences", done="extended")


@router.post("/silences/{silence_id}/edit")
async def edit_silence(request: Request, silence_id: str) -> Response:
    form = await writing_form(request)
    if isinstance(form, Response):
        return form
    comment = str(form.get("comment") or "").strip()
    if not comment:
        return redirect(request, "/ui/silences", error="a silence needs a reason")
    db, who = store(request), writer(request)
    done = await anyio.to_thread.run_sync(
        lambda: db.edit_silence(silence_id, who, comment=comment[:2000])
    )
    if done is None:
        return redirect(request, "/ui/silences", error="that silence has ended: make a new one")
    return redirect(request, "/ui/silences", done="edited")


@router.post("/silences/{silence_id}/expire")
async def expire_silence(request: Request, silence_id: str) -> Response:
    form = await writing_form(request)
    if isinstance(form, Response):
        return form
    db, who = store(request), writer(request)
    await anyio.to_thread.run_sync(lambda: db.delete_silence(silence_id, who))
    return redirect(request, "/ui/silences", done="expired")
