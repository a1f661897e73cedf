"""Per-stream state: startup stage, timeline, status, facts, open incidents.

Serializable to JSON so the service can snapshot it and a restart (or the next owner of a
Kafka partition) continues a startup where it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from service.classify.facts import CudaTable
from service.classify.run_state import (
    Failure,
    Pending,
    PodLife,
    RunState,
    extra_of,
    failures_of,
    pending_of,
    run_state_of,
)
from service.incidents.incident import Incident
from service.incidents.incident_json import LastFailure
from service.incidents.snapshots import StreamExtra, StreamSnapshot

# Stream status.
STARTING, READY, SERVING, FAILED, STOPPED = "starting", "ready", "serving", "failed", "stopped"


@dataclass
class StreamState:
    key: str
    meta: dict[str, Any] = field(default_factory=dict)
    run: int = 0
    status: str = STARTING
    stage: str | None = None
    timeline: dict[str, float] = field(default_factory=dict)  # stage → first time (or line no)
    facts: dict[str, str] = field(default_factory=dict)
    last_good_facts: dict[str, str] | None = None  # facts of the last run that got ready
    shutting_down: bool = False
    seq: int = 0  # lines seen
    last_time: float | None = None
    first_time: float | None = None  # time of the first line of the current run
    last_line: str = ""
    last_stage_change: float | None = None
    frame_hint: dict[str, str] = field(default_factory=dict)  # process → stage of deepest frame
    incidents: list[Incident] = field(default_factory=list)  # open ones
    runs_failed: int = 0
    checks: RunState = field(default_factory=RunState)  # what the checks count in this run
    pod_life: PodLife = field(default_factory=PodLife)  # Kubernetes' word on the pod
    last_failure: LastFailure | None = None  # the latest failure announced
    pending: Pending | None = None  # a restart's failure not judged yet
    kube_seen: list[str] = field(default_factory=list)  # ids of the evidence read
    failures: list[Failure] = field(default_factory=list)  # the latest announced, last last

    def current(self, severity: str = "critical") -> Incident | None:
        """The open incident of this run (of the given severity), if any."""
        for inc in self.incidents:
            if inc.run == self.run and inc.severity == severity and inc.status == "open":
                return inc
        return None

    def to_dict(self) -> StreamSnapshot:
        return {
            "key": self.key,
            "meta": self.meta,
            "run": self.run,
            "status": self.status,
            "stage": self.stage,
            "timeline": self.timeline,
            "facts": self.facts,
            "last_good_facts": self.last_good_facts,
            "shutting_down": self.shutting_down,
            "seq": self.seq,
            "last_time": self.last_time,
            "first_time": self.first_time,
            "last_line": self.last_line,
            "last_stage_change": self.last_stage_change,
            "frame_hint": self.frame_hint,
            "incidents": [i.to_dict() for i in self.incidents],
            "runs_failed": self.runs_failed,
            "extra": extra_of(
                self.checks,
                self.pod_life,
                self.pending,
                self.kube_seen,
                self.last_failure,
                self.failures,
            ),
        }

    @classmethod
    def from_dict(cls, d: StreamSnapshot) -> StreamState:
        """The state of a stored snapshot (a key an older snapshot lacks takes its default)."""
        data: dict[str, Any] = dict(d)
        data["incidents"] = [Incident.from_dict(i) for i in d.get("incidents", [])]
        data.pop("extra", None)
        extra: StreamExtra = d.get("extra") or StreamExtra()
        return cls(
            **data,
            checks=run_state_of(extra),
            pod_life=PodLife.from_dict(extra.get("pod_life") or {}),
            last_failure=extra.get("last_failure"),
            pending=pending_of(extra),
            kube_seen=list(extra.get("kube_seen") or []),
            failures=failures_of(extra),
        )


def merge_meta(st: StreamState, meta: Mapping[str, Any], cuda: CudaTable) -> None:
    """A record's metadata into its stream's (empty values, ``fd`` and ``tag`` left out), and
    what it tells as facts: image, node, namespace, pod, container, the image's CUDA."""
    for k, v in meta.items():
        if v and k not in ("fd", "tag") and st.meta.get(k) != v:
            st.meta[k] = v
    for key in ("image", "node", "namespace", "pod", "container"):
        if meta.get(key):
            st.facts.setdefault(key, str(meta[key]))
    image = meta.get("image")
    if image and "image_cuda" not in st.facts:
        cuda_version = cuda.image_cuda(str(image))
        if cuda_version:
            st.facts["image_cuda"] = cuda_version
