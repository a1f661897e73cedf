"""Whether one pod replaced another: evidence, never timing alone.

Replicas of one Deployment on one node (eight pods, one GPU each, is the usual GPU node)
share their workload and node, so a replica that starts after another failed looks exactly
like its replacement when only times are known. A pod continues another pod's failure only
when Kubernetes said so:

* the predecessor **ended** before the new pod started: a ``Killing`` event that is not a
  probe's restart, an eviction or preemption, a controller's ``SuccessfulDelete``, a watch
  ``DELETED``, a ``deletionTimestamp``, a final pod phase (a Job's failed pod);
* or the new pod was **created** by its controller (``SuccessfulCreate``) after the
  predecessor's failure.

StatefulSet and LeaderWorkerSet pods keep their name when replaced (the same stream, a new
container), so they never need this. Without evidence, replicas stay apart: each failure is
its own incident. The evidence is kept on the pods' streams (``StreamState.pod_life``), so
it is saved and reloaded with them.

Above that evidence, :class:`Restarts` judges the first failure of a restarted run: the same
failure again (the open incident counts one more restart and attempt; whether that makes a
crash loop is the registered judgement's word, :mod:`.judgements.crash_loops`), a different
one (a new incident linked to the one before), or, while only a cascade or an unknown error
is known, not decided yet (``StreamState.pending``: settled once the root cause is known or
the attempt ends). The open failures of each workload on each node are indexed in its
:class:`WorkloadState` (saved with the streams), so a replacement pod finds its
predecessor's - after a restart of the service too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from service.classify.run_state import MAX_FAILURES, Failure
from service.classify.stream_state import FAILED, STOPPED, StreamState
from service.incidents.finding import Finding
from service.incidents.incident import Change, ChangeKind, CrashLoop, Incident
from service.incidents.incident_json import Attempt, LastFailure, Link
from service.incidents.workload import WorkloadState, restart_unit
from service.taxonomy import reached_by

# clock skew allowed between the API server's event times and the node's log times
SKEW_S = 2.0
MAX_ATTEMPTS_KEPT = 20  # attempts listed in an incident's timeline (the count goes on)


def evidence(old: StreamState, new: StreamState, failure: Incident) -> int:
    """How strongly Kubernetes says ``new``'s pod replaced ``old``'s, whose open ``failure``
    it may continue: 2 the old pod ended before the new one started, 1 the new pod was
    created after the failure (its controller replaced *some* pod), 0 no word of it."""
    if old.status not in (FAILED, STOPPED):
        return 0
    ended = old.pod_life.ended
    if ended is not None:
        at = ended.at
        return 2 if at is None or new.first_time is None or at <= new.first_time + SKEW_S else 0
    created = new.pod_life.created
    if created is not None:
        at, failed = created.at, failure.opened_at
        return 1 if at is None or failed is None or at + SKEW_S >= failed else 0
    return 0


class Streams(Protocol):
    """The streams a restart may continue (:class:`~service.classify.tracker.StreamTracker`)."""

    def find(self, key: str) -> StreamState | None: ...

    def workload(self, key: str) -> WorkloadState: ...

    def changed(self, key: str) -> None: ...


class Restarts:
    """Restart judgements over the streams and their workloads (``streams``)."""

    def __init__(
        self, streams: Streams, crash_loop: Callable[[Incident], CrashLoop | None]
    ) -> None:
        """``crash_loop``: whether an incident that failed the same way once more is a crash
        loop now (the registered judgement's answer, :mod:`.judgements.crash_loops`)."""
        self.streams = streams
        self.crash_loop = crash_loop

    def priors(self, st: StreamState) -> list[Incident]:
        """Open failures of earlier runs of this workload, latest first: this stream's, then
        those of a pod this one replaced (:meth:`replaced_priors`)."""
        mine = [
            i
            for i in st.incidents
            if i.status == "open"
            and i.severity == "critical"
            and i.run < st.run
            and i.pending_restart is None
        ]
        mine.sort(key=lambda i: i.run, reverse=True)
        return mine + self.replaced_priors(st)

    def replaced_priors(self, st: StreamState) -> list[Incident]:
        """Open failures of pods ``st``'s pod replaced (same workload on the same node, and
        Kubernetes said so: :func:`evidence`), the strongest evidence only."""
        unit = restart_unit(st.key, st.meta)
        if unit is None:
            return []
        w = self.streams.workload(unit[0])
        ids = w.failures.get(unit[1])
        if not ids:
            return []
        out: list[tuple[int, Incident]] = []
        for iid, key in reversed(list(ids.items())):  # latest failure first
            if key == st.key:
                continue
            other = self.streams.find(key)  # (loaded when it is not in memory)
            inc = (
                None
                if other is None
                else next((i for i in other.incidents if i.id == iid and i.status == "open"), None)
            )
            if other is None or inc is None:
                del ids[iid]
                self.streams.changed(w.key)
                continue
            # replaced, not a replica beside it: only Kubernetes' word counts, never timing
            strength = evidence(other, st, inc)
            if strength:
                out.append((strength, inc))
        best = max((s for s, _ in out), default=0)  # a pod that ended beats "some pod"
        return [inc for s, inc in out if s == best]

    def announce(self, st: StreamState, inc: Incident, changes: list[Change]) -> None:
        """``inc`` is opened: remembered as the workload's latest failure, so a restart that
        fails the same way continues it, and among the stream's failures."""
        st.last_failure = last_failure(inc, st)
        st.failures.append(Failure(inc.opened_at, inc.category, inc.id))
        del st.failures[:-MAX_FAILURES]
        self._index(st, inc)
        changes.append(Change("opened", inc))

    def _index(self, st: StreamState, inc: Incident) -> None:
        """``inc`` is an open failure of the workload ``st`` runs, on its node."""
        unit = restart_unit(st.key, st.meta)
        if not unit:
            return
        w = self.streams.workload(unit[0])
        ids = w.failures.pop(unit[1], None) or {}
        ids[inc.id] = st.key
        w.failures[unit[1]] = ids  # most recently failed last
        self.streams.changed(w.key)

    def settle(
        self, st: StreamState, changes: list[Change], final: bool
    ) -> tuple[Incident, Incident] | None:
        """Judge a restart's pending incident once its root cause is known (a cause with a
        category), or at the end of the attempt (``final``): the same category as an open
        failure of the workload → that incident counts one more restart; another category →
        announced as a new incident; still unknown at the end → the same failure again.
        Returns (pending incident, the one it was folded into) when it was folded."""
        pending_id = st.pending.incident if st.pending else None
        inc = next((i for i in st.incidents if i.id == pending_id), None)
        if inc is None or inc.status != "open" or inc.pending_restart is None:
            st.pending = None
            return None
        priors = [p for p in self.priors(st) if p is not inc]
        same = next((p for p in priors if p.category == inc.category), None)
        decisive = inc.primary.role == "cause" and inc.category != "unknown"
        if same is None and not decisive and not final:
            return None
        st.pending = None
        inc.pending_restart = None
        changes[:] = [c for c in changes if c.incident is not inc]  # said nothing yet
        if same is None and inc.category == "unknown" and priors:
            same = priors[0]
        if same is None:
            self.announce(st, inc, changes)
            return None
        st.incidents.remove(inc)
        st.runs_failed -= 1
        self.fold(st, inc.primary, same, changes, inc.related, at=inc.opened_at)
        return inc, same

    def fold(
        self,
        st: StreamState,
        f: Finding,
        prior: Incident,
        changes: list[Change],
        others: Iterable[Finding] = (),
        at: float | None = None,
    ) -> Incident:
        """The workload failed the same way again: one more restart of ``prior`` (moved to
        this stream when a replacement pod failed), a crash loop at the configured count.
        Only the change into a crash loop (or a new root cause) is notified."""
        also: tuple[str, ...] = ()
        attempts = prior.extra.setdefault("attempts", [])
        if not attempts:  # the first restart: the first attempt too
            home = st if prior.stream == st.key else self.streams.find(prior.stream)
            first = home.last_failure if home is not None else None
            attempts.append(
                attempt(
                    1,
                    prior.run,
                    prior.stream,
                    prior.meta,
                    first.get("started") if first and first.get("id") == prior.id else None,
                    prior.opened_at,
                    prior.stage,
                )
            )
        if prior.stream != st.key:
            also = (prior.stream,)
            old = self.streams.find(prior.stream)
            if old is not None and prior in old.incidents:
                old.incidents.remove(prior)
            prior.stream = st.key
            prior.meta = dict(st.meta)
            st.incidents.append(prior)
        prior.restarts += 1
        prior.run = st.run
        at = f.time if at is None else at
        attempts.append(
            attempt(prior.restarts + 1, st.run, st.key, st.meta, st.first_time, at, f.stage)
        )
        del attempts[1 : -(MAX_ATTEMPTS_KEPT - 1)]  # the first attempt and the latest ones
        prior.updated_at = at
        prior.timeline = reached_by(st.timeline, prior.stage)
        kind: ChangeKind = "evidence"
        for finding in (f, *others):
            if prior.add(finding):
                kind = "updated"
        loop = self.crash_loop(prior)
        if loop is not None:
            if prior.crash_loop is None:
                kind = "updated"
            prior.mark_crash_loop(loop)
        st.status = FAILED
        st.runs_failed += 1
        st.last_failure = last_failure(prior, st)
        self._index(st, prior)
        changes.append(Change(kind, prior, also))
        return prior


def link(inc: Incident) -> Link:
    """How a later incident names the one before it."""
    return {"id": inc.id, "category": inc.category, "stage": inc.stage, "restarts": inc.restarts}


def last_failure(inc: Incident, st: StreamState) -> LastFailure:
    """``inc`` as the latest failure of ``st``'s workload: its link, the run, its start."""
    return {**link(inc), "run": st.run, "started": st.first_time}


def link_of(last: LastFailure) -> Link:
    """The link in a stream's latest failure."""
    return {
        "id": last["id"],
        "category": last["category"],
        "stage": last["stage"],
        "restarts": last["restarts"],
    }


def attempt(
    n: int,
    run: int,
    stream: str,
    meta: dict[str, Any],
    started: float | None,
    failed: float | None,
    stage: str,
) -> Attempt:
    """One failed start in an incident's ``extra.attempts`` timeline (what is not known is
    left out)."""
    out: Attempt = {"attempt": n, "run": run, "stream": stream}
    if started is not None:
        out["started"] = started
    if failed is not None:
        out["failed"] = failed
    if stage is not None:
        out["stage"] = stage
    if meta.get("pod"):
        out["pod"] = meta["pod"]
    if meta.get("container_id"):
        out["container_id"] = meta["container_id"]
    if meta.get("node"):
        out["node"] = meta["node"]
    return out
