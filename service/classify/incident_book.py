"""The one place the stages' events are applied (:meth:`IncidentBook.apply`): the stream's
run moves on (:mod:`.runs`), findings and judgements attach to incidents, a restart's
failure is judged (:mod:`.restarts`), and every change is appended as a :class:`Change`.

A finding is attached to the run's open incident of its severity (a stronger root cause
takes over, the rest are its cascades and evidence) or opens one; the first failure of a
restarted run goes to :class:`Restarts`; every incident carries what :mod:`.explain` adds.
Warnings (role ``warning``) are incidents of their own that never page, one per rule and
run; everything else is the run's one ``critical`` incident.

A finding not fatal by itself is held (:mod:`.judgements.outcome`): the run's first failure
outcome opens the incident with the held findings (:meth:`IncidentBook.release`); when the
run went on instead, each becomes a warning (:meth:`IncidentBook.decide`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from service.classify import events as ev
from service.classify import runs
from service.classify.explain import COMPAT_TIER, Explainer
from service.classify.findings import Findings
from service.classify.judgements import outcome
from service.classify.judgements.stalls import is_stall
from service.classify.restarts import Restarts, link, link_of
from service.classify.rulebook import RuleBook
from service.classify.rules import PlaybookRules
from service.classify.run_state import MAX_HELD, Held, Pending
from service.classify.stream_state import (
    FAILED,
    READY,
    SERVING,
    STARTING,
    STOPPED,
    StreamState,
    merge_meta,
)
from service.classify.tracker import StreamTracker
from service.incidents.finding import Finding
from service.incidents.incident import Change, Incident, PendingRestart

MAX_NOTED = 60  # lines of evidence noted after the first error
MAX_SEEN = 256  # Kubernetes evidence ids remembered per stream


class IncidentBook:
    """Applies events to the streams' states and incidents."""

    def __init__(
        self,
        rules: RuleBook,
        playbook: PlaybookRules,
        findings: Findings,
        restarts: Restarts,
        tracker: StreamTracker,
        hold_s: float = 120.0,
        deadlines: Mapping[str, float] | None = None,
    ) -> None:
        self.hold_s = hold_s  # judgements.yaml outcome.hold_s
        self.deadlines = deadlines or {}  # stalls.deadlines_s: a start-up that did not go on
        self.cuda = rules.cuda
        self.explain = Explainer(rules, playbook)
        self.findings = findings
        self.restarts = restarts
        self.replaced = restarts.replaced_priors  # the open failures a pod continues
        self.tracker = tracker

    def apply(self, st: StreamState, events: Iterable[ev.Event], changes: list[Change]) -> None:
        """Apply ``events`` of stream ``st`` in order; what they changed goes to ``changes``."""
        for event in events:
            match event:
                case ev.Counted(time, opens):
                    st.seq += 1
                    if time is not None:
                        st.last_time = time
                        if opens and st.first_time is None:
                            st.first_time = time
                case ev.NewRun(time):
                    # a bind failure whose port is not bound yet waits on: the restart may be
                    # the retry that binds it (an app restarted beside the engine)
                    binds = [h for h in st.checks.held if outcome.rebind_failed(h)]
                    st.checks.held = [h for h in st.checks.held if not outcome.rebind_failed(h)]
                    if st.checks.held:  # the attempt ended: its held findings are decided
                        self.decide(st, None, True, changes)
                        if st.pending is not None:
                            self.restarts.settle(st, changes, True)
                    runs.new_run(st, time)
                    st.checks.held = binds + st.checks.held
                    merge_meta(st, st.meta, self.cuda)
                case ev.ApiServer(pid):
                    if st.checks.api_pid is None:
                        st.checks.api_pid = pid
                case ev.Reached(stage, time):
                    if runs.advance(st, stage, time, changes):
                        runs.resolve_passed(st, time, changes, self.replaced, self.tracker.find)
                case ev.Ready(time):
                    st.status = READY
                    st.checks.ready = True
                    self.tracker.good_start(st)
                    find = self.tracker.find
                    runs.resolve_passed(st, time, changes, self.replaced, find, ready=True)
                case ev.Serving():
                    st.checks.ready = True
                    if st.status in (STARTING, READY):
                        st.status = SERVING
                case ev.ShuttingDown(stopped):
                    st.shutting_down = True
                    if stopped:
                        st.status = STOPPED if st.status != FAILED else FAILED
                case ev.Facts(found):
                    for name, value in found:
                        st.facts.setdefault(name, value)
                case ev.LastLine(text):
                    st.last_line = text
                case ev.FrameHint(process, stage):
                    if stage is None:
                        st.frame_hint.pop(process, None)
                    else:
                        st.frame_hint[process] = stage
                case ev.Refined(finding, incident, stage):
                    changes += self.findings.refine(finding, incident, stage)
                case ev.Judged(judgement, time):
                    self.attach(st, self.findings.judged(st, judgement, time), changes)
                    inc = st.current() if judgement.stall else None
                    if inc is not None:
                        inc.extra["stall"] = True
                case ev.Found(finding, process):
                    inc = self.attach(st, finding, changes)
                    if process is not None:  # later frames of the process may refine it
                        self.tracker.tracks.watch((st.key, process), finding, inc)
                case ev.Hold(finding, process, yields, port, work):
                    if len(st.checks.held) < MAX_HELD:
                        held = Held(finding, process, yields, st.stage, st.status, port, work=work)
                        st.checks.held.append(held)
                    if process is not None:  # its later frames may still refine it
                        self.tracker.tracks.watch((st.key, process), finding, None)
                case ev.Bound(port):
                    for h in st.checks.held:
                        h.rebound = h.rebound or h.port == port
                case ev.Worked():
                    for h in st.checks.held:
                        h.rebound = h.rebound or h.work
                case ev.HeldDue(now, final):
                    if st.checks.held:
                        self.decide(st, now, final, changes)
                case ev.Noted(text):
                    self.note(st, text)
                case ev.Settle(final):
                    folded = self.restarts.settle(st, changes, final)
                    if folded is not None:  # frames refined later update the one it joined
                        self.tracker.tracks.repoint(*folded)
                case ev.Observed(evidence_id, life, time, counts):
                    if evidence_id:
                        st.kube_seen.append(evidence_id)
                        del st.kube_seen[:-MAX_SEEN]
                    if life:
                        st.pod_life.note(life, time)
                    if counts:
                        st.seq += 1
                        if time is not None and (st.last_time is None or time > st.last_time):
                            st.last_time = time
                case ev.BackOff(inc, text, loop, time):
                    inc.note(text)
                    if loop is None:  # (a crash loop already known is left as it is)
                        changes.append(Change("evidence", inc))
                    else:
                        inc.mark_crash_loop(loop)
                        inc.updated_at = time
                        changes.append(Change("updated", inc))

    def attach(self, st: StreamState, f: Finding, changes: list[Change]) -> Incident | None:
        """Attach ``f`` to the run's open incident of its severity, or open one (with the
        run's held findings: ``f`` is the outcome they waited for)."""
        severity = "warning" if f.role == "warning" else "critical"
        if severity == "critical" and st.checks.held and st.current() is None:
            return self.release(st, f, changes)
        if severity == "warning":
            inc = next(
                (
                    i
                    for i in st.incidents
                    if i.severity == "warning"
                    and i.run == st.run
                    and i.primary.rule == f.rule
                    and i.status == "open"
                ),
                None,
            )
        else:
            inc = st.current(severity)
        if inc is None:
            if severity == "critical":
                # the workload restarted and failed again: the same way (the prior counts a
                # restart), another way (a new incident linked to the prior), or not decided
                # yet while only a cascade or an unknown error is known
                priors = self.restarts.priors(st)
                same = next((p for p in priors if p.category == f.category), None)
                if same is not None:
                    return self.restarts.fold(st, f, same, changes)
                if priors:
                    undecided = f.role != "cause" or f.category == "unknown"
                    return self.open(
                        st, f, severity, changes, previous=priors[0], pending=undecided
                    )
            return self.open(st, f, severity, changes)
        inc.note(f.line)
        inc.updated_at = f.time
        self.explain.implied_stage(inc, f, changes)
        if inc.add(f):
            self.explain.refresh(st, inc)
            changes.append(Change("updated", inc))
        else:
            changes.append(Change("evidence", inc))
        return inc

    def release(self, st: StreamState, f: Finding | None, changes: list[Change]) -> Incident | None:
        """The run shows a failure outcome, ``f`` (None: it ended mid-start-up): its held
        findings page with it, in order of appearance and ``f`` last, so the ranking of root
        causes is the one they would have had at once; a held finding that yields (an
        ERROR-level fallback, a model's guess) is only related to a later failure's incident
        (a cascade or a stall is an outcome, not a better cause: it competes with them; under a
        cascade - "WorkerProc hit an exception" - it ranks as the cascade does, so the failure
        the cascade announces, its traceback's exception, still takes the root cause)."""
        held, st.checks.held = st.checks.held, []
        failure = f is not None and f.role in ("cause", "symptom") and not is_stall(f.rule)
        cascade = f is not None and f.role == "cascade"
        inc: Incident | None = None
        later = [h.finding for h in held if h.yields and failure]
        for h in held:
            if not (h.yields and failure):
                if h.yields and cascade and h.finding.role in ("cause", "symptom"):
                    h.finding.role = "cascade"
                inc = self.attach(st, h.finding, changes)
        if f is not None:
            inc = self.attach(st, f, changes)
        if inc is not None and later:
            for g in later:
                inc.relate(g)
            changes.append(Change("evidence", inc))
        return inc

    def decide(
        self, st: StreamState, now: float | None, final: bool, changes: list[Change]
    ) -> None:
        """The held findings that waited ``hold_s`` at ``now`` (all, when ``final``): a warning
        when the run went on or is up; kept while a start-up has not moved, until its stall
        (the stall judgement, or the stall deadline of the stage a finding was held at) or, when
        ``final``, the run ended mid-start-up: then they page (its best reason); a bind failure
        whose port no server of the run bound since pages once it waited (a real conflict)."""
        keep: list[Held] = []
        stalled = False
        for h in st.checks.held:
            settled = final or outcome.due(h, now, self.hold_s)
            starting = outcome.never_got_up(st)
            if settled and outcome.unrecovered(h):  # its port not bound, its work not advanced
                keep.append(h)
                stalled = True
            elif settled and (outcome.went_on(st, h) or not starting):
                self.warn(st, h, changes)
            else:
                keep.append(h)
                stalled = stalled or outcome.overdue(h, now, self.deadlines)
        st.checks.held = keep
        if keep and (final or stalled):
            self.release(st, None, changes)

    def warn(self, st: StreamState, h: Held, changes: list[Change]) -> None:
        """Held ``h``'s run went on: its finding is a warning (never pages)."""
        f = h.finding
        f.role = "warning"
        went = f"the run went on (reached {st.stage})" if st.stage else "the run went on"
        if h.port is not None:
            went = f"a server of the run bound port {h.port} later"
        f.detail = f"not fatal by itself and {went}: a warning, not a page"
        self.attach(st, f, changes)

    def open(
        self,
        st: StreamState,
        f: Finding,
        severity: str,
        changes: list[Change],
        *,
        previous: Incident | None = None,
        pending: bool = False,
    ) -> Incident:
        """A new incident of this run (``pending``: a restart's, not announced until it is
        judged a new failure rather than the same one again)."""
        # (two warnings judged on one stats line are two incidents: the rule is in the id)
        key = f.line if severity == "critical" else f"{f.rule}|{f.line}"
        inc = Incident(
            id=Incident.make_id(st.key, st.run, f.seq, key),
            stream=st.key,
            run=st.run,
            primary=f,
            severity=severity,
            meta=dict(st.meta),
            opened_at=f.time,
            updated_at=f.time,
        )
        inc.note(f.line)
        if st.stage:
            inc.extra["reached"] = st.stage  # where the failing run had got to
        self.explain.refresh(st, inc)
        st.incidents.append(inc)
        if severity != "critical":
            changes.append(Change("opened", inc))
            return inc
        st.status = FAILED
        st.runs_failed += 1
        last = st.last_failure
        after = (
            link(previous)
            if previous is not None
            else link_of(last)
            if last and last.get("run", st.run) < st.run
            else None
        )
        if after is not None:
            inc.extra["after_restart_of"] = after
        if pending:
            inc.pending_restart = PendingRestart(previous.id if previous else None)
            st.pending = Pending(inc.id, f.time if f.time is not None else st.last_time)
            return inc
        self.restarts.announce(st, inc, changes)
        return inc

    def note(self, st: StreamState, text: str) -> None:
        """Lines after the first error are the incident's evidence."""
        inc = st.current()
        if inc is not None and len(inc.evidence) < MAX_NOTED:
            inc.note(text)
            # facts may arrive after the failure (e.g. nvidia-smi printed by a wrapper)
            if inc.tier == COMPAT_TIER and st.facts != inc.facts:
                self.explain.refresh(st, inc)
