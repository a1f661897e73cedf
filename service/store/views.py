"""What the store's read side returns (TypedDicts: plain dicts at run time, the JSON the API
serves and the dashboard renders).

An incident is read as its summary (:class:`~service.incidents.incident_json.IncidentSummary`)
plus what the API shows beside it (:class:`IncidentView`); one incident by id also carries
its deliveries, feedback and, for a fleet, its members (:class:`IncidentDetail`). The API's
response models (:mod:`service.api.schemas`) list the same fields.
"""

from __future__ import annotations

from typing_extensions import TypedDict

from service.incidents.codec import JsonObject
from service.incidents.incident_json import IncidentSummary


class IncidentView(IncidentSummary):
    """An incident row: the summary of its body, its columns and what the body knows of
    the stream. ``opened_at``: the root-cause line's log time, else when it was stored."""

    stream: str
    namespace: str | None
    pod: str | None
    node: str | None
    updated_at: float | None
    version: int
    meta: JsonObject
    facts: dict[str, str]
    stages: dict[str, float]  # stage → when the run reached it (its ladder)
    fleet_id: str | None
    assignee: str | None
    acknowledged_by: str | None
    acknowledged_at: float | None


class DeliveryView(TypedDict):
    """One notification of one incident version to one receiver."""

    receiver: str
    version: int
    kind: str
    status: str
    attempts: int
    sent_at: float | None
    next_attempt_at: float
    last_error: str | None


class FleetMember(TypedDict):
    """A member incident of a fleet incident."""

    id: str
    stream: str
    status: str
    namespace: str | None
    pod: str | None
    node: str | None
    opened_at: float | None


class FeedbackView(TypedDict):
    """Whether a classification was right, as someone said."""

    id: int
    incident_id: str
    correct: bool
    category: str | None
    comment: str | None
    created_at: float


class FeedbackReview(FeedbackView):
    """Feedback beside what the classifier said (for review and retraining)."""

    incident_tier: str
    incident_category: str
    line: str | None


class AuditEntry(TypedDict):
    """One write a person made (``GET /audit``), never changed afterwards."""

    id: int
    at: float
    actor: str
    via: str  # user | token | read_token | proxy | slack | open | service
    action: str  # ack | assign | note | resolve | feedback | silence.create | ...
    target_kind: str  # incident | silence
    target_id: str
    detail: JsonObject


class TimelineEntry(TypedDict):
    """One moment of an incident's life, oldest first: opened, paged, acknowledged, assigned,
    noted, silenced, resolved ... with who did it."""

    at: float
    by: str
    action: str
    detail: str | None


class IncidentDetail(IncidentView):
    """One incident by id: its deliveries and feedback; a fleet incident's members; who
    acknowledged it and when, its assignee, and its timeline."""

    deliveries: list[DeliveryView]
    members: list[FleetMember] | None  # None: not a fleet incident
    feedback: list[FeedbackView]
    notes: list[AuditEntry]
    timeline: list[TimelineEntry]


class FleetView(IncidentView):
    """A fleet incident with its member incidents."""

    members: list[FleetMember]


class StreamView(TypedDict):
    """A stream's saved state as the API shows it."""

    stream: str
    status: str | None
    stage: str | None
    timeline: dict[str, float]
    facts: dict[str, str]
    meta: JsonObject
    run: int
    runs_failed: int
    lines: int
    last_line: str
    last_time: float | None
    updated_at: float
    open_incidents: list[str]


class StoreStats(TypedDict):
    """Counts (``GET /stats``)."""

    incidents_total: int
    incidents_open: int
    incidents_by_status: dict[str, int]
    incidents_by_tier: dict[str, int]
    incidents_by_category: dict[str, int]
    incidents_by_severity: dict[str, int]
    deliveries_by_status: dict[str, int]
    outbox_pending: int
    streams: int


class SilenceView(TypedDict):
    """A silence and whether it is in force now."""

    id: str
    matchers: dict[str, list[str]]
    starts_at: float
    ends_at: float
    created_by: str
    comment: str
    created_at: float
    active: bool


class QuarantineRow(TypedDict):
    """A quarantined record (``GET /quarantine``)."""

    id: int
    source: str
    stream: str
    position: str | None
    reason: str
    error: str
    text: str
    length: int
    created_at: float
