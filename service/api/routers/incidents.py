"""``/incidents``: list with filters, search and cursor pagination, one by id, resolve,
feedback (acknowledge, assign and notes: :mod:`service.api.routers.oncall`)."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from service.api.auth import ReadAuth, Writer
from service.api.deps import StoreDep
from service.api.schemas import (
    Category,
    Feedback,
    FeedbackRequest,
    Incident,
    IncidentPage,
    IncidentStatus,
    ResolveRequest,
    Severity,
    Stage,
    Tier,
)
from service.api.timespec import parse_instant
from service.store.views import FeedbackView, IncidentDetail

router = APIRouter(prefix="/incidents", tags=["incidents"])
MAX_LIMIT = 500


def not_found(incident_id: str) -> HTTPException:
    return HTTPException(status_code=404, detail=f"incident {incident_id} not found")


@router.get(
    "", response_model=IncidentPage, dependencies=[ReadAuth], summary="List incidents, newest first"
)
def list_incidents(
    store: StoreDep,
    tier: Tier | None = None,
    category: Category | None = None,
    stage: Stage | None = None,
    status: IncidentStatus | None = None,
    severity: Severity | None = None,
    namespace: str | None = None,
    pod: str | None = None,
    node: str | None = None,
    stream: str | None = None,
    q: Annotated[
        str | None,
        Query(
            max_length=500,
            description="words that must all occur in the incident's pod, namespace, node, "
            "stream, model, image, tier, category, stage or root-cause line (any case)",
            examples=["llama-0 oom"],
        ),
    ] = None,
    fleet_id: Annotated[
        str | None, Query(description="only the members of this fleet incident")
    ] = None,
    since: Annotated[
        str | None,
        Query(
            description="only incidents opened at or after this time: epoch seconds or ISO 8601",
            examples=["2026-12-02T14:00:00Z"],
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> IncidentPage:
    try:
        since_t = parse_instant(since) if since is not None else None
    except ValueError as exc:
        raise HTTPException(status_code=422, detail=f"since: {exc}") from None
    try:
        items, next_cursor = store.list_incidents(
            tier=tier,
            category=category,
            stage=stage,
            status=status,
            severity=severity,
            namespace=namespace,
            pod=pod,
            node=node,
            stream=stream,
            since=since_t,
            limit=limit,
            cursor=cursor,
            fleet_id=fleet_id,
            q=q,
        )
    except ValueError as exc:  # a cursor the store cannot read
        raise HTTPException(status_code=400, detail=f"bad cursor: {exc}") from None
    return IncidentPage(items=items, next_cursor=next_cursor, count=len(items))


@router.get(
    "/{incident_id}",
    response_model=Incident,
    dependencies=[ReadAuth],
    responses={404: {"description": "unknown incident"}},
)
def get_incident(incident_id: str, store: StoreDep) -> IncidentDetail:
    inc = store.get_incident(incident_id)
    if inc is None:
        raise not_found(incident_id)
    return inc


@router.post(
    "/{incident_id}/resolve",
    response_model=Incident,
    responses={404: {"description": "unknown incident"}},
    summary="Resolve an incident by hand (e.g. after fixing the node)",
)
def resolve_incident(
    incident_id: str, body: ResolveRequest, store: StoreDep, actor: Writer
) -> IncidentDetail:
    inc = store.resolve_incident(incident_id, body.reason, at=time.time(), by=actor.who)
    if inc is None:
        raise not_found(incident_id)
    return inc


@router.post(
    "/{incident_id}/feedback",
    response_model=Feedback,
    status_code=201,
    responses={404: {"description": "unknown incident"}},
    summary="Record whether the classification was right (feeds retraining)",
)
def add_feedback(
    incident_id: str, body: FeedbackRequest, store: StoreDep, actor: Writer
) -> FeedbackView:
    fb = store.add_feedback(incident_id, body.correct, body.category, body.comment, by=actor.who)
    if fb is None:
        raise not_found(incident_id)
    return fb
