"""Which receivers hear about an incident: each receiver's ``match`` (see
:mod:`service.labels`) against the incident's labels (:func:`incident_labels`); without a
``severity`` matcher only critical incidents route, so warnings never page unless a receiver
asks for ``severity: [warning]``."""

from __future__ import annotations

from collections.abc import Mapping

from service.config import ReceiverSettings
from service.incidents.incident_json import IncidentBody
from service.labels import LABEL, matches, validate
from service.store.views import IncidentView


def incident_labels(body: IncidentBody) -> dict[str, str]:
    """The matchable view of an incident: the root cause's tier, category and stage, its
    severity, status, stream and id, where it ran, and its pod's labels (``label:<key>``)."""
    meta = body.get("meta") or {}
    return _matchable(_fields(body.get("primary") or {}, body, {}, meta), meta.get("labels"))


def view_labels(row: IncidentView) -> dict[str, str]:
    """:func:`incident_labels` of a stored incident row (what the API lists)."""
    meta = row.get("meta") or {}
    return _matchable(row_fields(row), meta.get("labels"))


def row_fields(row: IncidentView) -> dict[str, object]:
    """The matchable fields of a stored incident row (its columns, else its metadata)."""
    return _fields(row, row, row, row.get("meta") or {})


def _fields(
    root: Mapping[str, object],
    inc: Mapping[str, object],
    where: Mapping[str, object],
    meta: Mapping[str, object],
) -> dict[str, object]:
    """Label values: ``root`` (the root cause) says what, ``inc`` the rest, ``where`` (else
    ``meta``) where it ran."""
    return {
        "tier": root.get("tier"),
        "category": root.get("category"),
        "stage": root.get("stage"),
        "severity": inc.get("severity"),
        "status": inc.get("status"),
        "namespace": where.get("namespace") or meta.get("namespace"),
        "pod": where.get("pod") or meta.get("pod"),
        "node": where.get("node") or meta.get("node"),
        "container": meta.get("container"),
        "stream": inc.get("stream"),
        "incident": inc.get("id"),
    }


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
