"""Generic JSON webhook, signed with HMAC-SHA256.

Body: ``{version, event, event_id, incident, sent_at}`` (``incident`` = summary + stream,
meta, facts, timeline, version, url). Headers: ``X-Sentinel-Event`` (opened | updated |
resolved), ``X-Sentinel-Event-Id`` (stable across retries: deduplicate on it),
``X-Sentinel-Timestamp`` (epoch seconds) and, with a secret,
``X-Sentinel-Signature: sha256=<hex HMAC-SHA256(secret, timestamp + "." + body)>``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time

from service.config import ReceiverSettings
from service.notify.alert import Alert, HttpRequest

SCHEMA_VERSION = 1
USER_AGENT = "vllm-sentinel"


def sign(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify_signature(
    secret: str,
    timestamp: str,
    body: bytes,
    header: str | None,
    *,
    max_age_s: float | None = None,
    now: float | None = None,
) -> bool:
    """Whether ``header`` signs ``timestamp`` + body with ``secret`` (constant-time);
    with ``max_age_s`` the timestamp must also be that recent (replay protection)."""
    if not header or not header.startswith("sha256="):
        return False
    if max_age_s is not None:
        try:
            age = (time.time() if now is None else now) - float(timestamp)
        except ValueError:
            return False
        if abs(age) > max_age_s:
            return False
    return hmac.compare_digest(sign(secret, timestamp, body), header)


def build(alert: Alert, cfg: ReceiverSettings, now: float) -> HttpRequest:
    body = json.dumps(
        {
            "version": SCHEMA_VERSION,
            "event": alert.event,
            "event_id": alert.event_id,
            "incident": alert.view(),
            "sent_at": now,
        },
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    ).encode()
    timestamp = str(int(now))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Sentinel-Event": alert.event,
        "X-Sentinel-Event-Id": alert.event_id,
        "X-Sentinel-Timestamp": timestamp,
    }
    if cfg.secret:
        headers["X-Sentinel-Signature"] = sign(cfg.secret, timestamp, body)
    return HttpRequest(cfg.url, body, headers)
