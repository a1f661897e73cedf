"""End to end: the real service (``vllm-sentinel serve`` subprocesses) against a real Kafka
broker (Tansu), real webhook receivers, SQLite or PostgreSQL, fed the way collectors feed it
(Fluent Bit's kafka output records keyed by pod; fluent-logger and raw Forward messages;
Fluent Bit's http output).

Waits poll a condition with a deadline. "Settled" means every stream holds every line
produced for it (the snapshots are committed with the incidents and outbox events they
caused) and the database has no unexpanded outbox event and no pending delivery: nothing
more can be sent, so the receiver's count is final.
"""

from __future__ import annotations

import base64
import gzip
import json
import signal
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from service.notify.webhook import verify_signature
from tests.e2e_support import (
    CORPUS,
    REAL,
    SECRET,
    Db,
    Expected,
    Sentinel,
    fluent_bit_records,
    free_port,
    interleave,
    kafka_message,
    kafka_source,
    partition_of,
    pods_per_partition,
    produce,
    service_config,
    serving_records,
    spread,
    wait_until,
    webhook,
)
from tests.kafka_fixtures import committed, create_topic, unique
from tests.receiver import Receiver, Request

pytest_plugins = ["tests.kafka_fixtures"]  # kafka_bootstrap: one broker per session
pytestmark = pytest.mark.integration

KV_CACHE = REAL / "kv-cache-too-small.cri.log"
HEADS_NOT_DIVISIBLE = CORPUS / "gh-gpustack-814-v06-tp3-heads-not-divisible.log"
HEALTHY = REAL / "healthy-serving-prefix-caching-sigterm.cri.log"
NS = "llm-prod"


def label(log: Path) -> dict[str, str]:
    """The corpus label (tier/category/stage) of a real log."""
    name = log.name.removesuffix(".cri.log").removesuffix(".log")
    path = CORPUS / f"{name}.json"
    if not path.exists():
        path = CORPUS / f"real-cpu-{name}.json"
    return json.loads(path.read_text())


# ---- fixtures ------------------------------------------------------------------------------
@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[..., Sentinel]]:
    """``launch(name, config)`` → a started, ready :class:`Sentinel`; all stopped at the end
    (their log tails are printed: pytest shows them when the test failed)."""
    started: list[Sentinel] = []

    def make(name: str, config: dict[str, Any], *, start: bool = True) -> Sentinel:
        s = Sentinel(tmp_path, name, config)
        started.append(s)
        if start:
            s.start().wait_ready()
        return s

    yield make
    for s in started:  # all at once: each takes a moment to leave its consumer group
        if s.alive():
            s.proc.send_signal(signal.SIGTERM)
    for s in started:
        s.close()
        print(f"----- {s.name} ({s.log_path}) -----\n{s.log_tail(3000)}")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as rx:
        yield rx


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sentinel.db'}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL schema for this test (dropped afterwards)."""
    from tests.test_store import fresh_pg_url, pg_unavailable

    reason = pg_unavailable()
    if reason:
        pytest.skip(reason)
    yield from fresh_pg_url()


@pytest.fixture
def db_of() -> Iterator[Callable[[str], Db]]:
    opened: list[Db] = []

    def make(url: str) -> Db:
        db = Db(url)
        opened.append(db)
        return db

    yield make
    for db in opened:
        db.close()


# ---- helpers -------------------------------------------------------------------------------
def settle(services: list[Sentinel], db: Db, exp: Expected, timeout: float = 40.0) -> None:
    """Wait until every produced line is stored and nothing is left to send."""
    svc = services[0]

    def all_lines() -> bool:
        for key, n in exp.lines.items():
            st = svc.stream(key)
            if st is None or st["lines"] < n:
                return False
            assert st["lines"] == n, f"{key}: {st['lines']} lines stored, {n} produced"
        return True

    wait_until(all_lines, timeout, "every produced line to be stored")
    wait_until(db.settled, timeout, "every delivery to be sent")


def check_signed(req: Request) -> dict[str, Any]:
    """The webhook body, after checking its signature and headers."""
    ts = req.header("X-Sentinel-Timestamp")
    assert ts is not None
    assert verify_signature(
        SECRET, ts, req.body, req.header("X-Sentinel-Signature"), max_age_s=300
    ), "bad X-Sentinel-Signature"
    assert not verify_signature("wrong-secret", ts, req.body, req.header("X-Sentinel-Signature"))
    body = req.json()
    assert req.header("X-Sentinel-Event-Id") == body["event_id"]
    assert req.header("X-Sentinel-Event") == body["event"]
    return body


def accepted_events(requests: list[Request]) -> list[tuple[str, str, int]]:
    """(incident id, event, version) of each accepted webhook."""
    out = []
    for r in requests:
        if 200 <= r.status < 300:
            b = check_signed(r)
            out.append((b["incident"]["id"], b["event"], b["incident"]["version"]))
    return out


def assert_once_each(
    requests: list[Request], incident_ids: set[str], *, marked_repeats: bool = False
) -> None:
    """Every incident paged, no event id accepted twice, nothing else paged.

    With ``marked_repeats`` (a kill can land between a receiver's 2xx and the outbox row
    being marked sent), an event id may come again only as a marked redelivery
    (``X-Sentinel-Redelivery: true``, same ``Idempotency-Key``), which a receiver drops."""
    seen: set[str | None] = set()
    dup = []
    for r in requests:
        if not 200 <= r.status < 300:
            continue
        event = r.header("X-Sentinel-Event-Id")
        if event in seen:
            marked = r.header("X-Sentinel-Redelivery") == "true"
            if not (marked_repeats and marked and r.header("Idempotency-Key")):
                dup.append(event)
        seen.add(event)
    assert not dup, f"event ids delivered more than once: {dup}"
    got = {i for i, _, _ in accepted_events(requests)}
    assert got == incident_ids, (
        f"missing {sorted(incident_ids - got)}, unexpected {sorted(got - incident_ids)}"
    )


# ---- 1. one failing startup → one incident → one signed webhook ----------------------------
def test_failing_startup_from_kafka_pages_once_and_healthy_pages_nothing(
    kafka_bootstrap: str,
    launch: Callable[..., Sentinel],
    receiver: Receiver,
    sqlite_url: str,
    db_of: Callable[[str], Db],
) -> None:
    topic = create_topic(kafka_bootstrap, 2, "e2e-one")
    svc = launch(
        "one",
        service_config(
            store_url=sqlite_url,
            api_port=free_port(),
            kafka=kafka_source(kafka_bootstrap, topic, unique("g")),
            receivers=[webhook(receiver.url)],
            notify={"group_wait_s": 1.0},
        ),
    )
    svc.wait_assigned()
    pods = {"kimi-kv-0": KV_CACHE, "chat-ok-0": HEALTHY}
    logs = [fluent_bit_records(path, NS, pod) for pod, path in pods.items()]
    messages = [kafka_message(r) for r in interleave(logs)]
    exp = Expected.of(messages)
    assert len(exp.critical()) == 1
    produce(kafka_bootstrap, topic, messages)
    db = db_of(sqlite_url)
    settle([svc], db, exp)

    incidents = svc.incidents()
    assert sorted(i["id"] for i in incidents) == sorted(exp.critical())
    assert svc.incidents(pod="chat-ok-0") == []  # the healthy log: nothing
    hooks = receiver.accepted()
    assert len(hooks) == 1, [r.header("X-Sentinel-Event-Id") for r in receiver.requests]
    assert_once_each(receiver.requests, set(exp.critical()))
    for pod in ("kimi-kv-0",):
        want = label(pods[pod])
        (inc,) = svc.incidents(pod=pod)
        for k in ("tier", "category", "stage"):
            assert inc[k] == want[k], (pod, k, inc[k], want[k])
        assert (inc["namespace"], inc["pod"], inc["status"]) == (NS, pod, "open")
        (body,) = [check_signed(r) for r in hooks if r.json()["incident"]["id"] == inc["id"]]
        # its first page; the version is the incident's at the page (a failure spread over
        # two commits - two Kafka polls, two slices of one - is paged once, as v2)
        assert body["event"] == "opened" and body["event_id"].startswith(f"{inc['id']}.v")
        got = body["incident"]
        assert (got["tier"], got["category"], got["stage"]) == (
            want["tier"],
            want["category"],
            want["stage"],
        )
        assert got["meta"]["namespace"] == NS and got["meta"]["pod"] == pod
        assert got["stream"] == f"{NS}/{pod}/vllm"
        assert got["url"].endswith(f"/incidents/{inc['id']}")
    assert svc.terminate() == 0


# ---- 6. writes need the token ---------------------------------------------------------------
def test_unauthenticated_writes_are_refused(
    launch: Callable[..., Sentinel], receiver: Receiver, sqlite_url: str, db_of: Callable[[str], Db]
) -> None:
    token = "e2e-" + uuid.uuid4().hex
    svc = launch(
        "auth",
        service_config(
            store_url=sqlite_url,
            api_port=free_port(),
            token=token,
            receivers=[webhook(receiver.url)],
        ),
    )
    records = fluent_bit_records(REAL / "bad-dtype.cri.log", NS, "auth-0")
    for r in records:  # Fluent Bit http output, format json: date key as a double
        r["date"] = time.time()
        del r["@timestamp"]
    body = json.dumps(records).encode()
    ingest = {"content": body, "extra": {"Content-Type": "application/json"}}
    wrong = {"Authorization": "Bearer not-the-token"}
    good = svc.headers()

    def post(
        path: str, auth: dict[str, str], extra: dict[str, str] | None = None, **kw: Any
    ) -> int:
        return svc.http.post(path, headers={**(extra or {}), **auth}, **kw).status_code

    assert post("/ingest", {}, **ingest) == 401
    assert post("/ingest", wrong, **ingest) == 401
    assert svc.stream(f"{NS}/auth-0/vllm") is None  # nothing stored
    assert post("/ingest", {"Authorization": f"Basic {token}"}, **ingest) == 401
    assert post("/ingest", good, **ingest) == 200
    (inc,) = svc.incidents()  # reads stay open (no read_token)
    assert inc["pod"] == "auth-0"
    db = db_of(sqlite_url)
    wait_until(lambda: db.settled() and receiver.accepted(), 20, "the opened page")

    resolve = {"json": {"reason": "fixed the dtype"}}
    assert post(f"/incidents/{inc['id']}/resolve", {}, **resolve) == 401
    assert post(f"/incidents/{inc['id']}/resolve", wrong, **resolve) == 401
    assert svc.incidents()[0]["status"] == "open"
    silence = {
        "json": {
            "matchers": {"namespace": [NS]},
            "ends_at": time.time() + 600,
            "comment": "maintenance",
        }
    }
    assert post("/silences", {}, **silence) == 401
    assert post("/silences", wrong, **silence) == 401
    assert svc.http.get("/silences").json() == []

    assert post(f"/incidents/{inc['id']}/resolve", good, **resolve) == 200
    assert svc.incidents()[0]["status"] == "resolved"
    wait_until(lambda: db.settled() and len(receiver.accepted()) >= 2, 20, "the resolved page")
    assert [e for _, e, _ in accepted_events(receiver.requests)] == ["opened", "resolved"]
    # a silence without a namespace is refused until cluster-wide is chosen; preview first
    wide = {"json": {**silence["json"], "matchers": {"category": [inc["category"]]}}}
    assert post("/silences", good, **wide) == 422
    seen = svc.http.post("/silences/preview", json={"matchers": wide["json"]["matchers"]})
    assert seen.status_code == 200 and seen.json()["cluster_wide"] is True
    assert [i["id"] for i in seen.json()["recent"]] == [inc["id"]]
    assert svc.http.get("/silences").json() == []
    assert post("/silences", good, **silence) == 201
    assert len(svc.http.get("/silences").json()) == 1


# ---- 8. orderly shutdown keeps the stream state ---------------------------------------------
def test_sigterm_exits_zero_and_a_restart_keeps_the_half_started_stream(
    kafka_bootstrap: str,
    launch: Callable[..., Sentinel],
    sqlite_url: str,
    db_of: Callable[[str], Db],
) -> None:
    topic = create_topic(kafka_bootstrap, 1, "e2e-term")
    group = unique("g")
    svc = launch(
        "term",
        service_config(
            store_url=sqlite_url,
            api_port=free_port(),
            kafka=kafka_source(kafka_bootstrap, topic, group),
        ),
    )
    svc.wait_assigned()
    messages = [kafka_message(r) for r in fluent_bit_records(HEALTHY, NS, "half-0")]
    head, tail = messages[:40], messages[40:]  # stopped while loading the model
    exp_head, exp_all = Expected.of(head), Expected.of(messages)
    key = f"{NS}/half-0/vllm"
    produce(kafka_bootstrap, topic, head)
    wait_until(
        lambda: (svc.stream(key) or {}).get("lines") == exp_head.lines[key],
        30,
        "the first 40 lines",
    )
    before = svc.stream(key)
    assert (before["status"], before["stage"]) == ("starting", "model_load")

    started = time.monotonic()
    assert svc.terminate(timeout=10) == 0
    assert time.monotonic() - started < 5.0
    # the orderly stop committed what it had stored: a restart re-reads nothing
    assert committed(kafka_bootstrap, group, topic, 1) == {0: len(head)}

    svc.start().wait_ready()
    after = svc.stream(key)
    assert after == before
    svc.wait_assigned()
    produce(kafka_bootstrap, topic, tail)  # the startup goes on where it was
    db = db_of(sqlite_url)
    settle([svc], db, exp_all)
    done = svc.stream(key)
    assert (done["stage"], done["status"]) == ("serving", "stopped")
    assert done["timeline"]["model_load"] == before["timeline"]["model_load"]
    assert svc.incidents() == []
    assert svc.terminate(timeout=10) == 0


# ---- 2. two replicas, one consumer group, one PostgreSQL ------------------------------------
# One critical incident each, announced once (opened), of per-workload categories (config,
# model, capacity): fleet-prone ones (driver, GPU visibility, NCCL ...) may be held back to
# be paged as one fleet incident, which is not what these tests are about.
ONCE_LOGS = [
    REAL / "bad-dtype.cri.log",
    REAL / "port-in-use.cri.log",
    REAL / "tokenizer-missing.cri.log",
    REAL / "worker-killed-while-serving.cri.log",
    CORPUS / "gh-vllm-28143-oom-weights-linear-create-weights.log",
    CORPUS / "gh-arcticinference-37-worker-killed-after-weights.log",
    CORPUS / "gh-vllm-27508-max-seq-len-gib-estimate-py313.log",
    CORPUS / "gh-vllm-3963-v040-gated-repo-llama2.log",
]


def test_two_instances_split_the_partitions_and_page_each_incident_once(
    kafka_bootstrap: str,
    pg_url: str,
    launch: Callable[..., Sentinel],
    receiver: Receiver,
    db_of: Callable[[str], Db],
) -> None:
    topic = create_topic(kafka_bootstrap, 4, "e2e-pair")
    group = unique("g")
    pair = [
        launch(
            name,
            service_config(
                store_url=pg_url,
                api_port=free_port(),
                kafka=kafka_source(kafka_bootstrap, topic, group),
                receivers=[webhook(receiver.url)],
                instance_id=f"e2e-{name}",
            ),
            start=False,
        )
        for name in ("a", "b")
    ]
    for s in pair:  # both start at once: they migrate the same fresh schema concurrently
        s.start()
    for s in pair:
        s.wait_ready()

    def split() -> tuple[set[str], set[str]] | None:
        a, b = (set(s.assigned()) for s in pair)
        if a and b and not a & b and len(a | b) == 4:
            return a, b
        return None

    wait_until(split, 30, "the two instances to split the 4 partitions")
    failing = pods_per_partition(NS, "crash", 4, 2)  # 2 failing pods on every partition
    healthy = pods_per_partition(NS, "serve", 4, 1)
    logs = [fluent_bit_records(path, NS, pod) for pod, path in zip(failing, ONCE_LOGS, strict=True)]
    logs += [serving_records(NS, pod, 300) for pod in healthy]
    messages = [kafka_message(r) for r in interleave(logs)]
    exp = Expected.of(messages)
    assert len(exp.critical()) == len(failing)
    assert {partition_of(k, 4) for k, _ in messages} == {0, 1, 2, 3}
    produce(kafka_bootstrap, topic, messages)
    db = db_of(pg_url)
    settle(pair, db, exp)

    for s in pair:
        assert s.metric("sentinel_lines_total", source="kafka") > 0, f"{s.name} read nothing"
    assert sorted(i["id"] for i in pair[1].incidents()) == sorted(exp.critical())
    assert_once_each(receiver.requests, set(exp.critical()))
    if all(k == ["opened"] for k in exp.notifiable.values()):
        assert len(receiver.accepted()) == len(failing)
    assert sum(s.metric("sentinel_deliveries_total", outcome="sent") for s in pair) == len(
        receiver.accepted()
    )


# ---- 3. SIGKILL mid-stream, restart: nothing lost, nothing twice ----------------------------
def test_sigkill_mid_stream_and_restart_loses_and_repeats_nothing(
    kafka_bootstrap: str,
    launch: Callable[..., Sentinel],
    receiver: Receiver,
    sqlite_url: str,
    db_of: Callable[[str], Db],
) -> None:
    topic = create_topic(kafka_bootstrap, 4, "e2e-kill")
    svc = launch(
        "kill",
        service_config(
            store_url=sqlite_url,
            api_port=free_port(),
            kafka=kafka_source(kafka_bootstrap, topic, unique("g")),
            receivers=[webhook(receiver.url)],
        ),
    )
    svc.wait_assigned()
    failing = [
        fluent_bit_records(path, NS, f"crash-{i}")
        for i, path in enumerate(ONCE_LOGS + [KV_CACHE, HEADS_NOT_DIVISIBLE])
    ]
    filler = [serving_records(NS, f"serve-{i}", 2500) for i in range(8)]
    records = spread(interleave(filler), failing)
    messages = [kafka_message(r) for r in records]
    exp = Expected.of(messages)
    assert len(exp.critical()) == len(failing)
    total = len(messages)
    rate = 6000.0  # messages/s: the stream is still being produced when the kill comes
    t0 = time.monotonic()

    def pace(i: int) -> None:
        if i % 200 == 0:
            ahead = t0 + i / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)

    errors: list[BaseException] = []

    def producer() -> None:
        try:
            produce(kafka_bootstrap, topic, messages, pace=pace)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    db = db_of(sqlite_url)
    wait_until(
        lambda: svc.metric("sentinel_lines_total", source="kafka") >= total * 0.35,
        30,
        "a third of the stream to be read",
    )
    # not while a webhook is on the wire (that one would legitimately be sent again)
    wait_until(lambda: db.leased() == 0, 10, "no delivery in flight")
    read = svc.metric("sentinel_lines_total", source="kafka")
    svc.kill()
    before = set(db.incident_versions())
    paged_before = len(receiver.accepted())
    assert read < total, "everything was read before the kill: make the stream longer"

    svc.start().wait_ready()
    thread.join(60)
    assert not errors and not thread.is_alive()
    settle([svc], db, exp, timeout=60)

    versions = db.incident_versions()
    assert sorted(versions) == sorted(exp.critical())  # each incident once in the store
    assert set(exp.critical()) - before, "every failure was read before the kill"
    assert paged_before < len(exp.critical())
    assert_once_each(receiver.requests, set(exp.critical()), marked_repeats=True)
    per_incident = Counter(i for i, _, _ in set(accepted_events(receiver.requests)))
    last = {i: v for i, _, v in accepted_events(receiver.requests)}
    for inc_id, version in versions.items():
        assert per_incident[inc_id] <= version  # at most one message per change
        assert last[inc_id] == version  # the final state was paged


# ---- 4. a receiver that is down gets everything once it is back -----------------------------
def test_receiver_down_then_back_gets_every_alert_once(
    kafka_bootstrap: str,
    launch: Callable[..., Sentinel],
    sqlite_url: str,
    db_of: Callable[[str], Db],
) -> None:
    topic = create_topic(kafka_bootstrap, 1, "e2e-down")
    port = free_port()  # nothing listens yet: connections are refused
    svc = launch(
        "down",
        service_config(
            store_url=sqlite_url,
            api_port=free_port(),
            kafka=kafka_source(kafka_bootstrap, topic, unique("g")),
            receivers=[webhook(f"http://127.0.0.1:{port}/hook", timeout_s=1.0)],
            notify={"group_wait_s": 0.2, "backoff_base_s": 0.2, "backoff_max_s": 0.6},
        ),
    )
    svc.wait_assigned()
    logs = [fluent_bit_records(path, NS, f"down-{i}") for i, path in enumerate(ONCE_LOGS[:3])]
    messages = [kafka_message(r) for r in interleave(logs)]
    exp = Expected.of(messages)
    produce(kafka_bootstrap, topic, messages)
    ids = set(exp.critical())
    assert len(ids) == 3

    def refused_twice() -> bool:
        for inc_id in ids:
            r = svc.http.get(f"/incidents/{inc_id}")
            if r.status_code != 200:
                return False
            deliveries = r.json()["deliveries"]
            if len(deliveries) != 1:  # not expanded from the outbox yet (group_wait)
                return False
            (d,) = deliveries
            if d["attempts"] < 2 or "ConnectError" not in (d["last_error"] or ""):
                return False
        return True

    wait_until(refused_twice, 30, "two refused attempts per incident")
    with Receiver(port=port) as rx:
        rx.fail(500, count=4)  # back, but failing for a while
        db = db_of(sqlite_url)
        settle([svc], db, exp)
        assert len([r for r in rx.requests if r.status == 500]) == 4
        assert_once_each(rx.requests, ids)
        assert len(rx.accepted()) == 3
    for inc_id in ids:
        (d,) = svc.http.get(f"/incidents/{inc_id}").json()["deliveries"]
        assert d["status"] == "sent" and d["attempts"] >= 3


# ---- 5. junk records are counted and skipped ------------------------------------------------
JUNK: list[tuple[bytes | None, bytes | None]] = [
    (b"llm-prod/junk", b'{"log": "truncated JSON, no closing brace'),
    (b"llm-prod/junk", b"\x00\x01\xff\xfe\x80 binary"),
    (b"llm-prod/junk", b""),
    (b"llm-prod/junk", None),  # tombstone
    (b"llm-prod/junk", b"\x85\xa3bad\xc1\xc1"),  # msgpack-looking junk
    (b"llm-prod/junk", b'{"no_log_field": 1}'),
]


def test_junk_records_are_counted_and_skipped_around_a_failure(
    kafka_bootstrap: str,
    launch: Callable[..., Sentinel],
    receiver: Receiver,
    sqlite_url: str,
    db_of: Callable[[str], Db],
) -> None:
    topic = create_topic(kafka_bootstrap, 1, "e2e-junk")
    group = unique("g")
    svc = launch(
        "junk",
        service_config(
            store_url=sqlite_url,
            api_port=free_port(),
            kafka=kafka_source(kafka_bootstrap, topic, group, format="fluent"),
            receivers=[webhook(receiver.url)],
        ),
    )
    svc.wait_assigned()
    good = [kafka_message(r) for r in fluent_bit_records(KV_CACHE, NS, "junk-0")]
    exp = Expected.of(good)
    messages: list[tuple[bytes | None, bytes | None]] = []
    for i, m in enumerate(good):  # junk between the good records, all along
        messages.append(m)
        if i % 25 == 0:
            messages.append(JUNK[(i // 25) % len(JUNK)])
    junk = len(messages) - len(good)
    before = svc.metric("sentinel_rejects_total", source="kafka")
    produce(kafka_bootstrap, topic, messages)
    db = db_of(sqlite_url)
    settle([svc], db, exp)
    rejected = svc.metric("sentinel_rejects_total", source="kafka") - before
    assert rejected >= junk  # each junk value counted (a value may hold several bad items)
    assert svc.metric("sentinel_rejects_total", source="kafka", reason="empty") == 2
    assert svc.stream("llm-prod/junk") is None  # skipped: no stream made of junk
    (inc,) = svc.incidents()
    assert inc["id"] in exp.critical() and inc["pod"] == "junk-0"
    assert_once_each(receiver.requests, {inc["id"]})
    wait_until(
        lambda: committed(kafka_bootstrap, group, topic, 1) == {0: len(messages)},
        10,
        "the commit past the last record",
    )


# ---- 7. Forward protocol: fluent-logger, and acknowledged chunks ----------------------------
def forward_event(record: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """(event time, record) as Fluent Bit's forward output has them (no @timestamp)."""
    import datetime as dt

    stamp = dt.datetime.strptime(record["@timestamp"][:26], "%Y-%m-%dT%H:%M:%S.%f")
    t = stamp.replace(tzinfo=dt.UTC).timestamp()
    return t, {k: v for k, v in record.items() if k in ("log", "stream", "_p", "kubernetes")}


def event_time(t: float) -> msgpack.ExtType:
    sec = int(t)
    return msgpack.ExtType(0, struct.pack(">II", sec, int((t - sec) * 1e9)))


def send_chunk(port: int, tag: str, events: list[tuple[float, dict[str, Any]]], chunk: str) -> Any:
    """One PackedForward message, gzip-compressed, with the ``chunk`` option (Fluent Bit's
    forward output with Require_ack_response + Compress gzip); returns the server's answer."""
    entries = b"".join(msgpack.packb([event_time(t), rec], use_bin_type=True) for t, rec in events)
    option = {"chunk": chunk, "size": len(events), "compressed": "gzip"}
    message = msgpack.packb([tag, gzip.compress(entries), option], use_bin_type=True)
    unpacker = msgpack.Unpacker(raw=False)
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(message)
        while True:
            data = sock.recv(65536)
            assert data, "connection closed without an ack"
            unpacker.feed(data)
            for answer in unpacker:
                return answer


def test_forward_protocol_fluent_logger_and_acked_chunks(
    launch: Callable[..., Sentinel], receiver: Receiver, sqlite_url: str, db_of: Callable[[str], Db]
) -> None:
    from fluent import sender

    port = free_port()
    svc = launch(
        "fwd",
        service_config(
            store_url=sqlite_url,
            api_port=free_port(),
            forward_port=port,
            receivers=[webhook(receiver.url)],
        ),
    )
    db = db_of(sqlite_url)
    # fluent-logger: Message mode, EventTime, no acks
    logged = fluent_bit_records(REAL / "port-in-use.cri.log", NS, "fwd-0")
    exp = Expected.of([kafka_message(r) for r in logged])
    client = sender.FluentSender("kube", host="127.0.0.1", port=port, nanosecond_precision=True)
    try:
        for r in logged:
            t, event = forward_event(r)
            assert client.emit_with_time("var.log.containers.fwd-0_llm-prod_vllm.log", t, event), (
                client.last_error
            )
    finally:
        client.close()
    settle([svc], db, exp)
    (inc,) = svc.incidents(pod="fwd-0")
    assert inc["id"] in exp.critical() and inc["namespace"] == NS
    assert_once_each(receiver.requests, {inc["id"]})

    # Require_ack_response: the ack comes only once the chunk is stored
    acked = fluent_bit_records(REAL / "tokenizer-missing.cri.log", NS, "fwd-1")
    exp_acked = Expected.of([kafka_message(r) for r in acked])
    events = [forward_event(r) for r in acked]
    chunk = base64.b64encode(uuid.uuid4().bytes).decode()
    tag = "kube.var.log.containers.fwd-1_llm-prod_vllm-0123.log"
    assert send_chunk(port, tag, events, chunk) == {"ack": chunk}
    (inc1,) = svc.incidents(pod="fwd-1")  # stored before the ack
    assert inc1["id"] in exp_acked.critical()
    key = f"{NS}/fwd-1/vllm"
    assert svc.stream(key)["lines"] == exp_acked.lines[key]
    # the ack got lost: Fluent Bit sends the same chunk again; it is acked, not applied twice
    assert send_chunk(port, tag, events, chunk) == {"ack": chunk}
    assert svc.stream(key)["lines"] == exp_acked.lines[key]
    settle([svc], db, exp_acked)
    assert svc.incidents(pod="fwd-1")[0]["version"] == inc1["version"]
    assert_once_each(receiver.requests, {inc["id"], inc1["id"]})
    assert svc.terminate() == 0


# ---- 9. HTTP ingest into two replicas: one stream, alternating ------------------------------
def test_http_ingest_alternating_between_replicas_keeps_every_line(
    pg_url: str, launch: Callable[..., Sentinel], receiver: Receiver, db_of: Callable[[str], Db]
) -> None:
    """A load balancer spreads one collector's batches over two replicas: each replica must
    continue from the stream as stored (the other one may have moved it on), not from what
    it last held in memory."""
    pair = [
        launch(
            name,
            service_config(
                store_url=pg_url,
                api_port=free_port(),
                receivers=[webhook(receiver.url)],
                instance_id=f"e2e-{name}",
            ),
            start=False,
        )
        for name in ("a", "b")
    ]
    for s in pair:
        s.start()
    for s in pair:
        s.wait_ready()
    records = fluent_bit_records(KV_CACHE, NS, "lb-0")
    exp = Expected.of([kafka_message(r) for r in records])
    for r in records:  # Fluent Bit http output, format json
        r["date"] = time.time()
        del r["@timestamp"]
    batches = [records[i : i + 20] for i in range(0, len(records), 20)]
    for i, batch in enumerate(batches):
        r = pair[i % 2].http.post(
            "/ingest",
            content=json.dumps(batch).encode(),
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 200, r.text
    settle(pair, db_of(pg_url), exp)
    key = f"{NS}/lb-0/vllm"
    assert pair[0].stream(key) == pair[1].stream(key)
    assert sorted(i["id"] for i in pair[0].incidents()) == sorted(exp.critical())
    assert_once_each(receiver.requests, set(exp.critical()))
