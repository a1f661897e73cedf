"""What the classifier saves of a stream, a workload and the novelty miner, and the versions
they are saved under: the JSON shapes the store keeps (``streams.state``, the novelty row) and
the classifier reloads. Shapes only (TypedDicts: plain dicts at run time)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, NotRequired, TypedDict, TypeVar

from service.incidents.incident_json import FindingBody, IncidentBody, LastFailure
from service.taxonomy import reach_before, reached_by

S = TypeVar("S")


class ServingStatsSnapshot(TypedDict, total=False):
    """What the serving statistics keep of a run's stats lines (``extra.stats``)."""

    kv: list[float]  # KV cache usage of the last lines
    kv_high: int  # lines in a row at or above the threshold
    waiting: list[int]  # waiting requests of the last lines
    queue_warned: bool
    preempt_warned: bool
    hit_zero: int  # lines in a row with a 0 % prefix cache hit rate
    prompt: list[float]  # prompt throughput of those lines


class WaitingSnapshot(TypedDict):
    """The same "waiting for ..." line repeating (``extra.waiting``)."""

    template: str
    stage: str | None
    count: int
    first: float | None
    process: NotRequired[str]  # the process that repeats it (older snapshots: any)


class PendingSnapshot(TypedDict):
    """A restart's incident not judged yet (``extra.pending``)."""

    incident: str
    since: float | None


class FailureSnapshot(TypedDict):
    """One failure announced on the stream (``extra.failures``)."""

    at: float | None
    category: str
    incident: str


class HeldSnapshot(TypedDict):
    """A finding waiting for its run's outcome (``extra.held``)."""

    finding: FindingBody
    process: str | None
    yields: bool
    stage: str | None
    status: str
    port: NotRequired[int]  # a bind failure on this port (older snapshots: none)
    rebound: NotRequired[bool]  # ... bound again since (or the work advanced since)
    work: NotRequired[bool]  # a caught exception waiting for the work to advance


class StreamExtra(TypedDict, total=False):
    """The typed state of a stream (``StreamState`` and its ``RunState``) as saved: each
    key only once it applies; the keys older versions wrote, read back into those fields."""

    waiting: WaitingSnapshot  # per run
    stats: ServingStatsSnapshot  # per run
    api_pid: int  # per run: the API server's process
    held: list[HeldSnapshot]  # per run: findings waiting for the run's outcome
    ready: bool  # per run: the ready marker was seen
    pod_life: dict[str, float | None]  # "ended" / "created" → when (restart evidence)
    last_failure: LastFailure
    pending: PendingSnapshot
    kube_seen: list[str]  # ids of the Kubernetes evidence read
    failures: list[FailureSnapshot]  # the latest failures announced (newer versions)


class StreamSnapshot(TypedDict):
    """``StreamState.to_dict()``: the store's ``streams.state``."""

    key: str
    meta: dict[str, Any]
    run: int
    status: str
    stage: str | None
    timeline: dict[str, float]
    facts: dict[str, str]
    last_good_facts: dict[str, str] | None
    shutting_down: bool
    seq: int
    last_time: float | None
    first_time: float | None
    last_line: str
    last_stage_change: float | None
    frame_hint: dict[str, str]
    incidents: list[IncidentBody]
    runs_failed: int
    extra: StreamExtra


class NoveltyCluster(TypedDict):
    template: str
    size: int


class NoveltySnapshot(TypedDict):
    """What the novelty miner saves (``NoveltyState.to_dict()``): its settings and templates."""

    version: int
    max_clusters: int
    similarity: float
    depth: int
    clusters: list[NoveltyCluster]


@dataclass(frozen=True, slots=True)
class Versioned(Generic[S]):
    """A saved state and its version (bumped by every write)."""

    state: S
    version: int


def failed_at(st: StreamSnapshot) -> str | None:
    """The stage of the current run's open failure (its root cause), or None."""
    for inc in st.get("incidents") or []:
        if (
            inc.get("run") == st.get("run")
            and inc.get("severity") == "critical"
            and inc.get("status") == "open"
        ):
            return inc["primary"]["stage"]
    return None


def shown_reach(st: StreamSnapshot) -> tuple[str | None, dict[str, float]]:
    """The stage a stream is shown to have reached and its timeline: never a rung after the
    current run's failure."""
    failed = failed_at(st)
    return reach_before(st.get("stage"), failed), reached_by(st.get("timeline") or {}, failed)
