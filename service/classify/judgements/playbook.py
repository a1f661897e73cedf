"""The remediation playbook of ``rules/playbook.yaml`` applied to one incident: the
category's owner, first move and evidence; a warning's own explanation and first move
(``warnings``); whether restarting can help a failure that repeats (``restarts``). What it
gives an incident is typed (:class:`~service.incidents.incident_json.Playbook`)."""

from __future__ import annotations

from typing import Any

from service.classify.rules import PlaybookRules
from service.incidents.incident_json import Decision, Playbook, WarningAdvice
from service.taxonomy import tier_of


def _text(value: Any) -> str:
    return " ".join(str(value or "").split())


def first_move(category: str, playbook: PlaybookRules) -> str:
    """The category's first move (``categories.<category>.first_move``), one line."""
    entry = (playbook.get("categories") or {}).get(category) or {}
    return _text(entry.get("first_move", ""))


def warning_advice(rule: str | None, playbook: PlaybookRules) -> WarningAdvice | None:
    """A warning's own entry (``warnings.<rule>``): owner, explanation, first move, evidence;
    None when the rules data has none for it."""
    entry = (playbook.get("warnings") or {}).get(rule or "")
    if not entry:
        return None
    return {
        "owner": entry.get("owner"),
        "explanation": _text(entry.get("explanation")),
        "first_move": _text(entry.get("first_move")),
        "evidence": list(entry.get("evidence") or []),
    }


def restart_advice(category: str, playbook: PlaybookRules) -> tuple[bool, str]:
    """(whether restarting the workload can help, why) for a failure that repeats: the
    category's entry under ``restarts.categories``, else its tier's, else the default."""

    rs = playbook.get("restarts") or {}
    entry = (
        (rs.get("categories") or {}).get(category)
        or (rs.get("tiers") or {}).get(tier_of(category))
        or rs.get("default")
        or {}
    )
    return bool(entry.get("helps", True)), _text(entry.get("why"))


def playbook_for(
    category: str, playbook: PlaybookRules, facts: dict[str, str], rule: str | None = None
) -> Playbook:
    """Owner, first move, evidence to collect and (compatibility) the decision with its
    preconditions, for one incident; a warning (``rule`` with a ``warnings`` entry) gets its
    own owner, explanation, first move and evidence instead of its category's."""
    own = warning_advice(rule, playbook)
    if own is not None:
        return {
            "owner": own["owner"],
            "explanation": own["explanation"],
            "first_move": own["first_move"],
            "evidence": list(playbook.get("common_evidence") or []) + own["evidence"],
        }
    entry = dict((playbook.get("categories") or {}).get(category) or {})
    out: Playbook = {
        "owner": entry.get("owner"),
        "first_move": " ".join(str(entry.get("first_move", "")).split()),
        "evidence": list(playbook.get("common_evidence") or []) + list(entry.get("evidence") or []),
    }
    decision = entry.get("decision")
    if decision:
        image = facts.get("image", "")
        bridge_ok = "kimi-k3" not in image and not image.endswith("cu130")
        decisions: list[Decision] = [
            {
                "option": "driver_upgrade",
                "text": " ".join(decision["driver_upgrade"].split()),
                "preconditions": [
                    "compatibility proven (CUDA did not initialise)",
                    "maintenance window",
                    "rollback node",
                ],
            },
            {
                "option": "isolated_environment",
                "text": " ".join(decision["isolated_environment"].split()),
                "preconditions": ["a node pool already on the required driver branch"],
            },
            {
                "option": "cu129_bridge",
                "text": " ".join(decision["cu129_bridge"].split()),
                "preconditions": ["a -cu129 variant of the image exists"],
                "available": bridge_ok,
            },
        ]
        out["decision"] = decisions
    return out
