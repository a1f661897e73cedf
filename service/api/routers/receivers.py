"""The receivers the service pages (``GET /receivers``: name, type, where, matchers; never a
URL, which may hold a token) and a test notification to one (``POST
/receivers/{name}/test``, :mod:`service.notify.trial`), recorded in the audit under the
actor who sent it."""

from __future__ import annotations

from urllib.parse import urlsplit

import anyio
from fastapi import APIRouter, HTTPException
from pydantic import BaseModel

from service.api.auth import ReadAuth, Writer
from service.api.deps import Ctx, StoreDep
from service.config import ReceiverSettings
from service.context import ServiceContext
from service.incidents.codec import JsonObject
from service.notify.trial import TrialAnswer, TrialView, send_trial
from service.store import Store
from service.store.people import Who

router = APIRouter(tags=["receivers"])
ACTION = "receiver.test"


class Receiver(BaseModel):
    """A receiver as the settings name it (the URL reduced to its host)."""

    name: str
    type: str
    host: str
    match: dict[str, list[str]]
    send_resolved: bool


def host_of(r: ReceiverSettings) -> str:
    return urlsplit(r.url).netloc.rpartition("@")[2]


def receiver_rows(ctx: ServiceContext) -> list[Receiver]:
    return [
        Receiver(
            name=r.name,
            type=r.type,
            host=host_of(r),
            match=dict(r.match),
            send_resolved=r.send_resolved,
        )
        for r in ctx.settings.receivers
    ]


async def test_receiver(ctx: ServiceContext, store: Store, name: str, who: Who) -> TrialView:
    """Send the test alert to ``name`` (404: no such receiver) and record it in the audit."""
    receiver = next((r for r in ctx.settings.receivers if r.name == name), None)
    if receiver is None:
        raise HTTPException(status_code=404, detail=f"no receiver named {name!r}")
    by = f"{who.name} (the dashboard or POST /receivers/{name}/test)"
    answer = await anyio.to_thread.run_sync(lambda: send_trial(receiver, ctx.settings.notify, by))
    view = answer.to_dict()
    detail: JsonObject = {"ok": answer.ok, "status": answer.status, "error": answer.error}
    await anyio.to_thread.run_sync(
        lambda: store.record_action(who, ACTION, "receiver", name, detail)
    )
    return view


@router.get(
    "/receivers",
    response_model=list[Receiver],
    dependencies=[ReadAuth],
    summary="The receivers alerts go to (never their URLs)",
)
def receivers(ctx: Ctx) -> list[Receiver]:
    return receiver_rows(ctx)


@router.post(
    "/receivers/{name}/test",
    response_model=TrialAnswer,
    responses={404: {"description": "no such receiver"}},
    summary="Send a test notification to one receiver (recorded in the audit)",
)
async def test_notification(name: str, ctx: Ctx, store: StoreDep, actor: Writer) -> TrialView:
    return await test_receiver(ctx, store, name, actor.who)
