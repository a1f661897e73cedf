"""The remediation playbook of ``rules/playbook.yaml`` applied to one incident."""

from __future__ import annotations

from typing import Any


def playbook_for(category: str, playbook: dict[str, Any], facts: dict[str, str]) -> dict[str, Any]:
    """Owner, first move, evidence to collect and (compatibility) the decision with its
    preconditions, for one incident."""
    entry = dict((playbook.get("categories") or {}).get(category) or {})
    out: dict[str, Any] = {
        "owner": entry.get("owner"),
        "first_move": " ".join(str(entry.get("first_move", "")).split()),
        "evidence": list(playbook.get("common_evidence") or []) + list(entry.get("evidence") or []),
    }
    decision = entry.get("decision")
    if decision:
        image = facts.get("image", "")
        bridge_ok = "kimi-k3" not in image and not image.endswith("cu130")
        out["decision"] = [
            {"option": "driver_upgrade", "text": " ".join(decision["driver_upgrade"].split()),
             "preconditions": ["compatibility proven (CUDA did not initialise)",
                               "maintenance window", "rollback node"]},
            {"option": "isolated_environment",
             "text": " ".join(decision["isolated_environment"].split()),
             "preconditions": ["a node pool already on the required driver branch"]},
            {"option": "cu129_bridge", "text": " ".join(decision["cu129_bridge"].split()),
             "preconditions": ["a -cu129 variant of the image exists"],
             "available": bridge_ok},
        ]
    return out
