"""The forms on an incident's page for who is on it: acknowledge, assign, add a note. Each
is validated by the API's own request model, written as the signed-in user (the audit record
and the incident's timeline name them) and answered with a redirect back to the page."""

from __future__ import annotations

from urllib.parse import quote

import anyio
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response
from pydantic import ValidationError

from service.api.people_schemas import AssignRequest, NoteRequest
from service.ui.forms import writer, writing_form
from service.ui.page import redirect, store

router = APIRouter()


def _back(incident_id: str) -> str:
    return f"/ui/incidents/{quote(incident_id)}"


@router.post("/incidents/{incident_id}/ack")
async def acknowledge(request: Request, incident_id: str) -> Response:
    form = await writing_form(request)
    if isinstance(form, Response):
        return form
    db, who = store(request), writer(request)
    inc = await anyio.to_thread.run_sync(lambda: db.acknowledge(incident_id, who))
    if inc is None:
        raise HTTPException(status_code=404, detail="unknown incident")
    return redirect(request, _back(incident_id), done="acked")


@router.post("/incidents/{incident_id}/assign")
async def assign(request: Request, incident_id: str) -> Response:
    form = await writing_form(request)
    if isinstance(form, Response):
        return form
    who = writer(request)
    name = str(form.get("assignee") or "").strip()
    if form.get("me"):
        name = who.name
    try:
        body = AssignRequest(assignee=name or None)
    except ValidationError:
        return redirect(request, _back(incident_id), error="assign")
    db = store(request)
    inc = await anyio.to_thread.run_sync(lambda: db.assign(incident_id, body.assignee, who))
    if inc is None:
        raise HTTPException(status_code=404, detail="unknown incident")
    return redirect(request, _back(incident_id), done="assigned")


@router.post("/incidents/{incident_id}/notes")
async def add_note(request: Request, incident_id: str) -> Response:
    form = await writing_form(request)
    if isinstance(form, Response):
        return form
    try:
        body = NoteRequest(text=str(form.get("text") or ""))
    except ValidationError:
        return redirect(request, _back(incident_id), error="note")
    db, who = store(request), writer(request)
    inc = await anyio.to_thread.run_sync(lambda: db.add_note(incident_id, body.text, who))
    if inc is None:
        raise HTTPException(status_code=404, detail="unknown incident")
    return redirect(request, _back(incident_id) + "#timeline-h", done="noted")
