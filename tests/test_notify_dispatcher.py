"""Dispatcher against real parts: a store (SQLite and PostgreSQL), the pipeline with the real
classifier on real logs, and a real HTTP receiver (tests/receiver.py)."""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from service import metrics
from service.config import NotifySettings, ReceiverSettings
from service.notify.dispatcher import Dispatcher
from service.notify.webhook import verify_signature
from service.pipeline import Pipeline
from service.store import Store
from service.store.people import Who
from service.store.schema import deliveries, outbox
from tests.receiver import Receiver, Request
from tests.test_store import (
    REAL,
    ROOT,
    failing_cases,
    fresh_pg_url,
    k8s,
    kafka_records,
    pg_unavailable,
    pipeline,
)

pytest_plugins = ("tests.test_store",)  # db_url / store fixtures
URL = "https://sentinel.example.com"
SECRET = "hook-secret"


def notify_settings(group_wait_s: float = 0.0) -> NotifySettings:
    return NotifySettings(
        group_wait_s=group_wait_s, backoff_base_s=0.05, backoff_max_s=0.4, external_url=URL
    )


def hook(rx: Receiver, name: str = "hook", **kw: Any) -> ReceiverSettings:
    kw.setdefault("rate_limit_per_minute", 6000)
    kw.setdefault("secret", SECRET)
    return ReceiverSettings(
        name=name, type=kw.pop("type", "webhook"), url=rx.url.replace("/hook", f"/{name}"), **kw
    )


def dispatcher(
    store: Store,
    receivers: list[ReceiverSettings],
    instance: str = "test-1",
    group_wait_s: float = 0.0,
    **kw: Any,
) -> Dispatcher:
    kw.setdefault("poll_interval_s", 0.02)
    return Dispatcher(store, receivers, notify_settings(group_wait_s), instance_id=instance, **kw)


def wait_until(pred: Callable[[], bool], timeout: float = 20.0, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


def delivery_rows(store: Store) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        return [
            dict(r)
            for r in conn.execute(
                select(deliveries, outbox.c.kind, outbox.c.created_at.label("changed_at")).join(
                    outbox, outbox.c.id == deliveries.c.event_id
                )
            ).mappings()
        ]


def all_settled(store: Store) -> bool:
    """Every outbox event expanded and every delivery finished."""
    if store.stats()["outbox_pending"]:
        return False
    rows = delivery_rows(store)
    return bool(rows) and all(r["status"] != "pending" for r in rows)


def event_ids(reqs: list[Request]) -> list[str]:
    return [r.header("X-Sentinel-Event-Id") or "" for r in reqs]


def assert_exactly_once(store: Store, rx: Receiver) -> None:
    """Every change reached every routed receiver once: one delivery row per (event,
    receiver), all sent, and no message (event id) accepted twice per receiver."""
    rows = delivery_rows(store)
    assert rows and all(r["status"] == "sent" for r in rows), Counter(r["status"] for r in rows)
    pairs = Counter((r["event_id"], r["receiver"]) for r in rows)
    assert max(pairs.values()) == 1
    accepted = rx.accepted()
    per_receiver = Counter((r.path, r.header("X-Sentinel-Event-Id")) for r in accepted)
    assert max(per_receiver.values()) == 1, [k for k, n in per_receiver.items() if n > 1]
    # each receiver saw every incident's versions in increasing order, ending at the last
    seen: dict[tuple[str, str], list[int]] = {}
    for r in accepted:
        inc_id, _, v = (r.header("X-Sentinel-Event-Id") or "").rpartition(".v")
        seen.setdefault((r.path, inc_id), []).append(int(v))
    for versions in seen.values():
        assert versions == sorted(versions)
    for r in rows:
        assert seen[(f"/{r['receiver']}", r["incident_id"])][-1] >= r["version"]


@pytest.fixture
def rx() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def test_end_to_end_signed_webhook(store: Store, rx: Receiver) -> None:
    d = dispatcher(store, [hook(rx)])
    p = pipeline(store, router=d.router, on_commit=d.wake)
    recs = kafka_records(
        REAL / "kv-cache-too-small.cri.log", stream="prod/llama-0/vllm", meta=k8s("prod", "llama-0")
    ) + kafka_records(
        REAL / "healthy-idle-sigint.cri.log",
        stream="prod/llama-0/vllm",
        start=1000,
        meta=k8s("prod", "llama-0"),
    )
    sent_before = metrics.DELIVERIES.labels(receiver="hook", outcome="sent")._value.get()
    d.start()
    assert d.status()["running"]
    try:
        for i in range(0, len(recs), 25):
            p.process(recs[i : i + 25], "kafka")
            time.sleep(0.02)
        assert wait_until(
            lambda: (
                all_settled(store) and any(r.json()["event"] == "resolved" for r in rx.accepted())
            )
        )
    finally:
        d.stop()
    accepted = rx.accepted()
    for r in accepted:
        assert verify_signature(
            SECRET,
            r.header("X-Sentinel-Timestamp"),
            r.body,
            r.header("X-Sentinel-Signature"),
            max_age_s=60,
        )
    bodies = [r.json() for r in accepted]
    assert bodies[0]["event"] == "opened" and bodies[-1]["event"] == "resolved"
    assert bodies[-1]["incident"]["status"] == "resolved"
    assert bodies[-1]["incident"]["url"] == f"{URL}/ui/incidents/{bodies[-1]['incident']['id']}"
    assert_exactly_once(store, rx)
    inc = store.get_incident(bodies[0]["incident"]["id"])
    assert inc and all(x["status"] == "sent" and x["sent_at"] for x in inc["deliveries"])
    assert metrics.DELIVERIES.labels(receiver="hook", outcome="sent")._value.get() > sent_before
    assert not d.status()["running"]


def test_burst_is_coalesced_and_later_changes_still_sent(store: Store, rx: Receiver) -> None:
    d = dispatcher(store, [hook(rx)], group_wait_s=1.0)
    p = pipeline(store, router=d.router, on_commit=d.wake)
    recs = kafka_records(REAL / "kv-cache-too-small.cri.log", stream="ns/a/vllm")
    d.start()
    try:
        for r in recs:  # one batch per line: opened and updated are separate events
            p.process([r], "kafka")
        assert wait_until(lambda: all_settled(store), timeout=10)
        (msg,) = rx.accepted()
        body = msg.json()
        kinds = [r["kind"] for r in delivery_rows(store)]
        assert kinds == ["opened", "updated"]  # two changes ...
        assert body["event"] == "opened"  # ... one message, with the current root cause
        assert body["incident"]["category"] == "oom_kv_cache" and body["incident"]["version"] == 2
        store.resolve_incident(body["incident"]["id"], "max-model-len lowered", time.time())
        assert wait_until(lambda: len(rx.accepted()) == 2, timeout=10)
    finally:
        d.stop()
    last = rx.accepted()[-1].json()
    assert last["event"] == "resolved" and last["incident"]["resolution"] == "max-model-len lowered"
    assert_exactly_once(store, rx)


def test_receiver_down_for_a_while_gets_every_alert_once(store: Store, rx: Receiver) -> None:
    cases = failing_cases(8)  # (chosen first: the receiver's failing window is timed)
    rx.fail(500, for_s=1.5)
    d = dispatcher(store, [hook(rx, timeout_s=0.3)])
    p = pipeline(store, router=d.router, on_commit=d.wake)
    d.start()
    try:
        for i, log in enumerate(cases):
            p.process(
                kafka_records(log, stream=f"ns/p{i}/vllm", partition=i, meta=k8s("ns", f"p{i}")),
                "kafka",
            )
        rx.hang(1.0, count=2)  # and two requests time out on the client side
        assert wait_until(lambda: all_settled(store), timeout=30)
    finally:
        d.stop()
    assert any(r.status == 500 for r in rx.requests) and any(r.status == 504 for r in rx.requests)
    assert_exactly_once(store, rx)
    incidents = {r["incident_id"] for r in delivery_rows(store)}
    assert {r.json()["incident"]["id"] for r in rx.accepted()} == incidents
    assert max(r["attempts"] for r in delivery_rows(store)) > 1


@pytest.mark.parametrize("n_dispatchers", [2, 3])
def test_racing_dispatchers_deliver_each_change_once(
    db_url: str, rx: Receiver, n_dispatchers: int
) -> None:
    stores = [Store(db_url) for _ in range(n_dispatchers + 1)]
    stores[0].migrate()
    receivers = [
        hook(rx, "hook"),
        hook(rx, "slack", type="slack"),
        hook(rx, "prod-only", match={"namespace": ["prod"]}),
    ]
    ds = [
        dispatcher(s, receivers, f"instance-{i}", claim_batch=2) for i, s in enumerate(stores[1:])
    ]
    p = pipeline(stores[0], router=ds[0].router)
    cases = failing_cases(15)
    for d in ds:
        d.start()
    try:
        for i, log in enumerate(cases):
            ns = "prod" if i % 2 else "dev"
            recs = kafka_records(log, stream=f"{ns}/p{i}/vllm", partition=i, meta=k8s(ns, f"p{i}"))
            for j in range(0, len(recs), 4):  # many small batches: many changes
                p.process(recs[j : j + 4], "kafka")
        assert wait_until(lambda: all_settled(stores[0]), timeout=30)
    finally:
        for d in ds:
            d.stop()
    assert_exactly_once(stores[0], rx)
    rows = delivery_rows(stores[0])
    assert {r["receiver"] for r in rows} == {"hook", "slack", "prod-only"}
    assert all(
        r["receiver"] != "prod-only"
        or r["incident_id"]
        in {x["id"] for x in stores[0].list_incidents(namespace="prod", limit=100)[0]}
        for r in rows
    )
    for s in stores:
        s.close()


PROCESS_SCRIPT = """
import sys, time
from pathlib import Path
from service.config import NotifySettings, ReceiverSettings
from service.notify.dispatcher import Dispatcher
from service.store import Store
url, rx_url, instance, stop_file = sys.argv[1:]
store = Store(url)
d = Dispatcher(store, [ReceiverSettings(name="hook", type="webhook", url=rx_url, secret="k",
                                        rate_limit_per_minute=6000)],
               NotifySettings(group_wait_s=0, backoff_base_s=0.05, backoff_max_s=0.4),
               instance_id=instance, poll_interval_s=0.01, claim_batch=1)
d.start()
deadline = time.time() + 60
while not Path(stop_file).exists() and time.time() < deadline:
    time.sleep(0.05)
d.stop()
store.close()
"""


@pytest.mark.integration
def test_two_dispatcher_processes_on_one_postgres(tmp_path: Path, rx: Receiver) -> None:
    reason = pg_unavailable()
    if reason:
        pytest.skip(reason)
    gen = fresh_pg_url()
    url = next(gen)
    try:
        store = Store(url)
        store.migrate()
        stop = tmp_path / "stop"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", PROCESS_SCRIPT, url, rx.url, f"proc-{i}", str(stop)],
                cwd=ROOT,
            )
            for i in range(2)
        ]
        router_src = dispatcher(store, [ReceiverSettings(name="hook", type="webhook", url=rx.url)])
        p = pipeline(store, router=router_src.router)
        for i, log in enumerate(failing_cases(20)):
            recs = kafka_records(log, stream=f"ns/p{i}/vllm", partition=i)
            for j in range(0, len(recs), 3):
                p.process(recs[j : j + 3], "kafka")
        assert wait_until(lambda: all_settled(store), timeout=40)
        stop.touch()
        for proc in procs:
            assert proc.wait(30) == 0
        assert_exactly_once(store, rx)
        by = Counter(r["leased_by"] for r in delivery_rows(store))
        assert by == Counter({None: sum(by.values())})  # every lease released
        store.close()
    finally:
        gen.close()


def test_silences_suppress_then_expire(store: Store, rx: Receiver) -> None:
    store.create_silence(
        {"namespace": ["prod"]}, time.time() + 1.5, Who("alice", "user"), "maintenance"
    )
    d = dispatcher(store, [hook(rx)])
    p = pipeline(store, router=d.router, on_commit=d.wake)
    log = REAL / "bad-dtype.cri.log"
    d.start()
    try:
        p.process(kafka_records(log, stream="prod/a/vllm", meta=k8s("prod", "a")), "kafka")
        p.process(
            kafka_records(log, stream="dev/b/vllm", partition=1, meta=k8s("dev", "b")), "kafka"
        )
        assert wait_until(lambda: all_settled(store))
        assert [r.json()["incident"]["namespace"] for r in rx.accepted()] == ["dev"]
        silenced = [r for r in delivery_rows(store) if r["status"] == "silenced"]
        assert len(silenced) == 1 and silenced[0]["last_error"].startswith("silence ")
        time.sleep(1.6)  # the silence ends
        p.process(
            kafka_records(log, stream="prod/c/vllm", partition=2, meta=k8s("prod", "c")), "kafka"
        )
        assert wait_until(lambda: len(rx.accepted()) == 2)
    finally:
        d.stop()
    assert rx.accepted()[-1].json()["incident"]["pod"] == "c"


def test_crashed_instance_lease_expires_and_another_sends(store: Store, rx: Receiver) -> None:
    d = dispatcher(store, [hook(rx)])
    pipeline(store, router=d.router).process(
        kafka_records(REAL / "bad-dtype.cri.log", stream="ns/a/vllm"), "kafka"
    )
    d.expand()
    claimed_at = time.time()  # the lease starts during the call: no earlier than this
    (claim,) = store.claim_deliveries("hook", "crashed-instance", lease_s=1.0, group_wait_s=0)
    assert store.claim_deliveries("hook", "other", lease_s=1.0, group_wait_s=0) == []
    d.start()
    try:
        assert wait_until(lambda: len(rx.accepted()) == 1, timeout=10)
    finally:
        d.stop()
    assert rx.accepted()[0].at - claimed_at >= 0.95  # only after the lease ran out
    # the crashed instance coming back cannot complete what it no longer holds
    assert store.finish_deliveries(claim.delivery_ids, "crashed-instance", status="sent") == 0
    (row,) = delivery_rows(store)
    assert row["status"] == "sent" and row["attempts"] == 2


def test_restart_keeps_pending_deliveries(db_url: str, rx: Receiver) -> None:
    rx.fail(503, for_s=3600)
    a = Store(db_url)
    a.migrate()
    da = dispatcher(a, [hook(rx)], instance="before-restart")
    pipeline(a, router=da.router).process(
        kafka_records(REAL / "model-unavailable-offline.cri.log", stream="ns/m/vllm"), "kafka"
    )
    da.start()
    assert wait_until(lambda: len(rx.requests) >= 2)
    da.stop()
    a.close()
    rx.recover()
    b = Store(db_url)  # the service restarts
    b.migrate()
    db = dispatcher(b, [hook(rx)], instance="after-restart")
    db.start()
    try:
        assert wait_until(lambda: len(rx.accepted()) == 1, timeout=10)
    finally:
        db.stop()
    (row,) = delivery_rows(b)
    assert row["status"] == "sent" and row["attempts"] >= 3
    b.close()


def test_pagerduty_trigger_then_resolve(store: Store, rx: Receiver) -> None:
    pd = hook(rx, "pagerduty", type="pagerduty", routing_key="R0UTING", secret=None)
    d = dispatcher(store, [pd])
    p = pipeline(store, router=d.router, on_commit=d.wake)
    d.start()
    try:
        p.process(kafka_records(REAL / "kv-cache-too-small.cri.log", stream="ns/a/vllm"), "kafka")
        assert wait_until(lambda: len(rx.accepted()) == 1)
        p.process(
            kafka_records(REAL / "healthy-idle-sigint.cri.log", stream="ns/a/vllm", start=1000),
            "kafka",
        )
        assert wait_until(lambda: len(rx.accepted()) == 2)
    finally:
        d.stop()
    trig, res = (r.json() for r in rx.accepted())
    assert (trig["event_action"], res["event_action"]) == ("trigger", "resolve")
    assert trig["dedup_key"] == res["dedup_key"]
    assert trig["payload"]["class"] == "oom_kv_cache"


def test_rate_limit_waits_and_never_drops(store: Store, rx: Receiver) -> None:
    slow = hook(rx, rate_limit_per_minute=120)  # 2/s, burst 20
    d = dispatcher(store, [slow])
    p = pipeline(store, router=d.router)
    for i in range(24):
        p.process(
            kafka_records(REAL / "bad-dtype.cri.log", stream=f"ns/p{i}/vllm", partition=i), "kafka"
        )
    d.start()
    try:
        assert wait_until(lambda: len(rx.accepted()) == 24, timeout=20)
    finally:
        d.stop()
    times = sorted(r.at for r in rx.accepted())
    assert times[-1] - times[0] >= 1.4  # 4 over the burst at 2/s
    assert_exactly_once(store, rx)


def test_warning_never_pages_unless_asked(store: Store, rx: Receiver) -> None:
    warn_log = next(
        p
        for p in sorted(REAL.parent.parent.glob("corpus/cases/*.log"))
        if p.name.startswith("gh-dotsocr")
    )
    oncall = hook(rx, "oncall")
    d = dispatcher(store, [oncall, hook(rx, "warnings", match={"severity": ["warning"]})])
    p = pipeline(store, router=d.router)
    p.process(kafka_records(warn_log, stream="ns/w/vllm"), "kafka")
    d.run_once()
    assert [r.path for r in rx.accepted()] == ["/warnings"]
    assert rx.accepted()[0].json()["incident"]["severity"] == "warning"


def test_latency_change_to_received(
    store: Store, rx: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    figures = []
    for group_wait in (0.0, 1.0):
        rx.requests.clear()
        d = dispatcher(store, [hook(rx)], group_wait_s=group_wait, poll_interval_s=0.2)
        p = Pipeline(store, pipeline(store).classifier, router=d.router, on_commit=d.wake)
        d.start()
        offset = int(group_wait * 1000)
        try:
            for i in range(40):
                p.process(
                    kafka_records(
                        REAL / "bad-dtype.cri.log",
                        stream=f"lat{group_wait}/p{i}/vllm",
                        partition=offset + i,
                    ),
                    "kafka",
                )
                time.sleep(0.03)
            assert wait_until(lambda: len(rx.accepted()) == 40, timeout=30)
        finally:
            d.stop()
        changed = {r["incident_id"]: r["changed_at"] for r in delivery_rows(store)}
        lat = sorted(r.at - changed[r.json()["incident"]["id"]] for r in rx.accepted())
        p50, p99 = statistics.median(lat), lat[int(0.99 * (len(lat) - 1))]
        figures.append(
            f"group_wait={group_wait}s: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
        )
        assert p50 < group_wait + 1.0
    with capsys.disabled():
        print(
            f"\n[{store.engine.dialect.name}] change committed → webhook received "
            f"(poll 0.2 s): " + "; ".join(figures)
        )
    assert json.loads(rx.accepted()[0].body)["event"] == "opened"


class _LongestBackoff(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return b  # every retry waits the full 60 s unless expedited


def test_recovered_receiver_gets_the_backlog_without_waiting_out_backoff(
    store: Store, rx: Receiver
) -> None:
    rx.fail(500, for_s=0.6)
    d = Dispatcher(
        store,
        [hook(rx)],
        NotifySettings(group_wait_s=0, backoff_base_s=60, backoff_max_s=60, external_url=URL),
        instance_id="t",
        poll_interval_s=0.02,
        rng=_LongestBackoff(),
    )
    p = pipeline(store, router=d.router, on_commit=d.wake)
    d.start()
    try:
        for i in range(5):
            p.process(
                kafka_records(REAL / "bad-dtype.cri.log", stream=f"ns/p{i}/vllm", partition=i),
                "kafka",
            )
        assert wait_until(lambda: len(rx.requests) >= 5)  # each failed once: up to 60 s off
        time.sleep(0.7)  # the receiver is back
        p.process(
            kafka_records(REAL / "bad-dtype.cri.log", stream="ns/new/vllm", partition=99), "kafka"
        )
        assert wait_until(lambda: len(rx.accepted()) == 6, timeout=5)
    finally:
        d.stop()
    assert_exactly_once(store, rx)
