"""What a judgement kind is: its block of ``rules/judgements.yaml`` (a :class:`Config`, every
block may say ``enabled: false``) and, when it judges streams, the :class:`Judge` built from
that block; the registry (:mod:`.registry`) holds the kinds by name.

A judge answers the moments it cares about, each a no-op by default: a line
(:meth:`Judge.line`, after the run's stage moved and before the line's own finding), the
incident changes a line or a tick made (:meth:`Judge.after`), the timer (:meth:`Judge.tick`),
a workload that failed the same way again (:meth:`Judge.restarted`) and Kubernetes'
evidence on a failing stream (:meth:`Judge.evidence`). It returns what it judged - typed
:class:`~.judgement.Judgement` records or a :class:`~service.incidents.incident.CrashLoop` -
and never changes an incident itself: the incident book applies what it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from service.classify.events import Seen
from service.classify.judgements.judgement import Judgement
from service.classify.rules import PlaybookRules
from service.classify.stream_state import StreamState
from service.incidents.incident import Change, CrashLoop, Incident


class Config(BaseModel):
    """One block of ``rules/judgements.yaml`` (unknown keys are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool = True  # whether the judgement runs


C = TypeVar("C", bound=Config)
B = TypeVar("B", bound=Config)


class Blocks(Protocol):
    """The validated file: each kind's block (:class:`~.registry.JudgementRules`)."""

    def get(self, kind: Kind[B]) -> B: ...


class Judge:
    """One judgement at work (see the module's docstring)."""

    def line(self, st: StreamState, seen: Seen) -> Sequence[Judgement]:
        return ()

    def after(self, st: StreamState, changes: Sequence[Change]) -> Sequence[Judgement]:
        return ()

    def tick(self, st: StreamState, now: float) -> Sequence[Judgement]:
        return ()

    def restarted(self, inc: Incident) -> CrashLoop | None:
        return None

    def evidence(self, inc: Incident, rules: Sequence[str]) -> CrashLoop | None:
        return None


@dataclass(frozen=True, slots=True)
class Kind(Generic[C]):
    """A judgement by name: its block (``name``) validated as ``config``; ``judge`` builds
    its :class:`Judge` from that block, the whole file (a kind may read another's block)
    and the playbook (None: a kind that is configuration only, read elsewhere); ``runs``:
    where its judge is asked among the others on each line (lower first)."""

    name: str
    config: type[C]
    judge: Callable[[C, Blocks, PlaybookRules], Judge] | None = None
    runs: int = 100
