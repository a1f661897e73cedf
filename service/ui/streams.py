"""The streams page: every stream the service follows (most recently updated first), its
state now (starting, stalled, ready, serving, failed, stopped), its startup ladder and its
open incidents; ``?state=`` shows one state."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from service.api.deps import get_ctx
from service.taxonomy import STAGES
from service.ui import data, present
from service.ui.page import denied_read, render, store

router = APIRouter()


class ShownStream(data.StreamRow):
    view: present.StreamStateView  # its state now


STREAM_STATES = ("starting", "stalled", "ready", "serving", "failed", "stopped")


@router.get("/streams", response_class=HTMLResponse)
def streams_page(request: Request) -> Response:
    denied = denied_read(request)
    if denied:
        return denied
    now = time.time()
    ctx = get_ctx(request)
    # the deadlines in force: the setting when given, else the rule book's (a team's file too)
    deadlines = ctx.settings.stall.deadlines_if_set() or ctx.rulebook.judgements.stalls.deadlines_s
    listed = data.list_streams(store(request))
    rows: list[ShownStream] = [
        {**st, "view": present.stream_state(st, now, deadlines)} for st in listed
    ]
    wanted = request.query_params.get("state") or ""
    counts = {s: sum(1 for r in rows if r["view"]["state"] == s) for s in STREAM_STATES}
    if wanted in STREAM_STATES:
        rows = [r for r in rows if r["view"]["state"] == wanted]
    return render(
        request,
        "streams.html",
        nav="streams",
        title="Streams",
        streams=rows,
        state=wanted,
        states=STREAM_STATES,
        counts=counts,
        truncated=data.MAX_STREAMS if len(listed) >= data.MAX_STREAMS else 0,
        stage_index={s: i for i, s in enumerate(STAGES)},
        stages=STAGES,
        labels=present.LADDER_LABEL,
    )
