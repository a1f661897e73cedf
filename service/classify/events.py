"""What flows through the classifier's chain (:mod:`.chain`): one line on its way
(:class:`Seen`, each stage adds what it read) and the typed events the stages return, which
only the incident book applies (:meth:`~.incident_book.IncidentBook.apply`).

* run events: the line is counted, a new run starts, a stage is reached, the server is
  ready or serving or shutting down, facts and the API server's pid are read;
* a traceback's frames: the stage they hint, a finding they refine;
* judgements (:class:`Judged`), a line's finding (:class:`Found`) or its evidence
  (:class:`Noted`), a restart's pending failure to settle (:class:`Settle`), a crash loop
  Kubernetes confirmed (:class:`BackOff`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from service.classify.hits import NO_HITS, Hits
from service.classify.judgements.judgement import Judgement
from service.classify.stream_state import StreamState
from service.incidents.finding import Finding
from service.incidents.incident import CrashLoop, Incident
from service.parse import line as L


@dataclass(slots=True)
class Seen:
    """One line of stream ``st`` on its way through the chain. ``prev_time``: the time of
    the stream's line before it; ``line`` and ``hits``: parsed and matched (None and no
    hits on the quiet path of a serving stream); ``ready``: the server got ready on it;
    ``done``: a stage took the line whole (the stages after it are skipped)."""

    st: StreamState
    text: str
    time: float | None
    prev_time: float | None
    line: L.Line | None = None
    hits: Hits = field(default_factory=lambda: NO_HITS)
    ready: bool = False
    done: bool = False


@dataclass(frozen=True, slots=True)
class Counted:
    """The line counts on its stream (``opens``: its time may be the run's first)."""

    time: float | None
    opens: bool = True


@dataclass(frozen=True, slots=True)
class NewRun:
    """The stream's next run starts (``time``: its first line's)."""

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
class Noted:
    """A line with no finding: evidence of the open incident."""

    text: str


@dataclass(frozen=True, slots=True)
class Settle:
    """A restart's pending failure is judged if it can be (``final``: the attempt ended)."""

    final: bool


@dataclass(frozen=True, slots=True)
class BackOff:
    """Kubernetes backs off restarting the container of ``incident``: a crash loop
    (``loop``; None: one already known)."""

    incident: Incident
    text: str
    loop: CrashLoop | None
    time: float | None


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
    | Noted
    | Settle
    | BackOff
)
