"""Fleet incidents in the store: detect, create once, attach members, resolve when done.

A fleet incident is an ordinary incident row (stream ``fleet/<category>/<key>=<value>``,
``meta.fleet``) committed with its own ``opened`` outbox event, so the normal delivery path
pages it once. Members point at it with ``incidents.fleet_id``.

Exactly once across instances: every fleet decision (join an open fleet, or find and create
a new one) for a category runs under one lock — a transaction-scoped advisory lock on
PostgreSQL, the database write lock (``BEGIN IMMEDIATE``) on SQLite — and reads only after
taking it, so it sees the fleets and memberships every earlier decision committed. A second
instance judging another pod of the same fleet therefore joins the first one's fleet instead
of creating (and paging) another, or wrongly finding too few unattached pods and paging its
pod alone. The id is deterministic as well (:func:`service.incidents.fleet.fleet_id`), so even
an unlocked duplicate would collide on the primary key.

Row locks are taken members first, then the fleet row, both here and when a batch resolves
members (:func:`resolve_finished`), so the two never wait on each other in a cycle (batches
never take the advisory lock).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, or_, select, text, update
from sqlalchemy.engine import Connection

from service.incidents.fleet import (
    KEYS,
    find_fleet,
    fleet_id,
    fleet_incident,
    fleet_keys,
    is_fleet,
    with_members,
)
from service.incidents.incident import Incident
from service.incidents.incident_json import IncidentBody
from service.store import deliveries, writes
from service.store.dialect import insert
from service.store.engine import is_postgres
from service.store.schema import incidents, outbox
from service.store.views import FleetMember

FLEET_PREFIX = "fleet/"
MAX_CANDIDATES = 2000


@dataclass(slots=True)
class FleetJoin:
    fleet_id: str
    body: IncidentBody  # the fleet incident, current
    created: bool  # this call created it (and its ``opened`` outbox event)


@dataclass(frozen=True, slots=True)
class Inhibit:
    """When a member's pages give way to its fleet's: ``threshold`` workloads within
    ``window_s`` of the fleet-prone categories ``prone``, and the receiver gets the fleet's
    page (``covers(fleet body)``)."""

    threshold: int
    window_s: float
    covers: Callable[[IncidentBody], bool]
    prone: frozenset[str]


def inhibit(
    conn: Connection,
    incident_id: str,
    delivery_ids: list[int],
    instance: str,
    rule: Inhibit,
    clock: Callable[[], float],
) -> str | None:
    """:meth:`~service.store.Store.inhibit_for_fleet` inside its transaction."""
    joined = join(
        conn,
        incident_id,
        threshold=rule.threshold,
        window_s=rule.window_s,
        now=clock(),
        prone=rule.prone,
    )
    if joined is None or not rule.covers(joined.body):
        return None
    note = f"fleet {joined.fleet_id}"
    deliveries.finish(conn, delivery_ids, instance, status="inhibited", now=clock(), note=note)
    return joined.fleet_id


def _body(row: Any) -> IncidentBody:
    """An incident row's body as :mod:`service.incidents.fleet` reads it (its id and
    ``opened_at`` the row's)."""
    stored: IncidentBody = row.body
    body: IncidentBody = {**stored, "id": row.id}
    if row.opened_at is not None:
        body["opened_at"] = float(row.opened_at)
    return body


def _open_fleet(conn: Connection, fid: str | None) -> Any:
    if not fid:
        return None
    row = conn.execute(
        select(incidents.c.id, incidents.c.status, incidents.c.body).where(incidents.c.id == fid)
    ).first()
    return row if row is not None and row.status == "open" else None


def join(
    conn: Connection,
    incident_id: str,
    *,
    threshold: int,
    window_s: float,
    now: float,
    prone: frozenset[str],
) -> FleetJoin | None:
    """The open fleet incident ``incident_id`` belongs to, attaching it (and creating the fleet
    when it and enough others now form one); None when it is no fleet's member."""
    t = incidents.c
    row = conn.execute(
        select(t.id, t.status, t.severity, t.category, t.opened_at, t.fleet_id, t.body).where(
            t.id == incident_id
        )
    ).first()
    if row is None:
        return None
    fleet = _open_fleet(conn, row.fleet_id)
    if fleet is not None:  # a member already, of a fleet still open
        return FleetJoin(fleet.id, fleet.body, False)
    if (
        row.status != "open"
        or row.severity != "critical"
        or row.category not in prone
        or is_fleet(row.body)
    ):
        return None
    # from here on one transaction per category at a time, every read after the lock: a
    # concurrent join that committed just before is seen whole (its fleet and members)
    _lock(conn, row.category)
    fleet = _open_fleet(conn, conn.execute(select(t.fleet_id).where(t.id == incident_id)).scalar())
    if fleet is not None:
        return FleetJoin(fleet.id, fleet.body, False)
    mine = _body(row)
    keys = fleet_keys(mine)
    # 1. an open fleet of this category sharing one of its keys: join it
    fleets = conn.execute(
        select(t.id, t.body, t.opened_at).where(
            t.category == row.category, t.status == "open", t.stream.like(FLEET_PREFIX + "%")
        )
    ).all()
    rank = {k: i for i, k in enumerate(KEYS)}

    def order(f: Any) -> tuple[int, float]:
        return rank.get(_fleet_key(f.body)[0], len(KEYS)), float(f.opened_at or 0.0)

    for f in sorted(fleets, key=order):
        key, value = _fleet_key(f.body)
        if key and keys.get(key) == value:
            return _attach(conn, f.id, [incident_id], now, created=False)
    # 2. enough open incidents of the window sharing a key with it: a new fleet
    around = float(row.opened_at)
    open_fleets = select(incidents.c.id).where(
        incidents.c.status == "open", incidents.c.stream.like(FLEET_PREFIX + "%")
    )
    recent = [
        _body(r)
        for r in conn.execute(
            select(t.id, t.opened_at, t.body)
            .where(
                t.category == row.category,
                t.status == "open",
                t.severity == "critical",
                t.id != incident_id,
                ~t.stream.like(FLEET_PREFIX + "%"),
                t.opened_at >= around - window_s,
                t.opened_at <= around + window_s,
                or_(t.fleet_id.is_(None), t.fleet_id.not_in(open_fleets)),
            )
            .order_by(t.opened_at.desc())
            .limit(MAX_CANDIDATES)
        )
    ]
    found = find_fleet(mine, recent, threshold, prone)
    if found is None:
        return None
    key, value, members = found  # (an open fleet of that key was joined in step 1)
    ids = [str(m["id"]) for m in members]
    window_start = min(float(m.get("opened_at") or now) for m in members)
    inc = fleet_incident(row.category, key, value, members, window_start, now)
    if conn.execute(select(t.id).where(t.id == inc.id)).first() is not None:
        # that id is taken by an earlier (resolved) fleet with the same first member
        inc.id = fleet_id(row.category, key, value, now)
    body = inc.to_dict()
    version = writes.upsert_incident(conn, body, 1, now)
    if version is None:  # the id exists and is resolved: leave it be
        return None
    conn.execute(
        insert(conn, outbox)
        .on_conflict_do_nothing(index_elements=[outbox.c.incident_id, outbox.c.version])
        .values(
            incident_id=inc.id,
            version=version,
            kind="opened",
            created_at=now,
            snapshot=Incident.from_dict(body).summary(),
        )
    )
    return _attach(conn, inc.id, ids, now, created=True)


def _fleet_key(body: IncidentBody) -> tuple[str, str]:
    f = (body.get("extra") or {}).get("fleet")
    return (str(f.get("key") or ""), str(f.get("value") or "")) if f else ("", "")


def _lock(conn: Connection, category: str) -> None:
    """Serialise fleet decisions for one category (until the transaction ends). SQLite: the
    write transaction holds the database lock already."""
    if is_postgres(conn):
        conn.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
            {"k": f"fleet:{category}"},
        )


def _attach(
    conn: Connection, fid: str, ids: list[str], now: float, *, created: bool
) -> FleetJoin | None:
    """Members first (their rows), then the fleet row: the lock order of this module. None
    when the fleet was resolved meanwhile (a member of a resolved fleet counts as none's)."""
    t = incidents.c
    open_fleets = select(incidents.c.id).where(
        incidents.c.status == "open", incidents.c.stream.like(FLEET_PREFIX + "%")
    )
    conn.execute(
        update(incidents)
        .where(
            t.id.in_(ids),
            t.status == "open",
            or_(t.fleet_id.is_(None), t.fleet_id.not_in(open_fleets)),
        )
        .values(fleet_id=fid)
    )
    fleet = conn.execute(select(t.body, t.status).where(t.id == fid).with_for_update()).one()
    if fleet.status != "open":
        return None
    members = [
        _body(r)
        for r in conn.execute(
            select(t.id, t.opened_at, t.body).where(t.fleet_id == fid).order_by(t.opened_at)
        )
    ]
    body = with_members(fleet.body, members, now)
    # membership is not a notifiable change: no version bump, no outbox event (the fleet's
    # first page renders the incident as it is when sent, count included)
    conn.execute(update(incidents).where(t.id == fid).values(body=body, updated_at=now))
    return FleetJoin(fid, body, created)


def resolve_finished(conn: Connection, incident_ids: list[str], now: float) -> list[str]:
    """Resolve the open fleets of these (just resolved) incidents whose members are all
    resolved now; returns the fleets resolved. Each gets one ``resolved`` outbox event."""
    if not incident_ids:
        return []
    t = incidents.c
    fids = sorted(
        set(
            conn.execute(
                select(t.fleet_id).where(
                    t.id.in_(incident_ids), t.fleet_id.is_not(None), t.status == "resolved"
                )
            ).scalars()
        )
    )
    done = []
    for fid in fids:
        # lock the fleet, then count with a fresh statement: on PostgreSQL (read committed)
        # it sees a member resolved by a concurrent transaction that held the lock before us
        status = conn.execute(select(t.status).where(t.id == fid).with_for_update()).scalar()
        if status != "open":
            continue
        members = conn.execute(
            select(t.status, func.count()).where(t.fleet_id == fid).group_by(t.status)
        ).all()
        counts = {s: int(n) for s, n in members}
        if counts.get("open", 0) == 0 and counts:
            n = sum(counts.values())
            writes.resolve_incident(
                conn, fid, f"all {n} member incidents resolved", now, by="members"
            )
            done.append(fid)
    return done


def members(conn: Connection, fid: str) -> list[FleetMember]:
    """The member incidents of a fleet (for ``GET /incidents/{fleet id}``)."""
    t = incidents.c
    return [
        {
            "id": r.id,
            "stream": r.stream,
            "status": r.status,
            "namespace": r.namespace,
            "pod": r.pod,
            "node": r.node,
            "opened_at": r.opened_at,
        }
        for r in conn.execute(
            select(t.id, t.stream, t.status, t.namespace, t.pod, t.node, t.opened_at)
            .where(t.fleet_id == fid)
            .order_by(t.opened_at, t.id)
        )
    ]
