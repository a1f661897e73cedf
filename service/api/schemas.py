"""Pydantic models: the API's schema (OpenAPI at ``/docs``).

Response models list the fields clients rely on and allow extra ones, so the store can add
fields without breaking the API; request models forbid unknown fields so typos fail loudly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from typing_extensions import TypedDict

from service import labels
from service.api.timespec import parse_duration, parse_instant
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

MATCHER_KEYS = tuple(sorted(labels.FIELDS))
_MATCHER_VALUES: dict[str, tuple[str, ...]] = {
    "tier": TIERS,
    "category": CATEGORIES,
    "stage": STAGES,
    "severity": ("critical", "warning"),
    "status": ("open", "resolved"),
}


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
    timeline: dict[str, Number] = Field(default_factory=dict)
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


# ---- silences ----------------------------------------------------------------------------
def validate_matchers(matchers: dict[str, list[str] | str]) -> dict[str, list[str]]:
    """The notifier's own normalisation (:func:`service.labels.validate`), plus:
    no empty values, and values of taxonomy fields must be known ids or globs that match one
    (a typo like ``oom_kvcache`` would otherwise silence nothing, silently)."""
    if not matchers:
        raise ValueError("at least one matcher is required (a silence must not mute everything)")
    out = labels.validate(matchers)
    for key, values in out.items():
        values = [v.strip() for v in values]
        if any(not v for v in values):
            raise ValueError(f"matcher {key!r}: values must be non-empty")
        allowed = _MATCHER_VALUES.get(key)
        if allowed:
            bad = [v for v in values if not any(fnmatchcase(a, v) for a in allowed)]
            if bad:
                raise ValueError(
                    f"matcher {key!r}: unknown value(s) {bad}; "
                    f"expected one of {list(allowed)} (globs allowed)"
                )
        out[key] = values
    return out


class SilenceRequest(_Strict):
    """Mute notifications for incidents matching every matcher (values of one key are ORed)
    until ``ends_at`` or for ``duration``; incidents are still recorded."""

    matchers: dict[str, list[str] | str] = Field(
        ...,
        examples=[{"namespace": ["llm-prod"], "category": ["oom_*"]}],
        description="field → values (exact or shell glob); fields: tier, category, stage, "
        "severity, status, namespace, pod, node, container, stream, incident, "
        "receiver, label:<pod label>",
    )
    ends_at: float | str | None = Field(None, description="epoch seconds or ISO 8601")
    duration: str | None = Field(None, examples=["2h"], description="e.g. 30m, 2h, 1d")
    starts_at: float | str | None = Field(None, description="default: now")
    created_by: str = Field("api", min_length=1, max_length=200)
    comment: str = Field(..., min_length=1, max_length=2000, description="why it is silenced")
    cluster_wide: bool = Field(
        False,
        description="must be true when the matchers do not pin one namespace (one exact "
        "namespace, stream or incident): the silence then mutes matching incidents in every "
        "namespace. POST /silences/preview shows what it would hide.",
    )

    @field_validator("matchers")
    @classmethod
    def _matchers(cls, v: dict[str, list[str] | str]) -> dict[str, list[str]]:
        return validate_matchers(v)

    @model_validator(mode="after")
    def _times(self) -> SilenceRequest:
        now = time.time()
        if (self.ends_at is None) == (self.duration is None):
            raise ValueError("give exactly one of ends_at or duration")
        starts = parse_instant(self.starts_at) if self.starts_at is not None else None
        if self.duration is not None:
            ends = (starts if starts is not None and starts > now else now) + parse_duration(
                self.duration
            )
        else:
            ends = parse_instant(self.ends_at)  # type: ignore[arg-type]
        if ends <= now:
            raise ValueError("ends_at must be in the future")
        if starts is not None and starts >= ends:
            raise ValueError("starts_at must be before ends_at")
        self.starts_at = starts
        self.ends_at = ends
        self.duration = None
        return self

    @model_validator(mode="after")
    def _scope(self) -> SilenceRequest:
        matchers = cast(dict[str, list[str]], self.matchers)
        if not self.cluster_wide and not labels.pins_one_namespace(matchers):
            raise ValueError(
                "these matchers reach incidents in every namespace: add one namespace "
                "(or stream / incident), or set cluster_wide to mute them cluster-wide "
                "(POST /silences/preview shows what it would hide)"
            )
        return self

    def resolved(self) -> NewSilence:
        """The silence in the store's terms, as validation left it: every matcher value a
        list, ``ends_at`` (and ``starts_at`` when given) epoch seconds."""
        return NewSilence(
            matchers=cast(dict[str, list[str]], self.matchers),
            ends_at=float(cast(float, self.ends_at)),
            starts_at=cast(float | None, self.starts_at),
            created_by=self.created_by,
            comment=self.comment,
        )


@dataclass(frozen=True, slots=True)
class NewSilence:
    """A validated :class:`SilenceRequest`: what :meth:`Store.create_silence` takes."""

    matchers: dict[str, list[str]]
    ends_at: float
    starts_at: float | None
    created_by: str
    comment: str


class SilencePreviewRequest(_Strict):
    """Matchers of a silence not yet made (as in :class:`SilenceRequest`)."""

    matchers: dict[str, list[str] | str] = Field(..., examples=[{"category": ["oom_kv_cache"]}])

    @field_validator("matchers")
    @classmethod
    def _matchers(cls, v: dict[str, list[str] | str]) -> dict[str, list[str]]:
        return validate_matchers(v)


class PreviewItem(_Open):
    id: str
    stream: str
    namespace: str | None = None
    pod: str | None = None
    status: str
    tier: str
    category: str
    opened_at: float | None = None


class SilencePreviewOut(_Open):
    """What the silence would hide now: open incidents, the last day's incidents (up to
    100 of each listed, all counted), the namespaces they are in (``""``: none), and
    whether it needs ``cluster_wide`` (it does not pin one namespace)."""

    open_count: int
    recent_count: int
    open: list[PreviewItem]
    recent: list[PreviewItem]
    namespaces: list[str]
    cluster_wide: bool
    truncated: bool = Field(
        ..., description="more incidents than were read: counts are lower bounds"
    )


class Silence(_Open):
    id: str
    matchers: dict[str, list[str]]
    starts_at: float
    ends_at: float
    created_by: str | None = None
    comment: str | None = None
    created_at: float | None = None
    active: bool = Field(..., description="in force now")


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


# ---- health ------------------------------------------------------------------------------
class Health(BaseModel):
    status: Literal["ok"] = "ok"
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
