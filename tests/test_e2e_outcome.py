"""End to end: a page needs an outcome, through the real service (``vllm-sentinel serve``,
``POST /ingest`` as Fluent Bit's http output sends it, SQLite, a real webhook receiver).

Two training runs print the same NCCL RAS warning (``Call to bind failed``): one goes on to
its steps and never pages (after ``outcome.hold_s`` - a team's ``judgements.yaml`` makes it
1 s here - it is a warning), the other dies with an NCCL error and pages once, with the
warning in its incident."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e_support import (
    Db,
    Sentinel,
    fluent_bit_records,
    free_port,
    service_config,
    wait_until,
    webhook,
)
from tests.receiver import Receiver
from tests.test_outcome import DEATH, NCCL_START, RAS_BIND, TRAINING

pytestmark = pytest.mark.integration
NS = "ml-train"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as rx:
        yield rx


@pytest.fixture
def service(tmp_path: Path, receiver: Receiver) -> Iterator[Sentinel]:
    """The service with a team's judgements.yaml: ``outcome.hold_s`` 1 s, the timer every
    0.2 s; SQLite; the receiver."""
    team = tmp_path / "team"
    team.mkdir()
    (team / "judgements.yaml").write_text("outcome: {hold_s: 1}\n")
    config = service_config(
        store_url=f"sqlite:///{tmp_path / 'sentinel.db'}",
        api_port=free_port(),
        receivers=[webhook(receiver.url)],
        rules={"dirs": [str(team)]},
        stall={"check_interval_s": 0.2},
    )
    svc = Sentinel(tmp_path, "outcome", config)
    svc.start().wait_ready()
    yield svc
    if svc.alive():
        svc.proc.send_signal(signal.SIGTERM)
    svc.close()
    print(f"----- {svc.name} ({svc.log_path}) -----\n{svc.log_tail(3000)}")


def ingest(svc: Sentinel, log: Path, pod: str) -> None:
    records = fluent_bit_records(log, NS, pod)
    for r in records:  # Fluent Bit http output, format json: date key as a double
        r["date"] = time.time()
        del r["@timestamp"]
    r = svc.http.post(
        "/ingest",
        content=json.dumps(records).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 200, r.text


def test_a_warning_pages_only_when_its_run_dies(
    tmp_path: Path, service: Sentinel, receiver: Receiver
) -> None:
    svc = service
    for pod, lines in (("train-ok", NCCL_START + TRAINING), ("train-dies", NCCL_START + DEATH)):
        log = tmp_path / f"{pod}.log"
        log.write_text("\n".join(lines) + "\n")
        ingest(svc, log, pod)

    def of(pod: str, severity: str) -> list[dict[str, Any]]:
        return [
            i
            for i in svc.incidents(severity=severity)
            if i["stream"] == f"{NS}/{pod}/vllm" and i["severity"] == severity
        ]

    (warned,) = wait_until(lambda: of("train-ok", "warning"), 60, "the held warning decided")
    assert warned["rule"] == "port-in-use" and of("train-ok", "critical") == []
    (died,) = wait_until(lambda: of("train-dies", "critical"), 60, "the death paged")
    body = svc.http.get(f"/incidents/{died['id']}").json()
    assert RAS_BIND in [died["line"], *(r["line"] for r in body["related"])]
    db = Db(svc.config["store"]["url"])
    wait_until(lambda: db.settled() and paged(receiver), 60, "deliveries settled")
    assert paged(receiver) == [died["id"]]


def paged(receiver: Receiver) -> list[str]:
    """The incident ids of the webhooks the receiver accepted, in order."""
    return [r.json()["incident"]["id"] for r in receiver.requests if 200 <= r.status < 300]
