"""Fleet paging end to end: two real ``vllm-sentinel serve`` replicas on one PostgreSQL, a
Deployment's pods failing with the same too-old driver sent through ``POST /ingest`` (Fluent
Bit's http output) to both replicas, a real webhook receiver: one fleet page, no pod page.

Real time here (a real service): the hold is set to 2 s so the test stays short; the logic
under a controllable clock is in tests/test_notify_fleet.py.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e_support import (
    CORPUS,
    Db,
    Expected,
    Sentinel,
    fluent_bit_records,
    free_port,
    kafka_message,
    service_config,
    wait_until,
    webhook,
)
from tests.receiver import Receiver

pytestmark = pytest.mark.integration
DRIVER_TOO_OLD = CORPUS / "gh-verl-omni-133-v0202-driver-too-old-userwarning.log"
NS = "llm-prod"
PODS = [f"kimi-7d9f8c6b5d-{c * 5}" for c in "abcdefghijkl"]  # one Deployment, 12 pods


@pytest.fixture
def pg_url() -> Iterator[str]:
    from tests.test_store import fresh_pg_url, pg_unavailable

    reason = pg_unavailable()
    if reason:
        pytest.skip(reason)
    yield from fresh_pg_url()


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[..., Sentinel]]:
    started: list[Sentinel] = []

    def make(name: str, config: dict[str, Any]) -> Sentinel:
        s = Sentinel(tmp_path, name, config)
        started.append(s)
        return s

    yield make
    for s in started:
        if s.alive():
            s.proc.send_signal(signal.SIGTERM)
    for s in started:
        s.close()
        print(f"----- {s.name} ({s.log_path}) -----\n{s.log_tail(3000)}")


def test_a_deployment_failing_on_one_driver_pages_once_as_a_fleet(
    pg_url: str, launch: Callable[..., Sentinel]
) -> None:
    with Receiver() as rx:
        pair = [
            launch(
                name,
                service_config(
                    store_url=pg_url,
                    api_port=free_port(),
                    receivers=[webhook(rx.url)],
                    instance_id=f"e2e-{name}",
                    notify={"group_wait_s": 0.2},
                    fleet={"hold_s": 2.0, "threshold": 3, "window_s": 900},
                ),
            )
            for name in ("a", "b")
        ]
        for s in pair:
            s.start()
        for s in pair:
            s.wait_ready()
        logs = {
            pod: fluent_bit_records(DRIVER_TOO_OLD, NS, pod, node=f"gpu-b300-{i}")
            for i, pod in enumerate(PODS)
        }
        exp = Expected.of([kafka_message(r) for recs in logs.values() for r in recs])
        assert len(exp.critical()) == 12
        sent_at = time.time()
        for i, recs in enumerate(logs.values()):  # pods spread over both replicas
            for r in recs:
                r["date"] = time.time()
                del r["@timestamp"]
            resp = pair[i % 2].http.post(
                "/ingest",
                content=json.dumps(recs).encode(),
                headers={"Content-Type": "application/json"},
            )
            assert resp.status_code == 200, resp.text
        db = Db(pg_url)
        try:
            wait_until(
                lambda: len(pair[0].incidents()) == 13 and db.settled(),
                40,
                "the fleet incident and every delivery settled",
            )
            msgs = [r.json() for r in rx.accepted()]
            assert len(msgs) == 1, [m["incident"]["id"] for m in msgs]
            (page,) = msgs
            assert rx.accepted()[0].at - sent_at >= 2.0  # held, then the fleet
            inc = page["incident"]
            assert page["event"] == "opened" and inc["id"].startswith("fleet-")
            assert inc["extra"]["fleet"]["count"] == 12
            assert (inc["extra"]["fleet"]["key"], inc["extra"]["fleet"]["value"]) == (
                "driver_branch",
                "cuda12.8",
            )
            assert inc["namespace"] == NS
            statuses = Counter(
                (d["incident_id"] == inc["id"], d["status"])
                for d in db.rows("SELECT incident_id, status FROM deliveries")
            )
            assert statuses == {(False, "inhibited"): 12, (True, "sent"): 1}
            fleet = pair[1].http.get(f"/incidents/{inc['id']}").json()
            assert sorted(m["pod"] for m in fleet["members"]) == sorted(PODS)
            children = [x for x in pair[1].incidents() if x["id"] != inc["id"]]
            assert sorted(x["id"] for x in children) == sorted(exp.critical())
            assert {x["fleet_id"] for x in children} == {inc["id"]}
        finally:
            db.close()
