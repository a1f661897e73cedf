"""Whole-log classification: records in, one report per stream out (CLI, API, evaluate)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from typing_extensions import TypedDict

from service.classify.engine import Classifier
from service.classify.stream_state import STARTING
from service.incidents.codec import JsonObject, Number
from service.incidents.incident import Change, Incident
from service.incidents.incident_json import IncidentSummary
from service.ingest.envelope import Format
from service.ingest.timestamps import line_time
from service.offline import blockscan
from service.records import LogRecord
from service.sources.files import read_files
from service.taxonomy import STAGE_INDEX, reach_before, reached_by


class Stopped(TypedDict):
    """Where a log that ends mid-startup stopped: the stage, since when, seconds without
    progress, and that stage's stall deadline."""

    stage: str | None
    since: float | None
    no_progress_s: float | None
    deadline_s: Number | None  # as the rules give it (whole seconds stay an int)


class StreamReport(TypedDict):
    """One stream's report (``classify --json``, ``POST /classify``)."""

    stopped: Stopped | None
    stream: str
    status: str
    stage: str | None
    incidents: list[IncidentSummary]  # failures, root cause first ([] for a healthy stream)
    warnings: list[IncidentSummary]  # never page
    facts: dict[str, str]
    timeline: dict[str, Number]
    meta: JsonObject
    lines: int


def order_incidents(incidents: Iterable[Incident]) -> list[Incident]:
    """Root cause first: paging incidents before warnings, then in order of appearance."""
    return sorted(incidents, key=lambda i: (i.severity != "critical", i.primary.seq))


def classify_records(
    records: Iterable[LogRecord], classifier: Classifier | None = None, *, now: float | None = None
) -> list[StreamReport]:
    """Classify whole logs; one report per stream, in order of first appearance.

    Lines without an envelope time take the time they print themselves (read while a
    stream starts, and for its last line). A stream that ends in the middle of its startup is
    checked for a stall at ``now`` (a live capture) or at its own last timestamp, with the
    service's deadlines, and reports where it stopped."""
    clf = classifier or Classifier()
    seen = dict(_by_stream(records, clf, now))
    return finish(clf, list(seen), seen, now)


def classify_paths(
    paths: Iterable[str],
    classifier: Classifier,
    *,
    fmt: Format | str = "auto",
    now: float | None = None,
    on_block: Callable[[int], None] | None = None,
) -> list[StreamReport]:
    """Classify files (``-`` = stdin): raw and CRI files by blocks
    (:mod:`service.offline.blockscan`), the others line by line; same reports either way."""

    seen: dict[str, dict[str, Incident]] = {}  # in order of first appearance
    for path in paths:
        scan_fmt = blockscan.eligible(path, fmt)
        if scan_fmt is not None:
            pairs = [
                blockscan.classify_file(
                    path, classifier, scan_fmt, on_block, decode_as=fmt, year=_year(now)
                )
            ]
        else:
            pairs = _by_stream(read_files([path], fmt=fmt), classifier, now)
        for key, incs in pairs:
            seen.setdefault(key, {}).update(incs)
    return finish(classifier, list(seen), seen, now)


def _by_stream(
    records: Iterable[LogRecord], clf: Classifier, now: float | None
) -> list[tuple[str, dict[str, Incident]]]:
    seen: dict[str, dict[str, Incident]] = {}
    year = _year(now)
    last: dict[str, str] = {}
    for rec in records:
        if rec.time is None:
            st = clf.tracker.streams.get(rec.stream)
            if st is None or st.status == STARTING:
                rec.time = line_time(rec.text, year)
            else:
                last[rec.stream] = rec.text
        changes = clf.feed(rec)
        seen.setdefault(rec.stream, {})  # after feed: a pod-only Kubernetes record is re-keyed
        _collect(seen, changes)
    for key, text in last.items():
        t = line_time(text, year)
        st = clf.state(key)
        if t is not None and (st.last_time is None or t > st.last_time):
            st.last_time = t
    return list(seen.items())


def _year(now: float | None) -> int:
    """The year that completes line times printed without one (``now``'s, else this one)."""
    return time.gmtime(now if now is not None else time.time()).tm_year


def finish(
    clf: Classifier, order: list[str], seen: dict[str, dict[str, Incident]], now: float | None
) -> list[StreamReport]:
    """End of the input: truncated tracebacks, stalls and findings held for an outcome, then
    one report per stream."""
    for key in order:
        st = clf.state(key)
        changes: list[Change] = []
        clf.close_truncated(st, changes)
        end = now if now is not None else st.last_time
        if end is not None:
            clf.check_stall(st, end, changes)
        clf.close_held(st, changes)
        _collect(seen, changes)
    # (a stream that only heard of its pod's lifecycle - created, deleted - has no report)
    return [
        stream_report(clf, key, seen[key].values(), now)
        for key in order
        if seen[key] or clf.state(key).seq
    ]


def _collect(seen: dict[str, dict[str, Incident]], changes: list[Change]) -> None:
    for ch in changes:
        seen.setdefault(ch.incident.stream, {})[ch.incident.id] = ch.incident


def reached(stage: str | None, incidents: list[Incident]) -> str | None:
    """The stage a stream reached: its own, else (no stage line seen) the furthest stage its
    failures happened at, so the report never says "nothing" above a failure at a stage."""
    if stage is not None:
        return stage
    at = [i.stage for i in incidents if i.severity == "critical" and i.stage in STAGE_INDEX]
    return max(at, key=STAGE_INDEX.__getitem__, default=None)


def stream_report(
    clf: Classifier, key: str, incidents: Iterable[Incident], now: float | None = None
) -> StreamReport:
    st = clf.state(key)
    ordered = order_incidents(incidents)
    stopped: Stopped | None = None
    # the log ends mid-start-up: a start-up line was its latest news (a stream that never
    # showed one - another program's log the stage rules do not know - says nothing of it)
    if st.status == STARTING and not st.shutting_down and st.stage is not None:
        since = st.last_stage_change if st.last_stage_change is not None else st.first_time
        end = now if now is not None else st.last_time
        stopped = {
            "stage": st.stage,
            "since": since,
            "no_progress_s": None if since is None or end is None else end - since,
            "deadline_s": clf.stall_deadlines.get(st.stage or ""),
        }
    # never a rung after the current run's failure (its root cause comes first)
    failed = next((i.stage for i in ordered if i.severity == "critical" and i.run == st.run), None)
    return {
        "stopped": stopped,
        "stream": key,
        "status": st.status,
        "stage": reach_before(reached(st.stage, ordered), failed),
        # failures only (root cause first; [] for a healthy stream); warnings never page
        "incidents": [i.summary() for i in ordered if i.severity == "critical"],
        "warnings": [i.summary() for i in ordered if i.severity != "critical"],
        "facts": dict(st.facts),
        "timeline": reached_by(st.timeline, failed),
        "meta": {k: v for k, v in st.meta.items() if k not in ("fd", "partial")},
        "lines": st.seq,
    }
