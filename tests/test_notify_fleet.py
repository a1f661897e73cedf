"""Fleet incidents in the notification path, against real parts: the store (SQLite and
PostgreSQL), the pipeline with the real classifier on real driver-too-old lines, and a real
HTTP receiver (tests/receiver.py). Time is a controllable clock shared by the store, the
pipeline and the dispatchers: the hold is crossed by moving the clock, never by sleeping.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from service.api.app import create_app
from service.classify.judgements.registry import load_judgements
from service.config import FleetSettings, NotifySettings, ReceiverSettings, Settings
from service.context import ServiceContext
from service.notify.dispatcher import Dispatcher
from service.notify.webhook import verify_signature
from service.pipeline import Pipeline
from service.records import LogRecord
from service.sources.files import read_files
from service.store import Store
from service.store.people import Who
from service.store.schema import deliveries, incidents, outbox
from tests.receiver import Receiver
from tests.test_store import REAL, _rulebook, k8s, kafka_records, pipeline

pytest_plugins = ("tests.test_store",)  # db_url / store fixtures
T0 = 1_785_000_000.0
HOLD = 20.0
SECRET = "fleet-secret"
IMAGE = "vllm/vllm-openai:kimi-k3"
# the lines of tests/test_fleet.py: nvidia-smi banner (driver 575.57.08), platform, torch
DRIVER_TOO_OLD = [
    "| NVIDIA-SMI 575.57.08    Driver Version: 575.57.08      CUDA Version: 12.9     |",
    "INFO 07-27 10:00:00 [__init__.py:239] Automatically detected platform cuda.",
    "RuntimeError: The NVIDIA driver on your system is too old (found version 12090).",
]
HEALTHY = REAL / "healthy-idle-sigint.cri.log"
KV_CACHE = REAL / "kv-cache-too-small.cri.log"


class Clock:
    """Wall clock under the test's control (thread-safe reads)."""

    def __init__(self, t: float = T0) -> None:
        self.t = t
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.t

    def advance(self, seconds: float) -> float:
        with self._lock:
            self.t += seconds
            return self.t


# ---- parts ---------------------------------------------------------------------------------
def pod_name(i: int) -> str:
    """Pods of one Deployment: ``kimi-<replicaset hash>-<5 chars>``."""
    return f"kimi-7d9f8c6b5d-{i:05d}".replace("0", "z")


def meta(i: int, ns: str = "llm") -> dict[str, Any]:
    return {**k8s(ns, pod_name(i), node=f"gpu-b300-{i}", app="kimi"), "image": IMAGE}


def stream(i: int, ns: str = "llm") -> str:
    return f"{ns}/{pod_name(i)}/vllm"


def failing(i: int, at: float, driver: str = "575.57.08", ns: str = "llm") -> list[LogRecord]:
    """Pod ``i`` of the Deployment failing at ``at``: the driver is too old for the image."""
    return [
        LogRecord(
            stream(i, ns), line.replace("575.57.08", driver), time=at + k * 0.01, meta=meta(i, ns)
        )
        for k, line in enumerate(DRIVER_TOO_OLD)
    ]


def recovering(i: int, ns: str = "llm") -> list[LogRecord]:
    """Pod ``i`` restarted on a fixed node: a healthy startup that serves (resolves)."""
    out = []
    for rec in read_files([str(HEALTHY)]):
        rec.stream = stream(i, ns)
        rec.meta = {**rec.meta, **meta(i, ns)}
        rec.position = None  # (a file position would make the next pod's lines "seen")
        out.append(rec)
    return out


def hook(rx: Receiver, name: str = "oncall", **kw: Any) -> ReceiverSettings:
    kw.setdefault("rate_limit_per_minute", 6000)
    if kw.get("type", "webhook") == "webhook":
        kw.setdefault("secret", SECRET)
    return ReceiverSettings(
        name=name, type=kw.pop("type", "webhook"), url=rx.url.replace("/hook", f"/{name}"), **kw
    )


def fleet_dispatcher(
    store: Store,
    receivers: list[ReceiverSettings],
    clock: Clock,
    *,
    instance: str = "test-1",
    group_wait_s: float = 1.0,
    fleet: FleetSettings | None = None,
    **kw: Any,
) -> Dispatcher:
    kw.setdefault("poll_interval_s", 0.02)
    return Dispatcher(
        store,
        receivers,
        NotifySettings(
            group_wait_s=group_wait_s,
            backoff_base_s=0.05,
            backoff_max_s=0.4,
            external_url="https://sentinel.test",
        ),
        instance_id=instance,
        clock=clock,
        fleet=fleet or FleetSettings(threshold=3, window_s=900, hold_s=HOLD),
        fleet_prone=frozenset(load_judgements().fleet.prone_categories),
        **kw,
    )


def pump(*ds: Dispatcher, rounds: int = 4) -> None:
    """Expand and send whatever is due now (a few passes: a fleet found while sending has
    its own outbox event, expanded on the next pass)."""
    for _ in range(rounds):
        for d in ds:
            d.run_once()


def webhooks(rx: Receiver, path: str = "/oncall") -> list[dict[str, Any]]:
    out = []
    for r in rx.accepted():
        if r.path == path:
            assert verify_signature(
                SECRET, r.header("X-Sentinel-Timestamp"), r.body, r.header("X-Sentinel-Signature")
            )
            out.append(r.json())
    return out


def rows(store: Store) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        return [
            dict(r)
            for r in conn.execute(
                select(deliveries, outbox.c.kind)
                .join(outbox, outbox.c.id == deliveries.c.event_id)
                .order_by(deliveries.c.id)
            ).mappings()
        ]


def fleet_rows(store: Store) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        return [
            dict(r)
            for r in conn.execute(
                select(
                    incidents.c.id, incidents.c.status, incidents.c.version, incidents.c.body
                ).where(incidents.c.stream.like("fleet/%"))
            ).mappings()
        ]


def settled(store: Store) -> bool:
    return store.stats()["outbox_pending"] == 0 and all(
        r["status"] != "pending" for r in rows(store)
    )


@pytest.fixture
def rx() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(db_url: str, clock: Clock) -> Iterator[Store]:
    """The store on the test's clock (claims, expansion and commits read it)."""
    s = Store(db_url, clock=clock)
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def stopper() -> Iterator[list[Dispatcher]]:
    ds: list[Dispatcher] = []
    yield ds
    for d in ds:
        d.stop()


# ---- 1. twelve pods, one driver branch → one fleet page ------------------------------------
def test_twelve_pods_on_one_driver_branch_page_once_as_a_fleet(
    store: Store, rx: Receiver, clock: Clock, stopper: list[Dispatcher]
) -> None:
    team = hook(rx, "llm-team", match={"namespace": ["llm"], "label:app": ["kimi"]})
    d = fleet_dispatcher(store, [hook(rx), team], clock)
    stopper.append(d)
    p = pipeline(store, router=d.router, on_commit=d.wake, clock=clock)
    for i in range(12):  # a rollout: one pod after another, 0.5 s apart
        p.process(failing(i, clock()), "http")
        clock.advance(0.5)
    children = [x["id"] for x in store.list_incidents(limit=100)[0]]
    assert len(children) == 12
    assert {x["category"] for x in store.list_incidents(limit=100)[0]} == {"driver_incompatible"}

    pump(d)
    clock.advance(HOLD - 6.5)  # 19.5 s after the first pod: still held
    pump(d)
    assert rx.requests == [] and fleet_rows(store) == []
    assert all(r["status"] == "pending" and r["attempts"] == 0 for r in rows(store))

    clock.advance(1.0)  # the first pod's hold is over: the fleet is found
    pump(d)
    clock.advance(1.0)  # the fleet incident's own group_wait
    pump(d)
    clock.advance(HOLD)  # every other pod's hold is over too
    pump(d)
    assert settled(store)

    (fleet,) = fleet_rows(store)
    for path in ("/oncall", "/llm-team"):
        (msg,) = webhooks(rx, path)  # one page per receiver, and it is the fleet's
        assert msg["event"] == "opened"
        inc = msg["incident"]
        assert inc["id"] == fleet["id"] and inc["id"].startswith("fleet-")
        assert inc["extra"]["fleet"]["count"] == 12
        assert (inc["extra"]["fleet"]["key"], inc["extra"]["fleet"]["value"]) == (
            "driver_branch",
            "r575",
        )
        assert (
            inc["detail"]
            == "12 workloads failed with driver_incompatible sharing driver_branch=r575"
        )
        assert inc["category"] == "driver_incompatible" and inc["method"] == "fleet"
        assert inc["namespace"] == "llm" and inc["meta"]["labels"] == {"app": "kimi"}
        assert sorted(inc["extra"]["fleet"]["members"]) == sorted(children)
    assert len(rx.requests) == 2

    by_status = Counter((r["incident_id"] == fleet["id"], r["status"]) for r in rows(store))
    assert by_status == {(False, "inhibited"): 24, (True, "sent"): 2}
    assert {r["last_error"] for r in rows(store) if r["status"] == "inhibited"} == {
        f"fleet {fleet['id']}"
    }
    assert max(r["attempts"] for r in rows(store) if r["status"] == "inhibited") == 1

    # the per-pod incidents stay visible, each naming its fleet; the fleet lists them
    for cid in children:
        child = store.get_incident(cid)
        assert child["fleet_id"] == fleet["id"] and child["status"] == "open"
        assert {x["status"] for x in child["deliveries"]} == {"inhibited"}
    view = store.get_incident(fleet["id"])
    assert sorted(m["id"] for m in view["members"]) == sorted(children)
    assert {m["pod"] for m in view["members"]} == {pod_name(i) for i in range(12)}
    members, _ = store.list_incidents(fleet_id=fleet["id"], limit=100)
    assert sorted(m["id"] for m in members) == sorted(children)


# ---- 2. below the threshold → each pod pages on its own, after the hold ---------------------
def test_two_pods_below_threshold_page_each_after_the_hold(
    store: Store, rx: Receiver, clock: Clock, stopper: list[Dispatcher]
) -> None:
    d = fleet_dispatcher(store, [hook(rx)], clock)
    stopper.append(d)
    p = pipeline(store, router=d.router, clock=clock)
    for i in range(2):
        p.process(failing(i, clock()), "http")
    pump(d)
    clock.advance(HOLD - 0.5)
    pump(d)
    assert rx.requests == []
    clock.advance(1.0)
    pump(d)
    msgs = webhooks(rx)
    assert sorted(m["incident"]["pod"] for m in msgs) == sorted([pod_name(0), pod_name(1)])
    assert all(
        m["event"] == "opened" and not m["incident"]["id"].startswith("fleet-") for m in msgs
    )
    assert fleet_rows(store) == [] and settled(store)
    assert all(r["attempts"] == 1 for r in rows(store))  # the hold was no attempt

    # a third pod later makes it a fleet: the fleet pages, the third pod does not; the two
    # already paged become members and their resolutions still reach the receiver
    clock.advance(60)
    p.process(failing(2, clock()), "http")
    pump(d)
    clock.advance(HOLD + 1)
    pump(d)
    clock.advance(1.5)
    pump(d)
    msgs = webhooks(rx)
    assert len(msgs) == 3 and msgs[-1]["incident"]["id"].startswith("fleet-")
    fleet = msgs[-1]["incident"]
    assert fleet["extra"]["fleet"]["count"] == 3
    assert {
        store.get_incident(x["id"])["fleet_id"]
        for x in store.list_incidents()[0]
        if not x["id"].startswith("fleet-")
    } == {fleet["id"]}

    for i in range(3):
        p.process(recovering(i), "http")
    pump(d)
    clock.advance(1.5)
    pump(d)
    events = [(m["event"], m["incident"]["pod"] or m["incident"]["id"]) for m in webhooks(rx)]
    assert sorted(events[3:]) == sorted(
        [("resolved", pod_name(0)), ("resolved", pod_name(1)), ("resolved", fleet["id"])]
    )
    assert store.get_incident(fleet["id"])["status"] == "resolved"


# ---- 3. capacity failures are not fleet-prone: per pod, at once ----------------------------
def test_capacity_failures_page_per_pod_without_a_hold(
    store: Store, rx: Receiver, clock: Clock, stopper: list[Dispatcher]
) -> None:
    d = fleet_dispatcher(store, [hook(rx)], clock, group_wait_s=0.0)
    stopper.append(d)
    p = pipeline(store, router=d.router, clock=clock)
    for i in range(4):  # same namespace, image and Deployment: would share every key
        p.process(kafka_records(KV_CACHE, stream=stream(i), partition=i, meta=meta(i)), "kafka")
    pump(d)  # the clock has not moved
    msgs = webhooks(rx)
    assert sorted(m["incident"]["pod"] for m in msgs) == sorted(pod_name(i) for i in range(4))
    assert {m["incident"]["category"] for m in msgs} == {"oom_kv_cache"}
    assert fleet_rows(store) == [] and settled(store)


# ---- 4. several instances racing on one database → one fleet page ---------------------------
@pytest.mark.parametrize("n_instances", [2, 3])
def test_racing_instances_page_the_fleet_once(
    db_url: str, rx: Receiver, clock: Clock, stopper: list[Dispatcher], n_instances: int
) -> None:
    stores = [Store(db_url, clock=clock) for _ in range(n_instances + 1)]
    stores[0].migrate()
    receivers = [hook(rx), hook(rx, "slack", type="slack")]
    ds = [
        fleet_dispatcher(
            s, receivers, clock, instance=f"instance-{i}", group_wait_s=0.0, claim_batch=1
        )
        for i, s in enumerate(stores[1:])
    ]
    stopper.extend(ds)
    joined: list[tuple[str, str | None]] = []  # (instance, fleet) per member it judged
    for s, d in zip(stores[1:], ds, strict=True):
        inner = s.inhibit_for_fleet

        def spy(*a: Any, _inner: Any = inner, _name: str = d.instance_id, **kw: Any) -> Any:
            fid = _inner(*a, **kw)
            joined.append((_name, fid))
            return fid

        s.inhibit_for_fleet = spy  # type: ignore[method-assign]
    p = pipeline(stores[0], router=ds[0].router, clock=clock)
    for i in range(12):
        p.process(failing(i, clock()), "http")
    for d in ds:
        d.start()
    deadline = time.monotonic() + 10
    while stores[0].stats()["outbox_pending"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert rx.requests == []  # all held
    clock.advance(HOLD + 1)  # every pod's hold is over at once: the running instances race
    deadline = time.monotonic() + 30
    while not (settled(stores[0]) and len(rx.accepted()) >= 2) and time.monotonic() < deadline:
        time.sleep(0.02)  # polling for the threads, not waiting out a hold
    for d in ds:
        d.stop()
    assert settled(stores[0])

    (fleet,) = fleet_rows(stores[0])
    assert fleet["body"]["extra"]["fleet"]["count"] == 12 and fleet["version"] == 1
    assert Counter(r.path for r in rx.accepted()) == {"/oncall": 1, "/slack": 1}, [
        (r.path, r.header("X-Sentinel-Event-Id")) for r in rx.accepted()
    ]
    (msg,) = webhooks(rx)
    assert msg["incident"]["id"] == fleet["id"]
    slack = next(r for r in rx.accepted() if r.path == "/slack").json()
    assert "driver_incompatible" in slack["text"]
    assert "12 workloads share driver_branch=r575" in json.dumps(slack["blocks"])
    assert " on 12 workloads sharing driver_branch=r575 in llm: " in slack["text"]
    statuses = Counter((r["incident_id"] == fleet["id"], r["status"]) for r in rows(stores[0]))
    assert statuses == {(False, "inhibited"): 24, (True, "sent"): 2}
    assert {fid for _, fid in joined} == {fleet["id"]}
    print(
        f"\n[{stores[0].engine.dialect.name}] members judged per instance: "
        f"{dict(Counter(name for name, _ in joined))}"
    )
    with stores[0].engine.connect() as conn:  # every member points at the one fleet
        assert set(
            conn.execute(
                select(incidents.c.fleet_id).where(~incidents.c.stream.like("fleet/%"))
            ).scalars()
        ) == {fleet["id"]}
    for s in stores:
        s.close()


# ---- 5. the fleet resolves with its last member; later pods join silently -------------------
def test_fleet_resolves_when_every_member_has_and_late_pods_join_silently(
    store: Store, rx: Receiver, clock: Clock, stopper: list[Dispatcher]
) -> None:
    pd = hook(rx, "pagerduty", type="pagerduty", routing_key="R0UTING")
    d = fleet_dispatcher(store, [hook(rx), pd], clock)
    stopper.append(d)
    p = pipeline(store, router=d.router, clock=clock)
    for i in range(5):
        p.process(failing(i, clock()), "http")
    clock.advance(HOLD + 1)
    pump(d)
    clock.advance(1.5)
    pump(d)
    (opened,) = webhooks(rx)
    fid = opened["incident"]["id"]
    assert opened["incident"]["extra"]["fleet"]["count"] == 5

    clock.advance(120)  # a sixth pod of the Deployment fails later: it joins, no page
    p.process(failing(5, clock()), "http")
    pump(d)
    clock.advance(HOLD + 1)
    pump(d)
    assert len(webhooks(rx)) == 1
    assert store.get_incident(fid)["extra"]["fleet"]["count"] == 6
    (late,), _ = store.list_incidents(pod=pod_name(5))
    assert late["fleet_id"] == fid

    for i in range(5):  # five of six recover: the fleet stays open
        p.process(recovering(i), "http")
    clock.advance(1.5)
    pump(d)
    assert len(webhooks(rx)) == 1 and store.get_incident(fid)["status"] == "open"
    p.process(recovering(5), "http")  # the last one: the fleet resolves and says so, once
    clock.advance(1.5)
    pump(d)
    msgs = webhooks(rx)
    assert [m["event"] for m in msgs] == ["opened", "resolved"]
    assert msgs[1]["incident"]["id"] == fid
    assert msgs[1]["incident"]["resolution"] == "all 6 member incidents resolved"
    fleet = store.get_incident(fid)
    assert fleet["status"] == "resolved" and fleet["extra"]["resolved_by"] == "members"
    assert settled(store)
    trigger, resolve = (r.json() for r in rx.accepted() if r.path == "/pagerduty")
    assert (trigger["event_action"], resolve["event_action"]) == ("trigger", "resolve")
    assert trigger["dedup_key"] == resolve["dedup_key"] == fid
    assert trigger["payload"]["summary"].startswith(
        "[compatibility/driver_incompatible] cuda_init on 5 workloads sharing "
        "driver_branch=r575 in llm: "
    )
    assert trigger["payload"]["custom_details"]["fleet"]["count"] == 5
    # the members' own resolutions were never sent: nobody was told they were open
    member_rows = [r for r in rows(store) if r["incident_id"] != fid]
    assert {r["status"] for r in member_rows} == {"inhibited", "dropped"}


def test_fleet_resolved_by_hand_pages_its_resolution(
    store: Store, rx: Receiver, clock: Clock, stopper: list[Dispatcher]
) -> None:
    d = fleet_dispatcher(store, [hook(rx)], clock, group_wait_s=0.0)
    stopper.append(d)
    p = pipeline(store, router=d.router, clock=clock)
    for i in range(3):
        p.process(failing(i, clock()), "http")
    clock.advance(HOLD + 1)
    pump(d)
    (opened,) = webhooks(rx)
    fid = opened["incident"]["id"]
    assert (
        store.resolve_incident(fid, "driver rolled forward to r580", clock())["status"]
        == "resolved"
    )
    pump(d)
    msgs = webhooks(rx)
    assert [m["event"] for m in msgs] == ["opened", "resolved"]
    assert msgs[1]["incident"]["resolution"] == "driver rolled forward to r580"


# ---- 6. silences, routes and other keys ----------------------------------------------------
def test_a_silence_on_the_fleet_silences_it_and_the_pods_stay_inhibited(
    store: Store, rx: Receiver, clock: Clock, stopper: list[Dispatcher]
) -> None:
    store.create_silence(
        {"stream": ["fleet/*"]}, clock() + 3600, Who("alice", "user"), "driver rollout"
    )
    d = fleet_dispatcher(store, [hook(rx)], clock, group_wait_s=0.0)
    stopper.append(d)
    p = pipeline(store, router=d.router, clock=clock)
    for i in range(4):
        p.process(failing(i, clock()), "http")
    clock.advance(HOLD + 1)
    pump(d)
    assert rx.requests == [] and settled(store)
    (fleet,) = fleet_rows(store)
    assert Counter((r["incident_id"] == fleet["id"], r["status"]) for r in rows(store)) == {
        (False, "inhibited"): 4,
        (True, "silenced"): 1,
    }


def test_a_receiver_the_fleet_does_not_route_to_still_gets_its_pods(
    store: Store, rx: Receiver, clock: Clock, stopper: list[Dispatcher]
) -> None:
    # a receiver for one pod: the fleet (no pod of its own) does not route there
    pod0 = hook(rx, "pod0", match={"pod": [pod_name(0)]})
    d = fleet_dispatcher(store, [hook(rx), pod0], clock, group_wait_s=0.0)
    stopper.append(d)
    p = pipeline(store, router=d.router, clock=clock)
    for i in range(3):
        p.process(failing(i, clock()), "http")
    clock.advance(HOLD + 1)
    pump(d)
    assert [m["incident"]["id"][:6] for m in webhooks(rx)] == ["fleet-"]
    (own,) = webhooks(rx, "/pod0")
    assert own["incident"]["pod"] == pod_name(0)


def test_different_driver_branches_in_one_namespace_form_a_namespace_fleet(
    store: Store, rx: Receiver, clock: Clock, stopper: list[Dispatcher]
) -> None:
    d = fleet_dispatcher(store, [hook(rx)], clock, group_wait_s=0.0)
    stopper.append(d)
    p = pipeline(store, router=d.router, clock=clock)
    for i, drv in enumerate(["535.104.05", "550.54.15", "575.57.08"]):
        p.process(failing(i, clock(), driver=drv), "http")
    clock.advance(HOLD + 1)
    pump(d)
    (msg,) = webhooks(rx)
    f = msg["incident"]["extra"]["fleet"]
    assert (f["key"], f["value"], f["count"]) == ("image", IMAGE, 3)


def test_disabled_fleets_page_per_pod_at_once(
    store: Store, rx: Receiver, clock: Clock, stopper: list[Dispatcher]
) -> None:
    d = fleet_dispatcher(
        store, [hook(rx)], clock, group_wait_s=0.0, fleet=FleetSettings(enabled=False)
    )
    stopper.append(d)
    p = pipeline(store, router=d.router, clock=clock)
    for i in range(4):
        p.process(failing(i, clock()), "http")
    pump(d)
    assert len(webhooks(rx)) == 4 and fleet_rows(store) == []


# ---- 7. the API shows fleets and members ---------------------------------------------------
def test_api_shows_the_fleet_and_its_members(
    store: Store, rx: Receiver, clock: Clock, stopper: list[Dispatcher]
) -> None:
    d = fleet_dispatcher(store, [hook(rx)], clock, group_wait_s=0.0)
    stopper.append(d)
    p = Pipeline(store, pipeline(store).classifier, router=d.router, clock=clock)
    for i in range(3):
        p.process(failing(i, clock()), "http")
    clock.advance(HOLD + 1)
    pump(d)
    (msg,) = webhooks(rx)
    fid = msg["incident"]["id"]
    ctx = ServiceContext(
        settings=Settings(),
        store=store,
        pipeline=p,
        rulebook=_rulebook(),
        text_model=None,
        ready=True,
    )
    with TestClient(create_app(ctx)) as client:
        fleet = client.get(f"/incidents/{fid}").json()
        assert fleet["extra"]["fleet"]["count"] == 3 and len(fleet["members"]) == 3
        member = client.get(f"/incidents/{fleet['members'][0]['id']}").json()
        assert member["fleet_id"] == fid
        assert member["deliveries"][0]["status"] == "inhibited"
        page = client.get("/incidents", params={"fleet_id": fid}).json()
        assert page["count"] == 3 and {x["fleet_id"] for x in page["items"]} == {fid}
        stats = client.get("/stats").json()
        assert stats["deliveries_by_status"] == {"inhibited": 3, "sent": 1}
