"""Read (and two small write) queries the dashboard needs beyond the API's: incidents with a
time range and their counts, the stream list, fleet incidents, expiring a silence.

Each function takes the :class:`~service.store.Store` and runs one short transaction through
its own connection helpers (so SQLite's single-writer lock and the in-memory database's
shared connection are respected exactly as for the API's calls).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypedDict, cast

from sqlalchemy import func, select, update
from sqlalchemy.engine import Connection

from service.incidents.codec import JsonObject
from service.incidents.incident_json import IncidentBody
from service.incidents.snapshots import StreamSnapshot, shown_reach
from service.store import Store, queries
from service.store.fleets import FLEET_PREFIX, members
from service.store.queries import IncidentFilters, incident_view
from service.store.schema import incidents, silences, streams
from service.store.views import FleetView, IncidentView, SilenceView

# list filters: form field → incidents column
FILTERS = {
    "status": "status",
    "tier": "tier",
    "category": "category",
    "stage": "stage",
    "severity": "severity",
    "namespace": "namespace",
    "node": "node",
    "pod": "pod",
    "stream": "stream",
    "fleet": "fleet_id",
}
MAX_STREAMS = 300  # each snapshot is read whole (its open incidents included)
MAX_FLEETS = 200


class OpenIncident(TypedDict):
    id: str
    severity: str
    category: str
    stall: bool


class StreamRow(TypedDict):
    """A stream as the streams page lists it."""

    stream: str
    status: str | None
    stage: str | None
    timeline: dict[str, float]
    meta: JsonObject
    facts: dict[str, str]
    run: int
    runs_failed: int
    lines: int
    last_time: float | None
    last_stage_change: float | None
    last_line: str
    updated_at: float
    open_incidents: list[OpenIncident]


@contextmanager
def _read(store: Store) -> Iterator[Connection]:
    with store._read() as conn:  # noqa: SLF001 - the store's own locking, shared on purpose
        yield conn


@contextmanager
def _write(store: Store) -> Iterator[Connection]:
    with store._write() as conn:  # noqa: SLF001
        yield conn


def _columns(filters: dict[str, str | None]) -> IncidentFilters:
    """The form's filters (:data:`FILTERS`' names; empty: no filter) as the store's."""
    out: dict[str, str] = {FILTERS[k]: v for k, v in filters.items() if k in FILTERS and v}
    return cast(IncidentFilters, out)


def list_incidents(
    store: Store,
    filters: dict[str, str | None],
    *,
    since: float | None,
    until: float | None,
    limit: int,
    cursor: str | None,
) -> tuple[list[IncidentView], str | None]:
    """Newest first (opened_at, then id), as ``GET /incidents`` pages them, plus ``until``.
    ValueError for a cursor that cannot be read."""
    with _read(store) as conn:
        return queries.list_incidents(conn, _columns(filters), since, limit, cursor, until)


def incident_counts(
    store: Store, filters: dict[str, str | None], *, since: float | None, until: float | None
) -> dict[str, dict[str, int]]:
    """Counts of the filtered incidents by tier, category, status and severity."""
    t = incidents.c
    columns = _columns(filters)
    out: dict[str, dict[str, int]] = {}
    with _read(store) as conn:
        for name in ("tier", "category", "status", "severity"):
            col = getattr(t, name)
            stmt = queries.where(
                select(col, func.count()).select_from(incidents), columns, since, until
            )
            rows = conn.execute(stmt.group_by(col)).all()
            out[name] = dict(
                sorted(((str(k), int(n)) for k, n in rows), key=lambda kv: (-kv[1], kv[0]))
            )
    out["total"] = {"all": sum(out["status"].values())}
    return out


def namespaces(store: Store, limit: int = 200) -> list[str]:
    """Namespaces that have incidents (for the filter's suggestions)."""
    t = incidents.c
    with _read(store) as conn:
        return [
            str(n)
            for n in conn.execute(
                select(t.namespace)
                .where(t.namespace.is_not(None))
                .distinct()
                .order_by(t.namespace)
                .limit(limit)
            ).scalars()
        ]


def list_streams(store: Store, limit: int = MAX_STREAMS) -> list[StreamRow]:
    """Streams, most recently updated first: key, status, stage, timeline, meta, times, and
    the ids (and stall flags) of their open incidents."""
    s, t = streams.c, incidents.c
    with _read(store) as conn:
        rows = conn.execute(
            select(s.key, s.state, s.updated_at).order_by(s.updated_at.desc()).limit(limit)
        ).all()
        keys = [r.key for r in rows]
        open_rows = (
            conn.execute(
                select(t.id, t.stream, t.severity, t.category, t.body).where(
                    t.status == "open", t.stream.in_(keys)
                )
            ).all()
            if keys
            else []
        )
    open_by: dict[str, list[OpenIncident]] = {}
    for o in open_rows:
        body: IncidentBody | None = o.body
        extra = body.get("extra") if body else None
        open_by.setdefault(o.stream, []).append(
            {
                "id": o.id,
                "severity": o.severity,
                "category": o.category,
                "stall": bool(extra.get("stall")) if extra else False,
            }
        )
    out: list[StreamRow] = []
    for r in rows:
        st: StreamSnapshot = r.state
        stage, timeline = shown_reach(st)
        out.append(
            {
                "stream": r.key,
                "status": st.get("status"),
                "stage": stage,
                "timeline": timeline,
                "meta": st.get("meta") or {},
                "facts": st.get("facts") or {},
                "run": st.get("run", 0),
                "runs_failed": st.get("runs_failed", 0),
                "lines": st.get("seq", 0),
                "last_time": st.get("last_time"),
                "last_stage_change": st.get("last_stage_change"),
                "last_line": st.get("last_line", ""),
                "updated_at": r.updated_at,
                "open_incidents": open_by.get(r.key, []),
            }
        )
    return out


def list_fleets(
    store: Store, status: str | None = None, limit: int = MAX_FLEETS
) -> list[FleetView]:
    """Fleet incidents, newest first, each with its member incidents."""

    t = incidents.c
    stmt = select(incidents).where(t.stream.like(FLEET_PREFIX + "%"))
    if status:
        stmt = stmt.where(t.status == status)
    with _read(store) as conn:
        rows = (
            conn.execute(stmt.order_by(t.opened_at.desc(), t.id.desc()).limit(limit))
            .mappings()
            .all()
        )
        out: list[FleetView] = []
        for r in rows:
            out.append({**incident_view(r), "members": members(conn, r["id"])})
    return out


def get_silence(store: Store, silence_id: str) -> SilenceView | None:
    return next((s for s in store.list_silences() if s["id"] == silence_id), None)


def expire_silence(store: Store, silence_id: str, now: float) -> bool:
    """End a silence now, keeping it in the list (as Alertmanager's "expire"); False when
    unknown or already over. A silence that had not started yet ends before it starts."""
    s = silences.c
    with _write(store) as conn:
        row = conn.execute(select(s.starts_at, s.ends_at).where(s.id == silence_id)).first()
        if row is None or row.ends_at <= now:
            return False
        values: dict[str, float] = {"ends_at": now}
        if row.starts_at > now:
            values["starts_at"] = now
        conn.execute(update(silences).where(s.id == silence_id).values(**values))
        return True
