"""On-call's hands on an incident: acknowledge it, assign it, write a note; and who did what
(``GET /audit``). Every write is recorded under the authenticated actor."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from service.api.auth import ReadAuth, Writer
from service.api.deps import StoreDep
from service.api.people_schemas import AssignRequest, AuditRecord, NoteRequest
from service.api.routers.incidents import not_found
from service.api.schemas import Incident
from service.store.views import AuditEntry, IncidentDetail

router = APIRouter(tags=["on-call"])
UNKNOWN: dict[int | str, dict[str, Any]] = {404: {"description": "unknown incident"}}


@router.post(
    "/incidents/{incident_id}/ack",
    response_model=Incident,
    responses=UNKNOWN,
    summary="Acknowledge: you are on it (PagerDuty stops escalating; Slack says who)",
)
def acknowledge(incident_id: str, store: StoreDep, actor: Writer) -> IncidentDetail:
    inc = store.acknowledge(incident_id, actor.who)
    if inc is None:
        raise not_found(incident_id)
    return inc


@router.post(
    "/incidents/{incident_id}/assign",
    response_model=Incident,
    responses=UNKNOWN,
    summary="Give the incident to someone (null: nobody)",
)
def assign(incident_id: str, body: AssignRequest, store: StoreDep, actor: Writer) -> IncidentDetail:
    inc = store.assign(incident_id, body.assignee, actor.who)
    if inc is None:
        raise not_found(incident_id)
    return inc


@router.post(
    "/incidents/{incident_id}/notes",
    response_model=Incident,
    status_code=201,
    responses=UNKNOWN,
    summary="Add a note to the incident's timeline",
)
def add_note(incident_id: str, body: NoteRequest, store: StoreDep, actor: Writer) -> IncidentDetail:
    inc = store.add_note(incident_id, body.text, actor.who)
    if inc is None:
        raise not_found(incident_id)
    return inc


@router.get(
    "/audit",
    response_model=list[AuditRecord],
    dependencies=[ReadAuth],
    summary="Who did what, newest first (append-only)",
)
def audit(
    store: StoreDep,
    target_kind: Literal["incident", "silence", "receiver"] | None = None,
    target_id: str | None = None,
    actor: str | None = None,
    before_id: Annotated[int | None, Query(description="page back: the last id seen")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[AuditEntry]:
    return store.audit(
        target_kind=target_kind,
        target_id=target_id,
        actor=actor,
        before_id=before_id,
        limit=limit,
    )
