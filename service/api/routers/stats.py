"""``/stats``: counts from the store."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.auth import ReadAuth
from service.api.deps import StoreDep
from service.api.schemas import Stats

router = APIRouter(tags=["stats"])


@router.get("/stats", response_model=Stats, dependencies=[ReadAuth])
def stats(store: StoreDep) -> dict:
    return store.stats()
