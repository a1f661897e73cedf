"""Whole-log classification: records in, one report per stream out (CLI, API, evaluate)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from service.classify.engine import Change, Classifier
from service.classify.incident import Incident
from service.records import LogRecord


def order_incidents(incidents: Iterable[Incident]) -> list[Incident]:
    """Root cause first: paging incidents before warnings, then in order of appearance."""
    return sorted(incidents, key=lambda i: (i.severity != "critical", i.primary.seq))


def classify_records(records: Iterable[LogRecord], classifier: Classifier | None = None
                     ) -> list[dict[str, Any]]:
    """Classify whole logs; one report dict per stream, in order of first appearance."""
    clf = classifier or Classifier()
    seen: dict[str, dict[str, Incident]] = {}
    order: list[str] = []
    for rec in records:
        if rec.stream not in seen:
            seen[rec.stream] = {}
            order.append(rec.stream)
        _collect(seen, clf.feed(rec))
    return [stream_report(clf, key, seen[key].values()) for key in order]


def _collect(seen: dict[str, dict[str, Incident]], changes: list[Change]) -> None:
    for ch in changes:
        seen.setdefault(ch.incident.stream, {})[ch.incident.id] = ch.incident


def stream_report(clf: Classifier, key: str, incidents: Iterable[Incident]) -> dict[str, Any]:
    st = clf.state(key)
    ordered = order_incidents(incidents)
    return {
        "stream": key,
        "status": st.status,
        "stage": st.stage,
        # failures only (root cause first; [] for a healthy stream); warnings never page
        "incidents": [i.summary() for i in ordered if i.severity == "critical"],
        "warnings": [i.summary() for i in ordered if i.severity != "critical"],
        "facts": dict(st.facts),
        "timeline": dict(st.timeline),
        "meta": {k: v for k, v in st.meta.items() if k not in ("fd", "partial")},
        "lines": st.seq,
    }
