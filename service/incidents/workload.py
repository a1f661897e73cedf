"""Which workload a stream belongs to, what its pods share (:class:`WorkloadState`: the facts
of its last good start, its open failures per node), and what changed since its last healthy
start."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from typing_extensions import TypedDict

from service.incidents.codec import Record

MAX_WORKLOADS = 100_000  # workloads kept in memory without a store (least recently used go)

# Deployment pods: <name>-<replicaset hash>-<5 chars>; StatefulSet: <name>-<ordinal>;
# LeaderWorkerSet workers: <name>-<group>-<worker>; Job pods: <name>-<5 chars>.
_POD_SUFFIX = re.compile(r"^(?P<base>.+?)-(?:[a-z0-9]{6,10}-[a-z0-9]{5}|\d+-\d+|[a-z0-9]{5}|\d+)$")

DIFF_KEYS = (
    "image",
    "vllm_version",
    "driver_version",
    "driver_cuda",
    "image_cuda",
    "nccl_version",
    "torch_version",
    "model",
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_seqs",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "dtype",
    "quantization",
    "kv_cache_dtype",
    "enable_prefix_caching",
    "gpu_model",
    "node",
)


# Labels naming the controller itself: LeaderWorkerSet (leader <lws>-<group>, workers
# <lws>-<group>-<worker>), Job (pods <job>-<5 chars>, one per retry).
_CONTROLLER_LABELS = (
    "leaderworkerset.sigs.k8s.io/name",
    "batch.kubernetes.io/job-name",
    "job-name",
)
_ORDINAL = re.compile(r"^(?P<base>.+?)(?:-\d+){1,2}$")  # StatefulSet / LeaderWorkerSet


def workload_key(stream: str, meta: Mapping[str, object]) -> str:
    """``namespace/<deployment, statefulset, leaderworkerset or job>/container`` when
    Kubernetes metadata is known, else the stream key (so a rollout's new pods share their
    predecessors' history). The controller's name comes from its own labels (LWS, Job), the
    ReplicaSet hash (``pod-template-hash``) or the StatefulSet ordinal in the pod name, then
    the app labels, then the pod name's usual suffixes."""
    pod = meta.get("pod")
    if not pod:
        return stream
    pod = str(pod)[:253]  # a Kubernetes object name is at most 253 characters
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        labels = {}
    base = next((str(labels[k]) for k in _CONTROLLER_LABELS if labels.get(k)), None)
    rs_hash = labels.get("pod-template-hash")
    if base is None and rs_hash and f"-{rs_hash}-" in pod:
        base = pod.rsplit(f"-{rs_hash}-", 1)[0]
    if base is None and labels.get("statefulset.kubernetes.io/pod-name"):
        m = _ORDINAL.match(pod)
        base = m.group("base") if m else pod
    if base is None:
        base = labels.get("app.kubernetes.io/name") or labels.get("app")
    if not base:
        m = _POD_SUFFIX.match(pod)
        base = m.group("base") if m else pod
    return f"{meta.get('namespace', '')}/{base}/{meta.get('container', '')}"


def restart_unit(stream: str, meta: Mapping[str, object]) -> tuple[str, str] | None:
    """What restarts of one workload share across pods: the workload on its node
    (:func:`workload_key`, node; as fleets count members), so a pod that replaces another (a
    rollout, a Job retry, a deleted pod) continues its failure, and replicas on other nodes
    stay apart. None without Kubernetes metadata (only the stream's own runs)."""
    pod = meta.get("pod")
    if not pod:
        return None
    labels = meta.get("labels")
    if not isinstance(labels, dict):
        labels = {}
    if _ORDINAL.match(str(pod)[:253]) and "pod-template-hash" not in labels:
        # StatefulSet / LeaderWorkerSet pods keep their name when replaced (the same stream,
        # a new container): another ordinal is another replica, never a replacement
        return None
    return workload_key(stream, meta), str(meta.get("node") or "")


def diff_facts(last_good: dict[str, str] | None, now: dict[str, str]) -> dict[str, list[Any]]:
    """Facts that differ between the last healthy start and now: ``{key: [then, now]}``."""
    if not last_good:
        return {}
    out: dict[str, list[Any]] = {}
    for key in DIFF_KEYS:
        a, b = last_good.get(key), now.get(key)
        if a != b and (a is not None or b is not None):
            out[key] = [a, b]
    return out


class WorkloadSnapshot(TypedDict):
    """``WorkloadState.to_dict()``: the store's ``workloads.state``."""

    key: str
    last_good: dict[str, str] | None
    failures: dict[str, dict[str, str]]


@dataclass(slots=True)
class WorkloadState(Record[WorkloadSnapshot]):
    """What the pods of one workload (:func:`workload_key`) share, saved beside their
    streams: the facts of its last start that got ready (so a failing start says what
    changed since), and its open failures on each node (restart units: node → {incident id:
    stream}, most recently failed last), so a pod that replaced another continues its
    failure."""

    key: str
    last_good: dict[str, str] | None = None
    failures: dict[str, dict[str, str]] = field(default_factory=dict)
