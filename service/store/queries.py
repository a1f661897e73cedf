"""Read side: incidents, streams, positions and counters as plain dicts for the API; the
saved state the pipeline's stream tracker loads (streams, workloads, novelty templates)."""

from __future__ import annotations

import base64
import json
from typing import Any, TypedDict

from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.engine import Connection, RowMapping

from service.incidents.incident import Incident
from service.incidents.incident_json import IncidentBody
from service.incidents.snapshots import NoveltySnapshot, StreamSnapshot, shown_reach
from service.incidents.workload import WorkloadSnapshot
from service.store.fleets import members as fleet_members
from service.store.schema import (
    deliveries,
    feedback,
    forward_chunks,
    incidents,
    novelty,
    outbox,
    quarantine,
    source_positions,
    streams,
    workloads,
)
from service.store.views import (
    DeliveryView,
    FeedbackView,
    IncidentDetail,
    IncidentView,
    QuarantineRow,
    StoreStats,
    StreamView,
)

MAX_LIMIT = 500


class IncidentFilters(TypedDict, total=False):
    """Columns an incident list is filtered on (equality; None: no filter)."""

    tier: str | None
    category: str | None
    stage: str | None
    status: str | None
    severity: str | None
    namespace: str | None
    pod: str | None
    node: str | None
    stream: str | None
    fleet_id: str | None


def load_stream(conn: Connection, key: str) -> StreamSnapshot | None:
    state: StreamSnapshot | None = conn.execute(
        select(streams.c.state).where(streams.c.key == key)
    ).scalar()
    return state


def load_stream_versioned(conn: Connection, key: str) -> tuple[StreamSnapshot | None, int | None]:
    """(snapshot, version); (None, None) for an unknown stream."""
    row = conn.execute(
        select(streams.c.state, streams.c.version).where(streams.c.key == key)
    ).first()
    return (None, None) if row is None else (row.state, int(row.version))


def load_workload_versioned(
    conn: Connection, key: str
) -> tuple[WorkloadSnapshot | None, int | None]:
    """(state, version) of a workload; (None, None) for an unknown one."""
    row = conn.execute(
        select(workloads.c.state, workloads.c.version).where(workloads.c.key == key)
    ).first()
    return (None, None) if row is None else (row.state, int(row.version))


def load_novelty(conn: Connection, name: str) -> NoveltySnapshot | None:
    state: NoveltySnapshot | None = conn.execute(
        select(novelty.c.state).where(novelty.c.name == name)
    ).scalar()
    return state


def applied_position(conn: Connection, source: str, partition: str) -> int | None:
    t = source_positions.c
    return conn.execute(
        select(t.position).where(t.source == source, t.partition == partition)
    ).scalar()


def chunk_seen(conn: Connection, chunk_id: str) -> bool:
    stmt = select(forward_chunks.c.chunk_id).where(forward_chunks.c.chunk_id == chunk_id)
    return conn.execute(stmt).first() is not None


def incident_view(row: RowMapping) -> IncidentView:
    """The summary plus what the API shows beside it. ``opened_at`` is the log time of the
    root-cause line, or when the store first saw the incident if the log carried no time."""
    body: IncidentBody = row["body"]
    return {
        **Incident.from_dict(body).summary(),
        "opened_at": row["opened_at"],
        "stream": row["stream"],
        "namespace": row["namespace"],
        "pod": row["pod"],
        "node": row["node"],
        "updated_at": row["updated_at"],
        "version": row["version"],
        "meta": body.get("meta") or {},
        "facts": body.get("facts") or {},
        "timeline": body.get("timeline") or {},
        "fleet_id": row.get("fleet_id"),
    }


def get_incident(conn: Connection, incident_id: str) -> IncidentDetail | None:
    row = conn.execute(select(incidents).where(incidents.c.id == incident_id)).mappings().first()
    if row is None:
        return None
    d = deliveries.c
    delivered: list[DeliveryView] = [
        {
            "receiver": r.receiver,
            "version": r.version,
            "kind": r.kind,
            "status": r.status,
            "attempts": r.attempts,
            "sent_at": r.sent_at,
            "next_attempt_at": r.next_attempt_at,
            "last_error": r.last_error,
        }
        for r in conn.execute(
            select(
                d.receiver,
                d.version,
                outbox.c.kind,
                d.status,
                d.attempts,
                d.sent_at,
                d.next_attempt_at,
                d.last_error,
            )
            .join(outbox, outbox.c.id == d.event_id)
            .where(d.incident_id == incident_id)
            .order_by(d.version, d.receiver)
        )
    ]
    fleet = (row["body"].get("meta") or {}).get("fleet")
    return {
        **incident_view(row),
        "deliveries": delivered,
        "members": fleet_members(conn, incident_id) if fleet else None,
        "feedback": [
            _feedback(r)
            for r in conn.execute(
                select(feedback)
                .where(feedback.c.incident_id == incident_id)
                .order_by(feedback.c.id)
            ).mappings()
        ],
    }


def where(
    stmt: Select[Any], filters: IncidentFilters, since: float | None, until: float | None = None
) -> Select[Any]:
    """``stmt`` over the incidents table narrowed to ``filters`` (a None value: no filter)
    and to ``opened_at`` within [since, until]."""
    t = incidents.c
    for name, value in filters.items():
        if value is not None:
            stmt = stmt.where(t[name] == value)
    if since is not None:
        stmt = stmt.where(t.opened_at >= since)
    if until is not None:
        stmt = stmt.where(t.opened_at <= until)
    return stmt


def list_incidents(
    conn: Connection,
    filters: IncidentFilters,
    since: float | None,
    limit: int,
    cursor: str | None,
    until: float | None = None,
) -> tuple[list[IncidentView], str | None]:
    """Newest first (by ``opened_at``, then id), keyset-paginated; ``since`` / ``until`` keep
    incidents opened within them. ValueError for a cursor that cannot be read."""
    t = incidents.c
    stmt = where(select(incidents), filters, since, until)
    if cursor:
        opened, last_id = _decode_cursor(cursor)
        stmt = stmt.where(or_(t.opened_at < opened, and_(t.opened_at == opened, t.id < last_id)))
    limit = max(1, min(int(limit), MAX_LIMIT))
    rows = (
        conn.execute(stmt.order_by(t.opened_at.desc(), t.id.desc()).limit(limit + 1))
        .mappings()
        .all()
    )
    items = [incident_view(r) for r in rows[:limit]]
    nxt = (
        _encode_cursor(rows[limit - 1]["opened_at"], rows[limit - 1]["id"])
        if len(rows) > limit
        else None
    )
    return items, nxt


def stream(conn: Connection, key: str) -> StreamView | None:
    row = conn.execute(select(streams).where(streams.c.key == key)).mappings().first()
    if row is None:
        return None
    st: StreamSnapshot = row["state"]
    open_ids = (
        conn.execute(
            select(incidents.c.id)
            .where(incidents.c.stream == key, incidents.c.status == "open")
            .order_by(incidents.c.opened_at)
        )
        .scalars()
        .all()
    )
    stage, timeline = shown_reach(st)
    return {
        "stream": key,
        "status": st.get("status"),
        "stage": stage,
        "timeline": timeline,
        "facts": st.get("facts") or {},
        "meta": st.get("meta") or {},
        "run": st.get("run", 0),
        "runs_failed": st.get("runs_failed", 0),
        "lines": st.get("seq", 0),
        "last_line": st.get("last_line", ""),
        "last_time": st.get("last_time"),
        "updated_at": row["updated_at"],
        "open_incidents": list(open_ids),
    }


def stats(conn: Connection) -> StoreStats:
    t = incidents.c

    def counts(col: Any, table: Any = incidents) -> dict[str, int]:
        return {
            str(k): int(n)
            for k, n in conn.execute(select(col, func.count()).select_from(table).group_by(col))
        }

    by_status = counts(t.status)
    return {
        "incidents_total": sum(by_status.values()),
        "incidents_open": by_status.get("open", 0),
        "incidents_by_status": by_status,
        "incidents_by_tier": counts(t.tier),
        "incidents_by_category": counts(t.category),
        "incidents_by_severity": counts(t.severity),
        "deliveries_by_status": counts(deliveries.c.status, deliveries),
        "outbox_pending": int(
            conn.execute(
                select(func.count()).select_from(outbox).where(outbox.c.expanded_at.is_(None))
            ).scalar_one()
        ),
        "streams": int(conn.execute(select(func.count()).select_from(streams)).scalar_one()),
    }


def count_open(conn: Connection) -> int:
    return int(
        conn.execute(
            select(func.count()).select_from(incidents).where(incidents.c.status == "open")
        ).scalar_one()
    )


def _feedback(r: RowMapping) -> FeedbackView:
    return {
        "id": r["id"],
        "incident_id": r["incident_id"],
        "correct": bool(r["correct"]),
        "category": r["category"],
        "comment": r["comment"],
        "created_at": r["created_at"],
    }


def _encode_cursor(opened_at: float, incident_id: str) -> str:
    raw = json.dumps([opened_at, incident_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        opened, incident_id = json.loads(raw)
        return float(opened), str(incident_id)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"invalid cursor {cursor!r}") from exc


def list_quarantine(conn: Connection, limit: int) -> list[QuarantineRow]:
    """Quarantined records, newest first."""
    q = quarantine.c
    rows = conn.execute(select(quarantine).order_by(q.id.desc()).limit(limit)).mappings()
    return [
        {
            "id": r["id"],
            "source": r["source"],
            "stream": r["stream"],
            "position": r["position"],
            "reason": r["reason"],
            "error": r["error"],
            "text": r["text"],
            "length": r["length"],
            "created_at": r["created_at"],
        }
        for r in rows
    ]
