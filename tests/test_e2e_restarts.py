"""End to end: the real service (``vllm-sentinel serve``) fed the real restart loop
(tests/fixtures/real/restart-loop-kv-cache.<n>.cri.log, three containers of one pod) the way
Fluent Bit's http output sends it (POST /ingest, format json, the kubernetes map with each
container's own id), one container at a time as kubelet restarts it; a real webhook receiver
counts the messages: one when the failure opens, one when it becomes a crash loop, none for the
restart in between."""

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


def container_records(path: Path, n: int, offset: float) -> list[dict[str, Any]]:
    """Container ``n`` of the pod as Fluent Bit's http output posts it (json, ``date``):
    the capture's own times moved by ``offset`` (so the loop ends now), its own container
    id."""
    kube = kubernetes_map(NS, POD)
    kube["docker_id"] = f"{n:x}" * 64
    out = []
    for t, fd, text in log_lines(path):
        assert t is not None
        out.append({"date": t + offset, "stream": fd, "_p": "F", "log": text,
                    "kubernetes": kube, "@timestamp": iso_ns(t + offset)})
    return out


def webhooks(rx: Receiver) -> list[dict[str, Any]]:
    return [r.json() for r in rx.requests if 200 <= r.status < 300]


def test_three_containers_of_one_pod_failing_the_same_way_page_once_for_the_crash_loop(
        svc: Callable[..., Sentinel], tmp_path: Path) -> None:
    import time

    url = f"sqlite:///{tmp_path / 'sentinel.db'}"
    with Receiver() as rx:
        s = svc(service_config(store_url=url, api_port=free_port(),
                               receivers=[webhook(rx.url)], notify={"group_wait_s": 0.3}))
        db = Db(url)
        try:
            ends = [log_lines(p)[-1][0] for p in LOOP]
            offset = time.time() - ends[-1]
            key = f"{NS}/{POD}/vllm"
            for n, path in enumerate(LOOP):
                body = container_records(path, n, offset)
                r = s.http.post("/ingest", content=json.dumps(body).encode(),
                                headers={"Content-Type": "application/json"})
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
