"""What people do to incidents, and the append-only record of it.

Every write a person makes goes through :func:`record` in the same transaction as the change
itself: one ``audit`` row (when, who, through what, which action on which target, details),
never updated or deleted. Acknowledging an incident and assigning it also set the incident's
``acked_*`` / ``assignee`` columns (the pipeline never writes them, so a later classification
of the same incident keeps them); an acknowledgement is news for the receivers that paged
(a new version and an ``acknowledged`` outbox event: PagerDuty stops escalating, Slack says
who took it).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.engine import Connection, RowMapping

from service.incidents.codec import JsonObject
from service.incidents.incident import Incident
from service.store.dialect import insert
from service.store.schema import audit, incidents, outbox
from service.store.views import AuditEntry

MAX_NOTE = 4000


@dataclass(frozen=True, slots=True)
class Who:
    """The actor of a write: a name and how they were known (user, token, proxy, slack ...)."""

    name: str
    via: str


SENTINEL = Who("vllm-sentinel", "service")


def record(
    conn: Connection,
    who: Who,
    action: str,
    target_kind: str,
    target_id: str,
    at: float,
    detail: JsonObject | None = None,
) -> None:
    """Append one audit row (inside the caller's transaction)."""
    conn.execute(
        insert(conn, audit).values(
            at=at,
            actor=who.name,
            via=who.via,
            action=action,
            target_kind=target_kind,
            target_id=target_id,
            detail=detail or {},
        )
    )


def entries(
    conn: Connection,
    *,
    target_kind: str | None = None,
    target_id: str | None = None,
    actor: str | None = None,
    before_id: int | None = None,
    limit: int = 100,
) -> list[AuditEntry]:
    """Newest first; ``before_id`` pages back."""
    a = audit.c
    stmt = select(audit).order_by(a.id.desc()).limit(limit)
    if target_kind is not None:
        stmt = stmt.where(a.target_kind == target_kind)
    if target_id is not None:
        stmt = stmt.where(a.target_id == target_id)
    if actor is not None:
        stmt = stmt.where(a.actor == actor)
    if before_id is not None:
        stmt = stmt.where(a.id < before_id)
    return [entry(r) for r in conn.execute(stmt).mappings()]


def entry(r: RowMapping) -> AuditEntry:
    return {
        "id": int(r["id"]),
        "at": float(r["at"]),
        "actor": r["actor"],
        "via": r["via"],
        "action": r["action"],
        "target_kind": r["target_kind"],
        "target_id": r["target_id"],
        "detail": r["detail"] or {},
    }


def acknowledge(conn: Connection, incident_id: str, who: Who, at: float) -> bool | None:
    """The incident is being handled by ``who``: recorded, and (the first time, while it is
    open) a new version with an ``acknowledged`` outbox event. None: unknown id; False: it
    was acknowledged (or resolved) already, nothing changed."""
    t = incidents.c
    row = conn.execute(
        select(t.version, t.status, t.body, t.acked_at).where(t.id == incident_id).with_for_update()
    ).first()
    if row is None:
        return None
    if row.acked_at is not None or row.status == "resolved":
        return False
    version = int(row.version) + 1
    conn.execute(
        update(incidents)
        .where(t.id == incident_id)
        .values(acked_at=at, acked_by=who.name, acked_via=who.via, version=version, changed_at=at)
    )
    conn.execute(
        insert(conn, outbox).values(
            incident_id=incident_id,
            version=version,
            kind="acknowledged",
            created_at=at,
            snapshot=Incident.from_dict(row.body).summary(),
        )
    )
    record(conn, who, "ack", "incident", incident_id, at)
    return True


def assign(
    conn: Connection, incident_id: str, assignee: str | None, who: Who, at: float
) -> bool | None:
    """``assignee`` owns the incident now (None: nobody). None: unknown id."""
    t = incidents.c
    before = conn.execute(select(t.assignee).where(t.id == incident_id).with_for_update()).first()
    if before is None:
        return None
    conn.execute(update(incidents).where(t.id == incident_id).values(assignee=assignee))
    record(
        conn,
        who,
        "assign",
        "incident",
        incident_id,
        at,
        {"assignee": assignee, "previous": before.assignee},
    )
    return True


def note(conn: Connection, incident_id: str, text: str, who: Who, at: float) -> bool | None:
    """A note on the incident (kept in the audit record only). None: unknown id."""
    found = conn.execute(select(incidents.c.id).where(incidents.c.id == incident_id)).first()
    if found is None:
        return None
    record(conn, who, "note", "incident", incident_id, at, {"text": text[:MAX_NOTE]})
    return True
