"""Fleet incidents: when the same category hits N or more workloads within a window and
they share something (driver branch, image, node pool, NCCL version, namespace), one fleet
incident pages once and the per-pod incidents are inhibited.

Pure logic over incident bodies (``Incident.to_dict()``, as the store keeps them); the
notification stage decides when to call it.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from service.incidents.finding import Finding
from service.incidents.incident import Incident
from service.incidents.incident_json import FleetExtra, IncidentBody, IncidentExtra
from service.incidents.workload import workload_key
from service.taxonomy import tier_of

# What the members may share, most specific first (the first key reaching the threshold wins).
KEYS = ("driver_branch", "image", "node_pool", "nccl_version", "namespace")
_POOL_LABELS = (
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "kubernetes.azure.com/agentpool",
    "node-pool",
    "nodepool",
    "pool",
)


def fleet_keys(body: IncidentBody) -> dict[str, str]:
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


def member_unit(body: IncidentBody) -> str:
    """What a fleet counts: a workload on a node (``namespace/deployment/container@node``).
    Pods of one Deployment on different nodes count separately (a driver branch or node pool
    problem hits nodes); a pod replaced on the same node does not count twice. Without a
    node, the stream (one pod)."""
    meta = body.get("meta") or {}
    node = meta.get("node") or (body.get("facts") or {}).get("node")
    if not node:
        return str(body.get("stream", ""))
    return f"{workload_key(body.get('stream', ''), meta)}@{node}"


def _category(body: IncidentBody) -> str:
    return body["primary"]["category"]


def is_fleet(body: IncidentBody) -> bool:
    """A fleet incident (not a member)."""
    return bool((body.get("meta") or {}).get("fleet"))


def find_fleet(
    incident: IncidentBody,
    recent: Iterable[IncidentBody],
    threshold: int,
    prone: frozenset[str],
) -> tuple[str, str, list[IncidentBody]] | None:
    """(key, value, members) when ``threshold`` or more distinct workloads/nodes
    (:func:`member_unit`) with the same category as ``incident`` share one of its key values;
    else None. ``recent`` are the open incidents of the window (``incident`` may be among
    them); ``members`` are all of them sharing the key (``incident`` included), once each.
    ``prone``: the fleet-prone categories (the rule book's, a team's override included)."""
    category = _category(incident)
    if category not in prone or is_fleet(incident):
        return None
    mine = fleet_keys(incident)
    groups: dict[tuple[str, str], dict[str, IncidentBody]] = defaultdict(dict)
    units: dict[tuple[str, str], set[str]] = defaultdict(set)
    for other in [incident, *recent]:
        if (
            _category(other) != category
            or other.get("severity", "critical") != "critical"
            or is_fleet(other)
        ):
            continue
        theirs = fleet_keys(other)
        ident = str(other.get("id") or id(other))
        for key in KEYS:
            if key in mine and theirs.get(key) == mine[key]:
                groups[(key, mine[key])].setdefault(ident, other)
                units[(key, mine[key])].add(member_unit(other))
    for key in KEYS:
        found = (key, mine.get(key, ""))
        if len(units.get(found, ())) >= threshold:
            return key, mine[key], list(groups[found].values())
    return None


def fleet_id(category: str, key: str, value: str, window_start: float) -> str:
    """Deterministic: every instance that detects the same fleet names it the same, so the
    store's primary key makes it exist (and page) once."""
    raw = f"fleet|{category}|{key}|{value}|{int(window_start)}"
    return "fleet-" + hashlib.sha256(raw.encode()).hexdigest()[:16]


def fleet_stream(category: str, key: str, value: str) -> str:
    return f"fleet/{category}/{key}={value}"


def shared_meta(members: list[IncidentBody]) -> dict[str, Any]:
    """Metadata every member has in common (namespace, container, image, labels), so routes
    and silences written for the pods (``namespace: [prod]``, ``label:team``) match the
    fleet too."""
    metas = [m.get("meta") or {} for m in members]
    out: dict[str, Any] = {}
    for k in ("namespace", "container", "image"):
        values = {str(m.get(k)) for m in metas if m.get(k)}
        if len(values) == 1 and all(m.get(k) for m in metas):
            out[k] = values.pop()
    label_sets = [m.get("labels") or {} for m in metas]
    if label_sets and all(isinstance(x, dict) for x in label_sets):
        common = dict(label_sets[0])
        for other in label_sets[1:]:
            common = {k: v for k, v in common.items() if other.get(k) == v}
        if common:
            out["labels"] = common
    return out


def fleet_detail(category: str, key: str, value: str, count: int) -> str:
    return f"{count} workloads failed with {category} sharing {key}={value}"


def fleet_extra(key: str, value: str, members: list[IncidentBody]) -> FleetExtra:
    """``extra.fleet``: what the members share, how many workloads/nodes, who they are."""
    return {
        "key": key,
        "value": value,
        "count": len({member_unit(m) for m in members}),
        "incidents": len(members),
        "members": sorted(str(m.get("id")) for m in members)[:200],
        "streams": sorted({str(m.get("stream", "")) for m in members})[:200],
    }


def fleet_incident(
    category: str,
    key: str,
    value: str,
    members: list[IncidentBody],
    window_start: float,
    now: float,
) -> Incident:
    """The fleet incident: the first member's root cause, the count, what they share."""
    first = min(members, key=lambda m: m.get("opened_at") or now)
    p = first.get("primary") or {}
    extra = fleet_extra(key, value, members)
    primary = Finding(
        tier=tier_of(category),
        category=category,
        stage=p.get("stage", "cuda_init"),
        confidence=float(p.get("confidence", 0.9)),
        method="fleet",
        rule=p.get("rule"),
        line=p.get("line", ""),
        remediation=p.get("remediation", ""),
        detail=fleet_detail(category, key, value, extra["count"]),
    )
    return Incident(
        id=fleet_id(category, key, value, window_start),
        stream=fleet_stream(category, key, value),
        run=0,
        primary=primary,
        facts={key: value},
        meta={**shared_meta(members), "fleet": True},
        opened_at=now,
        updated_at=now,
        evidence=[p.get("line", "")],
        explanation=first.get("explanation"),
        extra={"fleet": extra},
    )


def with_members(fleet: IncidentBody, members: list[IncidentBody], now: float) -> IncidentBody:
    """The fleet incident body after its member list changed (count, members, detail)."""
    before: IncidentExtra = fleet.get("extra") or {}
    old = before.get("fleet")
    key, value = (old.get("key", ""), old.get("value", "")) if old else ("", "")
    extra = fleet_extra(key, value, members)
    primary = fleet["primary"]
    return {
        **fleet,
        "extra": {**before, "fleet": extra},
        "primary": {
            **primary,
            "detail": fleet_detail(primary["category"], key, value, extra["count"]),
        },
        "meta": {**shared_meta(members), "fleet": True},
        "updated_at": now,
    }
