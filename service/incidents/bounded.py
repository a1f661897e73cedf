"""What the store keeps of an incident's lines: each cut to :data:`MAX_STORED_LINE`
characters (a 1 MiB line would otherwise be rewritten with every snapshot)."""

from __future__ import annotations

from service.incidents.incident_json import IncidentBody, IncidentSummary
from service.incidents.snapshots import StreamSnapshot

MAX_STORED_LINE = 8192  # characters of one log line kept in the store


def _cap(text: str) -> str:
    if len(text) > MAX_STORED_LINE:
        return text[: MAX_STORED_LINE - 1] + "…"
    return text


def bounded_body(d: IncidentBody) -> IncidentBody:
    """An incident's body with every stored line cut to ``MAX_STORED_LINE`` (a 1 MiB line
    would otherwise be rewritten with every snapshot). Returns a copy; the in-memory
    incident keeps its lines."""
    return {
        **d,
        "primary": {**d["primary"], "line": _cap(d["primary"]["line"])},
        "evidence": [_cap(x) for x in d["evidence"]],
        "related": [{**r, "line": _cap(r["line"])} for r in d["related"]],
    }


def bounded_summary(d: IncidentSummary) -> IncidentSummary:
    """An incident's summary with every line cut as :func:`bounded_body` cuts them."""
    return {
        **d,
        "line": _cap(d["line"]),
        "evidence": [_cap(x) for x in d["evidence"]],
        "related": [{**r, "line": _cap(r["line"])} for r in d["related"]],
    }


def bounded_state(d: StreamSnapshot) -> StreamSnapshot:
    d["last_line"] = _cap(d["last_line"])
    d["incidents"] = [bounded_body(i) for i in d["incidents"]]
    return d
