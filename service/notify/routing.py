"""Which receivers hear about an incident: each receiver's ``match`` (see
:mod:`service.labels`); without a ``severity`` matcher only critical incidents
route, so warnings never page unless a receiver asks for ``severity: [warning]``."""

from __future__ import annotations

from typing import Any

from service.config import ReceiverSettings
from service.labels import incident_labels, matches, validate


class Router:
    def __init__(self, receivers: list[ReceiverSettings]) -> None:
        self.receivers = list(receivers)
        self._match = {r.name: validate(r.match) if r.match else {} for r in self.receivers}

    def matches(self, receiver: ReceiverSettings, incident: dict[str, Any]) -> bool:
        labels = incident_labels(incident)
        m = self._match[receiver.name]
        if "severity" not in m and labels.get("severity") != "critical":
            return False
        return matches(labels, m)

    def receivers_for(self, incident: dict[str, Any]) -> list[ReceiverSettings]:
        return [r for r in self.receivers if self.matches(r, incident)]

    def wants(self, incident: dict[str, Any], kind: str) -> bool:
        """Whether a change is worth an outbox event: an ``opened`` incident no receiver
        routes is not; later changes are whenever receivers exist (one may be engaged)."""
        if not self.receivers:
            return False
        return kind != "opened" or bool(self.receivers_for(incident))
