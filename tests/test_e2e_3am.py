"""The on-call engineer at 3 a.m., end to end (issue #28), against the real service
(``vllm-sentinel serve`` on SQLite) and a real HTTP receiver standing in for Slack:

a real capture's failure pages Slack (its message carries the Acknowledge button); the
button's interactivity request, signed with Slack's own SDK, acknowledges it as that Slack
user and the message is replaced through its ``response_url``; a named user assigns it, another
notes it; the incident's timeline lists all of it with who and when; ``?q=`` finds it by pod;
and the dashboard shows the same at 390 px in dark mode in Chromium (a screenshot of each).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from slack_sdk.signature import SignatureVerifier

from tests.e2e_support import (
    REAL,
    Db,
    Sentinel,
    fluent_bit_records,
    free_port,
    service_config,
    wait_until,
)
from tests.receiver import Receiver

pytestmark = pytest.mark.integration

CAPTURE = REAL / "kv-cache-too-small.cri.log"
POD = "llama-70b-0"
SIGNING_SECRET = "e2e-slack-signing-secret-0123456789"
USERS = {
    "alice": "alice-token-0123456789abcdef",
    "bob": "bob-token-0123456789abcdefgh",
}
SHOTS = Path(os.environ.get("SENTINEL_SCREENSHOTS") or tempfile.mkdtemp(prefix="sentinel-3am-"))
CHROMIUM = Path("/usr/bin/chromium")


def bearer(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {USERS[user]}"}


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[Sentinel, Receiver, Db]]:
    url = f"sqlite:///{tmp_path / 'sentinel.db'}"
    with Receiver() as slack:
        cfg = service_config(
            store_url=url,
            api_port=free_port(),
            receivers=[
                {
                    "name": "slack-oncall",
                    "type": "slack",
                    "url": slack.url,
                    "rate_limit_per_minute": 600,
                    "timeout_s": 2.0,
                }
            ],
            notify={
                "group_wait_s": 0.2,
                "slack": {"signing_secret": SIGNING_SECRET, "response_url_hosts": ["127.0.0.1"]},
            },
        )
        cfg["api"]["users"] = [
            {"name": name, "token": token, "role": "write"} for name, token in USERS.items()
        ]
        svc = Sentinel(tmp_path, "3am", cfg)
        db = Db(url)
        try:
            svc.start().wait_ready(60)
            yield svc, slack, db
        finally:
            db.close()
            svc.close()
            print(f"----- service log -----\n{svc.log_tail(3000)}")


def slack_click(
    button: dict[str, Any], user: str, response_url: str
) -> tuple[bytes, dict[str, str]]:
    """The request Slack sends when ``user`` presses ``button``, signed as Slack signs it."""
    payload = {
        "type": "block_actions",
        "user": {"id": "U03CAROL", "username": user, "name": user, "team_id": "T0SENT"},
        "api_app_id": "A0SENTINEL",
        "container": {"type": "message", "channel_id": "C0ONCALL"},
        "actions": [
            {
                "type": "button",
                "action_id": button["action_id"],
                "block_id": "sentinel",
                "value": button["value"],
                "action_ts": f"{time.time():.6f}",
            }
        ],
        "response_url": response_url,
    }
    body = urlencode({"payload": json.dumps(payload)}).encode()
    ts = str(int(time.time()))
    signature = SignatureVerifier(SIGNING_SECRET).generate_signature(timestamp=ts, body=body)
    assert signature is not None
    return body, {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": signature,
    }


def test_the_3am_path(service: tuple[Sentinel, Receiver, Db]) -> None:
    svc, slack, db = service
    # 1. a real failure pages Slack
    r = svc.http.post(
        "/ingest",
        json=fluent_bit_records(CAPTURE, "llm-prod", POD, node="gpu-a100-7"),
        headers=bearer("alice"),
    )
    assert r.status_code == 200, r.text
    assert slack.wait_for(1, timeout=30), "Slack was never paged"
    page = slack.accepted()[0].json()
    assert page["text"].startswith("[FIRING] capacity/oom_kv_cache")
    (actions,) = [b for b in page["blocks"] if b["type"] == "actions"]
    ack = next(e for e in actions["elements"] if e["action_id"] == "ack")
    incident_id = ack["value"]

    # 2. the Slack user presses Acknowledge: Slack's signed request acknowledges it as them
    response_url = slack.url.removesuffix("/hook") + "/slack-response/T0SENT/1/abc"
    body, headers = slack_click(ack, "carol", response_url)
    r = svc.http.post("/slack/actions", content=body, headers=headers)
    assert r.status_code == 200, r.text
    assert wait_until(
        lambda: any(q.path.startswith("/slack-response/") for q in slack.accepted()),
        20,
        "the Slack message replaced",
    )
    replaced = next(q for q in slack.accepted() if q.path.startswith("/slack-response/")).json()
    assert replaced["replace_original"] is True
    assert "Acknowledged by carol" in json.dumps(replaced["blocks"])
    # a forged click (not signed with the app's secret) is refused
    forged_body, forged = slack_click(ack, "mallory", response_url)
    forged["X-Slack-Signature"] = "v0=" + "0" * 64
    assert svc.http.post("/slack/actions", content=forged_body, headers=forged).status_code == 401

    # 3. named users assign and note it
    r = svc.http.post(
        f"/incidents/{incident_id}/assign", json={"assignee": "bob"}, headers=bearer("alice")
    )
    assert r.status_code == 200 and r.json()["assignee"] == "bob"
    r = svc.http.post(
        f"/incidents/{incident_id}/notes",
        json={"text": "max-model-len 4000000 does not fit; lowering to 32768"},
        headers=bearer("bob"),
    )
    assert r.status_code == 201

    # 4. the timeline lists all of it, with who and when
    wait_until(db.settled, 30, "every notification settled")
    inc = svc.http.get(f"/incidents/{incident_id}", headers=bearer("bob")).json()
    assert inc["acknowledged_by"] == "carol" and inc["assignee"] == "bob"
    steps = [(e["by"], e["action"]) for e in inc["timeline"]]
    assert steps[:2] == [("vllm-sentinel", "opened"), ("vllm-sentinel", "paged")]
    assert steps[2:] == [("carol", "acknowledged"), ("alice", "assigned"), ("bob", "note")]
    times = [e["at"] for e in inc["timeline"]]
    assert times == sorted(times) and all(t > 0 for t in times)
    audit = svc.http.get("/audit", headers=bearer("bob")).json()
    assert [(a["actor"], a["via"], a["action"]) for a in reversed(audit)] == [
        ("carol", "slack", "ack"),
        ("alice", "user", "assign"),
        ("bob", "user", "note"),
    ]
    # the acknowledgement made from Slack is not posted to Slack a second time
    assert len([q for q in slack.accepted() if q.path == "/hook"]) == 1

    # 5. search finds it by pod
    found = svc.http.get("/incidents", params={"q": POD}, headers=bearer("bob")).json()
    assert [i["id"] for i in found["items"]] == [incident_id]
    assert svc.http.get("/incidents", params={"q": "no-such-pod"}).json()["items"] == []

    # 6. the dashboard shows the same at 390 px in dark mode
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (Debian package 'chromium')")
    from playwright.sync_api import expect, sync_playwright

    base = f"http://127.0.0.1:{svc.api_port}"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        ctx = browser.new_context(
            viewport={"width": 390, "height": 844}, is_mobile=True, color_scheme="dark"
        )
        page = ctx.new_page()
        try:
            page.goto(f"{base}/ui/login?next=/ui/incidents?q={POD}")
            page.fill("#token", USERS["alice"])
            page.click("form.login button[type=submit]")
            expect(page.locator(".who .actor")).to_have_text("alice")
            card = page.locator("tr.inc")
            expect(card).to_have_count(1)
            expect(card).to_contain_text("oom_kv_cache")
            expect(card).to_contain_text(POD)
            expect(card).to_contain_text("ack: carol")
            assert int(page.evaluate("document.documentElement.scrollWidth")) <= 390
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "3am-phone-dark-list.png"), full_page=True)
            page.locator("a.inc-link").click()
            expect(page.locator("#on-it")).to_contain_text("acknowledged by carol")
            expect(page.locator("#on-it")).to_contain_text("assigned to bob")
            timeline = page.locator("#timeline li")
            expect(timeline).to_have_count(len(steps))
            expect(timeline.nth(2)).to_contain_text("carol acknowledged")
            expect(timeline.nth(4)).to_contain_text("bob note: max-model-len 4000000")
            assert int(page.evaluate("document.documentElement.scrollWidth")) <= 390
            page.screenshot(path=str(SHOTS / "3am-phone-dark-incident.png"))  # the first screen
            page.locator("#timeline-h").scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / "3am-phone-dark-timeline.png"))
            print(f"screenshots: {SHOTS}")
        finally:
            ctx.close()
            browser.close()
