"""``/stats``: counts from the store."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.auth import ReadAuth
from service.api.deps import StoreDep
from service.api.schemas import Stats
from service.store.views import StoreStats

router = APIRouter(tags=["stats"])


@router.get("/stats", response_model=Stats, dependencies=[ReadAuth])
def stats(store: StoreDep) -> StoreStats:
    return store.stats()
