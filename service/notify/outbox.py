"""Outbox stages every receiver shares: expanding an incident change into per-receiver
deliveries, naming the message a claim becomes, and the retry schedule."""

from __future__ import annotations

import random
import threading

from service.incidents.incident_json import IncidentBody
from service.notify.routing import Router
from service.store import Store
from service.store.deliveries import Claim, Hold, Route

EXPAND_BATCH = 200
NOTE_SEND_RESOLVED_OFF = "send_resolved is off for this receiver"
NOTE_NEVER_SENT = "resolution of an incident this receiver was never told about"


def expand(store: Store, route: Route, hold: Hold | None, stop: threading.Event) -> int:
    """Turn every new outbox event into deliveries (``route`` names the receivers and their
    first status, ``hold`` delays a first message), ``EXPAND_BATCH`` events per
    transaction until none are left or ``stop`` is set. Events expanded."""
    total = 0
    while not stop.is_set():
        n = store.expand_outbox(route, limit=EXPAND_BATCH, hold=hold)
        total += n
        if n < EXPAND_BATCH:
            break
    return total


def make_route(router: Router) -> Route:
    """Receivers of one change: those whose ``match`` fits the incident now, plus those
    already engaged with it (so a receiver that was paged also hears the update and the
    resolution after the root cause moved to a category it does not route)."""

    def route(
        incident: IncidentBody, kind: str, engaged: set[str]
    ) -> list[tuple[str, str, str | None]]:
        out: list[tuple[str, str, str | None]] = []
        for r in router.receivers:
            if r.name not in engaged and (
                kind == "acknowledged" or not router.matches(r, incident)
            ):
                continue  # (an acknowledgement is news only for those that paged)
            if kind == "resolved" and not r.send_resolved:
                out.append((r.name, "dropped", NOTE_SEND_RESOLVED_OFF))
            else:
                out.append((r.name, "pending", None))
        return out

    return route


def message_kind(claim: Claim) -> str | None:
    """``opened`` for the first message a receiver gets about an incident, ``resolved`` once
    the covered changes include the resolution, ``acknowledged`` when someone taking it is
    the only news, else ``updated``; None when the only news is the resolution or the
    acknowledgement of an incident the receiver never heard of (nothing to send)."""
    kinds = [e.kind for e in claim.events]
    resolved = claim.incident.get("status") == "resolved" and "resolved" in kinds
    if claim.first and all(k in ("resolved", "acknowledged") for k in kinds):
        return None
    if resolved:
        return "resolved"
    if claim.first:
        return "opened"
    return "acknowledged" if all(k == "acknowledged" for k in kinds) else "updated"


def backoff(
    attempt: int,
    base_s: float,
    max_s: float,
    rng: random.Random | None = None,
    at_least: float = 0.0,
) -> float:
    """Exponential backoff with full jitter: uniform(0, min(max, base·2^(attempt-1))),
    never less than ``at_least`` (a receiver's Retry-After)."""
    ceiling = min(max_s, base_s * 2 ** max(0, attempt - 1))
    return max(at_least, (rng or random).uniform(0, ceiling))
