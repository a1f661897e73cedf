"""A test notification to one receiver: is the wiring right before the first real page?

A clearly marked test alert (event ``test``; its incident's root-cause line says it is a
test and who sent it) goes through the receiver's own builder (:mod:`.receivers`) and is
posted as the dispatcher posts (:func:`~.receivers.post`, shared with :mod:`.sender`), with the same
headers (``X-Sentinel-Event-Id``, ``Idempotency-Key``) and ``X-Sentinel-Test: true``. Nothing
is stored; the receiver's answer is reported (:class:`TrialAnswer`). Used by
``vllm-sentinel notify-test RECEIVER`` and the dashboard's receivers page (the API's
``POST /receivers/{name}/test``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TypedDict
from urllib.parse import urlsplit

import httpx

from service.config import NotifySettings, ReceiverSettings
from service.incidents.codec import Record
from service.incidents.finding import Finding
from service.incidents.incident import Incident
from service.notify.alert import Alert
from service.notify.receivers import builder, post

EVENT = "test"
STREAM = "vllm-sentinel/test-notification"
ANSWER_CHARS = 300  # of the receiver's answer shown back


class TrialView(TypedDict):
    """:class:`TrialAnswer` as JSON."""

    receiver: str
    type: str
    host: str
    ok: bool
    status: int | None
    answer: str
    error: str | None
    event_id: str


@dataclass(frozen=True, slots=True)
class TrialAnswer(Record[TrialView]):
    """What the receiver said: ``ok`` on a 2xx; ``status`` and the start of its ``answer``,
    or the ``error`` when there was no answer. ``host``: where it went (never the URL, which
    may hold a token)."""

    receiver: str
    type: str
    host: str
    ok: bool
    status: int | None
    answer: str
    error: str | None
    event_id: str

    def line(self) -> str:
        """One line for a person."""
        where = f"{self.receiver} ({self.type}, {self.host})"
        if self.status is None:
            return f"{where}: test alert not delivered: {self.error}"
        said = f": {self.answer}" if self.answer else ""
        verdict = "delivered" if self.ok else "refused"
        return f"{where}: test alert {verdict}, the receiver answered HTTP {self.status}{said}"


def trial_alert(by: str, settings: NotifySettings, now: float) -> Alert:
    """The test alert: a warning-level incident of its own stream whose line says it is a
    test, from whom."""
    line = (
        f"TEST NOTIFICATION from vllm-sentinel, sent by {by}: no workload failed; "
        "this checks that alerts reach this receiver."
    )
    primary = Finding(
        tier="other",
        category="unknown",
        stage="container",
        confidence=1.0,
        method="test",
        rule=None,
        line=line,
        time=now,
        remediation="Nothing to do: this is a test notification.",
    )
    inc = Incident(
        id=f"test-{int(now * 1000)}",
        stream=STREAM,
        run=0,
        primary=primary,
        severity="warning",
        opened_at=now,
        updated_at=now,
        meta={"test": True},
        explanation="A test notification (vllm-sentinel notify-test, or the dashboard).",
    )
    return Alert(EVENT, inc.to_dict(), 1, settings.external_url, now)


def send_trial(
    receiver: ReceiverSettings,
    settings: NotifySettings,
    by: str,
    *,
    http: httpx.Client | None = None,
    clock: float | None = None,
) -> TrialAnswer:
    """Render the test alert with ``receiver``'s builder, post it, report the answer."""
    now = time.time() if clock is None else clock
    alert = trial_alert(by, settings, now)
    req = builder(receiver)(alert, receiver, now)
    req.headers.setdefault("X-Sentinel-Event-Id", alert.event_id)
    req.headers.setdefault("Idempotency-Key", alert.event_id)
    req.headers["X-Sentinel-Test"] = "true"
    host = urlsplit(req.url).netloc.rpartition("@")[2]
    client = http or httpx.Client(follow_redirects=False)
    try:
        resp = post(client, req, receiver.timeout_s)
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"[:500]
        return TrialAnswer(
            receiver.name, receiver.type, host, False, None, "", error, alert.event_id
        )
    finally:
        if http is None:
            client.close()
    text = " ".join(resp.text.split())[:ANSWER_CHARS]
    ok = 200 <= resp.status_code < 300
    return TrialAnswer(
        receiver.name, receiver.type, host, ok, resp.status_code, text, None, alert.event_id
    )
