"""Kubernetes events and pod status as evidence of the pod's stream (service/ingest/kube.py,
service/classify/kube.py): what a container's own log never shows (OOMKilled, exit 137,
evictions, scheduling and device-plugin failures, crash-loop back-offs).

The objects follow the Kubernetes Event v1 / events.k8s.io v1 and Pod v1 schemas, as
``kubectl get ... -o json`` prints them (tests/fixtures/kubernetes) and as Fluent Bit's
``kubernetes_events`` input emits them (the Event object is the record)."""

from __future__ import annotations

import asyncio
import copy
import json
import shutil
from pathlib import Path
from typing import Any

from fluent.sender import FluentSender

from service.classify.engine import Classifier
from service.classify.rulebook import RuleBook
from service.ingest.envelope import decode_line, decode_record
from service.offline.report import classify_records
from service.records import LogRecord
from service.sources.files import read_file, read_files
from service.sources.forward.server import ForwardServer
from service.sources.kafka.value import decode_kafka_value

ROOT = Path(__file__).resolve().parents[1]
KUBE = ROOT / "tests" / "fixtures" / "kubernetes"
REAL = ROOT / "tests" / "fixtures" / "real"
RB = RuleBook()
UID = "5b7c1f7e-2f0d-4c8e-9a51-3c2a8e5d9f10"
STREAM = "ml/vllm-qwen-0/vllm"


def doc(name: str) -> dict[str, Any]:
    return json.loads((KUBE / name).read_text())


def pod_log(tmp_path: Path, fixture: str, pod: str = "vllm-qwen-0") -> str:
    """A real capture where the kubelet keeps it: /var/log/pods/<ns>_<pod>_<uid>/vllm/0.log."""
    d = tmp_path / "var" / "log" / "pods" / f"ml_{pod}_{UID}" / "vllm"
    d.mkdir(parents=True)
    shutil.copy(REAL / fixture, d / "0.log")
    return str(d / "0.log")


def reports(records: Any) -> dict[str, dict[str, Any]]:
    return {r["stream"]: r for r in classify_records(records, Classifier(RB))}


def verdict(rep: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [(i["category"], i["stage"], i["rule"]) for i in rep["incidents"]]


def event(
    reason: str,
    message: str,
    *,
    container: str | None = "vllm",
    etype: str = "Warning",
    pod: str = "vllm-qwen-0",
    count: int = 1,
    uid: str = "e1",
) -> dict[str, Any]:
    ref = {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": "ml", "uid": UID}
    if container:
        ref["fieldPath"] = f"spec.containers{{{container}}}"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "count": count,
        "type": etype,
        "reason": reason,
        "message": message,
        "involvedObject": ref,
        "firstTimestamp": "2026-12-03T09:40:00Z",
        "lastTimestamp": "2026-12-03T09:41:12Z",
        "metadata": {"name": f"{pod}.{uid}", "namespace": "ml", "uid": uid, "resourceVersion": "1"},
        "source": {"component": "kubelet", "host": "gpu-node-3"},
        "reportingComponent": "kubelet",
        "reportingInstance": "gpu-node-3",
    }


def test_an_oomkilled_pod_with_a_silent_log_is_host_memory_in_a_confirmed_crash_loop() -> None:
    reps = reports(read_file(str(KUBE / "pod-oomkilled.json")))
    rep = reps[STREAM]
    assert verdict(rep) == [("host_memory", "model_load", "host-oom-killed")]
    inc = rep["incidents"][0]
    assert inc["extra"]["crash_loop"] is True  # the CrashLoopBackOff waiting state
    assert inc["extra"]["crash_loop_source"] == "kubernetes"
    assert "reason OOMKilled, exit code 137" in inc["line"]
    assert rep["facts"]["node"] == "gpu-node-3"


def test_exit_137_without_a_reason_is_a_sigkill_symptom() -> None:
    pod = doc("pod-oomkilled.json")
    cs = pod["status"]["containerStatuses"][0]
    cs["lastState"]["terminated"]["reason"] = "Error"
    del cs["state"]["waiting"]
    (rep,) = reports(decode_record(pod)).values()
    assert verdict(rep) == [("host_memory", "model_load", "process-sigkilled")]


def test_a_back_off_confirms_the_crash_loop_of_the_logs_own_root_cause(tmp_path: Path) -> None:
    log = pod_log(tmp_path, "kv-cache-too-small.cri.log")
    reps = reports(read_files([log, str(KUBE / "events-list.json")]))
    rep = reps[STREAM]
    assert verdict(rep) == [("oom_kv_cache", "kv_cache_init", "kv-cache-too-small-for-max-len")]
    assert rep["incidents"][0]["extra"]["crash_loop"] is True
    assert rep["incidents"][0]["extra"]["crash_loop_source"] == "kubernetes"
    # the routine Normal events (Scheduled, Pulled) left nothing; the other pod never ran
    assert set(reps) == {STREAM, "ml/vllm-llama-70b-0"}


def test_failed_scheduling_is_on_the_pod_until_its_container_logs(tmp_path: Path) -> None:
    records = list(read_file(str(KUBE / "events-list.json")))
    sched = [r for r in records if r.stream == "ml/vllm-llama-70b-0"]
    clf = Classifier(RB)
    (rep,) = classify_records(sched, clf)
    assert verdict(rep) == [("gpu_not_visible", "container", "k8s-failed-scheduling-gpu")]
    log = pod_log(tmp_path, "healthy-idle-sigint.cri.log", pod="vllm-llama-70b-0")
    first = next(iter(read_file(log)))
    changes = clf.feed(first)
    assert [(c.kind, c.incident.stream) for c in changes] == [("resolved", "ml/vllm-llama-70b-0")]
    assert "was scheduled" in changes[0].incident.resolution


def test_a_pod_eviction_goes_to_the_container_stream_of_the_pod(tmp_path: Path) -> None:
    log = pod_log(tmp_path, "healthy-serving-prefix-caching-sigterm.cri.log")
    evicted = event(
        "Evicted",
        "The node was low on resource: memory. Threshold quantity: "
        "100Mi, available: 81200Ki. Container vllm was using 31512148Ki, request is "
        "16Gi, has larger consumption of memory.",
        container=None,
    )
    records = [*read_file(log), *decode_record(evicted)]
    reps = reports(records)
    assert list(reps) == [STREAM]
    assert verdict(reps[STREAM])[0][:2] == ("host_memory", "serving")


def test_device_plugin_allocation_failure_in_the_events_k8s_io_schema() -> None:
    ev = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "type": "Warning",
        "reason": "UnexpectedAdmissionError",
        "action": "",
        "note": "Allocate failed due to requested number of devices unavailable for "
        "nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected",
        "regarding": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "vllm-qwen-1",
            "namespace": "ml",
            "uid": UID,
        },
        "eventTime": None,
        "deprecatedCount": 1,
        "deprecatedFirstTimestamp": "2026-12-03T10:02:11Z",
        "deprecatedLastTimestamp": "2026-12-03T10:02:11Z",
        "deprecatedSource": {"component": "kubelet", "host": "gpu-node-5"},
        "reportingController": "kubelet",
        "reportingInstance": "gpu-node-5",
        "metadata": {"name": "vllm-qwen-1.187e", "namespace": "ml", "uid": "e9"},
    }
    (rec,) = decode_record(ev)
    assert rec.stream == "ml/vllm-qwen-1" and rec.meta["node"] == "gpu-node-5"
    (rep,) = reports([rec]).values()
    assert verdict(rep) == [("gpu_not_visible", "container", "k8s-device-allocation-failed")]


def test_the_same_evidence_twice_counts_once_and_routine_objects_give_nothing() -> None:
    pod = doc("pod-oomkilled.json")
    clf = Classifier(RB)
    first = [c for r in decode_record(pod) for c in clf.feed(r)]
    again = [c for r in decode_record(copy.deepcopy(pod)) for c in clf.feed(r)]
    assert first and again == []
    assert clf.tracker.streams[STREAM].seq == 2
    assert decode_record(event("Pulled", "Container image already present", etype="Normal")) == []
    node_event = event("NodeNotReady", "Node gpu-node-3 status is now: NodeNotReady")
    node_event["involvedObject"] = {"kind": "Node", "name": "gpu-node-3"}
    assert decode_record(node_event) == []
    healthy = doc("pod-oomkilled.json")
    healthy["status"]["containerStatuses"][0].update(lastState={}, state={"running": {}})
    assert decode_record(healthy) == []


def test_probe_kills_and_unmatched_warnings() -> None:
    kill = event(
        "Killing", "Container vllm failed startup probe, will be restarted", etype="Normal"
    )
    unhealthy = event(
        "Unhealthy",
        'Startup probe failed: Get "http://10.244.3.41:8000/health"'
        ": dial tcp 10.244.3.41:8000: connect: connection refused",
        uid="e2",
    )
    clf = Classifier(RB)
    changes = [c for ev in (unhealthy, kill) for r in decode_record(ev) for c in clf.feed(r)]
    # a failing probe alone is only evidence; the kill is the finding
    assert [(c.kind, c.incident.category, c.incident.primary.rule) for c in changes] == [
        ("opened", "config_error", "k8s-probe-kill")
    ]


def test_every_ingest_shape_carries_them(tmp_path: Path) -> None:
    events = doc("events-list.json")
    watch = {"type": "MODIFIED", "object": events["items"][2]}
    assert [r.stream for r in decode_record(watch)] == [STREAM]
    line = json.dumps(events["items"][2])  # kubectl ... -o json | jq -c '.items[]'
    assert [r.stream for r in decode_line(line, "stdin")] == [STREAM]
    kafka = decode_kafka_value(json.dumps(events).encode(), None, "k8s-events", 0, 7)
    assert [r.stream for r in kafka] == [STREAM, "ml/vllm-llama-70b-0"]
    assert str(kafka[0].position) == "kafka:k8s-events:0:7"
    pod_line = json.dumps(doc("pod-oomkilled.json"))  # one line: no "message", still a pod
    assert len(decode_line(pod_line, "stdin")) == 2


def test_http_ingest_of_fluent_bit_kubernetes_events_records(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from service.api import create_app
    from tests.api_support import WRITE, close_context, make_context

    pod = doc("pod-oomkilled.json")
    body = json.dumps(
        [
            event(
                "BackOff",
                f"Back-off restarting failed container vllm in pod vllm-qwen-0_ml({UID})",
                count=3,
            ),
            pod,
        ]
    ).encode()
    ctx = make_context(tmp_path / "s.db", RB)
    try:
        with TestClient(create_app(ctx)) as client:
            r = client.post(
                "/ingest",
                params={"tag": "kube.events"},
                content=body,
                headers={**WRITE, "Content-Type": "application/json"},
            )
            assert r.status_code == 200, r.text
            items = client.get("/incidents", params={"severity": "critical"}).json()["items"]
    finally:
        close_context(ctx)
    assert [(i["category"], i["stream"]) for i in items] == [("host_memory", STREAM)]


def test_forward_from_a_real_fluent_logger_client() -> None:
    records = doc("events-list.json")["items"]
    got: list[LogRecord] = []

    async def sink(batch: list[LogRecord]) -> None:
        got.extend(batch)

    async def main() -> None:
        server = ForwardServer(sink, port=0, self_hostname="sentinel-test")
        await server.start()
        try:

            def emit() -> None:
                sender = FluentSender("k8s_events", host="127.0.0.1", port=server.port)
                try:
                    for rec in records:
                        assert sender.emit_with_time(None, 1_796_000_000, rec), sender.last_error
                finally:
                    sender.close()

            await asyncio.to_thread(emit)
            for _ in range(300):
                if len(got) >= 2:
                    break
                await asyncio.sleep(0.01)
        finally:
            await server.stop()

    asyncio.run(main())
    assert sorted(r.stream for r in got) == ["ml/vllm-llama-70b-0", STREAM]
    assert all(r.meta["tag"] == "k8s_events" for r in got)
