"""The JSON an incident is kept, sent and served as: its keys and their types, for the type
checker (TypedDicts; at run time they are plain dicts).

* :class:`IncidentBody` (``Incident.to_dict()``): the store's ``incidents.body``, what a
  stream snapshot holds of its open incidents, what routes and silences match and what
  receivers render;
* :class:`IncidentSummary` (``Incident.summary()``): the per-incident shape of ``classify
  --json``, kept with each outbox event, the base of the API's and the receivers' views;
* :class:`IncidentExtra` (``extra`` of both): the judgements added beside the root cause,
  each key present only where it applies.

These are wire formats and stored JSON: rows written by earlier versions are read back, so a
key is added, never renamed or dropped (readers of stored bodies go through
``Incident.from_dict``, which fills what an older body lacks). The records' JSON and reading
it back are generated from their dataclasses (:mod:`service.incidents.codec`); the summary
from :class:`IncidentSummary`'s own keys.
"""

from __future__ import annotations

from typing import Any, Required

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

from service.incidents.codec import Kept

# Judgements are open JSON: a key written by a later version is kept when an older one
# rewrites the incident (pydantic reads these TypedDicts on Python 3.11 from typing_extensions).
_OPEN = with_config(ConfigDict(extra="allow"))


class FindingBody(TypedDict):
    """``Finding.to_dict()``: one finding (the root cause, or a cascade in ``related``)."""

    tier: str
    category: str
    stage: str
    confidence: float
    method: str  # signature | model | heuristic | fleet
    rule: str | None
    line: str
    role: str  # cause | symptom | cascade | warning
    priority: int
    seq: int
    time: float | None
    process: str | None
    remediation: str
    template: str | None
    novel: bool
    stage_source: str
    detail: str | None


class RelatedFinding(TypedDict):
    """A cascade as the summary lists it."""

    category: str
    rule: str | None
    role: str
    method: str
    stage: str
    line: str


@_OPEN
class Link(TypedDict):
    """How a later incident names the one before it (``extra.after_restart_of``)."""

    id: str
    category: str
    stage: str
    restarts: int


class LastFailure(Link):
    """A stream's latest announced failure (its state's ``extra.last_failure``): the link,
    the run that failed and when that run started."""

    run: int
    started: float | None


@_OPEN
class Attempt(TypedDict, total=False):
    """One failed start in ``extra.attempts``; keys without a value are left out."""

    attempt: Required[int]
    run: Required[int]
    stream: Required[str]
    started: float
    failed: float
    stage: str
    pod: str
    container_id: str
    node: str


@_OPEN
class Decision(TypedDict, total=False):
    """One option of a compatibility decision (``playbook.decision``)."""

    option: Required[str]
    text: Required[str]
    preconditions: Required[list[str]]
    available: bool  # only where it may not be (the cu129 bridge)


@_OPEN
class WarningAdvice(TypedDict):
    """A warning's own entry of ``rules/playbook.yaml`` (``warnings.<rule>``)."""

    owner: str | None
    explanation: str
    first_move: str
    evidence: list[str]


@_OPEN
class Playbook(TypedDict, total=False):
    """``extra.playbook``: who owns it, the first move, the evidence to collect; a warning's
    own explanation; for a compatibility failure, the decision with its preconditions."""

    owner: Required[str | None]
    explanation: str
    first_move: Required[str]
    evidence: Required[list[str]]
    decision: list[Decision]


@_OPEN
class FleetExtra(TypedDict):
    """``extra.fleet`` of a fleet incident: what its members share, how many
    workloads/nodes, who they are."""

    key: str
    value: str
    count: int
    incidents: int
    members: list[str]
    streams: list[str]


@_OPEN
class IncidentExtra(TypedDict, total=False):
    """The judgements beside the root cause (each only where it applies)."""

    reached: str  # the stage the failing run had got to
    playbook: Playbook
    changed_since_last_good: dict[str, list[str | None]]  # fact → [then, now]
    after_restart_of: Link  # the failure of the run before this one
    pending_restart_of: str | None  # a restart's failure not judged yet (never stored open)
    attempts: list[Attempt]  # failed starts, the same way (the first and the latest)
    crash_loop: bool
    crash_loop_at: int  # the attempts that make a crash loop
    crash_loop_source: str  # "kubernetes": its back-off said so
    restart_helps: bool
    note: str  # the crash loop in words
    stall: bool  # a stall's incident
    fleet: FleetExtra  # a fleet incident's
    resolved_by: str  # resolved by hand ("api") or with its last member ("members")


class IncidentBody(TypedDict):
    """``Incident.to_dict()``."""

    id: str
    stream: str
    run: int
    primary: FindingBody
    related: list[FindingBody]
    status: str  # open | resolved
    severity: str  # critical | warning
    facts: dict[str, str]
    timeline: dict[str, float]  # stage → first time (a line number without times)
    evidence: list[str]
    meta: dict[str, Any]  # what the envelope knew (Kubernetes labels included): open
    explanation: str | None
    opened_at: float | None
    updated_at: float | None
    resolved_at: float | None
    resolution: str | None
    restarts: int
    extra: Kept[IncidentExtra]  # read as stored (its keys in their order)


class IncidentSummary(TypedDict):
    """``Incident.summary()``: the root cause's fields flattened, the cascades listed."""

    id: str
    status: str
    severity: str
    tier: str
    category: str
    stage: str
    confidence: float
    method: str
    rule: str | None
    line: str
    template: str | None
    detail: str | None
    novel: bool
    remediation: str
    explanation: str | None
    evidence: list[str]
    related: list[RelatedFinding]
    restarts: int
    opened_at: float | None
    resolved_at: float | None
    resolution: str | None
    extra: Kept[IncidentExtra]  # read as stored (its keys in their order)
