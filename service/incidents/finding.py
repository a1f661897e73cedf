"""What the classifier says about one line or event."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from service.incidents.incident_json import FindingBody

# Which findings can be a root cause: a cause beats a symptom beats a cascade.
ROLE_RANK = {"cascade": 1, "symptom": 2, "cause": 3, "warning": 0}
# A later finding of the same role replaces the primary only when it is this much more
# specific (e.g. an mlx5 registration WARN explaining a generic "NCCL error").
PRECEDENCE_MARGIN = 20


@dataclass(slots=True)
class Finding:
    tier: str
    category: str
    stage: str
    confidence: float
    method: str  # signature | model | heuristic
    rule: str | None
    line: str  # the cleaned physical line
    role: str = "cause"
    priority: int = 50
    seq: int = 0  # line number within the stream
    time: float | None = None
    process: str | None = None
    remediation: str = ""
    template: str | None = None
    novel: bool = False
    stage_source: str = "tracker"  # rule | tracker | frames | default
    detail: str | None = None  # a judgement's own explanation (stalls, stats warnings)

    def beats(self, other: Finding) -> bool:
        """Whether this (later) finding should replace ``other`` as the root cause."""
        mine, theirs = ROLE_RANK[self.role], ROLE_RANK[other.role]
        if mine != theirs:
            return mine > theirs
        return self.priority >= other.priority + PRECEDENCE_MARGIN

    def to_dict(self) -> FindingBody:
        return {
            "tier": self.tier,
            "category": self.category,
            "stage": self.stage,
            "confidence": self.confidence,
            "method": self.method,
            "rule": self.rule,
            "line": self.line,
            "role": self.role,
            "priority": self.priority,
            "seq": self.seq,
            "time": self.time,
            "process": self.process,
            "remediation": self.remediation,
            "template": self.template,
            "novel": self.novel,
            "stage_source": self.stage_source,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, data: FindingBody) -> Finding:
        """The finding of a stored body (keys it does not know are left out, keys an older
        body lacks take their default)."""
        known: dict[str, Any] = {k: v for k, v in data.items() if k in _FIELDS}
        return cls(**known)


_FIELDS = frozenset(f.name for f in fields(Finding))
