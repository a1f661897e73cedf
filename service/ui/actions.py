"""The forms an incident's page posts: resolve it, tell whether its category was right
(acknowledge, assign and notes: :mod:`service.ui.oncall`).

Each is validated by the API's own request model (:mod:`service.api.schemas`), runs the
store's write off the event loop, and answers with a redirect back to the incident's page
(``?done=`` on success, ``?error=`` naming the form that was wrong).
"""

from __future__ import annotations

import time
from urllib.parse import quote

import anyio
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response
from pydantic import ValidationError

from service.api.schemas import FeedbackRequest, ResolveRequest
from service.ui.forms import writer, writing_form
from service.ui.page import redirect, store

router = APIRouter()


@router.post("/incidents/{incident_id}/resolve")
async def resolve(request: Request, incident_id: str) -> Response:
    form = await writing_form(request)
    if isinstance(form, Response):
        return form
    try:
        body = ResolveRequest(reason=str(form.get("reason") or "").strip())
    except ValidationError:
        return redirect(request, f"/ui/incidents/{quote(incident_id)}", error="reason")
    db, who = store(request), writer(request)
    inc = await anyio.to_thread.run_sync(
        lambda: db.resolve_incident(incident_id, body.reason, at=time.time(), by=who)
    )
    if inc is None:
        raise HTTPException(status_code=404, detail="unknown incident")
    return redirect(request, f"/ui/incidents/{quote(incident_id)}", done="resolved")


@router.post("/incidents/{incident_id}/feedback")
async def feedback(request: Request, incident_id: str) -> Response:
    form = await writing_form(request)
    if isinstance(form, Response):
        return form
    verdict = str(form.get("verdict") or "")
    try:
        body = FeedbackRequest(
            correct=verdict == "right",
            category=(str(form.get("category") or "") or None) if verdict == "wrong" else None,
            comment=str(form.get("comment") or "").strip() or None,
        )
        if verdict not in ("right", "wrong"):
            raise ValueError("verdict")
    except (ValidationError, ValueError):
        return redirect(request, f"/ui/incidents/{quote(incident_id)}", error="feedback")
    db, who = store(request), writer(request)
    fb = await anyio.to_thread.run_sync(
        lambda: db.add_feedback(incident_id, body.correct, body.category, body.comment, by=who)
    )
    if fb is None:
        raise HTTPException(status_code=404, detail="unknown incident")
    return redirect(request, f"/ui/incidents/{quote(incident_id)}", done="feedback")
