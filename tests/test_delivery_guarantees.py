"""Delivery guarantees in-process (SQLite and PostgreSQL, a real HTTP receiver): a restarted
instance takes its claims back at once, a live process holding the same id keeps them, an
answer the store could not record is recorded later and never sent again, a timed-out
request is resent as a possible repeat, and a silence never swallows a resolution."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from service.config import NotifySettings, ReceiverSettings
from service.notify.dispatcher import Dispatcher
from service.store import Store
from service.store.identity import default_instance_id
from service.store.people import Who
from tests.delivery_support import incident_body, write_change
from tests.receiver import Receiver
from tests.test_notify_dispatcher import all_settled, delivery_rows, wait_until

pytest_plugins = ("tests.test_store",)  # db_url / store fixtures


def settings() -> NotifySettings:
    return NotifySettings(
        group_wait_s=0.0,
        backoff_base_s=0.05,
        backoff_max_s=0.3,
        external_url="https://sentinel.example.com",
    )


def hook(rx: Receiver, name: str = "hook", **kw: Any) -> ReceiverSettings:
    kw.setdefault("rate_limit_per_minute", 6000)
    return ReceiverSettings(
        name=name, type=kw.pop("type", "webhook"), url=rx.url.replace("/hook", f"/{name}"), **kw
    )


def pagerduty(rx: Receiver) -> ReceiverSettings:
    return hook(rx, "pd", type="pagerduty", routing_key="R0UTING")


def make(
    store: Store, receivers: list[ReceiverSettings], instance: str = "inst-a", **kw: Any
) -> Dispatcher:
    kw.setdefault("poll_interval_s", 0.02)
    return Dispatcher(store, receivers, settings(), instance_id=instance, **kw)


@pytest.fixture
def rx() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def keys(rx: Receiver) -> Counter[tuple[str, str]]:
    return Counter((r.path, r.header("Idempotency-Key") or "") for r in rx.accepted())


# ---- identity ------------------------------------------------------------------------------
def test_default_instance_id_is_stable_and_tells_replicas_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOSTNAME", "sentinel-0")
    a = default_instance_id("postgresql://u:secret@db:5432/s", "0.0.0.0", 8080)
    assert a == default_instance_id("postgresql://u:secret@db:5432/s", "0.0.0.0", 8080)
    assert a.startswith("sentinel-0-") and "secret" not in a
    assert a != default_instance_id("postgresql://u:secret@db:5432/s", "0.0.0.0", 8081)
    monkeypatch.setenv("HOSTNAME", "sentinel-1")
    assert default_instance_id("postgresql://u:secret@db:5432/s", "0.0.0.0", 8080) != a


def test_restart_with_the_same_id_takes_its_claims_back_at_once(store: Store, rx: Receiver) -> None:
    """The previous run claimed two groups (leases of a minute) and died with the request of
    one on the wire: the restarted instance sends both at once, the one in doubt again
    with the same key and marked as a possible repeat."""
    for i in range(2):
        write_change(store, incident_body(i, prefix="rs"), "opened")
    d = make(store, [hook(rx)])
    d.expand()
    claims = store.claim_deliveries("hook", "inst-a", lease_s=60, group_wait_s=0, limit=5)
    assert len(claims) == 2
    assert store.mark_sending(claims[0].delivery_ids, "inst-a") == 1  # then kill -9
    assert store.claim_deliveries("hook", "inst-b", lease_s=60, group_wait_s=0) == []
    t0 = time.monotonic()
    d.start()
    try:
        assert wait_until(lambda: len(rx.accepted()) == 2, timeout=10)
    finally:
        d.stop()
    assert time.monotonic() - t0 < 5  # not after the minute-long lease
    by_incident = {r.json()["incident"]["id"]: r for r in rx.accepted()}
    doubtful = by_incident[claims[0].incident["id"]]
    fresh = by_incident[claims[1].incident["id"]]
    assert doubtful.header("X-Sentinel-Redelivery") == "true"
    assert doubtful.header("Idempotency-Key") == doubtful.header("X-Sentinel-Event-Id")
    assert fresh.header("X-Sentinel-Redelivery") is None
    assert {r["status"] for r in delivery_rows(store)} == {"sent"}


def test_a_live_process_with_the_same_id_keeps_its_claims(store: Store, rx: Receiver) -> None:
    write_change(store, incident_body(0, prefix="live"), "opened")
    d = make(store, [hook(rx)])
    d.expand()
    (claim,) = store.claim_deliveries("hook", "inst-a", lease_s=60, group_wait_s=0)
    other = store.instance_lock("inst-a")  # the other live process
    assert other.acquire()
    d.start()
    try:
        time.sleep(1.0)
        assert rx.accepted() == []  # its claim is not released under it
        assert d.status()["identity_held"] is False
        other.release()  # that process ends
        assert wait_until(lambda: len(rx.accepted()) == 1, timeout=10)
        assert d.status()["identity_held"] is True
    finally:
        d.stop()
        other.release()


# ---- the store is lost between the answer and recording it -------------------------------
class FlakyStore(Store):
    """Recording ``sent`` fails ``fail`` times (the database went away after the receiver
    accepted)."""

    fail = 0

    def finish_deliveries(self, ids: list[int], instance: str, **kw: Any) -> int:
        if kw.get("status") == "sent" and self.fail > 0:
            self.fail -= 1
            raise OperationalError("UPDATE deliveries", {}, ConnectionError("server closed"))
        return super().finish_deliveries(ids, instance, **kw)


def test_answer_recorded_after_a_store_outage_is_never_sent_again(
    db_url: str, rx: Receiver
) -> None:
    store = FlakyStore(db_url)
    store.migrate()
    store.fail = 3
    receivers = [hook(rx), pagerduty(rx)]
    d = make(store, receivers)
    d.start()
    try:
        for i in range(5):
            write_change(store, incident_body(i, prefix="flaky"), "opened")
        d.wake()
        assert wait_until(lambda: all_settled(store), timeout=15)
        for i in range(5):
            write_change(store, incident_body(i, prefix="flaky", status="resolved"), "resolved")
        d.wake()
        assert wait_until(lambda: all_settled(store) and len(rx.accepted()) >= 20, timeout=15)
        time.sleep(0.5)
    finally:
        d.stop()
    assert store.fail == 0
    assert max(keys(rx).values()) == 1, [k for k, n in keys(rx).items() if n > 1]
    assert len(rx.accepted()) == 20  # 5 incidents x (trigger, resolve) x 2 receivers
    assert {r["status"] for r in delivery_rows(store)} == {"sent"}
    store.close()


def test_a_timed_out_request_is_resent_as_a_possible_repeat(store: Store, rx: Receiver) -> None:
    rx.hang(delay_s=1.0, count=1)  # the receiver takes the first request, answers late
    write_change(store, incident_body(0, prefix="slow"), "opened")
    d = make(store, [hook(rx, timeout_s=0.3)])
    d.start()
    try:
        assert wait_until(lambda: len(rx.accepted()) == 1, timeout=10)
    finally:
        d.stop()
    first, second = rx.requests
    assert first.header("Idempotency-Key") == second.header("Idempotency-Key")
    assert first.header("X-Sentinel-Redelivery") is None
    assert second.header("X-Sentinel-Redelivery") == "true"


# ---- silences ----------------------------------------------------------------------------
def test_a_silence_never_swallows_a_resolution(store: Store, rx: Receiver) -> None:
    """A: paged, then silenced; its update is muted, its resolution is sent (the PagerDuty
    alert closes). B: opened and resolved under the silence: nothing at all (no alert is
    open). C: opened under the silence, resolved after it ended: nothing either."""
    d = make(store, [pagerduty(rx), hook(rx)])
    d.start()
    try:
        write_change(store, incident_body(0, prefix="a", namespace="prod"), "opened")
        d.wake()
        assert wait_until(lambda: len(rx.accepted()) == 2)
        silence = store.create_silence(
            {"namespace": ["prod"]}, time.time() + 600, Who("alice", "user"), "maintenance"
        )
        d.silences.invalidate()
        write_change(store, incident_body(0, prefix="a", namespace="prod"), "updated")
        write_change(store, incident_body(1, prefix="b", namespace="prod"), "opened")
        write_change(store, incident_body(2, prefix="c", namespace="prod"), "opened")
        d.wake()
        assert wait_until(lambda: all_settled(store))
        write_change(
            store, incident_body(1, prefix="b", namespace="prod", status="resolved"), "resolved"
        )
        store.resolve_incident("a-00000", "pod deleted", time.time())  # by hand
        d.wake()
        assert wait_until(lambda: all_settled(store) and len(rx.accepted()) == 4)
        store.delete_silence(silence["id"])
        d.silences.invalidate()
        write_change(
            store, incident_body(2, prefix="c", namespace="prod", status="resolved"), "resolved"
        )
        d.wake()
        assert wait_until(lambda: all_settled(store))
        time.sleep(0.3)
    finally:
        d.stop()
    pd = [r.json() for r in rx.accepted() if r.path == "/pd"]
    assert [(e["dedup_key"], e["event_action"]) for e in pd] == [
        ("a-00000", "trigger"),
        ("a-00000", "resolve"),
    ]
    hooks = [r.json() for r in rx.accepted() if r.path == "/hook"]
    assert [(e["incident"]["id"], e["event"]) for e in hooks] == [
        ("a-00000", "opened"),
        ("a-00000", "resolved"),
    ]
    rows = Counter((r["incident_id"], r["kind"], r["status"]) for r in delivery_rows(store))
    assert rows[("a-00000", "updated", "silenced")] == 2
    assert rows[("b-00001", "opened", "silenced")] == 2
    assert rows[("c-00002", "opened", "silenced")] == 2
    # resolutions of incidents the receivers never heard of: nothing to close
    assert rows[("b-00001", "resolved", "dropped")] == 2
    assert rows[("c-00002", "resolved", "dropped")] == 2
