"""The pipeline's write path: one batch's effects in one transaction (positions, stream and
workload snapshots, the novelty templates, quarantined records, incidents and their outbox
events)."""

from __future__ import annotations

from typing import Any, TypedDict

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.engine import Connection

from service.incidents.incident import Incident
from service.incidents.incident_json import IncidentBody
from service.incidents.snapshots import StreamSnapshot
from service.incidents.workload import WorkloadSnapshot
from service.records import Position
from service.store.dialect import insert
from service.store.effects import BatchEffects, DuplicateChunk, StaleBatch
from service.store.schema import (
    forward_chunks,
    incidents,
    novelty,
    outbox,
    quarantine,
    source_positions,
    streams,
    workloads,
)
from service.store.search import search_text

NOVELTY = "drain3"  # the novelty miner's row (one miner per service; replicas: last write wins)


def commit_batch(conn: Connection, eff: BatchEffects) -> None:
    """Write ``eff`` on ``conn`` (inside the caller's transaction). Raises
    :class:`DuplicateChunk` / :class:`StaleBatch` (the caller rolls back) when the batch was
    applied already."""
    now = eff.at
    if eff.chunk_id is not None:
        stmt = insert(conn, forward_chunks).values(chunk_id=eff.chunk_id, seen_at=now)
        stmt = stmt.on_conflict_do_nothing().returning(forward_chunks.c.chunk_id)
        if conn.execute(stmt).first() is None:  # (rowcount is unreliable for INSERT)
            raise DuplicateChunk(eff.chunk_id)
    for p in eff.positions:
        _advance(conn, p.to, p.expected, now)
    if eff.streams:
        _write_streams(conn, eff, now)
    for key, state in eff.workloads.items():
        _write_workload(conn, key, state, eff.workload_versions.get(key), now)
    if eff.novelty is not None:
        stmt = insert(conn, novelty).values(name=NOVELTY, state=eff.novelty, updated_at=now)
        stmt = stmt.on_conflict_do_update(
            index_elements=[novelty.c.name],
            set_={"state": stmt.excluded.state, "updated_at": stmt.excluded.updated_at},
        )
        conn.execute(stmt)
    if eff.quarantined:
        conn.execute(insert(conn, quarantine), [{**q, "created_at": now} for q in eff.quarantined])
    for w in eff.incidents:
        version = upsert_incident(conn, w.body, len(w.kinds), now)
        if version is None:
            eff.skipped_incidents.add(w.body["id"])
            continue
        if w.kinds and w.notify:
            first = version - len(w.kinds) + 1
            stmt = insert(conn, outbox).on_conflict_do_nothing(
                index_elements=[outbox.c.incident_id, outbox.c.version]
            )
            conn.execute(
                stmt,
                [
                    {
                        "incident_id": w.body["id"],
                        "version": first + i,
                        "kind": kind,
                        "created_at": now,
                        "snapshot": w.summary,
                    }
                    for i, kind in enumerate(w.kinds)
                ],
            )


def _write_streams(conn: Connection, eff: BatchEffects, now: float) -> None:
    """Snapshots: compare-and-set on the version for streams in ``eff.stream_versions``
    (insert-only when it was None), a plain upsert for the others; every write bumps the
    version. The compare-and-set of every stream the batch loaded is one statement
    (executemany): all of them move on, or :class:`StaleBatch` when another writer got to
    any of them first (the caller rolls the whole batch back)."""
    t = streams.c
    blind = []
    cas = []
    for key, state in eff.streams.items():
        row = {
            "key": key,
            "state": state,
            "status": state.get("status"),
            "stage": state.get("stage"),
            "updated_at": now,
        }
        if key not in eff.stream_versions:
            blind.append(row)
            continue
        expected = eff.stream_versions[key]
        if expected is None:
            stmt = insert(conn, streams).values(**row, version=1)
            stmt = stmt.on_conflict_do_nothing().returning(t.key)
            if conn.execute(stmt).first() is None:  # (rowcount is unreliable for INSERT)
                raise StaleBatch(f"stream {key}: snapshot changed since version {expected}")
            continue
        cas.append({f"b_{k}": v for k, v in row.items()} | {"b_expected": expected})
    if cas:
        stmt = (
            update(streams)
            .where(t.key == bindparam("b_key"), t.version == bindparam("b_expected"))
            .values(
                state=bindparam("b_state"),
                status=bindparam("b_status"),
                stage=bindparam("b_stage"),
                updated_at=bindparam("b_updated_at"),
                version=t.version + 1,
            )
        )
        if conn.execute(stmt, cas).rowcount != len(cas):  # the sum over the rows
            raise StaleBatch(_stale_streams(conn, cas))
    if blind:
        stmt = insert(conn, streams)
        stmt = stmt.on_conflict_do_update(
            index_elements=[t.key],
            set_={
                "state": stmt.excluded.state,
                "status": stmt.excluded.status,
                "stage": stmt.excluded.stage,
                "updated_at": stmt.excluded.updated_at,
                "version": t.version + 1,
            },
        )
        conn.execute(stmt, [{**row, "version": 1} for row in blind])


def _stale_streams(conn: Connection, cas: list[dict[str, Any]]) -> str:
    """Which stream of a failed compare-and-set moved on, where the versions tell (read in
    the same transaction after the statement: one it updated is at its expected + 1)."""
    t = streams.c
    keys = [r["b_key"] for r in cas]
    now = dict(conn.execute(select(t.key, t.version).where(t.key.in_(keys))).all())
    for r in cas:
        if now.get(r["b_key"]) != r["b_expected"] + 1:
            return f"stream {r['b_key']}: snapshot changed since version {r['b_expected']}"
    return f"{len(cas)} streams: a snapshot changed since the batch loaded it"


def _write_workload(
    conn: Connection, key: str, state: WorkloadSnapshot, expected: int | None, now: float
) -> None:
    """Compare-and-set on the version the batch loaded (insert-only when it was None);
    :class:`StaleBatch` when another writer got there first."""
    t = workloads.c
    if expected is None:
        stmt = insert(conn, workloads).values(key=key, state=state, updated_at=now, version=1)
        stmt = stmt.on_conflict_do_nothing().returning(t.key)
        done = conn.execute(stmt).first() is not None
    else:
        done = (
            conn.execute(
                update(workloads)
                .where(t.key == key, t.version == expected)
                .values(state=state, updated_at=now, version=t.version + 1)
            ).rowcount
            == 1
        )
    if not done:
        raise StaleBatch(f"workload {key}: changed since version {expected}")


def _advance(conn: Connection, to: Position, expected: int | None, now: float) -> None:
    source, partition, position = to.source, to.partition, to.offset
    if expected is None:
        stmt = insert(conn, source_positions).values(
            source=source, partition=partition, position=position, updated_at=now
        )
        stmt = stmt.on_conflict_do_nothing().returning(source_positions.c.position)
        done = 0 if conn.execute(stmt).first() is None else 1
    else:
        t = source_positions.c
        done = conn.execute(
            update(source_positions)
            .where(t.source == source, t.partition == partition, t.position == expected)
            .values(position=position, updated_at=now)
        ).rowcount
    if done == 0:
        raise StaleBatch(f"{source} {partition}: expected applied offset {expected}")


class IncidentColumns(TypedDict):
    """An ``incidents`` row as written (the columns queries filter on, and the body)."""

    id: str
    stream: str
    status: str
    severity: str
    tier: str
    category: str
    stage: str
    namespace: str | None
    pod: str | None
    node: str | None
    opened_at: float
    updated_at: float
    resolved_at: float | None
    search: str
    body: IncidentBody


def incident_columns(body: IncidentBody, now: float) -> IncidentColumns:
    p = body["primary"]
    meta = body.get("meta") or {}
    status = body.get("status", "open")
    return {
        "id": body["id"],
        "stream": body["stream"],
        "status": status,
        "severity": body.get("severity", "critical"),
        "tier": p["tier"],
        "category": p["category"],
        "stage": p["stage"],
        "namespace": _opt(meta.get("namespace")),
        "pod": _opt(meta.get("pod")),
        "node": _opt(meta.get("node")),
        "opened_at": _num(body.get("opened_at"), now),
        "updated_at": _num(body.get("updated_at"), now),
        "resolved_at": (_num(body.get("resolved_at"), now) if status == "resolved" else None),
        "search": search_text(body),
        "body": body,
    }


def upsert_incident(conn: Connection, body: IncidentBody, bump: int, now: float) -> int | None:
    """Insert or update; the version grows by ``bump``. None when the stored incident is
    resolved already (resolved by hand: the classifier's later changes are ignored)."""
    cols = incident_columns(body, now)
    stmt = insert(conn, incidents).values(**cols, version=bump, changed_at=now)
    t = incidents.c
    keep = {"id", "opened_at"}
    stmt = stmt.on_conflict_do_update(
        index_elements=[t.id],
        set_={
            **{k: getattr(stmt.excluded, k) for k in cols if k not in keep},
            "version": t.version + bump,
            "changed_at": now if bump else t.changed_at,
        },
        where=t.status != "resolved",
    ).returning(t.version)
    row = conn.execute(stmt).first()
    return None if row is None else int(row[0])


def prune_chunks(conn: Connection, before: float) -> int:
    return conn.execute(delete(forward_chunks).where(forward_chunks.c.seen_at < before)).rowcount


def _opt(v: Any) -> str | None:
    return str(v) if v not in (None, "") else None


def _num(v: Any, default: float) -> float:
    return float(v) if isinstance(v, int | float) else default


def resolve_incident(
    conn: Connection, incident_id: str, reason: str, at: float, by: str = "api"
) -> bool | None:
    """Resolve by hand (``by`` api) or because its members are (``by`` members, a fleet):
    new version + ``resolved`` outbox event, and the incident leaves its stream's snapshot.
    None: unknown id; False: it was resolved already."""
    t = incidents.c
    row = conn.execute(
        select(t.version, t.status, t.stream, t.body).where(t.id == incident_id).with_for_update()
    ).first()
    if row is None:
        return None
    if row.status == "resolved":
        return False
    before: IncidentBody = row.body
    body: IncidentBody = {
        **before,
        "status": "resolved",
        "resolved_at": at,
        "resolution": reason,
        "extra": {**(before.get("extra") or {}), "resolved_by": by},
    }
    version = int(row.version) + 1
    conn.execute(
        update(incidents)
        .where(t.id == incident_id)
        .values(
            status="resolved",
            resolved_at=at,
            updated_at=at,
            changed_at=at,
            version=version,
            body=body,
        )
    )
    conn.execute(
        insert(conn, outbox).values(
            incident_id=incident_id,
            version=version,
            kind="resolved",
            created_at=at,
            snapshot=Incident.from_dict(body).summary(),
        )
    )
    state: StreamSnapshot | None = conn.execute(
        select(streams.c.state).where(streams.c.key == row.stream).with_for_update()
    ).scalar()
    if state and any(i.get("id") == incident_id for i in state.get("incidents", [])):
        state = {
            **state,
            "incidents": [i for i in state["incidents"] if i.get("id") != incident_id],
        }
        conn.execute(
            update(streams)
            .where(streams.c.key == row.stream)
            .values(state=state, version=streams.c.version + 1)
        )
    return True
