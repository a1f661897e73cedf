"""Which receivers hear about an incident: each receiver's ``match`` (see
:mod:`service.labels`) against the incident's labels (:func:`incident_labels`); without a
``severity`` matcher only critical incidents route, so warnings never page unless a receiver
asks for ``severity: [warning]``."""

from __future__ import annotations

from service.config import ReceiverSettings
from service.incidents.incident_json import IncidentBody
from service.labels import LABEL, matches, validate
from service.store.views import IncidentView


def incident_labels(body: IncidentBody) -> dict[str, str]:
    """The matchable view of an incident: the root cause's tier, category and stage, its
    severity, status, stream and id, where it ran, and its pod's labels (``label:<key>``)."""
    p = body.get("primary") or {}
    meta = body.get("meta") or {}
    view = {
        "tier": p.get("tier"),
        "category": p.get("category"),
        "stage": p.get("stage"),
        "severity": body.get("severity"),
        "status": body.get("status"),
        "namespace": meta.get("namespace"),
        "pod": meta.get("pod"),
        "node": meta.get("node"),
        "container": meta.get("container"),
        "stream": body.get("stream"),
        "incident": body.get("id"),
    }
    return _matchable(view, meta.get("labels"))


def view_labels(row: IncidentView) -> dict[str, str]:
    """:func:`incident_labels` of a stored incident row (what the API lists)."""
    meta = row.get("meta") or {}
    view = {
        "tier": row.get("tier"),
        "category": row.get("category"),
        "stage": row.get("stage"),
        "severity": row.get("severity"),
        "status": row.get("status"),
        "namespace": row.get("namespace") or meta.get("namespace"),
        "pod": row.get("pod") or meta.get("pod"),
        "node": row.get("node") or meta.get("node"),
        "container": meta.get("container"),
        "stream": row.get("stream"),
        "incident": row.get("id"),
    }
    return _matchable(view, meta.get("labels"))


def _matchable(view: dict[str, object], pod_labels: object) -> dict[str, str]:
    out = {k: str(v) for k, v in view.items() if v not in (None, "")}
    if isinstance(pod_labels, dict):
        for k, v in pod_labels.items():
            out[LABEL + str(k)] = str(v)
    return out


class Router:
    def __init__(self, receivers: list[ReceiverSettings]) -> None:
        self.receivers = list(receivers)
        self._match = {r.name: validate(r.match) if r.match else {} for r in self.receivers}

    def matches(self, receiver: ReceiverSettings, incident: IncidentBody) -> bool:
        labels = incident_labels(incident)
        m = self._match[receiver.name]
        if "severity" not in m and labels.get("severity") != "critical":
            return False
        return matches(labels, m)

    def receivers_for(self, incident: IncidentBody) -> list[ReceiverSettings]:
        return [r for r in self.receivers if self.matches(r, incident)]

    def wants(self, incident: IncidentBody, kind: str) -> bool:
        """Whether a change is worth an outbox event: an ``opened`` incident no receiver
        routes is not; later changes are whenever receivers exist (one may be engaged)."""
        if not self.receivers:
            return False
        return kind != "opened" or bool(self.receivers_for(incident))
