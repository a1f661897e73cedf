"""What flows through the classifier's chain (:mod:`.chain`): one line on its way
(:class:`Seen`, each stage adds what it read) and the typed events the stages return, which
only the incident book applies (:meth:`~.incident_book.IncidentBook.apply`).

* run events: the line is counted, a new run starts, a stage is reached, the server is
  ready or serving or shutting down, facts and the API server's pid are read;
* a traceback's frames: the stage they hint, a finding they refine;
* judgements (:class:`Judged`), a line's finding (:class:`Found`), one that waits for the
  run's outcome (:class:`Hold`) or its evidence (:class:`Noted`), the held findings to decide
  (:class:`HeldDue`), a restart's pending failure to settle (:class:`Settle`), a crash loop
  Kubernetes confirmed (:class:`BackOff`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from service.classify.hits import NO_HITS, Hits
from service.classify.judgements.judgement import Judgement
from service.classify.stream_state import StreamState
from service.incidents.finding import Finding
from service.incidents.incident import Change, CrashLoop, Incident
from service.parse import line as L


@dataclass(slots=True)
class Seen:
    """One line of stream ``st`` on its way through the chain. ``prev_time``: the time of
    the stream's line before it; ``line`` and ``hits``: parsed and matched (None and no
    hits on the quiet path of a serving stream); ``ready``: the server got ready on it;
    ``done``: a stage took the line whole (the stages after it are skipped, the closing
    ones still run); ``evidence``: what Kubernetes said, for its evidence record
    (:mod:`.kube`); ``changes``: what the incident book changed so far; ``final``: the
    stream's input ended (a restart's undecided failure is judged on what is known)."""

    st: StreamState
    text: str
    time: float | None
    prev_time: float | None
    line: L.Line | None = None
    hits: Hits = field(default_factory=lambda: NO_HITS)
    ready: bool = False
    done: bool = False
    evidence: dict[str, Any] | None = None
    changes: list[Change] = field(default_factory=list)
    final: bool = False


@dataclass(frozen=True, slots=True)
class Counted:
    """The line counts on its stream (``opens``: its time may be the run's first)."""

    time: float | None
    opens: bool = True


@dataclass(frozen=True, slots=True)
class NewRun:
    """The stream's next run starts (``time``: its first line's); a restart's failure
    still undecided is settled first (:func:`new_run`)."""

    time: float | None


@dataclass(frozen=True, slots=True)
class ApiServer:
    """The API server's process of this run (the first one seen stays)."""

    pid: int


@dataclass(frozen=True, slots=True)
class Reached:
    """A startup stage marked (the rungs skipped before it are implied)."""

    stage: str
    time: float | None


@dataclass(frozen=True, slots=True)
class Ready:
    """The API server is up: the run's facts are its workload's last good ones."""

    time: float | None


@dataclass(frozen=True, slots=True)
class Serving:
    """A request was served: a starting or ready server is serving."""


@dataclass(frozen=True, slots=True)
class ShuttingDown:
    """The server is shutting down (``stopped``: it said it finished)."""

    stopped: bool


@dataclass(frozen=True, slots=True)
class Facts:
    """Facts the line tells (the first value of each stays)."""

    found: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class LastLine:
    """The stream's latest line (a stall quotes it)."""

    text: str


@dataclass(frozen=True, slots=True)
class FrameHint:
    """The stage a process's traceback frames hint now (None: forgotten)."""

    process: str
    stage: str | None


@dataclass(frozen=True, slots=True)
class Refined:
    """A deeper frame places ``finding`` (of ``incident``) at ``stage``."""

    finding: Finding
    incident: Incident | None
    stage: str


@dataclass(frozen=True, slots=True)
class Judged:
    """A judge's :class:`Judgement`: a finding no single line carries."""

    judgement: Judgement
    time: float | None


@dataclass(frozen=True, slots=True)
class Found:
    """A finding of the line (``process``: whose later frames may still refine it; None:
    no frames will, e.g. Kubernetes evidence)."""

    finding: Finding
    process: str | None


@dataclass(frozen=True, slots=True)
class Hold:
    """A finding not fatal by itself: it waits for the run's outcome
    (:mod:`.judgements.outcome`; ``yields``: it gives the root cause to a later failure)."""

    finding: Finding
    process: str | None
    yields: bool
    port: int | None = None  # a bind failure on this port: recovered if it is bound later
    work: bool = False  # a caught exception: recovered if the run's work advances later


@dataclass(frozen=True, slots=True)
class Bound:
    """A server of the run bound ``port`` and listens: a held bind failure on it recovered."""

    port: int


@dataclass(frozen=True, slots=True)
class Worked:
    """The run's work advanced (a progress line: a training step, a request served): a held
    exception its program caught and logged recovered."""


@dataclass(frozen=True, slots=True)
class HeldDue:
    """The held findings are decided at ``now`` (those that waited long enough): a warning
    when the run went on; ``final``: the attempt ended (the end of an offline log, a new run),
    so those of a run that ended mid-start-up page."""

    now: float | None
    final: bool


@dataclass(frozen=True, slots=True)
class Noted:
    """A line with no finding: evidence of the open incident."""

    text: str


@dataclass(frozen=True, slots=True)
class Settle:
    """A restart's pending failure is judged if it can be (``final``: the attempt ended)."""

    final: bool


@dataclass(frozen=True, slots=True)
class Observed:
    """Kubernetes evidence read for the stream: its id (each is read once), what it said
    of the pod's life, and whether it is a line counted on the stream (``counts``)."""

    evidence_id: str | None
    life: str | None
    time: float | None
    counts: bool


@dataclass(frozen=True, slots=True)
class BackOff:
    """Kubernetes backs off restarting the container of ``incident``: a crash loop
    (``loop``; None: one already known)."""

    incident: Incident
    text: str
    loop: CrashLoop | None
    time: float | None


def new_run(st: StreamState, time: float | None) -> list[Settle | NewRun]:
    """A new run of ``st``: the previous attempt ended, so a failure of it still undecided
    (its root cause never came) is judged first."""
    return [Settle(True), NewRun(time)] if st.pending is not None else [NewRun(time)]


Event = (
    Counted
    | NewRun
    | ApiServer
    | Reached
    | Ready
    | Serving
    | ShuttingDown
    | Facts
    | LastLine
    | FrameHint
    | Refined
    | Judged
    | Found
    | Hold
    | Bound
    | Worked
    | HeldDue
    | Noted
    | Settle
    | Observed
    | BackOff
)
