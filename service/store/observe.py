"""Read-only queries for re-posting open alerts (Alertmanager) and for the gauges of
``/metrics`` (open incidents by tier and category, pending deliveries, outbox backlog)."""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy import exists, func, select
from sqlalchemy.engine import Connection

from service.incidents.incident_json import IncidentBody
from service.metrics import StoreGauges
from service.store.schema import deliveries, incidents, outbox

ID_CHUNK = 500  # ids per IN (...) list


def open_told(conn: Connection, receiver: str, limit: int = 10_000) -> list[IncidentBody]:
    """Bodies of the open incidents ``receiver`` was sent a message about, oldest first."""
    d, i = deliveries.c, incidents.c
    rows = conn.execute(
        select(i.body)
        .where(
            i.status == "open",
            exists().where(d.incident_id == i.id, d.receiver == receiver, d.status == "sent"),
        )
        .order_by(i.opened_at, i.id)
        .limit(limit)
    )
    return [r.body for r in rows]


def incidents_by_id(conn: Connection, ids: list[str]) -> list[IncidentBody]:
    """The bodies of these incidents, with the row's status."""
    out: list[IncidentBody] = []
    for part in _chunks(ids, ID_CHUNK):
        rows = conn.execute(
            select(incidents.c.body, incidents.c.status).where(incidents.c.id.in_(part))
        )
        for r in rows:
            body: IncidentBody = r.body
            out.append({**body, "status": r.status})
    return out


def gauges(conn: Connection, now: float) -> StoreGauges:
    """``open``: {(tier, category, namespace or ""): count}; ``pending``: {receiver: (count, oldest age s)}
    of deliveries not sent yet; ``outbox``: (events not expanded, oldest age s)."""
    i, d, o = incidents.c, deliveries.c, outbox.c
    open_by = {
        (str(t), str(c), str(ns or "")): int(n)
        for t, c, ns, n in conn.execute(
            select(i.tier, i.category, i.namespace, func.count())
            .where(i.status == "open")
            .group_by(i.tier, i.category, i.namespace)
        )
    }
    pending = {
        str(r): (int(n), max(0.0, now - float(oldest)) if oldest is not None else 0.0)
        for r, n, oldest in conn.execute(
            select(d.receiver, func.count(), func.min(d.created_at))
            .where(d.status == "pending")
            .group_by(d.receiver)
        )
    }
    n, oldest = conn.execute(
        select(func.count(), func.min(o.created_at)).where(o.expanded_at.is_(None))
    ).one()
    backlog = (int(n), max(0.0, now - float(oldest)) if oldest is not None else 0.0)
    return {"open": open_by, "pending": pending, "outbox": backlog}


def _chunks(items: list[str], n: int) -> Iterator[list[str]]:
    for k in range(0, len(items), n):
        yield items[k : k + n]
