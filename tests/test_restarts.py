"""Restarts of one workload, as Kubernetes and Docker produce them: a new run in the same
stream (a banner, a new API server pid, a later start), a new container of the same pod, a
pod that replaced another of its workload on the same node. The same failure again counts on
the open incident (a timeline of attempts) and becomes a crash loop at the configured count,
notified once; a different failure is a new incident linked to the previous one; a run that
gets past the failing stage resolves it. Built from the lines of real captures
(tests/fixtures/real); the captured restart loops themselves are in
tests/test_operational_captures.py."""

from __future__ import annotations

from pathlib import Path

from service.classify.engine import Change, Classifier
from service.classify.report import classify_records
from service.classify.rulebook import RuleBook
from service.ingest.files import read_files
from service.records import LogRecord

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
    return {"namespace": "llm", "pod": pod, "container": "vllm", "container_id": container_id,
            "node": node, "labels": {"pod-template-hash": "7d9f8b6c4"}}


def attempt(clf: Classifier, log: list[tuple[float | None, str]], stream: str, meta: dict,
            start: float) -> list[Change]:
    """Feed one start of the workload, its first line ``start`` seconds after the first
    line of the kv-cache-too-small capture (the spacing of its lines kept)."""
    out: list[Change] = []
    shift = T0 + start - min(t for t, _ in log if t is not None)
    for t, text in log:
        out += clf.feed(LogRecord(stream, text, time=None if t is None else t + shift,
                                  meta=dict(meta)))
    return out


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
    early = attempt(clf, KV[:cut + 1], "s", {}, span(KV))
    assert notified(early) == []
    st = clf.state("s")
    assert st.extra.get("pending")  # judged when the root cause arrives
    rest = attempt(clf, KV[cut + 1:], "s", {}, span(KV))
    assert notified(rest) == [] and not st.extra.get("pending")
    assert [i.restarts for i in st.incidents] == [1]


def test_a_restart_without_a_banner_is_found_by_its_new_api_server_pid() -> None:
    banner = ("version 0.32.0", "non-default args")
    bare = [(t, x) for t, x in KV if not any(b in x for b in banner)]
    second = [(t, x.replace("APIServer pid=13474", "APIServer pid=23474")) for t, x in bare]
    rep = classify_records(
        [LogRecord("s", x, time=t) for t, x in bare]
        + [LogRecord("s", x, time=None if t is None else t + span(KV)) for t, x in second],
        Classifier(RB))[0]
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
        changes.append(attempt(clf, KV, f"llm/{pod}/vllm", pod_meta(pod, f"{n}" * 64),
                               n * span(KV)))
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
    other_node = attempt(clf, KV, f"llm/{b}/vllm", pod_meta(b, "2" * 64, node="gpu-node-2"),
                         span(KV))
    assert [k for k, _ in notified(other_node)][0] == "opened"  # its own incident
    clf2 = Classifier(RB)
    recs = [(t, x, a) for t, x in KV] + [(t, x, c) for t, x in KV]
    recs.sort(key=lambda r: (r[0] or 0.0))  # two replicas starting together, one node
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
        ("resolved", inc.id)]
    assert "got past kv_cache_init" in inc.resolution


def test_a_replacement_pod_that_starts_resolves_its_predecessors_failure() -> None:
    clf = Classifier(RB)
    old, new = "vllm-7d9f8b6c4-x2x4z", "vllm-5c4b3a2d1-q7q7q"
    attempt(clf, KV, f"llm/{old}/vllm", pod_meta(old, "1" * 64), 0.0)
    (inc,) = clf.state(f"llm/{old}/vllm").incidents
    fixed = attempt(clf, HEALTHY, f"llm/{new}/vllm", pod_meta(new, "2" * 64), span(KV))
    assert [(c.kind, c.incident.id) for c in fixed if c.kind == "resolved"] == [
        ("resolved", inc.id)]
    assert new in inc.resolution
