"""``/silences``: mute notifications for matching incidents for a while."""

from __future__ import annotations

import time
from typing import cast

from fastapi import APIRouter, HTTPException, Response

from service import labels
from service.api.auth import ReadAuth, WriteAuth
from service.api.deps import StoreDep
from service.api.schemas import (
    PreviewItem,
    Silence,
    SilencePreviewOut,
    SilencePreviewRequest,
    SilenceRequest,
)
from service.notify.silences import preview
from service.store.views import IncidentView, SilenceView

LISTED = 100

router = APIRouter(prefix="/silences", tags=["silences"])


@router.get("", response_model=list[Silence], dependencies=[ReadAuth])
def list_silences(store: StoreDep, active: bool = False) -> list[SilenceView]:
    """All silences, or only those in force now (``?active=true``)."""
    return store.list_silences(active_only=active)


@router.post("", response_model=Silence, status_code=201, dependencies=[WriteAuth])
def create_silence(body: SilenceRequest, store: StoreDep) -> SilenceView:
    new = body.resolved()
    try:
        return store.create_silence(
            new.matchers,
            new.ends_at,
            created_by=new.created_by,
            comment=new.comment,
            starts_at=new.starts_at,
        )
    except ValueError as exc:  # the store's own checks (matchers, window)
        raise HTTPException(status_code=422, detail=str(exc)) from None


@router.post("/preview", response_model=SilencePreviewOut, dependencies=[ReadAuth])
def preview_silence(body: SilencePreviewRequest, store: StoreDep) -> SilencePreviewOut:
    """What a silence with these matchers would hide: the open incidents and the last day's
    it matches, and whether it reaches beyond one namespace (then creating it needs
    ``cluster_wide: true``). Creates nothing."""
    matchers = cast(dict[str, list[str]], body.matchers)  # validated: lists
    seen = preview(store, matchers, time.time())
    return SilencePreviewOut(
        open_count=len(seen.open),
        recent_count=len(seen.recent),
        open=[_item(i) for i in seen.open[:LISTED]],
        recent=[_item(i) for i in seen.recent[:LISTED]],
        namespaces=seen.namespaces,
        cluster_wide=not labels.pins_one_namespace(matchers),
        truncated=seen.truncated,
    )


def _item(i: IncidentView) -> PreviewItem:
    return PreviewItem(
        id=i["id"],
        stream=i["stream"],
        namespace=i.get("namespace"),
        pod=i.get("pod"),
        status=i["status"],
        tier=i["tier"],
        category=i["category"],
        opened_at=i.get("opened_at"),
    )


@router.delete(
    "/{silence_id}",
    status_code=204,
    dependencies=[WriteAuth],
    responses={404: {"description": "unknown silence"}},
)
def delete_silence(silence_id: str, store: StoreDep) -> Response:
    if not store.delete_silence(silence_id):
        raise HTTPException(status_code=404, detail=f"silence {silence_id} not found")
    return Response(status_code=204)
