"""End to end: a page needs an outcome, through the real service (``vllm-sentinel serve``,
``POST /ingest`` as Fluent Bit's http output sends it, SQLite, a real webhook receiver).

Two training runs print the same NCCL RAS warning (``Call to bind failed``): one goes on to
its steps and never pages (after ``outcome.hold_s`` - a team's ``judgements.yaml`` makes it
1 s here - it is a warning), the other dies with an NCCL error and pages once, with the
warning in its incident."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

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
from tests.test_e2e_service import (  # noqa: F401 - fixtures
    accepted_events,
    assert_once_each,
    launch,
    receiver,
    sqlite_url,
)
from tests.test_outcome import DEATH, NCCL_START, RAS_BIND, TRAINING

pytestmark = pytest.mark.integration
NS = "ml-train"


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


def test_a_warning_pages_only_when_its_run_dies(  # noqa: F811 - the fixtures imported above
    tmp_path: Path,
    launch: Callable[..., Sentinel],  # noqa: F811
    receiver: Receiver,  # noqa: F811
    sqlite_url: str,  # noqa: F811
) -> None:
    team = tmp_path / "team"
    team.mkdir()
    (team / "judgements.yaml").write_text("outcome: {hold_s: 1}\n")
    svc = launch(
        "outcome",
        service_config(
            store_url=sqlite_url,
            api_port=free_port(),
            receivers=[webhook(receiver.url)],
            rules={"dirs": [str(team)]},
            stall={"check_interval_s": 0.2},
        ),
    )
    for pod, lines in (("train-ok", NCCL_START + TRAINING), ("train-dies", NCCL_START + DEATH)):
        log = tmp_path / f"{pod}.log"
        log.write_text("\n".join(lines) + "\n")
        ingest(svc, log, pod)

    def of(pod: str, severity: str) -> list[dict]:
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
    db = Db(sqlite_url)
    wait_until(
        lambda: db.settled() and accepted_events(receiver.requests), 60, "deliveries settled"
    )
    assert_once_each(receiver.requests, {died["id"]})
