"""``/quarantine``: records whose classification raised, kept for inspection (their source
position was committed, so they are never retried)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.api.auth import ReadAuth
from service.api.deps import StoreDep
from service.api.schemas import QuarantinedRecord
from service.store.views import QuarantineRow

router = APIRouter(prefix="/quarantine", tags=["quarantine"])


@router.get(
    "",
    response_model=list[QuarantinedRecord],
    dependencies=[ReadAuth],
    summary="Quarantined records, newest first",
)
def list_quarantine(
    store: StoreDep, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> list[QuarantineRow]:
    return store.list_quarantine(limit)
