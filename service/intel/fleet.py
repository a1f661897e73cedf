"""Fleet incidents: when the same category hits N or more workloads within a window and
they share something (driver branch, image, node pool, NCCL version, namespace), one fleet
incident pages once and the per-pod incidents are inhibited.

Pure logic over incident dicts (``Incident.to_dict()`` bodies or store summaries with
``facts``/``meta``); the notification stage decides when to call it.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from service.classify.finding import Finding
from service.classify.incident import Incident
from service.intel.workload import workload_key
from service.taxonomy import tier_of

# Categories whose failures typically hit many nodes at once (a driver branch, an image, a
# network fabric); capacity and config failures are per-workload and page on their own.
FLEET_PRONE = frozenset({
    "driver_incompatible", "gpu_not_visible", "arch_unsupported", "library_mismatch",
    "nccl_error", "mlx5_registration", "internode_network", "backend_kernel",
})
# What the members may share, most specific first (the first key reaching the threshold wins).
KEYS = ("driver_branch", "image", "node_pool", "nccl_version", "namespace")
_POOL_LABELS = ("cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup",
                "kubernetes.azure.com/agentpool", "node-pool", "nodepool", "pool")


def fleet_keys(body: dict[str, Any]) -> dict[str, str]:
    """The shared-key candidates of one incident (only those it knows)."""
    facts = body.get("facts") or {}
    meta = body.get("meta") or {}
    out: dict[str, str] = {}
    driver = facts.get("driver_version")
    if driver and re.match(r"\d{3}\.", driver):
        out["driver_branch"] = f"r{driver[:3]}"
    elif facts.get("driver_cuda"):
        out["driver_branch"] = f"cuda{facts['driver_cuda']}"
    image = facts.get("image") or meta.get("image")
    if image:
        out["image"] = str(image)
    labels = meta.get("labels") or {}
    pool = next((labels[k] for k in _POOL_LABELS if labels.get(k)), None)
    if pool:
        out["node_pool"] = str(pool)
    if facts.get("nccl_version"):
        out["nccl_version"] = facts["nccl_version"]
    ns = meta.get("namespace") or facts.get("namespace")
    if ns:
        out["namespace"] = str(ns)
    return out


def find_fleet(incident: dict[str, Any], recent: Iterable[dict[str, Any]],
               threshold: int) -> tuple[str, str, list[dict[str, Any]]] | None:
    """(key, value, members) when ``threshold`` or more distinct workloads with the same
    category as ``incident`` share one of its key values; else None. ``recent`` are the
    open incidents of the window (``incident`` may be among them)."""
    category = incident["primary"]["category"] if "primary" in incident else incident["category"]
    if category not in FLEET_PRONE:
        return None
    mine = fleet_keys(incident)
    groups: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for other in [incident, *recent]:
        cat = other["primary"]["category"] if "primary" in other else other.get("category")
        if cat != category or other.get("severity", "critical") != "critical":
            continue
        theirs = fleet_keys(other)
        wl = workload_key(other.get("stream", ""), other.get("meta") or {})
        for key in KEYS:
            if key in mine and theirs.get(key) == mine[key]:
                groups[(key, mine[key])][wl] = other
    for key in KEYS:
        members = groups.get((key, mine.get(key, "")))
        if members and len(members) >= threshold:
            return key, mine[key], list(members.values())
    return None


def fleet_id(category: str, key: str, value: str, window_start: float) -> str:
    """Deterministic: every instance that detects the same fleet names it the same, so the
    store's primary key makes it exist (and page) once."""
    raw = f"fleet|{category}|{key}|{value}|{int(window_start)}"
    return "fleet-" + hashlib.sha256(raw.encode()).hexdigest()[:16]


def fleet_incident(category: str, key: str, value: str, members: list[dict[str, Any]],
                   window_start: float, now: float) -> Incident:
    """The fleet incident: the first member's root cause, the count, what they share."""
    first = min(members, key=lambda m: m.get("opened_at") or now)
    p = first.get("primary") or {}
    primary = Finding(
        tier=tier_of(category), category=category, stage=p.get("stage", "cuda_init"),
        confidence=float(p.get("confidence", 0.9)), method="fleet", rule=p.get("rule"),
        line=p.get("line", ""), remediation=p.get("remediation", ""),
        detail=f"{len(members)} workloads failed with {category} sharing {key}={value}",
    )
    streams = sorted({m.get("stream", "") for m in members})
    return Incident(
        id=fleet_id(category, key, value, window_start), stream=f"fleet/{category}/{key}={value}",
        run=0, primary=primary, facts={key: value}, meta={"fleet": True},
        opened_at=now, updated_at=now, evidence=[p.get("line", "")],
        explanation=first.get("explanation"),
        extra={"fleet": {"key": key, "value": value, "count": len(members),
                         "members": [m.get("id") for m in members][:200],
                         "streams": streams[:200]}},
    )
