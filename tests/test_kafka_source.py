"""Kafka sources against a real broker (Tansu via scripts/tansu.py), for both client backends:
decoding, at-least-once commits, redelivery after a failed handler, SIGKILL + restart,
two consumers splitting a topic, junk values, runtime chunks spanning batches."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from service.config import KafkaSettings
from service.metrics import REGISTRY
from service.records import LogRecord
from service.sources.kafka.base import KafkaSourceBase
from service.sources.kafka.client_config import confluent_config, kafka_python_config
from service.sources.kafka.confluent import ConfluentKafkaSource
from service.sources.kafka.factory import make_kafka_source
from service.sources.kafka.kafka_python import KafkaSource
from service.sources.kafka.partition import Partition
from tests.ingest_samples import (
    CONTAINER_ID,
    CONTAINER_ID_2,
    CRI_EPOCH,
    CRI_TIME,
    ENGINE_FAILED,
    KV_CACHE,
    NAMESPACE,
    ROUTES,
    STARTUP,
    STREAM,
    fluent_bit_record,
    fluentd_record,
    rejects,
)
from tests.kafka_fixtures import (
    CLIENTS,
    ROOT,
    committed,
    create_topic,
    fast_settings,
    produce,
    wait_for,
)

pytest_plugins = ["tests.kafka_fixtures"]  # the kafka_bootstrap fixture

integration = pytest.mark.integration


def fluent_bit_json(**changes: Any) -> bytes:
    """Fluent Bit kafka output, format json: ``@timestamp`` first."""
    return json.dumps({"@timestamp": 1785147072.123456, **fluent_bit_record(**changes)}).encode()


class Collector:
    """A handler that stores batches (in memory) and drops positions it already applied."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: list[LogRecord] = []
        self.applied: dict[str, LogRecord] = {}
        self.duplicates = 0
        self.calls = 0

    def __call__(self, records: list[LogRecord]) -> None:
        with self.lock:
            self.calls += 1
            for rec in records:
                self.records.append(rec)
                if str(rec.position) in self.applied:
                    self.duplicates += 1
                else:
                    self.applied[str(rec.position)] = rec

    def count(self) -> int:
        with self.lock:
            return len(self.applied)


@pytest.fixture
def start_source() -> Iterator[Any]:
    started: list[KafkaSourceBase] = []

    def start(settings: KafkaSettings, handler: Any, **kwargs: Any) -> KafkaSourceBase:
        kwargs.setdefault("poll_timeout_s", 0.2)
        kwargs.setdefault("backoff_initial_s", 0.05)
        src = make_kafka_source(settings, handler, **kwargs)
        src.start()
        started.append(src)
        return src

    yield start
    for src in started:
        src.stop(timeout=15)


def lag(topic: str, partition: int) -> float | None:
    return REGISTRY.get_sample_value(
        "sentinel_consumer_lag", {"topic": topic, "partition": str(partition)}
    )


# ------------------------------------------------------------------ without a broker


def test_factory_picks_the_backend_named_in_settings():
    def handler(records: list[LogRecord]) -> None:
        pass

    assert isinstance(make_kafka_source(KafkaSettings(), handler), KafkaSource)
    src = make_kafka_source(KafkaSettings(client="confluent-kafka"), handler)
    assert isinstance(src, ConfluentKafkaSource)


def test_tls_and_sasl_settings_reach_both_clients():
    settings = KafkaSettings(
        bootstrap="b1:9093,b2:9093",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="sentinel",
        sasl_password="s3cret",
        ssl_cafile="/etc/kafka/ca.pem",
        ssl_certfile="/etc/kafka/client.pem",
        ssl_keyfile="/etc/kafka/client.key",
        session_timeout_ms=45000,
        extra={"heartbeat_interval_ms": 1000},
    )
    kp = kafka_python_config(settings)
    assert kp["bootstrap_servers"] == ["b1:9093", "b2:9093"]
    assert (kp["security_protocol"], kp["sasl_mechanism"]) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (kp["sasl_plain_username"], kp["sasl_plain_password"]) == ("sentinel", "s3cret")
    assert (kp["ssl_cafile"], kp["ssl_certfile"], kp["ssl_keyfile"]) == (
        "/etc/kafka/ca.pem",
        "/etc/kafka/client.pem",
        "/etc/kafka/client.key",
    )
    assert kp["enable_auto_commit"] is False and kp["heartbeat_interval_ms"] == 1000  # extra
    ck = confluent_config(settings)
    assert ck["bootstrap.servers"] == "b1:9093,b2:9093"
    assert (ck["security.protocol"], ck["sasl.mechanism"]) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (ck["sasl.username"], ck["sasl.password"]) == ("sentinel", "s3cret")
    assert (ck["ssl.ca.location"], ck["ssl.certificate.location"], ck["ssl.key.location"]) == (
        "/etc/kafka/ca.pem",
        "/etc/kafka/client.pem",
        "/etc/kafka/client.key",
    )
    assert ck["enable.auto.commit"] is False and ck["enable.auto.offset.store"] is False
    assert ck["heartbeat.interval.ms"] == 1000  # extra: underscores read as dots
    # librdkafka refuses max.poll.interval.ms < session.timeout.ms
    assert ck["max.poll.interval.ms"] == 45000


def test_kafka_python_3_consumer_accepts_the_generated_config():
    from kafka import KafkaConsumer

    cfg = kafka_python_config(KafkaSettings())
    unknown = set(cfg) - set(KafkaConsumer.DEFAULT_CONFIG)
    assert not unknown


# ------------------------------------------------------------------ against the broker


@integration
@pytest.mark.parametrize("client", CLIENTS)
def test_fluent_bit_json_and_raw_lines_become_records(kafka_bootstrap, start_source, client):
    topic = create_topic(kafka_bootstrap, 4)
    cid = CONTAINER_ID.encode()
    sent = produce(
        kafka_bootstrap,
        topic,
        [
            (cid, fluent_bit_json(), 0),
            (cid, fluent_bit_json(log=KV_CACHE, stream="stdout"), 0),
            (CONTAINER_ID_2.encode(), ROUTES.encode(), 1),
            (CONTAINER_ID_2.encode(), f"{CRI_TIME} stdout F {KV_CACHE}".encode(), 1),
            (None, (STARTUP + "\n").encode(), 2),
            (cid, msgpack.packb(fluentd_record()), 3),
        ],
    )
    pos = [f"kafka:{topic}:{p}:{o}" for p, o in sent]
    settings = fast_settings(kafka_bootstrap, topic, client)
    got = Collector()
    src = start_source(settings, got, lag_interval_s=0.0)
    wait_for(lambda: got.count() == 6, what="6 records")
    by = got.applied
    fb = by[pos[0]]
    assert (fb.stream, fb.text) == (STREAM, ENGINE_FAILED)
    assert fb.time == pytest.approx(CRI_EPOCH, abs=1e-6)
    assert fb.meta["namespace"] == NAMESPACE and fb.meta["fd"] == "stderr"
    assert fb.meta["container_id"] == CONTAINER_ID
    assert (by[pos[1]].stream, by[pos[1]].text, by[pos[1]].meta["fd"]) == (
        STREAM,
        KV_CACHE,
        "stdout",
    )
    assert (by[pos[2]].stream, by[pos[2]].text) == (CONTAINER_ID_2, ROUTES)  # key = stream
    cri = by[pos[3]]
    assert (cri.stream, cri.text, cri.meta["fd"]) == (CONTAINER_ID_2, KV_CACHE, "stdout")
    assert cri.time == pytest.approx(CRI_EPOCH, abs=1e-6)
    assert (by[pos[4]].stream, by[pos[4]].text) == (f"kafka:{topic}:2", STARTUP)  # no key
    assert (by[pos[5]].stream, by[pos[5]].text) == (STREAM, KV_CACHE)  # msgpack record
    assert got.duplicates == 0
    # lag is reported per partition from the committed offset
    wait_for(lambda: all(lag(topic, p) == 0 for p in range(4)), what="lag 0")
    assert src.assigned == {Partition(topic, p) for p in range(4)}
    src.stop()
    assert committed(kafka_bootstrap, settings.group, topic, 4) == {0: 2, 1: 2, 2: 1, 3: 1}
    assert lag(topic, 0) is None  # revoked partitions leave the gauge


@integration
@pytest.mark.parametrize("client", CLIENTS)
def test_failing_handler_commits_nothing_and_gets_the_records_again(
    kafka_bootstrap, start_source, client
):
    topic = create_topic(kafka_bootstrap, 4)
    produce(kafka_bootstrap, topic, [(None, f"{ROUTES} #{i}".encode(), i % 4) for i in range(200)])
    settings = fast_settings(kafka_bootstrap, topic, client, max_poll_records=50)
    calls: list[list[str]] = []
    healthy = threading.Event()
    store = Collector()

    def handler(records: list[LogRecord]) -> None:
        calls.append([str(r.position) for r in records])
        if not healthy.is_set():
            raise OSError("database unavailable")
        store(records)

    def delivered_twice() -> bool:
        seen = Counter(p for batch in list(calls) for p in batch)
        return len(seen) == 200 and min(seen.values()) >= 2

    src = start_source(settings, handler, backoff_max_s=0.2)
    wait_for(delivered_twice, what="every record delivered (and refused) twice")
    assert committed(kafka_bootstrap, settings.group, topic, 4) == dict.fromkeys(range(4))
    assert src.failed_batches >= 8 and store.count() == 0
    healthy.set()
    wait_for(lambda: store.count() == 200, what="all 200 records")
    assert set(store.applied) == {f"kafka:{topic}:{i % 4}:{i // 4}" for i in range(200)}
    src.stop()
    assert committed(kafka_bootstrap, settings.group, topic, 4) == dict.fromkeys(range(4), 50)


def _positions(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [line for line in path.read_text().splitlines() if line]


def _child(settings: KafkaSettings, out: Path, delay: float) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        KAFKA_CHILD_SETTINGS=settings.model_dump_json(),
        KAFKA_CHILD_DELAY=str(delay),
        PYTHONPATH=str(ROOT),
    )
    return subprocess.Popen(
        [sys.executable, "-m", "tests.kafka_child", str(out)], cwd=ROOT, env=env
    )


@integration
@pytest.mark.parametrize("client", CLIENTS)
def test_sigkill_mid_stream_then_restart_resumes_from_the_last_commit(
    kafka_bootstrap, tmp_path, client
):
    topic = create_topic(kafka_bootstrap, 4)
    total = 2000
    produce(
        kafka_bootstrap,
        topic,
        [(f"container-{i % 8}".encode(), f"{KV_CACHE} #{i}".encode(), i % 4) for i in range(total)],
    )
    everything = {f"kafka:{topic}:{i % 4}:{i // 4}" for i in range(total)}
    settings = fast_settings(kafka_bootstrap, topic, client, max_poll_records=25)
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    child = _child(settings, first, delay=0.02)
    try:
        wait_for(lambda: len(_positions(first)) >= 300, timeout=30, what="300 records stored")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    at_kill = committed(kafka_bootstrap, settings.group, topic, 4)
    stored = set(_positions(first))
    assert any(at_kill.values()) and len(stored) < total  # killed mid-stream, after commits
    for p, off in at_kill.items():  # a commit never runs ahead of the durable store
        assert {f"kafka:{topic}:{p}:{o}" for o in range(off or 0)} <= stored

    child = _child(settings, second, delay=0.0)
    try:
        wait_for(
            lambda: stored | set(_positions(second)) >= everything,
            timeout=40,
            what="every record after the restart",
        )
    finally:
        child.send_signal(signal.SIGTERM)
        assert child.wait(20) == 0
    resumed = defaultdict(list)
    for pos in _positions(second):
        _, _, p, o = pos.split(":")
        resumed[int(p)].append(int(o))
    for p in range(4):  # the restart starts exactly at the last commit of each partition
        assert min(resumed[p]) == (at_kill[p] or 0)
    assert committed(kafka_bootstrap, settings.group, topic, 4) == dict.fromkeys(range(4), 500)


@integration
@pytest.mark.parametrize("client", CLIENTS)
def test_two_consumers_split_the_partitions_and_together_see_everything(
    kafka_bootstrap, start_source, client
):
    topic = create_topic(kafka_bootstrap, 4)
    total = 3000
    everything = {f"kafka:{topic}:{i % 4}:{i // 4}" for i in range(total)}
    settings = fast_settings(kafka_bootstrap, topic, client, max_poll_records=100)
    store = Collector()  # shared store: drops positions it has already applied
    by_source: dict[str, Counter[int]] = {"a": Counter(), "b": Counter()}

    def handler_for(name: str) -> Any:
        def handler(records: list[LogRecord]) -> None:
            by_source[name].update(int(str(r.position).split(":")[2]) for r in records)
            store(records)

        return handler

    joined: list[Any] = []  # the second consumer, once it owns partitions

    def producer() -> None:  # keeps producing while the group rebalances
        for start in range(0, total, 200):
            if start == total // 2:  # the second half waits for b (a loaded machine is slow)
                wait_for(lambda: joined and joined[0].assigned, timeout=60, what="b assigned")
            produce(
                kafka_bootstrap,
                topic,
                [(None, f"{STARTUP} #{i}".encode(), i % 4) for i in range(start, start + 200)],
            )
            time.sleep(0.15)

    feeder = threading.Thread(target=producer)
    feeder.start()
    a = start_source(settings, handler_for("a"))
    wait_for(lambda: store.count() >= 200, what="a consuming")
    b = start_source(settings, handler_for("b"))
    joined.append(b)
    feeder.join()
    wait_for(lambda: store.count() == total, timeout=30, what="every record")
    wait_for(lambda: len(a.assigned) == 2 and len(b.assigned) == 2, what="a 2/2 split")
    assert a.assigned.isdisjoint(b.assigned)
    assert a.assigned | b.assigned == {Partition(topic, p) for p in range(4)}
    assert set(store.applied) == everything
    assert sum(by_source["b"].values()) > 0  # b took over real work
    # duplicates only around the rebalance: at most one uncommitted batch per partition
    assert store.duplicates <= 4 * settings.max_poll_records
    a.stop()
    b.stop()
    assert committed(kafka_bootstrap, settings.group, topic, 4) == dict.fromkeys(range(4), 750)


JUNK: list[tuple[bytes | None, bytes | None, int]] = [
    (None, b"{not json", 0),  # starts like JSON: kept as a raw text line
    (None, b"\x85\xa3bad\xc1\xc1", 0),  # msgpack-looking junk
    (None, b"\x00\x01\xff\xfe binary", 0),
    (None, b"", 0),  # empty value
    (b"gone", None, 0),  # tombstone
    (None, b"[1, 2]", 0),  # JSON, but not records
]


@integration
@pytest.mark.parametrize("client", CLIENTS)
def test_junk_values_are_counted_and_never_stop_the_consumer(kafka_bootstrap, start_source, client):
    topic = create_topic(kafka_bootstrap, 1)
    good_first = fluent_bit_json()
    good_last = f"{CRI_TIME} stderr F {ENGINE_FAILED}".encode()
    sent = produce(
        kafka_bootstrap,
        topic,
        [(None, good_first, 0), *JUNK, (None, good_last, 0)],
    )
    before = {r: rejects("kafka", r) for r in ("empty", "invalid_utf8", "bad_record")}
    got = Collector()
    settings = fast_settings(kafka_bootstrap, topic, client)
    src = start_source(settings, got)
    last = f"kafka:{topic}:0:{sent[-1][1]}"
    wait_for(lambda: last in got.applied, what="the record after the junk")
    src.stop()
    assert got.applied[f"kafka:{topic}:0:0"].text == ENGINE_FAILED
    assert got.applied[last].text == ENGINE_FAILED
    assert rejects("kafka", "empty") - before["empty"] == 2
    assert rejects("kafka", "invalid_utf8") - before["invalid_utf8"] == 2
    assert rejects("kafka", "bad_record") - before["bad_record"] == 2
    # auto format: undecodable bytes are kept as (counted) text lines, never raised
    assert got.applied[f"kafka:{topic}:0:1"].text == "{not json"
    assert committed(kafka_bootstrap, settings.group, topic, 1) == {0: len(sent)}


@integration
@pytest.mark.parametrize("client", CLIENTS)
def test_strict_fluent_format_drops_junk(kafka_bootstrap, start_source, client):
    topic = create_topic(kafka_bootstrap, 1)
    sent = produce(kafka_bootstrap, topic, [*JUNK, (None, fluent_bit_json(), 0)])
    before = rejects("kafka", "bad_record")
    got = Collector()
    settings = fast_settings(kafka_bootstrap, topic, client)
    src = start_source(settings, got, fmt="fluent")
    wait_for(lambda: got.count() == 1, what="the valid record")
    wait_for(
        lambda: committed(kafka_bootstrap, settings.group, topic, 1) == {0: len(sent)},
        what="commit past the junk",
    )
    src.stop()
    assert [str(r.position) for r in got.records] == [f"kafka:{topic}:0:{sent[-1][1]}"]
    assert rejects("kafka", "bad_record") - before >= 5


class OffsetStore(Collector):
    """A handler with the pipeline's rule: a record whose offset is not above the highest
    offset applied for its partition is skipped."""

    def __init__(self) -> None:
        super().__init__()
        self.high: dict[str, int] = {}
        self.skipped: list[str] = []

    def __call__(self, records: list[LogRecord]) -> None:
        fresh = []
        high = dict(self.high)
        for rec in records:
            base = str(rec.position or "").split("#", 1)[0]
            part, _, off = base.rpartition(":")
            if int(off) <= self.high.get(part, -1):
                self.skipped.append(str(rec.position or ""))
                continue
            high[part] = max(high.get(part, -1), int(off))
            fresh.append(rec)
        super().__call__(fresh)
        self.high = high


@integration
@pytest.mark.parametrize("client", CLIENTS)
def test_runtime_chunks_join_across_batches_and_hold_the_commit(
    kafka_bootstrap, start_source, client
):
    topic = create_topic(kafka_bootstrap, 1)
    key = CONTAINER_ID.encode()
    head, tail = "(EngineCore_DP0 pid=68) ERROR 07-27 10:11:14 [core.py:946] Runtime", "Error: x"
    sent = produce(
        kafka_bootstrap,
        topic,
        [
            (key, f"{CRI_TIME} stderr P {head}".encode(), 0),
            (CONTAINER_ID_2.encode(), ROUTES.encode(), 0),
        ],
    )
    got = OffsetStore()
    settings = fast_settings(kafka_bootstrap, topic, client, max_poll_records=1)
    src = start_source(settings, got)
    wait_for(lambda: got.count() == 1, what="the unrelated line")
    # the half line is held: the commit stays on its first chunk
    wait_for(lambda: src.batches >= 1, what="one batch")
    time.sleep(0.5)
    assert committed(kafka_bootstrap, settings.group, topic, 1) == {0: sent[0][1]}
    sent += produce(kafka_bootstrap, topic, [(key, f"{CRI_TIME} stderr F {tail}".encode(), 0)])
    wait_for(lambda: got.count() == 2, what="the joined line")
    # complete at its closing chunk: a position above the unrelated line's, so a store that
    # skips offsets it has passed does not drop it
    joined = got.applied[f"kafka:{topic}:0:2"]
    assert (joined.stream, joined.text) == (CONTAINER_ID, head + tail)
    assert not got.skipped
    wait_for(
        lambda: committed(kafka_bootstrap, settings.group, topic, 1) == {0: 3},
        what="commit after the closing chunk",
    )
    src.stop()


@integration
@pytest.mark.parametrize("client", CLIENTS)
def test_a_line_whose_closing_chunk_never_comes_is_released(kafka_bootstrap, start_source, client):
    topic = create_topic(kafka_bootstrap, 1)
    head = "(EngineCore_DP0 pid=68) ERROR 07-27 10:11:14 [core.py:946] Runtime"
    produce(
        kafka_bootstrap, topic, [(CONTAINER_ID.encode(), f"{CRI_TIME} stderr P {head}".encode(), 0)]
    )
    got = OffsetStore()
    settings = fast_settings(kafka_bootstrap, topic, client)
    src = start_source(settings, got, join_idle_s=0.3)
    chunk_read = lambda: any(ps.next == 1 for ps in src._parts.values())  # noqa: E731
    wait_for(chunk_read, what="the chunk consumed")
    time.sleep(0.5)
    assert got.count() == 0  # held (the container died mid-line); the commit waits on it
    produce(kafka_bootstrap, topic, [(CONTAINER_ID_2.encode(), ROUTES.encode(), 0)])
    wait_for(lambda: got.count() == 2, what="the unfinished line and the next one")
    assert [(str(r.position), r.text) for r in got.records] == [
        (f"kafka:{topic}:0:1#idle0", head),
        (f"kafka:{topic}:0:1", ROUTES),
    ]
    wait_for(
        lambda: committed(kafka_bootstrap, settings.group, topic, 1) == {0: 2},
        what="commit past the released line",
    )
    src.stop()


@integration
@pytest.mark.parametrize("client", CLIENTS)
def test_a_handler_slower_than_max_poll_interval_costs_duplicates_not_records(
    kafka_bootstrap, start_source, client
):
    topic = create_topic(kafka_bootstrap, 1)
    produce(kafka_bootstrap, topic, [(None, f"{ROUTES} #{i}".encode(), 0) for i in range(100)])
    settings = fast_settings(
        kafka_bootstrap, topic, client, max_poll_records=10, max_poll_interval_ms=3000
    )
    store = Collector()
    slow = threading.Event()

    def handler(records: list[LogRecord]) -> None:
        store(records)
        if not slow.is_set():
            slow.set()
            time.sleep(4.0)  # the client leaves the group; the commit after this fails

    src = start_source(settings, handler)
    wait_for(lambda: store.count() == 100, timeout=30, what="every record")
    assert store.duplicates >= 10  # the slow batch came again after the rejoin
    src.stop()
    assert committed(kafka_bootstrap, settings.group, topic, 1) == {0: 100}
