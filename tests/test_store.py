"""Store against real databases: SQLite (file, WAL) and PostgreSQL (a fresh schema per test;
skipped with the reason when the server cannot be reached).

Also home of the database fixtures and log helpers the pipeline and notify tests import.
"""

from __future__ import annotations

import functools
import os
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text

from service.classify.engine import Classifier
from service.classify.novelty import NoveltyDetector
from service.classify.rulebook import RuleBook
from service.pipeline import Pipeline
from service.records import LogRecord, Position
from service.sources.files import read_files
from service.store import Store
from service.store.migrate import current_revision, head_revision
from service.store.people import Who
from service.store.schema import outbox

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real"
CORPUS = ROOT / "tests" / "corpus" / "cases"
PG_URL = os.environ.get("SENTINEL_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
_pg_state: dict[str, str | None] = {}


# ---- fixtures shared with test_pipeline*.py / test_notify*.py ------------------------------
def pg_unavailable() -> str | None:
    """Why PostgreSQL cannot be used (None when it can); checked once per session."""
    if "reason" not in _pg_state:
        try:
            import psycopg

            with psycopg.connect(PG_URL.replace("+psycopg", ""), connect_timeout=3) as conn:
                conn.execute("SELECT 1")
            _pg_state["reason"] = None
        except Exception as exc:  # noqa: BLE001 - any failure means "skip"
            _pg_state["reason"] = (
                f"PostgreSQL not reachable at {PG_URL} ({exc!s:.120}); "
                "set SENTINEL_TEST_PG_URL or start the server"
            )
    return _pg_state["reason"]


def fresh_pg_url() -> Iterator[str]:
    """A URL whose connections use a brand-new schema, dropped afterwards."""
    import psycopg

    schema = "sentinel_t_" + uuid.uuid4().hex[:12]
    plain = PG_URL.replace("+psycopg", "")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'sentinel.db'}"
        return
    reason = pg_unavailable()
    if reason:
        pytest.skip(reason)
    yield from fresh_pg_url()


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url)
    s.migrate()
    yield s
    s.close()


def kafka_records(
    path: Path | str,
    *,
    stream: str,
    partition: int = 0,
    start: int = 0,
    topic: str = "vllm-logs",
    meta: dict[str, Any] | None = None,
) -> list[LogRecord]:
    """A real log as a Kafka consumer would hand it over: one record per offset."""
    out = []
    for i, rec in enumerate(read_files([str(path)])):
        rec.stream = stream
        rec.meta = {**rec.meta, **(meta or {})}
        rec.position = Position("kafka", f"{topic}:{partition}", start + i)
        out.append(rec)
    return out


def k8s(namespace: str, pod: str, node: str = "gpu-node-1", **labels: str) -> dict[str, Any]:
    return {"namespace": namespace, "pod": pod, "container": "vllm", "node": node, "labels": labels}


@functools.cache
def _rulebook() -> RuleBook:
    return RuleBook()  # compiled once, shared read-only (as the service does)


def classifier(**kwargs: Any) -> Classifier:
    """Signatures only, like ``build_classifier(use_model=False)``, on the shared rule book."""
    return Classifier(_rulebook(), novelty=NoveltyDetector(), **kwargs)


def pipeline(store: Store, **kwargs: Any) -> Pipeline:
    return Pipeline(store, classifier(), **kwargs)


def reference(recs: list[LogRecord]) -> tuple[Any, list[str], list[str]]:
    """The same records through a plain in-memory classifier: (classifier, notifiable change
    kinds, incident ids in order of appearance)."""
    clf = classifier()
    changes = [c for r in recs for c in clf.feed(r) if c.kind != "evidence"]
    ids = list(dict.fromkeys(c.incident.id for c in changes))
    return clf, [c.kind for c in changes], ids


def count_outbox(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(outbox)).scalar_one())


def failing_cases(n: int) -> list[Path]:
    """Corpus logs that open a critical incident as they stream (by their label file; an
    excerpt cut before its failure showed an outcome - a held NCCL WARN with nothing after
    it - pages only at its stall: docs/taxonomy.md "Which findings page at once")."""
    return [log for log in _failures_by_label() if _pages_as_it_streams(log)][:n]


@functools.cache
def _failures_by_label() -> tuple[Path, ...]:
    import json

    out = []
    for log in sorted(CORPUS.glob("*.log")):
        label = json.loads(log.with_suffix(".json").read_text())
        if label.get("tier") not in (None, "none") and label.get("category") != "healthy":
            out.append(log)
    return tuple(out)


@functools.cache
def _pages_as_it_streams(log: Path) -> bool:
    clf = Classifier(_rulebook())
    return any(
        c.incident.severity == "critical" for rec in read_files([str(log)]) for c in clf.feed(rec)
    )


# ---- migrations --------------------------------------------------------------------------
def test_migrations_are_versioned_and_idempotent(db_url: str) -> None:
    s = Store(db_url)
    s.migrate()
    s.migrate()
    assert current_revision(s.engine) == head_revision() == "0007"
    with s.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0007"
    s.close()


def test_instances_starting_together_migrate_once(db_url: str) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def start() -> None:
        s = Store(db_url)
        try:
            barrier.wait()
            s.migrate()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            s.close()

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    s = Store(db_url)
    assert current_revision(s.engine) == "0007"
    s.close()


# ---- incidents, streams, stats -------------------------------------------------------------
def test_incident_round_trip(store: Store) -> None:
    recs = kafka_records(
        REAL / "kv-cache-too-small.cri.log",
        stream="prod/llama-0/vllm",
        meta=k8s("prod", "llama-0", app="llama"),
    )
    pipeline(store).process(recs, "kafka")
    items, cursor = store.list_incidents()
    assert cursor is None and len(items) == 1
    inc = store.get_incident(items[0]["id"])
    assert inc is not None
    assert (inc["tier"], inc["category"], inc["status"]) == ("capacity", "oom_kv_cache", "open")
    assert inc["version"] == 1  # opened and updated within one batch: one event
    assert inc["stream"] == "prod/llama-0/vllm" and inc["namespace"] == "prod"
    assert inc["meta"]["labels"] == {"app": "llama"} and inc["timeline"]
    assert inc["deliveries"] == [] and inc["feedback"] == []
    st = store.stream("prod/llama-0/vllm")
    assert st is not None
    assert st["status"] == "failed" and st["open_incidents"] == [inc["id"]]
    assert st["lines"] == reference(recs)[0].state("prod/llama-0/vllm").seq
    assert st["last_line"]
    stats = store.stats()
    assert stats["incidents_open"] == 1 and stats["streams"] == 1
    assert stats["incidents_by_tier"] == {"capacity": 1}
    assert stats["outbox_pending"] == 1
    assert store.get_incident("nope") is None and store.stream("nope") is None


def test_list_incidents_filters_and_keyset_pagination(store: Store) -> None:
    p = pipeline(store)
    cases = failing_cases(9)
    for i, log in enumerate(cases):
        ns = "prod" if i % 2 else "staging"
        p.process(
            kafka_records(log, stream=f"{ns}/pod-{i}/vllm", partition=i, meta=k8s(ns, f"pod-{i}")),
            "kafka",
        )
    everything, cursor = store.list_incidents(limit=100)
    assert cursor is None and len(everything) >= len(cases)
    keys = [(x["opened_at"] or 0, x["id"]) for x in everything]
    assert keys == sorted(keys, reverse=True)  # newest first

    pages, cursor = [], None
    while True:
        page, cursor = store.list_incidents(limit=4, cursor=cursor)
        pages.append(page)
        if cursor is None:
            break
    flat = [x["id"] for page in pages for x in page]
    assert flat == [x["id"] for x in everything] and len(pages) > 2

    prod, _ = store.list_incidents(namespace="prod", limit=100)
    assert prod and all(x["namespace"] == "prod" for x in prod)
    tier = everything[0]["tier"]
    assert all(x["tier"] == tier for x in store.list_incidents(tier=tier)[0])
    newest = everything[0]["opened_at"]
    assert [x["id"] for x in store.list_incidents(since=newest)[0]] == [
        x["id"] for x in everything if x["opened_at"] >= newest
    ]
    with pytest.raises(ValueError):
        store.list_incidents(cursor="not-a-cursor")


def test_resolve_by_hand_enqueues_one_resolution(store: Store) -> None:
    p = pipeline(store)
    recs = kafka_records(REAL / "bad-dtype.cri.log", stream="ns/a/vllm", meta=k8s("ns", "a"))
    p.process(recs, "kafka")
    (inc,), _ = store.list_incidents()
    before = count_outbox(store)
    done = store.resolve_incident(inc["id"], "fixed the flag", at=time.time(), by=ALICE)
    assert done is not None
    assert done["status"] == "resolved" and done["resolution"] == "fixed the flag"
    assert done["version"] == inc["version"] + 1 and done["extra"]["resolved_by"] == "alice"
    assert [(e["by"], e["action"]) for e in done["timeline"]][-1] == ("alice", "resolved")
    assert count_outbox(store) == before + 1
    again = store.resolve_incident(inc["id"], "twice", at=time.time())
    assert again is not None and again["version"] == done["version"]
    assert count_outbox(store) == before + 1
    assert store.resolve_incident("unknown", Who("x", "user"), at=time.time()) is None
    assert store.stream("ns/a/vllm")["open_incidents"] == []
    # the classifier still had it open in memory: later lines must not revive it
    more = kafka_records(REAL / "bad-dtype.cri.log", stream="ns/a/vllm", start=len(recs))
    p.process(more, "kafka")
    assert store.get_incident(inc["id"])["status"] == "resolved"
    assert all(i.id != inc["id"] for st in p.tracker.streams.values() for i in st.incidents)


ALICE = Who("alice", "user")


# ---- silences and feedback -----------------------------------------------------------------
def test_silences_create_list_expire_delete(store: Store) -> None:
    now = time.time()
    live = store.create_silence(
        {"namespace": ["prod"], "tier": "capacity"}, now + 60, Who("alice", "user"), "node drain"
    )
    store.create_silence(
        {"category": ["oom_runtime"]}, now + 10, Who("bob", "user"), "later", starts_at=now + 5
    )
    store.create_silence(
        {"pod": ["p-*"]}, now - 1, Who("carol", "user"), "over", starts_at=now - 60
    )
    assert live["matchers"] == {"namespace": ["prod"], "tier": ["capacity"]} and live["active"]
    assert len(store.list_silences()) == 3
    assert [s["id"] for s in store.list_silences(active_only=True)] == [live["id"]]
    assert store.delete_silence(live["id"]) and not store.delete_silence(live["id"])
    with pytest.raises(ValueError):
        store.create_silence({"colour": ["red"]}, now + 60, Who("x", "user"), "unknown field")
    with pytest.raises(ValueError):
        store.create_silence({}, now + 60, Who("x", "user"), "empty")
    with pytest.raises(ValueError):
        store.create_silence(
            {"tier": ["capacity"]}, now - 60, Who("x", "user"), "ends before it starts"
        )


def test_feedback(store: Store) -> None:
    pipeline(store).process(kafka_records(REAL / "bad-dtype.cri.log", stream="s"), "kafka")
    (inc,), _ = store.list_incidents()
    fb = store.add_feedback(inc["id"], False, "config_error", "right tier, wrong stage")
    assert fb is not None and fb["correct"] is False
    assert store.add_feedback("missing", True, None, None) is None
    (row,) = store.list_feedback()
    assert row["incident_category"] == inc["category"] and row["line"] == inc["line"]
    assert store.get_incident(inc["id"])["feedback"][0]["comment"] == "right tier, wrong stage"


# ---- durability ----------------------------------------------------------------------------
def test_restart_continues_streams_where_they_were(db_url: str) -> None:
    log = REAL / "kv-cache-too-small.cri.log"
    recs = kafka_records(log, stream="ns/p/vllm") + kafka_records(
        REAL / "healthy-idle-sigint.cri.log", stream="ns/p/vllm", start=10_000
    )
    half = len(recs) // 3
    a = Store(db_url)
    a.migrate()
    pipeline(a).process(recs[:half], "kafka")
    a.close()
    b = Store(db_url)  # a new process on the same database
    b.migrate()
    pipeline(b).process(recs[half:], "kafka")
    items, _ = b.list_incidents()

    clf, kinds, ids = reference(recs)  # the same lines in one go, in memory
    assert kinds == ["opened", "updated", "resolved"]
    assert [i["id"] for i in items] == ids and items[0]["status"] == "resolved"
    st = b.stream("ns/p/vllm")
    ref = clf.state("ns/p/vllm")
    assert (st["lines"], st["run"], st["status"], st["stage"]) == (
        ref.seq,
        ref.run,
        ref.status,
        ref.stage,
    )
    b.close()


def test_commit_batch_latency_500_records(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    logs = [
        REAL / "kv-cache-too-small.cri.log",
        REAL / "worker-killed-while-serving.cri.log",
        REAL / "unsupported-cpu-attention-head-dim-16.cri.log",
    ]
    p = pipeline(store)
    timings = []
    for round_ in range(6):
        recs: list[LogRecord] = []
        for i, log in enumerate(logs):
            recs += kafka_records(
                log, stream=f"ns/bench-{round_}-{i}/vllm", partition=round_, start=i * 1000
            )
        recs = recs[:500]
        assert len(recs) == 500
        p.process(recs, "kafka")
        timings.append(p.last_commit_s)
    med = statistics.median(timings[1:])
    with capsys.disabled():
        print(
            f"\n[{store.engine.dialect.name}] commit_batch of 500 records "
            f"(3 streams, their incidents and outbox events): median {med * 1000:.1f} ms, "
            f"max {max(timings[1:]) * 1000:.1f} ms"
        )
    assert med < 2.0


def test_people_and_search_on_both_databases(store: Store) -> None:
    """Acknowledge (a new version and its outbox event, once), assign, notes, the audit
    record and ``q`` behave the same on SQLite and PostgreSQL."""
    recs = kafka_records(
        REAL / "kv-cache-too-small.cri.log", stream="prod/llama-0/vllm", meta=k8s("prod", "llama-0")
    )
    pipeline(store).process(recs, "kafka")
    (inc,), _ = store.list_incidents(q="LLAMA-0 kv_cache")
    assert store.list_incidents(q="llama-0 dtype")[0] == []
    assert store.list_incidents(q="_%")[0] == []
    before = count_outbox(store)
    acked = store.acknowledge(inc["id"], ALICE)
    assert acked is not None and acked["acknowledged_by"] == "alice"
    assert acked["version"] == inc["version"] + 1 and count_outbox(store) == before + 1
    again = store.acknowledge(inc["id"], Who("bob", "user"))
    assert again is not None and again["acknowledged_by"] == "alice"
    assert count_outbox(store) == before + 1
    store.assign(inc["id"], "bob", ALICE)
    store.add_note(inc["id"], "on it", Who("bob", "slack"))
    got = store.get_incident(inc["id"])
    assert got is not None and got["assignee"] == "bob"
    assert [(e["by"], e["action"]) for e in got["timeline"]][1:] == [
        ("alice", "acknowledged"),
        ("alice", "assigned"),
        ("bob", "note"),
    ]
    assert [(a["actor"], a["via"], a["action"]) for a in store.audit()] == [
        ("bob", "slack", "note"),
        ("alice", "user", "assign"),
        ("alice", "user", "ack"),
    ]
    # the pipeline's later writes keep what people did
    more = kafka_records(
        REAL / "kv-cache-too-small.cri.log", stream="prod/llama-0/vllm", start=len(recs)
    )
    pipeline(store).process(more, "kafka")
    kept = store.get_incident(inc["id"])
    assert kept is not None and (kept["assignee"], kept["acknowledged_by"]) == ("bob", "alice")
