"""Retention (SQLite and PostgreSQL): resolved incidents older than the incident retention
go with their outbox events and deliveries, unless they carry feedback or a change still to
deliver; stream snapshots not written for the stream retention go unless an incident is
still open on them; 0 keeps forever; the service's periodic prune applies the settings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select

from service.config import Settings
from service.store import BatchEffects, Store
from service.store.schema import deliveries, feedback, incidents, outbox, streams
from tests.delivery_support import incident_body, write_change

pytest_plugins = ("tests.test_store",)  # db_url fixture
DAY = 86_400.0
NOW = 1_900_000_000.0


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


@pytest.fixture
def store(db_url: str, clock: Clock) -> Iterator[Store]:
    s = Store(
        db_url,
        clock=clock,
        incident_retention_days=90,
        stream_retention_days=30,
        retention_interval_s=3600,
    )
    s.migrate()
    yield s
    s.close()


def route(_body: dict[str, Any], _kind: str, _engaged: set[str]) -> list[tuple[str, str, None]]:
    return [("hook", "pending", None)]


def incident(
    store: Store,
    clock: Clock,
    name: str,
    *,
    opened_days_ago: float,
    resolved_days_ago: float | None,
    deliver: str | None = "sent",
) -> str:
    """An incident opened (and resolved) that many days ago; its deliveries ``sent``,
    left ``pending``, or never expanded (None)."""
    body = incident_body(0, prefix=name, at=NOW - opened_days_ago * DAY)
    clock.t = NOW - opened_days_ago * DAY
    write_change(store, body, "opened")
    if resolved_days_ago is not None:
        clock.t = NOW - resolved_days_ago * DAY
        body = incident_body(0, prefix=name, status="resolved", at=clock.t)
        body["opened_at"] = NOW - opened_days_ago * DAY
        write_change(store, body, "resolved")
    if deliver is not None:
        store.expand_outbox(route)
        if deliver == "sent":
            for c in store.claim_deliveries("hook", "t", lease_s=60, group_wait_s=0, limit=50):
                store.finish_deliveries(c.delivery_ids, "t", status="sent")
    clock.t = NOW
    return body["id"]


def stream(store: Store, clock: Clock, key: str, days_ago: float) -> None:
    clock.t = NOW - days_ago * DAY
    store.commit_batch(BatchEffects(streams={key: {"status": "serving", "stage": "api_server"}}))
    clock.t = NOW


def count(store: Store, table: Any, *where: Any) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one())


def ids(store: Store) -> set[str]:
    with store.engine.connect() as conn:
        return set(conn.execute(select(incidents.c.id)).scalars())


def test_retention_forgets_old_resolved_incidents_and_idle_streams(
    store: Store, clock: Clock
) -> None:
    gone = incident(store, clock, "old", opened_days_ago=120, resolved_days_ago=100)
    recent = incident(store, clock, "recent", opened_days_ago=120, resolved_days_ago=10)
    still_open = incident(store, clock, "open", opened_days_ago=200, resolved_days_ago=None)
    with_feedback = incident(store, clock, "fb", opened_days_ago=120, resolved_days_ago=100)
    assert store.add_feedback(with_feedback, False, "oom_weights", "was weights") is not None
    undelivered = incident(
        store, clock, "pend", opened_days_ago=120, resolved_days_ago=100, deliver="pending"
    )
    unexpanded = incident(
        store, clock, "unexp", opened_days_ago=120, resolved_days_ago=100, deliver=None
    )
    stream(store, clock, "ns/idle/vllm", 40)
    stream(store, clock, "ns/active/vllm", 2)
    stream(store, clock, "load/open-0/vllm", 40)  # the stream of the open incident
    assert count(store, outbox, outbox.c.incident_id == gone) == 2
    assert count(store, deliveries, deliveries.c.incident_id == gone) == 2

    assert store.prune_retention(incident_days=0, stream_days=0) == {
        "incidents": 0,
        "streams": 0,
        "workloads": 0,
    }
    out = store.prune_retention()
    assert out == {"incidents": 1, "streams": 1, "workloads": 0}
    assert ids(store) == {recent, still_open, with_feedback, undelivered, unexpanded}
    assert count(store, outbox, outbox.c.incident_id == gone) == 0
    assert count(store, deliveries, deliveries.c.incident_id == gone) == 0
    assert count(store, feedback) == 1
    with store.engine.connect() as conn:
        assert set(conn.execute(select(streams.c.key)).scalars()) == {
            "ns/active/vllm",
            "load/open-0/vllm",
        }
    assert store.get_incident(recent)["deliveries"]  # untouched
    assert store.prune_retention() == {"incidents": 0, "streams": 0, "workloads": 0}

    # once delivered, the held-back incident goes at the next prune
    for c in store.claim_deliveries("hook", "t", lease_s=60, group_wait_s=0, limit=50):
        store.finish_deliveries(c.delivery_ids, "t", status="sent")
    assert store.prune_retention()["incidents"] == 1
    assert undelivered not in ids(store)


def test_retention_works_in_batches_and_on_the_service_schedule(store: Store, clock: Clock) -> None:
    n = 620  # more than one batch
    for i in range(n):
        clock.t = NOW - 100 * DAY
        write_change(store, incident_body(i, prefix="b", status="resolved", at=clock.t), "resolved")
    clock.t = NOW
    store.expand_outbox(route, limit=1000)
    with store.engine.begin() as conn:  # (as the dispatcher finishes them)
        conn.execute(deliveries.update().values(status="dropped"))
    assert store.prune() == n  # the first call prunes (then at most every interval)
    assert count(store, incidents) == 0
    write_change(
        store, incident_body(0, prefix="late", status="resolved", at=NOW - 100 * DAY), "resolved"
    )
    assert store.prune() == 0  # within retention_interval_s: not again yet


def test_settings_default_to_bounded_retention() -> None:
    s = Settings()
    assert s.store.incident_retention_days == 90 and s.store.stream_retention_days == 30
    assert Settings(store={"incident_retention_days": 0}).store.incident_retention_days == 0
    with pytest.raises(ValueError):
        Settings(store={"stream_retention_days": -1})
