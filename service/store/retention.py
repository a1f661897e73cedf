"""Retention: what the store forgets, in short batches (each its own transaction).

* Resolved incidents whose resolution is older than ``incident_retention_days``, with their
  outbox events and deliveries. Kept whatever their age: incidents with feedback (they are
  training corrections, see ``vllm-sentinel feedback-export``) and incidents with a change
  still to deliver (an unexpanded outbox event or a pending delivery: a receiver down for
  longer than the retention still gets the resolution).
* Stream snapshots not written for ``stream_retention_days`` (no line seen), unless the
  stream still has an open incident (its snapshot is what resolves it when the workload
  comes back). A stream seen again later simply starts afresh.
* Workloads (last good facts, open failures per node) not written for
  ``stream_retention_days``: none of their pods got ready or failed for that long.

0 keeps forever.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, delete, exists, select
from sqlalchemy.engine import Connection

from service.store.schema import deliveries, feedback, incidents, outbox, streams, workloads

BATCH = 500


def _keep(before: float) -> list[ColumnElement[bool]]:
    """Conditions under which a resolved incident may go."""
    i, o, d = incidents.c, outbox.c, deliveries.c
    return [
        i.status == "resolved",
        i.resolved_at < before,
        ~exists().where(feedback.c.incident_id == i.id),
        ~exists().where(o.incident_id == i.id, o.expanded_at.is_(None)),
        ~exists().where(d.incident_id == i.id, d.status == "pending"),
    ]


def expired_incidents(conn: Connection, before: float, limit: int = BATCH) -> list[str]:
    return list(
        conn.execute(
            select(incidents.c.id)
            .where(*_keep(before))
            .order_by(incidents.c.resolved_at)
            .limit(limit)
        ).scalars()
    )


def delete_incidents(conn: Connection, ids: list[str], before: float) -> int:
    """The incidents (conditions checked again: feedback or a delivery may have appeared
    since they were selected) and the rows that hang off them (not left to ON DELETE
    CASCADE alone)."""
    if not ids:
        return 0
    gone = list(
        conn.execute(
            delete(incidents)
            .where(incidents.c.id.in_(ids), *_keep(before))
            .returning(incidents.c.id)
        ).scalars()
    )
    if gone:
        conn.execute(delete(deliveries).where(deliveries.c.incident_id.in_(gone)))
        conn.execute(delete(outbox).where(outbox.c.incident_id.in_(gone)))
    return len(gone)


def expired_streams(conn: Connection, before: float, limit: int = BATCH) -> list[str]:
    s, i = streams.c, incidents.c
    return list(
        conn.execute(
            select(s.key)
            .where(
                s.updated_at < before,
                ~exists().where(i.stream == s.key, i.status == "open"),
            )
            .order_by(s.updated_at)
            .limit(limit)
        ).scalars()
    )


def delete_streams(conn: Connection, keys: list[str], before: float) -> int:
    if not keys:
        return 0
    # re-checked: a batch may have written the stream since it was selected
    return conn.execute(
        delete(streams).where(streams.c.key.in_(keys), streams.c.updated_at < before)
    ).rowcount


def expired_workloads(conn: Connection, before: float, limit: int = BATCH) -> list[str]:
    w = workloads.c
    return list(
        conn.execute(
            select(w.key).where(w.updated_at < before).order_by(w.updated_at).limit(limit)
        ).scalars()
    )


def delete_workloads(conn: Connection, keys: list[str], before: float) -> int:
    if not keys:
        return 0
    return conn.execute(
        delete(workloads).where(workloads.c.key.in_(keys), workloads.c.updated_at < before)
    ).rowcount
