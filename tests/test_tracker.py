"""One owner of per-stream state (service/classify/tracker.py): the stream tracker loads
through the persistence handed in from above and never writes; the pipeline writes what it
says a batch changed in the batch's transaction. Restart units, last-good facts and the
novelty templates are saved with the streams, so a restarted service - or another replica
on the same store - continues where the first one was."""

from __future__ import annotations

from typing import Any

from service.classify.engine import Classifier
from service.classify.novelty import NoveltyDetector
from service.classify.tracker import StreamTracker
from service.incidents.snapshots import Versioned
from service.incidents.workload import WorkloadState
from service.ingest.kube import kube_records
from service.pipeline import Pipeline
from service.records import LogRecord
from service.store import Store
from tests.test_restarts import (
    AFTER_A,
    HEALTHY,
    KV,
    REPLICAS,
    T0,
    attempt_records,
    end_of,
    pod_event,
    pod_meta,
    span,
)
from tests.test_store import classifier

pytest_plugins = ("tests.test_store",)  # db_url / store fixtures
A, B = REPLICAS


def service(store: Store) -> Pipeline:
    """A (re)started service on ``store``: a new classifier, nothing in memory."""
    return Pipeline(store, classifier())


def incidents_of(p: Pipeline, pod: str) -> list[Any]:
    return p.classifier.state(f"llm/{pod}/vllm").incidents


class Saved:
    """A persistence over dicts, as the store keeps them."""

    def __init__(self) -> None:
        self.streams: dict[str, Versioned] = {}
        self.workloads: dict[str, Versioned] = {}
        self.novelty: dict[str, Any] | None = None

    def load_stream(self, key: str) -> Versioned | None:
        return self.streams.get(key)

    def load_workload(self, key: str) -> Versioned | None:
        return self.workloads.get(key)

    def load_novelty(self) -> dict[str, Any] | None:
        return self.novelty


def test_the_tracker_loads_through_its_persistence_and_only_says_what_to_write() -> None:
    saved = Saved()
    clf = Classifier(tracker=StreamTracker(saved))
    for rec in attempt_records(KV, f"llm/{A}/vllm", pod_meta(A, "a" * 64), 0.0):
        clf.feed(rec)
    saves = clf.tracker.snapshots([f"llm/{A}/vllm"])
    assert saves.stream_versions == {f"llm/{A}/vllm": None}  # new: insert only
    (workload,) = saves.workloads  # the failure is indexed on its workload
    assert saves.workload_versions == {workload: None}
    (ids,) = saves.workloads[workload]["failures"].values()
    assert list(ids.values()) == [f"llm/{A}/vllm"]
    for key, state in saves.streams.items():
        saved.streams[key] = Versioned(state, 1)
    for key, state in saves.workloads.items():
        saved.workloads[key] = Versioned(state, 1)
    clf.tracker.saved(saves)
    assert clf.tracker.versions[f"llm/{A}/vllm"] == 1 and not clf.tracker.workloads
    # a new tracker (a restarted service) reads what was saved
    again = StreamTracker(saved)
    assert again.state(f"llm/{A}/vllm").incidents[0].category == "oom_kv_cache"
    assert again.versions[f"llm/{A}/vllm"] == 1
    assert (
        again.workload(workload).failures
        == WorkloadState.from_dict(saves.workloads[workload]).failures
    )
    # a write that failed: nothing of it stays in memory
    again.workload(workload).last_good = {"image": "x"}
    again.changed(workload)
    again.discard_unsaved()
    assert again.snapshots([]).workloads == {} and again.workload(workload).last_good is None


def test_a_replacement_pod_after_a_service_restart_continues_its_predecessors_incident(
    store: Store,
) -> None:
    first = service(store)
    first.process(attempt_records(KV, f"llm/{A}/vllm", pod_meta(A, "a" * 64), 0.0), "kafka")
    first.process(kube_records(pod_event(A, AFTER_A)), "kafka")  # Kubernetes: A was deleted
    (opened,) = incidents_of(first, A)
    first.close()

    second = service(store)  # the service restarted: nothing in memory
    start = end_of(KV, 0.0) - T0 + 30.0
    second.process(attempt_records(KV, f"llm/{B}/vllm", pod_meta(B, "b" * 64), start), "kafka")
    (inc,) = incidents_of(second, B)
    assert inc.id == opened.id and inc.restarts == 1
    assert [a["pod"] for a in inc.extra["attempts"]] == [A, B]
    assert incidents_of(second, A) == []  # it followed its workload
    row = store.get_incident(opened.id)
    assert row is not None and row["restarts"] == 1 and row["stream"] == f"llm/{B}/vllm"
    second.close()
    # and the store agrees with memory: a third start reloads both pods' streams
    third = service(store)
    assert [i.id for i in incidents_of(third, B)] == [opened.id] and incidents_of(third, A) == []
    third.close()


def test_another_replica_on_the_same_store_continues_the_incident(store: Store) -> None:
    one, other = service(store), service(store)
    one.process(attempt_records(KV, f"llm/{A}/vllm", pod_meta(A, "a" * 64), 0.0), "http")
    one.process(kube_records(pod_event(A, AFTER_A)), "http")
    (opened,) = incidents_of(one, A)
    start = end_of(KV, 0.0) - T0 + 30.0
    other.process(attempt_records(KV, f"llm/{B}/vllm", pod_meta(B, "b" * 64), start), "http")
    (inc,) = incidents_of(other, B)
    assert inc.id == opened.id and inc.restarts == 1
    one.close()
    other.close()


def test_last_good_facts_survive_a_restart(store: Store) -> None:
    good = {**pod_meta(A, "a" * 64), "image": "vllm/vllm-openai:v0.11.0"}
    first = service(store)
    first.process(attempt_records(HEALTHY, f"llm/{A}/vllm", good, 0.0), "kafka")
    assert first.classifier.state(f"llm/{A}/vllm").status in ("ready", "serving", "stopped")
    first.close()

    second = service(store)
    bad = {**pod_meta(B, "b" * 64), "image": "vllm/vllm-openai:v0.12.0"}
    second.process(attempt_records(KV, f"llm/{B}/vllm", bad, span(HEALTHY)), "kafka")
    (inc,) = incidents_of(second, B)
    assert inc.extra["changed_since_last_good"]["image"] == [
        "vllm/vllm-openai:v0.11.0",
        "vllm/vllm-openai:v0.12.0",
    ]
    second.close()


def test_novelty_templates_survive_a_restart(store: Store) -> None:
    line = "FluxCapacitorError: overheated at 88 mph on node 10.1.2.3"
    first = service(store)
    first.process([LogRecord("ns/a/vllm", line)], "http")
    (inc,) = first.classifier.state("ns/a/vllm").incidents
    assert inc.primary.novel
    first.close()
    assert store.load_novelty() is not None

    second = service(store)
    second.process([LogRecord("ns/b/vllm", line.replace("88", "77"))], "http")
    (inc,) = second.classifier.state("ns/b/vllm").incidents
    assert not inc.primary.novel  # the template was seen before the restart
    second.close()
    # a memory-only miner would have called it new
    assert NoveltyDetector().observe(line)[1]
