"""Restarts of one workload, as Kubernetes and Docker produce them: a new run in the same
stream (a banner, a new API server pid, a later start), a new container of the same pod, a
pod that replaced another of its workload on the same node. The same failure again counts on
the open incident (a timeline of attempts) and becomes a crash loop at the configured count,
notified once; a different failure is a new incident linked to the previous one; a run that
gets past the failing stage resolves it. Built from the lines of real captures
(tests/fixtures/real); the captured restart loops themselves are in
tests/test_operational_captures.py."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.classify.run_state import Moment, PodLife
from service.classify.stream_state import StreamState
from service.incidents.incident import Change
from service.ingest.kube import kube_records
from service.offline.report import classify_records
from service.records import LogRecord
from service.sources.files import read_files

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
RB = RuleBook()
NODE = "gpu-node-1"


def lines(name: str) -> list[tuple[float | None, str]]:
    """(time, text) of a real capture, CRI times kept."""
    return [(r.time, r.text) for r in read_files([str(REAL / f"{name}.cri.log")])]


KV = lines("kv-cache-too-small")
DTYPE = lines("bad-dtype")
HEALTHY = lines("healthy-idle-sigint")
T0 = min(t for t, _ in KV if t is not None)


def pod_meta(pod: str, container_id: str, node: str = NODE) -> dict:
    return {
        "namespace": "llm",
        "pod": pod,
        "container": "vllm",
        "container_id": container_id,
        "node": node,
        "labels": {"pod-template-hash": "7d9f8b6c4"},
    }


def attempt_records(
    log: list[tuple[float | None, str]], stream: str, meta: dict, start: float
) -> list[LogRecord]:
    """One start of the workload, its first line ``start`` seconds after the first line of
    the kv-cache-too-small capture (the spacing of its lines kept)."""
    shift = T0 + start - min(t for t, _ in log if t is not None)
    return [
        LogRecord(stream, text, time=None if t is None else t + shift, meta=dict(meta))
        for t, text in log
    ]


def attempt(
    clf: Classifier, log: list[tuple[float | None, str]], stream: str, meta: dict, start: float
) -> list[Change]:
    """Feed one start of the workload (:func:`attempt_records`)."""
    return [c for rec in attempt_records(log, stream, meta, start) for c in clf.feed(rec)]


def pod_event(
    pod: str,
    at: float,
    reason: str = "Killing",
    message: str = "Stopping container vllm",
    etype: str = "Normal",
) -> dict:
    """What Kubernetes says of ``pod`` (the kubelet's ``Killing`` event when a pod is
    deleted, by default), as ``kubectl get events -o json`` prints it."""
    stamp = dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "type": etype,
        "reason": reason,
        "message": message,
        "count": 1,
        "lastTimestamp": stamp,
        "involvedObject": {
            "kind": "Pod",
            "namespace": "llm",
            "name": pod,
            "fieldPath": "spec.containers{vllm}",
        },
        "metadata": {"uid": f"{pod}-{reason}-{at}"},
        "source": {"component": "kubelet", "host": NODE},
    }


def ended(
    clf: Classifier,
    pod: str,
    at: float,
    reason: str = "Killing",
    message: str = "Stopping container vllm",
    etype: str = "Normal",
) -> list[Change]:
    """Kubernetes says ``pod`` is going away (:func:`pod_event`)."""
    out: list[Change] = []
    for rec in kube_records(pod_event(pod, at, reason, message, etype)):
        out += clf.feed(rec)
    return out


def end_of(log: list[tuple[float | None, str]], start: float) -> float:
    """The time of the last line of ``attempt(clf, log, ..., start)``."""
    times = [t for t, _ in log if t is not None]
    return T0 + start + max(times) - min(times)


def notified(changes: list[Change]) -> list[tuple[str, str]]:
    return [(c.kind, c.incident.id) for c in changes if c.kind != "evidence"]


def span(log: list[tuple[float | None, str]]) -> float:
    times = [t for t, _ in log if t is not None]
    return max(times) - min(times) + 30.0  # the next start comes after a back-off


# ---- one stream, several runs ---------------------------------------------------------------
def test_three_failed_starts_in_one_stream_are_one_incident_and_a_crash_loop() -> None:
    clf = Classifier(RB)
    first = attempt(clf, KV, "llm/vllm-0/vllm", {}, 0.0)
    (opened,) = {i for k, i in notified(first) if k == "opened"}
    second = attempt(clf, KV, "llm/vllm-0/vllm", {}, span(KV))
    assert notified(second) == []  # one more restart: stored, not notified
    third = attempt(clf, KV, "llm/vllm-0/vllm", {}, 2 * span(KV))
    assert notified(third) == [("updated", opened)]  # the crash loop, once
    (inc,) = [i for i in clf.state("llm/vllm-0/vllm").incidents if i.status == "open"]
    assert (inc.id, inc.category, inc.restarts) == (opened, "oom_kv_cache", 2)
    assert inc.extra["crash_loop"] is True and inc.extra["restart_helps"] is False
    assert "failed the same way 3 times" in inc.extra["note"]
    assert "restarting will not help" in inc.extra["note"]
    attempts = inc.extra["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2, 3]
    failed = [a["failed"] for a in attempts]
    assert failed == sorted(failed) and failed[1] - failed[0] == span(KV)
    assert all(a["stage"] == "kv_cache_init" for a in attempts)
    fourth = attempt(clf, KV, "llm/vllm-0/vllm", {}, 3 * span(KV))
    assert notified(fourth) == []  # still a crash loop: no page per restart
    assert inc.restarts == 3


def test_the_crash_loop_count_is_a_setting() -> None:
    clf = Classifier(RB, crash_loop_attempts=2)
    attempt(clf, KV, "s", {}, 0.0)
    second = attempt(clf, KV, "s", {}, span(KV))
    ((kind, _),) = notified(second)
    assert kind == "updated"
    (inc,) = clf.state("s").incidents
    assert inc.extra["crash_loop"] and inc.extra["crash_loop_at"] == 2


def test_a_restart_is_not_announced_before_its_root_cause_is_known() -> None:
    """The new run's first finding is the cascade "EngineCore failed to start" (unknown);
    the ValueError that follows decides: the same failure, so nothing new is opened."""
    clf = Classifier(RB)
    attempt(clf, KV, "s", {}, 0.0)
    cut = next(i for i, (_, t) in enumerate(KV) if "EngineCore failed to start" in t)
    early = attempt(clf, KV[: cut + 1], "s", {}, span(KV))
    assert notified(early) == []
    st = clf.state("s")
    assert st.pending is not None  # judged when the root cause arrives
    rest = attempt(clf, KV[cut + 1 :], "s", {}, span(KV))
    assert notified(rest) == [] and st.pending is None
    assert [i.restarts for i in st.incidents] == [1]


def test_a_restart_without_a_banner_is_found_by_its_new_api_server_pid() -> None:
    banner = ("version 0.32.0", "non-default args")
    bare = [(t, x) for t, x in KV if not any(b in x for b in banner)]
    second = [(t, x.replace("APIServer pid=13474", "APIServer pid=23474")) for t, x in bare]
    rep = classify_records(
        [LogRecord("s", x, time=t) for t, x in bare]
        + [LogRecord("s", x, time=None if t is None else t + span(KV)) for t, x in second],
        Classifier(RB),
    )[0]
    (inc,) = rep["incidents"]
    assert inc["restarts"] == 1


def test_a_new_container_of_the_pod_is_a_new_run() -> None:
    """kubelet restarted the container: same stream (namespace/pod/container), a new
    container id, even with the banner lost by the collector."""
    banner = ("version 0.32.0", "non-default args")
    bare = [(t, x) for t, x in KV if not any(b in x for b in banner)]
    clf = Classifier(RB)
    key = "llm/vllm-7d9f8b6c4-x2x4z/vllm"
    attempt(clf, bare, key, pod_meta("vllm-7d9f8b6c4-x2x4z", "a" * 64), 0.0)
    attempt(clf, bare, key, pod_meta("vllm-7d9f8b6c4-x2x4z", "b" * 64), span(KV))
    third = attempt(clf, bare, key, pod_meta("vllm-7d9f8b6c4-x2x4z", "c" * 64), 2 * span(KV))
    (inc,) = clf.state(key).incidents
    assert inc.restarts == 2 and inc.extra["crash_loop"]
    assert [c.kind for c in third if c.incident is inc and c.kind != "evidence"] == ["updated"]
    assert [a["container_id"][:1] for a in inc.extra["attempts"]] == ["a", "b", "c"]


# ---- pods of one workload ---------------------------------------------------------------------
def test_a_replacement_pod_on_the_same_node_continues_the_incident() -> None:
    """A rollout / deleted pod: the ReplicaSet's new pod fails the same way on the node."""
    clf = Classifier(RB)
    pods = ["vllm-7d9f8b6c4-x2x4z", "vllm-7d9f8b6c4-k9k8j", "vllm-5c4b3a2d1-q7q7q"]
    changes = []
    for n, pod in enumerate(pods):
        changes.append(
            attempt(clf, KV, f"llm/{pod}/vllm", pod_meta(pod, f"{n}" * 64), n * span(KV))
        )
        ended(clf, pod, end_of(KV, n * span(KV)) + 5)  # deleted: the ReplicaSet replaces it
    (opened,) = [i for k, i in notified(changes[0]) if k == "opened"]
    assert notified(changes[1]) == []
    assert notified(changes[2]) == [("updated", opened)]
    (update,) = [c for c in changes[2] if c.kind == "updated"]
    assert update.also == (f"llm/{pods[1]}/vllm",)  # the pod it came from is touched too
    inc = update.incident
    assert inc.stream == f"llm/{pods[2]}/vllm" and inc.meta["pod"] == pods[2]
    assert [a["pod"] for a in inc.extra["attempts"]] == pods
    assert inc.restarts == 2 and inc.extra["crash_loop"]
    assert all(not clf.state(f"llm/{p}/vllm").incidents for p in pods[:2])


def test_replicas_on_other_nodes_or_running_side_by_side_stay_apart() -> None:
    clf = Classifier(RB)
    a, b, c = "vllm-7d9f8b6c4-aaaaa", "vllm-7d9f8b6c4-bbbbb", "vllm-7d9f8b6c4-ccccc"
    attempt(clf, KV, f"llm/{a}/vllm", pod_meta(a, "1" * 64), 0.0)
    other_node = attempt(
        clf, KV, f"llm/{b}/vllm", pod_meta(b, "2" * 64, node="gpu-node-2"), span(KV)
    )
    assert [k for k, _ in notified(other_node)][0] == "opened"  # its own incident
    clf2 = Classifier(RB)
    recs = [(t, x, a) for t, x in KV] + [(t, x, c) for t, x in KV]
    recs.sort(key=lambda r: r[0] or 0.0)  # two replicas starting together, one node
    for t, x, pod in recs:
        clf2.feed(LogRecord(f"llm/{pod}/vllm", x, time=t, meta=pod_meta(pod, pod[-1] * 64)))
    assert [len(clf2.state(f"llm/{p}/vllm").incidents) for p in (a, c)] == [1, 1]


# ---- a different failure, a recovery ---------------------------------------------------------
def test_a_different_failure_after_a_restart_is_a_new_incident_linked_to_the_first() -> None:
    clf = Classifier(RB)
    first = attempt(clf, KV, "s", {}, 0.0)
    (kv_id,) = [i for k, i in notified(first) if k == "opened"]
    second = attempt(clf, DTYPE, "s", {}, span(KV))
    (new_id,) = [i for k, i in notified(second) if k == "opened"]
    by_id = {i.id: i for i in clf.state("s").incidents}
    assert by_id[new_id].category != "oom_kv_cache"
    assert by_id[new_id].extra["after_restart_of"]["id"] == kv_id
    assert by_id[kv_id].restarts == 0


def test_a_run_that_gets_past_the_failing_stage_resolves_the_crash_loop() -> None:
    clf = Classifier(RB)
    for n in range(3):
        attempt(clf, KV, "s", {}, n * span(KV))
    (inc,) = clf.state("s").incidents
    assert inc.extra["crash_loop"]
    fixed = attempt(clf, HEALTHY, "s", {}, 4 * span(KV))
    assert [(c.kind, c.incident.id) for c in fixed if c.kind == "resolved"] == [
        ("resolved", inc.id)
    ]
    assert "got past kv_cache_init" in inc.resolution


def test_a_replacement_pod_that_starts_resolves_its_predecessors_failure() -> None:
    clf = Classifier(RB)
    old, new = "vllm-7d9f8b6c4-x2x4z", "vllm-5c4b3a2d1-q7q7q"
    attempt(clf, KV, f"llm/{old}/vllm", pod_meta(old, "1" * 64), 0.0)
    (inc,) = clf.state(f"llm/{old}/vllm").incidents
    ended(clf, old, end_of(KV, 0.0) + 5)
    fixed = attempt(clf, HEALTHY, f"llm/{new}/vllm", pod_meta(new, "2" * 64), span(KV))
    assert [(c.kind, c.incident.id) for c in fixed if c.kind == "resolved"] == [
        ("resolved", inc.id)
    ]
    assert new in inc.resolution


# ---- replicas are never each other's restarts; a replacement needs Kubernetes' word ---------
REPLICAS = ("vllm-7d9f8b6c4-aaaaa", "vllm-7d9f8b6c4-bbbbb")


def two_replicas(
    gap: float, between: Callable[[Classifier], object] | None = None
) -> tuple[Classifier, list[Change], list[Change]]:
    """Replica A of one Deployment fails; replica B (same ReplicaSet, same node) starts
    ``gap`` seconds after A's last line (negative: while A still ran) and fails the same
    way. ``between`` feeds what Kubernetes said in between."""
    clf = Classifier(RB)
    a, b = REPLICAS
    first = attempt(clf, KV, f"llm/{a}/vllm", pod_meta(a, "a" * 64), 0.0)
    if between is not None:
        between(clf)
    start = end_of(KV, 0.0) - T0 + gap
    second = attempt(clf, KV, f"llm/{b}/vllm", pod_meta(b, "b" * 64), start)
    return clf, first, second


@pytest.mark.parametrize("gap", [-20.0, 0.0, 0.5, 30.0, 600.0, 86_400.0])
def test_two_replicas_on_one_node_failing_alike_are_two_incidents_whatever_their_timing(
    gap: float,
) -> None:
    clf, first, second = two_replicas(gap)
    a, b = (clf.state(f"llm/{p}/vllm").incidents for p in REPLICAS)
    assert len(a) == 1 and len(b) == 1 and a[0].id != b[0].id
    assert [k for k, _ in notified(first)][0] == "opened"
    assert [k for k, _ in notified(second)][0] == "opened"  # its own page
    for inc in (a[0], b[0]):
        assert inc.restarts == 0 and "attempts" not in inc.extra
        assert "after_restart_of" not in inc.extra and not inc.extra.get("crash_loop")


def test_a_replica_that_starts_healthy_never_resolves_another_replicas_failure() -> None:
    clf = Classifier(RB)
    a, b = REPLICAS
    attempt(clf, KV, f"llm/{a}/vllm", pod_meta(a, "a" * 64), 0.0)
    healthy = attempt(clf, HEALTHY, f"llm/{b}/vllm", pod_meta(b, "b" * 64), span(KV))
    assert [c for c in healthy if c.kind == "resolved"] == []
    (inc,) = clf.state(f"llm/{a}/vllm").incidents
    assert inc.status == "open"


def test_a_different_failure_in_another_replica_is_not_linked_as_after_a_restart() -> None:
    clf = Classifier(RB)
    a, b = REPLICAS
    attempt(clf, KV, f"llm/{a}/vllm", pod_meta(a, "a" * 64), 0.0)
    attempt(clf, DTYPE, f"llm/{b}/vllm", pod_meta(b, "b" * 64), span(KV))
    (other,) = clf.state(f"llm/{b}/vllm").incidents
    assert other.category != "oom_kv_cache" and "after_restart_of" not in other.extra


def controller_event(reason: str, message: str, at: float) -> dict:
    stamp = dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "type": "Normal",
        "reason": reason,
        "message": message,
        "lastTimestamp": stamp,
        "count": 1,
        "involvedObject": {"kind": "ReplicaSet", "namespace": "llm", "name": "vllm-7d9f8b6c4"},
        "metadata": {"uid": f"rs-{reason}-{at}"},
        "source": {"component": "replicaset-controller"},
    }


def pod_object(pod: str, at: float, phase: str = "Running", deleted: bool = False) -> dict:
    stamp = dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    term = {"exitCode": 1, "reason": "Error", "finishedAt": stamp, "containerID": "c://1"}
    md = {"namespace": "llm", "name": pod, "uid": f"uid-{pod}"}
    if deleted:
        md["deletionTimestamp"] = stamp
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": md,
        "spec": {"nodeName": NODE},
        "status": {
            "phase": phase,
            "containerStatuses": [
                {"name": "vllm", "restartCount": 0, "state": {"terminated": term}}
            ],
        },
    }


def feed_objects(clf: Classifier, *objects: dict) -> None:
    for obj in objects:
        for rec in kube_records(obj):
            clf.feed(rec)


AFTER_A = end_of(KV, 0.0) + 5.0  # A failed; B starts 30 s after A's last line
EVIDENCE = {
    "killing": lambda c: ended(c, REPLICAS[0], AFTER_A),
    "evicted": lambda c: ended(
        c,
        REPLICAS[0],
        AFTER_A,
        "Evicted",
        "The node was low on resource: ephemeral-storage.",
        "Warning",
    ),
    "successful-delete": lambda c: feed_objects(
        c, controller_event("SuccessfulDelete", f"Deleted pod: {REPLICAS[0]}", AFTER_A)
    ),
    "successful-create": lambda c: feed_objects(
        c, controller_event("SuccessfulCreate", f"Created pod: {REPLICAS[1]}", AFTER_A)
    ),
    "watch-deleted": lambda c: feed_objects(
        c, {"type": "DELETED", "object": pod_object(REPLICAS[0], AFTER_A, deleted=True)}
    ),
    "terminating": lambda c: feed_objects(c, pod_object(REPLICAS[0], AFTER_A, deleted=True)),
    "pod-failed": lambda c: feed_objects(c, pod_object(REPLICAS[0], AFTER_A, phase="Failed")),
}


@pytest.mark.parametrize("evidence", sorted(EVIDENCE))
def test_a_replacement_with_kubernetes_evidence_continues_its_predecessors_incident(
    evidence: str,
) -> None:
    clf, first, second = two_replicas(30.0, EVIDENCE[evidence])
    (opened,) = [i for k, i in notified(first) if k == "opened"]
    assert notified(second) == []  # one more restart of the same failure: no page
    (inc,) = clf.state(f"llm/{REPLICAS[1]}/vllm").incidents
    assert inc.id == opened and inc.restarts == 1
    assert [a["pod"] for a in inc.extra["attempts"]] == list(REPLICAS)


NOT_EVIDENCE = {
    # a probe kill restarts the container in the same pod: the pod goes on
    "probe-kill": lambda c: ended(
        c, REPLICAS[0], AFTER_A, message=("Container vllm failed liveness probe, will be restarted")
    ),
    # the other replica's container exited, the pod restarts it (phase Running)
    "container-exited": lambda c: feed_objects(c, pod_object(REPLICAS[0], AFTER_A)),
    # a pod created before A failed is a replica that was starting beside it
    "created-before-the-failure": lambda c: feed_objects(
        c, controller_event("SuccessfulCreate", f"Created pod: {REPLICAS[1]}", T0 - 60)
    ),
    # A was deleted long after B started: B ran beside it
    "ended-after-b-started": lambda c: ended(c, REPLICAS[0], AFTER_A + 3600),
}


@pytest.mark.parametrize("case", sorted(NOT_EVIDENCE))
def test_what_is_not_evidence_of_a_replacement_keeps_replicas_apart(case: str) -> None:
    clf, _, second = two_replicas(30.0, NOT_EVIDENCE[case])
    assert [k for k, _ in notified(second)][0] == "opened"
    assert all(i.restarts == 0 for p in REPLICAS for i in clf.state(f"llm/{p}/vllm").incidents)


def test_pod_lifecycle_evidence_is_saved_with_the_stream() -> None:
    """The evidence lives in the stream's snapshot: a restarted service (or the next owner
    of a Kafka partition) that reloads the streams still knows the pod ended."""
    clf, _, _ = two_replicas(30.0, EVIDENCE["killing"])
    snap = clf.state(f"llm/{REPLICAS[0]}/vllm").to_dict()
    reloaded = StreamState.from_dict(json.loads(json.dumps(snap)))
    assert reloaded.pod_life == PodLife(ended=Moment(float(int(AFTER_A))))
    assert snap["extra"]["pod_life"] == {"ended": float(int(AFTER_A))}  # as older versions saved
