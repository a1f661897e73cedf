"""An incident: one failure of one workload, root cause first, cascades attached; and a
:class:`Change` of one, what the classifier hands the pipeline for every line it judged.
Its JSON (:meth:`Incident.to_dict`, :meth:`Incident.summary`) is typed in
:mod:`service.incidents.incident_json`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, Literal, cast

from service.incidents.codec import Kept, Record
from service.incidents.finding import Finding
from service.incidents.incident_json import (
    IncidentBody,
    IncidentExtra,
    IncidentSummary,
    RelatedFinding,
)
from service.parse.masking import mask

# opened | updated (root cause changed, or it became a crash loop) | resolved: notified;
# evidence (lines attached, one more restart the same way): stored only
ChangeKind = Literal["opened", "updated", "resolved", "evidence"]

MAX_RELATED = 25
MAX_EVIDENCE = 60


@dataclass
class Incident(Record[IncidentBody]):
    """One failure of one workload; its JSON (``to_dict``) is :class:`IncidentBody`."""

    id: str
    stream: str
    run: int
    primary: Finding
    related: list[Finding] = field(default_factory=list)
    status: str = "open"  # open | resolved
    severity: str = "critical"  # critical (pages) | warning (never pages)
    facts: dict[str, str] = field(default_factory=dict)
    timeline: Kept[dict[str, float]] = field(default_factory=dict)  # stage → time (or line)
    evidence: list[str] = field(default_factory=list)
    meta: Kept[dict[str, Any]] = field(default_factory=dict)  # the stream's (envelope metadata)
    explanation: str | None = None
    opened_at: float | None = None
    updated_at: float | None = None
    resolved_at: float | None = None
    resolution: str | None = None
    restarts: int = 0  # later runs of the workload that failed the same way
    extra: Kept[IncidentExtra] = field(default_factory=lambda: IncidentExtra())  # judgements

    @staticmethod
    def make_id(stream: str, run: int, seq: int, line: str) -> str:
        """Deterministic id, so a replay of the same input yields the same incident."""
        digest = hashlib.sha256(f"{stream}|{run}|{seq}|{line}".encode()).hexdigest()
        return digest[:20]

    @property
    def tier(self) -> str:
        return self.primary.tier

    @property
    def category(self) -> str:
        return self.primary.category

    @property
    def stage(self) -> str:
        return self.primary.stage

    def add(self, finding: Finding) -> bool:
        """Attach a finding; returns True when it became the new root cause. ``related``
        holds one entry per distinct cascade: never the root cause again, never the same rule
        (or, for model findings, the same masked wording) twice, e.g. from another rank."""
        key = _cascade_key(finding)
        if finding.beats(self.primary):
            old = self.primary
            self.primary = finding
            self.related = [r for r in self.related if _cascade_key(r) != key]
            if _cascade_key(old) != key:
                self.related.insert(0, old)
            del self.related[MAX_RELATED:]
            return True
        if (
            len(self.related) < MAX_RELATED
            and key != _cascade_key(self.primary)
            and not any(_cascade_key(r) == key for r in self.related)
        ):
            self.related.append(finding)
        return False

    def note(self, line: str) -> None:
        """Keep the log from the first error on (bounded; repeats of a recent line skipped)."""
        if len(self.evidence) < MAX_EVIDENCE and line and line not in self.evidence[-8:]:
            self.evidence.append(line)

    def summary(self) -> IncidentSummary:
        """The per-incident shape of ``classify --json`` and of the API
        (:class:`IncidentSummary`): each key the incident's own field, else its root
        cause's; the confidence rounded, the cascades as :class:`RelatedFinding`."""
        out = dict(zip(_SUMMARY_KEYS, _summary_values(self), strict=False))
        out["confidence"] = round(self.primary.confidence, 3)
        out["evidence"] = list(self.evidence)
        out["related"] = [
            dict(zip(_RELATED_KEYS, _related_values(r), strict=False)) for r in self.related
        ]
        out["extra"] = self.extra.copy()
        return cast(IncidentSummary, out)


def _cascade_key(f: Finding) -> tuple[str | None, str]:
    """What makes two findings the same cascade: rule and category (one rule can mean two
    categories at two stages), else the category and the masked wording."""
    if f.rule:
        return f.rule, f.category
    return None, f"{f.category}:{f.template or mask(f.line)[:160]}"


# The summary's keys in order, each read from the incident's own field or else its root cause's.
_OWN = frozenset(f.name for f in fields(Incident))
_SUMMARY_KEYS = tuple(IncidentSummary.__annotations__)
_summary_values = attrgetter(*(k if k in _OWN else f"primary.{k}" for k in _SUMMARY_KEYS))
_RELATED_KEYS = tuple(RelatedFinding.__annotations__)
_related_values = attrgetter(*_RELATED_KEYS)


@dataclass(slots=True)
class Change:
    """An incident changed: ``opened``, ``updated`` (root cause changed, or it became a
    crash loop), ``resolved``, or ``evidence`` (more lines attached, or one more restart that
    failed the same way; stored, not notified). ``also``: other streams whose state the
    change touched (an incident that followed its workload from a replaced pod)."""

    kind: ChangeKind
    incident: Incident
    also: tuple[str, ...] = ()
