"""What people add: silences and classification feedback."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection, RowMapping

from service.labels import validate
from service.store.schema import feedback, incidents, silences


def create_silence(
    conn: Connection,
    matchers: dict[str, list[str]],
    starts_at: float,
    ends_at: float,
    created_by: str,
    comment: str,
    now: float,
) -> dict[str, Any]:
    matchers = validate(matchers)
    if ends_at <= starts_at:
        raise ValueError("ends_at must be after starts_at")
    row = {
        "id": uuid.uuid4().hex,
        "matchers": matchers,
        "starts_at": float(starts_at),
        "ends_at": float(ends_at),
        "created_by": str(created_by),
        "comment": str(comment),
        "created_at": now,
    }
    conn.execute(insert(silences).values(**row))
    return _silence(row, now)


def list_silences(conn: Connection, now: float, active_only: bool) -> list[dict[str, Any]]:
    stmt = select(silences).order_by(silences.c.starts_at.desc(), silences.c.id)
    if active_only:
        stmt = stmt.where(silences.c.starts_at <= now, silences.c.ends_at > now)
    return [_silence(r, now) for r in conn.execute(stmt).mappings()]


def delete_silence(conn: Connection, silence_id: str) -> bool:
    return conn.execute(delete(silences).where(silences.c.id == silence_id)).rowcount > 0


def add_feedback(
    conn: Connection,
    incident_id: str,
    correct: bool,
    category: str | None,
    comment: str | None,
    now: float,
) -> dict[str, Any] | None:
    found = conn.execute(select(incidents.c.id).where(incidents.c.id == incident_id)).first()
    if found is None:
        return None
    row = {
        "incident_id": incident_id,
        "correct": bool(correct),
        "category": category,
        "comment": comment,
        "created_at": now,
    }
    new_id = conn.execute(insert(feedback).values(**row).returning(feedback.c.id)).scalar_one()
    return {"id": int(new_id), **row}


def list_feedback(conn: Connection) -> list[dict[str, Any]]:
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


def _silence(r: dict[str, Any] | RowMapping, now: float) -> dict[str, Any]:
    out = {
        k: r[k]
        for k in ("id", "matchers", "starts_at", "ends_at", "created_by", "comment", "created_at")
    }
    out["active"] = r["starts_at"] <= now < r["ends_at"]
    return out
