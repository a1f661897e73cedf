"""Receiver types → request builders (adding a receiver never touches delivery logic)."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from service.config import NotifySettings, ReceiverSettings
from service.notify import alertmanager, pagerduty, slack, webhook
from service.notify.alert import Alert, HttpRequest
from service.store import Store

Builder = Callable[[Alert, ReceiverSettings, float], HttpRequest]
BUILDERS: dict[str, Builder] = {
    "slack": slack.build,
    "webhook": webhook.build,
    "pagerduty": pagerduty.build,
    "alertmanager": alertmanager.build,
}
# (store, http client, receiver, notify settings, clock) → alerts re-posted
Resender = Callable[
    [Store, httpx.Client, ReceiverSettings, NotifySettings, Callable[[], float]], int
]
# receiver types whose open alerts must be posted again every resend_interval_s
RESENDERS: dict[str, Resender] = {"alertmanager": alertmanager.resend}


def post(http: httpx.Client, req: HttpRequest, timeout_s: float) -> httpx.Response:
    """Post one rendered request as every notification is posted (redirects: the client's
    setting, never followed)."""
    return http.post(req.url, content=req.body, headers=req.headers, timeout=timeout_s)


def builder(cfg: ReceiverSettings) -> Builder:
    try:
        return BUILDERS[cfg.type]
    except KeyError:
        raise ValueError(f"receiver {cfg.name}: unknown type {cfg.type!r}") from None


def resender(cfg: ReceiverSettings) -> Resender | None:
    return RESENDERS.get(cfg.type)


def check(receivers: list[ReceiverSettings]) -> None:
    """Configuration errors up front rather than at the first incident."""
    names = [r.name for r in receivers]
    if len(set(names)) != len(names):
        raise ValueError(f"receiver names must be unique: {names}")
    for r in receivers:
        builder(r)
        if r.type == "pagerduty" and not r.routing_key:
            raise ValueError(f"receiver {r.name}: pagerduty needs routing_key")
        if r.rate_limit_per_minute <= 0:
            raise ValueError(f"receiver {r.name}: rate_limit_per_minute must be positive")
