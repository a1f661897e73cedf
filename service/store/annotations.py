"""What people add: silences and classification feedback."""

from __future__ import annotations

import uuid

from sqlalchemy import case, insert, select, update
from sqlalchemy.engine import Connection, RowMapping

from service.labels import validate
from service.store.schema import feedback, incidents, silences
from service.store.views import FeedbackReview, FeedbackView, SilenceView


def create_silence(
    conn: Connection,
    matchers: dict[str, list[str]],
    starts_at: float,
    ends_at: float,
    created_by: str,
    comment: str,
    now: float,
) -> SilenceView:
    matchers = validate(matchers)
    if ends_at <= starts_at:
        raise ValueError("ends_at must be after starts_at")
    silence: SilenceView = {
        "id": uuid.uuid4().hex,
        "matchers": matchers,
        "starts_at": float(starts_at),
        "ends_at": float(ends_at),
        "created_by": str(created_by),
        "comment": str(comment),
        "created_at": now,
        "active": starts_at <= now < ends_at,
    }
    row = {k: v for k, v in silence.items() if k != "active"}
    conn.execute(insert(silences).values(**row))
    return silence


def list_silences(conn: Connection, now: float, active_only: bool) -> list[SilenceView]:
    stmt = select(silences).order_by(silences.c.starts_at.desc(), silences.c.id)
    if active_only:
        stmt = stmt.where(silences.c.starts_at <= now, silences.c.ends_at > now)
    return [_silence(r, now) for r in conn.execute(stmt).mappings()]


def get_silence(conn: Connection, silence_id: str, now: float) -> SilenceView | None:
    row = conn.execute(select(silences).where(silences.c.id == silence_id)).mappings().first()
    return None if row is None else _silence(row, now)


def edit_silence(
    conn: Connection,
    silence_id: str,
    now: float,
    *,
    comment: str | None = None,
    ends_at: float | None = None,
    matchers: dict[str, list[str]] | None = None,
) -> SilenceView:
    """Change what is given (ValueError: an end not in the future, bad matchers)."""
    values: dict[str, object] = {}
    if comment is not None:
        if not comment.strip():
            raise ValueError("comment must not be empty")
        values["comment"] = comment
    if ends_at is not None:
        if ends_at <= now:
            raise ValueError("ends_at must be in the future")
        values["ends_at"] = float(ends_at)
    if matchers is not None:
        values["matchers"] = validate(matchers)
    if values:
        conn.execute(update(silences).where(silences.c.id == silence_id).values(**values))
    got = get_silence(conn, silence_id, now)
    assert got is not None  # (the caller read it in this transaction)
    return got


def expire_silence(conn: Connection, silence_id: str, now: float) -> bool:
    """End a silence now (kept for the record). False: unknown or ended already."""
    t = silences.c
    return (
        conn.execute(
            update(silences)
            .where(t.id == silence_id, t.ends_at > now)
            .values(ends_at=now, starts_at=case((t.starts_at > now, now), else_=t.starts_at))
        ).rowcount
        > 0
    )


def add_feedback(
    conn: Connection,
    incident_id: str,
    correct: bool,
    category: str | None,
    comment: str | None,
    now: float,
) -> FeedbackView | None:
    found = conn.execute(select(incidents.c.id).where(incidents.c.id == incident_id)).first()
    if found is None:
        return None
    new_id = conn.execute(
        insert(feedback)
        .values(
            incident_id=incident_id,
            correct=bool(correct),
            category=category,
            comment=comment,
            created_at=now,
        )
        .returning(feedback.c.id)
    ).scalar_one()
    return {
        "id": int(new_id),
        "incident_id": incident_id,
        "correct": bool(correct),
        "category": category,
        "comment": comment,
        "created_at": now,
    }


def list_feedback(conn: Connection) -> list[FeedbackReview]:
    """Newest first, with what the classifier said (for review and retraining)."""
    f, i = feedback.c, incidents.c
    rows = conn.execute(
        select(
            f.id,
            f.incident_id,
            f.correct,
            f.category,
            f.comment,
            f.created_at,
            i.tier.label("incident_tier"),
            i.category.label("incident_category"),
            i.body,
        )
        .join(incidents, i.id == f.incident_id)
        .order_by(f.id.desc())
    ).mappings()
    return [
        {
            "id": int(r["id"]),
            "incident_id": r["incident_id"],
            "correct": bool(r["correct"]),
            "category": r["category"],
            "comment": r["comment"],
            "created_at": r["created_at"],
            "incident_tier": r["incident_tier"],
            "incident_category": r["incident_category"],
            "line": (r["body"].get("primary") or {}).get("line"),
        }
        for r in rows
    ]


def _silence(r: RowMapping, now: float) -> SilenceView:
    return {
        "id": r["id"],
        "matchers": r["matchers"],
        "starts_at": r["starts_at"],
        "ends_at": r["ends_at"],
        "created_by": r["created_by"],
        "comment": r["comment"],
        "created_at": r["created_at"],
        "active": r["starts_at"] <= now < r["ends_at"],
    }
