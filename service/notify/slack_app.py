"""A Slack app's buttons on an incident's message (:func:`service.notify.slack.buttons`):
verify Slack's request, act as the Slack user who clicked, and say so in the message.

* Verification is Slack's own scheme: ``X-Slack-Signature`` is ``v0=`` + the hex HMAC-SHA256
  of ``v0:<X-Slack-Request-Timestamp>:<raw body>`` under the app's signing secret, compared
  in constant time; a timestamp further than ``max_age_s`` from now is refused (a replay).
* The body is ``payload=<JSON>`` (form-encoded); a ``block_actions`` payload names the user
  (``user.username``, else ``user.name``, else ``user.id``), the button (``action_id``, its
  ``value`` the incident id) and a ``response_url`` where the message can be replaced.
* ``ack`` acknowledges the incident as that user (audit ``via`` ``slack``), ``silence_4h``
  silences that incident for four hours, ``open`` is a link (nothing to do).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import httpx

from service.config import SlackAppSettings
from service.incidents.codec import JsonObject
from service.netguard import is_loopback
from service.notify import slack
from service.notify.alert import Alert
from service.store import Store
from service.store.deliveries import Ack
from service.store.people import Who

log = logging.getLogger("vllm_sentinel.notify")
SILENCE_S = 4 * 3600
MAX_NAME = 100


class SlackRefused(ValueError):
    """Not a request Slack signed for this app (or too old, or not one we understand)."""


def verify(
    cfg: SlackAppSettings, timestamp: str | None, signature: str | None, body: bytes, now: float
) -> None:
    """:class:`SlackRefused` unless ``signature`` is Slack's ``v0`` signature of ``body``
    made at ``timestamp`` (seconds) within ``max_age_s`` of ``now``."""
    if cfg.signing_secret is None or not timestamp or not signature:
        raise SlackRefused("missing signature")
    try:
        ts = int(timestamp)
    except ValueError:
        raise SlackRefused("bad timestamp") from None
    if abs(now - ts) > cfg.max_age_s:
        raise SlackRefused("request too old")
    base = b"v0:" + timestamp.encode() + b":" + body
    expected = "v0=" + hmac.new(cfg.signing_secret.encode(), base, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise SlackRefused("bad signature")


@dataclass(frozen=True, slots=True)
class Click:
    """One button a Slack user pressed."""

    user: Who
    action: str
    incident_id: str
    response_url: str | None


def parse(body: bytes) -> Click | None:
    """The button of a ``block_actions`` payload (None: another kind of interaction)."""
    try:
        form = parse_qs(body.decode("utf-8"), max_num_fields=10)
        payload = json.loads(form["payload"][0])
    except (UnicodeDecodeError, KeyError, IndexError, ValueError):
        raise SlackRefused("no payload") from None
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        return None
    user = payload.get("user") or {}
    actions = payload.get("actions") or []
    if not isinstance(user, dict) or not actions or not isinstance(actions[0], dict):
        raise SlackRefused("no user or action")
    name = str(user.get("username") or user.get("name") or user.get("id") or "").strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise SlackRefused("no user name")
    act = actions[0]
    url = payload.get("response_url")
    return Click(
        Who(name, "slack"),
        str(act.get("action_id") or ""),
        str(act.get("value") or "")[:64],
        url if isinstance(url, str) else None,
    )


def act(store: Store, click: Click, now: float) -> str | None:
    """Do what the button says as its user; the line the message gains (None: nothing
    done, e.g. an unknown incident or the Open link)."""
    if click.action == slack.ACK_ACTION:
        inc = store.acknowledge(click.incident_id, click.user)
        return None if inc is None else f"Acknowledged by {inc['acknowledged_by']}"
    if click.action == slack.SILENCE_ACTION:
        if store.get_incident(click.incident_id) is None:
            return None
        store.create_silence(
            {"incident": [click.incident_id]},
            now + SILENCE_S,
            click.user,
            "silenced for 4 h from Slack",
            incident_id=click.incident_id,
        )
        return f"Silenced for 4 h by {click.user.name}"
    return None


def allowed_url(cfg: SlackAppSettings, url: str | None) -> bool:
    """A ``response_url`` on one of ``response_url_hosts`` (HTTPS; plain HTTP only on
    loopback, for a local test)."""
    if not url:
        return False
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host not in cfg.response_url_hosts:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and is_loopback(host))


def update_message(
    store: Store,
    cfg: SlackAppSettings,
    click: Click,
    said: str,
    external_url: str,
    http: httpx.Client | None = None,
) -> bool:
    """Replace the clicked message with the incident as it is now plus ``said`` (Slack's
    ``response_url``); False when there is no allowed URL or Slack refused."""
    if not allowed_url(cfg, click.response_url):
        log.warning("slack: response_url not on notify.slack.response_url_hosts; not updated")
        return False
    found = store.incidents_by_id([click.incident_id])
    detail = store.get_incident(click.incident_id)
    if not found or detail is None:
        return False
    ack = (
        Ack(detail["acknowledged_by"], float(detail["acknowledged_at"]), "slack")
        if detail["acknowledged_by"] and detail["acknowledged_at"] is not None
        else None
    )
    event = "acknowledged" if click.action == slack.ACK_ACTION else "updated"
    alert = Alert(event, found[0], detail["version"], external_url, ack=ack)
    alert.assignee = detail["assignee"]
    body: JsonObject = {**slack.message(alert, note=said), "replace_original": True}
    client = http or httpx.Client(timeout=5.0)
    try:
        assert click.response_url is not None  # (allowed_url)
        r = client.post(click.response_url, json=body)
        return 200 <= r.status_code < 300
    except httpx.HTTPError as exc:
        log.warning("slack: could not update the message: %s", exc)
        return False
    finally:
        if http is None:
            client.close()
