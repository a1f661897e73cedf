"""``POST /slack/actions``: a Slack app's interactivity requests (the buttons on an
incident's message), verified with ``notify.slack.signing_secret`` (401 otherwise; 404 when
no secret is set). The Slack user who clicked is the actor; the message is updated through
Slack's ``response_url`` after the answer (Slack wants one within three seconds)."""

from __future__ import annotations

import time

import anyio
from fastapi import APIRouter, BackgroundTasks, HTTPException, Request, Response

from service.api.body import read_body
from service.api.deps import Ctx, StoreDep
from service.notify.slack_app import SlackRefused, act, parse, update_message, verify

router = APIRouter(tags=["slack"])
MAX_BODY = 64 * 1024


@router.post(
    "/slack/actions",
    status_code=200,
    responses={401: {"description": "not signed by the Slack app"}, 404: {"description": "off"}},
    summary="Slack's interactivity requests (Acknowledge, Silence 4 h)",
)
async def slack_actions(
    request: Request, ctx: Ctx, store: StoreDep, background: BackgroundTasks
) -> Response:
    cfg = ctx.settings.notify.slack
    if cfg.signing_secret is None:
        raise HTTPException(status_code=404, detail="no Slack app configured")
    body = await read_body(request, MAX_BODY)
    try:
        verify(
            cfg,
            request.headers.get("x-slack-request-timestamp"),
            request.headers.get("x-slack-signature"),
            body,
            time.time(),
        )
        click = parse(body)
    except SlackRefused as exc:
        raise HTTPException(status_code=401, detail=f"refused: {exc}") from None
    if click is None:
        return Response(status_code=200)
    said = await anyio.to_thread.run_sync(lambda: act(store, click, time.time()))
    if said is not None:
        background.add_task(
            update_message, store, cfg, click, said, ctx.settings.notify.external_url
        )
    return Response(status_code=200)
