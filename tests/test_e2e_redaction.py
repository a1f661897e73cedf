"""End to end (#20, failure 1): the real service (``vllm-sentinel serve``) listening beyond
loopback, fed a real failing log with secrets planted in vLLM's ``non-default args`` and in a
``?token=hf_...`` URL (tests/secrets_support.py) the way Fluent Bit's http output sends it,
paging a real receiver as a webhook, Slack, PagerDuty and Alertmanager: no planted secret in
any delivered body, any store row, ``GET /incidents`` or the dashboard; the redactions are
counted in /metrics; reads need the token because the API listens beyond loopback."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e_support import (
    Sentinel,
    free_port,
    iso_ns,
    kubernetes_map,
    service_config,
    wait_until,
    webhook,
)
from tests.receiver import Receiver
from tests.secrets_support import dump_tables, leaked, secret_lines

pytestmark = pytest.mark.slow

NS, POD = "llm-prod", "secret-0"


def records() -> list[dict[str, object]]:
    lines = secret_lines()
    end = time.time()
    return [
        {
            "date": end - (len(lines) - i) * 0.001,
            "time": iso_ns(end - (len(lines) - i) * 0.001),
            "stream": "stdout",
            "_p": "F",
            "log": line,
            "kubernetes": kubernetes_map(NS, POD, "gpu-node-1"),
        }
        for i, line in enumerate(lines)
    ]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as rx:
        yield rx


def test_no_planted_secret_leaves_the_real_service(tmp_path: Path, receiver: Receiver) -> None:
    token = "e2e-redaction-token-0123456789"
    port = free_port()
    db = f"sqlite:///{tmp_path / 'sentinel.db'}"
    receivers = [
        webhook(receiver.url, "oncall"),
        {"name": "chat", "type": "slack", "url": receiver.url + "/slack"},
        {"name": "pd", "type": "pagerduty", "url": receiver.url + "/pd", "routing_key": "rk-0"},
        {"name": "am", "type": "alertmanager", "url": receiver.url + "/am"},
    ]
    cfg = service_config(store_url=db, api_port=port, token=token, receivers=receivers)
    cfg["api"]["host"] = "0.0.0.0"  # beyond loopback: reads need a token too
    svc = Sentinel(tmp_path, "redaction", cfg)
    try:
        svc.start().wait_ready()
        auth = svc.headers()
        r = svc.http.post(
            "/ingest",
            content=json.dumps(records()).encode(),
            headers={**auth, "Content-Type": "application/json"},
        )
        assert r.status_code == 200, r.text

        # reads: refused without the token (no read_token set, not loopback)
        assert svc.http.get("/incidents").status_code == 401
        items = wait_until(
            lambda: svc.http.get("/incidents", headers=auth).json()["items"], 20, "the incident"
        )
        assert [i["category"] for i in items] == ["model_unavailable"]
        inc_id = items[0]["id"]
        detail = svc.http.get(f"/incidents/{inc_id}", headers=auth)
        page = svc.http.get(f"/ui/incidents/{inc_id}", headers=auth)
        assert detail.status_code == 200 and page.status_code == 200
        assert "<REDACTED>" in detail.text

        wait_until(lambda: len(receiver.accepted()) >= 4, 30, "a page to each of 4 receivers")
        paths = sorted(req.path for req in receiver.accepted())
        assert paths == ["/hook", "/hook/am/api/v2/alerts", "/hook/pd", "/hook/slack"], paths

        served = [json.dumps(items), detail.text, page.text]
        served.append(svc.http.get(f"/streams/{NS}/{POD}/vllm", headers=auth).text)
        bodies = [req.body.decode("utf-8", "replace") for req in receiver.requests]
        assert leaked("\n".join(served)) == []
        assert leaked("\n".join(bodies)) == []
        (hook,) = [req for req in receiver.accepted() if req.path == "/hook"]
        assert "token=<REDACTED>" in hook.body.decode()  # the line is there, its secret not
        # the args line: the api_key list and the hf_token; the root-cause line: the URL token
        assert svc.metric("sentinel_redactions_total", pattern="non_default_args_secret") == 2
        assert svc.metric("sentinel_redactions_total", pattern="secret_assignment") == 1
        assert svc.metric("sentinel_redactions_total") == 3
    finally:
        svc.close()
    assert leaked(dump_tables(db)) == []
    assert leaked(svc.log_tail(1 << 20)) == []  # nor the service's own log
