"""What a stream keeps beside its stage and status, typed: the state of the current run that
its checks count in (:class:`RunState`: a repeated wait, the serving statistics, the API
server's pid; reset by a new run), what Kubernetes said of its pod's life (:class:`PodLife`),
and a restart's failure not judged yet (:class:`Pending`).

Saved with the stream under its snapshot's ``extra`` (the keys older versions wrote and read:
:class:`~service.incidents.snapshots.StreamExtra`); :func:`run_state_of` and the ``*_of``
readers take what an older snapshot lacks as its default.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from service.incidents.finding import Finding
from service.incidents.incident_json import LastFailure
from service.incidents.snapshots import (
    FailureSnapshot,
    HeldSnapshot,
    PendingSnapshot,
    ServingStatsSnapshot,
    StreamExtra,
    WaitingSnapshot,
)

ENDED, CREATED = "ended", "created"


@dataclass(slots=True)
class Waiting:
    """The same "waiting for ..." line repeating in one stage (``judgements/waiting.py``)."""

    template: str
    stage: str | None
    count: int
    first: float | None
    process: str = "-"  # the process repeating it (another one saying it once is no repeat)


@dataclass(slots=True)
class ServingStats:
    """What the serving statistics keep of a run's stats lines (``judgements/serving.py``)."""

    kv: list[float] = field(default_factory=list)  # KV cache usage of the last lines
    kv_high: int = 0  # lines in a row at or above the threshold
    waiting: list[int] = field(default_factory=list)  # waiting requests of the last lines
    queue_warned: bool = False
    preempt_warned: bool = False
    hit_zero: int = 0  # lines in a row with a 0 % prefix cache hit rate
    prompt: list[float] = field(default_factory=list)  # prompt throughput of those lines


@dataclass(slots=True)
class Held:
    """A finding not fatal by itself, waiting for its run's outcome (``judgements/outcome.py``):
    ``process``, whose later frames may refine it; ``yields``, it gives the root cause to a
    later failure; ``stage`` and ``status``, where the run was when it was held."""

    finding: Finding
    process: str | None
    yields: bool
    stage: str | None
    status: str
    port: int | None = None  # a bind failure on this port (block ``outcome.binds``)
    rebound: bool = False  # ... and a server of the run bound that port since (or work advanced)
    work: bool = False  # a caught exception logged at ERROR: recovered once the work advances


def _held_snapshot(h: Held) -> HeldSnapshot:
    snap = HeldSnapshot(
        finding=h.finding.to_dict(),
        process=h.process,
        yields=h.yields,
        stage=h.stage,
        status=h.status,
    )
    if h.port is not None:  # older versions wrote no port: the key only once it applies
        snap["port"], snap["rebound"] = h.port, h.rebound
    if h.work:
        snap["work"], snap["rebound"] = True, h.rebound
    return snap


MAX_HELD = 16  # held findings kept per run (the first ones: a run that goes on says so early)


@dataclass(slots=True)
class RunState:
    """What the checks count in the current run (a new run starts it afresh)."""

    waiting: Waiting | None = None
    stats: ServingStats | None = None
    api_pid: int | None = None  # the API server's process
    held: list[Held] = field(default_factory=list)  # findings waiting for the run's outcome
    ready: bool = False  # the run's ready marker was seen: a failure now is a request's


@dataclass(slots=True)
class Pending:
    """A restart's incident not judged yet (``restarts.py``): which one, since when."""

    incident: str
    since: float | None


@dataclass(frozen=True, slots=True)
class Moment:
    """When something happened (None: a time not known)."""

    at: float | None


@dataclass(slots=True)
class PodLife:
    """When Kubernetes said the stream's pod ended or was created (restart evidence,
    ``restarts.py``; the earliest time seen is kept). None: not said."""

    ended: Moment | None = None
    created: Moment | None = None

    def note(self, life: str, time: float | None) -> None:
        """The pod ``life`` (``ended`` / ``created``) at ``time``."""
        if life not in (ENDED, CREATED):
            return
        seen = self.ended if life == ENDED else self.created
        if seen is None or (time is not None and (seen.at is None or time < seen.at)):
            if life == ENDED:
                self.ended = Moment(time)
            else:
                self.created = Moment(time)

    def inherit(self, other: PodLife) -> None:
        """What ``other`` (the pod's placeholder stream) saw is this stream's too."""
        for life, seen in ((ENDED, other.ended), (CREATED, other.created)):
            if seen is not None:
                self.note(life, seen.at)

    def to_dict(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for life, seen in ((ENDED, self.ended), (CREATED, self.created)):
            if seen is not None:
                out[life] = seen.at
        return out

    @classmethod
    def from_dict(cls, d: dict[str, float | None]) -> PodLife:
        return cls(
            ended=Moment(d[ENDED]) if ENDED in d else None,
            created=Moment(d[CREATED]) if CREATED in d else None,
        )


@dataclass(frozen=True, slots=True)
class Failure:
    """One failure announced on the stream (a new incident): when, its category, its id."""

    at: float | None
    category: str
    incident: str


MAX_FAILURES = 20  # failures remembered per stream (latest last)


def run_state_of(extra: StreamExtra) -> RunState:
    w, s = extra.get("waiting"), extra.get("stats")
    return RunState(
        waiting=(
            Waiting(w["template"], w["stage"], w["count"], w.get("first"), w.get("process", "-"))
            if w
            else None
        ),
        stats=None if s is None else _stats_of(s),
        api_pid=extra.get("api_pid"),
        held=[
            Held(
                Finding.from_dict(h["finding"]),
                h["process"],
                h["yields"],
                h["stage"],
                h["status"],
                h.get("port"),
                h.get("rebound", False),
                h.get("work", False),
            )
            for h in extra.get("held", [])
        ],
        ready=extra.get("ready", False),
    )


def _stats_of(s: ServingStatsSnapshot) -> ServingStats:
    return ServingStats(
        kv=list(s.get("kv", [])),
        kv_high=s.get("kv_high", 0),
        waiting=list(s.get("waiting", [])),
        queue_warned=s.get("queue_warned", False),
        preempt_warned=s.get("preempt_warned", False),
        hit_zero=s.get("hit_zero", 0),
        prompt=list(s.get("prompt", [])),
    )


def pending_of(extra: StreamExtra) -> Pending | None:
    p = extra.get("pending")
    return Pending(p["incident"], p.get("since")) if p else None


def failures_of(extra: StreamExtra) -> list[Failure]:
    return [Failure(f["at"], f["category"], f["incident"]) for f in extra.get("failures", [])]


def extra_of(
    run: RunState,
    pod_life: PodLife,
    pending: Pending | None,
    kube_seen: list[str],
    last_failure: LastFailure | None,
    failures: list[Failure],
) -> StreamExtra:
    """The snapshot's ``extra`` (each key only once it applies, as older versions wrote)."""
    out = StreamExtra()
    if run.waiting is not None:
        w = run.waiting
        out["waiting"] = WaitingSnapshot(
            template=w.template, stage=w.stage, count=w.count, first=w.first, process=w.process
        )
    if run.stats is not None:
        s = run.stats
        out["stats"] = ServingStatsSnapshot(
            kv=s.kv,
            kv_high=s.kv_high,
            waiting=s.waiting,
            queue_warned=s.queue_warned,
            preempt_warned=s.preempt_warned,
            hit_zero=s.hit_zero,
            prompt=s.prompt,
        )
    if run.api_pid is not None:
        out["api_pid"] = run.api_pid
    if run.held:
        out["held"] = [_held_snapshot(h) for h in run.held]
    if run.ready:
        out["ready"] = True
    if pod_life.ended is not None or pod_life.created is not None:
        out["pod_life"] = pod_life.to_dict()
    if last_failure is not None:
        out["last_failure"] = last_failure
    if pending is not None:
        out["pending"] = PendingSnapshot(incident=pending.incident, since=pending.since)
    if kube_seen:
        out["kube_seen"] = kube_seen
    if failures:
        out["failures"] = [
            FailureSnapshot(at=f.at, category=f.category, incident=f.incident) for f in failures
        ]
    return out
