"""The incident pages: the list (``/ui/`` and ``/ui/incidents``: filters, time range, counts,
pages of 50, a fragment the list's script refreshes), one incident's page, and the fleets.

The list takes the filters of ``GET /incidents`` (an unknown value is dropped and said so)
plus a time range (``range`` = last hour ... 30 days, or ``since``/``until`` instants); a
cursor that no longer exists falls back to the newest page.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from service.api.deps import get_ctx
from service.api.timespec import parse_duration, parse_instant
from service.notify.silences import silencing
from service.store.views import DeliveryView
from service.taxonomy import CATEGORIES, CATEGORY_TIER, STAGE_INDEX, STAGES, TIERS
from service.ui import data, present
from service.ui.page import denied_read, form_bool, poll_s, render, store

router = APIRouter()

PAGE_SIZE = 50
RANGES = (
    ("", "any time"),
    ("1h", "last hour"),
    ("6h", "last 6 hours"),
    ("24h", "last 24 hours"),
    ("7d", "last 7 days"),
    ("30d", "last 30 days"),
)
CHOICES = (
    ("tier", TIERS),
    ("category", CATEGORIES),
    ("stage", STAGES),
    ("status", ("open", "resolved")),
    ("severity", ("critical", "warning")),
)


@dataclass(slots=True)
class TimeFilter:
    """The list's time range as the form shows it, and as epoch seconds."""

    range: str = ""  # one of RANGES' keys
    since: str = ""
    until: str = ""
    since_t: float | None = None
    until_t: float | None = None

    def query(self) -> dict[str, str]:
        """The form fields that are set (for links that keep them)."""
        return {
            k: v
            for k, v in (("range", self.range), ("since", self.since), ("until", self.until))
            if v
        }


@dataclass(slots=True)
class ListQuery:
    filters: dict[str, str | None]  # data.FILTERS' names → value (None: no filter)
    times: TimeFilter
    error: str | None  # what was wrong with the query (and dropped)


def list_query(request: Request) -> ListQuery:
    q = request.query_params
    filters = {name: (q.get(name) or "").strip() or None for name in data.FILTERS}
    errors = []
    for name, allowed in CHOICES:
        if filters[name] and filters[name] not in allowed:
            errors.append(f"unknown {name} {filters[name]!r}")
            filters[name] = None
    now = time.time()
    rng = q.get("range") or ""
    since = until = None
    try:
        if rng:
            since = now - parse_duration(rng)
        if q.get("since"):
            since = parse_instant(q["since"])
        if q.get("until"):
            until = parse_instant(q["until"])
    except ValueError as exc:
        errors.append(str(exc))
    times = TimeFilter(
        range=rng if rng in dict(RANGES) else "",
        since=q.get("since") or "",
        until=q.get("until") or "",
        since_t=since,
        until_t=until,
    )
    return ListQuery(filters, times, "; ".join(errors) or None)


def with_filter(query: dict[str, str]) -> Callable[..., str]:
    """For the template: the list's query string with some filters changed (None drops)."""

    def link(**changes: str | None) -> str:
        q = dict(query)
        for k, v in changes.items():
            if v is None:
                q.pop(k, None)
            else:
                q[k] = v
        return "?" + urlencode(q) if q else "?"

    return link


def incident_list(request: Request) -> Response:
    denied = denied_read(request)
    if denied:
        return denied
    db = store(request)
    lq = list_query(request)
    filters, times, error = lq.filters, lq.times, lq.error
    cursor = request.query_params.get("cursor") or None
    try:
        items, nxt = data.list_incidents(
            db, filters, since=times.since_t, until=times.until_t, limit=PAGE_SIZE, cursor=cursor
        )
    except ValueError:
        items, nxt, error = [], None, "that page no longer exists; showing the newest"
        items, nxt = data.list_incidents(
            db, filters, since=times.since_t, until=times.until_t, limit=PAGE_SIZE, cursor=None
        )
    counts = data.incident_counts(db, filters, since=times.since_t, until=times.until_t)
    silenced = silencing(db.list_silences(active_only=True), items, time.time())
    active = {k: v for k, v in filters.items() if v}
    query = {**active, **times.query()}
    if request.query_params.get("poll"):
        query["poll"] = str(poll_s(request))
    fragment = form_bool(request.query_params.get("fragment"), "fragment")
    return render(
        request,
        "_results.html" if fragment else "incidents.html",
        nav="incidents",
        title="Incidents",
        items=items,
        silenced=silenced,
        next_cursor=nxt,
        counts=counts,
        filters=filters,
        active=active,
        times=times,
        error=error,
        ranges=RANGES,
        tiers=TIERS,
        categories=CATEGORIES,
        stages=STAGES,
        category_tier=CATEGORY_TIER,
        namespaces=data.namespaces(db),
        query=query,
        cursor=cursor,
        query_string=urlencode(query),
        with_filter=with_filter(query),
    )


@router.get("/", response_class=HTMLResponse)
def home(request: Request) -> Response:
    return incident_list(request)


@router.get("/incidents", response_class=HTMLResponse)
def incidents_page(request: Request) -> Response:
    return incident_list(request)


@router.get("/incidents/{incident_id}", response_class=HTMLResponse)
def incident_page(request: Request, incident_id: str) -> Response:
    denied = denied_read(request)
    if denied:
        return denied
    db = store(request)
    inc = db.get_incident(incident_id)
    if inc is None:
        return render(
            request,
            "missing.html",
            status_code=404,
            nav="incidents",
            title="Incident not found",
            what=f"incident {incident_id}",
        )
    extra = inc.get("extra") or {}
    deliveries: dict[str, list[DeliveryView]] = {}
    for d in inc.get("deliveries") or []:
        deliveries.setdefault(d["receiver"], []).append(d)
    fleet_id = inc.get("fleet_id")
    fleet = db.get_incident(fleet_id) if fleet_id else None
    hold_s = get_ctx(request).settings.fleet.hold_s
    run = present.failing_run(extra)  # a crash loop: the ladder is its latest failed start
    held_until = present.held_until(inc.get("deliveries") or [], time.time()) if hold_s else None
    return render(
        request,
        "incident.html",
        nav="incidents",
        title=f"{inc['category']} at {inc.get('stage')}",
        inc=inc,
        extra=extra,
        playbook=extra.get("playbook") or {},
        ladder=present.ladder(
            {
                "stage": inc["stage"],
                "status": inc["status"],
                "timeline": present.one_run(inc["stages"], run),
            }
        ),
        run=run,
        stage_index=STAGE_INDEX,
        facts=present.facts_rows(inc.get("facts") or {}, inc.get("meta")),
        changed=extra.get("changed_since_last_good") or {},
        deliveries=deliveries,
        fleet=fleet,
        categories=CATEGORIES,
        silence=present.silence_candidates(inc),
        durations=present.DURATIONS,
        members=inc.get("members") or [],
        held_until=held_until,
        hold_s=hold_s,
        silenced_by=silencing(db.list_silences(active_only=True), [inc], time.time()).get(
            inc["id"]
        ),
    )


@router.get("/fleets", response_class=HTMLResponse)
def fleets_page(request: Request) -> Response:
    denied = denied_read(request)
    if denied:
        return denied
    status = request.query_params.get("status") or None
    if status not in (None, "open", "resolved"):
        status = None
    fleets = data.list_fleets(store(request), status)
    return render(
        request, "fleets.html", nav="fleets", title="Fleets", fleets=fleets, status=status
    )
