"""Which workload a stream belongs to, and what changed since its last healthy start."""

from __future__ import annotations

import re
from typing import Any

# Deployment pods: <name>-<replicaset hash>-<5 chars>; StatefulSet: <name>-<ordinal>.
_POD_SUFFIX = re.compile(r"^(?P<base>.+?)-(?:[a-z0-9]{6,10}-[a-z0-9]{5}|[a-z0-9]{5}|\d+)$")

DIFF_KEYS = (
    "image", "vllm_version", "driver_version", "driver_cuda", "image_cuda", "nccl_version",
    "torch_version", "model", "max_model_len", "gpu_memory_utilization", "max_num_seqs",
    "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "dtype",
    "quantization", "kv_cache_dtype", "enable_prefix_caching", "gpu_model", "node",
)


def workload_key(stream: str, meta: dict[str, Any]) -> str:
    """``namespace/<deployment or statefulset>/container`` when Kubernetes metadata is known,
    else the stream key (so a rollout's new pods share their predecessors' history)."""
    pod = meta.get("pod")
    if not pod:
        return stream
    labels = meta.get("labels") or {}
    base = labels.get("app.kubernetes.io/name") or labels.get("app")
    if not base:
        pod = str(pod)[:253]  # a Kubernetes object name is at most 253 characters
        m = _POD_SUFFIX.match(pod)
        base = m.group("base") if m else pod
    return f"{meta.get('namespace', '')}/{base}/{meta.get('container', '')}"


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
