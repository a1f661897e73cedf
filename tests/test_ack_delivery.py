"""An acknowledgement goes through the durable outbox (issue #28): PagerDuty gets its
``acknowledge`` event for the same ``dedup_key`` (escalation stops; later updates keep it
acknowledged), Slack says who took it, and an acknowledgement made from Slack itself is not posted there again (that message was
updated in place). Real receivers, SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from service.store import Store
from service.store.people import Who
from tests.delivery_support import incident_body, write_change
from tests.receiver import Receiver
from tests.test_delivery_guarantees import hook, make, pagerduty
from tests.test_notify_dispatcher import all_settled, wait_until

pytest_plugins = ("tests.test_store",)  # db_url / store fixtures


@pytest.fixture
def rx() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def by_path(rx: Receiver, path: str) -> list[dict[str, Any]]:
    return [r.json() for r in rx.accepted() if r.path == path]


def test_acknowledge_reaches_pagerduty_and_slack_once(store: Store, rx: Receiver) -> None:
    d = make(store, [pagerduty(rx), hook(rx, "slack", type="slack")])
    d.start()
    try:
        body = incident_body(0, prefix="a", namespace="prod")
        write_change(store, body, "opened")
        d.wake()
        assert wait_until(lambda: len(rx.accepted()) == 2)
        store.acknowledge(body["id"], Who("alice", "user"))
        store.acknowledge(body["id"], Who("bob", "user"))  # once is enough
        d.wake()
        assert wait_until(lambda: len(rx.accepted()) == 4 and all_settled(store))
        pd = by_path(rx, "/pd")
        assert [e["event_action"] for e in pd] == ["trigger", "acknowledge"]
        assert pd[0]["dedup_key"] == pd[1]["dedup_key"] == body["id"]
        slack = by_path(rx, "/slack")
        assert slack[1]["text"].startswith("[ACKNOWLEDGED by alice]")
        # a later change keeps PagerDuty's alert acknowledged, then resolves it
        write_change(store, body, "updated")
        write_change(store, {**body, "status": "resolved"}, "resolved")
        d.wake()
        assert wait_until(lambda: all_settled(store) and len(by_path(rx, "/pd")) >= 3)
        assert [e["event_action"] for e in by_path(rx, "/pd")][2:] in (
            ["resolve"],
            ["acknowledge", "resolve"],
        )
        timeline = store.get_incident(body["id"])["timeline"]  # type: ignore[index]
        told = [(e["action"], e["detail"]) for e in timeline if e["action"] == "told"]
        assert ("told", "pd (acknowledged)") in told
    finally:
        d.stop()


def test_slack_is_not_told_what_it_was_clicked_in(store: Store, rx: Receiver) -> None:
    d = make(store, [hook(rx, "slack", type="slack"), hook(rx)])
    d.start()
    try:
        body = incident_body(2, prefix="c", namespace="prod")
        write_change(store, body, "opened")
        d.wake()
        assert wait_until(lambda: len(rx.accepted()) == 2)
        store.acknowledge(body["id"], Who("alice", "slack"))
        d.wake()
        assert wait_until(lambda: len(rx.accepted()) == 3 and all_settled(store))
        assert len(by_path(rx, "/slack")) == 1
        (ack,) = [m for m in by_path(rx, "/hook") if m["event"] == "acknowledged"]
        assert ack["incident"]["acknowledged_by"] == "alice"
    finally:
        d.stop()
