"""Outbox → deliveries, and the delivery lease cycle (claim, complete, fail).

Exactly-once bookkeeping: one outbox row per (incident, version), one delivery row per
(event, receiver) — both unique constraints. A claim covers every pending delivery of one
(incident, receiver) group and leases it to one instance: on PostgreSQL under a
transaction-scoped advisory lock on the group plus ``FOR UPDATE SKIP LOCKED`` on the rows, on
SQLite inside a ``BEGIN IMMEDIATE`` transaction. Rows leased to someone else are skipped until
the lease expires (a crashed instance's claims are retried by another one).

No message twice (what a crash or a lost database could otherwise cause):

* Just before its request goes out a delivery is marked ``sending_at`` (:func:`mark_sending`,
  which also proves the lease is still ours). Its answer is recorded as ``sent`` whoever
  holds the lease by then (the message did reach the receiver), and a sent delivery is never
  claimed again.
* Instance ids are stable across restarts (``service.store.identity``): a restarted instance
  releases its own leases at once (:func:`release_own`) instead of leaving them to expire.
* The one undecidable case — the process died (or lost the database for longer than the
  lease) after a request went out and before its answer was recorded — leaves the delivery
  pending with ``sending_at`` set: it is *in doubt* and is sent again (never lost), carrying
  the same message id as ``Idempotency-Key`` so the receiver can drop the repeat.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import exists, func, or_, select, text, update
from sqlalchemy.engine import Connection

from service.incidents.incident_json import IncidentBody
from service.store.dialect import insert, skip_locked
from service.store.engine import is_postgres
from service.store.schema import deliveries, incidents, outbox

# route(incident body, event kind, receivers already engaged with the incident)
#   → [(receiver, status "pending" | "dropped", note)]
Route = Callable[[IncidentBody, str, set[str]], list[tuple[str, str, str | None]]]
# hold(incident body) → seconds after the incident's first outbox event before a receiver
# that was told nothing about it yet may get its first message (0: none; fleet detection)
Hold = Callable[[IncidentBody], float]


@dataclass(slots=True)
class ClaimedEvent:
    event_id: int
    version: int
    kind: str
    created_at: float


@dataclass(frozen=True, slots=True)
class Ack:
    """Who acknowledged an incident, when, and through what (``slack``, ``user`` ...)."""

    by: str
    at: float
    via: str


@dataclass
class Claim:
    """One message to send: the incident as it is now, covering ``events``."""

    receiver: str
    incident: IncidentBody  # current
    version: int
    delivery_ids: list[int]
    events: list[ClaimedEvent] = field(default_factory=list)
    attempts: int = 1  # including this one
    first: bool = True  # nothing was sent to this receiver about the incident before
    lease_until: float = 0.0
    # an earlier request for one of these deliveries went out and its answer was never
    # recorded (the sender died or lost the database): the receiver may have it already
    in_doubt: bool = False
    ack: Ack | None = None  # someone is on it
    assignee: str | None = None


def expand_outbox(
    conn: Connection, route: Route, now: float, limit: int, hold: Hold | None = None
) -> int:
    """Turn up to ``limit`` new outbox events into delivery rows; returns events expanded.
    A delivery to a receiver not yet told about the incident is due at the event's time, or
    ``hold(body)`` seconds after the incident's first event if that is later (not an attempt:
    the row just waits)."""
    o = outbox.c
    rows = conn.execute(
        select(o.id, o.incident_id, o.version, o.kind, o.created_at, incidents.c.body)
        .join(incidents, incidents.c.id == o.incident_id)
        .where(o.expanded_at.is_(None))
        .order_by(o.id)
        .limit(limit)
        .with_for_update(of=outbox, **skip_locked(conn))
    ).all()
    for ev in rows:
        told: dict[str, set[str]] = {}
        for name, status in conn.execute(
            select(deliveries.c.receiver, deliveries.c.status)
            .distinct()
            .where(
                deliveries.c.incident_id == ev.incident_id,
                deliveries.c.status.in_(("pending", "sent")),
            )
        ):
            told.setdefault(status, set()).add(name)
        engaged = told.get("pending", set()) | told.get("sent", set())
        targets = route(ev.body, ev.kind, engaged)
        if targets:
            due = float(ev.created_at)
            held = hold(ev.body) if hold is not None else 0.0
            if held > 0:
                first = conn.execute(
                    select(func.min(o.created_at)).where(o.incident_id == ev.incident_id)
                ).scalar()
                due = max(due, float(first if first is not None else ev.created_at) + held)
            stmt = insert(conn, deliveries).on_conflict_do_nothing(
                index_elements=[deliveries.c.event_id, deliveries.c.receiver]
            )
            conn.execute(
                stmt,
                [
                    {
                        "event_id": ev.id,
                        "incident_id": ev.incident_id,
                        "version": ev.version,
                        "receiver": name,
                        "status": status,
                        "attempts": 0,
                        "next_attempt_at": ev.created_at if name in told.get("sent", ()) else due,
                        "last_error": note,
                        "created_at": now,
                    }
                    for name, status, note in targets
                ],
            )
    if rows:
        conn.execute(update(outbox).where(o.id.in_([r.id for r in rows])).values(expanded_at=now))
    return len(rows)


def claim(
    conn: Connection,
    receiver: str,
    instance: str,
    now: float,
    lease_s: float,
    group_wait_s: float,
    limit: int,
) -> list[Claim]:
    """Lease up to ``limit`` due (incident, receiver) groups. A group is due when a pending
    delivery's ``next_attempt_at`` passed and the incident has been quiet for
    ``group_wait_s`` (or its oldest pending delivery waited ten times that)."""
    d, i = deliveries.c, incidents.c
    free = or_(d.lease_until.is_(None), d.lease_until < now)
    quiet = or_(i.changed_at <= now - group_wait_s, d.created_at <= now - 10 * group_wait_s)
    due = (
        conn.execute(
            select(d.incident_id, func.min(d.next_attempt_at).label("due"))
            .join(incidents, i.id == d.incident_id)
            .where(
                d.receiver == receiver, d.status == "pending", d.next_attempt_at <= now, free, quiet
            )
            .group_by(d.incident_id)
            .order_by(text("due"))
            .limit(limit * 4 + 8)
        )
        .scalars()
        .all()
    )  # more than needed: some may be busy on another instance
    pg = is_postgres(conn)
    out: list[Claim] = []
    for incident_id in due:
        if (
            pg
            and not conn.execute(
                text("SELECT pg_try_advisory_xact_lock(hashtextextended(:k, 0))"),
                {"k": f"delivery:{incident_id}:{receiver}"},
            ).scalar()
        ):
            continue  # another instance is claiming this group right now
        c = _claim_group(conn, incident_id, receiver, instance, now, lease_s)
        if c is not None:
            out.append(c)
            if len(out) >= limit:
                break
    return out


def _claim_group(
    conn: Connection, incident_id: str, receiver: str, instance: str, now: float, lease_s: float
) -> Claim | None:
    d = deliveries.c
    # The incident first: every outbox event up to its version is committed with it ...
    i = incidents.c
    inc = conn.execute(
        select(i.version, i.body, i.acked_by, i.acked_at, i.acked_via, i.assignee).where(
            i.id == incident_id
        )
    ).first()
    if inc is None:
        return None
    # ... and must be expanded before we render that version, or a delivery for one of them
    # would appear later and repeat the message.
    if conn.execute(
        select(
            exists().where(
                outbox.c.incident_id == incident_id,
                outbox.c.expanded_at.is_(None),
                outbox.c.version <= inc.version,
            )
        )
    ).scalar():
        return None
    rows = conn.execute(
        select(
            d.id,
            d.event_id,
            d.version,
            d.attempts,
            d.lease_until,
            d.sending_at,
            outbox.c.kind,
            outbox.c.created_at,
        )
        .join(outbox, outbox.c.id == d.event_id)
        .where(d.incident_id == incident_id, d.receiver == receiver, d.status == "pending")
        .order_by(d.version)
        .with_for_update(of=deliveries, **skip_locked(conn))
    ).all()
    if not rows or any(r.lease_until is not None and r.lease_until >= now for r in rows):
        return None  # leased by another instance: it is sending this group
    covered = [r for r in rows if r.version <= inc.version]
    if not covered:
        return None
    sent_before = conn.execute(
        select(
            exists().where(d.incident_id == incident_id, d.receiver == receiver, d.status == "sent")
        )
    ).scalar()
    ids = [r.id for r in covered]
    lease_until = now + lease_s
    conn.execute(
        update(deliveries)
        .where(d.id.in_(ids))
        .values(leased_by=instance, lease_until=lease_until, attempts=d.attempts + 1)
    )
    return Claim(
        receiver=receiver,
        incident=inc.body,
        version=int(inc.version),
        delivery_ids=ids,
        events=[
            ClaimedEvent(int(r.event_id), int(r.version), r.kind, float(r.created_at))
            for r in covered
        ],
        attempts=max(r.attempts for r in covered) + 1,
        first=not sent_before,
        lease_until=lease_until,
        in_doubt=any(r.sending_at is not None for r in covered),
        ack=(
            Ack(inc.acked_by, float(inc.acked_at), inc.acked_via or "user")
            if inc.acked_at is not None
            else None
        ),
        assignee=inc.assignee,
    )


def mark_sending(conn: Connection, ids: list[int], instance: str, now: float) -> int:
    """The request for ``ids`` goes out now: record it (so a crash before its answer is
    recorded leaves the deliveries in doubt, not forgotten). Returns the rows this instance
    still holds under an unexpired lease; fewer than ``ids``: do not send."""
    d = deliveries.c
    return conn.execute(
        update(deliveries)
        .where(d.id.in_(ids), d.leased_by == instance, d.status == "pending", d.lease_until >= now)
        .values(sending_at=now)
    ).rowcount


def finish(
    conn: Connection,
    ids: list[int],
    instance: str,
    *,
    status: str,
    now: float,
    note: str | None = None,
    retry_at: float | None = None,
    in_doubt: bool = False,
) -> int:
    """End this instance's lease on ``ids``: ``sent`` / ``silenced`` / ``inhibited`` (a fleet
    incident pages instead) / ``dropped``, or ``pending`` again with ``retry_at``. Returns
    rows changed.

    ``sent`` is a fact about the receiver, not about the lease: it is recorded on every
    still-pending row of ``ids`` even if the lease ran out meanwhile (a database outage
    longer than the lease), so no instance sends the message again; the other outcomes only
    apply while this instance holds the lease. ``pending`` with ``in_doubt``: the receiver
    may have the message (a timeout, or an earlier request in doubt), so the next attempt is
    marked as a possible repeat too."""
    d = deliveries.c
    values: dict[str, Any] = {
        "status": status,
        "leased_by": None,
        "lease_until": None,
        "last_error": note,
    }
    where = [d.id.in_(ids), d.status == "pending"]
    if status == "sent":
        values["sent_at"] = now
    else:
        where.append(d.leased_by == instance)
    if status == "pending":
        values["next_attempt_at"] = retry_at if retry_at is not None else now
        if not in_doubt:  # the attempt was refused: the receiver does not have it
            values["sending_at"] = None
    return conn.execute(update(deliveries).where(*where).values(**values)).rowcount


def release_own(conn: Connection, instance: str) -> tuple[int, int]:
    """Give back every lease ``instance`` holds (at start: what the previous run of this
    instance claimed before it died; at a clean stop: what is left). Returns (released, in
    doubt): deliveries whose request went out before the answer could be recorded are sent
    again, marked as possible repeats."""
    d = deliveries.c
    mine = (d.leased_by == instance, d.status == "pending")
    doubt = conn.execute(
        select(func.count()).select_from(deliveries).where(*mine, d.sending_at.is_not(None))
    ).scalar_one()
    released = conn.execute(
        update(deliveries).where(*mine).values(leased_by=None, lease_until=None)
    ).rowcount
    return int(released), int(doubt)


def expedite(conn: Connection, receiver: str, now: float) -> int:
    """A receiver that was failing accepted a message again: deliveries waiting out their
    backoff for it are due now (instead of up to ``backoff_max_s`` later)."""
    d = deliveries.c
    return conn.execute(
        update(deliveries)
        .where(
            d.receiver == receiver,
            d.status == "pending",
            d.attempts > 0,
            d.next_attempt_at > now,
            or_(d.lease_until.is_(None), d.lease_until < now),
        )
        .values(next_attempt_at=now)
    ).rowcount
