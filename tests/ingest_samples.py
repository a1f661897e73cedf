"""Realistic vLLM lines and collector records shared by the ingest tests."""

from __future__ import annotations

import copy
from typing import Any

from service.metrics import REGISTRY

CONTAINER_ID = "3f9c2b7e5d1a4c8f9e0b6a2d7c5e1f3a8b9c0d4e6f7a1b2c3d4e5f6a7b8c9d0e"
CONTAINER_ID_2 = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b"
POD = "vllm-kimi-k3-7d9f8b6c4-x2x9z"
POD_ID = "0f5c7a4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
NAMESPACE = "inference"
STREAM = f"{NAMESPACE}/{POD}/vllm"
TAG = f"kube.var.log.containers.{POD}_{NAMESPACE}_vllm-{CONTAINER_ID}.log"

# Physical lines as vLLM containers write them (reference §1).
ROUTES = "(APIServer pid=1) INFO 07-21 04:58:58 [launcher.py:37] Available routes are:"
STARTUP = "(APIServer pid=1) INFO:     Application startup complete."
ENGINE_FAILED = (
    "(EngineCore_DP0 pid=406) ERROR 01-30 13:26:29 [core.py:946] EngineCore failed to start."
)
NO_KERNEL = (
    "ERROR 07-28 15:07:22 [core.py:632] RuntimeError: CUDA error: no kernel image is "
    "available for execution on the device\r"
)
COLOURED = "\x1b[0;36m(APIServer pid=31)\x1b[0;0m INFO 02-03 11:02:13 [api_server.py:1885] vLLM API server version 0.15.1"
NCCL_WARN = (
    "vllm-0:68:68 [0] NCCL WARN Error: failed to extend /dev/shm/nccl-6xSvRa to 9637892 bytes"
)
KV_CACHE = "(EngineCore_DP0 pid=68) INFO 07-27 10:11:14 [kv_cache_utils.py:1087] GPU KV cache size: 1,234,560 tokens"

CRI_TIME = "2026-07-27T10:11:12.123456789Z"
CRI_EPOCH = 1785147072.123456789

FLUENT_BIT_RECORD: dict[str, Any] = {
    "time": CRI_TIME,
    "stream": "stderr",
    "_p": "F",
    "log": ENGINE_FAILED,
    "kubernetes": {
        "pod_name": POD,
        "namespace_name": NAMESPACE,
        "pod_id": POD_ID,
        "labels": {"app.kubernetes.io/name": "vllm", "pod-template-hash": "7d9f8b6c4"},
        "annotations": {"kubectl.kubernetes.io/default-container": "vllm"},
        "host": "gpu-node-07",
        "pod_ip": "10.1.0.7",
        "container_name": "vllm",
        "docker_id": CONTAINER_ID,
        "container_hash": "docker.io/vllm/vllm-openai@sha256:4b1d0c4e0b3a6f5e9c8d7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e",
        "container_image": "vllm/vllm-openai:kimi-k3",
    },
}

FLUENTD_RECORD: dict[str, Any] = {
    "log": KV_CACHE + "\n",
    "stream": "stdout",
    "docker": {"container_id": CONTAINER_ID},
    "kubernetes": {
        "container_name": "vllm",
        "namespace_name": NAMESPACE,
        "pod_name": POD,
        "container_image": "vllm/vllm-openai:v0.15.1",
        "container_image_id": "docker-pullable://vllm/vllm-openai@sha256:0123abcd",
        "pod_id": POD_ID,
        "pod_ip": "10.1.0.7",
        "host": "gpu-node-07",
        "labels": {"app": "vllm"},
        "master_url": "https://10.96.0.1:443/api",
        "namespace_id": "5d3c1b2a-0000-4000-8000-000000000001",
    },
}


def fluent_bit_record(**changes: Any) -> dict[str, Any]:
    """A deep copy of :data:`FLUENT_BIT_RECORD` with top-level keys replaced."""
    rec = copy.deepcopy(FLUENT_BIT_RECORD)
    rec.update(changes)
    return rec


def fluentd_record(**changes: Any) -> dict[str, Any]:
    """A deep copy of :data:`FLUENTD_RECORD` with top-level keys replaced."""
    rec = copy.deepcopy(FLUENTD_RECORD)
    rec.update(changes)
    return rec


def rejects(source: str, reason: str) -> float:
    """Current value of ``sentinel_rejects_total{source, reason}``."""
    value = REGISTRY.get_sample_value(
        "sentinel_rejects_total", {"source": source, "reason": reason}
    )
    return value or 0.0


def lines_in(source: str) -> float:
    """Current value of ``sentinel_lines_total{source}``."""
    return REGISTRY.get_sample_value("sentinel_lines_total", {"source": source}) or 0.0
