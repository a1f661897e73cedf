"""Pipeline: at-least-once input, idempotent effects (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from sqlalchemy import func, select

from service.classify.redaction import LINE_CAP as REDACT_CAP
from service.config import ReceiverSettings
from service.notify.routing import Router
from service.pipeline import Pipeline, partition_name
from service.records import Position
from service.store import Store
from service.store.schema import incidents, outbox, source_positions
from tests.test_store import (
    REAL,
    count_outbox,
    failing_cases,
    kafka_records,
    pipeline,
    reference,
)

pytest_plugins = ("tests.test_store",)  # db_url / store fixtures


def table_rows(store: Store, table: Any) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        return [dict(r) for r in conn.execute(select(table)).mappings()]


def snapshot(store: Store) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    incs = sorted(
        (r["id"], r["version"], r["status"], r["category"]) for r in table_rows(store, incidents)
    )
    events = sorted((r["incident_id"], r["version"], r["kind"]) for r in table_rows(store, outbox))
    return incs, events


def test_position_parsing() -> None:
    assert Position.parse("kafka:vllm-logs:3:1234") == Position("kafka", "vllm-logs:3", 1234)
    assert Position.parse("kafka:vllm-logs:3:1234#2") == Position("kafka", "vllm-logs:3", 1234)
    assert Position.parse("file:/var/log/x.log:12") == Position("file", "/var/log/x.log", 12)
    assert Position.parse(None) is None and Position.parse("forward:abc") is None
    at = Position("kafka", "vllm-logs:3", 1234)
    assert str(at) == "kafka:vllm-logs:3:1234"
    assert str(at.sub(2)) == "kafka:vllm-logs:3:1234#2"
    assert str(at.sub(1).sub("evicted")) == "kafka:vllm-logs:3:1234#1#evicted"
    assert at.sub(2)._replace(part="") == at  # the same message
    assert partition_name(("t", 3)) == "t:3" == partition_name("t:3")

    class TP:
        topic, partition = "t", 3

    assert partition_name(TP()) == "t:3"


def test_replaying_kafka_positions_creates_no_duplicates(store: Store) -> None:
    recs = kafka_records(REAL / "kv-cache-too-small.cri.log", stream="ns/a/vllm") + kafka_records(
        REAL / "healthy-idle-sigint.cri.log", stream="ns/a/vllm", start=5000
    )
    p = pipeline(store)
    for i in range(0, len(recs), 40):  # the consumer's poll batches
        p.process(recs[i : i + 40], "kafka")
    first = snapshot(store)
    kinds = [k for _, _, k in first[1]]
    assert kinds[0] == "opened" and kinds[-1] == "resolved"
    lines = store.stream("ns/a/vllm")["lines"]

    # crash before the offset commit: a new instance re-consumes from an older offset ...
    again = pipeline(store)
    for i in range(0, len(recs), 64):
        again.process(recs[i : i + 64], "kafka")
    # ... and the old one re-processes its last batches too
    p.process(recs[-100:], "kafka")
    assert snapshot(store) == first
    assert store.stream("ns/a/vllm")["lines"] == lines  # not a line counted twice
    (pos,) = table_rows(store, source_positions)
    assert (pos["source"], pos["partition"], pos["position"]) == (
        "kafka",
        "vllm-logs:0",
        5000 + 163,
    )
    assert again.counters["skipped"] == len(recs)


def test_failed_commit_leaves_no_trace_in_memory(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    recs = kafka_records(REAL / "kv-cache-too-small.cri.log", stream="ns/a/vllm")
    p = pipeline(store)
    p.process(recs[:100], "kafka")
    real = store.commit_batch
    calls = {"n": 0}

    def flaky(effects: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("database went away")
        real(effects)

    monkeypatch.setattr(store, "commit_batch", flaky)
    with pytest.raises(ConnectionError):
        p.process(recs[100:], "kafka")
    assert "ns/a/vllm" not in p.tracker.streams  # dropped: memory never runs ahead
    p.process(recs[100:], "kafka")  # the consumer retries the same batch
    clf, kinds, ids = reference(recs)
    assert store.stream("ns/a/vllm")["lines"] == clf.state("ns/a/vllm").seq
    assert [i["id"] for i in store.list_incidents()[0]] == ids


def test_zombie_consumer_batch_is_refused(store: Store) -> None:
    recs = kafka_records(REAL / "bad-dtype.cri.log", stream="ns/a/vllm")
    zombie, owner = pipeline(store), pipeline(store)
    # both start on a partition nobody applied yet: the second first-insert must fail too
    late = pipeline(store)
    assert late._applied_position("kafka", "vllm-logs:0") is None  # noqa: SLF001
    zombie.process(recs[:1], "kafka")  # caches offset 0 as applied
    owner.process(recs, "kafka")  # the partition moved on without the zombie knowing
    before = snapshot(store)
    zombie.process(recs, "kafka")  # compare-and-set fails → reload → everything skipped
    assert snapshot(store) == before
    assert zombie.counters["stale"] == 1
    assert len(before[1]) == 1
    late.process(recs, "kafka")
    assert snapshot(store) == before and late.counters["stale"] == 1


def test_partition_revoke_and_assign_reload_from_store(store: Store) -> None:
    recs = kafka_records(REAL / "kv-cache-too-small.cri.log", stream="ns/a/vllm", partition=2)
    a, b = pipeline(store), pipeline(store)
    a.process(recs[:80], "kafka")
    a.on_partitions_revoked([("vllm-logs", 2)])
    assert "ns/a/vllm" not in a.tracker.streams
    b.on_partitions_assigned(["vllm-logs:2"])
    b.process(recs[60:], "kafka")  # overlap: the new owner starts at the committed offset
    clf, _, ids = reference(recs)
    assert store.stream("ns/a/vllm")["lines"] == clf.state("ns/a/vllm").seq
    assert [i["id"] for i in store.list_incidents()[0]] == ids


def test_submit_acks_after_store_and_deduplicates_chunks(store: Store) -> None:
    recs = kafka_records(REAL / "bad-dtype.cri.log", stream="fw/a/vllm")
    for r in recs:
        r.position = None  # forward records carry no offsets
    p = pipeline(store)

    async def go() -> None:
        await p.submit(recs, "forward", chunk_id="chunk-1")
        assert store.list_incidents()[0]  # durable when submit returns
        await p.submit(recs, "forward", chunk_id="chunk-1")  # fluent-bit retransmits
        await p.submit([], "forward", chunk_id="chunk-2")

    asyncio.run(go())
    assert store.chunk_seen("chunk-1") and store.chunk_seen("chunk-2")
    assert p.counters["duplicate_chunks"] == 1
    assert count_outbox(store) == 1
    assert store.stream("fw/a/vllm")["lines"] == reference(recs)[0].state("fw/a/vllm").seq
    p.close()


def test_chunk_committed_by_another_instance_is_not_applied_twice(store: Store) -> None:
    recs = kafka_records(REAL / "bad-dtype.cri.log", stream="fw/a/vllm")
    for r in recs:
        r.position = None
    a, b = pipeline(store), pipeline(store)
    asyncio.run(a.submit(recs, "forward", chunk_id="c"))
    # b checked chunk_seen before a committed (race): the commit refuses the duplicate
    b._batch(recs, "forward", "c")  # noqa: SLF001 - drive the race deterministically
    assert b.counters["duplicate_chunks"] == 1
    assert "fw/a/vllm" not in b.tracker.streams


def test_evidence_is_stored_not_notified(store: Store) -> None:
    recs = kafka_records(REAL / "worker-killed-while-serving.cri.log", stream="ns/w/vllm")
    p = pipeline(store)
    for r in recs:
        p.process([r], "kafka")  # one line per batch: every change is its own event
    _, kinds, _ = reference(recs)
    assert [k for _, _, k in snapshot(store)[1]] == kinds == ["opened"]
    inc = store.list_incidents()[0][0]
    assert len(inc["evidence"]) > 1  # evidence kept on the stored incident


def test_warning_incidents_are_stored_but_enqueue_nothing_unrouted(store: Store) -> None:
    warn = next(
        p
        for p in failing_cases(200) + sorted(REAL.parent.parent.glob("corpus/cases/*.log"))
        if p.name.startswith("gh-dotsocr")
    )
    recs = kafka_records(warn, stream="ns/w/vllm")
    router = Router([ReceiverSettings(name="oncall", type="webhook", url="http://x")])
    pipeline(store, router=router).process(recs, "kafka")
    (inc,), _ = store.list_incidents()
    assert inc["severity"] == "warning"
    assert count_outbox(store) == 0
    warned = Router(
        [
            ReceiverSettings(
                name="w", type="webhook", url="http://x", match={"severity": ["warning"]}
            )
        ]
    )
    assert warned.wants({"severity": "warning", "primary": {}, "meta": {}}, "opened")


def test_process_and_submit_from_many_threads(store: Store) -> None:
    p = pipeline(store)
    cases = failing_cases(6)
    errors: list[BaseException] = []

    def consume(i: int) -> None:
        try:
            p.process(kafka_records(cases[i], stream=f"ns/{i}/vllm", partition=i), "kafka")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()

    async def forward() -> None:
        recs = kafka_records(REAL / "bad-dtype.cri.log", stream="fw/x/vllm")
        for r in recs:
            r.position = None
        await asyncio.gather(*(p.submit(recs, "forward", chunk_id=f"c{i % 3}") for i in range(9)))

    asyncio.run(forward())
    for t in threads:
        t.join()
    assert errors == []
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(source_positions)).scalar() == 6
    expected = sum(len(reference(kafka_records(c, stream="s"))[2]) for c in cases) + 1
    assert len(store.list_incidents(limit=100)[0]) == expected
    p.close()


def test_the_pipeline_hands_the_classifiers_tracker_its_store(store: Store) -> None:
    from service.classify.loader import build_classifier

    clf = build_classifier(use_model=False)
    p = Pipeline(store, clf)
    assert p.tracker is clf.tracker and clf.tracker.persistence is not None
    p.process(kafka_records(REAL / "bad-dtype.cri.log", stream="s"), "kafka")
    p.forget(["s"])
    assert "s" not in clf.tracker.streams
    assert clf.state("s").seq == 3  # reloaded from the store's snapshot


def test_tick_commits_stall_incidents(store: Store) -> None:
    recs = kafka_records(REAL / "stall-multinode-no-peer.cri.log", stream="ns/stuck/vllm")
    p = pipeline(store)
    p.process(recs, "kafka")
    assert store.list_incidents()[0] == []
    last = max(r.time for r in recs if r.time)
    assert p.tick(last + 60) == 0  # not overdue yet
    assert p.tick(last + 6 * 3600) >= 1
    (inc,), _ = store.list_incidents()
    assert inc["extra"].get("stall") and inc["version"] == 1
    assert count_outbox(store) == 1
    assert store.stream("ns/stuck/vllm")["open_incidents"] == [inc["id"]]
    assert p.tick(last + 7 * 3600) == 0  # one stall incident, not one per tick


def test_huge_lines_are_cut_at_the_door_as_in_the_store(store: Store) -> None:
    recs = kafka_records(REAL / "bad-dtype.cri.log", stream="ns/big/vllm")
    huge = "E" * 300_000
    recs[-1].text = recs[-1].text + " " + huge  # the root-cause line itself is enormous
    p = pipeline(store)
    p.process(recs, "kafka")
    (inc,), _ = store.list_incidents()
    assert len(inc["line"]) <= 8192 and inc["line"].endswith("…")
    assert all(len(x) <= 8192 for x in inc["evidence"])
    assert len(store.load_stream("ns/big/vllm")["last_line"]) <= 8192
    mem = p.classifier.state("ns/big/vllm").incidents[0]
    # the door (#20) cuts a line where the store does: no unmasked tail kept in memory
    assert len(mem.primary.line) == REDACT_CAP and mem.primary.line.endswith("…")


def test_replicas_fed_the_same_stream_never_overwrite_each_other(store: Store) -> None:
    """Forward/HTTP behind a load balancer: batches of one stream alternate between two
    replicas. Each commit compares the snapshot version it started from; a replica whose
    memory is behind the store reloads and re-applies its batch instead of overwriting."""
    recs = kafka_records(REAL / "kv-cache-too-small.cri.log", stream="lb/a/vllm")
    for r in recs:
        r.position = None
    a, b = pipeline(store), pipeline(store)

    async def go() -> None:
        for i in range(0, len(recs), 20):
            await (a if i // 20 % 2 == 0 else b).submit(recs[i : i + 20], "forward")

    asyncio.run(go())
    clf, kinds, ids = reference(recs)
    assert store.stream("lb/a/vllm")["lines"] == clf.state("lb/a/vllm").seq
    assert [i["id"] for i in store.list_incidents()[0]] == ids
    assert a.counters["stale"] + b.counters["stale"] >= len(recs) // 20 - 1
    # a resolve by hand moves the snapshot on too: the next batch starts from it
    store.resolve_incident(ids[0], "fixed", at=1.0)
    asyncio.run(a.submit(recs[-5:], "forward"))
    assert store.get_incident(ids[0])["status"] == "resolved"
    a.close()
    b.close()
