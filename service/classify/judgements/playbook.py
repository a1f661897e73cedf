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


def _bridge_available(image: str, decision: dict[str, Any]) -> bool:
    """Whether the -cu129 bridge exists for ``image`` (the decision's
    ``cu129_bridge_unavailable``: names it contains, suffixes it ends with)."""
    never = decision.get("cu129_bridge_unavailable") or {}
    contains = [str(s) for s in never.get("image_contains") or []]
    suffixes = tuple(str(s) for s in never.get("image_ends_with") or [])
    return not any(s in image for s in contains) and not (suffixes and image.endswith(suffixes))


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
        bridge_ok = _bridge_available(facts.get("image", ""), decision)
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
