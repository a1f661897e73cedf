"""The Slack app's buttons (``POST /slack/actions``): requests signed with Slack's own SDK
(``slack_sdk.signature.SignatureVerifier``) acknowledge or silence as the Slack user who
clicked; a request not signed with the app's secret, or older than five minutes, is refused
(401); the message is replaced through the ``response_url`` (a real HTTP receiver here)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient
from slack_sdk.signature import SignatureVerifier

from service.app import web_app
from service.classify.rulebook import RuleBook
from service.config import SlackAppSettings
from service.context import ServiceContext
from service.incidents.finding import Finding
from service.incidents.incident import Incident
from service.notify import slack
from service.notify.alert import Alert
from service.notify.slack_app import SlackRefused, verify
from service.store.deliveries import Ack
from tests.api_support import REAL, WRITE, close_context, fluentbit_records, kube, make_context
from tests.receiver import Receiver

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


def signed(body: bytes, secret: str = SECRET, at: float | None = None) -> dict[str, str]:
    ts = str(int(time.time() if at is None else at))
    sig = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    assert sig is not None
    return {
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": sig,
        "Content-Type": "application/x-www-form-urlencoded",
    }


def click(action: str, incident_id: str, response_url: str, user: str = "alice") -> bytes:
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": {"id": "U0ALICE", "username": user, "name": user, "team_id": "T0"},
        "api_app_id": "A0",
        "actions": [
            {"action_id": action, "block_id": f"sentinel:{incident_id}", "value": incident_id}
        ],
        "response_url": response_url,
        "container": {"type": "message"},
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


@pytest.fixture
def rx() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


@pytest.fixture
def app(tmp_path: Any) -> Iterator[tuple[TestClient, ServiceContext, str]]:
    ctx = make_context(tmp_path / "s.db", RuleBook())
    ctx.settings.notify.slack = SlackAppSettings(
        signing_secret=SECRET, response_url_hosts=["127.0.0.1"]
    )
    with TestClient(web_app(ctx)) as c:
        r = c.post(
            "/ingest",
            json=fluentbit_records(REAL / "kv-cache-too-small.cri.log", kube("prod", "llama-0")),
            headers=WRITE,
        )
        assert r.status_code == 200
        (inc,) = c.get("/incidents").json()["items"]
        yield c, ctx, inc["id"]
    close_context(ctx)


def test_acknowledge_from_slack_as_the_slack_user(
    app: tuple[TestClient, ServiceContext, str], rx: Receiver
) -> None:
    c, _, iid = app
    body = click("ack", iid, rx.url.removesuffix("/hook") + "/actions/T0/1/xyz")
    r = c.post("/slack/actions", content=body, headers=signed(body))
    assert r.status_code == 200, r.text
    inc = c.get(f"/incidents/{iid}").json()
    assert inc["acknowledged_by"] == "alice"
    assert c.get("/audit").json()[0] | {"id": 0, "at": 0} == {
        "id": 0,
        "at": 0,
        "actor": "alice",
        "via": "slack",
        "action": "ack",
        "target_kind": "incident",
        "target_id": iid,
        "detail": {},
    }
    assert rx.wait_for(1, timeout=10)
    (update,) = rx.requests
    assert update.path == "/actions/T0/1/xyz"
    msg = update.json()
    assert msg["replace_original"] is True
    assert "Acknowledged by alice" in json.dumps(msg["blocks"])
    actions = msg["blocks"][-1]
    assert [e["action_id"] for e in actions["elements"]] == ["silence_4h", "open"]  # no Ack now


def test_silence_from_slack(app: tuple[TestClient, ServiceContext, str], rx: Receiver) -> None:
    c, _, iid = app
    body = click("silence_4h", iid, rx.url + "/r", user="bob")
    assert c.post("/slack/actions", content=body, headers=signed(body)).status_code == 200
    (s,) = c.get("/silences", params={"active": True}).json()
    assert s["matchers"] == {"incident": [iid]} and s["created_by"] == "bob"
    assert s["ends_at"] - s["starts_at"] == pytest.approx(4 * 3600, abs=5)
    timeline = c.get(f"/incidents/{iid}").json()["timeline"]
    assert ("bob", "silenced") in [(e["by"], e["action"]) for e in timeline]


def test_unsigned_wrongly_signed_and_old_requests_are_refused(
    app: tuple[TestClient, ServiceContext, str], rx: Receiver
) -> None:
    c, _, iid = app
    body = click("ack", iid, rx.url + "/r")
    for headers in (
        {"Content-Type": "application/x-www-form-urlencoded"},
        signed(body, secret="another-apps-secret-000000000000"),
        signed(body, at=time.time() - 301),  # older than five minutes: a replay
        {**signed(body), "X-Slack-Signature": "v0=" + "0" * 64},
    ):
        r = c.post("/slack/actions", content=body, headers=headers)
        assert r.status_code == 401, headers
    tampered = click("ack", iid, rx.url + "/r", user="mallory")
    r = c.post("/slack/actions", content=tampered, headers=signed(body))
    assert r.status_code == 401
    assert c.get(f"/incidents/{iid}").json()["acknowledged_by"] is None
    assert rx.requests == []


def test_a_response_url_elsewhere_is_never_called(
    app: tuple[TestClient, ServiceContext, str], rx: Receiver
) -> None:
    c, ctx, iid = app
    ctx.settings.notify.slack = SlackAppSettings(signing_secret=SECRET)  # hooks.slack.com only
    body = click("ack", iid, rx.url + "/r")
    assert c.post("/slack/actions", content=body, headers=signed(body)).status_code == 200
    assert c.get(f"/incidents/{iid}").json()["acknowledged_by"] == "alice"
    assert rx.requests == []  # (the test client returns once the background work is done)


def test_no_signing_secret_no_endpoint(tmp_path: Any) -> None:
    ctx = make_context(tmp_path / "s.db", RuleBook())
    try:
        with TestClient(web_app(ctx)) as c:
            assert c.post("/slack/actions", content=b"payload=%7B%7D").status_code == 404
    finally:
        close_context(ctx)


def test_verify_matches_slacks_own_signatures() -> None:
    cfg = SlackAppSettings(signing_secret=SECRET)
    body = b"payload=%7B%22type%22%3A%22block_actions%22%7D"
    now = time.time()
    h = signed(body, at=now)
    verify(cfg, h["X-Slack-Request-Timestamp"], h["X-Slack-Signature"], body, now)
    assert SignatureVerifier(SECRET).is_valid(
        body=body, timestamp=h["X-Slack-Request-Timestamp"], signature=h["X-Slack-Signature"]
    )
    with pytest.raises(SlackRefused):
        verify(cfg, h["X-Slack-Request-Timestamp"], h["X-Slack-Signature"], body + b"x", now)


def test_the_message_has_the_buttons_slack_sends_back() -> None:
    body = Incident(
        id="abc123",
        stream="prod/llama-0/vllm",
        run=1,
        primary=Finding(
            tier="capacity",
            category="oom_kv_cache",
            stage="kv_cache_init",
            confidence=0.95,
            method="signature",
            rule=None,
            line="ValueError: no room",
        ),
    ).to_dict()
    alert = Alert("opened", body, 1, "https://sentinel.example")
    (actions,) = [b for b in slack.message(alert)["blocks"] if b["type"] == "actions"]
    ack, silence, open_ = actions["elements"]
    assert (ack["action_id"], ack["value"]) == ("ack", "abc123")
    assert (silence["action_id"], silence["value"]) == ("silence_4h", "abc123")
    assert open_["url"] == "https://sentinel.example/ui/incidents/abc123"
    acked = Alert("acknowledged", body, 2, "https://x", ack=Ack("bob", 1.0, "user"))
    msg = slack.message(acked)
    assert msg["text"].startswith("[ACKNOWLEDGED by bob]")
    assert "ack" not in [e["action_id"] for e in msg["blocks"][-1]["elements"]]


def test_a_cascade_in_slack_is_a_cascade_of_the_root_cause() -> None:
    body = Incident(
        id="c1",
        stream="s",
        run=1,
        primary=Finding(
            tier="capacity",
            category="oom_kv_cache",
            stage="kv_cache_init",
            confidence=0.95,
            method="signature",
            rule="kv",
            line="ValueError: no room",
        ),
        related=[
            Finding(
                tier="integration",
                category="gpu_not_visible",
                stage="kv_cache_init",
                confidence=0.6,
                method="signature",
                rule="engine-init-failed-cascade",
                line="RuntimeError: Engine core initialization failed.",
                role="cascade",
            )
        ],
    ).to_dict()
    text = json.dumps(slack.message(Alert("opened", body, 1, "https://x"))["blocks"])
    assert "cascade of oom_kv_cache" in text and "gpu_not_visible" not in text
