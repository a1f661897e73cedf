"""A record whose classification raises is quarantined: counted, stored for inspection, its
position committed with the batch (never re-read), and the records after it still page."""

from __future__ import annotations

from typing import Any

from service import metrics
from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.incidents.incident import Change
from service.pipeline import Pipeline
from service.records import LogRecord, Position
from service.store import Store
from tests.test_store import REAL, kafka_records

pytest_plugins = ("tests.test_store",)  # db_url / store fixtures
RB = RuleBook()
POISON = "\u2620 poison record \u2620"


class FaultyClassifier(Classifier):
    """The real classifier with one injected fault: a bug that raises on one record."""

    def feed(self, rec: LogRecord) -> list[Change]:
        if POISON in rec.text:
            raise RecursionError("injected classifier bug")
        return super().feed(rec)


def quarantined_total() -> float:
    return sum(
        s.value
        for m in metrics.QUARANTINED.collect()
        for s in m.samples
        if s.name.endswith("_total")
    )


def test_a_poison_record_is_quarantined_and_the_oom_after_it_opens(store: Store) -> None:
    recs = kafka_records(REAL / "kv-cache-too-small.cri.log", stream="ns/a/vllm")
    poison = LogRecord(
        "ns/a/vllm", POISON + " x" * 50_000, None, {}, Position("kafka", "vllm-logs:0", 999)
    )
    recs.insert(3, poison)
    for i, r in enumerate(recs):
        r.position = Position("kafka", "vllm-logs:0", i)
    before = quarantined_total()

    def make(**kw: Any) -> Classifier:
        return FaultyClassifier(RB, **kw)

    p = Pipeline(store, make())
    for i in range(0, len(recs), 10):
        p.process(recs[i : i + 10], "kafka")

    assert quarantined_total() == before + 1
    rows = store.list_quarantine()
    assert len(rows) == 1
    row = rows[0]
    assert row["position"] == "kafka:vllm-logs:0:3" and row["reason"] == "RecursionError"
    assert row["text"].startswith(POISON) and row["length"] == len(poison.text)
    assert store.applied_position("kafka", "vllm-logs:0") == len(recs) - 1
    items, _ = store.list_incidents()
    assert any(i["category"] == "oom_kv_cache" for i in items), items

    # a restarted consumer re-reads the batch: nothing is retried, nothing is quarantined twice
    again = Pipeline(store, make())
    again.process(recs[:10], "kafka")
    assert again.counters["skipped"] == 10 and len(store.list_quarantine()) == 1


def test_the_api_lists_quarantined_records_to_readers_only(tmp_path) -> None:
    from fastapi.testclient import TestClient

    from service.api.app import create_app
    from tests.api_support import READ, READ_TOKEN, close_context, make_context

    ctx = make_context(tmp_path / "s.db", RB, read_token=READ_TOKEN)
    ctx.pipeline.classifier = FaultyClassifier(RB, tracker=ctx.pipeline.tracker)
    ctx.pipeline.process(
        [LogRecord("ns/b/vllm", POISON, None, {}, Position("kafka", "t:0", 7))], "kafka"
    )
    with TestClient(create_app(ctx)) as c:
        assert c.get("/quarantine").status_code == 401
        got = c.get("/quarantine", headers=READ)
        assert got.status_code == 200
        assert [(r["stream"], r["position"]) for r in got.json()] == [("ns/b/vllm", "kafka:t:0:7")]
    close_context(ctx)
