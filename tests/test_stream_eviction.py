"""Streams no line touched for a while leave memory (their snapshot is in the store and is
reloaded by their next line); the in-memory cap holds; a startup that may still stall stays."""

from __future__ import annotations

import time

from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.classify.tracker import StreamTracker
from service.incidents.workload import MAX_WORKLOADS
from service.pipeline import Pipeline
from service.records import LogRecord
from service.store import Store
from tests.test_store import REAL, kafka_records

pytest_plugins = ("tests.test_store",)  # db_url / store fixtures
RB = RuleBook()


def make(**kw) -> Classifier:
    return Classifier(RB, **kw)


def test_idle_streams_are_evicted_and_their_state_comes_back(store: Store) -> None:
    p = Pipeline(store, make(), idle_evict_s=60.0)
    kv = kafka_records(REAL / "kv-cache-too-small.cri.log", stream="ns/kv/vllm")
    healthy = kafka_records(REAL / "healthy-idle-sigint.cri.log", stream="ns/ok/vllm", partition=1)
    p.process(kv, "kafka")
    p.process(healthy, "kafka")
    starting = [
        LogRecord(
            "ns/new/vllm",
            "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.11.0",
            None,
            {},
            None,
        )
    ]
    p.process(starting, "http")
    before = {k: p.tracker.streams[k].to_dict() for k in ("ns/kv/vllm", "ns/ok/vllm")}
    incident = p.tracker.streams["ns/kv/vllm"].incidents[0].id

    assert p.evict_idle(time.monotonic() + 30) == 0  # nothing idle long enough yet
    gone = p.evict_idle(time.monotonic() + 120)
    assert gone == 2 and set(p.tracker.streams) == {"ns/new/vllm"}  # still starting: kept
    assert p.evict_idle(time.monotonic() + 120 + 7200) == 1 and not p.tracker.streams

    # the next line of the failed stream continues its stored state and incident
    st = p.classifier.state("ns/kv/vllm")
    assert st.to_dict()["incidents"] == before["ns/kv/vllm"]["incidents"]
    p.process(
        [
            LogRecord(
                "ns/kv/vllm",
                "ERROR 01-01 00:00:01 [core.py:1] EngineCore failed to start.",
                None,
                {},
                None,
            )
        ],
        "http",
    )
    assert p.tracker.streams["ns/kv/vllm"].incidents[0].id == incident
    assert p.counters["evicted"] == 3


def test_the_in_memory_cap_holds(store: Store) -> None:
    p = Pipeline(store, make(), max_streams=5)
    for i in range(12):
        p.process(
            [
                LogRecord(
                    f"ns/p{i}/vllm",
                    "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.11.0",
                    None,
                    {},
                    None,
                )
            ],
            "http",
        )
    assert sorted(p.tracker.streams) == sorted(f"ns/p{i}/vllm" for i in range(7, 12))


def test_workloads_in_memory_are_capped_without_a_store() -> None:
    tracker = StreamTracker()
    for i in range(MAX_WORKLOADS + 3):
        tracker.workload(f"w{i}").last_good = {"image": "x"}
    assert len(tracker.workloads) == MAX_WORKLOADS and "w0" not in tracker.workloads
    assert f"w{MAX_WORKLOADS + 2}" in tracker.workloads
