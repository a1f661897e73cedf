"""The receivers page (``/ui/receivers``): where alerts go (name, type, host, matchers) and a
button per receiver that sends it a test notification (:mod:`service.notify.trial`, the API's
``POST /receivers/{name}/test``). The button is a write: the CSRF token and a user who may
write; the audit records it under that user, and the page shows each receiver's last test
(who, when, what the receiver answered) from the audit."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from service.api.deps import get_ctx
from service.api.routers import receivers as receivers_api
from service.store.views import AuditEntry
from service.ui.forms import writer, writing_form
from service.ui.page import denied_read, redirect, render, store

router = APIRouter()


@router.get("/receivers", response_class=HTMLResponse)
def receivers_page(request: Request) -> Response:
    denied = denied_read(request)
    if denied:
        return denied
    db = store(request)
    rows = receivers_api.receiver_rows(get_ctx(request))
    last: dict[str, AuditEntry] = {}
    for r in rows:
        tests = db.audit(target_kind="receiver", target_id=r.name, limit=1)
        if tests:
            last[r.name] = tests[0]
    return render(
        request,
        "receivers.html",
        nav="receivers",
        title="Receivers",
        receivers=rows,
        last=last,
        tested=request.query_params.get("receiver") or "",
    )


@router.post("/receivers/{name}/test")
async def test_receiver(request: Request, name: str) -> Response:
    form = await writing_form(request)
    if isinstance(form, Response):
        return form
    who = writer(request)  # 404 for an unknown receiver; the send runs off the event loop
    await receivers_api.test_receiver(get_ctx(request), store(request), name, who)
    return redirect(request, "/ui/receivers", done="tested", receiver=name)
