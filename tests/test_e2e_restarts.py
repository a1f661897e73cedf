"""End to end: the real service (``vllm-sentinel serve``) fed real captures the way Fluent
Bit's http output sends them (POST /ingest, format json, the kubernetes map), a real webhook
receiver counting the messages:

* the restart loop (tests/fixtures/real/restart-loop-kv-cache.<n>.cri.log, three containers of
  one pod, each with its own container id), one container at a time as kubelet restarts it:
  one message when the failure opens, one when it becomes a crash loop, none for the restart
  in between;
* a saturated server and a 0% prefix-cache hit rate: each warning stored with its own advice
  and numbers, and no page at all."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e_support import (
    REAL,
    Db,
    Sentinel,
    free_port,
    iso_ns,
    kubernetes_map,
    log_lines,
    service_config,
    wait_until,
    webhook,
)
from tests.receiver import Receiver

pytestmark = pytest.mark.integration

NS, POD = "llm-prod", "kimi-kv-0"
LOOP = [REAL / f"restart-loop-kv-cache.{n}.cri.log" for n in range(3)]


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Callable[..., Sentinel]]:
    started: list[Sentinel] = []

    def make(config: dict[str, Any]) -> Sentinel:
        s = Sentinel(tmp_path, "restarts", config)
        started.append(s)
        return s.start().wait_ready()

    yield make
    for s in started:
        if s.alive():
            s.proc.send_signal(signal.SIGTERM)
        s.close()
        print(f"----- {s.name} ({s.log_path}) -----\n{s.log_tail(3000)}")


def container_records(path: Path, n: int, offset: float, pod: str = POD) -> list[dict[str, Any]]:
    """Container ``n`` of the pod as Fluent Bit's http output posts it (json, ``date``):
    the capture's own times moved by ``offset`` (so the loop ends now), its own container
    id."""
    kube = kubernetes_map(NS, pod)
    kube["docker_id"] = f"{n:x}" * 64
    out = []
    for t, fd, text in log_lines(path):
        assert t is not None
        out.append(
            {
                "date": t + offset,
                "stream": fd,
                "_p": "F",
                "log": text,
                "kubernetes": kube,
                "@timestamp": iso_ns(t + offset),
            }
        )
    return out


def webhooks(rx: Receiver) -> list[dict[str, Any]]:
    return [r.json() for r in rx.requests if 200 <= r.status < 300]


def test_three_containers_of_one_pod_failing_the_same_way_page_once_for_the_crash_loop(
    svc: Callable[..., Sentinel], tmp_path: Path
) -> None:
    import time

    url = f"sqlite:///{tmp_path / 'sentinel.db'}"
    with Receiver() as rx:
        s = svc(
            service_config(
                store_url=url,
                api_port=free_port(),
                receivers=[webhook(rx.url)],
                notify={"group_wait_s": 0.3},
            )
        )
        db = Db(url)
        try:
            ends = [log_lines(p)[-1][0] for p in LOOP]
            offset = time.time() - ends[-1]
            key = f"{NS}/{POD}/vllm"
            for n, path in enumerate(LOOP):
                body = container_records(path, n, offset)
                r = s.http.post(
                    "/ingest",
                    content=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json"},
                )
                assert r.status_code == 200, r.text  # answered once stored
                assert s.stream(key)["run"] == n
                wait_until(db.settled, 20, "every delivery to be sent")
                msgs = webhooks(rx)
                if n == 0:  # the failure opens: one page
                    assert [m["event"] for m in msgs] == ["opened"]
                    first = msgs[0]["incident"]
                    assert (first["category"], first["restarts"]) == ("oom_kv_cache", 0)
                elif n == 1:  # the restart failed the same way: stored, no page
                    assert len(msgs) == 1
                    (inc,) = s.incidents()
                    assert inc["id"] == first["id"] and inc["restarts"] == 1
            msgs = webhooks(rx)
            assert [m["event"] for m in msgs] == ["opened", "updated"]  # one page for the loop
            loop = msgs[1]["incident"]
            assert loop["id"] == first["id"] and loop["restarts"] == 2
            assert loop["extra"]["crash_loop"] is True and loop["extra"]["restart_helps"] is False
            assert "restarting will not help" in loop["extra"]["note"]
            attempts = loop["extra"]["attempts"]
            assert [a["container_id"][0] for a in attempts] == ["0", "1", "2"]
            assert [a["pod"] for a in attempts] == [POD] * 3
            (stored,) = s.incidents()
            assert stored["status"] == "open" and stored["restarts"] == 2
            assert all(r.header("X-Sentinel-Signature") for r in rx.requests)  # signed
        finally:
            db.close()


def test_warnings_of_real_servers_are_stored_with_their_own_advice_and_never_page(
    svc: Callable[..., Sentinel], tmp_path: Path
) -> None:
    import time

    from service.classify.rules import RULES_DIR, load_playbook

    moves = {
        rule: " ".join(str(e["first_move"]).split())
        for rule, e in load_playbook(RULES_DIR)["warnings"].items()
    }
    url = f"sqlite:///{tmp_path / 'sentinel.db'}"
    pods = {
        "chat-busy-0": REAL / "serving-kv-saturated.cri.log",
        "chat-prefix-0": REAL / "prefix-caching-zero-hit.cri.log",
        "chat-ok-0": REAL / "healthy-serving-prefix-caching-sigterm.cri.log",
    }
    with Receiver() as rx:
        s = svc(
            service_config(
                store_url=url,
                api_port=free_port(),
                receivers=[webhook(rx.url)],
                notify={"group_wait_s": 0.3},
            )
        )
        db = Db(url)
        try:
            for n, (pod, path) in enumerate(pods.items()):
                body = container_records(path, n, time.time() - log_lines(path)[-1][0], pod)
                r = s.http.post(
                    "/ingest",
                    content=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json"},
                )
                assert r.status_code == 200, r.text
            wait_until(db.settled, 20, "every delivery to be sent")
            found = {(w["pod"], w["rule"]): w for w in s.incidents(severity="warning")}
            assert set(found) == {
                ("chat-busy-0", "kv-cache-barely-fits"),
                ("chat-busy-0", "kv-cache-saturated"),
                ("chat-busy-0", "waiting-queue-growing"),
                ("chat-prefix-0", "prefix-cache-hit-zero"),
            }
            for (_, rule), w in found.items():
                assert w["remediation"] == moves[rule] and w["detail"], rule
            assert (
                "100.0%, 100.0%, 100.0%" in found[("chat-busy-0", "kv-cache-saturated")]["detail"]
            )
            assert s.incidents(severity="critical") == []
            time.sleep(1.0)
            assert rx.requests == []  # warnings never page
        finally:
            db.close()


def test_two_replicas_failing_alike_30_s_apart_are_two_incidents_and_two_pages(
    svc: Callable[..., Sentinel], tmp_path: Path
) -> None:
    """Two replicas of one Deployment (one ReplicaSet hash) on one node, the second failing
    the same way 30 s after the first: two incidents, each paged, neither a restart of the
    other. A third pod created by the ReplicaSet after the second was deleted (what
    Kubernetes says, posted as Fluent Bit's kubernetes_events input sends it) is its
    replacement: it continues the second's incident, stored without a page. Record times
    come from the captures (moved to end now), so the outcome never depends on the clock."""
    import time

    url = f"sqlite:///{tmp_path / 'sentinel.db'}"
    pods = ["kimi-7d9f8b6c4-aaaaa", "kimi-7d9f8b6c4-bbbbb", "kimi-7d9f8b6c4-ccccc"]
    with Receiver() as rx:
        s = svc(
            service_config(
                store_url=url,
                api_port=free_port(),
                receivers=[webhook(rx.url)],
                notify={"group_wait_s": 0.3},
            )
        )
        db = Db(url)
        try:
            first, last = log_lines(LOOP[0])[0][0], log_lines(LOOP[0])[-1][0]
            assert first is not None and last is not None
            base = time.time() - 3 * (last - first) - 120

            def post(body: list[dict[str, Any]]) -> None:
                r = s.http.post(
                    "/ingest",
                    content=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json"},
                )
                assert r.status_code == 200, r.text

            # replica b starts 30 s after replica a's last line
            starts = [base, base + (last - first) + 30]
            for n, pod in enumerate(pods[:2]):
                post(container_records(LOOP[0], n, starts[n] - first, pod=pod))
            wait_until(db.settled, 20, "every delivery to be sent")
            opened = [m for m in webhooks(rx) if m["event"] == "opened"]
            assert sorted(m["incident"]["meta"]["pod"] for m in opened) == pods[:2]
            incs = s.incidents()
            assert len(incs) == 2 and all(i["restarts"] == 0 for i in incs)
            assert all("after_restart_of" not in i["extra"] for i in incs)

            gone = starts[1] + (last - first) + 5
            stamp = iso_ns(gone)
            post(
                [
                    {
                        "date": gone,
                        **rs_event("SuccessfulDelete", f"Deleted pod: {pods[1]}", stamp),
                    },
                    {
                        "date": gone,
                        **rs_event("SuccessfulCreate", f"Created pod: {pods[2]}", stamp),
                    },
                ]
            )
            post(container_records(LOOP[0], 2, gone + 20 - first, pod=pods[2]))
            wait_until(db.settled, 20, "every delivery to be sent")
            assert len([m for m in webhooks(rx) if m["event"] == "opened"]) == 2
            by_pod = {i["meta"]["pod"]: i for i in s.incidents()}
            assert set(by_pod) == {pods[0], pods[2]}  # b's incident followed it to c
            assert by_pod[pods[2]]["restarts"] == 1 and by_pod[pods[0]]["restarts"] == 0
        finally:
            db.close()


def rs_event(reason: str, message: str, at: str) -> dict[str, Any]:
    """A ReplicaSet controller's event, as Fluent Bit's kubernetes_events input ships it."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "type": "Normal",
        "reason": reason,
        "message": message,
        "count": 1,
        "lastTimestamp": at,
        "involvedObject": {"kind": "ReplicaSet", "namespace": NS, "name": "kimi-7d9f8b6c4"},
        "metadata": {"uid": f"{reason}-{message}", "namespace": NS},
        "source": {"component": "replicaset-controller"},
    }
