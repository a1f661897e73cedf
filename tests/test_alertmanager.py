"""Receiver type ``alertmanager`` against a real Alertmanager (Debian's
``prometheus-alertmanager``): the running service posts an incident to ``/api/v2/alerts``,
keeps it alive by re-posting it past its own ``endsAt``, and ends it with ``endsAt`` when the
incident resolves; Alertmanager's API and the notifications it sends to its own webhook
receiver show each step. Plus the payload's shape, without a server."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.config import ReceiverSettings
from service.notify import alertmanager
from service.notify.alert import Alert
from tests.e2e_support import REAL, Sentinel, fluent_bit_records, free_port, service_config
from tests.prom_support import Alertmanager, binary, version, wait_for
from tests.receiver import Receiver

NS, POD, NODE = "llm-prod", "qwen-0", "gpu-node-1"
TOKEN = "am-test-token"


def _epoch(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# ---- payload ---------------------------------------------------------------------------------
def _incident(**changes: Any) -> dict[str, Any]:
    body = {
        "id": "abc123",
        "stream": f"{NS}/{POD}/vllm",
        "run": 1,
        "primary": {
            "tier": "capacity",
            "category": "oom_kv_cache",
            "stage": "kv_cache_init",
            "confidence": 0.95,
            "method": "signature",
            "rule": "r",
            "line": "ValueError: KV cache is too small",
            "remediation": "Lower --max-model-len",
        },
        "related": [],
        "status": "open",
        "severity": "critical",
        "facts": {},
        "timeline": {},
        "evidence": [],
        "meta": {"namespace": NS, "pod": POD, "node": NODE},
        "explanation": None,
        "opened_at": 1_800_000_000.0,
        "updated_at": 1_800_000_001.0,
        "resolved_at": None,
        "restarts": 0,
        "extra": {},
    }
    body.update(changes)
    return body


def test_payload_labels_annotations_and_times() -> None:
    cfg = ReceiverSettings(
        name="am",
        type="alertmanager",
        url="http://am:9093/",
        resend_interval_s=30,
        labels={"team": "serving"},
    )
    now = 1_800_000_100.0
    req = alertmanager.build(Alert("opened", _incident(), 1, "https://sentinel.example"), cfg, now)
    assert req.url == "http://am:9093/api/v2/alerts"
    [a] = json.loads(req.body)
    assert a["labels"] == {
        "alertname": "VllmIncident",
        "severity": "critical",
        "tier": "capacity",
        "category": "oom_kv_cache",
        "stage": "kv_cache_init",
        "namespace": NS,
        "pod": POD,
        "node": NODE,
        "incident": "abc123",
        "team": "serving",
    }
    assert a["annotations"]["first_move"] == "Lower --max-model-len"
    assert a["annotations"]["summary"].startswith(
        f"[capacity/oom_kv_cache] kv_cache_init on {NS}/{POD}: ValueError"
    )
    assert a["annotations"]["incident_url"] == "https://sentinel.example/ui/incidents/abc123"
    assert a["generatorURL"] == a["annotations"]["incident_url"]
    assert _epoch(a["startsAt"]) == 1_800_000_000.0
    assert _epoch(a["endsAt"]) == now + 4 * 30  # alive for 4 re-post intervals
    resolved = _incident(status="resolved", resolved_at=1_800_000_050.0)
    [r] = json.loads(alertmanager.build(Alert("resolved", resolved, 2), cfg, now).body)
    assert _epoch(r["endsAt"]) == 1_800_000_050.0
    assert r["labels"] == a["labels"]  # the same alert in Alertmanager


def test_fleet_label_and_no_empty_labels() -> None:
    cfg = ReceiverSettings(name="am", type="alertmanager", url="http://am:9093/api/v2/alerts")
    fleet = _incident(
        meta={"namespace": NS, "fleet": True},
        extra={"fleet": {"key": "driver_branch", "value": "550", "count": 3}},
    )
    [a] = json.loads(alertmanager.build(Alert("opened", fleet, 1), cfg, 0.0).body)
    assert a["labels"]["fleet"] == "driver_branch=550"
    assert "pod" not in a["labels"] and "node" not in a["labels"]
    assert alertmanager.endpoint(cfg) == "http://am:9093/api/v2/alerts"


# ---- a real Alertmanager ---------------------------------------------------------------------
@pytest.fixture()
def hook() -> Iterator[Receiver]:
    with Receiver() as rx:
        yield rx


def _notifications(rx: Receiver, incident: str, status: str) -> list[dict[str, Any]]:
    """Alerts of ``incident`` that Alertmanager notified its webhook about with ``status``."""
    out = []
    for req in rx.requests:
        body = req.json()
        out += [
            a
            for a in body["alerts"]
            if a["labels"].get("incident") == incident and a["status"] == status
        ]
    return out


def test_real_alertmanager_fires_keeps_and_resolves(tmp_path: Path, hook: Receiver) -> None:
    am_bin = binary("prometheus-alertmanager")
    print("alertmanager:", version(am_bin))
    with Alertmanager(tmp_path, hook.url) as am:
        api_port = free_port()
        cfg = service_config(
            store_url=f"sqlite:///{tmp_path / 'sentinel.db'}",
            api_port=api_port,
            token=TOKEN,
            receivers=[
                {
                    "name": "am",
                    "type": "alertmanager",
                    "url": am.url,
                    "resend_interval_s": 1.0,
                    "timeout_s": 2.0,
                    "rate_limit_per_minute": 600,
                    "labels": {"team": "serving"},
                }
            ],
        )
        svc = Sentinel(tmp_path, "sentinel", cfg)
        try:
            svc.start().wait_ready()
            records = fluent_bit_records(REAL / "kv-cache-too-small.cri.log", NS, POD, node=NODE)
            r = svc.http.post(
                "/ingest",
                content=json.dumps(records).encode(),
                headers={**svc.headers(), "Content-Type": "application/json"},
            )
            assert r.status_code == 200, r.text
            [inc] = wait_for(
                lambda: svc.incidents(status="open", category="oom_kv_cache"), 30, "the incident"
            )
            iid = inc["id"]

            # firing in Alertmanager, with our labels and annotations
            [alert] = wait_for(lambda: am.alerts(incident=iid), 30, "the alert in Alertmanager")
            labels = alert["labels"]
            assert labels["alertname"] == "VllmIncident"
            assert (labels["tier"], labels["category"], labels["stage"]) == (
                "capacity",
                "oom_kv_cache",
                "kv_cache_init",
            )
            assert (labels["namespace"], labels["pod"], labels["node"]) == (NS, POD, NODE)
            assert labels["severity"] == "critical" and labels["team"] == "serving"
            assert alert["status"]["state"] == "active"
            url = f"http://127.0.0.1:{api_port}/ui/incidents/{iid}"
            assert alert["annotations"]["incident_url"] == url
            assert alert["generatorURL"] == url
            assert alert["annotations"]["first_move"]
            assert "oom_kv_cache" in alert["annotations"]["summary"]
            wait_for(
                lambda: _notifications(hook, iid, "firing"),
                30,
                "Alertmanager's firing notification",
            )

            # kept alive: still active well past the endsAt of the first post (4 x 1 s)
            first_end = _epoch(alert["endsAt"])
            wait_for(
                lambda: _epoch(am.alerts(incident=iid)[0]["endsAt"]) > first_end + 3,
                20,
                "re-posts moving endsAt forward",
            )
            [alert] = am.alerts(incident=iid)
            assert alert["status"]["state"] == "active"
            assert not _notifications(hook, iid, "resolved")
            assert svc.metric("sentinel_deliveries_total", receiver="am", outcome="resent") > 0

            # resolved by hand: ended with endsAt, Alertmanager notifies the resolution
            r = svc.http.post(
                f"/incidents/{iid}/resolve",
                json={"reason": "max-model-len lowered"},
                headers=svc.headers(),
            )
            assert r.status_code == 200, r.text
            [done] = wait_for(
                lambda: _notifications(hook, iid, "resolved"),
                30,
                "Alertmanager's resolved notification",
            )
            resolved_at = svc.http.get(f"/incidents/{iid}").json()["resolved_at"]
            assert abs(_epoch(done["endsAt"]) - resolved_at) < 1.0
            wait_for(lambda: not am.alerts(incident=iid), 10, "the alert to leave the list")
            # the re-post loop never brings it back
            fired = len(_notifications(hook, iid, "firing"))
            for _ in range(3):
                hook.wait_for(len(hook.requests) + 1, timeout=1.0)
            assert not am.alerts(incident=iid)
            assert len(_notifications(hook, iid, "firing")) == fired
        finally:
            svc.close()
            if svc.proc is not None and svc.proc.returncode not in (0, None, -15):
                print(svc.log_tail())
