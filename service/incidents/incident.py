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


@dataclass(frozen=True, slots=True)
class CrashLoop:
    """The workload keeps failing the same way: after ``attempts`` failed starts (the
    configured count), or on Kubernetes' word (``source``: ``kubernetes``); whether
    restarting can help, and the note that says so."""

    restart_helps: bool
    note: str
    attempts: int | None = None
    source: str | None = None


@dataclass(frozen=True, slots=True)
class PendingRestart:
    """A restart's failure not judged yet (same failure again, or a new one): the open
    failure it may continue (``of``)."""

    of: str | None


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
    extra: Kept[IncidentExtra] = field(default_factory=lambda: IncidentExtra())  # what is shown
    crash_loop: CrashLoop | None = None  # shown as extra.crash_loop, .restart_helps, .note
    pending_restart: PendingRestart | None = None  # saved as extra.pending_restart_of

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

    def relate(self, finding: Finding) -> None:
        """Attach ``finding`` as related only, never as the root cause (a held fallback that
        a later failure explains; ``classify/judgements/outcome.py``)."""
        key = _cascade_key(finding)
        if (
            len(self.related) < MAX_RELATED
            and key != _cascade_key(self.primary)
            and not any(_cascade_key(r) == key for r in self.related)
        ):
            self.related.append(finding)

    def mark_crash_loop(self, loop: CrashLoop) -> None:
        """``inc`` is a crash loop (``loop``); its ``extra`` shows it (``crash_loop``,
        ``crash_loop_at`` or ``crash_loop_source``, ``restart_helps``, ``note``)."""
        self.crash_loop = loop
        self.extra["crash_loop"] = True
        if loop.attempts is not None:
            self.extra["crash_loop_at"] = loop.attempts
        if loop.source is not None:
            self.extra["crash_loop_source"] = loop.source
        self.extra["restart_helps"] = loop.restart_helps
        self.extra["note"] = loop.note

    def shown_extra(self) -> IncidentExtra:
        """``extra`` as kept and sent: a pending restart's ``pending_restart_of`` right
        after its ``after_restart_of``."""
        if self.pending_restart is None:
            return self.extra.copy()
        out = IncidentExtra()
        for key, value in self.extra.items():
            out[key] = value  # type: ignore[literal-required]
            if key == "after_restart_of":
                out["pending_restart_of"] = self.pending_restart.of
        out.setdefault("pending_restart_of", self.pending_restart.of)
        return out

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
        out["extra"] = self.shown_extra()
        return cast(IncidentSummary, out)

    def to_dict(self) -> IncidentBody:
        """The incident's JSON (:class:`IncidentBody`); the typed crash loop and pending
        restart are shown in ``extra`` (:meth:`mark_crash_loop`, :meth:`shown_extra`)."""
        body = Record.to_dict(self)
        out = cast(dict[str, object], body)
        del out["crash_loop"], out["pending_restart"]
        if self.pending_restart is not None:
            body["extra"] = self.shown_extra()
        return body

    @classmethod
    def from_dict(cls, d: IncidentBody) -> Incident:
        """The incident of a stored body (a key an older body lacks takes its default); a
        crash loop and a pending restart kept in ``extra`` come back as typed fields."""
        inc = super().from_dict(d)
        extra = IncidentExtra(**inc.extra)
        if "pending_restart_of" in extra:
            inc.pending_restart = PendingRestart(extra.pop("pending_restart_of"))
        if extra.get("crash_loop"):
            inc.crash_loop = CrashLoop(
                restart_helps=extra.get("restart_helps", True),
                note=extra.get("note", ""),
                attempts=extra.get("crash_loop_at"),
                source=extra.get("crash_loop_source"),
            )
        inc.extra = extra
        return inc


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
