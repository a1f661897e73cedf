"""``/silences``: mute notifications for matching incidents for a while."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response

from service.api.auth import ReadAuth, WriteAuth
from service.api.deps import StoreDep
from service.api.schemas import Silence, SilenceRequest
from service.store.views import SilenceView

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
