"""Kubernetes evidence (events, pod status; see :mod:`service.ingest.kube`) in the classifier.

An evidence line is not a line of the container's log: it never moves the stream's stage or
status and is never guessed at by the text model. Only the signatures classify it
(``rules/signatures/kubernetes.yaml``, and ``OOMKilled`` / exit code 137 in capacity.yaml),
as a finding of the stream's current run; anything else is evidence of the open incident.

* The same event (uid and count) or container termination (container id and finish time)
  seen again - a pod's status is re-sent on every change - counts once.
* A record that names only the pod (FailedScheduling, an eviction, a device-plugin
  admission failure) goes to the pod's stream the classifier knows (the one with an open
  incident, else the latest), else to ``namespace/pod``.
* A crash-loop back-off on a stream with an open incident confirms that incident's crash
  loop (the registered crash-loop judgement, :mod:`.judgements.crash_loops`) rather than
  opening another; without one it opens a low-priority ``unknown`` symptom a root cause
  replaces.
* The first line of one of the pod's containers resolves an open scheduling incident of
  the pod's own stream (``namespace/pod``): the pod was scheduled after all.

The engine routes a record (:func:`route`) and runs its chain of stages - :func:`read`,
:class:`~.chain.Match` (signatures only), :class:`CrashLoopBackOff`, :class:`Find` - whose events the incident book
applies as a log line's; :func:`pod_started` when a pod's container appears.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from service.classify import events as ev
from service.classify.findings import Findings
from service.classify.judgements.registry import Judges
from service.classify.stream_state import StreamState
from service.incidents.incident import Change, Incident
from service.parse import line as L
from service.records import LogRecord

SCHEDULING_RULES = frozenset(("k8s-failed-scheduling", "k8s-failed-scheduling-gpu"))


def route(rec: LogRecord, streams: Mapping[str, StreamState]) -> None:
    """Point a pod-only record at the pod's known stream (``rec.stream`` is changed)."""
    kube = rec.meta.get("kube") or {}
    if not kube.get("pod_only"):
        return
    prefix = rec.stream + "/"
    best: StreamState | None = None
    for key, st in streams.items():  # pod-only records are rare: a scan is fine
        if not key.startswith(prefix):
            continue
        if best is None or _rank(st) > _rank(best):
            best = st
    if best is not None:
        rec.stream = best.key
        if best.meta.get("container"):
            rec.meta["container"] = best.meta["container"]


def _rank(st: StreamState) -> tuple[bool, float, int]:
    return (open_critical(st) is not None, st.last_time or 0.0, st.seq)


def open_critical(st: StreamState) -> Incident | None:
    """The stream's latest open failure, if any."""
    return next(
        (i for i in reversed(st.incidents) if i.status == "open" and i.severity == "critical"), None
    )


def read(seen: ev.Seen) -> Sequence[ev.Event]:
    """The evidence line of one record (counted on its stream), or nothing to read: seen
    before, or a lifecycle record (its pod ended or was created: noted for
    :mod:`service.classify.restarts`) with nothing else in it."""
    kube = seen.evidence or {}
    evidence_id, life = kube.get("id"), kube.get("life")
    if evidence_id and evidence_id in seen.st.kube_seen:
        seen.done = True
        return ()
    if life and kube.get("life_only"):  # a controller's or the pod's lifecycle
        seen.done = True
        return [ev.Observed(evidence_id, life, seen.time, counts=False)]
    seen.line = L.parse_line(seen.text, pasted=False)
    return [ev.Observed(evidence_id, life, seen.time, counts=True)]


class CrashLoopBackOff:
    """A crash-loop back-off on a stream with an open failure: the judges say whether it
    confirms that failure's crash loop (:mod:`.judgements.crash_loops`)."""

    def __init__(self, judges: Judges) -> None:
        self.judges = judges

    def __call__(self, seen: ev.Seen) -> Sequence[ev.Event]:
        failing = open_critical(seen.st)
        if failing is None or seen.line is None:
            return ()
        loop = self.judges.evidence(failing, [s.id for s, _ in seen.hits.signatures])
        if loop is None:
            return ()
        seen.done = True
        known = failing.crash_loop is not None
        return [ev.BackOff(failing, seen.line.text, None if known else loop, seen.time)]


class Find:
    """What the signatures find on an evidence line (never the text model), else the line
    is evidence of the open incident."""

    def __init__(self, findings: Findings) -> None:
        self.findings = findings

    def __call__(self, seen: ev.Seen) -> Sequence[ev.Event]:
        st, line, sigs = seen.st, seen.line, seen.hits.signatures
        assert line is not None
        found = self.findings.of_line(st, line, sigs, seen.time) if sigs else None
        return [ev.Noted(line.text) if found is None else ev.Found(found, None)]


def pod_started(
    st: StreamState, streams: Mapping[str, StreamState], time: float | None
) -> list[Change]:
    """A container stream of a pod just appeared: the pod's open scheduling incident (on
    ``namespace/pod``, in memory) is resolved."""
    ns, pod = st.meta.get("namespace"), st.meta.get("pod")
    placeholder = streams.get(f"{ns}/{pod}") if ns and pod else None
    if placeholder is None or placeholder is st:
        return []
    st.pod_life.inherit(placeholder.pod_life)
    changes: list[Change] = []
    for inc in list(placeholder.incidents):
        if inc.status == "open" and inc.primary.rule in SCHEDULING_RULES:
            inc.status, inc.resolved_at = "resolved", time
            inc.resolution = f"the pod was scheduled: {st.key} started"
            placeholder.incidents.remove(inc)
            placeholder.status = "stopped"
            changes.append(Change("resolved", inc))
    return changes
