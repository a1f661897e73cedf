"""Pydantic models: the API's schema (OpenAPI at ``/docs``).

Response models list the fields clients rely on and allow extra ones, so the store can add
fields without breaking the API; request models forbid unknown fields so typos fail loudly.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from service.api.people_schemas import AuditRecord, TimelineItem
from service.incidents.codec import JsonObject, Number
from service.incidents.incident_json import IncidentSummary, RelatedFinding
from service.offline.report import Stopped
from service.store.views import DeliveryView, FeedbackView, FleetMember
from service.taxonomy import CATEGORIES, STAGES, TIERS

Tier = Literal[TIERS]  # type: ignore[valid-type]
Category = Literal[CATEGORIES]  # type: ignore[valid-type]
Stage = Literal[STAGES]  # type: ignore[valid-type]
Severity = Literal["critical", "warning"]
IncidentStatus = Literal["open", "resolved"]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- incidents ---------------------------------------------------------------------------
class Incident(_Open):
    """One failure of one workload: root cause first, cascades in ``related``."""

    id: str
    stream: str | None = None
    status: str
    severity: str
    tier: str
    category: str
    stage: str | None = None
    confidence: float | None = None
    method: str | None = None
    rule: str | None = None
    line: str = ""
    remediation: str | None = None
    explanation: str | None = None
    evidence: list[str] = Field(default_factory=list)
    related: list[RelatedFinding] = Field(default_factory=list)
    restarts: int = 0
    facts: dict[str, str] = Field(default_factory=dict)
    stages: dict[str, Number] = Field(
        default_factory=dict, description="stage → when the run reached it"
    )
    meta: JsonObject = Field(default_factory=dict)
    namespace: str | None = None
    pod: str | None = None
    node: str | None = None
    opened_at: float | None = None
    updated_at: float | None = None
    resolved_at: float | None = None
    resolution: str | None = None
    version: int | None = Field(None, description="grows with every change")
    fleet_id: str | None = Field(
        None, description="the fleet incident grouping this one (it paged instead)"
    )
    members: list[FleetMember] | None = Field(
        None, description="a fleet incident's member incidents (single-incident view only)"
    )
    deliveries: list[DeliveryView] | None = Field(
        None, description="notification attempts (single-incident view only)"
    )
    feedback: list[FeedbackView] | None = Field(
        None, description="feedback given (single-incident view only)"
    )
    assignee: str | None = None
    acknowledged_by: str | None = None
    acknowledged_at: float | None = None
    notes: list[AuditRecord] | None = Field(None, description="single-incident view only")
    timeline: list[TimelineItem] | None = Field(
        None,
        description="opened, each page, acknowledged, assigned, notes, silenced, resolved: "
        "when, by whom (single-incident view only)",
    )


class IncidentPage(BaseModel):
    items: list[Incident]
    next_cursor: str | None = Field(None, description="pass as ?cursor= for the next page")
    count: int


class ResolveRequest(_Strict):
    reason: str = Field(..., min_length=1, max_length=2000, examples=["driver upgraded"])


class FeedbackRequest(_Strict):
    correct: bool = Field(..., description="was the classification right?")
    category: Category | None = Field(None, description="the right category when it was not")
    comment: str | None = Field(None, max_length=4000)


class Feedback(_Open):
    id: int
    incident_id: str
    correct: bool
    category: str | None = None
    comment: str | None = None
    created_at: float | None = None


class QuarantinedRecord(_Open):
    """A record whose classification raised, kept for inspection."""

    id: int
    source: str
    stream: str
    position: str | None = None
    reason: str
    error: str
    text: str = Field(..., description="its first 65,536 characters")
    length: int = Field(..., description="characters of the whole record")
    created_at: float


# ---- streams and stats -------------------------------------------------------------------
class Stream(_Open):
    """A workload stream's state: status, the stage reached, its timeline and facts."""

    stream: str
    status: str | None = None
    stage: str | None = None
    timeline: dict[str, Number] = Field(default_factory=dict)
    facts: dict[str, str] = Field(default_factory=dict)
    meta: JsonObject = Field(default_factory=dict)
    run: int = 0
    runs_failed: int = 0
    lines: int = 0
    last_line: str = ""
    last_time: float | None = None
    updated_at: float | None = None
    open_incidents: list[str] = Field(default_factory=list)


class Stats(_Open):
    """Counts from the store."""

    incidents_total: int = 0
    incidents_open: int = 0
    incidents_by_status: dict[str, int] = Field(default_factory=dict)
    incidents_by_tier: dict[str, int] = Field(default_factory=dict)
    incidents_by_category: dict[str, int] = Field(default_factory=dict)
    incidents_by_severity: dict[str, int] = Field(default_factory=dict)
    deliveries_by_status: dict[str, int] = Field(default_factory=dict)
    outbox_pending: int = 0
    streams: int = 0


# ---- classify and ingest -----------------------------------------------------------------
class ClassifyRequest(_Strict):
    log: str = Field(..., description="the whole log as pasted (raw, Docker json-file or CRI)")
    format: Literal["auto", "raw", "docker", "cri", "fluent"] = "auto"
    stream: str | None = Field(
        None, max_length=500, description="stream name when the envelope names none"
    )


class StreamReport(_Open):
    """The per-stream report of ``vllm-sentinel classify --json``."""

    stream: str
    status: str
    stage: str | None = None
    incidents: list[IncidentSummary]
    facts: dict[str, str]
    timeline: dict[str, Number]
    meta: JsonObject
    lines: int
    stopped: Stopped | None = Field(
        None,
        description="the log ends mid-startup: the stage it stopped in, since when, "
        "seconds without progress and that stage's stall deadline",
    )


class ClassifyResponse(BaseModel):
    reports: list[StreamReport]
    primary: IncidentSummary | None = Field(
        None, description="the first critical incident of the first stream (root cause), if any"
    )


class IngestResult(BaseModel):
    accepted: int
    rejected: int
    # without a tag, lines that named no sender were keyed by the client's address: why
    # and what to send (absent when there is nothing to say)
    warning: str | None = None


# ---- health ------------------------------------------------------------------------------
class Health(BaseModel):
    status: Literal["ok"] = "ok"
    service: Literal["vllm-sentinel"] = "vllm-sentinel"  # check-config --probe knows it by this
    instance_id: str
    uptime_s: float


class KafkaCheck(TypedDict):
    running: bool
    assigned: list[str]  # topic:partition


class Checks(TypedDict, total=False):
    """``/readyz`` ``checks``: what readiness looked at."""

    started: bool
    store: bool
    store_error: str
    store_schema_recreated_at: float  # the database came back empty (informational)
    kafka: KafkaCheck  # informational: a replica without partitions is still ready


class Readiness(BaseModel):
    ready: bool
    checks: Checks
