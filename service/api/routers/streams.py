"""``/streams/{key}``: a workload stream's status, stage timeline and facts."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from service.api.auth import ReadAuth
from service.api.deps import StoreDep
from service.api.schemas import Stream
from service.store.views import StreamView

router = APIRouter(prefix="/streams", tags=["streams"])


@router.get(
    "/{key:path}",
    response_model=Stream,
    dependencies=[ReadAuth],
    responses={404: {"description": "unknown stream"}},
    summary="One stream (key namespace/pod/container, container id or tag)",
)
def get_stream(key: str, store: StoreDep) -> StreamView:
    st = store.stream(key)
    if st is None:
        raise HTTPException(status_code=404, detail=f"stream {key} not found")
    return st
