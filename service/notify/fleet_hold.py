"""Fleet grouping at delivery time: hold the first message of a fleet-prone incident, then
let its fleet page instead of it (``FleetSettings``).

The first message about a critical incident of a fleet-prone category waits ``hold_s``
after the incident was stored (:meth:`FleetHold.hold`, applied when the delivery row is
created; not an attempt). When it is due, the store looks for the fleet it belongs to
(:meth:`Store.inhibit_for_fleet`): ``threshold`` or more workloads/nodes of that category
opened within ``window_s`` of it sharing a driver branch, image, node pool, NCCL version or
namespace. If there is one and the receiver is routed the fleet, the fleet incident is
committed once (with its own outbox event: it pages like any incident, through routes and
silences) and this delivery ends ``inhibited``; so do the member's later messages to a
receiver never told about it, while the fleet is open. Otherwise the incident pages on its
own.
"""

from __future__ import annotations

from service.config import FleetSettings, ReceiverSettings
from service.incidents.fleet import is_fleet
from service.incidents.incident_json import IncidentBody
from service.notify.routing import Router
from service.store import Claim, Store


class FleetHold:
    def __init__(
        self,
        settings: FleetSettings,
        store: Store,
        router: Router,
        instance_id: str,
        prone: frozenset[str],
    ) -> None:
        self.settings = settings
        self.prone_categories = prone
        self.store = store
        self.router = router
        self.instance_id = instance_id

    def prone(self, incident: IncidentBody) -> bool:
        """A critical incident of a fleet-prone category (not a fleet itself)."""
        primary = incident.get("primary") or {}
        return (
            incident.get("severity", "critical") == "critical"
            and primary.get("category") in self.prone_categories
            and not is_fleet(incident)
        )

    def hold(self, incident: IncidentBody) -> float:
        """Seconds a fleet-prone incident's first message waits for its fleet to show."""
        return self.settings.hold_s if self.prone(incident) else 0.0

    def fleet_for(self, receiver: ReceiverSettings, claim: Claim) -> str | None:
        """The fleet incident that pages ``receiver`` instead of this member (the claim's
        deliveries are then finished ``inhibited`` in the same transaction), else None."""
        return self.store.inhibit_for_fleet(
            claim.incident["id"],
            claim.delivery_ids,
            self.instance_id,
            threshold=self.settings.threshold,
            window_s=self.settings.window_s,
            covers=lambda fleet: self.router.matches(receiver, fleet),
            prone=self.prone_categories,
        )
