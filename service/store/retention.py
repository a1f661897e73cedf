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

from collections.abc import Callable
from contextlib import AbstractContextManager

from sqlalchemy import ColumnElement, Table, delete, exists, select
from sqlalchemy.engine import Connection

from service.store.schema import deliveries, feedback, incidents, outbox, streams, workloads

BATCH = 500
DAY = 86_400.0


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


def _idle(table: Table, before: float, *also: ColumnElement[bool]) -> list[ColumnElement[bool]]:
    return [table.c.updated_at < before, *also]


def expired_streams(conn: Connection, before: float, limit: int = BATCH) -> list[str]:
    open_incident = exists().where(
        incidents.c.stream == streams.c.key, incidents.c.status == "open"
    )
    return _oldest(conn, streams, _idle(streams, before, ~open_incident), limit)


def expired_workloads(conn: Connection, before: float, limit: int = BATCH) -> list[str]:
    return _oldest(conn, workloads, _idle(workloads, before), limit)


def delete_streams(conn: Connection, keys: list[str], before: float) -> int:
    return _delete_idle(conn, streams, keys, before)


def delete_workloads(conn: Connection, keys: list[str], before: float) -> int:
    return _delete_idle(conn, workloads, keys, before)


def _oldest(
    conn: Connection, table: Table, where: list[ColumnElement[bool]], limit: int
) -> list[str]:
    """Keys of ``table`` (streams, workloads) matching ``where``, least recently written
    first."""
    stmt = select(table.c.key).where(*where).order_by(table.c.updated_at).limit(limit)
    return list(conn.execute(stmt).scalars())


def _delete_idle(conn: Connection, table: Table, keys: list[str], before: float) -> int:
    """Rows of ``keys`` still idle (re-checked: a batch may have written one since it was
    selected)."""
    if not keys:
        return 0
    return conn.execute(delete(table).where(table.c.key.in_(keys), *_idle(table, before))).rowcount


# kind → (select the expired, delete them, the setting that ages them)
_KINDS: dict[str, tuple[Callable[[Connection, float], list[str]], Callable[..., int], str]] = {
    "incidents": (expired_incidents, delete_incidents, "incidents"),
    "streams": (expired_streams, delete_streams, "streams"),
    "workloads": (expired_workloads, delete_workloads, "streams"),
}


def prune(
    write: Callable[[], AbstractContextManager[Connection]],
    now: float,
    days: dict[str, float],
    max_batches: int,
) -> dict[str, int]:
    """Delete what is past its retention (``days``: "incidents" / "streams" → days, 0
    keeps forever), :data:`BATCH` rows per ``write()`` transaction, at most ``max_batches``
    transactions of each kind. Returns rows deleted by kind."""
    out = dict.fromkeys(_KINDS, 0)
    for kind, (pick, drop, setting) in _KINDS.items():
        if days[setting] <= 0:
            continue
        before = now - days[setting] * DAY
        for _ in range(max_batches):
            with write() as conn:
                keys = pick(conn, before)
                out[kind] += drop(conn, keys, before)
            if len(keys) < BATCH:
                break
    return out
