"""One incident's life, oldest first, with who did what: opened (the service), each page
sent and each one a silence held back (the silence's author), and every write people made
on it (:mod:`service.store.people`'s audit rows: acknowledged, assigned, notes, silences
made from it, feedback, resolved), and a resolution the service decided itself."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection, RowMapping

from service.store.people import SENTINEL, entries
from service.store.schema import deliveries, outbox, silences
from service.store.views import AuditEntry, TimelineEntry

# audit action → the timeline's words
ACTIONS = {
    "ack": "acknowledged",
    "assign": "assigned",
    "note": "note",
    "resolve": "resolved",
    "feedback": "feedback",
    "silence.create": "silenced",
}


def timeline(conn: Connection, row: RowMapping) -> tuple[list[TimelineEntry], list[AuditEntry]]:
    """The incident's timeline and its notes (both oldest first)."""
    incident_id = row["id"]
    body = row["body"]
    p = body.get("primary") or {}
    out: list[TimelineEntry] = [
        {
            "at": float(row["opened_at"]),
            "by": SENTINEL.name,
            "action": "opened",
            "detail": f"{p.get('tier')} / {p.get('category')} at {p.get('stage')}",
        }
    ]
    d = deliveries.c
    rows = conn.execute(
        select(d.receiver, d.status, d.sent_at, d.created_at, d.last_error, outbox.c.kind)
        .join(outbox, outbox.c.id == d.event_id)
        .where(d.incident_id == incident_id, d.status.in_(("sent", "silenced")))
        .order_by(d.id)
    ).all()
    authors = _silence_authors(conn, [r.last_error for r in rows if r.status == "silenced"])
    for r in rows:
        if r.status == "sent":
            out.append(
                {
                    "at": float(r.sent_at or r.created_at),
                    "by": SENTINEL.name,
                    "action": "paged" if r.kind != "acknowledged" else "told",
                    "detail": f"{r.receiver} ({r.kind})",
                }
            )
        else:
            sid = _silence_id(r.last_error)
            out.append(
                {
                    "at": float(r.created_at),
                    "by": authors.get(sid or "", "a silence"),
                    "action": "silenced",
                    "detail": f"{r.receiver} not paged (silence {sid})",
                }
            )
    mine = list(reversed(entries(conn, target_kind="incident", target_id=incident_id, limit=500)))
    for e in mine:
        out.append(
            {
                "at": e["at"],
                "by": e["actor"],
                "action": ACTIONS.get(e["action"], e["action"]),
                "detail": _detail(e),
            }
        )
    if row["status"] == "resolved" and not any(e["action"] == "resolve" for e in mine):
        out.append(
            {
                "at": float(row["resolved_at"] or row["updated_at"]),
                "by": SENTINEL.name,
                "action": "resolved",
                "detail": body.get("resolution"),
            }
        )
    out.sort(key=lambda e: e["at"])
    return out, [e for e in mine if e["action"] == "note"]


def _detail(e: AuditEntry) -> str | None:
    detail: dict[str, Any] = dict(e["detail"])
    match e["action"]:
        case "assign":
            return f"to {detail.get('assignee') or 'nobody'}"
        case "note":
            return str(detail.get("text") or "")
        case "resolve":
            return str(detail.get("reason") or "")
        case "feedback":
            verdict = "right" if detail.get("correct") else f"wrong: {detail.get('category')}"
            return f"classification {verdict}"
        case "silence.create":
            return f"silence {detail.get('silence')} ({detail.get('comment') or ''})"
    return None


def _silence_id(note: str | None) -> str | None:
    if note and note.startswith("silence "):
        return note.removeprefix("silence ").strip()
    return None


def _silence_authors(conn: Connection, notes: list[str | None]) -> dict[str, str]:
    ids = {sid for n in notes if (sid := _silence_id(n))}
    if not ids:
        return {}
    s = silences.c
    return {
        r.id: r.created_by for r in conn.execute(select(s.id, s.created_by).where(s.id.in_(ids)))
    }
