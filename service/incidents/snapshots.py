"""What the classifier saves of a stream, a workload and the novelty miner, and the versions
they are saved under: the JSON shapes the store keeps (``streams.state``, the novelty row) and
the classifier reloads. Shapes only (TypedDicts: plain dicts at run time)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypedDict, TypeVar

from service.incidents.incident_json import IncidentBody, LastFailure

S = TypeVar("S")


class ServingStats(TypedDict, total=False):
    """What :func:`judge` keeps of a stream's stats lines (in its state, per run)."""

    kv: list[float]  # KV cache usage of the last lines
    kv_high: int  # lines in a row at or above the threshold
    waiting: list[int]  # waiting requests of the last lines
    queue_warned: bool
    preempt_warned: bool
    hit_zero: int  # lines in a row with a 0 % prefix cache hit rate
    prompt: list[float]  # prompt throughput of those lines


class Waiting(TypedDict):
    """The same "waiting for ..." line repeating (:func:`~.judgements.checks.waiting`)."""

    template: str
    stage: str | None
    count: int
    first: float | None


class Pending(TypedDict):
    """A restart's incident not judged yet (:mod:`~service.classify.restarts`)."""

    incident: str
    since: float | None


class StreamExtra(TypedDict, total=False):
    """What the checks keep on a stream (each key only once it applies)."""

    waiting: Waiting  # per run
    stats: ServingStats  # per run
    api_pid: int  # per run: the API server's process
    pod_life: dict[str, float | None]  # "ended" / "created" → when (restart evidence)
    last_failure: LastFailure
    pending: Pending
    kube_seen: list[str]  # ids of the Kubernetes evidence read


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
