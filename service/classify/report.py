"""Whole-log classification: records in, one report per stream out (CLI, API, evaluate)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from service.classify.engine import Change, Classifier
from service.classify.incident import Incident
from service.classify.stream_state import STARTING
from service.ingest.timestamps import line_time
from service.records import LogRecord


def order_incidents(incidents: Iterable[Incident]) -> list[Incident]:
    """Root cause first: paging incidents before warnings, then in order of appearance."""
    return sorted(incidents, key=lambda i: (i.severity != "critical", i.primary.seq))


def classify_records(records: Iterable[LogRecord], classifier: Classifier | None = None,
                     *, now: float | None = None) -> list[dict[str, Any]]:
    """Classify whole logs; one report dict per stream, in order of first appearance.

    Lines without an envelope time take the time they print themselves. A stream that ends
    in the middle of its startup is checked for a stall at ``now`` (a live capture) or at its
    own last timestamp, with the service's deadlines, and reports where it stopped."""
    clf = classifier or Classifier()
    seen: dict[str, dict[str, Incident]] = {}
    order: list[str] = []
    year = time.gmtime(now if now is not None else time.time()).tm_year
    for rec in records:
        if rec.time is None:
            rec.time = line_time(rec.text, year)
        changes = clf.feed(rec)
        if rec.stream not in seen:  # after feed: a pod-only Kubernetes record is re-keyed
            seen[rec.stream] = {}
            order.append(rec.stream)
        _collect(seen, changes)
    for key in order:
        st = clf.state(key)
        changes: list[Change] = []
        clf.close_truncated(st, changes)
        end = now if now is not None else st.last_time
        if end is not None:
            clf.check_stall(st, end, changes)
        _collect(seen, changes)
    return [stream_report(clf, key, seen[key].values(), now) for key in order]


def _collect(seen: dict[str, dict[str, Incident]], changes: list[Change]) -> None:
    for ch in changes:
        seen.setdefault(ch.incident.stream, {})[ch.incident.id] = ch.incident


def stream_report(clf: Classifier, key: str, incidents: Iterable[Incident],
                  now: float | None = None) -> dict[str, Any]:
    st = clf.state(key)
    ordered = order_incidents(incidents)
    stopped = None
    if st.status == STARTING and not st.shutting_down:  # the log ends mid-startup
        since = st.last_stage_change if st.last_stage_change is not None else st.first_time
        end = now if now is not None else st.last_time
        stopped = {"stage": st.stage, "since": since,
                   "no_progress_s": None if since is None or end is None else end - since,
                   "deadline_s": clf.stall_deadlines.get(st.stage or "")}
    return {
        "stopped": stopped,
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
