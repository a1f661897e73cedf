"""What the classifier says about one line or event."""

from __future__ import annotations

from dataclasses import dataclass

from service.incidents.codec import Record
from service.incidents.incident_json import FindingBody

# Which findings can be a root cause: a cause beats a symptom beats a cascade.
ROLE_RANK = {"cascade": 1, "symptom": 2, "cause": 3, "warning": 0}
# A later finding of the same role replaces the primary only when it is this much more
# specific (e.g. an mlx5 registration WARN explaining a generic "NCCL error").
PRECEDENCE_MARGIN = 20


@dataclass(slots=True)
class Finding(Record[FindingBody]):
    """One line's (or event's) verdict; its JSON (``to_dict``) is :class:`FindingBody`."""

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
    stage_source: str = "tracker"  # rule | evidence | ready | frames | tracker | implied | default
    detail: str | None = None  # a judgement's own explanation (stalls, stats warnings)

    def beats(self, other: Finding) -> bool:
        """Whether this (later) finding should replace ``other`` as the root cause."""
        mine, theirs = ROLE_RANK[self.role], ROLE_RANK[other.role]
        if mine != theirs:
            return mine > theirs
        return self.priority >= other.priority + PRECEDENCE_MARGIN
