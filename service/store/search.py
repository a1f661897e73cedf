"""Free-text search over incidents (``GET /incidents?q=``): what an incident is found by is
one lower-cased column, ``search``, written with every upsert of the incident; a query is
cut into words and every word must occur in it (SQLite and PostgreSQL alike, ``LIKE`` with
the word's wildcards escaped)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, func

from service.incidents.incident_json import IncidentBody
from service.store.schema import incidents

MAX_WORDS = 8
MAX_TEXT = 8192
SEARCHED_FACTS = ("model", "served_model_name", "image", "vllm_version", "gpu_model")


def search_text(body: IncidentBody) -> str:
    """Pod, namespace, node, container, stream, model and image, tier, category, stage and
    the root-cause line of an incident, lower-cased (what ``q`` looks in)."""
    meta: dict[str, Any] = dict(body.get("meta") or {})
    facts: dict[str, Any] = dict(body.get("facts") or {})
    p = body.get("primary") or {}
    parts = [
        *(meta.get(k) for k in ("namespace", "pod", "node", "container", "image")),
        body.get("stream"),
        *(facts.get(k) for k in SEARCHED_FACTS),
        p.get("tier"),
        p.get("category"),
        p.get("stage"),
        p.get("line"),
    ]
    return "\n".join(str(x) for x in parts if x not in (None, ""))[:MAX_TEXT].lower()


def words(q: str) -> list[str]:
    """The words of a query (at most ``MAX_WORDS``), lower-cased."""
    return [w for w in q.lower().split() if w][:MAX_WORDS]


def matches(q: str) -> ColumnElement[bool] | None:
    """Every word of ``q`` occurs in the incident's search text; None for an empty query."""
    ws = words(q)
    if not ws:
        return None
    col = func.coalesce(incidents.c.search, "")
    return and_(*(col.contains(w, autoescape=True) for w in ws))
