"""``/silences``: mute notifications for matching incidents for a while."""

from __future__ import annotations

import time
from typing import Any, cast

from fastapi import APIRouter, HTTPException, Response

from service import labels
from service.api.auth import ReadAuth, Writer
from service.api.deps import StoreDep
from service.api.silence_schemas import (
    PreviewItem,
    Silence,
    SilenceEdit,
    SilenceExtend,
    SilencePreviewOut,
    SilencePreviewRequest,
    SilenceRequest,
)
from service.notify.silences import preview
from service.store.views import IncidentView, SilenceView

LISTED = 100
UNKNOWN: dict[int | str, dict[str, Any]] = {404: {"description": "unknown silence, or ended"}}

router = APIRouter(prefix="/silences", tags=["silences"])


@router.get("", response_model=list[Silence], dependencies=[ReadAuth])
def list_silences(store: StoreDep, active: bool = False) -> list[SilenceView]:
    """All silences, or only those in force now (``?active=true``)."""
    return store.list_silences(active_only=active)


@router.post("", response_model=Silence, status_code=201)
def create_silence(body: SilenceRequest, store: StoreDep, actor: Writer) -> SilenceView:
    """Made by the authenticated user (``created_by``); recorded in ``GET /audit``."""
    new = body.resolved()
    try:
        return store.create_silence(
            new.matchers,
            new.ends_at,
            by=actor.who,
            comment=new.comment,
            starts_at=new.starts_at,
            incident_id=new.incident,
        )
    except ValueError as exc:  # the store's own checks (matchers, window)
        raise HTTPException(status_code=422, detail=str(exc)) from None


@router.get("/{silence_id}", response_model=Silence, dependencies=[ReadAuth], responses=UNKNOWN)
def get_silence(silence_id: str, store: StoreDep) -> SilenceView:
    got = store.get_silence(silence_id)
    if got is None:
        raise _unknown(silence_id)
    return got


@router.patch("/{silence_id}", response_model=Silence, responses=UNKNOWN)
def edit_silence(silence_id: str, body: SilenceEdit, store: StoreDep, actor: Writer) -> SilenceView:
    """Change a silence in force (comment, end, matchers); 404 for an unknown or ended one."""
    try:
        got = store.edit_silence(
            silence_id,
            actor.who,
            comment=body.comment,
            ends_at=cast(float | None, body.ends_at),
            matchers=cast(dict[str, list[str]] | None, body.matchers),
        )
    except ValueError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    if got is None:
        raise _unknown(silence_id)
    return got


@router.post("/{silence_id}/extend", response_model=Silence, responses=UNKNOWN)
def extend_silence(
    silence_id: str, body: SilenceExtend, store: StoreDep, actor: Writer
) -> SilenceView:
    """More time for a silence in force; 404 for an unknown or ended one."""
    got = store.extend_silence(silence_id, body.seconds, actor.who)
    if got is None:
        raise _unknown(silence_id)
    return got


def _unknown(silence_id: str) -> HTTPException:
    return HTTPException(status_code=404, detail=f"silence {silence_id} not found or ended")


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


@router.delete("/{silence_id}", status_code=204, responses=UNKNOWN)
def delete_silence(silence_id: str, store: StoreDep, actor: Writer) -> Response:
    """Expire the silence now (its record stays, ``GET /audit`` says who ended it)."""
    if not store.delete_silence(silence_id, actor.who):
        raise _unknown(silence_id)
    return Response(status_code=204)
