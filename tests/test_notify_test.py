"""A test notification per receiver (issue #28), against a real HTTP receiver
(tests/receiver.py): ``vllm-sentinel notify-test RECEIVER`` and the dashboard's receivers
page send a clearly marked test alert through the receiver's own builder and delivery and
report what the receiver answered; the dashboard's button is a write, recorded in the audit
under the signed-in user."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from service.app import web_app
from service.classify.rulebook import RuleBook
from service.cli import main
from service.config import ApiUser, ReceiverSettings
from service.context import ServiceContext
from service.notify.webhook import verify_signature
from tests.api_support import close_context, make_context
from tests.e2e_support import free_port
from tests.receiver import Receiver

SECRET = "webhook-secret-0123456789"
ALICE = "alice-token-0123456789abcdef"
VIEWER = "viewer-token-0123456789abcdef"


@pytest.fixture()
def rx() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def settings_file(tmp_path: Path, receivers: list[dict[str, Any]]) -> Path:
    path = tmp_path / "sentinel.yaml"
    path.write_text(yaml.safe_dump({"receivers": receivers}))
    return path


def webhook(url: str, name: str = "oncall") -> dict[str, Any]:
    return {"name": name, "type": "webhook", "url": url, "secret": SECRET, "timeout_s": 2.0}


# ---- the command --------------------------------------------------------------------------
def test_notify_test_sends_a_marked_alert_and_reports_the_answer(
    tmp_path: Path, rx: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    path = settings_file(
        tmp_path, [webhook(rx.url), {"name": "chat", "type": "slack", "url": rx.url}]
    )
    assert main(["notify-test", "oncall", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    host = rx.url.split("/")[2]
    assert out == (
        f"oncall (webhook, {host}): test alert delivered, the receiver answered HTTP 200: ok\n"
    )
    (req,) = rx.requests
    assert req.header("X-Sentinel-Test") == "true"
    body = req.json()
    assert body["event"] == "test" and body["incident"]["severity"] == "warning"
    assert body["incident"]["line"].startswith("TEST NOTIFICATION from vllm-sentinel, sent by ")
    assert "notify-test" in body["incident"]["line"]
    # the receiver's own delivery: signed as every webhook, keyed for deduplication
    assert verify_signature(
        SECRET,
        req.header("X-Sentinel-Timestamp") or "",
        req.body,
        req.header("X-Sentinel-Signature"),
    )
    assert req.header("Idempotency-Key") == body["event_id"]
    # Slack: its own format (text and blocks), the same mark
    assert main(["notify-test", "chat", "--config", str(path)]) == 0
    slack = rx.requests[-1].json()
    assert slack["text"].startswith("[TEST]") and "TEST NOTIFICATION" in slack["text"]
    assert "blocks" in slack


def test_a_refusal_an_unreachable_receiver_and_an_unknown_name(
    tmp_path: Path, rx: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/hook"
    path = settings_file(tmp_path, [webhook(rx.url), webhook(dead, "gone")])
    rx.fail(403, count=1)
    assert main(["notify-test", "oncall", "--config", str(path)]) == 1
    assert "test alert refused, the receiver answered HTTP 403" in capsys.readouterr().out
    assert main(["notify-test", "gone", "--config", str(path)]) == 1
    out = capsys.readouterr().out
    assert (
        out.startswith("gone (webhook, 127.0.0.1:") and "test alert not delivered: Connect" in out
    )
    assert main(["notify-test", "oncal", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "no receiver named 'oncal' (did you mean oncall? receivers: oncall, gone)" in err


# ---- the dashboard ------------------------------------------------------------------------
@pytest.fixture()
def dashboard(tmp_path: Path, rx: Receiver) -> Iterator[tuple[TestClient, ServiceContext]]:
    ctx = make_context(tmp_path / "s.db", RuleBook())
    ctx.settings.api.users = [
        ApiUser(name="alice", token=ALICE, role="write"),
        ApiUser(name="viewer", token=VIEWER, role="read"),
    ]
    ctx.settings.receivers = [ReceiverSettings(**webhook(rx.url))]
    with TestClient(web_app(ctx), base_url="https://testserver") as c:
        yield c, ctx
    close_context(ctx)


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    assert m
    return m.group(1)


def sign_in(c: TestClient, token: str) -> None:
    page = c.get("/ui/login")
    r = c.post(
        "/ui/login",
        data={"token": token, "csrf": csrf_of(page.text), "next": "/ui/receivers"},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text


def test_the_dashboard_button_sends_it_as_the_signed_in_user(
    dashboard: tuple[TestClient, ServiceContext], rx: Receiver
) -> None:
    c, _ = dashboard
    sign_in(c, ALICE)
    page = c.get("/ui/receivers").text
    assert "never tested" in page and "Send a test notification" in page
    r = c.post("/ui/receivers/oncall/test", data={"csrf": csrf_of(page)}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/receivers?done=tested")
    (req,) = rx.requests
    assert req.json()["event"] == "test" and "sent by alice" in req.json()["incident"]["line"]
    (entry,) = c.get("/audit", params={"target_kind": "receiver"}, headers=_bearer(ALICE)).json()
    assert (entry["actor"], entry["action"], entry["target_id"]) == (
        "alice",
        "receiver.test",
        "oncall",
    )
    assert entry["detail"] == {"ok": True, "status": 200, "error": None}
    after = c.get(r.headers["location"]).text
    assert "Test notification sent." in after
    row = after.split('data-receiver="oncall"', 1)[1].split("</tr>", 1)[0]
    assert "delivered" in row and "HTTP 200" in row and "by alice" in row


def test_the_button_is_write_protected(
    dashboard: tuple[TestClient, ServiceContext], rx: Receiver
) -> None:
    c, _ = dashboard
    sign_in(c, VIEWER)
    page = c.get("/ui/receivers").text
    assert "Sign in to send a test" in page and "Send a test notification" not in page
    r = c.post("/ui/receivers/oncall/test", data={"csrf": csrf_of(page)}, follow_redirects=False)
    assert r.status_code == 303 and "/ui/login" in r.headers["location"]
    forged = c.post("/ui/receivers/oncall/test", data={"csrf": "forged"}, follow_redirects=False)
    assert forged.status_code == 403
    api = c.post("/receivers/oncall/test", headers=_bearer(VIEWER))
    assert api.status_code == 401  # a read token never writes
    assert rx.requests == []  # nothing was sent
    assert c.get("/audit", params={"target_kind": "receiver"}, headers=_bearer(ALICE)).json() == []


def test_the_api_lists_receivers_without_their_urls_and_tests_one(
    dashboard: tuple[TestClient, ServiceContext], rx: Receiver
) -> None:
    c, _ = dashboard
    (listed,) = c.get("/receivers", headers=_bearer(VIEWER)).json()
    assert listed["name"] == "oncall" and listed["host"] == rx.url.split("/")[2]
    assert "url" not in listed and SECRET not in str(listed)
    r = c.post("/receivers/oncall/test", headers=_bearer(ALICE))
    assert r.status_code == 200 and r.json()["ok"] is True and r.json()["status"] == 200
    assert c.post("/receivers/nobody/test", headers=_bearer(ALICE)).status_code == 404


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
