"""What a receiver renders: one incident change, and the HTTP request it becomes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from service.incidents.incident import Incident
from service.incidents.incident_json import FleetExtra, IncidentBody, IncidentSummary
from service.store.deliveries import Ack

MAX_LINE_CHARS = 4096  # evidence / root-cause lines in payloads are cut to this


@dataclass(slots=True)
class Alert:
    """An incident as it is now, announced as ``event`` (opened | updated | acknowledged |
    resolved)."""

    event: str
    incident: IncidentBody
    version: int
    external_url: str = "http://127.0.0.1:8080"
    changed_at: float | None = None  # the earliest change this message covers
    ack: Ack | None = None  # who is on it (PagerDuty stops escalating, Slack says who)
    assignee: str | None = None

    @property
    def id(self) -> str:
        return str(self.incident["id"])

    @property
    def event_id(self) -> str:
        """Stable across retries of the same message (receivers deduplicate on it)."""
        return f"{self.id}.v{self.version}"

    @property
    def url(self) -> str:
        """The incident's page in the dashboard (``/ui/incidents/<id>``)."""
        return f"{self.external_url.rstrip('/')}/ui/incidents/{self.id}"

    @property
    def api_url(self) -> str:
        """The incident as JSON (``GET /incidents/<id>``)."""
        return f"{self.external_url.rstrip('/')}/incidents/{self.id}"

    def summary(self) -> IncidentSummary:
        """The incident's summary, its lines cut to ``MAX_LINE_CHARS``."""
        s = Incident.from_dict(self.incident).summary()
        s["line"] = cut(s.get("line") or "", MAX_LINE_CHARS)
        s["evidence"] = [cut(x, MAX_LINE_CHARS) for x in s.get("evidence", [])]
        for r in s.get("related", []):
            r["line"] = cut(r.get("line") or "", MAX_LINE_CHARS)
        return s

    def view(self) -> AlertView:
        """Summary plus stream, namespace/pod/node, meta, facts, timeline, version and the
        incident's URLs (``url`` its dashboard page, ``api_url`` its JSON): the API's
        incident shape, without deliveries and feedback."""
        inc = self.incident
        meta = inc.get("meta") or {}
        return {
            **self.summary(),
            "stream": inc.get("stream"),
            "namespace": meta.get("namespace"),
            "pod": meta.get("pod"),
            "node": meta.get("node"),
            "meta": meta,
            "facts": inc.get("facts") or {},
            "timeline": inc.get("timeline") or {},
            "version": self.version,
            "url": self.url,
            "api_url": self.api_url,
            "acknowledged_by": self.ack.by if self.ack else None,
            "acknowledged_at": self.ack.at if self.ack else None,
            "assignee": self.assignee,
        }


class AlertView(IncidentSummary):
    """What receivers render (:meth:`Alert.view`; the webhook's ``incident``)."""

    stream: str
    namespace: str | None
    pod: str | None
    node: str | None
    meta: dict[str, Any]
    facts: dict[str, str]
    timeline: dict[str, float]
    version: int
    url: str
    api_url: str
    acknowledged_by: str | None
    acknowledged_at: float | None
    assignee: str | None


def fleet_of(s: AlertView) -> FleetExtra | None:
    """What a fleet incident's members share (None for any other incident)."""
    return (s.get("extra") or {}).get("fleet") if s["meta"].get("fleet") else None


def where_it_ran(s: AlertView) -> str:
    """``namespace/pod`` (else the stream); for a fleet incident, how many workloads and
    what they share."""
    meta, fleet = s["meta"], fleet_of(s)
    if fleet:
        shared = f"{fleet.get('count')} workloads sharing {fleet.get('key')}={fleet.get('value')}"
        return shared + (f" in {meta['namespace']}" if meta.get("namespace") else "")
    return "/".join(x for x in (meta.get("namespace"), meta.get("pod")) if x) or s["stream"]


@dataclass(slots=True)
class HttpRequest:
    url: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def cut(text: str, limit: int) -> str:
    """``text`` shortened to at most ``limit`` characters, marked with an ellipsis."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 1)] + "…"
